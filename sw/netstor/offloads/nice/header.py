"""The NICE header, declared once (protocol: ``docs/nice.md``), and the key -> vnode ->
subgroup -> partition rules every side shares (clients, storage nodes, metadata service,
simulator, tests).

Frame: Ethernet (14) / IPv4 (20) / UDP (8, destination port :data:`NICE_UDP_PORT` on every
NICE message) / this 26-byte header / the 16-byte key (zero-padded) / the fragment's data
(at most :data:`FRAG_DATA` bytes). 26 + 16 bytes fill the data plane's 42-byte app window.
Fields, network order::

    op 8 | flags 8 | frag 16 | nfrag 16 | client 32 | req 32 | ts 32 | size 32 | part 16 | rsv 16

* ``op``: :data:`OP_GET` .. :data:`OP_ERROR` (:data:`OPS`). The switch does not look at it:
  what it does depends only on the destination address (unicast vring, multicast vring, or
  anything else = plain L3).
* ``flags``: :data:`F_RETRY` and the others below; informative, the switch ignores them.
* ``frag`` / ``nfrag``: this datagram's fragment index and the object's fragment count
  (a put's data in fragments of :data:`FRAG_DATA` bytes; 1 for everything without data).
* ``client``: the client's IPv4 address (replies go there whatever hop the request took).
* ``req``: the client's request id / timestamp; with ``client`` it names the put.
* ``ts``: the primary's timestamp (0 before TS).
* ``size``: the object's size in bytes.
* ``part``: the partition the switch resolved (0 from clients; written by the switch on every
  packet it maps through a vring).
* ``rsv``: 0.

Vrings (:class:`Ring`): a unicast ring (default 10.10.0.0/16) and a multicast ring (default
10.11.0.0/16), each cut into subgroups by prefix (default /24: 256 vnodes per subgroup). Both
rings of one deployment have the same shape, so a key falls in the same subgroup number in
both. The rules:

* :func:`vnode_index` (key -> offset in the ring): BLAKE2b-128 of the 16-byte padded key
  (personalised ``netstor-nice``), bytes 0..3 big-endian, low ``32 - ring.prefix`` bits;
* :func:`vnode` (key, ring) -> the vnode address (dotted string; :func:`vnode_addr`: int);
* :func:`subgroup` (key, ring) -> the subgroup number = the vnode offset's top
  ``ring.sub - ring.prefix`` bits;
* :func:`default_partition` (subgroup -> partition, N partitions: contiguous ranges,
  ``s * N // n_subgroups``): the placement the metadata service starts from; after that the
  subgroup -> partition map is the metadata service's (the switch writes the resolved
  partition into ``part``), so nodes read ``part`` rather than recompute it.

Light: no gateware imports (agents, simulator and wire tools import it).
"""
from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass

from netstor.wire.header import Header

__all__ = ["NICE_UDP_PORT", "HEADER", "NICE_LEN", "KEY_LEN", "FRAG_DATA", "MAX_OBJECT",
           "NiceHeader", "OP_GET", "OP_GET_REPLY", "OP_PUT", "OP_PUT_ACK", "OP_TS", "OP_TS_ACK",
           "OP_PUT_REPLY", "OP_NACK", "OP_ABORT", "OP_FWD_GET", "OP_ERROR", "OPS", "F_RETRY",
           "F_FWD", "F_RESEND", "MAX_NODES", "MAX_REPLICAS", "RING_UNICAST", "RING_MULTICAST",
           "Ring", "UNICAST", "MULTICAST",
           "key_bytes", "vnode_index", "vnode_addr", "vnode", "subgroup", "subgroup_of_addr",
           "default_partition", "partition_of", "n_frags", "split", "wire"]

NICE_UDP_PORT = 7470

