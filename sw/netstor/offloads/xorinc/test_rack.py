"""XORInc end to end in the real-socket test bed (root): ``netstor-server``\\ s with their chunk
stores in server namespaces, the client (``python -m netstor.offloads.xorinc.schemes``) in a
client namespace, the golden-model switch between them (XORInc's program:
``python -m netstor.offloads.xorinc.demo switch``). Repaired chunks and updated stripes are
compared byte for byte with ``galois`` (an independent field and linear algebra), and the
chunk transfers of each scheme are counted by the hosts and by the switch's own port
counters."""
import json
import os
import tempfile
from pathlib import Path

import galois
import numpy as np
import pytest

from netstor.offloads.xorinc import demo
from netstor.testbed.rack import Rack

needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="the test bed needs root (network namespaces)")

GF = galois.GF(2**8, irreducible_poly=0x11D)


def ref_encode(data, r):
    """[I; C] @ data in galois, C[i][j] = 1 / ((k + i) + j) (ISA-L's cauchy1)."""
    k = data.shape[0]
    c = GF([[(k + i) ^ j for j in range(k)] for i in range(r)]) ** -1
    return np.asarray(np.vstack([GF.Identity(k), c]) @ GF(data), dtype=np.uint8)


def run_rack(k, r, *, xorinc, repairs, updates, length):
    """A rack of one client and k + r servers; the scenario's result, the switch's final
    stats (``switch_final``)."""
    from netstor.testbed.experiment import start_servers
    with tempfile.TemporaryDirectory(prefix="netstor-xi-test-") as tmp, \
            Rack(1, k + r, workdir=tmp) as rack:
        stats = Path(tmp) / "switch.json"
        cfg = rack.config()
        if xorinc:
            cfg["xorinc"] = demo.rack_section(rack, k, r, code=1)
            demo.accept_local(rack)
        demo.start_switch(rack, cfg, tmp, stats_json=stats, xorinc=xorinc)
        servers = start_servers(rack, tmp, "none",
                                offload_ports={"xorinc": demo.XORINC_UDP_PORT})
        res = demo.run_client(rack, tmp, k, r, code=1 if xorinc else 0, repairs=repairs,
                              updates=updates, length=length, seed=3, stats_json=stats)
        for p in servers:
            p.stop()
        rack.stop_switch()
        res["switch_final"] = json.loads(stats.read_text())
    return res


def transfers(res):
    """Byte checks against galois; ``({phase: chunk transfers per op counted by the hosts},
    {phase: ... counted by the switch's ports})``."""
    assert demo.check_scenario(res, res["config"]["r"], encode=ref_encode) == {}
    assert all(ph["errors"] == 0 for ph in res["phases"]), res["phases"]
    return ({ph["phase"]: ph["host_transfers"] for ph in res["phases"]},
            {ph["phase"]: ph["data_transfers"] for ph in res["phases"]})


def test_check_scenario_finds_a_wrong_byte():
    """The byte check the rack tests rely on fails on one flipped byte (no rack needed)."""
    rng = np.random.default_rng(0)
    k, r = 3, 2
    data = rng.integers(0, 256, (k, 100), dtype=np.uint8)
    stripe = ref_encode(data, r)
    new = rng.integers(0, 256, 100, dtype=np.uint8)
    upd = data.copy()
    upd[1] = new
    res = {"stripes": {"0": [d.tobytes().hex() for d in data],
                       "1": [d.tobytes().hex() for d in data]},
           "ops": [{"op": "repair_net", "lost": 4, "data": stripe[4].tobytes().hex()},
                   {"op": "update_net", "stripe": 1, "chunk": 1, "new": new.tobytes().hex()}],
           "final": {"1": [c.tobytes().hex() for c in ref_encode(upd, r)]}}
    assert demo.check_scenario(res, r, encode=ref_encode) == {}
    assert demo.check_scenario(res, r) == {}            # the model's encoding agrees
    wrong = bytearray(stripe[4].tobytes())
    wrong[57] ^= 1
    res["ops"][0]["data"] = wrong.hex()
    res["final"]["1"][4] = wrong.hex()
    assert demo.check_scenario(res, r, encode=ref_encode) == {0: "repair_net 4",
                                                              1: "update_net stripe 1"}


@needs_root
def test_baselines_end_to_end_through_the_model_switch():
    """Conventional repair, repair pipelining, conventional / client / T-Update updates on
    RS(3, 2), through XORInc's configured switch, whose program only routes the baselines'
    message types (the default bitstream carries XORInc, and an unconfigured program trusts
    nothing: the generic unconfigured switch drops every packet on XORInc's port): byte-exact,
    and the transfers the paper counts (2k per repair; 2r + 2 per star/tree update, 2r + 4
    when the client reads the old data)."""
    k, r = 3, 2
    res = run_rack(k, r, xorinc=True, repairs=["conventional", "pipeline"],
                   updates=["conventional", "tupdate", "client"], length=4096)
    hosts, switch = transfers(res)
    assert hosts == {"read": 2, "repair_conventional": 2 * k, "repair_pipeline": 2 * k,
                     "update_conventional": 2 * r + 2, "update_tupdate": 2 * r + 2,
                     "update_client": 2 * r + 4}, hosts
    # client <-> server traffic all crosses the switch: its ports count the same; server to
    # server hops (pipelining, the data node's deltas) stay on the servers' segment here
    for ph in ("read", "repair_conventional", "update_client"):
        assert switch[ph] == hosts[ph], (ph, switch, hosts)
    assert switch["repair_pipeline"] < hosts["repair_pipeline"]


