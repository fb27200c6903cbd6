"""NetLR in the test bed: the model switch with NetLR's program, its membership changed at run
time by the controller, and a linearizability run on a rack.

``python -m netstor.offloads.netlr.demo switch --config FILE [--stats-json FILE]
[--membership PATH] [--port0 p0 --port1 p1]`` runs the same model switch
(:func:`netstor.testbed.switch.run_model_switch`) on ``default_pipeline()``
with copy-list multicast groups: the configuration's routes and other sections as the switch
applies them (:func:`netstor.compiler.config_ops`), its ``netlr:`` section as the controller
computes it (:func:`.config.model_writes`, replies trusted from wire port 1, the servers'). With
``--membership PATH`` it serves a Unix socket where the controller sends a new ``netlr:``
section (one JSON object per connection: ``{"netlr": {...}}``, answered ``{"ok": true,
"writes": n}``): a membership change (``down``, ``joining``) applied to the running model
under its lock, in place (:func:`set_membership`; the test bed's stand-in for the
controller's table writes through a card's driver).

On a rack (:class:`netstor.testbed.rack.Rack`): :func:`rack_section` (one group of every server,
rid ``k + 1`` for server ``k``), :func:`start_switch`, :class:`Membership` (the controller:
fail, rejoin phase 1, catch-up, phase 2), :func:`start_clients` / :func:`collect` (the
workload, :mod:`.schemes`, on every client host), :func:`run_failover` (a run with a replica
killed mid-run and rejoined, checked), :func:`run_scheme` (one scheme's workload and check)
and :func:`demo_step` (``make demo``'s step: NetLR, CR and Hermes-like on the demo's
servers).

``python -m netstor.offloads.netlr.demo rack [--json FILE]`` (root): :func:`run_failover` on a
rack of 2 clients and 3 servers, the check's counts printed.
"""
from __future__ import annotations

import argparse
import json
import socket
import socketserver
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

from netstor.compiler import config_ops
from netstor.config import load_config
from netstor.driver.tables import TableWriter, apply_writes
from netstor.programs import default_pipeline
from netstor.testbed.dataplanes import ModelDataplane
from netstor.testbed.rack import Rack, port_mac
from netstor.testbed.stats import format_stats
from netstor.testbed.switch import _Stop, run_model_switch

from .codec import T_CATCHUP, T_CATCHUP_DONE, ip_int, pack_host, unpack_host
from .config import model_writes
from .header import NETLR_UDP_PORT, LrHeader
from netstor.lincheck import acked_writes_lost, check

__all__ = ["netlr_pipeline", "rack_section", "start_switch", "set_membership", "Membership",
           "catch_up", "start_clients", "collect", "final_reads", "verdict", "run_failover", "main",
           "SERVICE_IP", "REPLICA_PORT", "run_scheme", "demo_step", "replica_states"]

#: the address NetLR clients send to (any address routed through the switch would do)
SERVICE_IP = "10.77.1.250"
#: the wire port of the replicas (the rack's server segment): replies trusted from it
REPLICA_PORT = 1


def netlr_pipeline(n_ports=2):
    return default_pipeline(n_ports)


def rack_section(rack, servers=None, *, down=(), joining=()):
    """The rack's ``netlr:`` section: one replica group (0) of ``servers`` (default every
    server host; rid ``k + 1`` for ``rack.servers[k]``) on wire port 1."""
    servers = servers if servers is not None else rack.servers
    rids = {h.name: rack.servers.index(h) + 1 for h in servers}
    return {"smac": port_mac(REPLICA_PORT),
            "replicas": {rids[h.name]: {"ip": h.ip, "mac": h.mac, "port": h.segment,
                                        "udp": NETLR_UDP_PORT} for h in servers},
            "groups": {0: [rids[h.name] for h in servers]},
            "down": sorted(down), "joining": sorted(joining)}


# ---- the switch ----------------------------------------------------------------------------
class _SwitchState:
    def __init__(self, config):
        self.pipeline = netlr_pipeline(2)
        cfg = dict(config)
        section = cfg.pop("netlr", None)
        writes, regs = config_ops(cfg)
        self.writer = TableWriter(self.pipeline)          # the netlr tables' shadow
        writes = list(writes)
        if section is not None:
            writes += model_writes(self.pipeline, section, writer=self.writer,
                                   trusted_ports=[REPLICA_PORT])[1]
        self.dp = ModelDataplane(writes, regs, pipeline=self.pipeline, groups="list")

    def apply(self, section):
        """A new ``netlr:`` section (membership change) into the running model."""
        _, writes = model_writes(self.pipeline, section, writer=self.writer)
        with self.dp.lock:
            apply_writes(self.dp.model, writes)
        return len(writes)


