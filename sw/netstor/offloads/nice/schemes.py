"""NICE's client and the NOOB baselines' clients on the same agents (:mod:`.codec`), with
the histories the linearizability checker (:mod:`netstor.lincheck`) takes.

Clients (one operation at a time each; ``get(key)`` returns the value (bytes) or None when
the key holds nothing, ``put(key, value)`` returns once the put is acknowledged; both raise
:class:`NiceTimeout` when every try failed):

* :class:`NiceClient` -- NICE: a put's fragments to the key's **multicast vnode**
  (:func:`.header.vnode` on the multicast ring, UDP 7470: the switch copies them to the put
  set), a get to the key's **unicast vnode** (the switch picks the replica: division or
  primary). Without a switch (:class:`Direct`: tests) the same messages go to the put set's
  physical addresses and to one replica.
* :class:`NoobClient` -- NOOB with an access mechanism, ``rog`` (a random gateway that sends
  to a random node, which finds the primary), ``rag`` (a replica-aware gateway) or ``rac``
  (the client knows the placement), and a consistency, ``pb`` (primary-backup) or ``2pc``.
  The gateway is a storage node's NICE socket acting as the load balancer.

Every request carries the client's address: ``client`` (IPv4) and ``rsv`` (its UDP port),
so replies come straight back whatever hop the request took.

**Puts keep their** ``req`` **in every try** (after a time-out, an ``ABORT`` or an
``ERROR``): the put is named ``(client, req)`` and a node that committed it answers the try
at once instead of applying it again (:mod:`.codec`). A plain re-send with a new id could
bring an old value back after a newer put: exactly what a linearizability checker reports.
``NACK``: the listed fragments are re-sent unicast to the NACK's source. Gets use a new
``req`` per try (idempotent; a reply's fragments are matched by ``req``).

History: every client appends to a :class:`netstor.lincheck.Recorder` (call and return on
the host's monotonic clock, which all network namespaces share): op, key, value (values as
text; the workload's values are unique, ``c<client>.<n>``, padded to the object size).

:func:`run_workload` runs client threads with a random get/put mix, then reads every key
once more. ``python -m netstor.offloads.nice.schemes ...`` does the same from the command
line (one process per client host in the test bed) and writes the history as JSON.
"""
from __future__ import annotations

import argparse
import collections
import json
import queue
import random
import socket
import struct
import sys
import threading
import time

from netstor.agent.schemes import Scheme
from netstor.lincheck import Recorder
from netstor.proto import MAX_VALUE, Header, Op, Status

from .codec import (F_2PC, F_PB, T_NB_GET, T_NB_PUT, Route, frags_of, head,
                    ip_text, pack, unpack)
from .header import (F_RESEND, F_RETRY, MULTICAST, NICE_LEN, NICE_UDP_PORT, OP_ABORT,
                     OP_ERROR, OP_GET, OP_GET_REPLY, OP_NACK, OP_PUT, OP_PUT_REPLY, UNICAST,
                     NiceHeader, Ring, default_partition, key_bytes, n_frags, subgroup,
                     vnode)

__all__ = ["NiceTimeout", "Endpoint", "Vring", "Direct", "Placement", "NiceClient",
           "NoobClient", "run_workload", "final_read", "main", "SCHEMES", "MODES", "NiceLoad",
           "load_key"]

RESOLVE = ("0.0.0.0", 0)         # route hop: resolved by the previous node (replica-aware)
RANDOM_NODE = ("0.0.0.0", 1)     # route hop: a random node (replica-oblivious gateway)
MODES = [f"noob-{a}-{c}" for a in ("rog", "rag", "rac") for c in ("pb", "2pc")]


class NiceTimeout(Exception):
    """Every try of an operation failed."""


class Endpoint:
    """One UDP socket shared by client threads: a receiver thread hands every datagram to
    the operation waiting for its ``req``."""

    def __init__(self, bind=("0.0.0.0", 0)):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 23)
        except OSError:
            pass
        self.sock.bind(bind)
        self.sock.settimeout(0.2)
        self.addr = self.sock.getsockname()[:2]
        self._waiting = {}
        self._lock = threading.Lock()
        self._stop = False
        self.unmatched = 0
        self._t = threading.Thread(target=self._receiver, name="nice-endpoint", daemon=True)
        self._t.start()

    def _receiver(self):
        while not self._stop:
            try:
                raw, src = self.sock.recvfrom(65535)
            except socket.timeout:
                continue
            except OSError:
                if self._stop:
                    return
                continue
            try:
                h, key, rest = unpack(raw)
            except ValueError:
                continue
            with self._lock:
                q = self._waiting.get(h.req)
                if q is None:
                    self.unmatched += 1
            if q is not None:
                q.put((h, key, rest, src))

    def register(self, req, q):
        with self._lock:
            self._waiting[req] = q

    def unregister(self, req):
        with self._lock:
            self._waiting.pop(req, None)

    def sendto(self, payload, to):
        self.sock.sendto(payload, to)

    def close(self):
        self._stop = True
        self._t.join(1.0)
        self.sock.close()


