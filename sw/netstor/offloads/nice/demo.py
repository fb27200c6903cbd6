"""NICE in the test bed: the model switch with NICE's program, its tables changed at run time
by the metadata service (:mod:`.metadata`), the storage nodes told their view, and a
failure run checked for linearizability.

``python -m netstor.offloads.nice.demo switch --config FILE [--membership PATH]`` runs the model switch
(:func:`netstor.testbed.switch.run_model_switch`) on ``default_pipeline()``
with copy-list groups: the configuration's routes as the switch applies them, its ``nice:``
section as :func:`.config.model_writes` computes it. ``--membership PATH``: a Unix socket
where the controller sends a new ``nice:`` section (one JSON object per connection,
``{"nice": {...}}``); only what changed is written (:func:`.config.diff` against the last
plan), under the model's lock: the test bed's stand-in for table writes through a card's
driver.

``python -m netstor.offloads.nice.demo hand --sock PATH --bind IP``: the controller's hand in
a client host's namespace (the root namespace has no route into the rack): it relays
requests from the Unix socket ``PATH`` to storage nodes over UDP (configuration, catch-up)
and collects the nodes' time-out reports (:data:`.codec.T_REPORT`) sent to its UDP port.

On a rack (:class:`netstor.testbed.rack.Rack`, server ``k`` = node ``k``):
:func:`rack_section`, :class:`Controller` (the metadata service: :class:`.metadata.Metadata`
driven by the wall clock and the nodes' reports, every change pushed to the switch and to
the nodes), :func:`run_failover` (clients, a node killed, hidden, brought back through the
two-phase rejoin; histories checked), :func:`run_load` (``netstor-load --scheme nice`` from a
client host, every request listed, the nodes' stores read after).
"""
from __future__ import annotations

import argparse
import json
import socket
import socketserver
import sys
import threading
import time
from pathlib import Path

from netstor.compiler import config_ops
from netstor.config import load_config
from netstor.driver.tables import TableWriter, apply_writes
from netstor.lincheck import acked_writes_lost, check
from netstor.programs import default_pipeline
from netstor.testbed.dataplanes import ModelDataplane
from netstor.testbed.rack import port_mac
from netstor.testbed.stats import format_stats
from netstor.testbed.switch import _Stop, run_model_switch

from .codec import (T_CATCHUP, T_CATCHUP_DONE, T_CONFIG, T_CONFIG_ACK, T_PROMOTE,
                    T_PROMOTE_DONE, T_REPORT, head, ip_text, pack, unpack)
from .config import model_writes, section_of
from .header import NICE_UDP_PORT, default_partition
from .metadata import Metadata

__all__ = ["nice_pipeline", "rack_section", "node_config", "set_section", "Hand", "hand_call",
           "Controller", "run_failover", "run_load", "demo_step", "verdict", "main",
           "HAND_PORT", "replica_records", "replica_states"]

HAND_PORT = 7479          #: the hand's UDP port (the nodes' metadata address)
SERVER_PORT = 1           #: the servers' wire port


def nice_pipeline(n_ports=2):
    return default_pipeline(n_ports)


def rack_section(rack, partitions, *, clients=None):
    """The rack's ``nice:`` section: node ``k`` = ``rack.servers[k]`` on wire port 1,
    ``partitions`` ``{p: [node, ...]}`` (primary first), ``clients``: client prefixes cut
    into divisions (get load balancing)."""
    sec = {"smac": port_mac(SERVER_PORT),
           "nodes": {k: {"ip": h.ip, "mac": h.mac, "port": h.segment, "udp": NICE_UDP_PORT}
                     for k, h in enumerate(rack.servers)},
           "partitions": {p: list(ms) for p, ms in partitions.items()}}
    if clients:
        sec["clients"] = list(clients)
    return sec


