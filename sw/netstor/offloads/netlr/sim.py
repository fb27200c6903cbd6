"""NetLR and its paper's baselines in the cluster simulator (:mod:`netstor.cluster`): one rack,
replicated key-value storage, virtual time.

::

    c0, c1 ── wire port 0 ═[ switch ]═ wire port 1 ──┬─ s0 ... s5 (replicas: rid = 1 + index)
    (10.77.0.10, .11)                                (10.77.1.10 + i, one cable each)

Like :mod:`netstor.offloads.xorinc.sim` this is its own harness (:class:`LrRun`) built from the
generic parts (``Sim``, ``Network``, ``Host``, ``SwitchNode``, ``ServiceTime``, the named
random streams): the generic rack's servers answer requests and forget them, while replication
needs servers that keep objects, forward writes (CR), exchange invalidations (Hermes) and
die mid-run, and clients that retry and record a history for the linearizability checker.

**Hosts.** A replica (:class:`Replica`) is ``workers`` workers taking *messages* from one FIFO
queue; every message it handles (a read, a write or write copy, a chain forward, an
invalidation, an ack, a validation) costs one service time drawn from the run's
:class:`netstor.cluster.service.ServiceTime` at a counter-stream index fixed by (operation,
attempt, message kind, server), so the schemes of one figure see the same draws for the same
message (common random numbers). A message takes effect when a worker takes it, in arrival
order (a write is applied, a read reads), and what it sends leaves when its service time is
over: a replica's state changes in the order the switch sent it (per-object seq order on a
FIFO path), whatever the workers' service times. ``ctrl_cost`` scales the service time of the messages that
carry no value (Hermes' ACK and VAL): 1.0 by default, chosen before any run; the evaluation
measures 0.0 as a bound. Objects: ``key -> (version, value)``; a write applies only if its
version is newer (NetLR: the switch's seq; CR: the head's per-key version; Hermes: the
(version, coordinator) timestamp). A killed replica drops everything it has and receives.

**Clients** (:class:`LrClient`): open loop, Poisson arrivals per client, each operation a read
or a write (``write_ratio``) of a key drawn uniformly from ``n_keys``; a write's value is its
own id (unique). No reply within ``retry_us``: the same operation is sent again (same value;
NetLR: a new seq from the switch), until ``timeout_us`` after its arrival (then a timeout, kept
in the latency samples at the timeout). Latency from the scheduled arrival to the first reply.
Every operation goes into the history (call = arrival, return = first reply, value written or
read; unanswered: pending) that :mod:`netstor.lincheck` checks.

**Schemes** (:data:`SCHEMES`):

* ``netlr`` -- requests to the switch (UDP 7460, :mod:`.header`); the switch assigns write
  seqs, sends one copy per live replica of the key's group, aggregates the replicas' acks in its
  inconsistent-object list and answers the client at the last live ack; reads go to the
  object's latest consistent replica while it is listed, else round robin. The switch is either
  the **data-plane model** (``switch="model"``: ``default_pipeline()`` with
  copy-list groups, configured by :mod:`.config`) or the **reference** (``switch="ref"``,
  :class:`RefNetLR`: the rules of ``docs/netlr.md`` in plain Python around the default
  pipeline, which still routes everything else). The test suite runs both on the same traffic
  and compares every output.
* ``cr`` -- chain replication (van Renesse & Schneider, OSDI'04): writes to the head, which
  versions them and forwards down the chain; the tail applies and answers; reads at the tail.
* ``hermes`` -- Hermes-like (Katsarakis et al., ASPLOS'20): a client sends each request to a
  random live replica; reads of a Valid key are answered locally, reads of an Invalid key wait
  for its validation; a write's coordinator takes timestamp (version + 1, its id), sends INV
  (with the value) to the other replicas, which apply it if newer, mark the key Invalid and
  ACK; at the last ACK the coordinator answers the client and sends VAL, which makes the key
  Valid again where the timestamp still matches.

The baselines speak the NetLR header layout on their own UDP ports (routed by the switch like
any UDP): ``op``, ``seq`` (version / timestamp), ``rid`` (sender), ``req``; ``group`` carries
the requesting client's index so the answering replica can reach it.

**Retries** are applied once (``dedup``, netstor-server's rule, :meth:`Replica.apply`); the
plain rule of the lead's first protocol text (apply any newer seq) is an option: under it a
write superseded by another write of its object is retried with a new seq and takes effect a
second time (the checker catches it; the evaluation runs both).

**Membership**: :meth:`LrRun.kill` stops a replica at a virtual time; the controller
notices after ``detect_us`` (a parameter of the run: the design's detection delay, see
:mod:`.eval`) and removes it. NetLR: from its group (live bit, copy list, live count) by table
writes only; writes in flight to it do not commit until their client retries. CR: the master
reconfigures the chain (:meth:`_CR.reconfigure`: the dead server's predecessor re-sends what
its new successor lacks). Hermes-like: a membership change (:meth:`_Hermes.reconfigure`:
coordinators stop waiting for the removed member's ACKs; writes it coordinated are replayed).
Until the removal every scheme's clients and servers still count the dead replica in
(:attr:`LrRun.members`, the membership view).
"""
from __future__ import annotations

import functools
import math
import time
from collections import deque

import numpy as np

from netstor.cluster.engine import Sim
from netstor.cluster.frames import ip4, parse_udp, udp_frame
from netstor.cluster.host import SERVICE_STRIDE, Host
from netstor.cluster.net import Network
from netstor.cluster.rack import rack_plan
from netstor.cluster.rng import Streams
from netstor.cluster.service import ServiceTime
from netstor.cluster.stats import summary
from netstor.cluster.switch import SwitchNode, cached_config_ops
from netstor.model.dataplane import Output
from netstor.testbed.rack import port_mac, route_config

from .header import (HEADER, KEY_LEN, LR_LEN, NETLR_UDP_PORT, OP_READ, OP_READ_REPLY, OP_WRITE,
                     OP_WRITE_REPLY, fingerprint, group_of, slot_of)

__all__ = ["SCHEMES", "LrRun", "run_lr", "Replica", "LrClient", "RefNetLR", "ref_model_class",
           "CR_PORT", "HERMES_PORT", "key_bytes"]

SCHEMES = ("netlr", "cr", "hermes")
#: the baselines' UDP ports (routed like any UDP)
CR_PORT = 7461
HERMES_PORT = 7462
#: the clients' UDP port in the baselines (NetLR clients send from and get replies on 7460)
CLIENT_PORT = 40460
#: message kinds (the service-draw index and the per-kind counters)
K_READ, K_WRITE, K_FWD, K_INV, K_ACK, K_VAL = range(6)
KINDS = ("read", "write", "fwd", "inv", "ack", "val")
# baseline ops (in the header's op field)
B_READ, B_READ_REPLY, B_WRITE, B_WRITE_REPLY, B_FWD, B_INV, B_ACK, B_VAL = range(8)
_LR = HEADER.struct