OP_GET = 0          # client -> unicast vring (one replica: division or primary)
OP_GET_REPLY = 1    # replica -> client (physical address)
OP_PUT = 2          # client -> multicast vring: one data fragment, to the whole put set
OP_PUT_ACK = 3      # replica -> primary: the whole object is locked, logged, stored pending
OP_TS = 4           # primary -> multicast vring: the put's timestamp (commit)
OP_TS_ACK = 5       # replica -> primary: committed, lock released
OP_PUT_REPLY = 6    # primary -> client: the put is done
OP_NACK = 7         # replica -> client: missing fragments (re-sent unicast to the replica)
OP_ABORT = 8        # primary -> client: the put failed (a replica failed); retry
OP_FWD_GET = 9      # handoff -> primary: a get for an object the handoff lacks
OP_ERROR = 10       # any -> client: the request cannot be served
OPS = {OP_GET: "GET", OP_GET_REPLY: "GET_REPLY", OP_PUT: "PUT", OP_PUT_ACK: "PUT_ACK",
       OP_TS: "TS", OP_TS_ACK: "TS_ACK", OP_PUT_REPLY: "PUT_REPLY", OP_NACK: "NACK",
       OP_ABORT: "ABORT", OP_FWD_GET: "FWD_GET", OP_ERROR: "ERROR"}

# flags (informative; the data plane does not act on them)
F_RETRY = 0x01      # the client sends this request again (after a time-out, ABORT or NACK)
F_FWD = 0x02        # a get forwarded by a handoff node (FWD_GET's reply path)
F_RESEND = 0x04     # a fragment re-sent unicast after a NACK

MAX_NODES = 4096    # storage node ids 0..4095 (the switch's rid is 16 bits; tables sized
                    # for >= 1,024 nodes)
MAX_REPLICAS = 16   # nodes in one put set (replicas + handoffs + joining / pending nodes):
                    # what one copy list holds (the replication engine's 16 copies,
                    # netstor.model.replication.MAX_COPIES); config and metadata refuse more
RING_UNICAST, RING_MULTICAST = 1, 2     # nice.rings' kinds (the switch's ring table)

HEADER = Header("nice", [
    ("op", 8), ("flags", 8), ("frag", 16), ("nfrag", 16),
    ("client", 32),
    ("req", 32),
    ("ts", 32),
    ("size", 32),
    ("part", 16), ("rsv", 16),
])
NICE_LEN = HEADER.size        # 26
KEY_LEN = 16                  # the key, zero-padded, right after the header
FRAG_DATA = 1400              # data bytes per fragment (at most)
MAX_OBJECT = 1 << 20          # objects of 4 B .. 1 MB


class NiceHeader(HEADER.tuple_class("_NiceHeader")):
    """One NICE header (``pack()``, ``NiceHeader.unpack(data)``)."""
    __slots__ = ()


@dataclass(frozen=True)
class Ring:
    """A vring: ``base``/``prefix`` (the range, e.g. 10.10.0.0/16) cut into subgroups of
    prefix length ``sub`` (e.g. /24). ``base`` is an int or a dotted string."""
    base: object = "10.10.0.0"
    prefix: int = 16
    sub: int = 24

    def __post_init__(self):
        base = self.base if isinstance(self.base, int) else int(
            ipaddress.IPv4Address(str(self.base)))
        object.__setattr__(self, "base", base)
        if not 1 <= self.prefix <= self.sub <= 32:
            raise ValueError(f"vring: need 1 <= prefix ({self.prefix}) <= sub ({self.sub}) "
                             f"<= 32")
        if base & ((1 << (32 - self.prefix)) - 1):
            raise ValueError(f"vring: {ipaddress.IPv4Address(base)} is not aligned to "
                             f"/{self.prefix}")

    @property
    def size(self):
        """vnodes in the ring"""
        return 1 << (32 - self.prefix)

    @property
    def n_subgroups(self):
        return 1 << (self.sub - self.prefix)

    @property
    def per_subgroup(self):
        """vnodes per subgroup"""
        return 1 << (32 - self.sub)

    def contains(self, addr):
        return (int(addr) >> (32 - self.prefix)) == (self.base >> (32 - self.prefix))

    def subgroup_prefix(self, s):
        """``(address int, prefix length)`` of subgroup ``s``."""
        if not 0 <= s < self.n_subgroups:
            raise ValueError(f"vring: subgroup {s} out of range 0..{self.n_subgroups - 1}")
        return self.base + s * self.per_subgroup, self.sub

    def __str__(self):
        return f"{ipaddress.IPv4Address(self.base)}/{self.prefix} (/{self.sub} subgroups)"