def node_config(state, node, metadata=None):
    """A storage node's view (:mod:`.codec`'s ``T_CONFIG``) of a :class:`.config.RingState`."""
    ring, mring = state.unicast, state.multicast
    parts = {}
    for p in sorted(state.partitions):
        prim = state.primary(p)
        if prim is None:
            continue
        hos = [h for h in state.handoff.get(p, {}).values() if state.live(h)]
        parts[p] = {"primary": prim, "replicas": state.get_set(p),
                    "put_set": state.put_set(p), "handoff": hos[0] if hos else None}
    n = ring.n_subgroups
    P = len(state.partitions)
    return {"node": node, "n_partitions": P,
            "nodes": {k: [ip_text(a["ip"]), a["udp"]] for k, a in state.nodes.items()},
            "ring": {"base": ip_text(ring.base), "prefix": ring.prefix, "sub": ring.sub},
            "mring": {"base": ip_text(mring.base), "prefix": mring.prefix, "sub": mring.sub},
            "subgroups": [state.subgroups.get(s, default_partition(s, n, P))
                          for s in range(n)],
            "partitions": parts, "fanout": False,
            "metadata": list(metadata) if metadata else None}


# ---- the switch ----------------------------------------------------------------------------
class _SwitchState:
    def __init__(self, config):
        self.pipeline = nice_pipeline(2)
        cfg = dict(config)
        section = cfg.pop("nice", None)
        writes, regs = config_ops(cfg)
        self.writer = TableWriter(self.pipeline)
        writes = list(writes)
        self.plan = None
        if section is not None:
            self.plan, w = model_writes(self.pipeline, section, writer=self.writer)
            writes += w
        self.dp = ModelDataplane(writes, regs, pipeline=self.pipeline, groups="list")

    def apply(self, section):
        plan, writes = model_writes(self.pipeline, section, writer=self.writer, old=self.plan)
        with self.dp.lock:
            apply_writes(self.dp.model, writes)
        self.plan = plan
        return len(writes)


def _serve_unix(path, handle):
    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            try:
                out = handle(json.loads(self.rfile.readline()))
            except Exception as e:          # answered: the caller reports it
                out = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            self.wfile.write((json.dumps(out) + "\n").encode())

    Path(path).unlink(missing_ok=True)
    srv = socketserver.ThreadingUnixStreamServer(str(path), Handler)
    threading.Thread(target=srv.serve_forever, name="nice-unix", daemon=True).start()
    return srv


def _unix_call(path, msg, timeout=30.0):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(path))
        s.sendall((json.dumps(msg) + "\n").encode())
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    out = json.loads(buf)
    if not out.get("ok"):
        raise RuntimeError(f"nice: {msg.get('cmd', 'section')}: {out.get('error')}")
    return out


def set_section(path, section):
    """A new ``nice:`` section to a running NICE switch's membership socket."""
    return _unix_call(path, {"nice": section})


# ---- the controller's hand -----------------------------------------------------------------
class Hand:
    """UDP requests to nodes from a client host, and the nodes' reports."""

    def __init__(self, bind):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((bind, HAND_PORT))
        self.sock.settimeout(0.2)
        self.reports = []
        self.waiting = {}
        self.lock = threading.Lock()
        self.req = 0
        threading.Thread(target=self._rx, daemon=True).start()

    def _rx(self):
        while True:
            try:
                raw, src = self.sock.recvfrom(65535)
                h, _, rest = unpack(raw)
            except (socket.timeout, ValueError):
                continue
            except OSError:
                return
            if h.op == T_REPORT:
                with self.lock:
                    self.reports.append([time.monotonic(), json.loads(rest)])
                continue
            with self.lock:
                w = self.waiting.get(h.req)
            if w is not None:
                w[1].append((h, rest))
                w[0].set()

    def handle(self, msg):
        if msg["cmd"] == "reports":
            with self.lock:
                out, self.reports = self.reports, []
            return {"ok": True, "reports": out}
        with self.lock:
            self.req += 1
            req = self.req
            ev, got = threading.Event(), []
            self.waiting[req] = (ev, got)
        try:
            to = (msg["to"][0], int(msg["to"][1]))
            payload = pack(head(int(msg["op"]), req=req), b"", msg["payload"].encode())
            end = time.monotonic() + float(msg.get("timeout", 10.0))
            while time.monotonic() < end:
                self.sock.sendto(payload, to)
                if ev.wait(float(msg.get("retry", 0.3))) and got:
                    h, rest = got[0]
                    return {"ok": True, "op": h.op, "data": rest.decode(errors="replace")}
            raise TimeoutError(f"no answer from {to}")
        finally:
            with self.lock:
                self.waiting.pop(req, None)