@needs_root
def test_netrepair_netupdate_end_to_end_through_the_model_switch():
    """NetRepair and NetUpdate through XORInc's program in the model switch on RS(3, 2),
    4,000-byte chunks (a short last packet), beside conventional repair and update in the
    same rack: every lost position repaired byte-exact, the updated stripe equal to galois'
    encoding; k + 1 transfers per repair (2k conventional) and r + 3 per update (2r + 2
    conventional) at the hosts, the same on the switch's ports (NetUpdate: plus the
    header-only UPD_NEW the switch passes on to the data node as its cue); the engine's own
    counters agree."""
    k, r, length = 3, 2, 4000           # 4 packets, the last one 928 bytes (14.5 beats)
    npk = 4
    res = run_rack(k, r, xorinc=True, repairs=["net", "conventional"],
                   updates=["net", "conventional"], length=length)
    hosts, switch = transfers(res)
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


@needs_root
def test_demo_step_on_running_servers():
    """``make demo``'s step on servers started as the demo starts them (no XORInc flag: the
    default port): RS(2, 1) over 3 servers, byte-exact, k + 1 = 3 against 2k = 4."""
    import sys
    with tempfile.TemporaryDirectory(prefix="netstor-xi-demo-") as tmp, \
            Rack(1, 3, workdir=tmp) as rack:
        procs = []
        for i, h in enumerate(rack.servers):
            (Path(tmp) / f"db{i}").mkdir()
            procs.append(rack.spawn(h, [sys.executable, "-m", "netstor.agent.server", "--bind",
                                        h.ip, "--db", str(Path(tmp) / f"db{i}"), "--no-sync"]))
        for p in procs:
            p.wait_line(r"^netstor-server \d+ listening on", timeout=30)
        res, line = demo.demo_step(rack, tmp, rate=100, duration=1.0)
    s = res["summary"]
    assert (s["code"], s["byte_mismatches"], s["errors"]) == ("RS(2, 1)", 0, 0), s
    assert s["transfers_hosts"]["repair_net"] == s["transfers_switch"]["repair_net"] == 3
    assert s["transfers_hosts"]["repair_conventional"] == 4
    assert s["transfers_hosts"]["update_net"] == 4 and s["engine"]["xi.engine.done"] > 0
    assert "NetRepair 3.0 (conventional 4.0)" in line


@needs_root
def test_dead_helper_timeout_reaches_the_client_through_the_switch():
    """A helper that never sends its chunk, on the test bed: RS(3, 2) written with every node
    up, then helper 1's server stopped. The client's NetRepair of chunk 0 (helpers 0, 1, 2):
    the model switch's engine frees the op after its timeout (0.2 s at the switch's clock),
    the controller's notifier beside the switch (``demo switch --notify-from``) sends TIMEOUT
    from an address on the servers' segment, through the data plane (L3) to the requester
    named in the ``xorinc:`` section;
    the client gets it well within its own 10 s timer, retries once with the next op id,
    gets a second TIMEOUT and reports both op ids, retiring none. A later NetRepair of chunk
    1 (helpers 0, 2, 3, all up) on the freed op id 0 is byte-exact against galois."""
    import sys
    from netstor.testbed.experiment import start_servers
    k, r, length, port = 3, 2, 2048, 47000
    with tempfile.TemporaryDirectory(prefix="netstor-xi-to-") as tmp, \
            Rack(1, k + r, workdir=tmp) as rack:
        client = rack.clients[0]
        cfg = rack.config()
        sec = demo.rack_section(rack, k, r, code=1)
        sec["clients"] = {client.name: {"ops": [0, 3], "requester": f"{client.ip}:{port}"}}
        sec["timeout"] = int(0.2 * 250e6)
        cfg["xorinc"] = sec
        demo.accept_local(rack)
        demo.start_switch(rack, cfg, tmp, stats_json=Path(tmp) / "switch.json",
                          notify_from=rack.servers[0].gateway)
        servers = start_servers(rack, tmp, "none",
                                offload_ports={"xorinc": demo.XORINC_UDP_PORT})
        res = demo.run_client(rack, tmp, k, r, code=1, repairs=[], updates=[],
                              length=length, seed=4, opids="0-3", name="xi-write")
        assert not [op for op in res["ops"] if "error" in op]
        stripe = ref_encode(np.array([np.frombuffer(bytes.fromhex(h), np.uint8)
                                      for h in res["stripes"]["0"]]), r)
        servers[1].stop()
        nodes = ",".join(f"{h.ip}:{demo.XORINC_UDP_PORT}" for h in rack.servers[:k + r])

        def one(lost, name):
            out = Path(tmp) / f"{name}.json"
            argv = [sys.executable, "-m", "netstor.offloads.xorinc.schemes", "--nodes", nodes,
                    "--k", k, "--r", r, "--code", 1, "--opids", "0-1", "--bind", client.ip,
                    "--port", port, "--timeout", 10, "--one", f"repair_net:0:{lost}",
                    "--out", out]
            p = rack.spawn(client, [str(a) for a in argv], name=name)
            assert p.wait(timeout=60) == 0, p.output()
            rack.procs.remove(p)
            return json.loads(out.read_text())

        got = one(0, "xi-dead")
        assert got["switch_timeout"] and got["switch_timeouts"] == [0, 1], got
        assert "timed out op ids [0, 1] (2 attempts" in got["error"], got
        assert got["seconds"] < 5.0 and got["retired"] == [] and got["opids"] == [0, 1], got
        got = one(1, "xi-alive")
        assert got.get("data") == stripe[1].tobytes().hex() and got["switch_timeouts"] == []
        log = rack.stop_switch()
    assert "2 seen, 2 TIMEOUT sent, 0 without a requester, 0 send errors" in log, log[-2000:]
