"""NetLR in the storage agents: ``netstor-server``'s side (a versioned object store on LMDB).

The server's NetLR socket (``--netlr-port``, default 7460) speaks NetLR itself
(:attr:`ServerCodec.serves`): every datagram is a NetLR header (:mod:`.header`) and a message,
served in the socket's receiver thread in arrival order (every write is its own LMDB
transaction, fsynced unless ``--no-sync``).

Message after the 26-byte header
    ``key`` (16 bytes: :func:`key16` of the client's key), then for the data-plane ops the
    rest of the datagram: a WRITE's :func:`write_value` (``u32 op id``, the value), a READ
    nothing, a READ_REPLY the value, a WRITE_REPLY nothing. The host-to-host ops (16 and up,
    below) carry ``u16 length`` and that many bytes (a write's :func:`write_value`, a reply's
    value) and then their trailer. The switch reads only the header (``fp``, ``slot``,
    ``group``, ``seq``, ``rid``), never the key.

Object store
    One LMDB record per object: key ``b"lr" + key16`` (18 bytes: never an 8-byte storage key),
    value ``u32 seq, u16 n, n x u32 op ids`` (the current writer's op id first, then the
    latest op id of every other client that wrote it) and the object's value. **A write is
    applied only if its seq is newer than the stored one** (per-object seq order; an absent
    object takes any seq; "newer" is serial arithmetic on 32 bits, RFC 1982:
    ``0 < (new - old) mod 2**32 < 2**31``, so the switch's seq may wrap). Seq 0 is never
    stored: a read of an absent object answers seq 0 and an empty value.

    **Retries are applied once.** A client sends a timed-out write again with the same op id
    (a new seq). If that op id (or a later one of the same client) wrote this object before
    and another operation has written it since, the retry is *not* applied (``DONE``, counted
    in ``lr_done``) but acknowledged as usual: the operation already took effect, before the
    later one. Without this a resend
    brings an old value back after a newer one. The linearizability checker found exactly
    that in the test bed: a write superseded by a concurrent write of the same object is
    never acknowledged, because the switch drops its acks as stale, so its client resends
    it. A retry whose op id is still the current writer, or unknown here, is applied.

Data-plane ops (the switch's)
    * ``WRITE`` (a copy the switch addressed to this replica, ``seq`` set by the switch):
      applied if newer; **always** answered ``WRITE_REPLY`` with the header echoed (``group,
      slot, fp, seq, req, nrep``), ``rid`` = the copy's rid (the switch wrote this replica's
      id there) and the key, to the datagram's source (the client: the switch takes the
      reply on the way, counts it and passes only the committing one).
    * ``READ``: ``READ_REPLY`` with the stored value and its seq (0: absent), ``rid`` echoed,
      to the source.

Storage mode (flag :data:`F_STORAGE`, ``netstor-load --scheme netlr``)
    A READ or WRITE with flag ``F_STORAGE`` carries a netstor storage request
    (:mod:`netstor.proto`: GET or PUT, its 64-bit key, the value) instead of key16 and value;
    the object is :func:`key16` of that key (16 bytes big-endian), so ``group``, ``slot`` and
    ``fp`` are computed on it. The answer is READ_REPLY / WRITE_REPLY (flag kept) with the
    storage reply behind it (GET: the value or NOT_FOUND; PUT: OK), which the load
    generator's engine unwraps (:meth:`NetLrCodec.split_reply`). There is no op id (the load
    generator does not retry). A PUT with seq 0 (no switch sequenced it: a replica addressed
    directly) is given the object's next seq.

Host-to-host ops (16 and up: not data-plane ops; the switch forwards them as plain IPv4)
    Rejoin catch-up (phase 1 of a rejoin, ``docs/netlr.md``): the controller (or a test) sends
    :data:`T_CATCHUP` to the **joining** replica, the value being the donor's address
    (``u32 ip, u16 port``: a live, consistent replica's NetLR socket) and ``seq`` the batch
    size hint (0: default). The joiner pulls every object from the donor in key order:
    :data:`T_SYNC` (key = the cursor: the last key received, flags :data:`F_FIRST` on the
    first) answered by :data:`T_SYNC_REPLY` (a batch of objects ``key16, u32 seq, u16 len,
    value`` in the value; the header's key = the batch's last key; :data:`F_LAST` on the
    last batch), each request retried on a timeout, and applies every object **only if its
    seq is newer** than its own (writes the joiner received meanwhile through the switch win).
    When done it answers the catch-up request with :data:`T_CATCHUP_DONE` whose value is JSON
    ``{"objects": n, "applied": n, "batches": n, "ok": bool}``; then the controller makes it
    live (phase 2). The controller waits a settle time between adding the joiner to the copy
    list and sending ``T_CATCHUP``: a write multicast before the joiner was added reaches the
    donor within one switch-to-server path delay (each path is FIFO), so the donor holds it
    when its key is copied.

    Chain replication (CR, the baseline; van Renesse & Schneider, OSDI'04): :data:`T_CR_WRITE`
    carries a route trailer (``u32 client ip, u16 client port, u8 count, u8 position`` then
    ``count`` entries ``u32 ip, u16 port``: the chain, head first). The head assigns the
    object's next version (its stored seq + 1), every node applies it if newer and passes it
    to the next position; the tail answers :data:`T_CR_ACK` to the client. :data:`T_CR_READ`
    (to the tail) is answered :data:`T_CR_READ_REPLY` (value and seq).

    Hermes-like (the baseline; Katsarou et al., ASPLOS'20): :data:`T_HM_WRITE` from the client
    to any replica, the coordinator, with the replica set in the same route trailer (client
    address, then every replica). The coordinator takes the per-key logical timestamp
    ``ts = (version + 1) << 8 | node`` (``node`` = its position in the set: timestamps of
    different coordinators never tie), applies it and marks the key invalid, sends
    :data:`T_HM_INV` (value and ts) to every other replica, which applies it if newer, marks
    the key invalid and answers :data:`T_HM_ACK`; with every ack in, the coordinator marks the
    key valid if its ts is still the newest, sends :data:`T_HM_VAL` to the others (valid
    again if the ts matches) and answers :data:`T_HM_WRITE_REPLY` to the client.
    :data:`T_HM_READ` is served at once when the key is valid at that replica, else it waits
    until the key turns valid (answered :data:`T_HM_READ_REPLY`). The state (valid/invalid,
    pending writes and reads) is in memory; a replica failure is not handled (the baseline
    runs without failures).

Counters (``lr_`` prefix): ``lr_writes`` (write copies received, every scheme),
``lr_applied``, ``lr_stale`` (not newer: not applied), ``lr_done`` (a superseded operation's
retry: not applied, acknowledged), ``lr_reads``, ``lr_sync_objects``
(objects sent to joiners), ``lr_catchup_applied`` (objects a catch-up applied), ``lr_host``
(baseline host-to-host messages).
"""
from __future__ import annotations