def hand_call(path, msg, timeout=60.0):
    return _unix_call(path, msg, timeout)


# ---- the metadata service on a rack --------------------------------------------------------
class Controller:
    """The metadata service of a rack: :class:`.metadata.Metadata` on the wall clock; every
    change pushed to the switch (the whole section: the switch writes the difference) and
    then to every node not down (``T_CONFIG``); the nodes' time-out reports polled from the
    hand and turned into :meth:`.metadata.Metadata.report_timeout`."""

    def __init__(self, rack, section, switch_sock, hand_sock, hand_addr):
        self.rack, self.switch_sock, self.hand_sock = rack, switch_sock, hand_sock
        self.hand_addr = hand_addr
        self.md = Metadata(section, clock=time.monotonic)
        self.log = []
        self.reports = []
        self.promotions = []
        self._seen = 0                 # metadata events handled

    def node_addr(self, n):
        a = self.md.state.nodes[n]
        return [ip_text(a["ip"]), a["udp"]]

    def push(self, event, nodes=None):
        set_section(self.switch_sock, section_of(self.md.state))
        st = self.md.state
        for n in sorted(nodes if nodes is not None else st.nodes):
            if n in st.down:
                continue
            cfg = json.dumps(node_config(st, n, self.hand_addr))
            out = hand_call(self.hand_sock, {"cmd": "send", "to": self.node_addr(n),
                                             "op": T_CONFIG, "payload": cfg})
            if out["op"] != T_CONFIG_ACK:
                raise RuntimeError(f"node {n}: config answered op {out['op']}")
        self.log.append((time.monotonic(), event))

    def poll(self):
        """The reports since the last poll; a failure they declare is pushed. Returns the
        failed node or None."""
        failed = None
        for t, r in hand_call(self.hand_sock, {"cmd": "reports"})["reports"]:
            self.reports.append((t, r))
            before = set(self.md.state.down)
            self.md.report_timeout(int(r["node"]), int(r["suspect"]))
            new = set(self.md.state.down) - before
            if new:
                failed = min(new)
                self.push(f"down {failed} (reports)")
                self.promote()
        return failed

    def promote(self):
        """The ``promote`` events since the last call: the new primary (its view already
        names it) resolves the partition's locked puts (``T_PROMOTE``)."""
        evs, self._seen = self.md.events[self._seen:], len(self.md.events)
        for ev in evs:
            if ev[0] != "promote":
                continue
            _, p, new, old = ev
            out = hand_call(self.hand_sock, {"cmd": "send", "to": self.node_addr(new),
                                             "op": T_PROMOTE,
                                             "payload": json.dumps({"partition": p}),
                                             "retry": 10.0, "timeout": 30.0}, 60.0)
            if out["op"] != T_PROMOTE_DONE:
                raise RuntimeError(f"promotion answered op {out['op']}")
            res = json.loads(out["data"])
            self.promotions.append(res)
            self.log.append((time.monotonic(), f"promoted {new}: {res}"))
            if not res.get("ok"):
                raise RuntimeError(f"promotion of node {new} failed: {res}")

    def rejoin(self, node, *, settle=0.3, catch_up=True):
        fetch = self.md.rejoin(node)
        self.push(f"joining {node}")
        time.sleep(settle)
        rep = {"skipped": True}
        if catch_up:
            for p, h in sorted(fetch.items()):
                q = {"donor": self.node_addr(h), "db": "handoff", "partitions": [p]}
                out = hand_call(self.hand_sock, {"cmd": "send", "to": self.node_addr(node),
                                                 "op": T_CATCHUP, "payload": json.dumps(q),
                                                 "retry": 30.0, "timeout": 60.0}, 90.0)
                if out["op"] != T_CATCHUP_DONE:
                    raise RuntimeError(f"catch-up answered op {out['op']}")
                rep = json.loads(out["data"])
                if not rep.get("ok"):
                    raise RuntimeError(f"catch-up of node {node} failed: {rep}")
        self.log.append((time.monotonic(), f"caught up {node}: {rep}"))
        self.md.caught_up(node)
        self.push(f"live {node}")
        return rep


