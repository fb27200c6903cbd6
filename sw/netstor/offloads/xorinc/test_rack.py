"""XORInc end to end in the real-socket test bed (root): ``netstor-server``\\ s with their chunk
stores in server namespaces, the client (``python -m netstor.offloads.xorinc.schemes``) in a
client namespace, the golden-model switch between them. Repaired chunks and updated stripes
are compared byte for byte with ``galois`` (an independent field and linear algebra), and the
chunk transfers of each scheme are counted from the switch's own port counters."""
import json
import os
import sys
import tempfile
from pathlib import Path

import galois
import numpy as np
import pytest

from netstor.testbed.rack import Rack

needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="the test bed needs root (network namespaces)")

GF = galois.GF(2**8, irreducible_poly=0x11D)
XI_PORT = 7450


def ref_encode(data, r):
    """[I; C] @ data in galois, C[i][j] = 1 / ((k + i) + j) (ISA-L's cauchy1)."""
    k = data.shape[0]
    c = GF([[(k + i) ^ j for j in range(k)] for i in range(r)]) ** -1
    return np.asarray(np.vstack([GF.Identity(k), c]) @ GF(data), dtype=np.uint8)


def _chunks(hexes):
    return np.array([np.frombuffer(bytes.fromhex(h), np.uint8) for h in hexes])


def accept_local(rack):
    """Let the servers accept frames whose IPv4 source is their own address: NetUpdate's
    delta copy to the data node carries the source of the packet that completed the delta,
    the data node's own UPD_OLD, so Linux drops it as a martian unless ``accept_local``
    (the program rewrites the copies' destination, not their source)."""
    import subprocess
    from netstor.testbed.netns import ns_exec
    for h in rack.servers:
        for dev in ("all", h.ifname):
            subprocess.run(ns_exec(h.ns, ["sysctl", "-q", "-w",
                                          f"net.ipv4.conf.{dev}.accept_local=1"]), check=True)


def run_rack(k, r, *, config=None, repairs, updates, length=4096, seed=3, lost=None, code=0,
             switch_argv=None, prepare=None):
    """A rack of one client and k + r servers; the scenario's JSON result (and the switch's
    final stats in ``switch_final``). ``config``: ``f(rack)`` -> the switch's configuration
    (default: the rack's routes); ``switch_argv``: ``f(config path, stats path)`` -> the
    switch's command (default: ``netstor.testbed.switch`` with the default pipeline);
    ``prepare``: ``f(rack)`` before the servers start."""
    from netstor.testbed.experiment import start_servers
    with tempfile.TemporaryDirectory(prefix="netstor-xi-test-") as tmp, \
            Rack(1, k + r, workdir=tmp) as rack:
        stats = Path(tmp) / "switch.json"
        cfg = Path(tmp) / "switch-config.json"
        cfg.write_text(json.dumps(config(rack) if config else rack.config()))
        argv = switch_argv(cfg, stats) if switch_argv else [
            sys.executable, "-m", "netstor.testbed.switch", "--port0", "p0", "--port1", "p1",
            "--dataplane", "model", "--config", str(cfg), "--stats-json", str(stats)]
        rack.switch = rack.spawn("switch", argv, name="switch")
        rack.switch.wait_line(r"^netstor-switch ready", timeout=60)
        if prepare:
            prepare(rack)
        servers = start_servers(rack, tmp, "none", offload_ports={"xorinc": XI_PORT})
        nodes = ",".join(f"{h.ip}:{XI_PORT}" for h in rack.servers)

        def argv(i, host, out):
            return [sys.executable, "-m", "netstor.offloads.xorinc.schemes", "--nodes", nodes,
                    "--k", str(k), "--r", str(r), "--code", str(code), "--bind", host.ip,
                    "--length", str(length),
                    "--seed", str(seed), "--repairs", ",".join(repairs), "--updates",
                    ",".join(updates), "--switch-stats", str(stats), "--timeout", "5", "--out", str(out)] + \
                (["--lost", ",".join(map(str, lost))] if lost else [])

        res = rack.run_on_clients(argv, tmp, timeout=60, what="xorinc client")["c0"]
        for p in servers:
            p.stop()
        rack.stop_switch()
        res["switch_final"] = json.loads(stats.read_text())
    return res