import ipaddress
import json
import logging
import socket
import struct
import threading
import time

from netstor.agent.codec import ServerCodec

from .header import (LR_LEN, NETLR_UDP_PORT, OP_READ, OP_READ_REPLY, OP_WRITE,
                     OP_WRITE_REPLY, LrHeader)

__all__ = ["NetLrCodec", "ObjectStore", "key16", "newer", "Route", "pack_msg", "unpack_msg",
           "write_value", "split_write_value", "APPLIED", "STALE", "DONE", "OPS_KEPT",
           "pack_host", "unpack_host", "pack_objects", "unpack_objects", "ip_int", "ip_text",
           "T_CATCHUP", "T_CATCHUP_DONE", "T_SYNC", "T_SYNC_REPLY", "T_CR_WRITE", "T_CR_ACK",
           "T_CR_READ", "T_CR_READ_REPLY", "T_HM_WRITE", "T_HM_INV", "T_HM_ACK", "T_HM_VAL",
           "T_HM_WRITE_REPLY", "T_HM_READ", "T_HM_READ_REPLY", "F_FIRST", "F_LAST",
           "HOST_OPS", "KEY_BYTES", "F_STORAGE"]

log = logging.getLogger("netstor.offloads.netlr.codec")

KEY_BYTES = 16

