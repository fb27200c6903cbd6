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
import heapq
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
from .header import (F_RESEND, F_RETRY, MAX_OBJECT, MULTICAST, NICE_LEN, NICE_UDP_PORT,
                     OP_ABORT, OP_ERROR, OP_GET, OP_GET_REPLY, OP_NACK, OP_PUT, OP_PUT_REPLY,
                     UNICAST, NiceHeader, Ring, default_partition, key_bytes, n_frags,
                     subgroup, vnode)

__all__ = ["NiceTimeout", "Endpoint", "Vring", "Direct", "Placement", "NiceClient",
           "NoobClient", "run_workload", "final_read", "main", "SCHEMES", "MODES", "NiceLoad",
           "load_key", "put_msgs", "nack_list", "try_flags", "GetReply"]

RESOLVE = ("0.0.0.0", 0)         # route hop: resolved by the previous node (replica-aware)
RANDOM_NODE = ("0.0.0.0", 1)     # route hop: a random node (replica-oblivious gateway)
MODES = [f"noob-{a}-{c}" for a in ("rog", "rag", "rac") for c in ("pb", "2pc")]


class NiceTimeout(Exception):
    """Every try of an operation failed."""


# ---- NICE's client rules: the history clients and netstor-load's translator both use these --
def try_flags(attempt) -> int:
    """The flags of an operation's try: :data:`.header.F_RETRY` on every try after the first
    (after a time-out, an ``ABORT`` or an ``ERROR``). A put's tries keep its ``req`` (the
    agents answer a try of a committed put at once, never applying it twice); a get's take a
    new one (idempotent; a new id keeps two answers' fragments apart)."""
    return F_RETRY if attempt else 0


def put_msgs(head, key, value, req, flags=0, only=None, frags=None):
    """``[(index, payload)]``: a NICE put's ``PUT`` fragments (at most
    :data:`.header.FRAG_DATA` data bytes each, ``nfrag`` and ``size`` the object's) with
    ``req`` and ``flags`` (:func:`try_flags`; :data:`.header.F_RESEND` for a NACK's repair);
    ``head(op, req, **fields)`` makes the NICE header (the client's address in it);
    ``only``: just these indexes (a NACK's list: those past the object are skipped);
    ``frags``: the value's :func:`.codec.frags_of`, when the caller keeps them."""
    parts = frags if frags is not None else frags_of(value)
    n = len(parts)
    return [(i, pack(head(OP_PUT, req, flags=flags, frag=i, nfrag=n, size=len(value)), key,
                     parts[i]))
            for i in (range(n) if only is None else only) if 0 <= i < n]


def nack_list(rest):
    """The fragment indexes a ``NACK`` lists (``u16`` each)."""
    return [struct.unpack_from("!H", rest, i)[0] for i in range(0, len(rest) - 1, 2)]