# ---- workload and the failure run ----------------------------------------------------------
def _clients(rack, workdir, hosts, flags, tag, *, wait=False, scheme="nice"):
    procs = []
    for i, h in enumerate(hosts):
        path = Path(workdir) / f"{tag}-{h.name}.json"
        argv = [sys.executable, "-m", "netstor.offloads.nice.schemes", "--scheme", scheme,
                "--bind", h.ip, "--out", path, *flags(i)]
        procs.append((rack.spawn(h, [str(a) for a in argv], name=f"{tag}-{h.name}"), path))
    return _collect(rack, procs) if wait else procs


def _collect(rack, procs, timeout=120.0):
    res = []
    for p, path in procs:
        rc = p.wait(timeout=timeout)
        if p in rack.procs:
            rack.procs.remove(p)
        if rc != 0:
            raise RuntimeError(f"nice client {p.name} failed ({rc}):\n{p.output()}")
        res.append(json.loads(Path(path).read_text()))
    return res


def verdict(results, timeout=60.0):
    """The merged histories checked (porcupine, ``timeout`` s per key: a history with a
    violation can take the search long) and the acknowledged puts lost."""
    history = [op for r in results for op in r["history"]]
    rep = check(history, timeout=timeout)
    lost = acked_writes_lost(history)
    stats = [s for r in results for s in r.get("stats", [])]
    spans = [e - s for r in results for s, e in r.get("unavailable", [])]
    return {"operations": rep["operations"], "violations": rep["violations"],
            "linearizable": rep["ok"], "bad_key": rep["key"], "keys": rep["partitions"],
            "pending_writes": rep["pending_writes"],
            "acked_puts": lost["acked_writes"], "acked_puts_lost": lost["lost"],
            "gets": sum(1 for op in history if op["op"] == "read" and op["return"]),
            "puts": sum(1 for op in history if op["op"] == "write" and op["return"]),
            "retries": sum(s["retries"] for s in stats),
            "aborts": sum(s["aborts"] for s in stats),
            "nacks": sum(s["nacks"] for s in stats),
            "put_unavailable_s": round(max(spans), 3) if spans else 0.0,
            "errors": [e for r in results for e in r.get("errors", [])][:10],
            "check_seconds": rep["seconds"]}


def start_switch(rack, config, workdir, *, stats_json, membership, name="switch-nice"):
    path = Path(workdir) / f"{rack.prefix}{name}-config.json"
    path.write_text(json.dumps(config, indent=1))
    argv = [sys.executable, "-m", "netstor.offloads.nice.demo", "switch", "--config",
            str(path), "--stats-json", str(stats_json), "--membership", str(membership)]
    rack.switch = rack.spawn("switch", argv, name=name, log=Path(workdir) / f"{name}.log")
    rack.switch.wait_line(r"^netstor-switch ready", timeout=60)
    return rack.switch