# host-to-host ops (not data-plane ops)
T_CATCHUP = 16
T_CATCHUP_DONE = 17
T_SYNC = 18
T_SYNC_REPLY = 19
T_CR_WRITE = 20
T_CR_ACK = 21
T_CR_READ = 22
T_CR_READ_REPLY = 23
T_HM_WRITE = 24
T_HM_INV = 25
T_HM_ACK = 26
T_HM_VAL = 27
T_HM_WRITE_REPLY = 28
T_HM_READ = 29
T_HM_READ_REPLY = 30
HOST_OPS = {T_CATCHUP: "CATCHUP", T_CATCHUP_DONE: "CATCHUP_DONE", T_SYNC: "SYNC",
            T_SYNC_REPLY: "SYNC_REPLY", T_CR_WRITE: "CR_WRITE", T_CR_ACK: "CR_ACK",
            T_CR_READ: "CR_READ", T_CR_READ_REPLY: "CR_READ_REPLY", T_HM_WRITE: "HM_WRITE",
            T_HM_INV: "HM_INV", T_HM_ACK: "HM_ACK", T_HM_VAL: "HM_VAL",
            T_HM_WRITE_REPLY: "HM_WRITE_REPLY", T_HM_READ: "HM_READ",
            T_HM_READ_REPLY: "HM_READ_REPLY"}

# flags (the data plane does not act on flags; header.F_RETRY is 0x01)
F_STORAGE = 0x02         # READ/WRITE carrying a netstor storage request (netstor-load)
F_FIRST = 0x10
F_LAST = 0x20

SYNC_BATCH_BYTES = 1200          # objects per T_SYNC_REPLY: up to this many bytes
SYNC_TIMEOUT = 0.5               # per T_SYNC request, retried
SYNC_RETRIES = 20

_U16 = struct.Struct("!H")
_OBJ = struct.Struct("!16sH")
_ADDR = struct.Struct("!IH")
_SEQ = struct.Struct("!I")


def ip_int(addr) -> int:
    return int(ipaddress.IPv4Address(addr))


def ip_text(value: int) -> str:
    return str(ipaddress.IPv4Address(value))


def key16(key) -> bytes:
    """A client key as the 16 bytes on the wire: ``bytes`` as given, ``str`` UTF-8 encoded,
    ``int`` 16 bytes big-endian; shorter keys are padded with zero bytes on the right.
    fingerprint, slot and group are computed on these 16 bytes."""
    if isinstance(key, int):
        raw = key.to_bytes(KEY_BYTES, "big")
    elif isinstance(key, str):
        raw = key.encode()
    else:
        raw = bytes(key)
    if len(raw) > KEY_BYTES:
        raise ValueError(f"key of {len(raw)} bytes: at most {KEY_BYTES}")
    return raw.ljust(KEY_BYTES, b"\0")


def newer(seq: int, old) -> bool:
    """Whether ``seq`` is newer than ``old`` (None: absent, anything is newer): serial
    arithmetic on 32 bits (module docstring)."""
    if old is None:
        return True
    d = (seq - old) & 0xFFFFFFFF
    return 0 < d < 0x80000000


# ---- messages ------------------------------------------------------------------------------
def write_value(opid: int, value: bytes) -> bytes:
    """The value part of a write (WRITE, CR_WRITE, HM_WRITE, HM_INV): ``u32 op id`` (the
    client's operation, the same in every try; 0: none) then the value."""
    return _SEQ.pack(opid) + bytes(value)


def split_write_value(raw: bytes):
    """``(op id, value)`` of :func:`write_value`."""
    if len(raw) < 4:
        raise ValueError("write without its op id")
    return _SEQ.unpack_from(raw)[0], bytes(raw[4:])


def pack_msg(h: LrHeader, key: bytes, value: bytes = b"") -> bytes:
    """A data-plane datagram: header, key16, value."""
    return h.pack() + key16(key) + bytes(value)


def unpack_msg(data):
    """``(header, key16, value)`` of a data-plane datagram (ValueError if short)."""
    if len(data) < LR_LEN + KEY_BYTES:
        raise ValueError(f"NetLR datagram of {len(data)} bytes: header and key need "
                         f"{LR_LEN + KEY_BYTES}")
    return (LrHeader.unpack(data), bytes(data[LR_LEN:LR_LEN + KEY_BYTES]),
            bytes(data[LR_LEN + KEY_BYTES:]))


def pack_host(h: LrHeader, key: bytes, value: bytes = b"", trailer: bytes = b"") -> bytes:
    """A host-to-host datagram: header, key16, u16 value length, value, trailer."""
    value = bytes(value)
    return h.pack() + key16(key) + _U16.pack(len(value)) + value + trailer