def key_bytes(k):
    """The 16-byte key of object ``k`` (big-endian)."""
    return int(k).to_bytes(KEY_LEN, "big")


@functools.lru_cache(maxsize=1 << 16)
def _key_rules(k, n_groups):
    kb = key_bytes(k)
    return fingerprint(kb), slot_of(kb), group_of(kb, n_groups)


def _value(v, value_len):
    """A value: its 8-byte id, zero-padded to ``value_len`` bytes."""
    return int(v).to_bytes(8, "big") + bytes(max(0, value_len - 8))


# ---- the NetLR switch rules in Python (the reference) ------------------------------------------
class _Lazy(dict):
    """Per-slot ack sets, made on first use (a million empty sets cost ~200 MB)."""

    def __init__(self, n):
        super().__init__()
        self.n = n

    def __missing__(self, i):
        s = self[i] = set()
        return s


class RefNetLR:
    """The NetLR data plane as ``docs/netlr.md`` states it, in plain Python: a model object with
    the golden model's API (``process``, ``mem_write``, ``reg_write``, ``counters``) wrapping
    a golden model of the default pipeline, which handles every frame that is not NetLR
    (routing). State: the global write seq; per slot ``(fp, seq, consistent rid, the set of
    live members that acked seq)``; per group the member rids in order and a round-robin
    register; per rid its addresses, switch port and live bit. Set with :meth:`set_groups` /
    :meth:`set_rid` / :meth:`set_live`.

    Where the lead's protocol text leaves a choice, this follows ``docs/netlr.md`` / the
    program: acks count distinct live members (a duplicate ack counts once), commit when every
    live member acked; a write taking a free slot starts with the group's first live replica as
    its consistent replica (the slot's own rid when it already held this object); a listed
    read goes to the slot's rid as it is (no liveness check); the rotation register returns
    its old value and wraps at the live count; a collided write still draws a sequence
    number."""

    def __init__(self, pipeline, *, slots=1 << 17, inner=None):
        from netstor.cluster.switch import default_model_class
        # everything but NetLR's packets is routed by the other programs (NetLR, in the
        # default bitstream, would drop them here: its tables are the reference's own state)
        from netstor.programs import default_pipeline
        self.inner = (inner or default_model_class())(
            default_pipeline(pipeline.n_ports, exclude=("netlr",)))
        self.P = pipeline.n_ports
        if slots & (slots - 1):
            raise ValueError("slots: a power of two")
        self.slots = slots
        self.s_fp = [0] * slots
        self.s_seq = [0] * slots
        self.s_crid = [0] * slots       # 0: none yet
        self.s_acks = [set() for _ in range(slots)] if slots <= 1 << 12 else _Lazy(slots)
        self.joining = set()            # rids in the write set but not counted/read (rejoin)
        self.gseq = 0
        self.members = {}               # group -> [rid] (copy-list order)
        self.rr = {}                    # group -> round-robin register
        self.rids = {}                  # rid -> (ip bytes, mac bytes, port, smac bytes)
        self.live = {}                  # rid -> bool
        self.c = {k: 0 for k in ("nl.reads", "nl.reads_listed", "nl.writes", "nl.copies",
                                 "nl.collide", "nl.acks", "nl.absorbed", "nl.commits",
                                 "nl.stale", "nl.untrusted", "nl.no_replica", "nl.ignored",
                                 "nl.refused", "nl.no_group")}

    # ---- control plane
    def set_groups(self, groups):
        self.members = {int(g): list(r) for g, r in groups.items()}
        self.rr = {g: 0 for g in self.members}

    def set_rid(self, rid, ip, mac, port):
        self.rids[rid] = (ip4(ip), bytes(mac), int(port), port_mac(int(port)).to_bytes(6, "big"))
        self.live.setdefault(rid, True)

    def set_live(self, rid, live):
        self.live[rid] = bool(live)

    def live_of(self, group):
        return [r for r in self.members.get(group, ()) if self.live.get(r)]

    def mem_write(self, name, addr, word):
        self.inner.mem_write(name, addr, word)

    def mem_read(self, name, addr):
        return self.inner.mem_read(name, addr)

    def reg_write(self, name, value):
        self.inner.reg_write(name, value)

    def counters(self):
        out = dict(self.inner.counters())
        out.update(self.c)
        return out

    # ---- data plane
    def _to(self, rid, v, head):
        ip, mac, port, smac = self.rids[rid]
        return Output(port, udp_frame(mac, smac, v.src_ip, ip, v.sport, v.dport,
                                      head + v.payload[LR_LEN:], ttl=v.ttl - 1))

    def process(self, frame, ingress_port, *, user=0, arrival=0):
        v = parse_udp(frame)
        if v is None or NETLR_UDP_PORT not in (v.dport, v.sport) or len(v.payload) < LR_LEN \
                or ingress_port >= self.P:
            return self.inner.process(frame, ingress_port, user=user, arrival=arrival)
        op, flags, group, slot, fp, seq, rid, nrep, req = _LR.unpack_from(v.payload)
        i = slot & (self.slots - 1)
        c = self.c
        if op == OP_READ:
            c["nl.reads"] += 1
            live = self.live_of(group)
            if group not in self.members:
                c["nl.no_group"] += 1
                return []
            if not live:
                c["nl.refused"] += 1
                return []
            old = self.rr[group]
            self.rr[group] = 0 if old + 1 >= len(live) else old + 1
            if self.s_fp[i] == fp and fp:
                c["nl.reads_listed"] += 1
                r = self.s_crid[i]
            else:
                r = live[old if old < len(live) else 0]
            if r not in self.rids:
                c["nl.no_replica"] += 1
                return []
            head = _LR.pack(op, flags, group, slot, fp, seq, r, nrep, req)
            return [self._to(r, v, head)]
        if op == OP_WRITE:
            c["nl.writes"] += 1
            live = self.live_of(group)
            if group not in self.members:
                c["nl.no_group"] += 1
                return []
            if not live or fp == 0:
                c["nl.refused"] += 1
                return []
            self.gseq = (self.gseq + 1) & 0xFFFF_FFFF
            if self.s_fp[i] not in (0, fp):
                c["nl.collide"] += 1
                return []
            if self.s_fp[i] == 0:
                self.s_crid[i] = live[0]
            self.s_fp[i], self.s_seq[i], self.s_acks[i] = fp, self.gseq, set()
            out = []
            for r in self.members[group]:
                if self.live.get(r) or r in self.joining:
                    head = _LR.pack(op, flags, group, slot, fp, self.gseq, r, len(live), req)
                    out.append(self._to(r, v, head))
            c["nl.copies"] += len(out)
            return out
        if op == OP_WRITE_REPLY:
            known = self.rids.get(rid)
            if known is None or known[0] != v.src_ip:
                c["nl.untrusted"] += 1
                return []
            if group not in self.members:
                c["nl.no_group"] += 1
                return []
            live = self.live_of(group)
            if rid not in live:
                c["nl.ignored"] += 1
                return []
            if self.s_fp[i] != fp or self.s_seq[i] != seq:
                c["nl.stale"] += 1
                return []
            c["nl.acks"] += 1
            self.s_acks[i].add(rid)
            self.s_crid[i] = rid
            if all(r in self.s_acks[i] for r in live):
                self.s_fp[i] = 0
                c["nl.commits"] += 1
                return self.inner.process(frame, ingress_port, user=user, arrival=arrival)
            c["nl.absorbed"] += 1
            return []
        # READ_REPLY and anything else: routed
        return self.inner.process(frame, ingress_port, user=user, arrival=arrival)


