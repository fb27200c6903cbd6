"""The Internet checksum (RFC 1071), once: the folded 16-bit ones'-complement sum of big-endian
words and its complement, for the IPv4 header checksum and the UDP/TCP checksum over a pseudo
header. Dependency-free (the test bed's ports, the simulation frames and tests use it).

The golden model (:mod:`netstor.model.dataplane`) keeps its own word-level copy
(``ones_add``), written as the gateware computes it, as an independent reference."""
from __future__ import annotations

import struct

__all__ = ["ones_sum", "checksum"]


def ones_sum(data: bytes, start: int = 0) -> int:
    """The ones'-complement sum (end-around carry, folded to 16 bits) of ``data`` read as
    big-endian 16-bit words (an odd length padded with a zero byte), plus ``start``."""
    data = bytes(data)
    if len(data) & 1:
        data += b"\0"
    s = start + sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def checksum(data: bytes, start: int = 0) -> int:
    """The checksum field value: the complement of :func:`ones_sum` (the field's own bytes
    must be zero in ``data``)."""
    return ~ones_sum(data, start) & 0xFFFF