def _start_node(rack, workdir, k):
    from netstor.testbed.experiment import STORAGE_PORT
    h = rack.servers[k]
    db = Path(workdir) / f"db{k}"
    db.mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "netstor.agent.server", "--bind", h.ip, "--port",
            STORAGE_PORT, "--nice-port", NICE_UDP_PORT, "--db", db, "--workers", 1,
            "--server-id", k + 1, "--no-sync", "--service-model", "none",
            "--log-level", "WARNING"]
    return rack.spawn(h, [str(a) for a in argv], name=f"node{k}")


def _wait_nodes(procs):
    for p in procs:
        p.wait_line(r"^netstor-server \d+ listening on", timeout=30)


def replica_records(workdir, n):
    """``[{key (16 bytes): (ts, value bytes)}]`` of the stopped nodes' main stores."""
    import lmdb
    from .codec import Record
    out = []
    for k in range(n):
        env = lmdb.open(str(Path(workdir) / f"db{k}"), readonly=True, lock=False,
                        subdir=True)
        try:
            recs = {}
            with env.begin() as txn:
                for key, raw in txn.cursor():
                    if key.startswith(b"no"):
                        r = Record.unpack(raw)
                        recs[bytes(key[2:])] = (r.ts, r.value)
            out.append(recs)
        finally:
            env.close()
    return out


def replica_states(workdir, n):
    """``[{key hex: (ts, value text)}]`` of the stopped nodes' main stores."""
    return [{k.hex(): (ts, v.rstrip(b".").decode()) for k, (ts, v) in recs.items()}
            for recs in replica_records(workdir, n)]


