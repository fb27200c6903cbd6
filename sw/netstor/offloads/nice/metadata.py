"""NICE's metadata service: the membership logic (paper section 4.1, 4.4, 4.5) and its
output, table writes (``docs/nice.md``, "Metadata service").

:class:`Metadata` keeps a :class:`~.config.RingState` and, after every change, computes the
switch's entries with :func:`.config.entries` (the same pure function ``netstor apply`` uses),
diffs them against what it wrote last (:func:`.config.diff`) and hands only the changed
entries and copy lists to a sink: :class:`DeviceSink` (the host API,
:class:`netstor.api.Device`, one batch per change) or :class:`ModelSink` (a golden model and
its :class:`~netstor.driver.tables.TableWriter`). Time is the caller's: ``clock`` is a
function returning seconds (tests pass a fake one; nothing here sleeps).

* **Heartbeats**: :meth:`Metadata.heartbeat` records a beat (and optional load statistics:
  the client addresses a node saw). :meth:`Metadata.tick` declares a live or joining node
  failed when more than ``missed`` (3) beat intervals passed since its last beat.
* **Reported time-outs**: :meth:`Metadata.report_timeout` (a node timed out waiting for
  another, e.g. a PUT_ACK): ``timeouts`` (2) reports about one node within ``report_window``
  seconds declare it failed.
* **Failure** (:meth:`Metadata.fail`): the node goes ``down`` (in no mapping); in every
  partition where it was the primary, the first live secondary is promoted (moved to the
  front; event ``promote``: the new primary resolves the locked objects); every partition it
  belonged to gets a handoff node (:meth:`Metadata.choose_handoff`: a live node outside the
  partition, fewest handoff duties first, then ring distance); partitions where it was the
  handoff get another one.
* **Two-phase rejoin**: :meth:`Metadata.rejoin` (phase 1: the node is ``joining``: in the
  put sets, not in the get ring; returns the handoffs to fetch from), then
  :meth:`Metadata.caught_up` (phase 2: the node is live, in the get ring, and its handoffs
  leave every mapping).
* **Ring reconfiguration**: :meth:`Metadata.add_node`, :meth:`Metadata.add_member` (put set
  first, get ring after :meth:`Metadata.caught_up` with ``partition=``),
  :meth:`Metadata.remove_node` (permanent; its handoff, or a chosen node, becomes a pending
  member), :meth:`Metadata.set_clients` / :meth:`Metadata.rebalance` (divisions from the
  client addresses the nodes reported).

Every change appends to :attr:`Metadata.events` (what the affected replicas must be told:
``("failed", node, reason)``, ``("promote", p, new, old)``, ``("handoff", p, member,
handoff)``, ``("rejoin", node, {p: handoff})``, ``("rejoined", node)``, ...) and returns the
ops it wrote. :meth:`Metadata.describe` is the text view, :meth:`Metadata.snapshot` the same
as plain data; :func:`view` gives either for a configuration's ``nice:`` section: ``netstor nice
view CONFIG.yaml`` (the offload's ``cli`` hook, :func:`cli`) and ``python -m
netstor.offloads.nice.metadata CONFIG.yaml`` print it.
"""
from __future__ import annotations

import ipaddress

from .config import (RingState, check_put_sets, diff, entries, model_apply, parse,
                     section_of)

__all__ = ["Metadata", "DeviceSink", "ModelSink", "BEAT", "MISSED", "TIMEOUTS", "view",
           "device_view", "cli"]

BEAT = 1.0          #: heartbeat interval (s) the nodes use
MISSED = 3          #: missed beats that declare a node failed
TIMEOUTS = 2        #: reported time-outs that declare a node failed


class DeviceSink:
    """Writes ops through the host API (a :class:`netstor.api.Device`), one batch each."""

    def __init__(self, dev):
        self.dev = dev

    def __call__(self, ops):
        from .config import apply_plan
        apply_plan(self.dev, ops)

    def held(self):
        """``{(table, match)}`` of the NICE entries the device holds now (a restarted
        controller deletes those its plan does not have)."""
        from .config import _held
        return _held(self.dev) or set()