@functools.lru_cache(maxsize=16)
def ref_model_class(slots):
    """A :class:`RefNetLR` class with ``slots`` slots (``SwitchNode`` builds ``cls(pipeline)``)."""
    class Ref(RefNetLR):
        def __init__(self, pipeline):
            super().__init__(pipeline, slots=slots)
    Ref.__name__ = Ref.__qualname__ = f"RefNetLR(slots={slots})"
    return Ref


# ---- hosts ---------------------------------------------------------------------------------------
class Replica:
    """A storage replica on ``host`` (see the module doc): ``workers`` workers, one FIFO queue of
    messages, each costing one service time; ``store``: ``key -> (version, value)``."""

    def __init__(self, run, host, index, rid):
        self.run, self.host, self.sim = run, host, run.sim
        self.index, self.rid = index, rid
        self.workers = run.workers
        self.queue = deque()
        self.in_service = 0
        self.busy_ns = 0
        self.busy_window_ns = 0       # service time inside [0, last arrival]
        self.alive = True
        self.store = {}
        self.valid = {}               # hermes: key -> False while invalid
        self.parked = {}              # hermes: key -> [read jobs waiting for validation]
        self.acks = {}                # hermes coordinator: (key, ts) -> [rids to ack, cidx, req]
        self.inv_from = {}            # hermes: (key, ts) -> (cidx, req) of an INV applied
        self.sent = {}                # cr: key -> (ver, val, req, cidx, flags) last forwarded
        self.handled = [0] * len(KINDS)
        self._u, self._v = run.draws
        self.ctrl_cost = run.ctrl_cost
        self.write_cost = run.write_cost
        self.dedup = run.dedup
        self.writers = {}             # dedup: key -> [writer op id, {op ids that wrote}]
        self.dups = 0
        self._outbox = None
        self.stale_recorded = 0       # dedup: op ids recorded from writes that were not newer

    def cpu(self, draw, kind, fn, *args):
        """Queue one message: ``fn(*args)`` runs when a worker has spent its service time."""
        if not self.alive:
            return
        job = (draw, kind, fn, args)
        if self.in_service < self.workers:
            self._start(job)
        else:
            self.queue.append(job)

    def _start(self, job):
        draw, kind, fn, args = job
        self.in_service += 1
        i = draw * SERVICE_STRIDE + self.index
        t = self.run.service.ns(self._u.uniform(i), self._v.uniform(i), self.index, self.sim.now)
        if kind in (K_ACK, K_VAL):
            t = int(t * self.ctrl_cost)
        elif kind in (K_WRITE, K_FWD, K_INV) and self.write_cost != 1.0:
            t = int(t * self.write_cost)
        self.busy_ns += t
        now, end = self.sim.now, self.run.window_end
        if now < end:
            self.busy_window_ns += min(t, end - now)
        # the message takes effect when a worker takes it (in arrival order); what it sends
        # leaves when its service time is over
        self._outbox = out = []
        try:
            fn(*args)
        finally:
            self._outbox = None
        self.sim.after(t, self._done, kind, out)

    def _done(self, kind, out):
        if not self.alive:
            return
        self.in_service -= 1
        self.handled[kind] += 1
        for m in out:
            self.host.send(*m)
        if self.queue and self.in_service < self.workers:
            self._start(self.queue.popleft())

    def kill(self):
        self.alive = False
        self.queue.clear()
        self.parked.clear()

    def apply(self, key, version, value, req=None):
        """Store ``value`` if ``version`` is newer than the stored one. With the run's
        ``dedup`` (retries applied once, as netstor-server does: :class:`.codec.ObjectStore`):
        per object the current writer's op id and the op ids that wrote it are kept; a try of
        an operation that wrote the object before and that another operation has overwritten
        since is not applied again (its ack still goes out): it already took effect, before
        the later one. Two differences from the server's record: it is per op id, not "this
        client's latest op id" (the simulated clients are open loop, several operations of a
        client in flight on one key, and a client's later operation is not necessarily
        ordered after its earlier one: Hermes orders by coordinator timestamps), and a write
        that was not newer is recorded as having written too (it is ordered before the stored
        one)."""
        if not (self.dedup and req is not None):
            old = self.store.get(key)
            if old is None or version > old[0]:
                self.store[key] = (version, value)
                return True
            return False
        meta = self.writers.get(key)
        if meta is not None and req in meta[1] and meta[0] != req:
            self.dups += 1
            return False
        old = self.store.get(key)
        applied = old is None or version > old[0]
        if meta is None:
            meta = self.writers[key] = [None, set()]
        meta[1].add(req)
        if applied:
            self.store[key] = (version, value)
            meta[0] = req
        else:
            self.stale_recorded += 1
        return applied

    def send(self, ip, sport, dport, payload):
        if not self.alive:
            return
        if self._outbox is not None:          # inside a message's handling: at its end
            self._outbox.append((ip, sport, dport, payload))
        else:
            self.host.send(ip, sport, dport, payload)


class LrClient:
    """An open-loop client (see the module doc): ``ops`` = arrays of arrival ns, is-write,
    key, value; the scheme's ``send(client, i, attempt)`` sends operation ``i``."""

    def __init__(self, run, host, index, arrivals, writes, keys, picks):
        self.run, self.host, self.sim, self.index = run, host, run.sim, index
        self.arr = arrivals.tolist()
        self.n = len(self.arr)
        self.is_write = writes.tolist()
        self.keys = keys.tolist()
        self.picks = picks
        self.ncl = run.n_clients
        self.lat = np.full(self.n, -1, dtype=np.int64)
        self.done_at = np.full(self.n, -1, dtype=np.int64)
        self.got = [None] * self.n            # value read (reads) / commit seq (writes)
        self.attempts = [0] * self.n
        self.retries = self.duplicates = self.stray = 0

    def op_id(self, i):
        return i * self.ncl + self.index

    def value_of(self, i):
        return self.op_id(i) + 1              # 0 is "no value"

    def start(self):
        if not self.n:
            return
        k = self.run.outstanding
        if k:                                  # closed loop: k operations at a time
            self.next = min(k, self.n)
            for i in range(self.next):
                self.sim.at(self.arr[i], self._attempt, i)
        else:
            self.sim.at(self.arr[0], self._arrive, 0)

    def _arrive(self, i):
        self._attempt(i)
        if i + 1 < self.n:
            self.sim.at(self.arr[i + 1], self._arrive, i + 1)

    def _issue_next(self):
        """Closed loop: the next operation starts now (an operation ended)."""
        if self.next < self.n:
            i = self.next
            self.next += 1
            self.arr[i] = self.sim.now
            self._attempt(i)

    def _attempt(self, i):
        if self.lat[i] >= 0:
            return
        now = self.sim.now
        if now - self.arr[i] >= self.run.timeout_ns:
            if self.run.outstanding:
                self._issue_next()             # given up: the slot goes on
            return
        a = self.attempts[i]
        self.attempts[i] = a + 1
        if a:
            self.retries += 1
        self.run.scheme_send(self, i, a)
        nxt = min(now + self.run.retry_ns, self.arr[i] + self.run.timeout_ns)
        if nxt > now:
            self.sim.at(nxt, self._attempt, i)

    def complete(self, req, got):
        """The answer to request id ``req`` (= op id) arrived with ``got`` (value read / seq)."""
        i, off = divmod(req - self.index, self.ncl)
        if off or not 0 <= i < self.n:
            self.stray += 1
            return
        if self.lat[i] >= 0:
            self.duplicates += 1
            return
        now = self.sim.now
        self.lat[i] = now - self.arr[i]
        self.done_at[i] = now
        self.got[i] = got
        if self.run.outstanding:
            self._issue_next()


