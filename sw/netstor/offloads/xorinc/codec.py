"""XORInc in the storage agents: ``netstor-server``'s side (a chunk store on LMDB).

The server's XORInc socket (``--xorinc-port``, default 7450) speaks XORInc itself
(:attr:`ServerCodec.serves`): every datagram is an XORInc packet (:mod:`.header`), served in
the socket's receiver thread, in arrival order (not by the storage workers: the service-time
model does not apply; every chunk write is its own LMDB transaction, fsynced unless
``--no-sync``).

Chunk store
    One LMDB record per chunk: key ``b"xc" + stripe (32 bits) + chunk index (8 bits)`` (7
    bytes: never an 8-byte storage key), value the chunk's bytes. A write or XOR at byte
    offset ``64 * off`` past the chunk's end extends it with zeros; a missing chunk reads as
    absent (READ/REPAIR answer ``F_ERROR``), except that a delta applied to a missing chunk
    applies to zeros (so a stripe can be written as deltas onto nothing).

Packets a node serves (the data plane's types, :mod:`.header`)
    * ``READ`` (stripe, chunk): the whole chunk back as ``READ_REPLY`` packets of at most
      1,024 bytes (``off`` in beats, ``F_LAST`` on the last) to ``req_addr:req_port`` (the
      sender when 0).
    * ``REPAIR`` (stripe, ``chunk`` = the lost chunk, ``src`` = the chunk this helper
      contributes, ``need``, ``code``, ``opid``): the helper's part of NetRepair: chunk ``src``
      as ``PART`` packets (fields echoed, ``src`` = its chunk index) addressed to the
      requester's IPv4 address and UDP port 7450 (:attr:`XorIncCodec.engine_port`: the port
      the switch's parser recognises): the switch's engine takes them on the way and only
      the completing one leaves, as ``REPAIRED``, to ``req_port``. (Without the engine on
      the path the parts reach the requester's port 7450.)
    * ``UPD_NEW`` (stripe, ``chunk`` = the chunk being updated), header-only as the switch
      passes it on after keeping its data (a frame with its data is accepted too): an update
      of this node's chunk starts: the node sends its old data of the packet's range
      (``off``, ``len``; ``len`` 0 = the whole chunk) as ``UPD_OLD`` packets (``src`` = the
      chunk, ``need`` echoed) to the requester's address, port 7450 like ``PART``: the
      switch's engine meets them with the new data.
    * ``DELTA`` (stripe, ``src`` = the chunk the copy is for -- the data node's own chunk or
      the parity's, as the switch's copy list addresses it; ``chunk`` = the updated chunk):
      the node XORs the data into that chunk at ``off`` (the switch already scaled a parity's
      copy by its coefficient: data node new = old XOR delta, parity node parity XOR= scaled
      delta) and ``ACK``\\ s to the requester (``src`` = the chunk it applied to).

Host-to-host types of the baselines (:data:`T_WRITE` ... :data:`T_XUPDATE`, 16 and up: not
data-plane types; the switch forwards them as plain IPv4). Their data is followed by a
**route** (after the ``len`` data bytes): ``u8 position, u8 count`` then ``count`` entries of
``u8 chunk, u8 coeff, u8 parent, u32 ip, u16 port`` (9 bytes): a tree of nodes (entry 0 the
root, ``parent`` 255 for it). The receiving node is entry ``position``; it acts on chunk
``entry.chunk`` with coefficient ``entry.coeff`` (host baselines compute on the hosts, so the
coefficients travel with them), then sends to its children (the entries whose parent is its
position) with ``position`` set to each child's index.

    * ``T_WRITE``: store the data at ``off`` (stripe set-up); ``ACK`` to the requester.
    * ``T_CHAIN`` (repair pipelining, ATC'17): ``seq`` = the part's length in bytes; the
      data (``len`` 0 = zeros: the first hop's request, which carries no data) is a partial
      sum; the node XORs ``coeff * its chunk`` into it and passes it on
      to its child, or, being the last, sends it to the requester as ``T_CHAIN`` with an empty
      route (the repaired part).
    * ``T_XUPDATE`` (conventional update, T-Update; the data node is the root): the new data;
      the data node computes ``delta = old XOR new``, stores the new data, ``ACK``\\ s and sends
      the raw delta as ``T_XDELTA`` to its children (conventional: every parity node, a star;
      T-Update: a tree).
    * ``T_XDELTA``: a raw delta: the node XORs ``coeff * delta`` into its chunk, ``ACK``\\ s,
      and forwards the raw delta to its children.
    * ``T_STATS``: the node's ``xi_*`` counters back (JSON in the data; not chunk data, not
      counted as such), so a client can count a phase's transfers at every host.

Exposure: answers go to the requester the header names (``req_addr:req_port``; port 7450
for the engine's contributions), not to the datagram's source: results travel through the
switch to the requester. So a node sends chunks to whoever a request names; with ``--allow``
it serves only requests whose source *and* named requester are inside the allowed prefixes
(others are dropped, counted in ``not_allowed``). As for the storage port, what keeps a node
from being a reflector is where it is reachable from (the storage network only).

Counters (``xi_`` prefix): ``xi_received``, ``xi_replies`` (packets sent), ``xi_dropped``
(not an XORInc packet or a type a node does not serve), ``xi_data_rx`` / ``xi_data_tx``
(packets carrying chunk data received / sent: the agents' count of transfers),
``xi_missing`` (a request for a chunk this node does not hold), ``xi_reads``, ``xi_parts``,
``xi_olds``, ``xi_deltas``, ``xi_writes``, ``xi_chains``.
"""
from __future__ import annotations