class ModelSink:
    """Writes ops into a golden model through a TableWriter (its shadow follows)."""

    def __init__(self, model, writer):
        self.model, self.writer = model, writer

    def __call__(self, ops):
        for mem, addr, word in model_apply(self.writer, ops):
            self.model.mem_write(mem, addr, word)


class Metadata:
    """The membership module and the switch's controller of one NICE deployment.

    ``state``: a :class:`RingState` or a ``nice:`` section; ``sink``: where table writes go
    (None: only recorded); ``clock``: a function giving the time in seconds."""

    def __init__(self, state, *, clock, sink=None, beat=BEAT, missed=MISSED,
                 timeouts=TIMEOUTS, report_window=None, **limits):
        self.state = state if isinstance(state, RingState) else parse(state, **limits)
        self.clock, self.sink = clock, sink
        self.beat, self.missed, self.timeouts = beat, missed, timeouts
        self.report_window = missed * beat if report_window is None else report_window
        now = clock()
        self.last_beat = {n: now for n in self.state.nodes}   # a grace period from the start
        self.reports = {}                                      # suspect -> [(time, reporter)]
        self.clients_seen = {}                                 # node -> set of client ints
        self.events = []
        self.plan = None
        self.writes = 0                                        # entries and groups written
        self.apply()

    # ---- output ----------------------------------------------------------------------------
    def apply(self):
        """Write what changed since the last plan; returns the ops. A state whose put set
        does not fit a copy list raises ``ValueError`` before anything is written."""
        check_put_sets(self.state)
        new = entries(self.state)
        ops = diff(self.plan, new)
        if self.plan is None and hasattr(self.sink, "held"):   # taking over a switch
            ops += [("delete", t, m) for t, m in sorted(self.sink.held() - set(new.entries))]
        if ops and self.sink is not None:
            self.sink(ops)
        self.plan = new
        self.writes += len(ops)
        return ops

    # ---- detection -------------------------------------------------------------------------
    def heartbeat(self, node, *, clients=()):
        """A beat from ``node`` (``clients``: client addresses it served since its last
        beat, the load balancer's statistics). A ``down`` node's beat does not bring it back:
        it must :meth:`rejoin`."""
        if node not in self.state.nodes:
            raise KeyError(f"nice: heartbeat from unknown node {node}")
        self.last_beat[node] = self.clock()
        if clients:
            self.clients_seen.setdefault(node, set()).update(
                int(ipaddress.IPv4Address(c)) if isinstance(c, str) else int(c)
                for c in clients)

    def tick(self):
        """Declare failed every live or joining node whose last beat is more than ``missed``
        intervals old (a nanosecond of slack for the clock's rounding); returns the ops
        written."""
        now = self.clock()
        late = [n for n in sorted(self.state.nodes) if n not in self.state.down
                and now - self.last_beat.get(n, now) > self.missed * self.beat + 1e-9]
        ops = []
        for n in late:
            ops += self.fail(n, "heartbeats")
        return ops

    def report_timeout(self, reporter, suspect):
        """``reporter`` timed out waiting for ``suspect``; the ``timeouts``-th report within
        ``report_window`` seconds declares it failed. Returns the ops written (or [])."""
        if suspect not in self.state.nodes:
            raise KeyError(f"nice: time-out reported for unknown node {suspect}")
        if suspect in self.state.down:
            return []
        now = self.clock()
        rs = [r for r in self.reports.get(suspect, []) if now - r[0] <= self.report_window]
        rs.append((now, reporter))
        self.reports[suspect] = rs
        if len(rs) >= self.timeouts:
            return self.fail(suspect, "timeouts")
        return []

    # ---- failure -----------------------------------------------------------------------------
    def fail(self, node, reason="admin"):
        """Hide ``node``: down, promotions, handoffs; returns the ops written."""
        st = self.state
        if node in st.down:
            return []
        was_primary = {p for p in st.partitions if st.primary(p) == node}
        st.joining.discard(node)
        st.down.add(node)
        self.reports.pop(node, None)
        self.events.append(("failed", node, reason))
        for p in sorted(was_primary):
            new = st.primary(p)
            if new is not None:
                ms = st.partitions[p]
                ms.remove(new)
                ms.insert(0, new)
                self.events.append(("promote", p, new, node))
            else:
                self.events.append(("unavailable", p))
        # partitions where the failed node was a handoff: that duty moves on
        for p, hm in st.handoff.items():
            for m, h in list(hm.items()):
                if h == node:
                    del hm[m]
        for p in sorted(st.partitions):
            for m in st.partitions[p]:
                if not st.live(m) and st.handoff.get(p, {}).get(m) is None:
                    self._assign_handoff(p, m)
        return self.apply()

    def _fits(self, before, nev, what):
        """After a change that can grow a put set (a rejoin, a new member): if a put set no
        longer fits a copy list (``MAX_REPLICAS``), the state and the events go back to
        ``before`` and ``ValueError`` says why; nothing is written."""
        try:
            check_put_sets(self.state)
        except ValueError as e:
            self.state.__dict__.update(before.__dict__)
            del self.events[nev:]
            raise ValueError(f"{e}: {what} refused") from None

    def _assign_handoff(self, p, member):
        h = self.choose_handoff(p)
        if h is None:
            self.events.append(("no_handoff", p, member))
            return
        self.state.handoff.setdefault(p, {})[member] = h
        self.events.append(("handoff", p, member, h))

    def choose_handoff(self, p):
        """A live node outside partition ``p`` and not already its handoff: fewest handoff
        duties first, then the nearest after the partition's primary in node-id order (the
        ring's next node). None if there is none."""
        st = self.state
        taken = set(st.partitions[p]) | set(st.handoff.get(p, {}).values())
        cands = [n for n in st.nodes if st.live(n) and n not in taken]
        if not cands:
            return None
        duties = {}
        for hm in st.handoff.values():
            for h in hm.values():
                duties[h] = duties.get(h, 0) + 1
        ids = sorted(st.nodes)
        anchor = st.partitions[p][0]
        pos = {n: i for i, n in enumerate(ids)}
        return min(cands, key=lambda n: (duties.get(n, 0),
                                         (pos[n] - pos[anchor]) % len(ids), n))

    # ---- rejoin ------------------------------------------------------------------------------
    def rejoin(self, node):
        """Phase 1: a failed ``node`` is back: it joins the put sets (copy lists) only.
        Returns ``{p: handoff}``: where it fetches the objects written while it was away."""
        st = self.state
        if node not in st.down:
            raise ValueError(f"nice: node {node} is not down")
        before, nev = st.copy(), len(self.events)
        st.down.discard(node)
        st.joining.add(node)
        self._fits(before, nev, f"the rejoin of node {node}")
        self.last_beat[node] = self.clock()
        fetch = {p: hm[node] for p, hm in sorted(st.handoff.items()) if node in hm}
        self.events.append(("rejoin", node, fetch))
        self.apply()
        return fetch

    def caught_up(self, node, partition=None):
        """Phase 2: ``node`` holds consistent data: it enters the get ring and its handoffs
        leave every mapping. With ``partition``: a pending member of that partition
        (:meth:`add_member`) becomes a full member. Returns the ops written."""
        st = self.state
        if partition is not None:
            if node not in st.pending.get(partition, ()):
                raise ValueError(f"nice: node {node} is not pending in partition {partition}")
            st.pending[partition].discard(node)
            self.events.append(("member", partition, node))
            return self.apply()
        if node not in st.joining:
            raise ValueError(f"nice: node {node} is not joining")
        st.joining.discard(node)
        for hm in st.handoff.values():
            hm.pop(node, None)
        self.events.append(("rejoined", node))
        return self.apply()

    # ---- reconfiguration ---------------------------------------------------------------------
    def add_node(self, node, *, ip, mac, port, udp=None):
        """A new storage node (in no partition yet)."""
        st = self.state
        if node in st.nodes:
            raise ValueError(f"nice: node {node} exists")
        value = section_of(st)
        value["nodes"][node] = {"ip": ip, "mac": mac, "port": port,
                                **({"udp": udp} if udp is not None else {})}
        st.nodes[node] = parse(value).nodes[node]          # validated as the section would be
        self.last_beat[node] = self.clock()
        self.events.append(("node", node))
        return self.apply()

    def add_member(self, p, node):
        """``node`` joins partition ``p``'s replica set: put set now, get ring after
        ``caught_up(node, partition=p)``."""
        st = self.state
        if node in st.partitions[p]:
            raise ValueError(f"nice: node {node} is already in partition {p}")
        if node not in st.nodes or node in st.down:
            raise ValueError(f"nice: node {node} is unknown or down")
        before, nev = st.copy(), len(self.events)
        st.partitions[p].append(node)
        st.pending.setdefault(p, set()).add(node)
        hm = st.handoff.get(p, {})                          # a handoff of p becoming a member
        for m, h in list(hm.items()):
            if h == node:
                del hm[m]
                self._assign_handoff(p, m)
        self._fits(before, nev, f"adding node {node} to partition {p}")
        self.events.append(("add_member", p, node))
        return self.apply()

    def remove_node(self, node):
        """Permanent removal: ``node`` leaves every partition; where it had a handoff, the
        handoff (which holds the newer objects) becomes a pending member, elsewhere a chosen
        node does. Returns the ops written."""
        st = self.state
        for p in sorted(st.partitions):
            ms = st.partitions[p]
            if node not in ms:
                continue
            repl = st.handoff.get(p, {}).pop(node, None)
            was_primary = st.primary(p) == node
            ms.remove(node)
            st.pending.get(p, set()).discard(node)
            if repl is None:
                repl = self.choose_handoff(p)
            if repl is not None:
                ms.append(repl)
                st.pending.setdefault(p, set()).add(repl)
                self.events.append(("add_member", p, repl))
            if was_primary and st.primary(p) is not None:
                self.events.append(("promote", p, st.primary(p), node))
        for hm in st.handoff.values():
            for m, h in list(hm.items()):
                if h == node:
                    del hm[m]
        del st.nodes[node]
        st.down.discard(node)
        st.joining.discard(node)
        self.last_beat.pop(node, None)
        for p in sorted(st.partitions):
            for m in st.partitions[p]:
                if not st.live(m) and m not in st.pending.get(p, ()) \
                        and st.handoff.get(p, {}).get(m) is None:
                    self._assign_handoff(p, m)
        self.events.append(("removed", node))
        return self.apply()

    def set_clients(self, prefixes):
        """The client space the divisions cut (``["10.0.0.0/24", ...]`` or ``(addr, len)``)."""
        value = section_of(self.state)
        value["clients"] = list(prefixes)
        self.state.clients = parse(value).clients
        return self.apply()

    def rebalance(self):
        """Divisions from the statistics: the smallest prefix covering every client address
        the nodes reported (none reported: unchanged). Returns the ops written."""
        seen = set().union(*self.clients_seen.values()) if self.clients_seen else set()
        if not seen:
            return []
        lo, hi = min(seen), max(seen)
        n = 32 - (lo ^ hi).bit_length()
        self.clients_seen.clear()
        return self.set_clients([(lo & ~((1 << (32 - n)) - 1) if n < 32 else lo, n)])

    # ---- view --------------------------------------------------------------------------------
    def describe(self):
        """A text view of the state: per node its role, per partition primary, get set, put
        set, handoffs, divisions; the entry counts."""
        st = self.state
        now = self.clock()
        lines = [f"NICE metadata: {len(st.nodes)} nodes, {len(st.partitions)} partitions, "
                 f"rings {st.unicast} / {st.multicast}"]
        for n in sorted(st.nodes):
            role = "down" if n in st.down else "joining" if n in st.joining else "live"
            age = now - self.last_beat.get(n, now)
            lines.append(f"  node {n:5d} {str(ipaddress.IPv4Address(st.nodes[n]['ip'])):15s} "
                         f"{role:8s} last beat {age:.1f} s ago")
        for p in sorted(st.partitions):
            hm = st.handoff.get(p, {})
            lines.append(f"  part {p:5d} primary {st.primary(p)} members {st.partitions[p]} "
                         f"get {st.get_set(p)} put {st.put_set(p)}"
                         + (f" handoff {dict(sorted(hm.items()))}" if hm else "")
                         + (f" pending {sorted(st.pending[p])}" if st.pending.get(p) else "")
                         + f" divisions {len(st.divisions_of(p))}")
        counts = {}
        for t, _ in self.plan.entries:
            counts[t] = counts.get(t, 0) + 1
        lines.append("  entries " + ", ".join(f"{t} {c}" for t, c in sorted(counts.items()))
                     + f"; copy lists {sum(1 for c in self.plan.mcast.values() if c)}"
                     + f"; writes so far {self.writes}")
        return "\n".join(lines)

    def snapshot(self):
        """:meth:`describe` as plain data: ``{"nodes": {id: {"ip", "role"}}, "partitions":
        {p: {"primary", "members", "get", "put", "handoff", "pending", "divisions"}},
        "entries": {table: count}, "copy_lists": n}`` (node ids as keys; divisions as
        ``"a.b.c.d/len": node``)."""
        st = self.state
        ip = lambda a: str(ipaddress.IPv4Address(a))            # noqa: E731
        counts = {}
        for t, _ in self.plan.entries:
            counts[t] = counts.get(t, 0) + 1
        return {
            "nodes": {n: {"ip": ip(st.nodes[n]["ip"]),
                          "role": "down" if n in st.down else "joining" if n in st.joining
                          else "live"} for n in sorted(st.nodes)},
            "partitions": {p: {"primary": st.primary(p), "members": list(st.partitions[p]),
                               "get": st.get_set(p), "put": st.put_set(p),
                               "handoff": dict(sorted(st.handoff.get(p, {}).items())),
                               "pending": sorted(st.pending.get(p, ())),
                               "divisions": {f"{ip(a)}/{n}": node
                                             for a, n, node in st.divisions_of(p)}}
                           for p in sorted(st.partitions)},
            "entries": dict(sorted(counts.items())),
            "copy_lists": sum(1 for c in self.plan.mcast.values() if c)}