# ---- the schemes' host logic ---------------------------------------------------------------------
class _NetLR:
    """NetLR: clients send to the switch; replicas answer every copy (see the module doc)."""
    name = "netlr"

    def __init__(self, run):
        self.run = run
        self.port = NETLR_UDP_PORT
        for c in run.clients:
            c.host.bind(NETLR_UDP_PORT, functools.partial(self.client_rx, c))
        for r in run.replicas:
            r.host.bind(NETLR_UDP_PORT, functools.partial(self.replica_rx, r))

    def send(self, client, i, attempt):
        run = self.run
        k = client.keys[i]
        fp, slot, group = _key_rules(k, run.n_groups)
        req = client.op_id(i)
        kb = key_bytes(k)
        if client.is_write[i]:
            head = _LR.pack(OP_WRITE, 1 if attempt else 0, group, slot, fp, 0, 0, 0, req)
            body = kb + _value(client.value_of(i), run.value_len)
        else:
            head = _LR.pack(OP_READ, 1 if attempt else 0, group, slot, fp, 0, 0, 0, req)
            body = kb
        client.host.send(run.vip, NETLR_UDP_PORT, NETLR_UDP_PORT, head + body)

    def client_rx(self, client, view):
        p = view.payload
        op, _f, _g, _s, _fp, seq, _rid, _n, req = _LR.unpack_from(p)
        if op == OP_READ_REPLY:
            v = int.from_bytes(p[LR_LEN + KEY_LEN:LR_LEN + KEY_LEN + 8], "big") \
                if len(p) >= LR_LEN + KEY_LEN + 8 else 0
            client.complete(req, v or None)
        elif op == OP_WRITE_REPLY:
            client.complete(req, seq)
        else:
            client.stray += 1

    def replica_rx(self, rep, view):
        if not rep.alive:
            return
        p = view.payload
        op, flags, group, slot, fp, seq, rid, nrep, req = _LR.unpack_from(p)
        draw = self.run.draw_index(req, flags, K_WRITE if op == OP_WRITE else K_READ)
        rep.cpu(draw, K_WRITE if op == OP_WRITE else K_READ, self._serve, rep, view)

    def _serve(self, rep, view):
        p = view.payload
        op, flags, group, slot, fp, seq, rid, nrep, req = _LR.unpack_from(p)
        key = int.from_bytes(p[LR_LEN:LR_LEN + KEY_LEN], "big")
        kb = p[LR_LEN:LR_LEN + KEY_LEN]
        if op == OP_WRITE:
            val = int.from_bytes(p[LR_LEN + KEY_LEN:LR_LEN + KEY_LEN + 8], "big")
            rep.apply(key, seq, val, req)
            head = _LR.pack(OP_WRITE_REPLY, flags, group, slot, fp, seq, rep.rid, nrep, req)
            rep.send(view.src_ip, NETLR_UDP_PORT, view.sport, head + kb)
        elif op == OP_READ:
            ver, val = rep.store.get(key, (0, 0))
            head = _LR.pack(OP_READ_REPLY, flags, group, slot, fp, ver, rep.rid, nrep, req)
            rep.send(view.src_ip, NETLR_UDP_PORT, view.sport,
                     head + kb + _value(val, self.run.value_len))


class _Baseline:
    """What CR and Hermes share: the header layout on their own port, clients' replies."""
    port = None

    def __init__(self, run):
        self.run = run
        for c in run.clients:
            c.host.bind(CLIENT_PORT, functools.partial(self.client_rx, c))
        for r in run.replicas:
            r.host.bind(self.port, functools.partial(self.replica_rx, r))

    def msg(self, op, client, version, rid, req, key, value=None, flags=0):
        body = key_bytes(key)
        if value is not None:
            body += _value(value, self.run.value_len)
        return _LR.pack(op, flags, client, 0, 0, version & 0xFFFF_FFFF, rid, 0, req) + body

    @staticmethod
    def parse(p):
        op, flags, client, _s, _fp, ver, rid, _n, req = _LR.unpack_from(p)
        key = int.from_bytes(p[LR_LEN:LR_LEN + KEY_LEN], "big")
        val = int.from_bytes(p[LR_LEN + KEY_LEN:LR_LEN + KEY_LEN + 8], "big") \
            if len(p) >= LR_LEN + KEY_LEN + 8 else None
        return op, flags, client, ver, rid, req, key, val

    def client_rx(self, client, view):
        op, _f, _c, ver, _r, req, _k, val = self.parse(view.payload)
        if op == B_READ_REPLY:
            client.complete(req, val or None)
        elif op == B_WRITE_REPLY:
            client.complete(req, ver)
        else:
            client.stray += 1

    def to_client(self, rep, op, cidx, ver, req, key, value=None):
        rep.send(self.run.client_ips[cidx], self.port, CLIENT_PORT,
                 self.msg(op, cidx, ver, rep.rid, req, key, value))

    def replica_rx(self, rep, view):
        if not rep.alive:
            return
        m = self.parse(view.payload)
        kind = self.KIND[m[0]]
        rep.cpu(self.run.draw_index(m[5], m[1], kind), kind, self.handle, rep, m)