UNICAST = Ring("10.10.0.0", 16, 24)     #: the default unicast vring (gets)
MULTICAST = Ring("10.11.0.0", 16, 24)   #: the default multicast vring (puts, TS)


def key_bytes(key) -> bytes:
    """The key as it travels: bytes (a str is UTF-8), zero-padded to :data:`KEY_LEN`."""
    if isinstance(key, str):
        key = key.encode()
    key = bytes(key)
    if len(key) > KEY_LEN:
        raise ValueError(f"nice: key of {len(key)} bytes, at most {KEY_LEN}")
    return key.ljust(KEY_LEN, b"\0")


def _h32(key) -> int:
    return int.from_bytes(hashlib.blake2b(key_bytes(key), digest_size=16,
                                          person=b"netstor-nice").digest()[:4], "big")


def vnode_index(key, ring: Ring = UNICAST) -> int:
    """The key's offset in ``ring`` (0 .. ring.size - 1): the hash's low host bits."""
    return _h32(key) & (ring.size - 1)


def vnode_addr(key, ring: Ring = UNICAST) -> int:
    """The key's vnode address in ``ring`` as an int."""
    return ring.base + vnode_index(key, ring)


def vnode(key, ring: Ring = UNICAST) -> str:
    """The key's vnode address in ``ring`` (dotted string): where the client sends a GET
    (unicast ring) or a PUT fragment / where the primary sends TS (multicast ring)."""
    return str(ipaddress.IPv4Address(vnode_addr(key, ring)))


def subgroup(key, ring: Ring = UNICAST) -> int:
    """The key's subgroup number in ``ring`` (the same in both rings of one shape)."""
    return vnode_index(key, ring) >> (32 - ring.sub)


def subgroup_of_addr(addr, ring: Ring = UNICAST):
    """The subgroup of a vnode address (int or dotted), or None outside ``ring``."""
    a = addr if isinstance(addr, int) else int(ipaddress.IPv4Address(str(addr)))
    if not ring.contains(a):
        return None
    return (a - ring.base) >> (32 - ring.sub)


def default_partition(s, n_subgroups, n_partitions) -> int:
    """The initial placement: subgroup ``s`` -> partition ``s * N // n_subgroups``
    (contiguous ranges of the ring, as consistent hashing's arcs)."""
    if n_partitions <= 0 or n_partitions > n_subgroups:
        raise ValueError(f"nice: {n_partitions} partitions for {n_subgroups} subgroups")
    return s * n_partitions // n_subgroups


def partition_of(key, n_partitions, ring: Ring = UNICAST) -> int:
    """The key's partition under :func:`default_partition`."""
    return default_partition(subgroup(key, ring), ring.n_subgroups, n_partitions)


def n_frags(size) -> int:
    """Fragments of an object of ``size`` bytes (at least 1)."""
    return max(1, -(-int(size) // FRAG_DATA))


def split(data):
    """``(NiceHeader, key (16 bytes), rest)`` of a NICE datagram; ``ValueError`` if short."""
    if len(data) < NICE_LEN + KEY_LEN:
        raise ValueError(f"nice: datagram of {len(data)} bytes, header and key need "
                         f"{NICE_LEN + KEY_LEN}")
    return (NiceHeader.unpack(data), bytes(data[NICE_LEN:NICE_LEN + KEY_LEN]),
            bytes(data[NICE_LEN + KEY_LEN:]))


def wire(register):
    """Declare the header to the wire registry (scapy layer, dissector)."""
    register("netstor_nice", NICE_UDP_PORT, HEADER.fields,
             enums={"op": OPS}, hex_fields=("flags",), reply_sport=True,
             info=("op", "frag", "nfrag", "req", "ts", "part"),
             title="NICE (network-integrated key-value storage)")