def run_failover(rack, workdir, *, duration=5.0, kill_at=1.5, rejoin_at=3.2, keys=6,
                 cold_keys=4, clients_per_host=2, write_ratio=0.3, size=16, victim=1,
                 catch_up=True, check_timeout=60.0):
    """A NICE run on a rack of >= 3 client hosts and 4 servers: partition 0 = nodes 0, 1, 2
    (node 3 the spare, the handoff), divisions over the client hosts (``c0`` gets from
    node 1, ``c1`` from node 2, others from the primary). Clients on every client host but
    the last for ``duration`` s; at ``kill_at`` the ``victim`` node is killed (SIGKILL);
    the primary's aborted puts report it, two reports make the metadata service hide it
    (handoff node 3 in both rings); one more client puts ``cold_keys`` keys only the
    catch-up can bring to it; at ``rejoin_at`` it restarts on its stale database and
    rejoins (phase 1, catch-up from the handoff's store, phase 2); then every key is read
    from ``c0`` (whose gets go to node 1) and the histories are checked.
    ``catch_up=False``: phase 2 right after phase 1 (a negative control)."""
    workdir = Path(workdir)
    stats = workdir / "switch-nice.json"
    msock, hsock = workdir / "membership.sock", workdir / "hand.sock"
    cl = rack.clients
    lo = min(int(h.ip.split(".")[-1]) for h in cl) & ~3
    section = rack_section(rack, {0: [0, 1, 2]}, clients=[f"10.77.0.{lo}/30"])
    cfg = rack.config()
    cfg["nice"] = section
    start_switch(rack, cfg, workdir, stats_json=stats, membership=msock)
    ctl_host = cl[-1]
    hand = rack.spawn(ctl_host, [sys.executable, "-m", "netstor.offloads.nice.demo", "hand",
                                 "--sock", str(hsock), "--bind", ctl_host.ip], name="hand")
    hand.wait_line(r"^nice hand ready", timeout=30)
    procs = [_start_node(rack, workdir, k) for k in range(len(rack.servers))]
    _wait_nodes(procs)
    ctl = Controller(rack, section, msock, hsock, [ctl_host.ip, HAND_PORT])
    ctl.push("start")
    t0 = time.monotonic()
    work = _clients(rack, workdir, cl[:-1], lambda i: [
        "--clients", clients_per_host, "--client-base", i * clients_per_host,
        "--duration", duration, "--keys", keys, "--write-ratio", write_ratio,
        "--size", size, "--timeout", 0.5, "--tries", 40, "--seed", i + 1], "nice")
    events, rep, detected = [], None, None
    try:
        time.sleep(max(0.0, t0 + kill_at - time.monotonic()))
        procs[victim].stop(sig=9)
        t_kill = time.monotonic()
        events.append((round(t_kill - t0, 3), f"killed node {victim}"))
        while detected is None and time.monotonic() < t_kill + 10:
            time.sleep(0.05)
            detected = ctl.poll()
        if detected is None:
            raise RuntimeError(f"node {victim} not reported within 10 s")
        events.append((round(time.monotonic() - t0, 3), f"hidden node {detected}"))
        cold = _clients(rack, workdir, [ctl_host], lambda i: [
            "--write-each", "--keys", cold_keys, "--key-base", keys, "--client-base", 98,
            "--size", size, "--timeout", 0.5, "--tries", 40], "nice-cold", wait=True)
        time.sleep(max(0.0, t0 + rejoin_at - time.monotonic()))
        procs[victim] = _start_node(rack, workdir, victim)
        _wait_nodes([procs[victim]])
        rep = ctl.rejoin(victim, catch_up=catch_up)
        events.append((round(time.monotonic() - t0, 3), f"rejoined node {victim}"))
        results = _collect(rack, work) + cold
        results += _clients(rack, workdir, [cl[0]], lambda i: [
            "--only-final-reads", "--keys", keys + cold_keys, "--client-base", 99,
            "--timeout", 0.5, "--tries", 40], "nice-final", wait=True)
    finally:
        for p in procs:
            p.stop()
        hand.stop()
        rack.stop_switch()
    out = verdict(results, check_timeout)
    out["catch_up"] = rep
    out["promotions"] = ctl.promotions
    out["detect_s"] = round(ctl.log[1][0] - t_kill, 3) if len(ctl.log) > 1 else None
    states = replica_states(workdir, len(rack.servers))
    out["replica_objects"] = [len(s) for s in states]
    out["replicas_agree"] = states[0] == states[1] == states[2]
    out["events"] = sorted(events + [(round(t - t0, 3), e) for t, e in ctl.log])
    out["metadata_events"] = [list(map(str, e)) for e in ctl.md.events]
    sw = json.loads(stats.read_text())["dataplane"]
    out["switch"] = {k: v for k, v in sw.items() if k.startswith("nice.")}
    out["history"] = [op for r in results for op in r["history"]]
    return out