class Vring:
    """NICE through the switch: puts to the multicast vnode, gets to the unicast vnode."""

    def __init__(self, ring: Ring = UNICAST, mring: Ring = MULTICAST, port=NICE_UDP_PORT):
        self.ring, self.mring, self.port = ring, mring, port

    def put_targets(self, key):
        return [(vnode(key, self.mring), self.port)]

    def get_target(self, key, rng):
        return (vnode(key, self.ring), self.port)


class Placement:
    """The placement a replica-aware party knows: node addresses, partitions (primary,
    replicas), the subgroup -> partition rule (:class:`.codec` configuration's fields)."""

    def __init__(self, nodes, partitions, n_partitions=None, ring: Ring = UNICAST,
                 subgroups=None):
        self.nodes = {int(k): (ip_text(v[0]), int(v[1])) for k, v in nodes.items()}
        self.parts = {int(p): v for p, v in partitions.items()}
        self.P = n_partitions or len(self.parts)
        self.ring, self.subgroups = ring, subgroups

    @classmethod
    def from_config(cls, cfg):
        r = cfg.get("ring") or {}
        return cls(cfg["nodes"], cfg["partitions"], cfg.get("n_partitions"),
                   Ring(r.get("base", "10.10.0.0"), int(r.get("prefix", 16)),
                        int(r.get("sub", 24))), cfg.get("subgroups"))

    def part_of(self, key):
        s = subgroup(key, self.ring)
        if self.subgroups is not None:
            return int(self.subgroups[s])
        return default_partition(s, self.ring.n_subgroups, self.P)

    def primary(self, key):
        return self.nodes[int(self.parts[self.part_of(key)]["primary"])]

    def replicas(self, key):
        p = self.parts[self.part_of(key)]
        return [self.nodes[int(n)] for n in p.get("replicas", [p["primary"]])]

    def put_set(self, key):
        p = self.parts[self.part_of(key)]
        return [self.nodes[int(n)] for n in p.get("put_set", p.get("replicas"))]


class Direct:
    """NICE without a switch (tests): the put set's physical addresses, gets to a random
    replica (or ``get_node``)."""

    def __init__(self, placement: Placement, get_node=None):
        self.pl, self.get_node = placement, get_node

    def put_targets(self, key):
        return self.pl.put_set(key)

    def get_target(self, key, rng):
        if self.get_node is not None:
            return self.pl.nodes[self.get_node]
        return rng.choice(self.pl.replicas(key))