def unpack_host(data):
    """``(header, key16, value, trailer)`` of a host-to-host datagram."""
    h, key, rest = unpack_msg(data)
    if len(rest) < 2:
        raise ValueError("host message without its value length")
    n = _U16.unpack_from(rest)[0]
    if len(rest) < 2 + n:
        raise ValueError(f"host message: value of {n} bytes truncated")
    return h, key, rest[2:2 + n], rest[2 + n:]


def pack_objects(objs) -> bytes:
    """``[(key16, raw record)]`` as a :data:`T_SYNC_REPLY` value."""
    return b"".join(_OBJ.pack(k, len(v)) + v for k, v in objs)


def unpack_objects(raw: bytes):
    out, pos = [], 0
    while pos < len(raw):
        if pos + _OBJ.size > len(raw):
            raise ValueError("sync batch truncated")
        k, n = _OBJ.unpack_from(raw, pos)
        pos += _OBJ.size
        if pos + n > len(raw) or n < 6:
            raise ValueError("sync batch: record truncated")
        out.append((k, raw[pos:pos + n]))
        pos += n
    return out


class Route:
    """The baselines' trailer: the client's address, then an ordered list of replicas
    (``[(ip, port)]``: the chain head first, or Hermes' replica set) and the receiver's
    ``position`` in it."""
    __slots__ = ("client", "nodes", "position")

    def __init__(self, client, nodes, position=0):
        self.client = (str(client[0]), int(client[1]))
        self.nodes = [(str(a), int(p)) for a, p in nodes]
        self.position = position

    def pack(self) -> bytes:
        return (_ADDR.pack(ip_int(self.client[0]), self.client[1]) +
                bytes([len(self.nodes), self.position]) +
                b"".join(_ADDR.pack(ip_int(a), p) for a, p in self.nodes))

    @classmethod
    def unpack(cls, raw: bytes) -> "Route":
        if len(raw) < _ADDR.size + 2:
            raise ValueError("no route")
        cip, cport = _ADDR.unpack_from(raw)
        n, pos = raw[_ADDR.size], raw[_ADDR.size + 1]
        base = _ADDR.size + 2
        if len(raw) < base + n * _ADDR.size or pos >= max(n, 1):
            raise ValueError(f"route of {n} entries, position {pos}: truncated or bad")
        nodes = [_ADDR.unpack_from(raw, base + i * _ADDR.size) for i in range(n)]
        return cls((ip_text(cip), cport), [(ip_text(a), p) for a, p in nodes], pos)

    def at(self, position) -> "Route":
        return Route(self.client, self.nodes, position)


# ---- the store -----------------------------------------------------------------------------
def _db_key(key: bytes) -> bytes:
    return b"lr" + key


APPLIED, STALE, DONE = "applied", "stale", "done"
OPS_KEPT = 256                    # op ids remembered per object: one per client id (8 bits)


def _client(opid):
    return opid >> 24


def _merge_ops(first, ops):
    """``first``'s op ids, then each other client's latest op id from ``ops`` (one per
    client: a client has one operation at a time, its counter only grows)."""
    out, seen = list(first), {_client(o) for o in first if o}
    best = {}
    for o in ops:
        c = _client(o)
        if o and c not in seen and (c not in best or (o & 0xFFFFFF) > (best[c] & 0xFFFFFF)):
            best[c] = o
    return out + [best[c] for c in best]


def _record(seq, ops, value) -> bytes:
    ops = list(ops)[:OPS_KEPT]
    return _SEQ.pack(seq) + _U16.pack(len(ops)) + b"".join(_SEQ.pack(o) for o in ops) + \
        bytes(value)


def _parse(raw):
    """``(seq, [op ids, the current writer's first], value)`` of a stored record."""
    raw = bytes(raw)
    seq = _SEQ.unpack_from(raw)[0]
    n = _U16.unpack_from(raw, 4)[0]
    ops = [_SEQ.unpack_from(raw, 6 + 4 * i)[0] for i in range(n)]
    return seq, ops, raw[6 + 4 * n:]


