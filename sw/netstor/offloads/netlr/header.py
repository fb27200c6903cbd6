"""The NetLR header, declared once (protocol: ``docs/netlr.md``).

Frame: Ethernet (14) / IPv4 (20) / UDP (8, port :data:`NETLR_UDP_PORT` on requests; replies
come from it too) / this 26-byte header / the storage message (a 16-byte key first: 26 + 16
bytes fill the 42-byte app window of the data plane). Fields, network order::

    op 8 | flags 8 | group 16 | slot 32 | fp 64 | seq 32 | rid 8 | nrep 8 | req 32

* ``op``: :data:`OP_READ`, :data:`OP_READ_REPLY`, :data:`OP_WRITE`, :data:`OP_WRITE_REPLY`.
  A write whose slot is held by another object is dropped by the switch (counted); there is
  no reject answer: the client retries after its timeout.
* ``group``: the replica group (:func:`group_of`: the controller's published rule).
* ``slot``: index into the switch's inconsistent-object list (:func:`slot_of`; the switch
  masks it to its table size).
* ``fp``: the object's 64-bit fingerprint (:func:`fingerprint`), never 0 (0 marks a free slot).
* ``seq``: on writes, set by the switch (its global write sequence); replies echo it; read
  replies carry the stored object's seq.
* ``rid``: replica id; the switch sets it on each copy of a write and on a read it steers;
  a replica puts its own id in its replies.
* ``nrep``: on a write copy, the number of live replicas the write was sent to (informative).
* ``req``: the client's request id, echoed in replies.

Light: no gateware imports (agents, simulator and wire tools import it).
"""
from __future__ import annotations

import hashlib

from netstor.wire.header import Header

__all__ = ["NETLR_UDP_PORT", "HEADER", "LR_LEN", "KEY_LEN", "LrHeader", "OP_READ",
           "OP_READ_REPLY", "OP_WRITE", "OP_WRITE_REPLY", "OPS", "F_RETRY", "MAX_REPLICAS",
           "MAX_RID", "fingerprint", "slot_of", "group_of", "split", "wire"]

NETLR_UDP_PORT = 7460

OP_READ = 0           # client -> switch: read the object (steered to one replica)
OP_READ_REPLY = 1     # replica -> client: the value and its seq
OP_WRITE = 2          # client -> switch: write (seq assigned, one copy per live replica)
OP_WRITE_REPLY = 3    # replica -> switch: write applied (absorbed unless it commits)
OPS = {OP_READ: "READ", OP_READ_REPLY: "READ_REPLY", OP_WRITE: "WRITE",
       OP_WRITE_REPLY: "WRITE_REPLY"}

# flags (informative; the data plane does not act on them)
F_RETRY = 0x01        # the client sends this request again after a timeout

MAX_REPLICAS = 8      # replicas per group
MAX_RID = 255         # replica ids 0..255 (8 bits, global)

HEADER = Header("netlr", [
    ("op", 8), ("flags", 8), ("group", 16),
    ("slot", 32),
    ("fp", 64),
    ("seq", 32),
    ("rid", 8), ("nrep", 8),
    ("req", 32),
])
LR_LEN = HEADER.size          # 26
KEY_LEN = 16                  # the storage message's key, right after the header


class LrHeader(HEADER.tuple_class("_LrHeader")):
    """One NetLR header (``pack()``, ``LrHeader.unpack(data)``)."""
    __slots__ = ()


def _digest(key) -> bytes:
    if isinstance(key, str):
        key = key.encode()
    return hashlib.blake2b(bytes(key), digest_size=16, person=b"netstor-netlr").digest()


def fingerprint(key) -> int:
    """The object's 64-bit fingerprint: BLAKE2b-128 of the key (personalised
    ``netstor-netlr``), bytes 0..7 big-endian; 1 when that is 0 (0 marks a free slot)."""
    return int.from_bytes(_digest(key)[:8], "big") or 1


def slot_of(key) -> int:
    """The object's 32-bit slot index (bytes 8..11 of the same digest); the switch uses its
    low bits (table size a power of two)."""
    return int.from_bytes(_digest(key)[8:12], "big")


def group_of(key, n_groups) -> int:
    """The object's replica group: bytes 12..15 of the digest modulo ``n_groups`` (the rule the
    controller publishes with its groups, numbered 0..n_groups-1)."""
    if n_groups <= 0:
        raise ValueError("n_groups must be positive")
    return int.from_bytes(_digest(key)[12:16], "big") % n_groups


def split(data):
    """``(LrHeader, rest)`` of a NetLR datagram; raises ``ValueError`` if too short."""
    return LrHeader.unpack(data), bytes(data[LR_LEN:])


def wire(register):
    """Declare the header to the wire registry (scapy layer, dissector)."""
    register("netstor_netlr", NETLR_UDP_PORT, HEADER.fields,
             enums={"op": OPS}, hex_fields=("flags", "fp"), reply_sport=True,
             info=("op", "group", "slot", "seq", "rid", "req"),
             title="NetLR (in-network leaderless replication)")