import ipaddress
import json
import logging
import struct

import numpy as np

from netstor.agent.codec import ServerCodec
from netstor.model.gf import mul_vec

from .header import (BEAT, F_ERROR, F_LAST, MAX_DATA, T_ACK, T_DELTA, T_PART, T_READ,
                     T_READ_REPLY, T_REPAIR, T_UPD_NEW, T_UPD_OLD, UDP_DATA_OFFSET,
                     XORINC_UDP_PORT, XI_LEN, XiHeader, frame_payload, split)

__all__ = ["XorIncCodec", "ChunkStore", "Route", "T_WRITE", "T_CHAIN", "T_XUPDATE",
           "T_XDELTA", "T_STATS", "HOST_TYPES", "chunk_key", "packets", "ip_int", "ip_text"]

log = logging.getLogger("netstor.offloads.xorinc.codec")

# host-to-host types of the baselines (not data-plane types: routed as plain IPv4)
T_WRITE = 16
T_CHAIN = 17
T_XUPDATE = 18
T_XDELTA = 19
T_STATS = 20
HOST_TYPES = {T_WRITE: "WRITE", T_CHAIN: "CHAIN", T_XUPDATE: "XUPDATE", T_XDELTA: "XDELTA",
              T_STATS: "STATS"}
DATA_TYPES = (T_READ_REPLY, T_PART, T_UPD_NEW, T_UPD_OLD, T_DELTA, T_WRITE, T_CHAIN,
              T_XUPDATE, T_XDELTA)

_KEY = struct.Struct("!2sIB")
_ENTRY = struct.Struct("!BBBIH")
NO_PARENT = 0xFF


def chunk_key(stripe: int, chunk: int) -> bytes:
    return _KEY.pack(b"xc", stripe, chunk)


def ip_int(addr) -> int:
    return int(ipaddress.IPv4Address(addr))


def ip_text(value: int) -> str:
    return str(ipaddress.IPv4Address(value))