class _Client:
    scheme = ""

    def __init__(self, *, client_id=0, bind=("0.0.0.0", 0), timeout=0.5, tries=30,
                 recorder=None, seed=None, endpoint=None, backoff=0.05):
        self.client_id = client_id
        self.timeout, self.tries, self.backoff = timeout, tries, backoff
        self.recorder = recorder
        self.rng = random.Random(seed)
        self._own = endpoint is None
        self.ep = endpoint or Endpoint(bind)
        self.addr = self.ep.addr
        self._req = (client_id & 0xFF) << 24
        self.stats = {"gets": 0, "puts": 0, "tries": 0, "retries": 0, "timeouts": 0,
                      "aborts": 0, "nacks": 0, "resent": 0, "errors": 0}
        self.unavailable = []      # (start, end) monotonic: puts that needed a retry

    def close(self):
        if self._own:
            self.ep.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _next_req(self):
        self._req = (self._req & 0xFF000000) | ((self._req + 1) & 0x00FFFFFF)
        return self._req

    def _head(self, op, req, **kw):
        return head(op, client=self.addr[0] if self.addr[0] != "0.0.0.0" else 0,
                    rsv=self.addr[1], req=req, **kw)

    # ---- put -------------------------------------------------------------------------------
    def _put_frags(self, key, value, req, flags):
        """``[(payload, to)]`` of one try of a put."""
        raise NotImplementedError

    def _resend(self, key, value, req, h, rest, src):
        """Re-send what a NACK lists."""
        raise NotImplementedError

    def _put(self, key, value):
        req = self._next_req()
        q = queue.Queue()
        self.ep.register(req, q)
        t0 = time.monotonic()
        retried = False
        try:
            for attempt in range(self.tries):
                self.stats["tries"] += 1
                if attempt:
                    self.stats["retries"] += 1
                    retried = True
                for payload, to in self._put_frags(key, value, req,
                                                   F_RETRY if attempt else 0):
                    self.ep.sendto(payload, to)
                end = time.monotonic() + self.timeout
                while True:
                    left = end - time.monotonic()
                    if left <= 0:
                        self.stats["timeouts"] += 1
                        break
                    try:
                        h, _, rest, src = q.get(timeout=left)
                    except queue.Empty:
                        self.stats["timeouts"] += 1
                        break
                    if h.op == OP_PUT_REPLY:
                        if retried:
                            self.unavailable.append((t0, time.monotonic()))
                        return h
                    if h.op == OP_NACK:
                        self.stats["nacks"] += 1
                        self._resend(key, value, req, h, rest, src)
                        end = time.monotonic() + self.timeout
                    elif h.op in (OP_ABORT, OP_ERROR):
                        self.stats["aborts" if h.op == OP_ABORT else "errors"] += 1
                        time.sleep(self.backoff)
                        break
        finally:
            self.ep.unregister(req)
        raise NiceTimeout(f"{self.scheme}: put of {key!r}: no answer after {self.tries} tries")

    def _missing(self, rest):
        return [struct.unpack_from("!H", rest, i)[0] for i in range(0, len(rest) - 1, 2)]

    # ---- get -------------------------------------------------------------------------------
    def _get_msg(self, key, req, flags):
        raise NotImplementedError

    def _get(self, key):
        for attempt in range(self.tries):
            req = self._next_req()
            q = queue.Queue()
            self.ep.register(req, q)
            try:
                self.stats["tries"] += 1
                if attempt:
                    self.stats["retries"] += 1
                payload, to = self._get_msg(key, req, F_RETRY if attempt else 0)
                self.ep.sendto(payload, to)
                got, n, first = {}, None, None
                end = time.monotonic() + self.timeout
                while True:
                    left = end - time.monotonic()
                    if left <= 0:
                        break
                    try:
                        h, _, rest, src = q.get(timeout=left)
                    except queue.Empty:
                        break
                    if h.op != OP_GET_REPLY:
                        continue
                    if first is None:
                        first, n = h, h.nfrag
                        self.last_src = src
                    if h.ts != first.ts:
                        continue
                    got[h.frag] = rest
                    if len(got) == n:
                        if not first.ts:
                            return None, first
                        value = b"".join(got[i] for i in range(n))
                        if len(value) != first.size:
                            break
                        return value, first
                self.stats["timeouts"] += 1
            finally:
                self.ep.unregister(req)
        raise NiceTimeout(f"{self.scheme}: get of {key!r}: no answer after {self.tries} tries")

    # ---- the recorded operations ----------------------------------------------------------
    def put(self, key, value):
        value = value.encode() if isinstance(value, str) else bytes(value)
        token = None
        if self.recorder is not None:
            token = self.recorder.call(self.client_id, "write", _key_text(key),
                                       _val_text(value))
        h = self._put(key_bytes(key), value)
        if token is not None:
            self.recorder.ret(token)
            with self.recorder._lock:
                self.recorder.ops[token].update(ts=h.ts)
        self.stats["puts"] += 1

    def get(self, key):
        token = None
        if self.recorder is not None:
            token = self.recorder.call(self.client_id, "read", _key_text(key))
        value, first = self._get(key_bytes(key))
        if token is not None:
            self.recorder.ret(token, None if value is None else _val_text(value))
            with self.recorder._lock:           # where the answer came from (evidence)
                self.recorder.ops[token].update(src=self.last_src[0], ts=first.ts)
        self.stats["gets"] += 1
        return value

    # NetLR-style names for run_workload
    def write(self, key, value):
        return self.put(key, value)

    def read(self, key):
        return self.get(key)


def _key_text(key) -> str:
    return key_bytes(key).rstrip(b"\0").decode(errors="replace")


def _val_text(value: bytes) -> str:
    """A value as the history keeps it: the text before the padding (values are unique
    prefixes ``c<client>.<n>`` padded with '.'), with the length."""
    return f"{value.rstrip(b'.').decode(errors='replace')}/{len(value)}"


