"""XORInc in the test bed: the model switch with XORInc's program.

``python -m netstor.offloads.xorinc.demo switch --config FILE [--stats-json FILE]
[--port0 p0 --port1 p1]`` runs the test bed's model switch on ``default_pipeline()`` with
copy-list multicast groups: the configuration's
routes and other sections as the switch applies them (:func:`netstor.compiler.config_ops`),
its ``xorinc:`` section as the controller computes it (:func:`.config.model_writes`:
coefficients, copy lists, the engine's timeout). It prints the switch's ready line and, on
SIGTERM, its final counters, like the generic switch. (No ``--control``: the control
window's schema is the default bitstream's.) With ``--notify-from IP`` it also runs the
controller's timeout notifier (:class:`TimeoutService`): the engine's timeout scan on the
switch's clock and a TIMEOUT to the requester of each op the data plane freed (sent as
a rack host at that address would: through wire port 1, routed by L3).

``python -m netstor.offloads.xorinc.demo rack [--k 3 --r 2 --length 4096 --json FILE]``
(root): every scheme once on a rack around that switch, a table of chunk transfers per
operation (hosts' and switch ports' counts) and the byte check.

On a rack (:class:`netstor.testbed.rack.Rack`): :func:`rack_section` (the ``xorinc:``
section: chunk j on server j), :func:`start_switch` (that switch in the rack's switch
namespace), :func:`accept_local`, :func:`run_client` (the client's scenario,
:func:`.schemes.run_scenario`, on one client host) and :func:`demo_step` (``make demo``'s
XORInc step on the demo's running servers).

``accept_local`` is set on the servers out of caution only: since de78ab1 the program
rewrites every delta copy's IPv4 source to the requester (``req_addr``), so a copy back to the
data node no longer carries the node's own address (which Linux drops as a martian).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from netstor.compiler import config_ops
from netstor.config import load_config
from netstor.programs import default_pipeline
from netstor.model import gf
from netstor.testbed.netns import ns_exec
from netstor.testbed.experiment import start_servers
from netstor.testbed.rack import Rack, port_mac
from netstor.testbed.stats import format_stats
from netstor.testbed.switch import _Stop, run_model_switch

from netstor.model.dataplane import ipv4_header_checksum
from netstor.testbed.dataplanes import ModelDataplane
from netstor.testbed.ports import PortSocket

from .codec import ip_int
from .config import model_writes, plan
from .header import XORINC_UDP_PORT
from .notify import TimeoutNotifier

__all__ = ["xorinc_pipeline", "switch_ops", "rack_section", "start_switch", "accept_local",
           "run_client", "check_scenario", "demo_step", "main"]


class TimeoutService:
    """The controller's timeout notifier beside the test bed's model switch.

    Every ``interval`` seconds, under the data plane's lock: the engine's timeout scan at the
    switch's clock (:meth:`netstor.elements.gf.GFAccumulate.scan`: the core's scanner in the
    model, which otherwise frees an op only when a later packet reaches the engine), then
    :class:`.notify.TimeoutNotifier`'s poll of ``xi.engine.expired``. Each TIMEOUT leaves as
    a controller that is a host of the rack would send it: a UDP frame (IPv4 source
    ``src_ip``, UDP source port 7450) entering the data plane on wire port ``in_port``
    (default 1, the servers' segment), routed by L3 to the requester (its MAC addresses and
    TTL rewritten), transmitted on the output port's interface. (A frame from a host port
    goes out as the host wrote it, without the L3 rewrite.)"""

    def __init__(self, dp, ifaces, xi_plan, src_ip, *, interval=0.02, in_port=1):
        if not 0 <= in_port < dp.P:
            raise ValueError(f"in_port {in_port}: a wire port 0..{dp.P - 1}")
        self.dp, self.in_port = dp, in_port
        self.engine = next(e for e in dp.pipeline.elements if e.qualname == "xi.engine")
        self.src = ip_int(src_ip)
        self.interval = interval
        self.socks = [PortSocket(i) for i in ifaces]
        self.notifier = TimeoutNotifier(self._read, xi_plan.op_requesters(), send=self._send,
                                        before_poll=self._scan)

    def _read(self, name, addr):
        with self.dp.lock:
            return self.dp.model.mem_read(name, addr)

    def _scan(self):
        with self.dp.lock:
            self.engine.scan(self.dp.model, time.monotonic_ns() >> 2)

    def _send(self, payload, to):
        udp_len = 8 + len(payload)
        iph = bytearray(b"\x45\x00" + (20 + udp_len).to_bytes(2, "big") + b"\0\0\0\0\x40\x11\0\0"
                        + self.src.to_bytes(4, "big") + ip_int(to[0]).to_bytes(4, "big"))
        iph[10:12] = ipv4_header_checksum(bytes(iph)).to_bytes(2, "big")
        udp = (XORINC_UDP_PORT.to_bytes(2, "big") + int(to[1]).to_bytes(2, "big")
               + udp_len.to_bytes(2, "big") + b"\0\0")
        frame = bytes(12) + b"\x08\x00" + bytes(iph) + udp + payload
        sent = 0
        for q, f in self.dp.process(frame, self.in_port):
            if q < self.dp.P:
                sent += self.socks[q].send(f)
        if not sent:
            raise OSError(f"TIMEOUT to {to[0]}:{to[1]}: the data plane sent it nowhere")

    def start(self):
        self.notifier.start(self.interval)
        return self

    def stop(self):
        self.notifier.stop()
        for s in self.socks:
            s.close()


def xorinc_pipeline(n_ports=2):
    return default_pipeline(n_ports)


def switch_ops(config, pipeline):
    """``(writes, regs)`` for a model of ``pipeline``: the configuration without its
    ``xorinc:`` section through the generic loader, then the section's writes."""
    cfg = dict(config)
    section = cfg.pop("xorinc", None)
    writes, regs = config_ops(cfg)
    writes = list(writes)
    if section is not None:
        writes += model_writes(pipeline, section)[1]
    return writes, list(regs)