def _serve_membership(state, path):
    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            try:
                msg = json.loads(self.rfile.readline())
                n = state.apply(msg["netlr"])
                out = {"ok": True, "writes": n}
            except Exception as e:          # answered: the controller reports it
                out = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            self.wfile.write((json.dumps(out) + "\n").encode())

    Path(path).unlink(missing_ok=True)
    srv = socketserver.ThreadingUnixStreamServer(str(path), Handler)
    threading.Thread(target=srv.serve_forever, name="netlr-membership", daemon=True).start()
    return srv


def set_membership(path, section, timeout=10.0):
    """Send a ``netlr:`` section to a running NetLR switch's membership socket; its answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(path))
        s.sendall((json.dumps({"netlr": section}) + "\n").encode())
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
    out = json.loads(buf)
    if not out.get("ok"):
        raise RuntimeError(f"netlr membership change refused: {out.get('error')}")
    return out


def start_switch(rack, config, workdir, *, stats_json, membership=None, name="switch-lr",
                 ready_timeout=60.0):
    """Start NetLR's model switch (:func:`main` ``switch``) in the rack's switch namespace
    with ``config`` (a dict, written to ``workdir``); ``membership``: its Unix socket path.
    Returns the process (also ``rack.switch``)."""
    path = Path(workdir) / f"{rack.prefix}{name}-config.json"
    path.write_text(json.dumps(config, indent=1))
    argv = [sys.executable, "-m", "netstor.offloads.netlr.demo", "switch", "--config",
            str(path), "--stats-json", str(stats_json)]
    if membership:
        argv += ["--membership", str(membership)]
    rack.switch = rack.spawn("switch", argv, name=name, log=Path(workdir) / f"{name}.log")
    rack.switch.wait_line(r"^netstor-switch ready", timeout=ready_timeout)
    return rack.switch


# ---- the controller ------------------------------------------------------------------------
def catch_up(joiner, donor, *, bind=("0.0.0.0", 0), timeout=30.0):
    """Rejoin phase 1's copy: ask ``joiner`` (its NetLR socket ``(ip, port)``) to copy every
    object from ``donor`` (:data:`.codec.T_CATCHUP`); the joiner's report (objects, applied,
    batches, ok, seconds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(bind)
        s.settimeout(timeout)
        h = LrHeader(op=T_CATCHUP, flags=0, group=0, slot=0, fp=0, seq=0, rid=0, nrep=0,
                     req=0xC0DE)
        s.sendto(pack_host(h, b"", struct.pack("!IH", ip_int(donor[0]), donor[1])), joiner)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            raw, _ = s.recvfrom(65535)
            rh, _, value, _ = unpack_host(raw)
            if rh.op == T_CATCHUP_DONE and rh.req == 0xC0DE:
                return json.loads(value)
    raise TimeoutError(f"no catch-up answer from {joiner}")


class Membership:
    """The controller's view of one group's membership on a running NetLR switch: every
    change is the whole ``netlr:`` section applied again (:func:`set_membership`); ``log``
    records ``(monotonic time, event)``."""

    def __init__(self, rack, path, servers=None):
        self.rack, self.path = rack, path
        self.servers = servers if servers is not None else list(rack.servers)
        self.down, self.joining = set(), set()
        self.log = []

    def rid(self, host):
        return self.rack.servers.index(host) + 1

    def section(self):
        return rack_section(self.rack, self.servers, down=self.down, joining=self.joining)

    def _push(self, event):
        set_membership(self.path, self.section())
        self.log.append((time.monotonic(), event))

    def fail(self, host):
        """A replica failed (its heartbeats stopped): out of every write and read set."""
        self.down.add(self.rid(host))
        self._push(f"down {host.name}")

    def rejoin(self, host, donor, *, settle=0.3, catch_up_from=None):
        """Rejoin ``host`` (its server running again): phase 1 (write copies, not counted or
        read), ``settle`` seconds (writes multicast before it reach the donor: FIFO paths),
        the catch-up from ``donor`` (a live replica host), phase 2 (live). The catch-up's
        report."""
        r = self.rid(host)
        self.down.discard(r)
        self.joining.add(r)
        self._push(f"joining {host.name}")
        time.sleep(settle)
        with_ns = catch_up_from or (lambda j, d: catch_up(j, d))
        rep = with_ns((host.ip, NETLR_UDP_PORT), (donor.ip, NETLR_UDP_PORT))
        self.log.append((time.monotonic(), f"caught up {host.name}: {rep}"))
        if not rep.get("ok"):
            raise RuntimeError(f"catch-up of {host.name} from {donor.name} failed: {rep}")
        self.joining.discard(r)
        self._push(f"live {host.name}")
        return rep