def packets(length: int, off0: int = 0):
    """``[(off in beats, byte start, byte end)]``: a range of ``length`` bytes starting at
    beat ``off0`` cut into packets of at most :data:`MAX_DATA` bytes."""
    out, pos = [], 0
    while pos < length or (length == 0 and not out):
        end = min(length, pos + MAX_DATA)
        out.append((off0 + pos // BEAT, pos, end))
        if end == pos:
            break
        pos = end
    return out


class Route:
    """A baseline's route tree (module docstring): ``entries`` = ``[(chunk, coeff, parent,
    ip, port)]``, ``position`` = the receiver's entry."""
    __slots__ = ("position", "entries")

    def __init__(self, entries, position=0):
        self.entries = [tuple(int(x) for x in e) for e in entries]
        self.position = position

    def pack(self) -> bytes:
        return bytes([self.position, len(self.entries)]) + \
            b"".join(_ENTRY.pack(*e) for e in self.entries)

    @classmethod
    def unpack(cls, raw: bytes) -> "Route":
        if len(raw) < 2:
            raise ValueError("no route")
        pos, n = raw[0], raw[1]
        if len(raw) < 2 + n * _ENTRY.size or (n and pos >= n):
            raise ValueError(f"route of {n} entries, position {pos}: truncated or bad")
        return cls([_ENTRY.unpack_from(raw, 2 + i * _ENTRY.size) for i in range(n)], pos)

    @property
    def me(self):
        return self.entries[self.position]

    def children(self):
        return [i for i, e in enumerate(self.entries)
                if e[2] == self.position and i != self.position]

    def at(self, position) -> "Route":
        return Route(self.entries, position)


class ChunkStore:
    """Chunks of stripes in an LMDB environment (module docstring)."""

    def __init__(self, env):
        self.env = env

    def get(self, stripe, chunk):
        with self.env.begin(buffers=False) as txn:
            return txn.get(chunk_key(stripe, chunk))

    def put(self, stripe, chunk, data: bytes, start: int = 0):
        """Write ``data`` at byte ``start`` (a new chunk, or part of one)."""
        with self.env.begin(write=True) as txn:
            key = chunk_key(stripe, chunk)
            old = txn.get(key) or b""
            if start == 0 and len(data) >= len(old):
                new = bytes(data)
            else:
                buf = bytearray(old.ljust(start + len(data), b"\0"))
                buf[start:start + len(data)] = data
                new = bytes(buf)
            txn.put(key, new)

    def xor(self, stripe, chunk, data: bytes, start: int = 0) -> bytes:
        """XOR ``data`` into the chunk at byte ``start`` (a missing chunk is zeros); returns
        the old bytes of that range."""
        with self.env.begin(write=True) as txn:
            key = chunk_key(stripe, chunk)
            buf = bytearray((txn.get(key) or b"").ljust(start + len(data), b"\0"))
            old = bytes(buf[start:start + len(data)])
            buf[start:start + len(data)] = (np.frombuffer(old, np.uint8) ^
                                            np.frombuffer(bytes(data), np.uint8)).tobytes()
            txn.put(key, bytes(buf))
            return old


class XorIncCodec(ServerCodec):
    name = "xorinc"
    prefix = "xi"
    default_port = XORINC_UDP_PORT
    serves = True
    #: UDP port of the contributions to the engine (PART, UPD_OLD), sent to the requester's
    #: address: the switch's parser recognises XORInc by this destination port
    engine_port = XORINC_UDP_PORT
    extra_counters = ("xi_data_rx", "xi_data_tx", "xi_missing", "xi_reads", "xi_parts",
                      "xi_olds", "xi_deltas", "xi_writes", "xi_chains")

    def split_request(self, data):          # never called: serve() takes every datagram
        return None

    def reply_header(self, header, server_id, load, service_ns):
        raise NotImplementedError("XORInc replies are XORInc packets (serve)")

    # ---- serving ---------------------------------------------------------------------------
    def serve(self, server, sock, data, addr):
        try:
            if len(data) >= XI_LEN and data[0] == T_UPD_NEW:
                # the switch keeps the new data and passes the header on (header-only frame)
                h, body = XiHeader.unpack(data), b""
            else:
                h, body = split(data)
        except ValueError as e:
            self._drop(server, addr, str(e))
            return
        if h.type in DATA_TYPES and body:
            server.count("xi_data_rx")
        to = (ip_text(h.req_addr), h.req_port) if h.req_addr and h.req_port else addr
        if h.req_addr and not server.allowed(ip_text(h.req_addr)):
            server.count("not_allowed")         # answers would go outside --allow
            log.debug("xorinc: datagram from %s for requester %s outside --allow", addr,
                      ip_text(h.req_addr))
            return
        handler = {T_READ: self._read, T_REPAIR: self._repair, T_UPD_NEW: self._upd_new,
                   T_DELTA: self._delta, T_WRITE: self._write, T_CHAIN: self._chain,
                   T_XUPDATE: self._xupdate, T_XDELTA: self._xdelta,
                   T_STATS: self._stats}.get(h.type)
        if handler is None:
            self._drop(server, addr, f"type {h.type} is not served by a node")
            return
        try:
            handler(server, sock, h, body, data, to)
        except ValueError as e:
            self._drop(server, addr, str(e))

    def _drop(self, server, addr, why):
        server.count("xi_dropped")
        server.count("dropped")
        log.debug("xorinc: datagram from %s dropped: %s", addr, why)

    def _send(self, server, sock, h, data, to, trailer=b""):
        # counted before the send: whoever receives it reads counters that include it
        server.count("xi_replies")
        if h.type in DATA_TYPES and h.len:
            server.count("xi_data_tx")
        try:
            sock.sendto(frame_payload(h, data) + trailer, to)
        except OSError as e:
            server.count("send_errors")
            log.debug("xorinc: send to %s failed: %s", to, e)

    def _send_range(self, server, sock, h, chunk_bytes, start_beat, length, to):
        """``chunk_bytes[64*start_beat:][:length]`` as packets of header ``h`` (off, len,
        flags set per packet)."""
        base = start_beat * BEAT
        for off, a, b in packets(length, start_beat):
            last = b >= length
            self._send(server, sock, h._replace(off=off, len=b - a,
                                                flags=(h.flags & ~F_LAST) | (F_LAST if last
                                                                             else 0)),
                       chunk_bytes[base + a:base + b], to)

    def _error(self, server, sock, h, typ, to):
        server.count("xi_missing")
        self._send(server, sock, h._replace(type=typ, flags=h.flags | F_ERROR, len=0), b"", to)

    def _read(self, server, sock, h, body, raw, to):
        server.count("xi_reads")
        chunk = ChunkStore(server.env).get(h.stripe, h.chunk)
        if chunk is None:
            return self._error(server, sock, h, T_READ_REPLY, to)
        self._send_range(server, sock, h._replace(type=T_READ_REPLY, src=h.chunk, flags=0),
                         chunk, 0, len(chunk), to)

    def _engine_to(self, h, to):
        """Where a contribution to the switch's engine goes: the requester's address, UDP port
        :attr:`engine_port` (the port the switch's parser knows; the completing packet is
        sent on to ``req_port``)."""
        return (ip_text(h.req_addr), self.engine_port) if h.req_addr else (to[0],
                                                                          self.engine_port)

    def _repair(self, server, sock, h, body, raw, to):
        server.count("xi_parts")
        chunk = ChunkStore(server.env).get(h.stripe, h.src)
        if chunk is None:
            return self._error(server, sock, h, T_PART, to)
        self._send_range(server, sock, h._replace(type=T_PART, flags=0), chunk, 0, len(chunk),
                         self._engine_to(h, to))

    def _upd_new(self, server, sock, h, body, raw, to):
        server.count("xi_olds")
        chunk = ChunkStore(server.env).get(h.stripe, h.chunk)
        if chunk is None:
            return self._error(server, sock, h, T_UPD_OLD, to)
        start = h.off * BEAT
        length = (len(chunk) - start) if h.len == 0 else h.len
        self._send_range(server, sock, h._replace(type=T_UPD_OLD, src=h.chunk, flags=0),
                         chunk.ljust(start + length, b"\0"), h.off, length,
                         self._engine_to(h, to))

    def _ack(self, server, sock, h, chunk, to):
        self._send(server, sock, h._replace(type=T_ACK, src=chunk, len=0), b"", to)

    def _delta(self, server, sock, h, body, raw, to):
        server.count("xi_deltas")
        ChunkStore(server.env).xor(h.stripe, h.src, body, h.off * BEAT)
        self._ack(server, sock, h, h.src, to)

    def _write(self, server, sock, h, body, raw, to):
        server.count("xi_writes")
        ChunkStore(server.env).put(h.stripe, h.chunk, body, h.off * BEAT)
        self._ack(server, sock, h, h.chunk, to)

    @staticmethod
    def _route(raw, h):
        return Route.unpack(raw[UDP_DATA_OFFSET + h.len:])

    def _chain(self, server, sock, h, body, raw, to):
        server.count("xi_chains")
        route = self._route(raw, h)
        chunk, coeff, _, _, _ = route.me
        own = ChunkStore(server.env).get(h.stripe, chunk)
        if own is None:
            return self._error(server, sock, h, T_CHAIN, to)
        length = h.seq            # the part's length (a first hop's request carries no data)
        start = h.off * BEAT
        mine = np.frombuffer(own[start:start + length].ljust(length, b"\0"), np.uint8)
        acc = mul_vec(coeff, mine)
        if body:
            acc = acc ^ np.frombuffer(body.ljust(length, b"\0")[:length], np.uint8)
        out = h._replace(len=length, src=chunk)
        kids = route.children()
        if not kids:
            self._send(server, sock, out, acc.tobytes(), to, Route([]).pack())
        for i in kids:
            e = route.entries[i]
            self._send(server, sock, out, acc.tobytes(), (ip_text(e[3]), e[4]),
                       route.at(i).pack())

    def _forward_delta(self, server, sock, h, route, delta):
        for i in route.children():
            e = route.entries[i]
            self._send(server, sock, h._replace(type=T_XDELTA), delta, (ip_text(e[3]), e[4]),
                       route.at(i).pack())

    def _xupdate(self, server, sock, h, body, raw, to):
        server.count("xi_writes")
        route = self._route(raw, h)
        chunk = route.me[0]
        store = ChunkStore(server.env)
        start = h.off * BEAT
        cur = store.get(h.stripe, chunk) or b""
        old = cur[start:start + len(body)].ljust(len(body), b"\0")
        delta = (np.frombuffer(old, np.uint8) ^ np.frombuffer(body, np.uint8)).tobytes()
        store.put(h.stripe, chunk, body, start)
        self._ack(server, sock, h, chunk, to)
        self._forward_delta(server, sock, h, route, delta)

    def _xdelta(self, server, sock, h, body, raw, to):
        server.count("xi_deltas")
        route = self._route(raw, h)
        chunk, coeff, _, _, _ = route.me
        scaled = mul_vec(coeff, np.frombuffer(body, np.uint8)).tobytes()
        ChunkStore(server.env).xor(h.stripe, chunk, scaled, h.off * BEAT)
        self._ack(server, sock, h, chunk, to)
        self._forward_delta(server, sock, h, route, body)

    def _stats(self, server, sock, h, body, raw, to):
        st = server.stats()
        names = ("xi_received", "xi_replies", "xi_dropped") + self.extra_counters
        blob = json.dumps({n: st.get(n, 0) for n in names}, separators=(",", ":")).encode()
        self._send(server, sock, h._replace(len=len(blob)), blob, to)