class GetReply:
    """One get try's ``GET_REPLY`` fragments (matched by its ``req``): the first fragment's
    ``ts``, ``nfrag`` and ``size`` name the answer, fragments of another answer are dropped.
    :meth:`add` returns None while fragments are missing, then ``(header, value)``: value
    None for ``ts`` 0 (the key holds nothing), else the reassembled object (up to
    :data:`.header.MAX_OBJECT`); ``ValueError`` for an answer whose fragments do not make
    its ``size`` (the try failed: retried)."""
    __slots__ = ("first", "got")

    def __init__(self):
        self.first, self.got = None, {}

    def add(self, h, rest):
        if self.first is None:
            if h.size > MAX_OBJECT or h.nfrag != n_frags(h.size):
                raise ValueError(f"GET_REPLY of {h.size} bytes in {h.nfrag} fragments")
            self.first = h
        first = self.first
        if h.ts != first.ts or h.nfrag != first.nfrag or h.size != first.size or \
                not 0 <= h.frag < first.nfrag:
            return None
        self.got[h.frag] = bytes(rest)
        if len(self.got) < first.nfrag:
            return None
        if not first.ts:
            return first, None
        value = b"".join(self.got[i] for i in range(first.nfrag))
        if len(value) != first.size:
            raise ValueError(f"GET_REPLY fragments of {len(value)} bytes, size {first.size}")
        return first, value


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
                for payload, to in self._put_frags(key, value, req, try_flags(attempt)):
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
                payload, to = self._get_msg(key, req, try_flags(attempt))
                self.ep.sendto(payload, to)
                reply = GetReply()
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
                    try:
                        first = reply.first
                        got = reply.add(h, rest)
                    except ValueError:
                        break
                    if first is None and reply.first is not None:
                        self.last_src = src
                    if got is not None:
                        return got[1], got[0]
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
        return [(payload, to) for to in self.fabric.put_targets(key)
                for _, payload in put_msgs(self._head, key, value, req, flags, frags=parts)]

    def _resend(self, key, value, req, h, rest, src):
        for _, payload in put_msgs(self._head, key, value, req, F_RESEND,
                                   only=nack_list(rest)):
            self.stats["resent"] += 1
            self.ep.sendto(payload, src)

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
        missing = nack_list(rest)
        if not h.flags & F_PB:          # a 2PC member's reassembly: plain PUT fragments
            for _, payload in put_msgs(self._head, key, value, req, F_RESEND, only=missing,
                                       frags=parts):
                self.stats["resent"] += 1
                self.ep.sendto(payload, src)
            return
        for i in missing:               # the primary's reassembly: one-hop NB_PUTs
            if i >= len(parts):
                continue
            self.stats["resent"] += 1
            payload = pack(self._head(T_NB_PUT, req, flags=F_RESEND | self.flags,
                                      frag=i, nfrag=len(parts), size=len(value)), key,
                           Route([src]).pack() + parts[i])
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
    __slots__ = ("sid", "op", "key", "key16", "value", "slot", "frags", "reply", "born",
                 "req", "attempt", "due")

    def __init__(self, sid, op, key, key16, value, slot, born):
        self.sid, self.op, self.key, self.key16, self.value = sid, op, key, key16, value
        self.slot, self.born = slot, born
        self.frags = frags_of(value) if op == Op.PUT else None
        self.reply = None               # a get try's GetReply
        self.req, self.attempt, self.due = 0, 0, None