class _CR(_Baseline):
    """Chain replication over the group's members in index order: head first, tail last.

    **Failure** (the master's reconfiguration, van Renesse & Schneider, section 3): the chain is
    the membership view (:attr:`LrRun.members`), which changes only when the master (the run's
    controller, ``detect_us`` after the failure) removes the dead server; until then the
    clients and servers keep sending to it and what they send is lost (a dead middle server:
    no write reaches the tail, no write commits; a dead tail: no read is answered either; a
    dead head: no write gets in). At the reconfiguration the chain closes over the gap: a
    dead head's successor becomes the head, a dead tail's predecessor the tail, and a dead
    middle server's predecessor sends its new successor every write the successor has not
    received (the paper's Sent list; here: per key the newest write the predecessor forwarded,
    re-sent when the successor's stored version is older: a chain forward the successor
    handles like any other). Clients retry (same value) at the new head; a retry the head does not apply
    because a later write of the object superseded it (the replicas' apply-once rule) is not
    forwarded (it took effect before the later one; its client times out)."""
    name = "cr"
    port = CR_PORT
    KIND = {B_READ: K_READ, B_WRITE: K_WRITE, B_FWD: K_FWD}

    def chain(self):
        return self.run.member_replicas()

    def reconfigure(self, dead):
        """The master removed ``dead`` (already out of the membership view)."""
        old = [r for r in self.run.replicas[:self.run.n_replicas]
               if r.index in self.run.members or r is dead]
        pos = old.index(dead)
        if 0 < pos < len(old) - 1:
            pred, succ = old[pos - 1], old[pos + 1]
            resent = 0
            for key, (ver, val, req, cidx, flags) in sorted(pred.sent.items()):
                if succ.store.get(key, (0, 0))[0] < ver:
                    pred.send(succ.host.ip, CR_PORT, CR_PORT,
                              self.msg(B_FWD, cidx, ver, pred.rid, req, key, val, flags))
                    resent += 1
            return {"resent": resent, "from_rid": pred.rid, "to_rid": succ.rid}
        return {"resent": 0, "new_head" if pos == 0 else "new_tail":
                (old[1] if pos == 0 else old[-2]).rid if len(old) > 1 else None}

    def send(self, client, i, attempt):
        ch = self.chain()
        k, f = client.keys[i], min(attempt, 255)
        if client.is_write[i]:
            m = self.msg(B_WRITE, client.index, 0, 0, client.op_id(i), k, client.value_of(i), f)
            client.host.send(ch[0].host.ip, CLIENT_PORT, CR_PORT, m)
        else:
            m = self.msg(B_READ, client.index, 0, 0, client.op_id(i), k, flags=f)
            client.host.send(ch[-1].host.ip, CLIENT_PORT, CR_PORT, m)

    def handle(self, rep, m):
        op, flags, cidx, ver, _rid, req, key, val = m
        ch = self.chain()
        pos = ch.index(rep) if rep in ch else -1
        if op == B_READ:
            v, x = rep.store.get(key, (0, 0))
            self.to_client(rep, B_READ_REPLY, cidx, v, req, key, x)
            return
        if op == B_WRITE:                         # the head versions the write
            if pos != 0:
                return                            # not the head (any more): lost
            ver = rep.store.get(key, (0, 0))[0] + 1
            if not rep.apply(key, ver, val, req) and rep.dedup:
                return                            # a superseded retry: not forwarded
        else:
            rep.apply(key, ver, val, req)
        if pos == len(ch) - 1:
            self.to_client(rep, B_WRITE_REPLY, cidx, ver, req, key)
        elif pos >= 0:
            m2 = self.msg(B_FWD, cidx, ver, rep.rid, req, key, val, flags)
            if ver > rep.sent.get(key, (0,))[0]:
                rep.sent[key] = (ver, val, req, cidx, flags)
            rep.send(ch[pos + 1].host.ip, CR_PORT, CR_PORT, m2)


class _Hermes(_Baseline):
    """Hermes-like leaderless replication (see the module doc). Timestamps are
    ``version << 3 | coordinator index`` (8 replicas at most), compared as integers.

    **Failure** (Hermes' membership change and write replay, Katsarakis et al., section 3.3):
    the group is the membership view (:attr:`LrRun.members`), changed only when the
    membership service (the run's controller, ``detect_us`` after the failure) removes the
    dead replica. Until then clients keep sending a quarter of their requests to it (lost;
    their retries go to the next member), every write's coordinator waits for the dead
    replica's ACK (no write commits) and reads of the keys those writes invalidated wait
    for a validation. At the membership change each coordinator stops waiting for the
    removed member (a write whose other ACKs are in commits: VAL, the client's reply, parked
    reads answered), and every live replica replays the writes it holds Invalid whose
    coordinator was the removed one (it coordinates them with the same timestamp: INV to the
    other members, their ACKs, VAL; the client gets the reply)."""
    name = "hermes"
    port = HERMES_PORT
    KIND = {B_READ: K_READ, B_WRITE: K_WRITE, B_INV: K_INV, B_ACK: K_ACK, B_VAL: K_VAL}

    def group(self):
        return self.run.member_replicas()

    def reconfigure(self, dead):
        """The membership service removed ``dead`` (already out of the membership view)."""
        committed = replayed = 0
        for rep in self.group():
            for kt, st in list(rep.acks.items()):
                st[0].discard(dead.rid)
                if not st[0] and kt in rep.acks:
                    self._commit(rep, *kt)
                    committed += 1
            for key, valid in sorted(rep.valid.items()):
                ts = rep.store.get(key, (0, 0))[0]
                if valid or ts & 7 != dead.index or (key, ts) in rep.acks:
                    continue
                cidx, req = rep.inv_from.get((key, ts), (None, None))
                others = [r for r in self.group() if r is not rep]
                rep.acks[(key, ts)] = [{r.rid for r in others}, cidx, req]
                val = rep.store[key][1]
                for r in others:
                    rep.send(r.host.ip, HERMES_PORT, HERMES_PORT,
                             self.msg(B_INV, cidx or 0, ts, rep.rid, req or 0, key, val, 0))
                replayed += 1
                if not others:
                    self._commit(rep, key, ts)
        return {"committed": committed, "replayed": replayed}

    def send(self, client, i, attempt):
        g = self.group()
        # a retry goes to another replica than the attempt before (the same pick, shifted)
        r = g[(int(client.picks[i] * len(g)) + attempt) % len(g)]
        k = client.keys[i]
        f = min(attempt, 255)
        if client.is_write[i]:
            m = self.msg(B_WRITE, client.index, 0, 0, client.op_id(i), k, client.value_of(i), f)
        else:
            m = self.msg(B_READ, client.index, 0, 0, client.op_id(i), k, flags=f)
        client.host.send(r.host.ip, CLIENT_PORT, HERMES_PORT, m)

    def handle(self, rep, m):
        op, flags, cidx, ts, sender, req, key, val = m
        if op == B_READ:
            if rep.valid.get(key, True):
                v, x = rep.store.get(key, (0, 0))
                self.to_client(rep, B_READ_REPLY, cidx, v, req, key, x)
            else:
                rep.parked.setdefault(key, []).append((cidx, req))
        elif op == B_WRITE:
            ts = ((rep.store.get(key, (0, 0))[0] >> 3) + 1) << 3 | rep.index
            if rep.apply(key, ts, val, req):
                rep.valid[key] = False
            others = [r for r in self.group() if r is not rep]
            rep.acks[(key, ts)] = [{r.rid for r in others}, cidx, req]
            for r in others:
                rep.send(r.host.ip, HERMES_PORT, HERMES_PORT,
                         self.msg(B_INV, cidx, ts, rep.rid, req, key, val, flags))
            if not others:
                self._commit(rep, key, ts)
        elif op == B_INV:
            if rep.apply(key, ts, val, req):
                rep.valid[key] = False
                rep.inv_from[(key, ts)] = (cidx, req)
            coord = self.run.rid_replica[sender]
            rep.send(coord.host.ip, HERMES_PORT, HERMES_PORT,
                     self.msg(B_ACK, cidx, ts, rep.rid, req, key, flags=flags))
        elif op == B_ACK:
            st = rep.acks.get((key, ts))
            if st is None:
                return
            st[0].discard(sender)
            if not st[0]:
                self._commit(rep, key, ts)
        elif op == B_VAL:
            if rep.store.get(key, (0, 0))[0] == ts:
                self._validate(rep, key)

    def _commit(self, rep, key, ts):
        _n, cidx, req = rep.acks.pop((key, ts))
        rep.inv_from.pop((key, ts), None)
        if rep.store.get(key, (0, 0))[0] == ts:
            self._validate(rep, key)
        if cidx is not None:                      # a replayed write's client may be unknown
            self.to_client(rep, B_WRITE_REPLY, cidx, ts, req, key)
        for r in self.group():
            if r is not rep:
                rep.send(r.host.ip, HERMES_PORT, HERMES_PORT,
                         self.msg(B_VAL, cidx, ts, rep.rid, req, key))

    def _validate(self, rep, key):
        rep.valid[key] = True
        for k in [k for k in rep.inv_from if k[0] == key]:
            del rep.inv_from[k]
        for cidx, req in rep.parked.pop(key, ()):
            v, x = rep.store.get(key, (0, 0))
            self.to_client(rep, B_READ_REPLY, cidx, v, req, key, x)


