"""NICE in the storage agents: ``netstor-server``'s side (NICE-2PC on LMDB, the handoff
database, forwarded gets, fragments and NACK repair, rejoin catch-up, primary promotion) and
the NOOB baselines' server side (primary-backup and 2PC behind a gateway or a client).

The server's NICE socket (``--nice-port``, default 7470) speaks NICE itself
(:attr:`ServerCodec.serves`): every datagram is the 26-byte header (:mod:`.header`), the
16-byte key and the rest, served in the socket's receiver thread in arrival order; a timer
thread of the codec sends NACKs, aborts puts whose acks are missing and re-sends TS.

Membership (the node's view)
    A node learns its place from the metadata service (or a test): :data:`T_CONFIG`, a JSON
    object ``{"node": id, "nodes": {id: [ip, port]}, "n_partitions": P, "ring": {"base",
    "prefix", "sub"}, "subgroups": [partition of subgroup s, ...] (optional: else
    :func:`.header.default_partition`), "partitions": {p: {"primary": id, "replicas": [ids],
    "put_set": [ids], "handoff": id or null}}, "fanout": bool, "metadata": [ip, port] or
    null}`` (:meth:`NiceCodec.configure` in-process). ``put_set`` is who receives a put's
    fragments (the switch's copy list: live replicas + handoff + a rejoining node);
    ``replicas`` (without the handoff) serve gets. A node computes an object's partition from
    its key (the subgroup map), never from the packet's ``part``. ``fanout``: the node
    sends TS to every put-set member's physical address (no switch: tests, the NOOB-2PC
    baseline); else to the key's multicast vnode (:func:`.header.vnode`, port 7470), where
    the switch copies it.

Where replies go
    To ``(client, rsv)``: the header's ``client`` address and, **in ``rsv``, the client's UDP
    port** (the agents' use of the reserved field; the switch ignores it). A client always
    sets it, so a reply finds the client whatever hop the request took (a forwarded get, a
    NOOB gateway). ``rsv`` 0: the datagram's source port.

NICE-2PC (every member of the put set; the primary is one of them)
    1. ``PUT`` fragments (``frag`` of ``nfrag``, ``size``, ``client``, ``req``; at most
       :data:`.header.FRAG_DATA` bytes each) are reassembled per put id ``(client, req,
       key)``. A member with the whole object **locks** it, **logs** it (the pending record
       in LMDB, the log and the pending store in one: ``np`` + key + client + req), and sends
       ``PUT_ACK`` (``frag`` = its node id) to the primary's physical address. A put the
       member already committed (its record's last req of that client >= ``req``: a retry)
       is answered ``PUT_ACK`` with :data:`F_DONE`.
    2. Missing fragments: :data:`NACK_AFTER` s after the last fragment, ``NACK`` to the
       client with the missing indexes (``u16`` each, at most :data:`NACK_MAX` per NACK);
       the client re-sends them unicast to the NACK's source (this node).
    3. The primary, with the whole object and a ``PUT_ACK`` from every other member of the
       partition's current put set, makes the timestamp: ``ts`` = the object's next version
       (its stored ts and any ts it assigned, + 1), the quadruplet ``(primary node, ts,
       client, req)`` stored with the object; sends ``TS`` to the put set (multicast vnode or
       fanout) and commits itself.
    4. A member receiving ``TS`` for a put it holds pending commits it (**newest timestamp
       wins**: ``(ts, primary)`` greater than the stored one replaces the value; the
       client's last req is recorded either way), deletes the pending record, releases the
       lock and answers ``TS_ACK``. ``TS`` for a put it already committed: ``TS_ACK`` again;
       for a put it does not hold: ignored (counted ``ni_ts_unknown``: it never acked it, so
       the primary cannot be waiting for it).
    5. The primary, with every ``TS_ACK``, answers ``PUT_REPLY`` to the client. Missing
       ``PUT_ACK`` :data:`ACK_TIMEOUT` s after the primary's copy completed: ``ABORT`` to the
       client (it retries with the same ``req``) and the silent members reported to the
       metadata service (:data:`T_REPORT`, ``ni_reports``). Missing ``TS_ACK``: ``TS`` re-sent
       unicast to them and reported; a configuration without them (the metadata service hid
       them) lets the put finish. A member holding a put locked :data:`LOCK_TIMEOUT` s
       asks the primary (:data:`T_QUERY`); no answer: it reports the primary (a failed
       primary is found by its secondaries). **Pending puts stay locked after an ABORT**
       (a member that acked keeps its lock until a TS or a promotion's discard): a late
       ``PUT_ACK`` of an aborted try is still true when the retry counts it.

    **Retries keep** ``req``: a put is named by ``(client, req)`` in every try (``client``:
    :func:`cid_of`, address and port; a record's last-req map is keyed by :func:`who`, which
    adds ``req``'s top 8 bits, the client thread's id), so a try of
    a put that already committed is recognised (``F_DONE``; the primary answers at once)
    and never applied twice; a resend of an old value after a newer write is the exact
    non-linearizable case NetLR's checker found. Gets take a new ``req`` per try (they are
    idempotent; a new id keeps fragments of two answers apart).

Gets and why they are linearizable
    ``GET`` at a replica: **an object with a pending put waits** until no put of it is
    pending (then answered); else ``GET_REPLY`` fragments of the committed value (``ts`` =
    its timestamp, 0 = absent, ``size``). The argument: a put's value becomes visible
    (committed) at some replica only after TS, and TS is sent only when every member of
    the put set holds the put locked; the members that serve gets are in the put set. So
    from the first moment any get can return the new value, every replica a get can reach
    either holds it committed or locked (a get there waits for the commit); none answers
    the old value after a get returned the new one. A put's effect point is the first
    commit; the PUT_REPLY comes after every commit. A node that missed puts (failed) is
    outside the unicast mapping until its catch-up made it current (two-phase rejoin).

Handoff
    A node that is ``handoff`` of a partition stores its commits of that partition's objects
    in a **separate LMDB environment** (``<db>/nice-handoff``): only the objects written
    while it stands in. A get of an object it does not hold (absent there, not pending) is
    forwarded to the primary (``FWD_GET``, flag :data:`.header.F_FWD`), which answers the
    client itself. When a new view no longer names it the handoff of a partition (phase 2
    of the failed node's rejoin: that node caught up from this store first), the store's
    objects of that partition are dropped (:meth:`NiceCodec.clear_handoff`,
    ``ni_handoff_cleared``); those of partitions it still stands in for stay.

Rejoin (phase 1 done by the metadata service: the node in the put set, not in the unicast
mapping)
    :data:`T_CATCHUP` (JSON ``{"donor": [ip, port], "db": "handoff"|"main", "partitions":
    [...]}``) to the joining node: it lists the donor's objects (:data:`T_SYNC` /
    :data:`T_SYNC_REPLY`: keys with ``(ts, primary)``, in key order, :data:`SYNC_BATCH` per
    reply), fetches the ones newer than its own **in batches** (:data:`T_FETCH_MANY`: up to
    :data:`FETCH_BATCH` keys in one request, answered by :data:`T_FETCH_MANY_REPLY`
    fragments of whole objects, at most :data:`.header.FRAG_DATA` bytes each; an object too
    large for one fragment by itself, :data:`T_FETCH`, answered as ``GET_REPLY``
    fragments) and commits each batch newest-wins in one LMDB transaction; then it
    **resolves its own logged puts** (pending records that survived its crash) with the
    primary (:data:`T_QUERY`): committed there -> committed here with the
    primary's ts; pending there -> kept (the retry or TS completes it); unknown -> dropped.
    The answer :data:`T_CATCHUP_DONE` (JSON counts); then the metadata service runs phase 2.

Primary promotion
    :data:`T_PROMOTE` (JSON ``{"partition": p}``) to the new primary (its configuration
    already names it): it collects the pending puts of ``p`` on every member of the put set
    (:data:`T_QUERY`, with its own) and, per put: **committed on any node** (that node's
    record holds it, or a later put of the same client) -> commit everywhere (``TS`` with the
    committed ts to the members holding it pending); **locked everywhere** -> abort (``ABORT``
    with :data:`F_DISCARD`: the pending record dropped, the lock released; the client's
    retry does it again). Answered :data:`T_PROMOTE_DONE` (JSON counts).

NOOB baselines on the same agents (:data:`T_NB_PUT`, :data:`T_NB_GET`)
    The request carries a route (``u8 count, u8 position``, ``count`` x ``u32 ip, u16
    port``) before the fragment's data: ROG ``[gateway, random node, primary]``, RAG
    ``[gateway, primary]``, RAC ``[primary]`` (gets: the primary, or with 2PC any replica).
    Each hop forwards to the next unchanged (fragments cut through, no reassembly); the last
    serves. Flag :data:`F_2PC` picks the consistency: **primary-backup** (the primary
    commits with the next ts and sends the object to each secondary, :data:`T_NB_REP`
    fragments, answered :data:`T_NB_REP_ACK`, then ``PUT_REPLY``; gets at the primary only)
    or **2PC** (the primary relays the object to each secondary as unicast ``PUT``
    fragments and runs the same 2PC as NICE, TS by unicast fanout; gets at any replica,
    waiting on locks as above).

Counters (``ni_`` prefix): ``ni_puts`` (complete objects locked), ``ni_commits``,
``ni_applied`` (commits that changed the value), ``ni_gets``, ``ni_get_waits``,
``ni_fwd_gets``, ``ni_nacks``, ``ni_aborts``, ``ni_reports``, ``ni_ts_resent``,
``ni_ts_unknown``, ``ni_done`` (retries of committed puts), ``ni_frags``, ``ni_noob``,
``ni_handoff_cleared`` (handoff-store objects dropped after a rejoin).
"""
from __future__ import annotations