def rack_section(rack, k, r, code=1, client=None, opids=(0, 63)):
    """The rack's ``xorinc:`` section: chunk ``j`` of code ``code`` on server ``j`` (wire
    port 1), op ids ``opids`` for ``client`` (default the first client host)."""
    servers = rack.servers[:k + r]
    if len(servers) < k + r:
        raise ValueError(f"RS({k}, {r}) needs {k + r} servers, the rack has "
                         f"{len(rack.servers)}")
    client = client or rack.clients[0]
    return {"smac": port_mac(1),
            "nodes": {h.name: {"ip": h.ip, "mac": h.mac, "port": h.segment} for h in servers},
            "codes": {str(code): {"k": k, "r": r, "nodes": [h.name for h in servers]}},
            "clients": {client.name: list(opids)}, "requesters": [f"{client.ip}/32"]}


def start_switch(rack, config, workdir, *, stats_json, name="switch-xi", xorinc=True,
                 ready_timeout=60.0, notify_from=None):
    """Start the rack's model switch with ``config`` (a dict, written to ``workdir``):
    XORInc's (:func:`main` ``switch``) or, ``xorinc=False``, the generic one (default
    pipeline); ``notify_from``: XORInc's with the timeout notifier (:class:`TimeoutService`,
    TIMEOUTs from that IPv4 address, entering on wire port 1). Returns the process (also
    ``rack.switch``)."""
    path = Path(workdir) / f"{rack.prefix}{name}-config.json"
    path.write_text(json.dumps(config, indent=1))
    if xorinc:
        argv = [sys.executable, "-m", "netstor.offloads.xorinc.demo", "switch", "--config",
                str(path), "--stats-json", str(stats_json)]
        if notify_from:
            argv += ["--notify-from", str(notify_from)]
    else:
        argv = [sys.executable, "-m", "netstor.testbed.switch", "--port0", "p0", "--port1",
                "p1", "--dataplane", "model", "--config", str(path), "--stats-json",
                str(stats_json)]
    rack.switch = rack.spawn("switch", argv, name=name, log=Path(workdir) / f"{name}.log")
    rack.switch.wait_line(r"^netstor-switch ready", timeout=ready_timeout)
    return rack.switch


def accept_local(rack):
    """Let the rack's servers accept frames with their own IPv4 source (module docstring)."""
    for h in rack.servers:
        for dev in ("all", h.ifname):
            subprocess.run(ns_exec(h.ns, ["sysctl", "-q", "-w",
                                          f"net.ipv4.conf.{dev}.accept_local=1"]),
                           check=True, capture_output=True)


