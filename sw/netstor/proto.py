"""The netstor storage protocol: the header every agent, client and offload speaks.

One fixed 32-byte header right after the UDP header (so it fits the data plane's 32-byte
application window, see ``docs/dataplane-spec.md``), then the value bytes. All fields are
big-endian (network order)::

     0        1        2        3        4        5        6                 8
    +--------+--------+--------+--------+--------+--------+-----------------+
    |     magic 'NS'  |  ver   |   op   | status | flags  |   server_id     |
    +-----------------+--------+--------+--------+--------+-----------------+
    |              req_id (32)          |   queue_len     |   value_len     |
    +-----------------------------------+-----------------+-----------------+
    |          service_ns (32)          |               key (64) ...        |
    +-----------------------------------+-----------------------------------+
    |            ... key                |              seq (32)             |
    +-----------------------------------+-----------------------------------+
    | value (value_len bytes)
    +------

* ``magic`` = 0x4E53 ("NS"), ``ver`` = 1. A datagram with another magic or version, shorter
  than the header, or whose ``value_len`` disagrees with its length is malformed: a server
  answers ``BAD_REQUEST`` when it can parse the header far enough to address a reply, and
  drops it otherwise (counted).
* ``op``: requests ``GET``/``PUT``/``DEL``; a reply carries the request's op with bit 7 set.
* ``status`` (replies): ``OK``, ``NOT_FOUND``, ``BAD_REQUEST``, ``BUSY`` (queue full),
  ``ERROR`` (storage engine failure).
* ``server_id``: written by the server that answered (the data plane learns server status
  from replies by this field).
* ``req_id``: chosen by the client, echoed by the server.
* ``queue_len``: piggybacked status: requests queued or in service at the server when it sent
  the reply (including this one). ``service_ns``: time the server spent serving this request
  (storage engine work plus the service-time model's extra delay), saturated at 2^32-1 ns.
* ``key``: a 64-bit object key. ``seq``: a sequence number for offloads that order writes
  (0 otherwise).
* ``flags``: bit 0 ``CLONE`` (this request is a data-plane clone), bits 1..7 reserved (0).

The default UDP port is :data:`STORAGE_UDP_PORT`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from netstor.wire.header import Header as WireHeader

__all__ = ["Header", "ProtocolError", "MAGIC", "VERSION", "HEADER_LEN", "STORAGE_UDP_PORT",
           "MAX_VALUE", "Op", "Status", "FLAG_CLONE", "FIELDS", "STORAGE"]

MAGIC = 0x4E53
VERSION = 1
HEADER_LEN = 32
STORAGE_UDP_PORT = 7430
#: largest value that fits one datagram with the header (UDP over IPv4, 1500-byte MTU).
MAX_VALUE = 1500 - 20 - 8 - HEADER_LEN
FLAG_CLONE = 0x01
REPLY = 0x80

#: (name, width in bits) in wire order: the single description used by the agents (below),
#: the scapy layer, the dissector and the data-plane programs.
FIELDS = [("magic", 16), ("ver", 8), ("op", 8), ("status", 8), ("flags", 8),
          ("server_id", 16), ("req_id", 32), ("queue_len", 16), ("value_len", 16),
          ("service_ns", 32), ("key", 64), ("seq", 32)]
#: the header declared once (:class:`netstor.wire.header.Header`); ``STORAGE.unpack(data)``
#: reads the raw fields without the checks of :meth:`Header.unpack`
STORAGE = WireHeader("netstor", FIELDS)
_FMT = STORAGE.struct
assert STORAGE.size == HEADER_LEN


class Op:
    GET, PUT, DEL = 1, 2, 3
    NAMES = {1: "GET", 2: "PUT", 3: "DEL"}

    @staticmethod
    def name(op):
        base = Op.NAMES.get(op & ~REPLY, f"op{op & ~REPLY}")
        return base + ("_REPLY" if op & REPLY else "")


class Status:
    OK, NOT_FOUND, BAD_REQUEST, BUSY, ERROR = 0, 1, 2, 3, 4
    NAMES = {0: "OK", 1: "NOT_FOUND", 2: "BAD_REQUEST", 3: "BUSY", 4: "ERROR"}


class ProtocolError(ValueError):
    """A datagram that is not a well-formed netstor storage message."""


def _u(name, v, bits):
    if isinstance(v, bool) or not isinstance(v, int) or v < 0 or v >> bits:
        raise ValueError(f"{name} = {v!r} is not an unsigned {bits}-bit integer")
    return v


@dataclass
class Header:
    op: int
    key: int = 0
    req_id: int = 0
    status: int = 0
    flags: int = 0
    server_id: int = 0
    queue_len: int = 0
    service_ns: int = 0
    seq: int = 0
    value: bytes = field(default=b"", repr=False)

    @property
    def is_reply(self):
        return bool(self.op & REPLY)

    def reply(self, status=Status.OK, value=b"", **kw):
        """The reply to this request (op with bit 7 set, same req_id/key/seq/flags)."""
        return Header(op=self.op | REPLY, key=self.key, req_id=self.req_id, status=status,
                      flags=self.flags, seq=self.seq, value=value, **kw)

    def pack(self) -> bytes:
        if len(self.value) > MAX_VALUE:
            raise ValueError(f"value of {len(self.value)} bytes exceeds {MAX_VALUE}")
        return _FMT.pack(MAGIC, VERSION, _u("op", self.op, 8), _u("status", self.status, 8),
                         _u("flags", self.flags, 8), _u("server_id", self.server_id, 16),
                         _u("req_id", self.req_id, 32), _u("queue_len", self.queue_len, 16),
                         len(self.value), min(_u("service_ns", self.service_ns, 64),
                                              0xFFFF_FFFF),
                         _u("key", self.key, 64), _u("seq", self.seq, 32)) + bytes(self.value)

    @classmethod
    def unpack(cls, data: bytes) -> "Header":
        if len(data) < HEADER_LEN:
            raise ProtocolError(f"datagram of {len(data)} bytes is shorter than the "
                                f"{HEADER_LEN}-byte header")
        (magic, ver, op, status, flags, server_id, req_id, queue_len, value_len, service_ns,
         key, seq) = _FMT.unpack_from(data)
        if magic != MAGIC:
            raise ProtocolError(f"bad magic {magic:#06x} (expected {MAGIC:#06x})")
        if ver != VERSION:
            raise ProtocolError(f"unsupported version {ver} (this side speaks {VERSION})")
        if value_len != len(data) - HEADER_LEN:
            raise ProtocolError(f"value_len {value_len} but {len(data) - HEADER_LEN} bytes "
                                "follow the header")
        return cls(op=op, key=key, req_id=req_id, status=status, flags=flags,
                   server_id=server_id, queue_len=queue_len, service_ns=service_ns, seq=seq,
                   value=bytes(data[HEADER_LEN:]))