# ---- workload and checks -------------------------------------------------------------------
def start_clients(rack, workdir, *, clients_per_host=2, ops=100000, duration=6.0, keys=8,
                  write_ratio=0.3, timeout=0.3, tries=40, seed=1, tag="lr"):
    """The NetLR workload (:mod:`.schemes` command line) on every client host but the last
    (the controller's: catch-up, cold writes, final reads), started now; ``[(proc, out
    path)]``."""
    out = []
    for i, h in enumerate(rack.clients[:-1]):
        path = Path(workdir) / f"{tag}-{h.name}.json"
        argv = [sys.executable, "-m", "netstor.offloads.netlr.schemes", "--scheme", "netlr",
                "--service", f"{SERVICE_IP}:{NETLR_UDP_PORT}", "--bind", h.ip,
                "--clients", clients_per_host, "--client-base", i * clients_per_host,
                "--ops", ops, "--duration", duration, "--keys", keys,
                "--write-ratio", write_ratio, "--timeout", timeout, "--tries", tries,
                "--seed", seed + i, "--out", path]
        out.append((rack.spawn(h, [str(a) for a in argv], name=f"{tag}-{h.name}"), path))
    return out


def collect(rack, procs, timeout=120.0):
    """Wait for :func:`start_clients`' processes; their results."""
    res = []
    for p, path in procs:
        rc = p.wait(timeout=timeout)
        if p in rack.procs:
            rack.procs.remove(p)
        if rc != 0:
            raise RuntimeError(f"netlr client {p.name} failed ({rc}):\n{p.output()}")
        res.append(json.loads(Path(path).read_text()))
    return res


def _one_shot(rack, workdir, host, tag, flags, *, wait=True):
    path = Path(workdir) / f"{tag}.json"
    argv = [sys.executable, "-m", "netstor.offloads.netlr.schemes", "--scheme", "netlr",
            "--service", f"{SERVICE_IP}:{NETLR_UDP_PORT}", "--bind", host.ip, "--timeout",
            0.3, "--tries", 40, "--out", path, *flags]
    procs = [(rack.spawn(host, [str(a) for a in argv], name=tag), path)]
    return collect(rack, procs)[0] if wait else procs


def final_reads(rack, workdir, *, keys=8, client_id=99, tag="lr-final"):
    """One read of every key ``k0..`` from the last client host once the run is quiet."""
    return _one_shot(rack, workdir, rack.clients[-1], tag,
                     ["--keys", keys, "--client-base", client_id, "--only-final-reads"])


def replica_states(workdir, n):
    """``[{key16 hex: (seq, value)}]`` of the stopped servers' stores (``db0..``)."""
    import lmdb
    from .codec import ObjectStore
    out = []
    for k in range(n):
        env = lmdb.open(str(Path(workdir) / f"db{k}"), readonly=True, lock=False,
                        max_dbs=0, subdir=True)
        try:
            store = ObjectStore(env)
            recs, after = {}, None
            while True:
                objs, last = store.scan(after, 1 << 20)
                for key, raw in objs:
                    seq, _, value = store.record(key)
                    recs[key.hex()] = (seq, value.decode(errors="replace"))
                if last or not objs:
                    break
                after = objs[-1][0]
            out.append(recs)
        finally:
            env.close()
    return out