class _NiceSocket:
    """The load engine's socket, speaking NICE: a storage request the engine sends (GET or
    PUT of a 64-bit key) goes out as NICE messages, and NICE answers come back as storage
    replies behind the NICE header (which :class:`_NiceReplies` unwraps into
    ``Completion.head``). The messages, their reassembly and the retry rule are the history
    clients' (:func:`put_msgs`, :class:`GetReply`, :func:`nack_list`, :func:`try_flags`).

    * GET: one ``GET`` to the key's unicast vnode; the ``GET_REPLY`` fragments (matched by
      ``req``, one ``ts``) reassembled: status OK with the value, NOT_FOUND for ts 0. An
      object larger than a storage reply's value (:data:`netstor.proto.MAX_VALUE`) is
      answered OK with an empty value and kept for the scheme (:meth:`take_value`).
    * PUT: the value's fragments (objects up to 1 MB; the engine's request carries no value:
      the scheme hands it over first, :meth:`stage`) to the key's multicast vnode (the switch
      copies them to the put set); ``PUT_REPLY``: OK. ``NACK``: the listed fragments re-sent
      to its source; ``ABORT``: the put tried again with the same ``req`` (NICE's client
      rule: the retry is recognised, never applied twice), until the engine's timeout ends
      the request; ``ERROR`` (a node without a view): status ERROR.
    * **Time-outs**: a try unanswered for ``try_ns`` (a NACK or an ABORT restarts it) is
      tried again, at most ``retries`` times and only while the engine still waits for the
      request: a put whole, with the same ``req`` and ``F_RETRY``; a get with a new ``req``
      and ``F_RETRY`` (the engine's request, and its ``req_id``, are the same). Counted in
      ``retries``; the engine counts a time-out only when every try failed.
    * Each put's first 4 bytes are replaced by its NICE ``req`` (values of 4 bytes or more):
      every stored value names the put that wrote it.
    * NICE ``req``: ``slot << 24 | counter``. A put's slot is one no other outstanding put of
      the same key holds: the agents take the top 8 bits for the client thread and treat a
      put older than a committed one of the same thread as done (:func:`.codec.who`), which
      is right when a thread's puts of a key reach every member in order (the history
      clients: one put at a time). Open-loop puts of one key overlap; on FIFO paths they
      still arrive in order, but a NACK's re-sent fragment or a retry can reorder them, so
      overlapping puts never share a slot. More than 256 outstanding puts of one key: the
      put is not sent (``slots_full``; it times out). The counter is 24 bits: a run of more
      than 16,777,215 requests (gets' retries included) raises ``RuntimeError``."""

    def __init__(self, sock, ring, mring, port, timeout_ns, stats, retries=0, try_ns=None):
        self.sock, self.ring, self.mring, self.port = sock, ring, mring, port
        self.timeout_ns, self.stats = timeout_ns, stats
        self.retries = int(retries)
        self.try_ns = int(try_ns) if try_ns else timeout_ns // (self.retries + 1)
        for k in ("retries", "bad_size"):
            stats.setdefault(k, 0)
        self.local_port = sock.getsockname()[1]
        self.pending = {}                  # NICE req -> _Pending
        self.slots = {}                    # key16 -> {slot: NICE req} (outstanding puts)
        self.ready = collections.deque()
        self.timers = []                   # heap of (due ns, NICE req): tries to time out
        self.values = {}                   # engine req_id -> (value, ns): large GET values
        self.staged = None                 # the next PUT's value (stage)
        self.counter = 0
        self.last_prune = time.monotonic_ns()

    # the socket interface the engine uses
    def fileno(self):
        return self.sock.fileno()

    def getsockname(self):
        return self.sock.getsockname()

    def close(self):
        self.sock.close()

    def stage(self, value):
        """The value of the next PUT the engine sends (its storage request carries none: a
        storage request's value holds at most 1,440 bytes)."""
        self.staged = bytes(value)

    def take_value(self, sid):
        """The value of a GET answered OK (engine ``req_id`` ``sid``) that did not fit the
        storage reply, or None."""
        got = self.values.pop(sid, None)
        return None if got is None else got[0]

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
        value, self.staged = self.staged, None
        now = time.monotonic_ns()
        if now - self.last_prune > self.timeout_ns:
            self._prune(now)
        self._timeouts(now)
        k16 = load_key(h.key)
        if h.op == Op.GET:
            p = _Pending(h.req_id, Op.GET, h.key, k16, b"", 0, now)
            self._send_get(self._req(0), p, now)
            return len(data)
        if h.op != Op.PUT:
            raise ValueError(f"scheme nice sends GET and PUT only, not {Op.name(h.op)}")
        held = self.slots.setdefault(k16, {})
        slot = next((i for i in range(_SLOTS) if i not in held), None)
        if slot is None:
            self.stats["slots_full"] += 1
            return len(data)
        req = self._req(slot)
        value = bytes(h.value) if value is None else value
        if len(value) >= 4:
            value = struct.pack("!I", req) + value[4:]
        p = self.pending[req] = _Pending(h.req_id, Op.PUT, h.key, k16, value, slot, now)
        p.req = req
        held[slot] = req
        self._send_put(p, now, try_flags(0))
        return len(data)

    def _arm(self, p, now):
        p.due = now + self.try_ns
        heapq.heappush(self.timers, (p.due, p.req))

    def _send_get(self, req, p, now):
        p.req, p.reply = req, GetReply()
        self.pending[req] = p
        self.sock.sendto(pack(self._head(OP_GET, req, flags=try_flags(p.attempt)), p.key16),
                         (vnode(p.key16, self.ring), self.port))
        self._arm(p, now)

    def _send_put(self, p, now, flags, only=None, to=None):
        to = to or (vnode(p.key16, self.mring), self.port)
        for _, payload in put_msgs(self._head, p.key16, p.value, p.req, flags, only=only,
                                   frags=p.frags):
            if only is not None:
                self.stats["resent"] += 1
            self.sock.sendto(payload, to)
        self._arm(p, now)

    def _timeouts(self, now):
        """Tries whose time is up: :meth:`_retry`."""
        t = self.timers
        while t and t[0][0] <= now:
            due, req = heapq.heappop(t)
            p = self.pending.get(req)
            if p is not None and p.req == req and p.due == due:
                self._retry(p, now)

    def _retry(self, p, now):
        """The try failed: again (:func:`try_flags`; a put with its ``req``, a get with a
        new one) while retries are left and the engine still waits for the request."""
        p.due = None
        if p.attempt >= self.retries or now >= p.born + self.timeout_ns:
            return                          # the engine's time-out ends it
        p.attempt += 1
        self.stats["retries"] += 1
        if p.op == Op.GET:
            del self.pending[p.req]         # a late answer to the old req: "late"
            self._send_get(self._req(0), p, now)
        else:
            self._send_put(p, now, try_flags(p.attempt))

    def _prune(self, now):
        """Forget requests the engine has timed out (twice its timeout: late answers are
        still matched meanwhile, then dropped as foreign), and large values the engine never
        handed to the scheme (their answers came after its time-out)."""
        self.last_prune = now
        for req in [r for r, p in self.pending.items() if now - p.born > 2 * self.timeout_ns]:
            self._done(req)
        for sid in [s for s, (_, t) in self.values.items() if now - t > 2 * self.timeout_ns]:
            del self.values[sid]

    def _done(self, req):
        p = self.pending.pop(req)
        p.due = None
        if p.op == Op.PUT:
            held = self.slots.get(p.key16, {})
            held.pop(p.slot, None)
            if not held:
                self.slots.pop(p.key16, None)
        return p

    def _reply(self, nh, p, status, value=b"", src=None):
        if len(value) > MAX_VALUE:
            self.values[p.sid] = (value, time.monotonic_ns())
            value = b""
        rep = Header(op=p.op | 0x80, key=p.key, req_id=p.sid, status=status, value=value)
        self.ready.append((nh.pack() + rep.pack(), src))

    def recvfrom(self, bufsize):
        self._timeouts(time.monotonic_ns())
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
            try:
                got = p.reply.add(h, rest)
            except ValueError:
                self.stats["bad_size"] += 1
                return self._retry(p, time.monotonic_ns())
            if got is None:
                return
            self._done(h.req)
            self.stats["by_node"][src[0]] = self.stats["by_node"].get(src[0], 0) + 1
            if got[1] is None:
                return self._reply(h, p, Status.NOT_FOUND, src=src)
            return self._reply(h, p, Status.OK, got[1], src)
        if p.op == Op.PUT and h.op == OP_PUT_REPLY:
            self._done(h.req)
            return self._reply(h, p, Status.OK, src=src)
        if p.op == Op.PUT and h.op == OP_NACK:
            self.stats["nacks"] += 1
            return self._send_put(p, time.monotonic_ns(), F_RESEND, only=nack_list(rest),
                                  to=src or None)
        if p.op == Op.PUT and h.op == OP_ABORT:
            self.stats["aborts"] += 1
            return self._send_put(p, time.monotonic_ns(), F_RETRY)
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
    PUTs; ``1 - W`` GETs), the object size (``--value-size``, up to 1 MB, :data:`max_value`:
    NICE fragments of 1,400 bytes; objects above a storage request's 1,440 bytes pass
    beside the engine's requests, :meth:`_NiceSocket.stage`, :meth:`_NiceSocket.take_value`)
    and the latency accounting are ``netstor-load``'s. A try unanswered for
    ``--nice-try-timeout`` s (default ``--timeout`` / (retries + 1)) is retried, at most
    ``--nice-retries`` times (default 2), as :class:`_NiceSocket` describes; ``--timeout``
    bounds the whole request (an ABORT is retried too: see above). ``--nice-ops``: the result's section lists every finished request (``ops``: op, key,
    NICE req, ts, status, value hex of a GET, answering node, send and answer times in ns):
    the evidence a checker takes.

    The result's ``nice`` section: ``by_node`` (answers per node address), ``aborts``,
    ``nacks``, ``resent`` (fragments), ``errors`` (ERROR answers), ``retries`` (tries after a
    try's time-out), ``bad_size`` (get answers whose fragments did not make their size:
    retried), ``slots_full``, ``late`` (answers to a forgotten request or to an earlier try
    of a retried get), ``foreign``."""
    name = "nice"
    help = ("NICE gets (unicast vnode) and puts (multicast vnode) through the switch; "
            "--target = the unicast ring's base address")
    codec = _NiceReplies()
    port = NICE_UDP_PORT
    preload = False
    max_value = MAX_OBJECT
    options = {"nice_prefix": 16, "nice_multicast": "10.11.0.0", "nice_ops": False,
               "nice_retries": 2, "nice_try_timeout": None}

    def __init__(self, n_targets, rng, seed, **options):
        super().__init__(n_targets, rng, seed, **options)
        if n_targets != 1:
            raise ValueError("scheme nice takes one --target: the unicast ring's base address")
        Ring(self.nice_multicast, self.nice_prefix, self.nice_prefix)     # checked here
        r = self.nice_retries
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r <= 100:
            raise ValueError(f"--nice-retries must be an integer in 0..100, got {r!r}")
        t = self.nice_try_timeout
        if t is not None and not 0 < t < 1e6:
            raise ValueError(f"--nice-try-timeout must be > 0 s, got {t!r}")
        self.stats = {"by_node": {}, "aborts": 0, "nacks": 0, "resent": 0, "errors": 0,
                      "retries": 0, "bad_size": 0, "slots_full": 0, "late": 0, "foreign": 0}
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
        p.add_argument("--nice-retries", type=int, default=2, metavar="N",
                       help="nice: tries after a try's time-out, within --timeout (default 2;"
                            " a put keeps its req)")
        p.add_argument("--nice-try-timeout", type=float, default=None, metavar="S",
                       help="nice: one try's time-out (default --timeout / (retries + 1))")

    def _install(self, eng):
        ip, port = eng.targets[0]
        ring = Ring(ip, self.nice_prefix, self.nice_prefix)
        mring = Ring(self.nice_multicast, self.nice_prefix, self.nice_prefix)
        if ring.base == mring.base:
            raise ValueError("scheme nice: the unicast and multicast rings are the same")
        try_ns = None if self.nice_try_timeout is None else int(self.nice_try_timeout * 1e9)
        self._sock = eng.sock = _NiceSocket(eng.sock, ring, mring, port, eng.timeout_ns,
                                            self.stats, self.nice_retries, try_ns)

    def send(self, eng, op, key, value, now_ns):
        if self._sock is None or eng.sock is not self._sock:
            self._install(eng)
        if op not in (Op.GET, Op.PUT):
            raise ValueError(f"scheme nice sends GET and PUT only, not {Op.name(op)}")
        if op == Op.PUT:
            self._sock.stage(value)             # the value beside the storage request
        eng.send(op, key, b"", target=0, now_ns=now_ns)

    def value(self, c):
        """A finished GET's value (a large one from the translator), or None."""
        r = c.reply
        big = self._sock.take_value(c.req_id) if self._sock is not None else None
        if r is None or c.op != Op.GET:
            return None
        return big if big is not None else r.value

    def record(self, c):
        value = self.value(c)
        if self.ops is None:
            return
        r, nh = c.reply, c.head
        self.ops.append({
            "op": Op.NAMES[c.op], "key": c.key,
            "status": None if r is None else Status.NAMES.get(r.status, r.status),
            "req": nh.req if nh is not None else None, "ts": nh.ts if nh is not None else None,
            "value": value.hex() if value is not None else None,
            "node": c.src[0] if c.src else None, "sent_ns": c.sent_ns,
            "done_ns": c.done_ns})

    def result(self, replies, targets):
        out = dict(self.stats, by_node=dict(sorted(self.stats["by_node"].items())))
        if self.ops is not None:
            out["ops"] = self.ops
        return out

    def config(self):
        return {"nice_prefix": self.nice_prefix, "nice_multicast": self.nice_multicast,
                "nice_retries": self.nice_retries, "nice_try_timeout": self.nice_try_timeout}

    @classmethod
    def note(cls, result):
        s = result.get("nice") or {}
        return (f"{len(s.get('by_node', {}))} nodes answered, {s.get('aborts', 0)} aborts, "
                f"{s.get('retries', 0)} retries")


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