import ipaddress
import json
import logging
import os
import random
import socket
import struct
import threading
import time

import lmdb

from netstor.agent.codec import ServerCodec

from .header import (F_FWD, F_RESEND, F_RETRY, FRAG_DATA, KEY_LEN, MAX_OBJECT, NICE_LEN,
                     NICE_UDP_PORT, OP_ABORT, OP_ERROR, OP_FWD_GET, OP_GET, OP_GET_REPLY,
                     OP_NACK, OP_PUT, OP_PUT_ACK, OP_PUT_REPLY, OP_TS, OP_TS_ACK, Ring,
                     NiceHeader, default_partition, key_bytes, n_frags, subgroup, vnode)

__all__ = ["NiceCodec", "Record", "Reassembly", "pack", "unpack", "frags_of", "Route",
           "ip_int", "ip_text", "T_CONFIG", "T_CONFIG_ACK", "T_QUERY", "T_QUERY_REPLY",
           "T_PROMOTE", "T_PROMOTE_DONE", "T_CATCHUP", "T_CATCHUP_DONE", "T_SYNC",
           "T_SYNC_REPLY", "T_FETCH", "T_REPORT", "T_NB_PUT", "T_NB_GET", "T_NB_REP",
           "T_NB_REP_ACK", "T_FETCH_MANY", "T_FETCH_MANY_REPLY", "cid_of", "who", "HOST_OPS",
           "F_DONE", "F_DISCARD", "F_2PC", "F_PB", "F_LAST",
           "NACK_AFTER", "ACK_TIMEOUT", "head"]

log = logging.getLogger("netstor.offloads.nice.codec")

# host-to-host ops (16 and up; plain IPv4 for the switch: physical addresses)
T_CONFIG = 16
T_CONFIG_ACK = 17
T_QUERY = 18
T_QUERY_REPLY = 19
T_PROMOTE = 20
T_PROMOTE_DONE = 21
T_CATCHUP = 22
T_CATCHUP_DONE = 23
T_SYNC = 24
T_SYNC_REPLY = 25
T_FETCH = 26
T_REPORT = 27
T_NB_PUT = 28
T_NB_GET = 29
T_NB_REP = 30
T_NB_REP_ACK = 31
T_FETCH_MANY = 32
T_FETCH_MANY_REPLY = 33
HOST_OPS = {T_CONFIG: "CONFIG", T_CONFIG_ACK: "CONFIG_ACK", T_QUERY: "QUERY",
            T_QUERY_REPLY: "QUERY_REPLY", T_PROMOTE: "PROMOTE", T_PROMOTE_DONE: "PROMOTE_DONE",
            T_CATCHUP: "CATCHUP", T_CATCHUP_DONE: "CATCHUP_DONE", T_SYNC: "SYNC",
            T_SYNC_REPLY: "SYNC_REPLY", T_FETCH: "FETCH", T_REPORT: "REPORT",
            T_NB_PUT: "NB_PUT", T_NB_GET: "NB_GET", T_NB_REP: "NB_REP",
            T_NB_REP_ACK: "NB_REP_ACK", T_FETCH_MANY: "FETCH_MANY",
            T_FETCH_MANY_REPLY: "FETCH_MANY_REPLY"}

# the agents' flags (the header's F_RETRY 0x01, F_FWD 0x02, F_RESEND 0x04 are below)
F_DONE = 0x10        # PUT_ACK: the put was committed here before (a retry)
F_DISCARD = 0x20     # ABORT to a member: drop the pending put (promotion's abort)
F_2PC = 0x40         # NOOB request: 2PC (else primary-backup)
F_PB = 0x08          # NACK of a NOOB primary-backup put: re-send as NB_PUT (route: the node)
F_LAST = 0x80        # SYNC_REPLY: the last batch

NACK_AFTER = 0.03        # s after the last fragment of an incomplete put: NACK
NACK_MAX = 600           # missing indexes per NACK
ACK_TIMEOUT = 0.4        # s the primary waits for PUT_ACKs before ABORT
TS_RESEND = 0.2          # s between TS re-sends to members that did not TS_ACK
LOCK_TIMEOUT = 0.5       # s a member holds a put locked before it checks the primary
ASSEMBLY_IDLE = 5.0      # s an incomplete reassembly is kept without a new fragment
TICK = 0.01
HOST_TIMEOUT = 0.3       # s per host request (catch-up, query), retried
HOST_TRIES = 20

_U16 = struct.Struct("!H")
_ADDR = struct.Struct("!IH")
_REC = struct.Struct("!IHQIH")       # ts, primary, client, req, n (then n x client, req)
_CR = struct.Struct("!QI")
_SYNC = struct.Struct("!16sIH")      # key, ts, primary
SYNC_BATCH = FRAG_DATA // _SYNC.size     # keys per SYNC_REPLY (one fragment's data: 63)
_OBJ = struct.Struct("!16sIHBI")     # FETCH_MANY_REPLY record: key, ts, primary, kind, size
OBJ_VALUE, OBJ_ALONE, OBJ_ABSENT = 0, 1, 2      # its kinds: value follows, too large, absent
#: keys per FETCH_MANY request (a db byte, then the 16-byte keys: one fragment's data)
FETCH_BATCH = (FRAG_DATA - 1) // KEY_LEN


def ip_int(addr) -> int:
    return addr if isinstance(addr, int) else int(ipaddress.IPv4Address(str(addr)))


def ip_text(value) -> str:
    return str(ipaddress.IPv4Address(value)) if isinstance(value, int) else str(value)


def head(op, *, flags=0, frag=0, nfrag=1, client=0, req=0, ts=0, size=0, part=0, rsv=0,
         cid=None):
    """A header; ``cid``: a client's identity (:func:`cid_of`) sets ``client`` and ``rsv``."""
    if cid is not None:
        client, rsv = cid >> 16, cid & 0xFFFF
    return NiceHeader(op=op, flags=flags, frag=frag, nfrag=nfrag, client=ip_int(client),
                      req=req, ts=ts, size=size, part=part, rsv=rsv)