def verdict(results):
    """The histories of ``results`` (client results, final reads last) merged and checked:
    ``{"histories", "operations", "violations", "acked_writes", "acked_writes_lost", ...}``."""
    history = [op for r in results for op in r["history"]]
    rep = check(history)
    lost = acked_writes_lost(history)
    stats = [s for r in results for s in r.get("stats", [])]
    return {"histories": 1, "operations": rep["operations"],
            "pending_writes": rep["pending_writes"], "pending_reads": rep["pending_reads"],
            "keys": rep["partitions"], "violations": rep["violations"],
            "linearizable": rep["ok"], "bad_key": rep["key"],
            "acked_writes": lost["acked_writes"], "acked_writes_lost": lost["lost"],
            "reads": sum(1 for op in history if op["op"] == "read" and op["return"]),
            "writes": sum(1 for op in history if op["op"] == "write" and op["return"]),
            "retries": sum(s["retries"] for s in stats),
            "timeouts": sum(s["timeouts"] for s in stats),
            "errors": [e for r in results for e in r.get("errors", [])][:10],
            "check_seconds": rep["seconds"]}


def run_failover(rack, workdir, *, duration=6.0, kill_at=1.5, detect_s=0.3, rejoin_at=3.0,
                 keys=8, cold_keys=8, clients_per_host=2, write_ratio=0.3, catch_up=True,
                 victim=-1):
    """A NetLR run on a rack (at least 2 client hosts: the last is the controller's) whose
    servers (with NetLR sockets) are started here: clients for ``duration`` s over keys
    ``k0..`` (``keys``); at ``kill_at`` s the last server is killed (SIGKILL),
    ``detect_s`` later the controller takes it out, and one more client writes each of
    ``cold_keys`` other keys once (objects only the catch-up can bring to the failed
    replica); at ``rejoin_at`` s it is restarted (same database: stale), rejoins
    (phase 1, catch-up from the first server, phase 2); then the final reads of every key and
    the check. Returns the :func:`verdict` plus ``events``, the switch's counters,
    ``catch_up`` (the joiner's report) and ``replicas_agree`` (the stopped servers' stores
    hold the same seq and value for every key). ``catch_up=False`` skips the copy (phase 2
    right after phase 1): a negative control, the failed replica serves stale objects.
    ``victim``: the index of the server killed (default the last; 0 is the group's first
    live replica, where fresh slots steer their reads); the donor is the next one."""
    from netstor.testbed.experiment import start_servers
    workdir = Path(workdir)
    stats = workdir / "switch-lr.json"
    sock = workdir / "membership.sock"
    cfg = rack.config()
    cfg["netlr"] = rack_section(rack)
    start_switch(rack, cfg, workdir, stats_json=stats, membership=sock)
    procs = start_servers(rack, workdir, "none", offload_ports={"netlr": NETLR_UDP_PORT})
    ctl = Membership(rack, sock)
    vi = victim % len(rack.servers)
    victim, donor = rack.servers[vi], rack.servers[(vi + 1) % len(rack.servers)]
    t0 = time.monotonic()
    clients = start_clients(rack, workdir, clients_per_host=clients_per_host,
                            duration=duration, keys=keys, write_ratio=write_ratio)
    events = []
    try:
        time.sleep(max(0.0, t0 + kill_at - time.monotonic()))
        vproc = procs[vi]
        vproc.stop(sig=9)
        events.append((round(time.monotonic() - t0, 3), f"killed {victim.name}"))
        time.sleep(detect_s)
        ctl.fail(victim)
        # done before the rejoin starts: only the catch-up can bring these to the victim
        cold = [_one_shot(rack, workdir, rack.clients[-1], "lr-cold",
                          ["--keys", cold_keys, "--key-base", keys, "--client-base", 98,
                           "--write-each"])] if cold_keys else []
        rep = None
        if rejoin_at is not None:
            time.sleep(max(0.0, t0 + rejoin_at - time.monotonic()))
            procs[vi] = _restart_server(rack, workdir, victim, vi + 1)
            rep = ctl.rejoin(victim, donor, catch_up_from=(
                (lambda j, d: _catch_up_in_ns(rack, workdir, j, d)) if catch_up else
                (lambda j, d: {"ok": True, "objects": 0, "applied": 0, "skipped": True})))
            events.append((round(time.monotonic() - t0, 3), f"rejoined {victim.name}: "
                           f"{rep['objects']} objects copied, {rep['applied']} applied"))
        results = collect(rack, clients) + cold
        results.append(final_reads(rack, workdir, keys=keys + cold_keys))
    finally:
        for p in procs:
            p.stop()
        rack.stop_switch()
    out = verdict(results)
    out["catch_up"] = rep
    states = replica_states(workdir, len(rack.servers))
    out["replica_objects"] = [len(s) for s in states]
    out["replicas_agree"] = all(s == states[0] for s in states)
    out["events"] = events + [(round(t - t0, 3), e) for t, e in ctl.log]
    out["switch"] = {k: v for k, v in json.loads(stats.read_text())["dataplane"].items()
                     if k.startswith("nl.")}
    out["history"] = [op for r in results for op in r["history"]]
    return out