def run_load(rack, workdir, *, rate=200.0, duration=2.0, write_ratio=0.3, value_size=64,
             keys=20, zipf=0.99, seed=1, timeout=1.0):
    """``netstor-load --scheme nice`` on a rack of >= 2 client hosts and >= 3 servers:
    partition 0 on nodes 0, 1, 2 (the rest idle), divisions over the client hosts, the
    metadata service's view pushed; open-loop Poisson arrivals at ``rate`` for ``duration``
    s from the first client host (its gets go to its division's replica), every finished
    request listed (``--nice-ops``). Returns ``{"load": netstor-load's result, "switch":
    NICE's counters, "stores": [{key: (ts, value)}] of every node after the run}``."""
    workdir = Path(workdir)
    stats = workdir / "nice-load-switch.json"
    msock, hsock = workdir / "nice-load-membership.sock", workdir / "nice-load-hand.sock"
    cl = rack.clients
    lo = min(int(h.ip.split(".")[-1]) for h in cl) & ~3
    section = rack_section(rack, {0: [0, 1, 2]}, clients=[f"10.77.0.{lo}/30"])
    cfg = rack.config()
    cfg["nice"] = section
    start_switch(rack, cfg, workdir, stats_json=stats, membership=msock,
                 name="switch-nice-load")
    hand = rack.spawn(cl[-1], [sys.executable, "-m", "netstor.offloads.nice.demo", "hand",
                               "--sock", str(hsock), "--bind", cl[-1].ip], name="nice-hand")
    procs = [_start_node(rack, workdir, k) for k in range(len(rack.servers))]
    out_path = workdir / "nice-load.json"
    try:
        hand.wait_line(r"^nice hand ready", timeout=30)
        _wait_nodes(procs)
        ctl = Controller(rack, section, msock, hsock, [cl[-1].ip, HAND_PORT])
        ctl.push("start")
        st = ctl.md.state
        argv = [sys.executable, "-m", "netstor.agent.load", "--scheme", "nice",
                "--target", f"{ip_text(st.unicast.base)}:{NICE_UDP_PORT}",
                "--nice-prefix", st.unicast.prefix,
                "--nice-multicast", ip_text(st.multicast.base),
                "--mode", "open", "--rate", rate, "--duration", duration, "--keys", keys,
                "--zipf", zipf, "--write-ratio", write_ratio, "--value-size", value_size,
                "--seed", seed, "--timeout", timeout, "--nice-ops", "--quiet",
                "--out", out_path]
        load = rack.spawn(cl[0], [str(a) for a in argv], name="nice-load")
        rc = load.wait(timeout=duration + 10 * timeout + 60)
        if load in rack.procs:
            rack.procs.remove(load)
        if rc != 0:
            raise RuntimeError(f"netstor-load --scheme nice failed ({rc}):\n{load.output()}")
    finally:
        for p in procs:
            p.stop()
        hand.stop()
        if hand in rack.procs:
            rack.procs.remove(hand)
        rack.stop_switch()
    sw = json.loads(stats.read_text())["dataplane"]
    return {"load": json.loads(out_path.read_text()),
            "switch": {k: v for k, v in sw.items() if k.startswith("nice.")},
            "stores": replica_records(workdir, len(rack.servers))}