def run_client(rack, workdir, k, r, *, code=1, repairs, updates, length=4096, seed=1,
               lost=None, stats_json=None, timeout=5.0, client=None, opids="0-63",
               name="xi-client"):
    """The client's scenario (:func:`.schemes.run_scenario`) on ``client`` (default the
    first client host) against the first ``k + r`` servers' XORInc sockets; its JSON."""
    client = client or rack.clients[0]
    out = Path(workdir) / f"{name}.json"
    nodes = ",".join(f"{h.ip}:{XORINC_UDP_PORT}" for h in rack.servers[:k + r])
    argv = [sys.executable, "-m", "netstor.offloads.xorinc.schemes", "--nodes", nodes,
            "--k", k, "--r", r, "--code", code, "--opids", opids, "--bind", client.ip,
            "--length", length, "--seed", seed, "--repairs", ",".join(repairs),
            "--updates", ",".join(updates), "--timeout", timeout, "--out", out]
    if stats_json:
        argv += ["--switch-stats", stats_json]
    if lost:
        argv += ["--lost", ",".join(map(str, lost))]
    p = rack.spawn(client, [str(a) for a in argv], name=name)
    rc = p.wait(timeout=120)
    if p in rack.procs:
        rack.procs.remove(p)
    if rc != 0:
        raise RuntimeError(f"xorinc client failed ({rc}):\n{p.output()}")
    return json.loads(out.read_text())


def _chunks(hexes):
    return np.array([np.frombuffer(bytes.fromhex(h), np.uint8) for h in hexes])


def check_scenario(res, r, encode=gf.encode):
    """Byte mismatches of a scenario's results against ``encode(data, r)`` (default the
    golden model's; the tests pass galois'): ``{op index: what}`` (empty: all exact)."""
    bad = {}
    stripe0 = encode(_chunks(res["stripes"]["0"]), r)
    for i, op in enumerate(res["ops"]):
        if "error" in op:
            bad[i] = op["error"]
        elif op["op"] == "read" and bytes.fromhex(op["data"]) != stripe0[op["chunk"]].tobytes():
            bad[i] = f"read {op['chunk']}"
        elif op["op"].startswith("repair") and \
                bytes.fromhex(op["data"]) != stripe0[op["lost"]].tobytes():
            bad[i] = f"{op['op']} {op['lost']}"
        elif op["op"].startswith("update"):
            data = _chunks(res["stripes"][str(op["stripe"])])
            data[op["chunk"]] = _chunks([op["new"]])[0]
            final = _chunks(res["final"][str(op["stripe"])])
            if not (final == encode(data, r)).all():
                bad[i] = f"{op['op']} stripe {op['stripe']}"
    return bad


def demo_step(rack, workdir, *, rate, duration):
    """``make demo``'s XORInc step on the demo's servers (each has an XORInc socket): the
    switch restarted with XORInc's program, RS(n - 1, 1) over the n servers (n >= 2; the
    only code one spare server allows), NetRepair of every chunk beside conventional repair,
    NetUpdate beside conventional update, chunk transfers per operation from the switch's
    port counters and the hosts' counters, every result checked byte for byte."""
    n = len(rack.servers)
    k, r = n - 1, 1
    workdir = Path(workdir)
    stats = workdir / "xorinc-switch.json"
    cfg = rack.config()
    cfg["xorinc"] = rack_section(rack, k, r)
    accept_local(rack)
    start_switch(rack, cfg, workdir, stats_json=stats)
    try:
        res = run_client(rack, workdir, k, r, repairs=["net", "conventional"],
                         updates=["net", "conventional"], length=4096, seed=7,
                         stats_json=stats)
    finally:
        rack.stop_switch()
    sw = json.loads(stats.read_text())
    phases = {p["phase"]: p for p in res["phases"]}
    bad = check_scenario(res, r)
    summary = {"code": f"RS({k}, {r})", "ops": len(res["ops"]), "byte_mismatches": len(bad),
               "errors": sum(p["errors"] for p in res["phases"]),
               "transfers_hosts": {p: v["host_transfers"] for p, v in phases.items()},
               "transfers_switch": {p: v.get("data_transfers") for p, v in phases.items()},
               "engine": {c: v for c, v in sw["dataplane"].items() if c.startswith("xi.")}}
    t = summary["transfers_hosts"]
    line = (f"xorinc {summary['code']}: chunk transfers per op NetRepair "
            f"{t.get('repair_net')} (conventional {t.get('repair_conventional')}), NetUpdate "
            f"{t.get('update_net')} (conventional {t.get('update_conventional')}); "
            f"{summary['ops']} ops, {summary['byte_mismatches']} byte mismatches, "
            f"{summary['errors']} errors")
    return {"summary": summary, "client": res, "switch": sw}, line