class ObjectStore:
    """Versioned objects in an LMDB environment (module docstring)."""
    _lock = threading.Lock()        # read-compare-write of one object (all servers: cheap)

    def __init__(self, env):
        self.env = env

    def record(self, key: bytes):
        """``(seq, ops, value)`` or None."""
        with self.env.begin(buffers=False) as txn:
            raw = txn.get(_db_key(key))
        return None if raw is None else _parse(raw)

    def get(self, key: bytes):
        """``(seq, value)`` or None."""
        rec = self.record(key)
        return None if rec is None else (rec[0], rec[2])

    def apply(self, key: bytes, seq: int, value: bytes, opid: int = 0) -> str:
        """A write of ``value`` with ``seq`` by operation ``opid`` (0: none; client id in the
        top 8 bits, the client's operation counter below): :data:`DONE` when this client's
        operation ``opid`` (or a later one of the same client) wrote the object here before
        and the current value is another operation's (a retry of a superseded write: not
        applied again); else :data:`APPLIED` if ``seq`` is newer than the stored seq,
        :data:`STALE` if not. The record keeps the latest op id of every client that wrote
        it."""
        with self.env.begin(write=True) as txn:
            raw = txn.get(_db_key(key))
            old = None if raw is None else _parse(raw)
            if old is not None and opid and old[1] and old[1][0] != opid:
                mine = [o for o in old[1] if _client(o) == _client(opid)]
                if mine and (mine[0] & 0xFFFFFF) >= (opid & 0xFFFFFF):
                    return DONE
            if not newer(seq, None if old is None else old[0]):
                return STALE
            ops = [] if old is None else old[1]
            first = [opid] if opid else [0]
            txn.put(_db_key(key), _record(seq, _merge_ops(first, [o for o in ops if
                                                                   _client(o) !=
                                                                   _client(opid) or
                                                                   not opid]),
                                          value))
            return APPLIED

    def merge(self, key: bytes, raw: bytes) -> bool:
        """A record copied from another replica (catch-up): taken if its seq is newer (the
        op ids of both kept); True if taken."""
        seq, ops, value = _parse(raw)
        with self.env.begin(write=True) as txn:
            mine = txn.get(_db_key(key))
            if mine is not None:
                mseq, mops, _ = _parse(mine)
                if not newer(seq, mseq):
                    return False
                ops = _merge_ops(ops[:1], ops[1:] + mops)
            txn.put(_db_key(key), _record(seq, ops, value))
            return True

    def next_version(self, key: bytes, low_bits: int = 0, shift: int = 0):
        """The next version of ``key`` for a writer that assigns them itself (CR's head:
        ``shift`` 0; Hermes' coordinator: ``(version + 1) << 8 | node``)."""
        cur = self.get(key)
        ver = 0 if cur is None else cur[0] >> shift
        return (((ver + 1) << shift) | low_bits) & 0xFFFFFFFF

    def scan(self, after: bytes | None, max_bytes: int):
        """Stored records in key order after key ``after`` (None: from the first), up to
        ``max_bytes`` of batch: ``([(key16, raw record)], last)`` (``last``: no more)."""
        out, size = [], 0
        with self.env.begin(buffers=False) as txn:
            cur = txn.cursor()
            start = _db_key(after) if after is not None else b"lr"
            if not cur.set_range(start):
                return out, True
            for k, v in cur:
                if not k.startswith(b"lr") or len(k) != 2 + KEY_BYTES:
                    if k > b"lr\xff":
                        return out, True
                    continue
                key = bytes(k[2:])
                if after is not None and key <= after:
                    continue
                entry = _OBJ.size + len(v)
                if out and size + entry > max_bytes:
                    return out, False
                out.append((key, bytes(v)))
                size += entry
            return out, True