def _restart_server(rack, workdir, host, k):
    """``netstor-server`` again on ``host`` (the start_servers layout: database db<k-1>)."""
    db = Path(workdir) / f"db{k - 1}"
    argv = [sys.executable, "-m", "netstor.agent.server", "--bind", host.ip, "--port", 7430,
            "--netlr-port", NETLR_UDP_PORT, "--db", db, "--workers", 1, "--server-id", k,
            "--no-sync", "--service-model", "none", "--log-level", "INFO"]
    p = rack.spawn(host, [str(a) for a in argv])
    p.wait_line(r"^netstor-server \d+ listening on", timeout=30)
    return p


def _catch_up_in_ns(rack, workdir, joiner, donor):
    """:func:`catch_up` from the last client host's namespace (the controller's stand-in:
    the root namespace has no route into the rack)."""
    h = rack.clients[-1]
    path = Path(workdir) / "catchup.json"
    code = ("import json,sys; from netstor.offloads.netlr.demo import catch_up; "
            f"r = catch_up({tuple(joiner)!r}, {tuple(donor)!r}, bind=({h.ip!r}, 0)); "
            f"open({str(path)!r}, 'w').write(json.dumps(r))")
    p = rack.spawn(h, [sys.executable, "-c", code], name="catchup")
    rc = p.wait(timeout=60)
    if p in rack.procs:
        rack.procs.remove(p)
    if rc != 0:
        raise RuntimeError(f"catch-up failed ({rc}):\n{p.output()}")
    return json.loads(path.read_text())


