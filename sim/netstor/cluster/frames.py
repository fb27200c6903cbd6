"""Real frames for the simulator: Ethernet II / IPv4 (no options) / UDP, built and read with
``struct`` (the hot path; scapy would cost ~100 us a frame). The checksums are real: the IPv4
header checksum always, the UDP checksum over the pseudo header unless ``udp_checksum=False``
(then 0, "no checksum", which IPv4 allows and the data plane keeps). They are computed with
the identity "a ones'-complement sum of 16-bit words is the words' value modulo 0xFFFF" (one
big-integer remainder instead of a loop); :func:`verify_checksums` checks them with
:func:`netstor.wire.checksum.ones_sum`, and the tests against scapy.

Addresses travel as bytes: MAC 6 bytes, IPv4 4 bytes (:func:`mac`, :func:`ip4` convert).
"""
from __future__ import annotations

import ipaddress
import struct

from netstor.wire.checksum import ones_sum

__all__ = ["mac", "ip4", "ip_str", "mac_str", "udp_frame", "parse_udp", "UdpView",
           "HEADERS_LEN", "wire_bytes", "verify_checksums"]

#: Ethernet + IPv4 + UDP header bytes before the UDP payload
HEADERS_LEN = 14 + 20 + 8
_ETH = struct.Struct("!6s6sH")
_HDRS = struct.Struct("!6s6sHBBHHHBBH4s4sHHHH")
_PSEUDO = struct.Struct("!4s4sBBH")


def mac(value) -> bytes:
    """6 bytes of a MAC given as int, ``"02:00:..."`` or bytes."""
    if isinstance(value, (bytes, bytearray)):
        if len(value) != 6:
            raise ValueError(f"MAC {value!r} is not 6 bytes")
        return bytes(value)
    if isinstance(value, str):
        parts = value.split(":")
        if len(parts) != 6:
            raise ValueError(f"MAC {value!r} is not six colon-separated bytes")
        return bytes(int(p, 16) for p in parts)
    return int(value).to_bytes(6, "big")


def ip4(value) -> bytes:
    """4 bytes of an IPv4 address given as ``"10.0.0.1"``, int or bytes."""
    if isinstance(value, (bytes, bytearray)):
        if len(value) != 4:
            raise ValueError(f"IPv4 address {value!r} is not 4 bytes")
        return bytes(value)
    return ipaddress.IPv4Address(value).packed


def ip_str(b: bytes) -> str:
    return str(ipaddress.IPv4Address(bytes(b)))


def mac_str(b: bytes) -> str:
    return ":".join(f"{x:02x}" for x in b)


def wire_bytes(frame_len):
    """Bytes a frame occupies on the wire: + FCS (4), preamble/SFD (8), inter-frame gap (12)."""
    return max(frame_len, 60) + 24


def _fold(total):
    """The ones'-complement sum of 16-bit words whose plain sum (or big-endian integer value,
    2^16 being 1 modulo 0xFFFF) is ``total`` > 0: ``total mod 0xFFFF``, with 0xFFFF for 0."""
    r = total % 0xFFFF
    return r if r else 0xFFFF


def _words_total(data):
    """``data`` as one big-endian integer (odd lengths padded with a zero byte): its value
    modulo 0xFFFF is the sum of its 16-bit words modulo 0xFFFF."""
    if len(data) & 1:
        data = data + b"\0"
    return int.from_bytes(data, "big")


def udp_frame(dst_mac, src_mac, src_ip, dst_ip, sport, dport, payload, *, ttl=64, ident=0,
              udp_checksum=True) -> bytes:
    """One frame (bytes, no FCS); ``dst_mac``/``src_mac`` 6 bytes, ``src_ip``/``dst_ip`` 4."""
    ulen = 8 + len(payload)
    tlen = 20 + ulen
    addrs = int.from_bytes(src_ip, "big") + int.from_bytes(dst_ip, "big")
    # IPv4 header words: 0x4500, tlen, ident, 0, ttl|proto, 0 (checksum), src, dst
    ipc = 0xFFFF - _fold(0x4500 + tlen + ident + (ttl << 8 | 17) + addrs)
    uc = 0
    if udp_checksum:
        # pseudo header (src, dst, proto, length) + UDP header (checksum 0) + payload
        uc = (0xFFFF - _fold(addrs + 17 + ulen + sport + dport + ulen
                             + _words_total(payload))) or 0xFFFF
    return _HDRS.pack(dst_mac, src_mac, 0x0800, 0x45, 0, tlen, ident, 0, ttl, 17, ipc,
                      src_ip, dst_ip, sport, dport, ulen, uc) + payload


class UdpView:
    """The fields of a received UDP frame (:func:`parse_udp`)."""
    __slots__ = ("dst_mac", "src_mac", "src_ip", "dst_ip", "sport", "dport", "payload", "ttl")

    def __init__(self, dst_mac, src_mac, src_ip, dst_ip, sport, dport, payload, ttl):
        self.dst_mac, self.src_mac, self.src_ip, self.dst_ip = dst_mac, src_mac, src_ip, dst_ip
        self.sport, self.dport, self.payload, self.ttl = sport, dport, payload, ttl


def parse_udp(frame):
    """A :class:`UdpView` of an Ethernet/IPv4 (no options)/UDP frame, or None for anything else
    (a host would not deliver it to a UDP socket)."""
    if len(frame) < HEADERS_LEN:
        return None
    (dmac, smac, et, vihl, _tos, tlen, _id, ff, ttl, proto, _c, sip, dip, sport, dport, ulen,
     _uc) = _HDRS.unpack_from(frame)
    if et != 0x0800 or vihl != 0x45 or proto != 17 or ff & 0x3FFF or ulen < 8 \
            or 14 + tlen > len(frame) or ulen > tlen - 20:
        return None
    return UdpView(dmac, smac, sip, dip, sport, dport, frame[HEADERS_LEN:14 + 20 + ulen], ttl)


def verify_checksums(frame) -> bool:
    """True when the IPv4 header checksum and the UDP checksum (if not 0) of ``frame`` are
    right (a receiving host's check; the simulator's hosts do it when told to)."""
    if ones_sum(frame[14:34]) != 0xFFFF:
        return False
    uc = int.from_bytes(frame[40:42], "big")
    if uc == 0:
        return True
    ulen = int.from_bytes(frame[38:40], "big")
    s = ones_sum(_PSEUDO.pack(frame[26:30], frame[30:34], 0, 17, ulen))
    return ones_sum(frame[34:34 + ulen], s) == 0xFFFF