def view(config, *, as_json=False, clock=None):
    """The metadata view (:meth:`Metadata.describe`, or :meth:`Metadata.snapshot` as JSON
    text) of the ``nice:`` section of ``config`` (a YAML/TOML/JSON path or a dict). A file
    that cannot be read, has no ``nice:`` section or an invalid one raises
    :class:`netstor.cli.UsageError` naming the file and the reason."""
    import json
    import time

    from netstor.cli import UsageError
    from netstor.config import ConfigError, load_config
    try:
        cfg = load_config(config)
    except ConfigError as e:
        raise UsageError(str(e)) from None
    where = "the configuration" if isinstance(config, dict) else str(config)
    if "nice" not in cfg:
        raise UsageError(f"{where}: no nice: section")
    try:
        md = Metadata(cfg["nice"], clock=clock or time.monotonic)
    except (ValueError, KeyError, TypeError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        raise UsageError(f"{where}: {msg}") from None
    return json.dumps(md.snapshot(), indent=1) if as_json else md.describe()


def device_view(dev, *, as_json=False):
    """What a device's NICE tables and copy lists hold, read back through the host API
    (:class:`netstor.api.Device`): the mapped nodes (``nice.nodes``), per mapped partition
    its primary and subgroups (``nice.unicast``), its put set (the copy list ``nice.multicast``
    names) and its divisions (``nice.divisions``; their nodes are the get ring when clients are
    configured). Membership roles are not on the switch: a down node is one that is not
    mapped; an unavailable partition is not shown. ``ValueError`` for a device without
    NICE's tables."""
    import json
    have = set(dev.table_names)
    missing = [t for t in ("nice.nodes", "nice.unicast", "nice.multicast", "nice.divisions")
               if t not in have]
    if missing:
        raise ValueError(f"device {getattr(dev, 'target', '')}: no NICE tables "
                         f"({', '.join(missing)}; a pipeline with the nice program, "
                         "default_pipeline(extra=('nice',)), and its schema)")
    ip = lambda a: str(ipaddress.IPv4Address(a))            # noqa: E731
    nodes = {e["key"][0]: ip(e["params"]["ip"]) for e in dev.table("nice.nodes").dump()}
    parts = {}

    def part(p):
        return parts.setdefault(p, {"primary": None, "subgroups": 0, "group": None,
                                    "put": [], "divisions": {}})
    for e in dev.table("nice.unicast").dump():
        v = part(e["params"]["part"])
        v["primary"] = e["params"]["node"]
        v["subgroups"] += 1
    for e in dev.table("nice.multicast").dump():
        part(e["params"]["part"])["group"] = e["params"]["mcast"]
    for e in sorted(dev.table("nice.divisions").dump(), key=lambda e: e["prefix"]):
        p, a = e["prefix"] >> 32, e["prefix"] & 0xFFFFFFFF
        part(p)["divisions"][f"{ip(a)}/{e['prefix_len'] - 16}"] = e["params"]["node"]
    for v in parts.values():
        if v["group"] is not None:
            v["put"] = [rid for _port, rid in dev.mcast_get(v["group"])]
    snap = {"nodes": {n: {"ip": a} for n, a in sorted(nodes.items())},
            "partitions": dict(sorted(parts.items()))}
    if as_json:
        return json.dumps(snap, indent=1)
    lines = [f"NICE on {getattr(dev, 'target', 'the device')}: {len(nodes)} nodes mapped, "
             f"{len(parts)} partitions mapped"]
    for n, a in sorted(nodes.items()):
        prim = [p for p, v in sorted(parts.items()) if v["primary"] == n]
        put = [p for p, v in sorted(parts.items()) if n in v["put"]]
        get = [p for p, v in sorted(parts.items()) if n in v["divisions"].values()]
        lines.append(f"  node {n:5d} {a:15s} primary of {prim} put {put} divisions {get}")
    for p, v in sorted(parts.items()):
        ring = list(dict.fromkeys(v["divisions"].values()))
        lines.append(f"  part {p:5d} primary {v['primary']} put {v['put']} "
                     f"divisions {len(v['divisions'])} on {sorted(ring)} subgroups "
                     f"{v['subgroups']} copy list {v['group']}")
    return "\n".join(lines)


def cli(parser):
    """NICE's ``cli`` hook (:class:`netstor.offload.Offload`): ``netstor nice view CONFIG``,
    the metadata service's view of a configuration's ``nice:`` section (nodes and their
    role, per partition primary, members, get ring, put set, handoffs, pending members,
    divisions; ``netstor --json nice view`` as JSON)."""
    sub = parser.add_subparsers(dest="nice_cmd", metavar="COMMAND", required=True)
    p = sub.add_parser("view", help="the metadata view of a configuration's nice: section",
                       description="The metadata service's view of the nice: section of "
                       "CONFIG: per node its role (live, joining, down); per partition the "
                       "primary, the members, the get ring, the put set (copy list), handoffs, "
                       "pending members and the number of divisions; the entry counts. With "
                       "netstor --json: as JSON, the divisions listed. A file that cannot be "
                       "read or has no valid nice: section: exit status 2. With --device "
                       "TARGET: what the switch's NICE tables and copy lists hold.")
    p.add_argument("config", nargs="?", help="a netstor configuration (.yaml/.toml/.json) "
                   "with a nice: section")
    p.add_argument("--device", dest="view_device", metavar="TARGET",
                   help="instead of CONFIG: what TARGET's NICE tables and copy lists hold "
                   "(unix:PATH, pcie:BDF, ...; the global --schema names its schema)")
    return _run


def _run(args):
    from netstor.cli import UsageError
    target = getattr(args, "view_device", None)
    if target is None:
        if args.config is None:
            raise UsageError("nice view: give CONFIG or --device TARGET")
        print(view(args.config, as_json=args.json))
        return 0
    if args.config is not None:
        raise UsageError("nice view: CONFIG or --device, not both")
    import argparse

    from netstor.cli import open_device
    dev = open_device(argparse.Namespace(**{**vars(args), "device": target}))
    try:
        print(device_view(dev, as_json=args.json))
    finally:
        dev.close()
    return 0


def main(argv=None):
    """``python -m netstor.offloads.nice.metadata CONFIG.yaml``: the metadata view of the
    config's ``nice:`` section (the same as ``netstor nice view CONFIG.yaml``)."""
    import argparse
    import sys

    from netstor.cli import UsageError
    ap = argparse.ArgumentParser(prog="python -m netstor.offloads.nice.metadata",
                                 description=main.__doc__)
    ap.add_argument("config", help="a netstor configuration with a nice: section")
    ap.add_argument("--json", action="store_true", help="as JSON")
    args = ap.parse_args(argv)
    try:
        return _run(args)
    except UsageError as e:
        print(f"{ap.prog}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