def check_scenario(res, k, r, length):
    """Byte checks against galois; returns ``({phase: chunk transfers per op counted by the
    hosts}, {phase: ... counted by the switch's ports})``."""
    npk = -(-length // 1024)
    stripe0 = ref_encode(_chunks(res["stripes"]["0"]), r)
    for op in res["ops"]:
        assert "error" not in op, op
        if op["op"] == "read":
            assert bytes.fromhex(op["data"]) == stripe0[op["chunk"]].tobytes()
        elif op["op"].startswith("repair"):
            assert bytes.fromhex(op["data"]) == stripe0[op["lost"]].tobytes(), op["op"]
    updates = [op for op in res["ops"] if op["op"].startswith("update")]
    for op in updates:
        data = _chunks(res["stripes"][str(op["stripe"])])
        data[op["chunk"]] = np.frombuffer(bytes.fromhex(op["new"]), np.uint8)
        assert np.array_equal(_chunks(res["final"][str(op["stripe"])]), ref_encode(data, r)), \
            op["op"]
    hosts, switch = {}, {}
    for ph in res["phases"]:
        assert ph["errors"] == 0, ph
        hosts[ph["phase"]] = ph["host_transfers"]
        switch[ph["phase"]] = ph["data_transfers"]
    return hosts, switch


@needs_root
def test_baselines_end_to_end_through_the_model_switch():
    """Conventional repair, repair pipelining, conventional / client / T-Update updates on
    RS(3, 2), the switch forwarding by L3 only: byte-exact, and the transfers the paper counts
    (2k per repair; 2r + 2 per star/tree update, 2r + 4 when the client reads the old data)."""
    k, r, length = 3, 2, 4096
    res = run_rack(k, r, repairs=["conventional", "pipeline"],
                   updates=["conventional", "tupdate", "client"], length=length)
    hosts, switch = check_scenario(res, k, r, length)
    assert hosts == {"read": 2, "repair_conventional": 2 * k, "repair_pipeline": 2 * k,
                     "update_conventional": 2 * r + 2, "update_tupdate": 2 * r + 2,
                     "update_client": 2 * r + 4}, hosts
    # client <-> server traffic all crosses the switch: its ports count the same; server to
    # server hops (pipelining, the data node's deltas) stay on the servers' segment here
    for ph in ("read", "repair_conventional", "update_client"):
        assert switch[ph] == hosts[ph], (ph, switch, hosts)
    assert switch["repair_pipeline"] < hosts["repair_pipeline"]


def rack_xorinc_config(rack, k, r, code=1):
    """The rack's routes plus the ``xorinc:`` section: chunk j of code ``code`` on server j
    (wire port 1), the client's op ids 0..63."""
    from netstor.testbed.rack import port_mac
    cfg = rack.config()
    servers = rack.servers[:k + r]
    cfg["xorinc"] = {
        "smac": port_mac(1),
        "nodes": {h.name: {"ip": h.ip, "mac": h.mac, "port": 1} for h in servers},
        "codes": {str(code): {"k": k, "r": r, "nodes": [h.name for h in servers]}},
        "clients": {rack.clients[0].name: [0, 63]},
    }
    return cfg


def xorinc_switch_argv(cfg, stats):
    """The model switch with XORInc's program (``default_pipeline(extra=("xorinc",))``,
    copy-list groups) and the ``xorinc:`` section."""
    return [sys.executable, "-m", "netstor.offloads.xorinc.demo", "switch", "--config",
            str(cfg), "--stats-json", str(stats)]


@needs_root
def test_netrepair_netupdate_end_to_end_through_the_model_switch():
    """NetRepair and NetUpdate through XORInc's program in the model switch on RS(3, 2),
    4,000-byte chunks (a short last packet),
    beside conventional repair and update in the same rack: every lost position repaired
    byte-exact, the updated stripe equal to galois' encoding; k + 1 transfers per repair
    (2k conventional) and r + 3 per update (2r + 2 conventional) at the hosts, the same on
    the switch's ports (NetUpdate: plus the header-only UPD_NEW the switch passes on to the
    data node as its cue); the engine's own counters agree."""
    k, r, length = 3, 2, 4000           # 4 packets, the last one 928 bytes (14.5 beats)
    npk = 4
    res = run_rack(k, r, config=lambda rack: rack_xorinc_config(rack, k, r, code=1), code=1,
                   repairs=["net", "conventional"], updates=["net", "conventional"],
                   length=length, switch_argv=xorinc_switch_argv, prepare=accept_local)
    hosts, switch = check_scenario(res, k, r, length)
    assert hosts == {"read": 2, "repair_net": k + 1, "repair_conventional": 2 * k,
                     "update_net": r + 3, "update_conventional": 2 * r + 2}, hosts
    assert {p: switch[p] for p in ("read", "repair_net", "repair_conventional",
                                   "update_net")} == \
        {"read": 2, "repair_net": k + 1, "repair_conventional": 2 * k,
         "update_net": r + 3 + 1}, switch
    dp = res["switch_final"]["dataplane"]
    n = k + r
    # every lost position: k parts per packet position, one completes it, k - 1 absorbed;
    # the update: UPD_NEW absorbed (and passed on header-only), UPD_OLD completes
    assert dp["xi.engine.done"] == n * npk + npk, dp
    assert dp["xi.engine.absorbed"] == n * (k - 1) * npk + npk, dp
    assert dp["xi.repair.hit"] == n * k * npk and dp["xi.repair.miss"] == 0
    assert dp["xi.groups.hit"] == npk and dp["xi.delta.hit"] == (r + 1) * npk
    assert dp["xi.engine.dup"] == dp["xi.engine.timeouts"] == dp["xi.engine.misaligned"] == 0