def run_rack(k=3, r=2, *, length=4096, seed=1, repairs=("net", "conventional", "pipeline"),
             updates=("net", "conventional", "tupdate", "client"), lost=None):
    """A rack of one client and k + r servers around XORInc's switch; every scheme once (the
    client's scenario); returns ``{"client": scenario result, "switch": final stats,
    "byte_mismatches": {...}}``."""
    with tempfile.TemporaryDirectory(prefix="netstor-xi-") as tmp, \
            Rack(1, k + r, workdir=tmp) as rack:
        stats = Path(tmp) / "switch.json"
        cfg = rack.config()
        cfg["xorinc"] = rack_section(rack, k, r)
        accept_local(rack)
        start_switch(rack, cfg, tmp, stats_json=stats)
        servers = start_servers(rack, tmp, "none", offload_ports={"xorinc": XORINC_UDP_PORT})
        try:
            res = run_client(rack, tmp, k, r, repairs=repairs, updates=updates,
                             length=length, seed=seed, lost=lost, stats_json=stats)
        finally:
            for p in servers:
                p.stop()
            rack.stop_switch()
        sw = json.loads(stats.read_text())
    return {"client": res, "switch": sw, "byte_mismatches": check_scenario(res, r)}


def format_rack(out):
    """A table of :func:`run_rack`'s result: per phase, chunk transfers per operation at
    the hosts and on the switch's ports, and the median time per operation."""
    res = out["client"]
    times = {}
    for op in res["ops"]:
        times.setdefault(op["op"], []).append(op.get("seconds", 0.0))
    lines = [f"RS({res['config']['k']}, {res['config']['r']}), "
             f"{res['config']['length']}-byte chunks: chunk transfers per operation",
             f"{'phase':22} {'ops':>4} {'hosts':>6} {'switch':>7} {'median ms':>10}"]
    for ph in res["phases"]:
        t = sorted(times.get(ph["phase"], [0.0]))
        lines.append(f"{ph['phase']:22} {ph['ops']:>4} {ph['host_transfers']:>6} "
                     f"{ph.get('data_transfers', '-'):>7} {1e3 * t[len(t) // 2]:>10.1f}")
    lines.append(f"byte mismatches: {len(out['byte_mismatches'])}; switch ports count only "
                 "what crosses the switch (server-to-server hops stay on the servers' "
                 "segment); NetUpdate's switch count includes the header-only UPD_NEW cue")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.offloads.xorinc.demo",
                                 description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sw = sub.add_parser("switch", help="the model switch with XORInc's program")
    sw.add_argument("--port0", default="p0")
    sw.add_argument("--port1", default="p1")
    sw.add_argument("--config", required=True, help="table configuration (YAML/TOML/JSON)")
    sw.add_argument("--stats-json", default=None)
    sw.add_argument("--notify-from", default=None, metavar="IP",
                    help="run the controller's timeout notifier (TIMEOUTs from this IPv4 "
                         "address, entering the data plane on wire port 1)")
    sw.add_argument("--notify-interval", type=float, default=0.02, metavar="S")
    rk = sub.add_parser("rack", help="every scheme once on a rack around that switch (root)")
    rk.add_argument("--k", type=int, default=3)
    rk.add_argument("--r", type=int, default=2)
    rk.add_argument("--length", type=int, default=4096, help="chunk bytes (<= 4096)")
    rk.add_argument("--seed", type=int, default=1)
    rk.add_argument("--json", default=None, metavar="FILE", help="write the result here")
    args = ap.parse_args(argv)
    if args.cmd == "rack":
        out = run_rack(args.k, args.r, length=args.length, seed=args.seed)
        print(format_rack(out), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1))
        return 1 if out["byte_mismatches"] else 0
    pipeline = xorinc_pipeline(2)
    try:
        cfg = load_config(args.config)
        writes, regs = switch_ops(cfg, pipeline)
        xi_plan = plan(cfg.get("xorinc") or {}, mcast_groups=pipeline.mcast_groups)
    except ValueError as e:
        print(f"xorinc switch: error: {e}", file=sys.stderr)
        return 1
    stop = _Stop()
    stop.install()
    dp = svc = None
    try:
        if args.notify_from:
            dp = ModelDataplane(writes, regs, pipeline=pipeline, groups="list")
            svc = TimeoutService(dp, [args.port0, args.port1], xi_plan, args.notify_from,
                                 interval=args.notify_interval).start()
        final = run_model_switch([args.port0, args.port1], writes, regs,
                                 stats_json=args.stats_json, stop=stop,
                                 pipeline=pipeline, groups="list", dataplane=dp)
    finally:
        if svc is not None:
            svc.stop()
            print(f"xorinc timeouts: {svc.notifier.timeouts} seen, {svc.notifier.sent} "
                  f"TIMEOUT sent, {svc.notifier.unaddressed} without a requester, "
                  f"{svc.notifier.send_errors} send errors", flush=True)
        stop.restore()
    print(format_stats(final), flush=True)
    return 1 if final.get("error") else 0


if __name__ == "__main__":
    sys.exit(main())