def demo_step(rack, workdir, *, rate=None, duration=2.0):
    """``make demo``'s NICE step on the demo's servers (their NICE sockets on the default
    port): the switch restarted with NICE's program, partition 0 on the first three servers,
    divisions over the client hosts; NICE and the six NOOB schemes each for ``min(duration,
    1)`` s (closed-loop clients on every client host: ``rate`` is not used; keys of their
    own per scheme), every history checked. Throughput here is the Python model switch's,
    not a comparison of the schemes (that is ``make eval``)."""
    from .schemes import MODES
    workdir = Path(workdir)
    stats = workdir / "nice-switch.json"
    msock, hsock = workdir / "nice-membership.sock", workdir / "nice-hand.sock"
    cl = rack.clients
    lo = min(int(h.ip.split(".")[-1]) for h in cl) & ~3
    section = rack_section(rack, {0: list(range(min(3, len(rack.servers))))},
                           clients=[f"10.77.0.{lo}/30"])
    cfg = rack.config()
    cfg["nice"] = section
    start_switch(rack, cfg, workdir, stats_json=stats, membership=msock)
    hand = rack.spawn(cl[-1], [sys.executable, "-m", "netstor.offloads.nice.demo", "hand",
                               "--sock", str(hsock), "--bind", cl[-1].ip], name="nice-hand")
    d = min(duration, 1.0)
    rows = {}
    try:
        hand.wait_line(r"^nice hand ready", timeout=30)
        ctl = Controller(rack, section, msock, hsock, [cl[-1].ip, HAND_PORT])
        ctl.push("start")
        placement = workdir / "nice-placement.json"
        placement.write_text(json.dumps(node_config(ctl.md.state, 0)))
        gw = f"{rack.servers[-1].ip}:{NICE_UDP_PORT}"
        for n, scheme in enumerate(["nice", *MODES]):
            extra = [] if scheme == "nice" else ["--placement", placement, "--gateway", gw]
            prefix = f"d{n}k"
            work = _clients(rack, workdir, cl, lambda i: [
                "--clients", 2, "--client-base", i * 2, "--duration", d, "--keys", 6,
                "--key-prefix", prefix, "--write-ratio", 0.3, "--timeout", 0.5,
                "--tries", 40, "--seed", i + 1, *extra], f"demo-{scheme}", scheme=scheme)
            results = _collect(rack, work, timeout=d + 90)
            results += _clients(rack, workdir, [cl[0]], lambda i: [
                "--only-final-reads", "--keys", 6, "--key-prefix", prefix, "--client-base",
                99, "--timeout", 0.5, "--tries", 40, *extra], f"demo-{scheme}-final",
                wait=True, scheme=scheme)
            out = verdict(results)
            lat = sorted(op["return"] - op["call"] for r in results[:-1]
                         for op in r["history"] if op["return"] is not None)
            out["ops_per_s"] = round(len(lat) / d, 1)
            out["p50_ms"] = round(lat[len(lat) // 2] / 1e6, 3) if lat else None
            rows[scheme] = out
    finally:
        hand.stop()
        if hand in rack.procs:
            rack.procs.remove(hand)
        rack.stop_switch()
    sw = json.loads(stats.read_text())["dataplane"]
    ops = sum(r["operations"] for r in rows.values())
    viol = sum(r["violations"] for r in rows.values())
    lost = sum(r["acked_puts_lost"] for r in rows.values())
    line = (f"nice (model switch, {len(section['partitions'][0])} replicas, {d:.1f} s per "
            "scheme): " + ", ".join(f"{s.upper()} {r['ops_per_s']:.0f} ops/s p50 "
                                    f"{r['p50_ms']} ms" for s, r in rows.items()) +
            f"; histories: {ops} ops, {viol} violations, {lost} acked puts lost")
    return {"schemes": rows, "switch": {k: v for k, v in sw.items()
                                        if k.startswith("nice.")}}, line


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.offloads.nice.demo",
                                 description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sw = sub.add_parser("switch", help="the model switch with NICE's program")
    sw.add_argument("--port0", default="p0")
    sw.add_argument("--port1", default="p1")
    sw.add_argument("--config", required=True)
    sw.add_argument("--stats-json", default=None)
    sw.add_argument("--membership", default=None, metavar="PATH")
    hd = sub.add_parser("hand", help="the controller's hand in a client namespace")
    hd.add_argument("--sock", required=True)
    hd.add_argument("--bind", required=True)
    rk = sub.add_parser("rack", help="a failover run on a rack (root), checked")
    rk.add_argument("--duration", type=float, default=5.0)
    rk.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.cmd == "hand":
        hand = Hand(args.bind)
        srv = _serve_unix(args.sock, hand.handle)
        print("nice hand ready", flush=True)
        stop = _Stop()
        stop.install()
        try:
            while not stop.flag:
                time.sleep(0.2)
        finally:
            srv.shutdown()
        return 0
    if args.cmd == "rack":
        import tempfile
        from netstor.testbed.rack import Rack
        with tempfile.TemporaryDirectory(prefix="netstor-nice-") as tmp, \
                Rack(3, 4, workdir=tmp) as rack:
            out = run_failover(rack, tmp, duration=args.duration)
        hist = out.pop("history")
        print(json.dumps(out, indent=1), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(dict(out, history=hist), indent=1))
        return 0 if out["linearizable"] and out["acked_puts_lost"] == 0 else 1
    try:
        state = _SwitchState(load_config(args.config))
    except ValueError as e:
        print(f"nice switch: error: {e}", file=sys.stderr)
        return 1

    def on_section(msg):
        return {"ok": True, "writes": state.apply(msg["nice"])}
    srv = _serve_unix(args.membership, on_section) if args.membership else None
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