_SCHEME_CLASSES = {"netlr": _NetLR, "cr": _CR, "hermes": _Hermes}


# ---- the switch -----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=8)
def netlr_pipeline(n_ports=2, slots=None):
    """The pipeline the simulated NetLR switch runs: the default bitstream's programs
    (``default_pipeline()``, NetLR's among them);
    ``slots``: the same with NetLR's program built with that many slots (the slot sweep)."""
    from netstor.programs import default_pipeline
    base = default_pipeline(n_ports)
    if slots is None:
        return base
    from netstor.lang import Pipeline
    from .program import make_netlr
    progs = [make_netlr(n_ports, slots=slots) if getattr(p, "name", None) == "nl" else p
             for p in base.programs]
    return Pipeline(progs, n_ports=n_ports, guarded=True, mcast_groups=base.mcast_groups)


@functools.lru_cache(maxsize=4)
def list_model_class(base=None):
    """The compiled model (else the interpreter) with copy-list multicast groups."""
    from netstor.cluster.switch import default_model_class
    base = default_model_class() if base is None else base

    class ListGroups(base):
        def __init__(self, pipeline):
            super().__init__(pipeline, groups="list")
    ListGroups.__name__ = ListGroups.__qualname__ = f"{base.__name__}(groups=list)"
    return ListGroups