class NiceClient(_Client):
    """NICE (module docstring); ``fabric``: :class:`Vring` (through the switch) or
    :class:`Direct` (no switch)."""
    scheme = "nice"

    def __init__(self, fabric=None, **kw):
        super().__init__(**kw)
        self.fabric = fabric or Vring()

    def _put_frags(self, key, value, req, flags):
        parts = frags_of(value)
        out = []
        for to in self.fabric.put_targets(key):
            for i, chunk in enumerate(parts):
                out.append((pack(self._head(OP_PUT, req, flags=flags, frag=i,
                                            nfrag=len(parts), size=len(value)), key, chunk),
                            to))
        return out

    def _resend(self, key, value, req, h, rest, src):
        parts = frags_of(value)
        for i in self._missing(rest):
            if i < len(parts):
                self.stats["resent"] += 1
                self.ep.sendto(pack(self._head(OP_PUT, req, flags=F_RESEND, frag=i,
                                               nfrag=len(parts), size=len(value)), key,
                                    parts[i]), src)

    def _get_msg(self, key, req, flags):
        return (pack(self._head(OP_GET, req, flags=flags), key),
                self.fabric.get_target(key, self.rng))


class NoobClient(_Client):
    """NOOB (module docstring): ``access`` rog / rag / rac, ``consistency`` pb / 2pc;
    ``placement`` (:class:`Placement`: RAC's knowledge), ``gateways`` (``[(ip, port)]``:
    the load balancers, storage nodes' NICE sockets; ROG and RAG)."""

    def __init__(self, placement: Placement, access="rac", consistency="pb", gateways=(),
                 **kw):
        super().__init__(**kw)
        if access not in ("rog", "rag", "rac") or consistency not in ("pb", "2pc"):
            raise ValueError(f"NOOB {access}/{consistency}")
        if access != "rac" and not gateways:
            raise ValueError(f"NOOB {access} needs a gateway")
        self.pl, self.access, self.consistency = placement, access, consistency
        self.gateways = [(ip_text(a), int(p)) for a, p in gateways]
        self.scheme = f"noob-{access}-{consistency}"
        self.flags = F_2PC if consistency == "2pc" else 0

    def _route(self, key, get):
        if self.access == "rog":
            return [self.rng.choice(self.gateways), RANDOM_NODE, RESOLVE]
        if self.access == "rag":
            return [self.rng.choice(self.gateways), RESOLVE]
        if get and self.consistency == "2pc":
            return [self.rng.choice(self.pl.replicas(key))]
        return [self.pl.primary(key)]

    def _put_frags(self, key, value, req, flags):
        route = Route(self._route(key, False))
        parts = frags_of(value)
        first = route.hops[0]
        return [(pack(self._head(T_NB_PUT, req, flags=flags | self.flags, frag=i,
                                 nfrag=len(parts), size=len(value)), key,
                      route.pack() + chunk), first) for i, chunk in enumerate(parts)]

    def _resend(self, key, value, req, h, rest, src):
        parts = frags_of(value)
        for i in self._missing(rest):
            if i >= len(parts):
                continue
            self.stats["resent"] += 1
            if h.flags & F_PB:          # the primary's reassembly: a one-hop NB_PUT
                payload = pack(self._head(T_NB_PUT, req, flags=F_RESEND | self.flags,
                                          frag=i, nfrag=len(parts), size=len(value)), key,
                               Route([src]).pack() + parts[i])
            else:                       # a 2PC member's: a plain PUT fragment
                payload = pack(self._head(OP_PUT, req, flags=F_RESEND, frag=i,
                                          nfrag=len(parts), size=len(value)), key, parts[i])
            self.ep.sendto(payload, src)

    def _get_msg(self, key, req, flags):
        route = Route(self._route(key, True))
        return (pack(self._head(T_NB_GET, req, flags=flags | self.flags), key, route.pack()),
                route.hops[0])


# ---- workload ------------------------------------------------------------------------------
def _value(cid, n, size):
    base = f"c{cid}.{n}".encode()
    return base + b"." * max(0, size - len(base))