# ---- the codec -----------------------------------------------------------------------------
class NetLrCodec(ServerCodec):
    name = "netlr"
    prefix = "lr"
    default_port = NETLR_UDP_PORT
    serves = True
    extra_counters = ("lr_writes", "lr_applied", "lr_stale", "lr_done", "lr_reads",
                      "lr_sync_objects", "lr_catchup_applied", "lr_host")

    def __init__(self):
        # Hermes-like state of this server (the codec is one instance per server)
        self._lock = threading.Lock()
        self._invalid = {}          # key16 -> ts of the write that invalidated it
        self._pending_writes = {}   # (key16, ts) -> [acks missing, header, route, key]
        self._waiting_reads = {}    # key16 -> [(header, addr)]
        self.catchups = []          # results of the catch-ups this server ran

    def split_request(self, data):          # never called: serve() takes every datagram
        return None

    def split_reply(self, data):
        """The load generator's engine: ``(LrHeader, storage reply)`` of a storage-mode
        answer (:data:`F_STORAGE`), else None."""
        if len(data) > LR_LEN and data[0] in (OP_READ_REPLY, OP_WRITE_REPLY) and \
                data[1] & F_STORAGE:
            return LrHeader.unpack(data), data[LR_LEN:]
        return None

    def reply_header(self, header, server_id, load, service_ns):
        raise NotImplementedError("NetLR replies are NetLR packets (serve)")

    # ---- serving ---------------------------------------------------------------------------
    def serve(self, server, sock, data, addr):
        try:
            if len(data) < LR_LEN + KEY_BYTES:
                raise ValueError(f"{len(data)} bytes: too short")
            op = data[0]
            if op in (OP_WRITE, OP_READ) and data[1] & F_STORAGE:
                return self._storage(server, sock, data, addr)
            if op in (OP_WRITE, OP_READ):
                h, key, value = unpack_msg(data)
                trailer = b""
            elif op in HOST_OPS:
                h, key, value, trailer = unpack_host(data)
            else:
                raise ValueError(f"op {op} is not served by a replica")
            handler = self._handlers()[op]
        except (ValueError, KeyError) as e:
            self._drop(server, addr, str(e))
            return
        try:
            handler(server, sock, h, key, value, trailer, addr)
        except ValueError as e:
            self._drop(server, addr, str(e))

    def _handlers(self):
        return {OP_WRITE: self._write, OP_READ: self._read, T_CATCHUP: self._catchup,
                T_SYNC: self._sync, T_CR_WRITE: self._cr_write, T_CR_READ: self._cr_read,
                T_HM_WRITE: self._hm_write, T_HM_INV: self._hm_inv, T_HM_ACK: self._hm_ack,
                T_HM_VAL: self._hm_val, T_HM_READ: self._hm_read}

    def _drop(self, server, addr, why):
        server.count("lr_dropped")
        server.count("dropped")
        log.debug("netlr: datagram from %s dropped: %s", addr, why)

    def _send(self, server, sock, payload, to):
        server.count("lr_replies")
        try:
            sock.sendto(payload, to)
        except OSError as e:
            server.count("send_errors")
            log.debug("netlr: send to %s failed: %s", to, e)

    def _apply(self, server, key, seq, raw) -> str:
        """Apply a write (``raw``: :func:`write_value`): APPLIED, STALE or DONE."""
        server.count("lr_writes")
        opid, value = split_write_value(raw)
        res = ObjectStore(server.env).apply(key, seq, value, opid)
        server.count({APPLIED: "lr_applied", STALE: "lr_stale", DONE: "lr_done"}[res])
        return res

    # ---- NetLR: the data plane's ops -------------------------------------------------------
    def _write(self, server, sock, h, key, value, trailer, addr):
        self._apply(server, key, h.seq, value)
        self._send(server, sock, pack_msg(h._replace(op=OP_WRITE_REPLY), key), addr)

    def _read(self, server, sock, h, key, value, trailer, addr):
        server.count("lr_reads")
        cur = ObjectStore(server.env).get(key)
        seq, val = cur if cur is not None else (0, b"")
        self._send(server, sock, pack_msg(h._replace(op=OP_READ_REPLY, seq=seq), key, val),
                   addr)

    def _storage(self, server, sock, data, addr):
        from netstor.proto import Header, Op, ProtocolError, Status
        try:
            h = LrHeader.unpack(data)
            req = Header.unpack(data[LR_LEN:])
        except (ValueError, ProtocolError) as e:
            return self._drop(server, addr, f"storage mode: {e}")
        key = key16(req.key)
        store = ObjectStore(server.env)
        if h.op == OP_WRITE and req.op == Op.PUT:
            server.count("lr_writes")
            with ObjectStore._lock:
                seq = h.seq or store.next_version(key)
                res = store.apply(key, seq, req.value)
            server.count("lr_applied" if res == APPLIED else "lr_stale")
            rep = req.reply(Status.OK, server_id=server.server_id)
            out = h._replace(op=OP_WRITE_REPLY, seq=seq)
        elif h.op == OP_READ and req.op == Op.GET:
            server.count("lr_reads")
            cur = store.get(key)
            rep = req.reply(Status.OK if cur else Status.NOT_FOUND,
                            value=cur[1] if cur else b"", server_id=server.server_id)
            out = h._replace(op=OP_READ_REPLY, seq=cur[0] if cur else 0)
        else:
            return self._drop(server, addr, f"storage mode: {Op.name(req.op)} in a "
                                            f"NetLR op {h.op}")
        self._send(server, sock, out.pack() + rep.pack(), addr)

    # ---- rejoin catch-up -------------------------------------------------------------------
    def _sync(self, server, sock, h, key, value, trailer, addr):
        after = None if h.flags & F_FIRST else key
        objs, last = ObjectStore(server.env).scan(after, SYNC_BATCH_BYTES)
        server.count("lr_sync_objects", len(objs))
        head = objs[-1][0] if objs else key
        self._send(server, sock, pack_host(
            h._replace(op=T_SYNC_REPLY, flags=F_LAST if last else 0, seq=len(objs)), head,
            pack_objects(objs)), addr)

    def _catchup(self, server, sock, h, key, value, trailer, addr):
        if len(value) < _ADDR.size:
            raise ValueError("CATCHUP needs the donor's address")
        ip, port = _ADDR.unpack_from(value)
        donor = (ip_text(ip), port)
        bind = sock.getsockname()[0]

        def run():
            res = catch_up(server, donor, bind=bind)
            self.catchups.append(res)
            self._send(server, sock, pack_host(h._replace(op=T_CATCHUP_DONE), key,
                                               json.dumps(res).encode()), addr)
        threading.Thread(target=run, name="netlr-catchup", daemon=True).start()

    # ---- chain replication -----------------------------------------------------------------
    def _cr_write(self, server, sock, h, key, value, trailer, addr):
        server.count("lr_host")
        route = Route.unpack(trailer)
        seq = h.seq
        if route.position == 0:         # the head orders the writes of this object
            with ObjectStore._lock:
                seq = ObjectStore(server.env).next_version(key)
                if self._apply(server, key, seq, value) == DONE:
                    seq = 0             # a retry of a superseded write: passed on, a no-op
        elif seq:
            self._apply(server, key, seq, value)
        h = h._replace(seq=seq, rid=route.position)
        if route.position + 1 < len(route.nodes):
            nxt = route.at(route.position + 1)
            self._send(server, sock, pack_host(h, key, value, nxt.pack()),
                       route.nodes[route.position + 1])
        else:
            self._send(server, sock, pack_host(h._replace(op=T_CR_ACK), key), route.client)

    def _cr_read(self, server, sock, h, key, value, trailer, addr):
        server.count("lr_reads")
        cur = ObjectStore(server.env).get(key)
        seq, val = cur if cur is not None else (0, b"")
        self._send(server, sock, pack_host(h._replace(op=T_CR_READ_REPLY, seq=seq), key, val),
                   addr)

    # ---- Hermes-like -----------------------------------------------------------------------
    def _hm_write(self, server, sock, h, key, value, trailer, addr):
        server.count("lr_host")
        route = Route.unpack(trailer)
        others = [i for i in range(len(route.nodes)) if i != route.position]
        with self._lock:
            with ObjectStore._lock:
                ts = ObjectStore(server.env).next_version(key, route.position & 0xFF, 8)
                done = self._apply(server, key, ts, value) == DONE
            if done:        # a retry of a write a later one superseded: it took effect;
                # answered once the key is valid here (the later write's INVs are all in)
                reply = (h._replace(op=T_HM_WRITE_REPLY, seq=0, rid=route.position),
                         route.client)
                if key in self._invalid:
                    self._waiting_reads.setdefault(key, []).append(reply)
                    return
            if done:
                self._send(server, sock, pack_host(reply[0], key), reply[1])
                return
            self._invalid[key] = ts
            self._pending_writes[(key, ts)] = [set(others), h, route, key]
        h = h._replace(seq=ts, rid=route.position)
        if not others:
            return self._hm_done(server, sock, key, ts)
        for i in others:
            self._send(server, sock, pack_host(h._replace(op=T_HM_INV), key, value,
                                               route.at(i).pack()), route.nodes[i])

    def _hm_inv(self, server, sock, h, key, value, trailer, addr):
        server.count("lr_host")
        route = Route.unpack(trailer)
        with self._lock:
            if self._apply(server, key, h.seq, value) == APPLIED:
                self._invalid[key] = h.seq
        self._send(server, sock, pack_host(h._replace(op=T_HM_ACK, rid=route.position), key,
                                           b"", route.pack()), addr)

    def _hm_ack(self, server, sock, h, key, value, trailer, addr):
        server.count("lr_host")
        route = Route.unpack(trailer)
        with self._lock:
            p = self._pending_writes.get((key, h.seq))
            if p is None:
                return
            p[0].discard(route.position)
            if p[0]:
                return
        self._hm_done(server, sock, key, h.seq)

    def _hm_done(self, server, sock, key, ts):
        """Every ack of write ``ts`` is in: validate (if still the newest), VAL the others,
        answer the client."""
        with self._lock:
            _, h, route, _ = self._pending_writes.pop((key, ts))
            reads = self._validate(key, ts)
        h = h._replace(seq=ts, rid=route.position)
        for i in range(len(route.nodes)):
            if i != route.position:
                self._send(server, sock, pack_host(h._replace(op=T_HM_VAL), key),
                           route.nodes[i])
        self._answer_reads(server, sock, key, reads)
        self._send(server, sock, pack_host(h._replace(op=T_HM_WRITE_REPLY), key),
                   route.client)

    def _validate(self, key, ts):
        """(under self._lock) key valid again if ``ts`` is the newest it saw; the reads that
        waited for it."""
        if self._invalid.get(key) != ts:
            return []
        del self._invalid[key]
        return self._waiting_reads.pop(key, [])

    def _hm_val(self, server, sock, h, key, value, trailer, addr):
        server.count("lr_host")
        with self._lock:
            reads = self._validate(key, h.seq)
        self._answer_reads(server, sock, key, reads)

    def _answer_reads(self, server, sock, key, reads):
        if not reads:
            return
        cur = ObjectStore(server.env).get(key)
        seq, val = cur if cur is not None else (0, b"")
        for h, addr in reads:
            if h.op == T_HM_WRITE_REPLY:        # a retried write's answer that waited
                self._send(server, sock, pack_host(h, key), addr)
            else:
                self._send(server, sock, pack_host(h._replace(op=T_HM_READ_REPLY, seq=seq),
                                                   key, val), addr)

    def _hm_read(self, server, sock, h, key, value, trailer, addr):
        server.count("lr_reads")
        with self._lock:
            if key in self._invalid:         # wait until the key is valid again
                self._waiting_reads.setdefault(key, []).append((h, addr))
                return
        self._answer_reads(server, sock, key, [(h, addr)])