def cid_of(h, addr) -> int:
    """A client's identity: its IPv4 address and UDP port (``client``, ``rsv``; the
    datagram's source when 0) as one 48-bit number. Puts are named ``(cid, req)``: two
    client processes on one host never share a name."""
    ip = h.client or ip_int(addr[0])
    return (ip << 16) | (h.rsv or addr[1])


def pack(h, key, data=b"") -> bytes:
    return h.pack() + key_bytes(key) + bytes(data)


def unpack(data):
    """``(header, key16, rest)`` of a NICE datagram (ValueError if short)."""
    if len(data) < NICE_LEN + KEY_LEN:
        raise ValueError(f"nice: datagram of {len(data)} bytes")
    return (NiceHeader.unpack(data), bytes(data[NICE_LEN:NICE_LEN + KEY_LEN]),
            bytes(data[NICE_LEN + KEY_LEN:]))


def frags_of(value: bytes):
    """The fragments' data of an object (at least one, :data:`.header.FRAG_DATA` each)."""
    value = bytes(value)
    n = n_frags(len(value))
    return [value[i * FRAG_DATA:(i + 1) * FRAG_DATA] for i in range(n)]


class Route:
    """The NOOB request's route: hops ``[(ip, port)]`` and the receiver's position."""
    __slots__ = ("hops", "pos")

    def __init__(self, hops, pos=0):
        self.hops = [(ip_text(a), int(p)) for a, p in hops]
        self.pos = pos

    def pack(self) -> bytes:
        return bytes([len(self.hops), self.pos]) + b"".join(
            _ADDR.pack(ip_int(a), p) for a, p in self.hops)

    @classmethod
    def unpack(cls, raw):
        """``(Route, rest)``"""
        if len(raw) < 2:
            raise ValueError("NOOB route truncated")
        n, pos = raw[0], raw[1]
        end = 2 + n * _ADDR.size
        if len(raw) < end or not 0 <= pos < n:
            raise ValueError("NOOB route truncated or bad position")
        hops = [_ADDR.unpack_from(raw, 2 + i * _ADDR.size) for i in range(n)]
        return cls([(ip_text(a), p) for a, p in hops], pos), raw[end:]


# ---- the object record ---------------------------------------------------------------------
class Record:
    """A committed object: ``ts``, ``primary`` (the quadruplet's primary node; with ``ts`` the
    order), ``client``/``req`` (the put that wrote the value), ``last`` (client -> its last
    committed req on this object: retries are applied once) and ``value``."""
    __slots__ = ("ts", "primary", "client", "req", "last", "value")

    def __init__(self, ts, primary, client, req, last, value):
        self.ts, self.primary, self.client, self.req = ts, primary, client, req
        self.last, self.value = dict(last), bytes(value)

    def pack(self) -> bytes:
        return (_REC.pack(self.ts, self.primary, self.client, self.req, len(self.last)) +
                b"".join(_CR.pack(c, r) for c, r in sorted(self.last.items())) + self.value)

    @classmethod
    def unpack(cls, raw):
        raw = bytes(raw)
        ts, prim, client, req, n = _REC.unpack_from(raw)
        pos = _REC.size
        last = {}
        for _ in range(n):
            c, r = _CR.unpack_from(raw, pos)
            last[c] = r
            pos += _CR.size
        return cls(ts, prim, client, req, last, raw[pos:])

    @property
    def order(self):
        return (self.ts, self.primary)

    def done(self, client, req) -> bool:
        """Whether put ``(client, req)`` took effect here (this or a later put of the
        client committed)."""
        return self.last.get(who(client, req), -1) >= req


def who(client, req) -> int:
    """The key of a client in a record's last-req map: its :func:`cid_of` and the top 8
    bits of ``req`` (the client's id: threads of one process share a socket)."""
    return (client << 8) | (req >> 24)


def _okey(key):
    return b"no" + key


def _pkey(key, client, req):
    return b"np" + key + _CR.pack(client, req)


class Reassembly:
    """Fragments of one object: ``add(frag, nfrag, size, data)`` -> True when whole."""
    __slots__ = ("nfrag", "size", "parts", "last", "nacks", "to", "meta")

    def __init__(self, nfrag, size):
        self.nfrag, self.size = nfrag, size
        self.parts = {}
        self.last = time.monotonic()
        self.nacks = 0
        self.to = None
        self.meta = None

    def add(self, frag, data) -> bool:
        if 0 <= frag < self.nfrag and frag not in self.parts:
            self.parts[frag] = bytes(data)
        self.last = time.monotonic()
        return len(self.parts) == self.nfrag

    def missing(self):
        return [i for i in range(self.nfrag) if i not in self.parts]

    def value(self):
        out = b"".join(self.parts[i] for i in range(self.nfrag))
        if len(out) != self.size:
            raise ValueError(f"object of {len(out)} bytes, header says {self.size}")
        return out


class _Put:
    """The primary's state of one put (coordinator)."""
    __slots__ = ("key", "client", "req", "port", "part", "since", "acks", "ts", "ts_acks",
                 "ts_sent", "complete", "noob", "fanout", "members", "reported", "value",
                 "born")

    def __init__(self, key, client, req, port, part):
        self.key, self.client, self.req, self.part = key, client, req, part
        self.port = client & 0xFFFF
        self.since = None          # own copy complete (monotonic)
        self.acks = set()
        self.ts = 0
        self.ts_acks = set()
        self.ts_sent = 0.0
        self.complete = False
        self.noob = 0              # 0: NICE, 1: NOOB primary-backup, 2: NOOB 2PC
        self.fanout = False
        self.members = None        # NOOB: the secondaries (ids), fixed at the put
        self.reported = set()
        self.value = None          # NOOB primary-backup: the object (re-sent to secondaries)
        self.born = time.monotonic()


class _Config:
    def __init__(self, cfg):
        self.raw = cfg
        self.node = int(cfg["node"])
        self.nodes = {int(k): (ip_text(v[0]), int(v[1])) for k, v in cfg["nodes"].items()}
        self.addr_node = {v: k for k, v in self.nodes.items()}
        self.P = int(cfg.get("n_partitions", len(cfg["partitions"])))
        r = cfg.get("ring") or {}
        self.ring = Ring(r.get("base", "10.10.0.0"), int(r.get("prefix", 16)),
                         int(r.get("sub", 24)))
        m = cfg.get("mring") or {}
        self.mring = Ring(m.get("base", "10.11.0.0"), int(m.get("prefix", self.ring.prefix)),
                          int(m.get("sub", self.ring.sub)))
        self.subgroups = cfg.get("subgroups")
        self.parts = {int(p): {"primary": int(v["primary"]),
                               "replicas": [int(x) for x in v.get("replicas", [])],
                               "put_set": [int(x) for x in v.get("put_set",
                                                                 v.get("replicas", []))],
                               "handoff": None if v.get("handoff") is None
                               else int(v["handoff"])}
                      for p, v in cfg["partitions"].items()}
        self.fanout = bool(cfg.get("fanout", False))
        md = cfg.get("metadata")
        self.metadata = (ip_text(md[0]), int(md[1])) if md else None

    def part_of(self, key) -> int:
        s = subgroup(key, self.ring)
        if self.subgroups is not None:
            return int(self.subgroups[s])
        return default_partition(s, self.ring.n_subgroups, self.P)