def run_workload(make_client, *, clients=2, ops=200, keys=8, write_ratio=0.3, seed=1,
                 recorder=None, client_base=0, final_reads=True, stop_at=None, size=16,
                 key_prefix="k"):
    """``clients`` threads (``make_client(client_id, recorder)``), ``ops`` operations each
    (puts with ratio ``write_ratio`` of objects of ``size`` bytes; ``stop_at``: a monotonic
    time to stop), then one get of every key. ``{"history", "ops", "stats", "errors",
    "unavailable"}``."""
    rec = recorder if recorder is not None else Recorder()
    names = [f"{key_prefix}{i}" for i in range(keys)]
    stats, errors, unavailable = [], [], []
    lock = threading.Lock()

    def worker(cid):
        rng = random.Random(seed * 1000 + cid)
        try:
            with make_client(cid, rec) as c:
                n = 0
                for _ in range(ops):
                    if stop_at is not None and time.monotonic() >= stop_at:
                        break
                    key = rng.choice(names)
                    try:
                        if rng.random() < write_ratio:
                            n += 1
                            c.put(key, _value(cid, n, size))
                        else:
                            c.get(key)
                    except NiceTimeout as e:
                        with lock:
                            errors.append(str(e))
                with lock:
                    stats.append(dict(c.stats, client=cid))
                    unavailable.extend(c.unavailable)
        except Exception as e:
            with lock:
                errors.append(f"client {cid}: {type(e).__name__}: {e}")
    threads = [threading.Thread(target=worker, args=(client_base + i,), daemon=True)
               for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if final_reads:
        final_read(make_client, client_base + clients, rec, names, errors)
    hist = rec.history()
    return {"history": hist, "ops": len(hist), "stats": stats, "errors": errors,
            "unavailable": unavailable}


def final_read(make_client, cid, rec, names, errors=None):
    with make_client(cid, rec) as c:
        for key in names:
            try:
                c.get(key)
            except NiceTimeout as e:
                if errors is not None:
                    errors.append(f"final read {key}: {e}")


# ---- netstor-load --------------------------------------------------------------------------
def load_key(key: int) -> bytes:
    """The NICE key of ``netstor-load``'s 64-bit key: 8 bytes big-endian, zero-padded to
    16."""
    return key_bytes(int(key).to_bytes(8, "big"))


_SLOTS = 256                    # the top 8 bits of a NICE req: who put it (codec.who)
_COUNTER = (1 << 24) - 1        # the low 24 bits: the run's request counter


class _Pending:
    __slots__ = ("sid", "op", "key", "key16", "value", "slot", "frags", "got", "ts", "size",
                 "born")

    def __init__(self, sid, op, key, key16, value, slot, born):
        self.sid, self.op, self.key, self.key16, self.value = sid, op, key, key16, value
        self.slot, self.born = slot, born
        self.frags = frags_of(value) if op == Op.PUT else None
        self.got, self.ts, self.size = {}, None, 0


class _NiceSocket:
    """The load engine's socket, speaking NICE: a storage request the engine sends (GET or
    PUT of a 64-bit key) goes out as NICE messages, and NICE answers come back as storage
    replies behind the NICE header (which :class:`_NiceReplies` unwraps into
    ``Completion.head``).

    * GET: one ``GET`` to the key's unicast vnode; the ``GET_REPLY`` fragments (matched by
      ``req``, one ``ts``) reassembled: status OK with the value, NOT_FOUND for ts 0, ERROR
      for an object larger than a storage reply holds (``oversize``).
    * PUT: the value's fragments to the key's multicast vnode (the switch copies them to the
      put set); ``PUT_REPLY``: OK. ``NACK``: the listed fragments re-sent to its source;
      ``ABORT``: the put tried again with the same ``req`` (NICE's client rule: the retry is
      recognised, never applied twice), until the engine's timeout ends the request;
      ``ERROR`` (a node without a view): status ERROR.
    * Each put's first 4 bytes are replaced by its NICE ``req`` (values of 4 bytes or more):
      every stored value names the put that wrote it.
    * NICE ``req``: ``slot << 24 | counter``. A put's slot is one no other outstanding put of
      the same key holds: the agents take the top 8 bits for the client thread and treat a
      put older than a committed one of the same thread as done (:func:`.codec.who`), which
      is right when a thread's puts of a key reach every member in order (the history
      clients: one put at a time). Open-loop puts of one key overlap; on FIFO paths they
      still arrive in order, but a NACK's re-sent fragment or an ABORT's retry can reorder
      them, so overlapping puts never share a slot. More than 256 outstanding puts of one
      key: the put is not sent (``slots_full``; it times out). The counter is 24 bits: a run
      of more than 16,777,215 requests raises ``RuntimeError``."""

    def __init__(self, sock, ring, mring, port, timeout_ns, stats):
        self.sock, self.ring, self.mring, self.port = sock, ring, mring, port
        self.timeout_ns, self.stats = timeout_ns, stats
        self.local_port = sock.getsockname()[1]
        self.pending = {}                  # NICE req -> _Pending
        self.slots = {}                    # key16 -> {slot: NICE req} (outstanding puts)
        self.ready = collections.deque()
        self.counter = 0
        self.last_prune = time.monotonic_ns()

    # the socket interface the engine uses
    def fileno(self):
        return self.sock.fileno()

    def getsockname(self):
        return self.sock.getsockname()

    def close(self):
        self.sock.close()

    def _req(self, slot):
        if self.counter >= _COUNTER:
            raise RuntimeError("nice: more than 16,777,215 requests in one run (the NICE req "
                               "counter is 24 bits)")
        self.counter += 1
        return (slot << 24) | self.counter

    def _head(self, op, req, **kw):
        return head(op, rsv=self.local_port, req=req, **kw)

    def sendto(self, data, addr):
        h = Header.unpack(data)
        now = time.monotonic_ns()
        if now - self.last_prune > self.timeout_ns:
            self._prune(now)
        k16 = load_key(h.key)
        if h.op == Op.GET:
            req = self._req(0)
            self.pending[req] = _Pending(h.req_id, Op.GET, h.key, k16, b"", 0, now)
            return self.sock.sendto(pack(self._head(OP_GET, req), k16),
                                    (vnode(k16, self.ring), self.port))
        if h.op != Op.PUT:
            raise ValueError(f"scheme nice sends GET and PUT only, not {Op.name(h.op)}")
        held = self.slots.setdefault(k16, {})
        slot = next((i for i in range(_SLOTS) if i not in held), None)
        if slot is None:
            self.stats["slots_full"] += 1
            return len(data)
        req = self._req(slot)
        value = bytes(h.value)
        if len(value) >= 4:
            value = struct.pack("!I", req) + value[4:]
        p = self.pending[req] = _Pending(h.req_id, Op.PUT, h.key, k16, value, slot, now)
        held[slot] = req
        self._send_put(req, p, 0)
        return len(data)

    def _send_put(self, req, p, flags, only=None):
        to = (vnode(p.key16, self.mring), self.port)
        for i, chunk in enumerate(p.frags):
            if only is None or i in only:
                self.sock.sendto(pack(self._head(OP_PUT, req, flags=flags, frag=i,
                                                 nfrag=len(p.frags), size=len(p.value)),
                                      p.key16, chunk), to)

    def _prune(self, now):
        """Forget requests the engine has timed out (twice its timeout: late answers are
        still matched meanwhile, then dropped as foreign)."""
        self.last_prune = now
        for req in [r for r, p in self.pending.items() if now - p.born > 2 * self.timeout_ns]:
            self._done(req)

    def _done(self, req):
        p = self.pending.pop(req)
        if p.op == Op.PUT:
            held = self.slots.get(p.key16, {})
            held.pop(p.slot, None)
            if not held:
                self.slots.pop(p.key16, None)
        return p

    def _reply(self, nh, p, status, value=b"", src=None):
        rep = Header(op=p.op | 0x80, key=p.key, req_id=p.sid, status=status, value=value)
        self.ready.append((nh.pack() + rep.pack(), src))

    def recvfrom(self, bufsize):
        while not self.ready:
            data, src = self.sock.recvfrom(65535)       # BlockingIOError: nothing more
            self._take(data, src)
        return self.ready.popleft()

    def _take(self, data, src):
        try:
            h, key, rest = unpack(data)
        except ValueError:
            self.stats["foreign"] += 1
            return
        p = self.pending.get(h.req)
        if p is None or key != p.key16:
            self.stats["late" if p is None else "foreign"] += 1
            return
        if p.op == Op.GET and h.op == OP_GET_REPLY:
            if p.ts is None:
                p.ts, p.size = h.ts, h.size
            if h.ts != p.ts or h.nfrag != n_frags(p.size):
                return                                  # a stale answer's fragment
            p.got[h.frag] = rest
            if len(p.got) < h.nfrag:
                return
            self._done(h.req)
            self.stats["by_node"][src[0]] = self.stats["by_node"].get(src[0], 0) + 1
            if not h.ts:
                return self._reply(h, p, Status.NOT_FOUND, src=src)
            value = b"".join(p.got[i] for i in range(h.nfrag))
            if len(value) > MAX_VALUE:
                self.stats["oversize"] += 1
                return self._reply(h, p, Status.ERROR, src=src)
            return self._reply(h, p, Status.OK, value, src)
        if p.op == Op.PUT and h.op == OP_PUT_REPLY:
            self._done(h.req)
            return self._reply(h, p, Status.OK, src=src)
        if p.op == Op.PUT and h.op == OP_NACK:
            self.stats["nacks"] += 1
            missing = [struct.unpack_from("!H", rest, i)[0] for i in range(0, len(rest) - 1, 2)]
            self.stats["resent"] += len(missing)
            to = (vnode(p.key16, self.mring), self.port)
            for i in missing:
                if i < len(p.frags):
                    self.sock.sendto(pack(self._head(OP_PUT, h.req, flags=F_RESEND, frag=i,
                                                     nfrag=len(p.frags), size=len(p.value)),
                                          p.key16, p.frags[i]), src or to)
            return
        if p.op == Op.PUT and h.op == OP_ABORT:
            self.stats["aborts"] += 1
            return self._send_put(h.req, p, F_RETRY)
        if h.op == OP_ERROR:
            self.stats["errors"] += 1
            self._done(h.req)
            return self._reply(h, p, Status.ERROR, src=src)
        self.stats["foreign"] += 1


class _NiceReplies:
    """The engine's codec: the storage reply behind the NICE header :class:`_NiceSocket`
    puts before it."""

    def split_reply(self, data):
        if len(data) >= NICE_LEN + 32 and data[0] in (OP_GET_REPLY, OP_PUT_REPLY, OP_ERROR):
            return NiceHeader.unpack(data), data[NICE_LEN:]
        return None


class NiceLoad(Scheme):
    """``netstor-load --scheme nice --target RING[:7470]``: every request a NICE GET (to
    the key's unicast vnode: the switch picks the division's replica or the primary) or PUT
    (its fragments to the key's multicast vnode: the switch copies them to the put set;
    NICE-2PC on the nodes; answered by the primary), as :class:`_NiceSocket` describes. The
    target is the **unicast ring's base address** (``--nice-prefix`` its length, default 16;
    ``--nice-multicast`` the multicast ring's base, default 10.11.0.0, same length) and the
    NICE port; the key's vnodes come from :func:`.header.vnode` of :func:`load_key`.
    Arrivals, keys (``--keys``, ``--zipf``), the mix (``--write-ratio``: the fraction of
    PUTs; ``1 - W`` GETs), the object size (``--value-size``, at most 1,440 bytes: a storage
    reply's value; two NICE fragments above 1,400) and the latency accounting are
    ``netstor-load``'s. No retries on a timeout (an ABORT is retried: see above).
    ``--nice-ops``: the result's section lists every finished request (``ops``: op, key,
    NICE req, ts, status, value hex of a GET, answering node, send and answer times in ns):
    the evidence a checker takes.

    The result's ``nice`` section: ``by_node`` (answers per node address), ``aborts``,
    ``nacks``, ``resent`` (fragments), ``errors`` (ERROR answers), ``oversize``,
    ``slots_full``, ``late`` (answers after the request was forgotten), ``foreign``."""
    name = "nice"
    help = ("NICE gets (unicast vnode) and puts (multicast vnode) through the switch; "
            "--target = the unicast ring's base address")
    codec = _NiceReplies()
    port = NICE_UDP_PORT
    preload = False
    options = {"nice_prefix": 16, "nice_multicast": "10.11.0.0", "nice_ops": False}

    def __init__(self, n_targets, rng, seed, **options):
        super().__init__(n_targets, rng, seed, **options)
        if n_targets != 1:
            raise ValueError("scheme nice takes one --target: the unicast ring's base address")
        Ring(self.nice_multicast, self.nice_prefix, self.nice_prefix)     # checked here
        self.stats = {"by_node": {}, "aborts": 0, "nacks": 0, "resent": 0, "errors": 0,
                      "oversize": 0, "slots_full": 0, "late": 0, "foreign": 0}
        self._sock = None
        self.ops = [] if self.nice_ops else None

    @classmethod
    def add_arguments(cls, p):
        p.add_argument("--nice-prefix", type=int, default=16, metavar="LEN",
                       help="nice: the vrings' prefix length (default 16)")
        p.add_argument("--nice-multicast", default="10.11.0.0", metavar="BASE",
                       help="nice: the multicast vring's base address (default 10.11.0.0)")
        p.add_argument("--nice-ops", action="store_true",
                       help="nice: list every finished request in the result")

    def _install(self, eng):
        ip, port = eng.targets[0]
        ring = Ring(ip, self.nice_prefix, self.nice_prefix)
        mring = Ring(self.nice_multicast, self.nice_prefix, self.nice_prefix)
        if ring.base == mring.base:
            raise ValueError("scheme nice: the unicast and multicast rings are the same")
        self._sock = eng.sock = _NiceSocket(eng.sock, ring, mring, port, eng.timeout_ns,
                                            self.stats)

    def send(self, eng, op, key, value, now_ns):
        if self._sock is None or eng.sock is not self._sock:
            self._install(eng)
        if op not in (Op.GET, Op.PUT):
            raise ValueError(f"scheme nice sends GET and PUT only, not {Op.name(op)}")
        eng.send(op, key, value, target=0, now_ns=now_ns)

    def record(self, c):
        if self.ops is None:
            return
        r, nh = c.reply, c.head
        self.ops.append({
            "op": Op.NAMES[c.op], "key": c.key,
            "status": None if r is None else Status.NAMES.get(r.status, r.status),
            "req": nh.req if nh is not None else None, "ts": nh.ts if nh is not None else None,
            "value": r.value.hex() if r is not None and c.op == Op.GET else None,
            "node": c.src[0] if c.src else None, "sent_ns": c.sent_ns,
            "done_ns": c.done_ns})

    def result(self, replies, targets):
        out = dict(self.stats, by_node=dict(sorted(self.stats["by_node"].items())))
        if self.ops is not None:
            out["ops"] = self.ops
        return out

    def config(self):
        return {"nice_prefix": self.nice_prefix, "nice_multicast": self.nice_multicast}

    @classmethod
    def note(cls, result):
        s = result.get("nice") or {}
        return f"{len(s.get('by_node', {}))} nodes answered, {s.get('aborts', 0)} aborts"


SCHEMES = {"nice": NiceLoad}


# ---- command line --------------------------------------------------------------------------
def _addr(text, default_port=NICE_UDP_PORT):
    host, sep, port = text.rpartition(":")
    return (host, int(port)) if sep else (text, default_port)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.offloads.nice.schemes",
                                 description="NICE / NOOB clients: a random get/put workload "
                                             "with its history")
    ap.add_argument("--scheme", choices=["nice", *MODES], required=True)
    ap.add_argument("--placement", help="noob: the nodes' configuration (JSON file)")
    ap.add_argument("--gateway", action="append", default=[], help="noob rog/rag: IP[:PORT]")
    ap.add_argument("--bind", default="0.0.0.0")
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--client-base", type=int, default=0)
    ap.add_argument("--ops", type=int, default=1 << 20)
    ap.add_argument("--duration", type=float)
    ap.add_argument("--keys", type=int, default=8)
    ap.add_argument("--key-prefix", default="k")
    ap.add_argument("--size", type=int, default=16, help="object size (bytes)")
    ap.add_argument("--write-ratio", type=float, default=0.3)
    ap.add_argument("--timeout", type=float, default=0.5)
    ap.add_argument("--tries", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--final-reads", action="store_true")
    ap.add_argument("--only-final-reads", action="store_true")
    ap.add_argument("--write-each", action="store_true",
                    help="no workload: put every key once (keys --key-base..)")
    ap.add_argument("--key-base", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    shared = Endpoint((a.bind, 0))
    common = dict(timeout=a.timeout, tries=a.tries, endpoint=shared)
    if a.scheme == "nice":
        def make(cid, rec):
            return NiceClient(Vring(), client_id=cid, recorder=rec, seed=cid, **common)
    else:
        if not a.placement:
            ap.error("noob schemes need --placement")
        pl = Placement.from_config(json.loads(open(a.placement).read()))
        _, access, cons = a.scheme.split("-")
        gws = [_addr(g) for g in a.gateway]

        def make(cid, rec):
            return NoobClient(pl, access, cons, gws, client_id=cid, recorder=rec, seed=cid,
                              **common)
    t0 = time.monotonic()
    if a.only_final_reads or a.write_each:
        rec, errors = Recorder(), []
        if a.write_each:
            with make(a.client_base, rec) as c:
                for i in range(a.key_base, a.key_base + a.keys):
                    try:
                        c.put(f"{a.key_prefix}{i}", _value(a.client_base, i, a.size))
                    except NiceTimeout as e:
                        errors.append(str(e))
        else:
            final_read(make, a.client_base, rec,
                       [f"{a.key_prefix}{i}" for i in range(a.keys)], errors)
        res = {"history": rec.history(), "stats": [], "errors": errors, "unavailable": []}
    else:
        res = run_workload(make, clients=a.clients, ops=a.ops, keys=a.keys, size=a.size,
                           write_ratio=a.write_ratio, seed=a.seed, client_base=a.client_base,
                           final_reads=a.final_reads, key_prefix=a.key_prefix,
                           stop_at=t0 + a.duration if a.duration else None)
    shared.close()
    res.update(scheme=a.scheme, seconds=round(time.monotonic() - t0, 3),
               ops=len(res["history"]))
    with open(a.out, "w") as f:
        json.dump(res, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