# ---- the run ----------------------------------------------------------------------------------
class LrRun:
    """One run (see the module doc). Arguments:

    * ``scheme``: ``netlr``, ``cr`` or ``hermes``; ``switch``: ``ref`` or ``model`` (NetLR's
      switch; the baselines' switch only routes: the default pipeline).
    * ``clients`` (2), ``servers`` (6), ``replicas`` (4: the group is the first ``replicas``
      servers), ``groups`` (1 replica group: all keys in it).
    * ``workers`` per server, ``service`` (spec or :class:`ServiceTime`), ``ctrl_cost`` (the
      factor on ACK/VAL service times), ``write_cost`` (on a message carrying a value to
      apply: a write, a chain forward, an invalidation; 1.0 by default).
    * ``rate_rps`` offered over all clients, ``requests`` over all clients, ``write_ratio``,
      ``n_keys`` (uniform keys), ``value_len`` bytes.
    * ``retry_us``, ``timeout_us``, ``warmup`` (fraction of each client's first operations not
      measured), ``link_ns``, ``gbps``, ``slots`` (NetLR's inconsistent-object list).
    * ``fail``: ``(replica index, at_us)`` or None; ``detect_us``: the controller's delay from
      the failure to the table writes that remove the replica.
    * ``outstanding``: None (open loop, ``rate_rps``) or a closed loop of that many
      operations outstanding per client (each starts when one ends: saturation throughput;
      ``throughput_rps`` is then the completions between the 10th and 90th percentile of the
      completion times over that span).
    * ``dedup``: replicas apply a retried write once, as ``netstor-server`` does (see
      :meth:`Replica.apply`); False: the plain rule (apply whenever the seq is newer), under
      which a retried write can take effect twice.
    * ``model_class``: the NetLR model's base class (None: compiled when available);
      ``trace``: switch input frames to record.
    """

    def __init__(self, scheme, *, clients=2, servers=6, replicas=4, groups=1, workers=6,
                 service="exp:25", ctrl_cost=1.0, write_cost=1.0, rate_rps=100_000.0, requests=10_000,
                 write_ratio=0.05, n_keys=1_000_000, value_len=64, retry_us=1_000.0,
                 timeout_us=20_000.0, warmup=0.1, link_ns=1_000, gbps=40.0, slots=1 << 17,
                 seed=1, fail=None, detect_us=1_000.0, switch="ref", model_class=None,
                 trace=0, start_ns=0, dedup=True, outstanding=None):
        if scheme not in SCHEMES:
            raise ValueError(f"scheme {scheme!r}: one of {SCHEMES}")
        if not 1 <= replicas <= min(servers, 8):
            raise ValueError("replicas: 1..min(servers, 8)")
        if groups != 1 and scheme != "netlr":
            raise ValueError("the baselines run one replica group")
        if switch not in ("ref", "model"):
            raise ValueError("switch: 'ref' or 'model'")
        self.scheme_name, self.seed = scheme, int(seed)
        self.n_clients, self.n_servers, self.n_replicas = clients, servers, replicas
        self.n_groups, self.workers, self.ctrl_cost = groups, workers, float(ctrl_cost)
        self.write_cost = float(write_cost)
        self.service = ServiceTime(service, seed=seed) if isinstance(service, str) else service
        self.rate_rps, self.requests = float(rate_rps), int(requests)
        self.write_ratio, self.n_keys, self.value_len = float(write_ratio), int(n_keys), value_len
        self.retry_ns, self.timeout_ns = int(retry_us * 1e3), int(timeout_us * 1e3)
        self.warmup, self.slots = warmup, slots
        self.fail, self.detect_ns = fail, int(detect_us * 1e3)
        self.dedup = bool(dedup)
        self.outstanding = int(outstanding) if outstanding else None
        self.switch_kind = switch if scheme == "netlr" else "route"
        self.streams = Streams(seed)
        self.draws = (self.streams.counter("service/u"), self.streams.counter("service/v"))
        self.sim = Sim()
        self.net = Network(self.sim)
        pc, ps, _ = rack_plan(clients, servers)
        self.plan = pc + ps
        self.config = route_config(self.plan)
        pipeline, mclass = None, None
        if self.switch_kind == "model":
            pipeline = netlr_pipeline(2, None if slots == 1 << 17 else slots)
            mclass = list_model_class(model_class)
        elif self.switch_kind == "ref":
            mclass = ref_model_class(slots)
        self.switch = SwitchNode(self.net, "tor", {0: port_mac(0).to_bytes(6, "big"),
                                                   1: port_mac(1).to_bytes(6, "big")},
                                 pipeline=pipeline, model_class=mclass, trace=trace)
        hosts = {}
        for h in self.plan:
            node = Host(self.net, h.name, h.mac, h.ip, port_mac(h.segment))
            self.net.connect(node, 0, self.switch, h.segment, latency_ns=link_ns, gbps=gbps)
            hosts[h.name] = node
        self.client_ips = [hosts[h.name].ip for h in pc]
        self.replicas = [Replica(self, hosts[h.name], k, 1 + k) for k, h in enumerate(ps)]
        self.rid_replica = {r.rid: r for r in self.replicas}
        # the groups: group g = the n_replicas servers from g (mod servers), copy-list order
        self.group_rids = {g: [1 + (g + j) % servers for j in range(replicas)]
                           for g in range(groups)}
        # the clients' operations
        self.clients = []
        per = [requests // clients + (1 if c < requests % clients else 0) for c in range(clients)]
        rate_c = self.rate_rps / clients
        for c, h in enumerate(pc):
            e = self.streams.generator(f"arrivals/{c}").standard_exponential(per[c])
            arr = np.floor(np.cumsum(e) * (1e9 / rate_c)).astype(np.int64) + int(start_ns)
            if self.outstanding:              # closed loop: issue times set as they start
                arr = np.full(per[c], int(start_ns), dtype=np.int64)
            g = self.streams.generator(f"ops/{c}")
            writes = g.random(per[c]) < self.write_ratio
            keys = g.integers(0, self.n_keys, per[c])
            picks = self.streams.generator(f"picks/{c}").random(per[c]).tolist()
            self.clients.append(LrClient(self, hosts[h.name], c, arr, writes, keys, picks))
        self.vip = self.replicas[0].host.ip
        self.controller_log = []
        #: the membership view (replica indices of the group): what the clients, the chain
        #: and Hermes' coordinators use; changed only by the controller (``detect_us`` after
        #: a failure), never by the failure itself
        self.members = list(range(replicas))
        self.window_end = 1 << 62
        if self.switch_kind == "model":
            self._configure_model()
        else:
            self.switch.configure(self.config)
            if self.switch_kind == "ref":
                m = self.switch.model
                m.set_groups(self.group_rids)
                for r, h in zip(self.replicas, ps):
                    m.set_rid(r.rid, h.ip, r.host.mac, h.segment)
        self.scheme = _SCHEME_CLASSES[scheme](self)

    # ---- NetLR on the data-plane model (the controller's section, .config)
    def netlr_section(self):
        """The ``netlr:`` section the controller applies (:mod:`.config`): every replica's
        addresses (rid = 1 + server index, behind wire port 1), the groups, ``down``."""
        ps = self.plan[self.n_clients:]
        return {"smac": ":".join(f"{b:02x}" for b in port_mac(1).to_bytes(6, "big")),
                "replicas": {self.replicas[k].rid: {"ip": h.ip, "mac": h.mac,
                                                    "port": h.segment}
                             for k, h in enumerate(ps)},
                "groups": {g: list(r) for g, r in self.group_rids.items()},
                "down": sorted(self._removed)}

    _removed = ()

    def _configure_model(self):
        from netstor.driver.tables import TableWriter
        from . import config as lrconfig
        writes, regs = cached_config_ops(self.config)
        self._writer = TableWriter(self.switch.pipeline)
        _, lr = lrconfig.model_writes(self.switch.pipeline, self.netlr_section(),
                                      writer=self._writer, trusted_ports=[1])
        self.switch.apply_ops(list(writes) + list(lr), regs)

    def _controller_remove(self, index):
        """The controller marks the replica down: the same section with ``down`` changed,
        applied again (table and copy-list writes only)."""
        rep = self.replicas[index]
        self._removed = tuple(self._removed) + (rep.rid,)
        entry = {"t_us": self.sim.now / 1e3, "removed_rid": rep.rid}
        self.controller_log.append(entry)
        if index in self.members:
            self.members.remove(index)
        if hasattr(self.scheme, "reconfigure"):     # CR's chain, Hermes' membership
            entry.update(self.scheme.reconfigure(rep))
        if self.switch_kind == "ref":
            self.switch.model.set_live(rep.rid, False)
        elif self.switch_kind == "model":
            from . import config as lrconfig
            _, lr = lrconfig.model_writes(self.switch.pipeline, self.netlr_section(),
                                          writer=self._writer)
            self.switch.apply_ops(list(lr))

    def kill(self, index):
        self.replicas[index].kill()

    def member_replicas(self):
        """The group as the membership view has it (a dead replica stays until removed)."""
        return [self.replicas[i] for i in self.members]

    def draw_index(self, req, attempt, kind):
        return (req * 4 + min(attempt, 3)) * 8 + kind

    def scheme_send(self, client, i, attempt):
        self.scheme.send(client, i, attempt)

    # ---- running
    def run(self, *, settle_us=None):
        t0 = time.perf_counter()
        for c in self.clients:
            c.start()
        if self.fail is not None:
            idx, at_us = self.fail
            self.sim.at(int(at_us * 1e3), self.kill, idx)
            self.sim.at(int(at_us * 1e3) + self.detect_ns, self._controller_remove, idx)
        if self.outstanding:                  # closed loop: until every operation ended
            self.sim.run()
            return self.result(time.perf_counter() - t0)
        last = max(c.arr[-1] for c in self.clients if c.n)
        self.window_end = last
        self.sim.run(until=last + self.timeout_ns + int((settle_us or 0) * 1e3))
        return self.result(time.perf_counter() - t0)

    # ---- results
    def history(self):
        """The operations as the checker takes them (``lincheck.check``): one dict each."""
        out = []
        for c in self.clients:
            for i in range(c.n):
                w = c.is_write[i]
                rec = {"client": c.index, "op": "write" if w else "read",
                       "key": str(c.keys[i]), "call": int(c.arr[i])}
                if c.lat[i] >= 0:
                    rec["return"] = int(c.done_at[i])
                    if w:
                        rec["value"] = str(c.value_of(i))
                    else:
                        rec["value"] = None if c.got[i] is None else str(c.got[i])
                else:
                    if not w:
                        continue          # a pending read constrains nothing
                    rec["return"] = None
                    rec["value"] = str(c.value_of(i))
                out.append(rec)
        return out

    def quiesce(self):
        """Run every event left (queued messages, retries up to their give-up): the state the
        replicas end in."""
        self.sim.run()
        return self.sim.now

    def final_reads(self, t_ns=None):
        """A read of every key written, at every live replica, once the run is quiet
        (:meth:`quiesce` is run first): as history records at ``t_ns`` (default: 1 us after
        the last event; client id = 100 + replica index)."""
        end = self.quiesce()
        t_ns = max(end + 1_000, t_ns or 0)
        keys = {c.keys[i] for c in self.clients for i in range(c.n) if c.is_write[i]}
        out = []
        for r in self.replicas[:self.n_replicas]:
            if not r.alive:
                continue
            for k in sorted(keys):
                v = r.store.get(k, (0, 0))[1]
                out.append({"client": 100 + r.index, "op": "read", "key": str(k),
                            "value": str(v) if v else None, "call": t_ns, "return": t_ns + 1})
        return out

    def acked_writes_lost(self):
        """Acknowledged writes that some live replica of their group does not hold (its stored
        version for the key is older than the write's committed version), after the run."""
        lost = acked = 0
        live = [r for r in self.replicas[:self.n_replicas] if r.alive]
        for c in self.clients:
            for i in range(c.n):
                if not c.is_write[i] or c.lat[i] < 0:
                    continue
                acked += 1
                ver = c.got[i]
                k = c.keys[i]
                if any(r.store.get(k, (0, 0))[0] < ver for r in live):
                    lost += 1
        return acked, lost

    def timeline(self, bin_us=1_000.0):
        """Completed operations per bin (all, writes), from time 0 to the last arrival."""
        b = int(bin_us * 1e3)
        ends = np.concatenate([c.done_at[c.done_at >= 0] for c in self.clients])
        wr = np.concatenate([c.done_at[(c.done_at >= 0) & np.asarray(c.is_write, bool)]
                             for c in self.clients])
        t1 = max(c.arr[-1] for c in self.clients if c.n)
        n = max(1, t1 // b)                   # whole bins up to the last arrival
        return {"bin_us": bin_us,
                "ops": np.bincount(ends // b, minlength=n)[:n].tolist(),
                "writes": np.bincount(wr // b, minlength=n)[:n].tolist()}

    def result(self, wall=None):
        samples, tos, done, measured = [], 0, 0, 0
        t0 = math.inf
        t1 = max(c.arr[-1] for c in self.clients if c.n)
        if self.outstanding:
            t1 = max(int(c.done_at.max()) for c in self.clients if c.n)
        wsamples = []
        for c in self.clients:
            first = min(c.n, math.ceil(self.warmup * c.n))
            if first < c.n:
                t0 = min(t0, c.arr[first])
            lat = c.lat[first:]
            to = (lat < 0) | (lat > self.timeout_ns)
            s = np.where(to, self.timeout_ns, lat)
            samples.append(s)
            wmask = np.asarray(c.is_write[first:], bool)
            wsamples.append(s[wmask])
            tos += int(to.sum())
            measured += c.n - first
        writes_done = 0
        for c in self.clients:
            d = c.done_at
            inwin = (d >= t0) & (d <= t1)
            done += int(inwin.sum())
            writes_done += int((inwin & np.asarray(c.is_write, bool)).sum())
        allsamples = np.concatenate(samples)
        span = t1 - t0
        if self.outstanding:
            ends = np.sort(np.concatenate([c.done_at[c.done_at >= 0] for c in self.clients]))
            wr = np.concatenate([c.done_at[(c.done_at >= 0) & np.asarray(c.is_write, bool)]
                                 for c in self.clients])
            if len(ends) >= 10:
                a, b = ends[len(ends) // 10], ends[(9 * len(ends)) // 10]
                done = int(((ends >= a) & (ends <= b)).sum())
                writes_done = int(((wr >= a) & (wr <= b)).sum())
                span = int(b - a)
        out = {"scheme": self.scheme_name, "switch": self.switch_kind,
               "args": {"clients": self.n_clients, "servers": self.n_servers,
                        "replicas": self.n_replicas, "groups": self.n_groups,
                        "workers": self.workers, "service": self.service.describe(),
                        "ctrl_cost": self.ctrl_cost, "write_cost": self.write_cost,
                        "rate_rps": self.rate_rps,
                        "requests": self.requests, "write_ratio": self.write_ratio,
                        "n_keys": self.n_keys, "slots": self.slots, "seed": self.seed,
                        "retry_us": self.retry_ns / 1e3, "timeout_us": self.timeout_ns / 1e3,
                        "fail": self.fail, "detect_us": self.detect_ns / 1e3,
                        "dedup": self.dedup,
                        "model": self.switch.model_class.__name__},
               "measured": measured}
        out.update(summary(allsamples, tos))
        ws = summary(np.concatenate(wsamples)) if any(len(w) for w in wsamples) else None
        out["write_latency"] = ws
        out["throughput_rps"] = round(done / span * 1e9, 3) if span > 0 else None
        out["write_throughput_rps"] = round(writes_done / span * 1e9, 3) if span > 0 else None
        out["retries"] = sum(c.retries for c in self.clients)
        out["duplicates"] = sum(c.duplicates for c in self.clients)
        out["retried_writes_not_reapplied"] = sum(r.dups for r in self.replicas)
        out["stale_writes_recorded"] = sum(r.stale_recorded for r in self.replicas)
        out["stray"] = sum(c.stray for c in self.clients)
        span_all = self.sim.now
        out["replicas"] = [{"rid": r.rid, "alive": r.alive,
                            "utilisation": round(r.busy_window_ns / (t1 * r.workers), 4)
                            if t1 else None,
                            "handled": dict(zip(KINDS, r.handled)),
                            "queue": len(r.queue)} for r in self.replicas]
        ops = sum(c.n for c in self.clients)
        out["messages_per_op"] = round(sum(sum(r.handled) for r in self.replicas) / max(1, ops), 4)
        out["switch"] = self.switch.stats()
        out["switch_passes_per_op"] = round(self.switch.frames_in / max(1, ops), 4)
        out["switch_counters"] = {k: v for k, v in self.switch.counters().items()
                                  if v and (k.startswith("nl.") or k.startswith("tm."))}
        if self.switch_kind == "model":          # the program's counters are banks
            from .program import COUNTERS
            for n in COUNTERS:
                v = self.switch.model.mem_read(f"nl.{n}", 0)
                if v:
                    out["switch_counters"][f"nl.{n}"] = v
        acked, lost = self.acked_writes_lost()
        out["acked_writes"], out["acked_writes_lost"] = acked, lost
        out["controller"] = self.controller_log
        out["sim_end_us"] = span_all / 1e3
        out["perf"] = {"events": self.sim.events,
                       "wall_s": round(wall if wall is not None else self.sim.wall_s, 3),
                       "cpu_s": round(self.sim.cpu_s, 3)}
        return out


def run_lr(scheme, **kw):
    """``LrRun(scheme, **kw).run()``."""
    return LrRun(scheme, **kw).run()