# ---- the codec -----------------------------------------------------------------------------
class NiceCodec(ServerCodec):
    name = "nice"
    prefix = "ni"
    default_port = NICE_UDP_PORT
    serves = True
    extra_counters = ("ni_puts", "ni_commits", "ni_applied", "ni_gets", "ni_get_waits",
                      "ni_fwd_gets", "ni_nacks", "ni_aborts", "ni_reports", "ni_ts_resent",
                      "ni_ts_unknown", "ni_done", "ni_frags", "ni_noob",
                      "ni_handoff_cleared")

    def __init__(self):
        self.lock = threading.RLock()
        self.cfg = None
        self.server = None
        self.sock = None
        self.henv = None                 # the handoff LMDB environment
        self.asm = {}                    # (kind, client, req, key) -> Reassembly
        self.pending = {}                # key -> {(client, req): (size, part)}
        self.locked_at = {}              # (key, client, req) -> monotonic (lock or last check)
        self._checking = False
        self.waiting = {}                # key -> [(header, reply addr)]
        self.coord = {}                  # (key, client, req) -> _Put (as primary)
        self.assigned = {}               # key -> last ts this node assigned
        self.host_waits = {}             # req -> [event, answer]
        self.reports = []                # (node id suspected) this node reported
        self.catchups = []
        self.promotions = []
        self._timer = None
        self._req = 0

    # ---- wiring ----------------------------------------------------------------------------
    def split_request(self, data):      # never called: serve() takes every datagram
        return None

    def reply_header(self, header, server_id, load, service_ns):
        raise NotImplementedError("NICE replies are NICE packets (serve)")

    def _attach(self, server, sock):
        if self.server is server and self.sock is sock:
            return
        with self.lock:
            if self.server is server and self.sock is sock:
                return
            self.server, self.sock = server, sock
            path = os.path.join(server.db_path, "nice-handoff")
            os.makedirs(path, exist_ok=True)
            self.henv = lmdb.open(path, map_size=server.map_size, subdir=True,
                                  sync=server.sync, metasync=server.sync, max_dbs=0)
            self._load_log()
            self._timer = threading.Thread(target=self._tick_loop, name="nice-timer",
                                           daemon=True)
            self._timer.start()

    def attach(self, server):
        """Bind the codec to a started server (its NICE socket) before the first datagram:
        loads the pending log, starts the timer; tests call it to configure a node first."""
        self._attach(server, server.offload_socks[self.name])
        return self

    def configure(self, cfg: dict):
        """A new membership view (module docstring); puts waiting for members that left
        the put set are re-evaluated."""
        c = _Config(cfg)
        with self.lock:
            old, self.cfg = self.cfg, c
            if old is not None and self.henv is not None:
                done = {p for p, v in old.parts.items() if v["handoff"] == old.node and
                        (p not in c.parts or c.parts[p]["handoff"] != c.node)}
                if done:
                    self.clear_handoff(done)
            for st in list(self.coord.values()):
                self._advance(st)

    def clear_handoff(self, partitions):
        """(under lock) Drop the handoff store's objects of ``partitions`` (this node stands
        in for them no more: the view that ends the rejoin's phase 2 took it out of their
        mappings, and the rejoined node caught up from this store before). Objects of
        partitions it still stands in for stay. Returns the number dropped."""
        parts = set(partitions)
        n = 0
        with self.henv.begin(write=True) as txn:
            cur = txn.cursor()
            if cur.set_range(b"no"):
                while cur.key().startswith(b"no"):
                    if self._part(cur.key()[2:]) in parts:
                        cur.delete()           # moves to the next record
                        n += 1
                    elif not cur.next():
                        break
        self._count("ni_handoff_cleared", n)
        log.debug("nice: handoff store of partitions %s cleared (%d objects)",
                  sorted(parts), n)
        return n

    def _load_log(self):
        with self.server.env.begin() as txn:
            cur = txn.cursor()
            if cur.set_range(b"np"):
                for k, v in cur:
                    if not k.startswith(b"np"):
                        break
                    key = k[2:2 + KEY_LEN]
                    client, req = _CR.unpack_from(k, 2 + KEY_LEN)
                    size = struct.unpack_from("!I", v)[0]
                    self.pending.setdefault(key, {})[(client, req)] = (size, None)
                    self.locked_at[(key, client, req)] = time.monotonic()

    # ---- helpers ---------------------------------------------------------------------------
    def _count(self, name, n=1):
        if self.server is not None:
            self.server.count(name, n)

    def _send(self, payload, to):
        self._count("ni_replies")
        try:
            self.sock.sendto(payload, to)
        except OSError as e:
            self._count("send_errors")
            log.debug("nice: send to %s failed: %s", to, e)

    def _reply_to(self, h, addr):
        return (ip_text(h.client) if h.client else addr[0], h.rsv or addr[1])

    def _env(self, part):
        c = self.cfg
        if c is not None and part is not None and part in c.parts and \
                c.parts[part]["handoff"] == c.node:
            return self.henv
        return self.server.env

    def record(self, key, part=None, env=None):
        env = env or self._env(part if part is not None else self._part(key))
        with env.begin(buffers=False) as txn:
            raw = txn.get(_okey(key))
        return Record.unpack(raw) if raw is not None else None

    def _part(self, key):
        return self.cfg.part_of(key) if self.cfg is not None else None

    def _node_addr(self, node):
        return self.cfg.nodes[node]

    def _next_req(self):
        with self.lock:
            self._req = (self._req + 1) & 0xFFFFFFFF
            return self._req

    # ---- serving ---------------------------------------------------------------------------
    def serve(self, server, sock, data, addr):
        self._attach(server, sock)
        try:
            h, key, rest = unpack(data)
            handler = self._handlers().get(h.op)
            if handler is None:
                raise ValueError(f"op {h.op} is not served by a storage node")
            handler(h, key, rest, addr)
        except (ValueError, KeyError, struct.error, json.JSONDecodeError) as e:
            server.count("ni_dropped")
            server.count("dropped")
            log.debug("nice: datagram from %s dropped: %s", addr, e)

    def _handlers(self):
        return {OP_PUT: self._put, OP_PUT_ACK: self._put_ack, OP_TS: self._ts,
                OP_TS_ACK: self._ts_ack, OP_GET: self._get, OP_FWD_GET: self._get,
                OP_ABORT: self._abort, T_CONFIG: self._config, T_QUERY: self._query,
                T_QUERY_REPLY: self._host_reply, T_SYNC_REPLY: self._host_reply,
                T_CATCHUP_DONE: self._host_reply, T_PROMOTE_DONE: self._host_reply,
                OP_GET_REPLY: self._host_reply,
                T_PROMOTE: self._promote, T_CATCHUP: self._catchup, T_SYNC: self._sync,
                T_FETCH: self._fetch, T_FETCH_MANY: self._fetch_many,
                T_FETCH_MANY_REPLY: self._host_reply, T_NB_PUT: self._nb_put,
                T_NB_GET: self._nb_get,
                T_NB_REP: self._nb_rep, T_NB_REP_ACK: self._nb_rep_ack}

    # ---- NICE-2PC: a member ----------------------------------------------------------------
    def _put(self, h, key, data, addr, noob=0, via=None):
        self._count("ni_frags")
        if not 1 <= h.nfrag <= n_frags(MAX_OBJECT) or h.size > MAX_OBJECT or \
                h.nfrag != n_frags(h.size):
            raise ValueError(f"put of {h.size} bytes in {h.nfrag} fragments")
        if self.cfg is None:
            return self._send(pack(head(OP_ERROR, client=h.client, req=h.req), key),
                              self._reply_to(h, addr))
        client, req = cid_of(h, addr), h.req
        ident = ("put", client, req, key)
        with self.lock:
            a = self.asm.get(ident)
            if a is None:
                if (client, req) in self.pending.get(key, {}) or self._done(key, client, req):
                    a = None               # a retry of a put held or committed: ack again
                else:
                    a = self.asm[ident] = Reassembly(h.nfrag, h.size)
                    a.to = self._reply_to(h, addr)
                    a.meta = (h.rsv or addr[1], noob, via)
            if a is not None:
                whole = a.add(h.frag, data)
                if not whole:
                    return
                del self.asm[ident]
                value = a.value()
                _, noob, via = a.meta if noob == 0 else (None, noob, via)
            elif h.frag not in (0, h.nfrag - 1):
                return                     # a retry's fragments: acked on the first/last
            else:
                value = None
            part = self._part(key)
            rec = self.record(key, part)
            done = rec is not None and rec.done(client, req)
            if value is not None and not done and (client, req) not in \
                    self.pending.get(key, {}):
                with self.server.env.begin(write=True) as txn:       # lock + log + store
                    txn.put(_pkey(key, client, req), struct.pack("!I", len(value)) + value)
                self.pending.setdefault(key, {})[(client, req)] = (len(value), part)
                self.locked_at[(key, client, req)] = time.monotonic()
                self._count("ni_puts")
            if done:
                self._count("ni_done")
            primary = self._primary_of(part)
            port = h.rsv or addr[1]
            if primary == self.cfg.node:
                if done and (key, client, req) in self.coord and \
                        self.coord[(key, client, req)].ts:
                    return          # committed, TS_ACKs still coming: answered when all in
                st = self._coord(key, client, req, port, part)
                if via is not None:                 # NOOB 2PC: the primary relays
                    st.noob, st.members, st.fanout = 2, set(via), True
                if done:
                    st.complete = True
                    return self._finish(st, already=True)
                if st.since is None:
                    st.since = time.monotonic()
                if via is not None:
                    self._relay(st, value)
                self._advance(st)
            else:
                self._send(pack(head(OP_PUT_ACK, flags=F_DONE if done else 0,
                                     frag=self.cfg.node, cid=client, req=req,
                                     part=part or 0), key), self._node_addr(primary))

    def _done(self, key, client, req):
        rec = self.record(key)
        return rec is not None and rec.done(client, req)

    def _primary_of(self, part):
        return self.cfg.parts[part]["primary"]

    def _relay(self, st, value):
        """(under lock) NOOB 2PC: the object to every secondary as unicast PUT fragments."""
        if value is None:
            with self.server.env.begin(buffers=False) as txn:
                raw = txn.get(_pkey(st.key, st.client, st.req))
            if raw is None:
                return
            value = bytes(raw[4:])
        parts = frags_of(value)
        for m in sorted(st.members):
            for i, chunk in enumerate(parts):
                self._send(pack(head(OP_PUT, frag=i, nfrag=len(parts), cid=st.client,
                                     req=st.req, size=len(value), part=st.part),
                                st.key, chunk), self._node_addr(m))

    def _coord(self, key, client, req, port, part):
        st = self.coord.get((key, client, req))
        if st is None:
            st = self.coord[(key, client, req)] = _Put(key, client, req, port, part)
        return st

    def _members(self, st):
        """The other members whose acks the primary waits for."""
        if st.members is not None:
            return set(st.members)
        return set(self.cfg.parts[st.part]["put_set"]) - {self.cfg.node}

    def _put_ack(self, h, key, data, addr):
        with self.lock:
            part = self._part(key)
            if part is None:
                return
            st = self._coord(key, cid_of(h, addr), h.req, h.rsv, part)
            st.acks.add(h.frag)
            self._advance(st)

    def _advance(self, st):
        """(under lock) move the primary's put on: TS once whole and acked, reply once every
        TS_ACK is in."""
        if st.complete or st.since is None or self.cfg is None:
            return
        members = self._members(st)
        if not st.ts:
            if not members <= st.acks:
                return
            rec = self.record(st.key, st.part)
            if rec is not None and rec.done(st.client, st.req):
                st.complete = True
                return self._finish(st, already=True)
            base = max(rec.ts if rec else 0, self.assigned.get(st.key, 0))
            st.ts = base + 1
            self.assigned[st.key] = st.ts
            st.ts_sent = time.monotonic()
            self._send_ts(st, members)
            self._commit(st.key, st.client, st.req, st.ts, self.cfg.node)
        if members <= st.ts_acks:
            st.complete = True
            self._finish(st)

    def _send_ts(self, st, members, unicast=False):
        h = head(OP_TS, frag=self.cfg.node, cid=st.client, req=st.req, ts=st.ts,
                 part=st.part)
        payload = pack(h, st.key)
        if unicast or st.fanout or self.cfg.fanout:
            for m in sorted(members):
                if m in self.cfg.nodes:
                    self._send(payload, self._node_addr(m))
        else:
            self._send(payload, (vnode(st.key, self.cfg.mring), NICE_UDP_PORT))

    def _finish(self, st, already=False):
        self.coord.pop((st.key, st.client, st.req), None)
        self._send(pack(head(OP_PUT_REPLY, cid=st.client, req=st.req, ts=st.ts,
                             part=st.part),
                        st.key), (ip_text(st.client >> 16), st.port))

    def _commit(self, key, client, req, ts, primary):
        """(under lock) commit pending put ``(client, req)`` of ``key`` with ``(ts,
        primary)`` (ts 0: only release: the put took effect before, superseded); True if it
        was pending here."""
        p = self.pending.get(key, {})
        if (client, req) not in p:
            return False
        size, part = p.pop((client, req))
        self.locked_at.pop((key, client, req), None)
        part = part if part is not None else self._part(key)
        env = self._env(part)
        pk = _pkey(key, client, req)
        with self.server.env.begin(write=True) as ptxn:
            raw = ptxn.get(pk)
            ptxn.delete(pk)
        value = bytes(raw[4:]) if raw is not None else b""
        with env.begin(write=True) as txn:
            old = txn.get(_okey(key))
            rec = Record.unpack(old) if old is not None else None
            if rec is None:
                rec = Record(ts, primary, client, req, {who(client, req): req},
                             value) if ts else None
                applied = rec is not None
            else:
                applied = ts and (ts, primary) > rec.order
                if applied:
                    rec.ts, rec.primary, rec.client, rec.req, rec.value = \
                        ts, primary, client, req, value
                rec.last[who(client, req)] = max(rec.last.get(who(client, req), -1), req)
            if rec is not None:
                txn.put(_okey(key), rec.pack())
        self._count("ni_commits")
        if applied:
            self._count("ni_applied")
        if not p:
            self.pending.pop(key, None)
            self._release(key)
        return True

    def _ts(self, h, key, data, addr):
        with self.lock:
            if self.cfg is None:
                return
            cid = cid_of(h, addr)
            held = self._commit(key, cid, h.req, h.ts, h.frag)
            if not held:
                rec = self.record(key)
                if rec is None or not rec.done(cid, h.req):
                    self._count("ni_ts_unknown")
                    return
            primary = h.frag
        if primary != self.cfg.node and primary in self.cfg.nodes:
            self._send(pack(h._replace(op=OP_TS_ACK, frag=self.cfg.node), key),
                       self._node_addr(primary))

    def _ts_ack(self, h, key, data, addr):
        with self.lock:
            st = self.coord.get((key, cid_of(h, addr), h.req))
            if st is None or st.ts != h.ts:
                return
            st.ts_acks.add(h.frag)
            self._advance(st)

    def _abort(self, h, key, data, addr):
        """ABORT with F_DISCARD from a (new) primary: drop the pending put."""
        if not h.flags & F_DISCARD:
            raise ValueError("ABORT without F_DISCARD is for clients")
        with self.lock:
            p = self.pending.get(key, {})
            cid = cid_of(h, addr)
            if (cid, h.req) in p:
                p.pop((cid, h.req))
                self.locked_at.pop((key, cid, h.req), None)
                with self.server.env.begin(write=True) as txn:
                    txn.delete(_pkey(key, cid, h.req))
                if not p:
                    self.pending.pop(key, None)
                    self._release(key)

    # ---- gets ------------------------------------------------------------------------------
    def _get(self, h, key, data, addr, env=None):
        self._count("ni_gets")
        to = self._reply_to(h, addr)
        with self.lock:
            if self.pending.get(key):
                self._count("ni_get_waits")
                self.waiting.setdefault(key, []).append((h, to, env))
                return
        self._answer_get(h, key, to, env)

    def _release(self, key):
        """(under lock) the object has no pending put: answer the gets that waited."""
        for h, to, env in self.waiting.pop(key, []):
            self._answer_get(h, key, to, env)

    def _answer_get(self, h, key, to, env=None):
        part = self._part(key)
        c = self.cfg
        if env is None and c is not None and part in c.parts and \
                c.parts[part]["handoff"] == c.node and h.op == OP_GET:
            rec = self.record(key, env=self.henv)
            if rec is None:            # an old object: the primary answers
                self._count("ni_fwd_gets")
                fh = h._replace(op=OP_FWD_GET, flags=h.flags | F_FWD, client=ip_int(to[0]),
                                rsv=to[1])
                return self._send(pack(fh, key), self._node_addr(c.parts[part]["primary"]))
        else:
            rec = self.record(key, part, env=env)
        self.send_object(h, key, rec, to)

    def send_object(self, h, key, rec, to, op=OP_GET_REPLY):
        value = rec.value if rec else b""
        parts = frags_of(value)
        for i, chunk in enumerate(parts):
            self._send(pack(head(op, flags=h.flags & F_FWD, frag=i, nfrag=len(parts),
                                 client=h.client, req=h.req, ts=rec.ts if rec else 0,
                                 size=len(value), part=h.part, rsv=rec.primary if rec else 0),
                            key, chunk), to)

    # ---- the timer -------------------------------------------------------------------------
    def _tick_loop(self):
        while self.server is not None and not self.server._stop.is_set():
            time.sleep(TICK)
            try:
                self._tick()
            except Exception:          # never let the timer die
                log.exception("nice timer")
        time.sleep(0.2)                # the receiver has stopped: close the handoff store
        with self.lock:
            if self.henv is not None:
                self.henv.close()
                self.henv = None

    def _tick(self):
        now = time.monotonic()
        with self.lock:
            self._check_locks(now)
            for ident, a in list(self.asm.items()):
                if now - a.last > ASSEMBLY_IDLE:
                    del self.asm[ident]
                elif now - a.last > NACK_AFTER * (1 + a.nacks) and a.to is not None:
                    miss = a.missing()[:NACK_MAX]
                    a.nacks += 1
                    self._count("ni_nacks")
                    key = ident[3]
                    self._send(pack(head(OP_NACK, flags=F_PB if ident[0] == "pb" else 0,
                                         frag=self.cfg.node if self.cfg else 0,
                                         nfrag=a.nfrag, cid=ident[1], req=ident[2],
                                         size=a.size), key,
                                    b"".join(_U16.pack(i) for i in miss)), a.to)
            if self.cfg is None:
                return
            for st in list(self.coord.values()):
                if st.complete or st.since is None:
                    if now - st.born > ASSEMBLY_IDLE:       # acks of a put never whole here
                        self.coord.pop((st.key, st.client, st.req), None)
                    continue
                members = self._members(st)
                if st.noob == 1:                            # primary-backup: re-send
                    if now - st.ts_sent > TS_RESEND:
                        st.ts_sent = now
                        self._replicate(st, members - st.ts_acks)
                    continue
                if not st.ts and now - st.since > ACK_TIMEOUT:
                    missing = members - st.acks
                    self._count("ni_aborts")
                    # reported before the client hears the ABORT: whoever acts on the ABORT
                    # (a retry, a test reading ``reports``) finds the silent members reported
                    self._report(missing)
                    self._send(pack(head(OP_ABORT, cid=st.client, req=st.req,
                                         part=st.part), st.key),
                               (ip_text(st.client >> 16), st.port))
                    self.coord.pop((st.key, st.client, st.req), None)
                elif st.ts and now - st.ts_sent > TS_RESEND:
                    missing = members - st.ts_acks
                    st.ts_sent = now
                    self._count("ni_ts_resent")
                    self._send_ts(st, missing, unicast=True)
                    self._report(missing - st.reported)
                    st.reported |= missing

    def _check_locks(self, now):
        """(under lock) A put locked here for :data:`LOCK_TIMEOUT` s without its TS: ask its
        primary (:data:`T_QUERY`, in a thread); no answer -> report the primary (the
        secondaries' detection of a failed primary, paper section 4.4)."""
        if self._checking or self.cfg is None:
            return
        stale = [x for x, t in self.locked_at.items() if now - t > LOCK_TIMEOUT]
        if not stale:
            return
        prims = {}
        for x in stale:
            self.locked_at[x] = now                  # re-armed
            part = self._part(x[0])
            pr = self.cfg.parts.get(part, {}).get("primary")
            if pr is not None and pr != self.cfg.node:
                prims.setdefault(pr, x)
        if not prims:
            return
        self._checking = True

        def run():
            try:
                for pr, (k, cl, r) in prims.items():
                    try:
                        self.ask(self._node_addr(pr), T_QUERY, json.dumps(
                            {"puts": [[k.hex(), cl, r]]}).encode(), timeout=0.2, tries=2)
                    except (TimeoutError, KeyError):
                        with self.lock:
                            self._report({pr})
            finally:
                self._checking = False
        threading.Thread(target=run, name="nice-lockcheck", daemon=True).start()

    def _report(self, nodes):
        for n in sorted(nodes):
            self._count("ni_reports")
            self.reports.append(n)
            md = self.cfg.metadata
            if md:
                self._send(pack(head(T_REPORT, frag=self.cfg.node),
                                b"", json.dumps({"node": self.cfg.node,
                                                 "suspect": n}).encode()), md)

    # ---- host ops: configuration, queries --------------------------------------------------
    def _config(self, h, key, data, addr):
        self.configure(json.loads(data))
        self._send(pack(h._replace(op=T_CONFIG_ACK), key), addr)

    def put_state(self, key, client, req):
        """``"committed"`` (with ts, primary), ``"done"`` (a later put of the client
        committed; ts unknown), ``"pending"`` or ``"unknown"``."""
        with self.lock:
            if (client, req) in self.pending.get(key, {}):
                return ("pending", 0, 0)
            rec = self.record(key)
            if rec is not None and rec.client == client and rec.req == req:
                return ("committed", rec.ts, rec.primary)
            if rec is not None and rec.done(client, req):
                return ("done", 0, 0)
            return ("unknown", 0, 0)

    def pending_of(self, part):
        with self.lock:
            return [(k, c, r) for k, ps in self.pending.items() for (c, r), (_, p) in
                    ps.items() if p is None or p == part or self._part(k) == part]

    def _query(self, h, key, data, addr):
        q = json.loads(data)
        ids = [(bytes.fromhex(k), c, r) for k, c, r in q.get("puts", [])]
        out = {"states": [[k.hex(), c, r, *self.put_state(k, c, r)] for k, c, r in ids]}
        if q.get("partition") is not None:
            out["pending"] = [[k.hex(), c, r] for k, c, r in self.pending_of(q["partition"])]
        self._send(pack(h._replace(op=T_QUERY_REPLY), key, json.dumps(out).encode()), addr)

    def _host_reply(self, h, key, data, addr):
        with self.lock:
            w = self.host_waits.get(h.req)
        if w is not None:
            w[1].append((h, key, data))
            w[0].set()

    def ask(self, to, op, payload=b"", key=b"", *, flags=0, want=None, frags=False,
            timeout=HOST_TIMEOUT, tries=HOST_TRIES):
        """A host request from this node's socket (catch-up, promotion): the answers to it
        (one, or every fragment of a GET_REPLY with ``frags``)."""
        req = self._next_req()
        ev = threading.Event()
        answers = []
        with self.lock:
            self.host_waits[req] = [ev, answers]
        try:
            for _ in range(tries):
                self._send(pack(head(op, flags=flags, req=req), key, payload), to)
                end = time.monotonic() + timeout
                while time.monotonic() < end:
                    ev.wait(max(0.0, end - time.monotonic()))
                    ev.clear()
                    if not frags and answers:
                        return answers[0]
                    if frags and answers:
                        n = answers[0][0].nfrag
                        got = {a[0].frag: a for a in answers}
                        if len(got) == n:
                            return [got[i] for i in range(n)]
                answers.clear()
            raise TimeoutError(f"nice: no answer from {to} to {HOST_OPS.get(op, op)}")
        finally:
            with self.lock:
                self.host_waits.pop(req, None)

    # ---- primary promotion -----------------------------------------------------------------
    def _promote(self, h, key, data, addr):
        q = json.loads(data)

        def run():
            try:
                res = self.promote(int(q["partition"]))
            except Exception as e:         # answered: the controller reports it
                res = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            self.promotions.append(res)
            self._send(pack(h._replace(op=T_PROMOTE_DONE), key, json.dumps(res).encode()),
                       addr)
        threading.Thread(target=run, name="nice-promote", daemon=True).start()

    def promote(self, part):
        """Resolve the locked puts of partition ``part`` as its new primary (module
        docstring): ``{"ok", "locked", "committed", "aborted"}``."""
        c = self.cfg
        if c.parts[part]["primary"] != c.node:
            raise ValueError(f"node {c.node} is not the primary of partition {part}")
        members = [m for m in c.parts[part]["put_set"] if m != c.node]
        ids = set(self.pending_of(part))
        views = {}
        for m in members:
            rh, _, raw = self.ask(self._node_addr(m), T_QUERY,
                                  json.dumps({"partition": part, "puts": []}).encode())
            views[m] = json.loads(raw)
            ids |= {(bytes.fromhex(k), cl, r) for k, cl, r in views[m]["pending"]}
        ids = sorted(ids)
        states = {x: {c.node: self.put_state(*x)} for x in ids}
        q = json.dumps({"puts": [[k.hex(), cl, r] for k, cl, r in ids]}).encode()
        for m in members:
            _, _, raw = self.ask(self._node_addr(m), T_QUERY, q)
            for k, cl, r, state, ts, prim in json.loads(raw)["states"]:
                states[(bytes.fromhex(k), cl, r)][m] = (state, ts, prim)
        res = {"ok": True, "locked": len(ids), "committed": 0, "aborted": 0}
        for x in ids:
            k, cl, r = x
            st = states[x]
            won = [v for v in st.values() if v[0] in ("committed", "done")]
            holders = [n for n, v in st.items() if v[0] == "pending"]
            if won:
                ts, prim = max(((v[1], v[2]) for v in won), default=(0, 0))
                res["committed"] += 1
                for n in holders:
                    h = head(OP_TS, frag=prim if ts else c.node, cid=cl, req=r, ts=ts)
                    if n == c.node:
                        with self.lock:
                            self._commit(k, cl, r, ts, prim)
                    else:
                        self._send(pack(h, k), self._node_addr(n))
            else:
                res["aborted"] += 1
                for n in holders:
                    if n == c.node:
                        self._abort(head(OP_ABORT, flags=F_DISCARD, cid=cl, req=r), k,
                                    b"", None)
                    else:
                        self._send(pack(head(OP_ABORT, flags=F_DISCARD, cid=cl, req=r),
                                        k), self._node_addr(n))
        return res

    # ---- rejoin catch-up -------------------------------------------------------------------
    def _sync(self, h, key, data, addr):
        q = json.loads(data)
        env = self.henv if q.get("db") == "handoff" else self.server.env
        parts = set(q.get("partitions") or [])
        after = bytes.fromhex(q["after"]) if q.get("after") else None
        out, last = [], True
        with env.begin(buffers=False) as txn:
            cur = txn.cursor()
            if cur.set_range(_okey(after) if after else b"no"):
                for k, v in cur:
                    if not k.startswith(b"no"):
                        break
                    okey = k[2:]
                    if after is not None and okey <= after:
                        continue
                    if parts and self._part(okey) not in parts:
                        continue
                    if len(out) >= SYNC_BATCH:
                        last = False
                        break
                    rec = Record.unpack(v)
                    out.append(_SYNC.pack(okey, rec.ts, rec.primary))
        self._send(pack(h._replace(op=T_SYNC_REPLY, flags=F_LAST if last else 0,
                                   nfrag=len(out)), key, b"".join(out)), addr)

    def _fetch(self, h, key, data, addr):
        q = json.loads(data) if data else {}
        env = self.henv if q.get("db") == "handoff" else self.server.env
        self.send_object(h, key, self.record(key, env=env), addr)

    def _fetch_many(self, h, key, data, addr):
        """Several objects in few datagrams: the request is a db byte (0 main, 1 handoff)
        and 16-byte keys; the answer ``T_FETCH_MANY_REPLY`` fragments (``frag`` of
        ``nfrag``), each at most :data:`.header.FRAG_DATA` bytes of records (``_OBJ``:
        key, ts, primary, kind, size; the value after a ``OBJ_VALUE`` record). An object
        whose record does not fit one fragment is named ``OBJ_ALONE`` (fetched by itself,
        :data:`T_FETCH`); one the donor does not hold ``OBJ_ABSENT``."""
        if not data or (len(data) - 1) % KEY_LEN or len(data) - 1 > FETCH_BATCH * KEY_LEN:
            raise ValueError(f"FETCH_MANY of {len(data)} bytes")
        env = self.henv if data[0] == 1 else self.server.env
        keys = [data[i:i + KEY_LEN] for i in range(1, len(data), KEY_LEN)]
        recs = []
        with env.begin(buffers=False) as txn:
            for k in keys:
                raw = txn.get(_okey(k))
                if raw is None:
                    recs.append(_OBJ.pack(k, 0, 0, OBJ_ABSENT, 0))
                    continue
                rec = Record.unpack(raw)
                if _OBJ.size + len(rec.value) > FRAG_DATA:
                    recs.append(_OBJ.pack(k, rec.ts, rec.primary, OBJ_ALONE, len(rec.value)))
                else:
                    recs.append(_OBJ.pack(k, rec.ts, rec.primary, OBJ_VALUE,
                                          len(rec.value)) + rec.value)
        frags, cur = [], b""
        for r in recs:
            if cur and len(cur) + len(r) > FRAG_DATA:
                frags.append(cur)
                cur = b""
            cur += r
        frags.append(cur)
        for i, chunk in enumerate(frags):
            self._send(pack(h._replace(op=T_FETCH_MANY_REPLY, frag=i, nfrag=len(frags)), key,
                            chunk), addr)

    def _catchup(self, h, key, data, addr):
        q = json.loads(data)

        def run():
            try:
                res = self.catch_up((ip_text(q["donor"][0]), int(q["donor"][1])),
                                    db=q.get("db", "handoff"),
                                    partitions=q.get("partitions"))
            except Exception as e:
                res = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            self.catchups.append(res)
            self._send(pack(h._replace(op=T_CATCHUP_DONE), key, json.dumps(res).encode()),
                       addr)
        threading.Thread(target=run, name="nice-catchup", daemon=True).start()

    def catch_up(self, donor, *, db="handoff", partitions=None):
        """Copy the donor's newer objects, then resolve this node's logged puts with the
        primaries (module docstring)."""
        t0 = time.monotonic()
        res = {"ok": False, "objects": 0, "fetched": 0, "applied": 0, "batches": 0,
               "fetch_requests": 0, "fetch_replies": 0, "fetched_alone": 0,
               "log_committed": 0, "log_dropped": 0, "log_kept": 0}
        after = None
        while True:
            q = {"db": db, "partitions": partitions, "after": after.hex() if after else None}
            rh, _, raw = self.ask(donor, T_SYNC, json.dumps(q).encode())
            res["batches"] += 1
            want = []
            for i in range(rh.nfrag):
                okey, ts, prim = _SYNC.unpack_from(raw, i * _SYNC.size)
                res["objects"] += 1
                after = okey
                mine = self.record(okey)
                if mine is None or mine.order < (ts, prim):
                    want.append(okey)
            for i in range(0, len(want), FETCH_BATCH):
                self._fetch_batch(donor, db, want[i:i + FETCH_BATCH], res)
            if rh.flags & F_LAST:
                break
        # the logged puts of this node (pending records that survived a crash)
        with self.lock:
            mine = [(k, cl, r) for k, ps in self.pending.items() for (cl, r) in ps]
        for k, cl, r in mine:
            part = self._part(k)
            prim = self.cfg.parts[part]["primary"]
            if prim == self.cfg.node:
                res["log_kept"] += 1
                continue
            _, _, raw = self.ask(self._node_addr(prim), T_QUERY, json.dumps(
                {"puts": [[k.hex(), cl, r]]}).encode())
            _, _, _, state, ts, p = json.loads(raw)["states"][0]
            with self.lock:
                if state == "committed" or state == "done":
                    self._commit(k, cl, r, ts, p)
                    res["log_committed"] += 1
                elif state == "pending":
                    res["log_kept"] += 1
                else:
                    self._abort(head(OP_ABORT, flags=F_DISCARD, cid=cl, req=r), k, b"",
                                None)
                    res["log_dropped"] += 1
        res["ok"] = True
        res["seconds"] = round(time.monotonic() - t0, 4)
        return res

    def _fetch_batch(self, donor, db, keys, res):
        """Copy ``keys`` from the donor: one ``T_FETCH_MANY`` (its reply's fragments), the
        objects too large for a fragment one ``T_FETCH`` each; merged newest-wins in one
        LMDB transaction."""
        parts = self.ask(donor, T_FETCH_MANY, bytes([db == "handoff"]) + b"".join(keys),
                         frags=True, timeout=1.0)
        res["fetch_requests"] += 1
        res["fetch_replies"] += len(parts)
        got = []
        for _, _, raw in parts:
            pos = 0
            while pos < len(raw):
                k, ts, prim, kind, size = _OBJ.unpack_from(raw, pos)
                pos += _OBJ.size
                if kind == OBJ_VALUE:
                    got.append((k, Record(ts, prim, 0, 0, {}, raw[pos:pos + size])))
                    pos += size
                elif kind == OBJ_ALONE:
                    one = self.ask(donor, T_FETCH, json.dumps({"db": db}).encode(), k,
                                   frags=True, timeout=1.0)
                    res["fetched_alone"] += 1
                    fh = one[0][0]
                    got.append((k, Record(fh.ts, fh.rsv, 0, 0, {},
                                          b"".join(p[2] for p in one))))
        res["fetched"] += len(got)
        res["applied"] += self._merge_many(got)

    def _merge_many(self, objects):
        """Commit copied objects ``[(key, Record)]`` in one transaction, each if newer than
        the stored one (its last-req map kept); the number applied."""
        n = 0
        with self.lock:
            with self.server.env.begin(write=True) as txn:
                for key, new in objects:
                    old = txn.get(_okey(key))
                    rec = Record.unpack(old) if old is not None else None
                    if rec is not None and rec.order >= new.order:
                        continue
                    if rec is not None:
                        new.last = dict(rec.last)
                    txn.put(_okey(key), new.pack())
                    n += 1
        return n

    # ---- NOOB baselines --------------------------------------------------------------------
    def _forward(self, h, key, route, rest, addr):
        """Not the last hop: pass the request on (the client's address kept). A next hop
        ``0.0.0.0:0`` is resolved here (replica-aware: the key's primary, or for a 2PC get
        a random replica); ``0.0.0.0:1`` is a random node (a replica-oblivious gateway)."""
        nxt = route.hops[route.pos + 1]
        if nxt[0] == "0.0.0.0":
            if nxt[1] == 1:
                nxt = self._node_addr(random.choice(sorted(self.cfg.nodes)))
            else:
                p = self.cfg.parts[self._part(key)]
                if h.op == T_NB_GET and h.flags & F_2PC:
                    nxt = self._node_addr(random.choice(p["replicas"]))
                else:
                    nxt = self._node_addr(p["primary"])
            route.hops[route.pos + 1] = nxt
        route.pos += 1
        if not h.client:
            h = h._replace(client=ip_int(addr[0]), rsv=h.rsv or addr[1])
        self._send(pack(h, key, route.pack() + rest), nxt)

    def _nb_put(self, h, key, data, addr):
        self._count("ni_noob")
        route, rest = Route.unpack(data)
        if route.pos + 1 < len(route.hops):
            return self._forward(h, key, route, rest, addr)
        part = self._part(key)
        if self.cfg.parts[part]["primary"] != self.cfg.node:
            raise ValueError("NOOB put at a node that is not the primary")
        secs = tuple(m for m in self.cfg.parts[part]["replicas"] if m != self.cfg.node)
        if h.flags & F_2PC:
            # 2PC: this node reassembles as a member; once whole it relays the object to
            # the secondaries as unicast PUT fragments (see _relay) and coordinates
            return self._put(h._replace(op=OP_PUT), key, rest, addr, noob=F_2PC, via=secs)
        cid = cid_of(h, addr)
        ident = ("pb", cid, h.req, key)
        with self.lock:
            a = self.asm.get(ident)
            if a is None:
                a = self.asm[ident] = Reassembly(h.nfrag, h.size)
                a.to, a.meta = self._reply_to(h, addr), (h.rsv or addr[1], 1, secs)
            if not a.add(h.frag, rest):
                return
            del self.asm[ident]
            value = a.value()
            rec = self.record(key, part)
            port = h.rsv or addr[1]
            st = self._coord(key, cid, h.req, port, part)
            st.members, st.noob, st.since, st.value = set(secs), 1, time.monotonic(), value
            if rec is not None and rec.done(cid, h.req):
                st.complete = True
                return self._finish(st, already=True)
            st.ts = max(rec.ts if rec else 0, self.assigned.get(key, 0)) + 1
            self.assigned[key] = st.ts
            st.ts_sent = time.monotonic()
            self._store(key, Record(st.ts, self.cfg.node, cid, h.req, {}, value), part)
            st.acks = set(secs)            # primary-backup: no prepare phase
        self._replicate(st, secs)
        with self.lock:
            if not secs:
                st.complete = True
                self._finish(st)

    def _replicate(self, st, to):
        for m in sorted(to):
            for i, chunk in enumerate(frags_of(st.value)):
                self._send(pack(head(T_NB_REP, frag=i, nfrag=n_frags(len(st.value)),
                                     cid=st.client, req=st.req, ts=st.ts,
                                     size=len(st.value), part=self.cfg.node), st.key, chunk),
                           self._node_addr(m))

    def _store(self, key, new, part):
        """(under lock) newest-wins store of a whole record (primary-backup)."""
        env = self._env(part)
        with env.begin(write=True) as txn:
            old = txn.get(_okey(key))
            rec = Record.unpack(old) if old is not None else None
            w = who(new.client, new.req)
            if rec is not None:
                new.last = dict(rec.last)
                new.last[w] = max(rec.last.get(w, -1), new.req)
                if rec.order >= new.order:
                    rec.last = new.last
                    new = rec
            else:
                new.last = {w: new.req}
            txn.put(_okey(key), new.pack())

    def _nb_rep(self, h, key, data, addr):
        cid = cid_of(h, addr)
        ident = ("rep", cid, h.req, key)
        with self.lock:
            a = self.asm.get(ident)
            if a is None:
                a = self.asm[ident] = Reassembly(h.nfrag, h.size)
            if not a.add(h.frag, data):
                return
            del self.asm[ident]
            self._store(key, Record(h.ts, h.part, cid, h.req, {}, a.value()),
                        self._part(key))
        self._send(pack(h._replace(op=T_NB_REP_ACK, frag=self.cfg.node), key), addr)

    def _nb_rep_ack(self, h, key, data, addr):
        with self.lock:
            st = self.coord.get((key, cid_of(h, addr), h.req))
            if st is None or st.ts != h.ts:
                return
            st.ts_acks.add(h.frag)
            if st.members <= st.ts_acks and not st.complete:
                st.complete = True
                self._finish(st)

    def _nb_get(self, h, key, data, addr):
        self._count("ni_noob")
        route, _ = Route.unpack(data)
        if route.pos + 1 < len(route.hops):
            return self._forward(h, key, route, b"", addr)
        self._get(h._replace(op=OP_GET, client=h.client or ip_int(addr[0]),
                             rsv=h.rsv or addr[1]), key, b"", addr, env=self.server.env)