def catch_up(server, donor, *, bind="0.0.0.0", timeout=SYNC_TIMEOUT, retries=SYNC_RETRIES):
    """Copy every object of ``donor`` (a replica's NetLR socket ``(ip, port)``) into
    ``server``'s store, each only if its seq is newer (module docstring): ``{"objects",
    "applied", "batches", "ok", "seconds"}``."""
    t0 = time.monotonic()
    store = ObjectStore(server.env)
    res = {"objects": 0, "applied": 0, "batches": 0, "ok": False}
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind((bind, 0))
        s.settimeout(timeout)
        cursor, first, req = bytes(KEY_BYTES), True, 0
        while True:
            req += 1
            h = LrHeader(op=T_SYNC, flags=F_FIRST if first else 0, group=0, slot=0, fp=0,
                         seq=0, rid=0, nrep=0, req=req)
            got = None
            for _ in range(retries):
                s.sendto(pack_host(h, cursor), donor)
                end = time.monotonic() + timeout
                while got is None and time.monotonic() < end:
                    try:
                        raw, _ = s.recvfrom(65535)
                        rh, rkey, rval, _ = unpack_host(raw)
                    except (socket.timeout, ValueError):
                        continue
                    if rh.op == T_SYNC_REPLY and rh.req == req:
                        got = (rh, rkey, rval)
                if got is not None:
                    break
            if got is None:
                log.warning("netlr catch-up from %s: no answer after %d tries", donor, retries)
                break
            rh, rkey, rval = got
            res["batches"] += 1
            for k, raw in unpack_objects(rval):
                res["objects"] += 1
                if store.merge(k, raw):
                    res["applied"] += 1
                    server.count("lr_catchup_applied")
            if rh.flags & F_LAST:
                res["ok"] = True
                break
            cursor, first = rkey, False
    finally:
        s.close()
    res["seconds"] = round(time.monotonic() - t0, 4)
    return res