def run_scheme(rack, workdir, scheme, *, duration=2.0, keys=8, key_prefix="k",
               clients_per_host=2, write_ratio=0.3, seed=1):
    """One scheme's workload (:mod:`.schemes` command line) for ``duration`` s on every
    client host but the last (all of one), then the final reads from the last; the
    :func:`verdict` plus ``ops_per_s`` and ``p50_ms`` (answered operations)."""
    hosts = rack.clients[:-1] or rack.clients[:1]
    nodes = ",".join(f"{h.ip}:{NETLR_UDP_PORT}" for h in rack.servers)
    procs = []
    for i, h in enumerate(hosts):
        path = Path(workdir) / f"{scheme}-{h.name}.json"
        argv = [sys.executable, "-m", "netstor.offloads.netlr.schemes", "--scheme", scheme,
                "--bind", h.ip, "--clients", clients_per_host, "--client-base",
                i * clients_per_host, "--ops", 1 << 20, "--duration", duration, "--keys", keys,
                "--key-prefix", key_prefix, "--write-ratio", write_ratio, "--timeout", 0.3,
                "--tries", 40, "--seed", seed + i, "--out", path]
        argv += (["--service", f"{SERVICE_IP}:{NETLR_UDP_PORT}"] if scheme == "netlr" else
                 ["--nodes", nodes])
        procs.append((rack.spawn(h, [str(a) for a in argv], name=f"{scheme}-{h.name}"), path))
    results = collect(rack, procs, timeout=duration + 90)
    flags = ["--keys", keys, "--key-prefix", key_prefix, "--client-base", 99,
             "--only-final-reads"]
    if scheme != "netlr":
        flags = ["--nodes", nodes] + flags
    path = Path(workdir) / f"{scheme}-final.json"
    argv = [sys.executable, "-m", "netstor.offloads.netlr.schemes", "--scheme", scheme,
            "--bind", rack.clients[-1].ip, "--timeout", 0.3, "--tries", 40, "--out", path,
            *flags]
    if scheme == "netlr":
        argv += ["--service", f"{SERVICE_IP}:{NETLR_UDP_PORT}"]
    results += collect(rack, [(rack.spawn(rack.clients[-1], [str(a) for a in argv],
                                          name=f"{scheme}-final"), path)])
    out = verdict(results)
    lat = sorted(op["return"] - op["call"] for r in results[:-1] for op in r["history"]
                 if op["return"] is not None)
    out["ops_per_s"] = round(len(lat) / duration, 1)
    out["p50_ms"] = round(lat[len(lat) // 2] / 1e6, 3) if lat else None
    return out


def demo_step(rack, workdir, *, rate=None, duration=2.0):
    """``make demo``'s NetLR step on the demo's servers (their NetLR sockets on the default
    port): the switch restarted with NetLR's program and one group of every server; NetLR,
    chain replication and Hermes-like each for ``min(duration, 2)`` s (closed-loop clients:
    ``rate`` is not used; keys of their own per scheme), every history checked. Throughput
    here is the Python model switch's, not a comparison of the schemes (that is
    ``make eval``)."""
    workdir = Path(workdir)
    stats = workdir / "netlr-switch.json"
    cfg = rack.config()
    cfg["netlr"] = rack_section(rack)
    start_switch(rack, cfg, workdir, stats_json=stats)
    d = min(duration, 2.0)
    rows = {}
    try:
        for scheme, prefix in (("netlr", "n"), ("cr", "c"), ("hermes", "h")):
            rows[scheme] = run_scheme(rack, workdir, scheme, duration=d, key_prefix=prefix)
    finally:
        rack.stop_switch()
    sw = json.loads(stats.read_text())
    for r in rows.values():
        r.pop("history", None)
    ops = sum(r["operations"] for r in rows.values())
    viol = sum(r["violations"] for r in rows.values())
    lost = sum(r["acked_writes_lost"] for r in rows.values())
    names = {"netlr": "NetLR", "cr": "CR", "hermes": "Hermes-like"}
    line = ("netlr (model switch, %d replicas, %.1f s per scheme): " % (len(rack.servers), d) +
            ", ".join(f"{names[s]} {r['ops_per_s']:.0f} ops/s p50 {r['p50_ms']} ms"
                      for s, r in rows.items()) +
            f"; histories: {ops} ops, {viol} violations, {lost} acked writes lost")
    return {"schemes": rows, "switch": {k: v for k, v in sw["dataplane"].items()
                                        if k.startswith("nl.")}}, line


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.offloads.netlr.demo",
                                 description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sw = sub.add_parser("switch", help="the model switch with NetLR's program")
    sw.add_argument("--port0", default="p0")
    sw.add_argument("--port1", default="p1")
    sw.add_argument("--config", required=True, help="table configuration (YAML/TOML/JSON)")
    sw.add_argument("--stats-json", default=None)
    sw.add_argument("--membership", default=None, metavar="PATH",
                    help="serve membership changes (netlr: sections) at this Unix socket")
    rk = sub.add_parser("rack", help="a failover run on a rack of 3 clients and 3 servers "
                                     "(root), checked")
    rk.add_argument("--duration", type=float, default=6.0)
    rk.add_argument("--json", default=None, metavar="FILE", help="write the result here")
    args = ap.parse_args(argv)
    if args.cmd == "rack":
        with tempfile.TemporaryDirectory(prefix="netstor-lr-") as tmp, \
                Rack(3, 3, workdir=tmp) as rack:
            out = run_failover(rack, tmp, duration=args.duration)
        hist = out.pop("history")
        print(json.dumps(out, indent=1), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(dict(out, history=hist), indent=1))
        return 0 if out["linearizable"] and out["acked_writes_lost"] == 0 else 1
    try:
        state = _SwitchState(load_config(args.config))
    except ValueError as e:
        print(f"netlr switch: error: {e}", file=sys.stderr)
        return 1
    srv = _serve_membership(state, args.membership) if args.membership else None
    stop = _Stop()
    stop.install()
    try:
        final = run_model_switch([args.port0, args.port1], [], stats_json=args.stats_json,
                                 stop=stop, dataplane=state.dp)
    finally:
        stop.restore()
        if srv:
            srv.shutdown()
    print(format_stats(final), flush=True)
    return 1 if final.get("error") else 0


if __name__ == "__main__":
    sys.exit(main())
