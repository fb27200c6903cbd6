"""Frame generators (scapy) for tests, the demo and the benchmarks.

Every generator takes a ``random.Random`` and returns ``bytes`` of a full Ethernet frame
without FCS. Sizes are frame sizes in bytes (scapy pads with payload to reach them).
"""
from __future__ import annotations

import struct

from scapy.layers.inet import IP, UDP, TCP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether, Dot1Q, ARP
from scapy.packet import Raw

from netstor.programs.primitives import PRIM_UDP_PORT
from netstor.wire.checksum import checksum

HOST_MAC = "02:00:00:00:00:01"
ROUTER_MAC = "02:00:00:00:00:fe"


def _pad(pkt, size, rng):
    n = size - len(pkt)
    if n > 0:
        pkt = pkt / Raw(bytes(rng.getrandbits(8) for _ in range(n)))
    return bytes(pkt)


def udp_frame(rng, size=128, *, src="10.0.0.1", dst="10.1.0.1", sport=None, dport=None,
              vlan=None, ttl=64, payload=b"", udp_csum=True):
    sport = rng.randrange(1024, 65535) if sport is None else sport
    dport = rng.randrange(1024, 65535) if dport is None else dport
    eth = Ether(src=HOST_MAC, dst=ROUTER_MAC)
    if vlan is not None:
        eth = eth / Dot1Q(vlan=vlan)
    room = size - len(eth / IP() / UDP()) - len(payload)
    body = payload + bytes(rng.getrandbits(8) for _ in range(max(0, room)))
    pkt = eth / IP(src=src, dst=dst, ttl=ttl) / UDP(sport=sport, dport=dport) / Raw(body)
    raw = bytearray(bytes(pkt))
    if not udp_csum:
        off = len(eth) + 20 + 6
        raw[off:off + 2] = b"\0\0"
    return bytes(raw)


def prim_header(op, *, flags=0, tag=0, count=0, value=0, expect=0, result=0, hops=0,
                bridge_lo=0):
    return struct.pack(">BBHIIIIBBH", op, flags, tag, count, value, expect, result, hops, 0,
                       bridge_lo)


def prim_frame(rng, op, size=96, *, src="10.0.0.1", dst="10.1.0.9", sport=None, **hdr):
    return udp_frame(rng, size, src=src, dst=dst, sport=sport, dport=PRIM_UDP_PORT,
                     payload=prim_header(op, **hdr))


def arp_frame(rng, size=60):
    return _pad(Ether(src=HOST_MAC, dst="ff:ff:ff:ff:ff:ff") /
                ARP(psrc="10.0.0.1", pdst="10.0.0.2"), size, rng)


def ipv6_frame(rng, size=100):
    return _pad(Ether(src=HOST_MAC, dst=ROUTER_MAC) / IPv6(src="fd00::1", dst="fd00::2") /
                UDP(sport=1, dport=2), size, rng)


def tcp_frame(rng, size=120, dst="10.1.0.7"):
    return _pad(Ether(src=HOST_MAC, dst=ROUTER_MAC) / IP(src="10.0.0.3", dst=dst) /
                TCP(sport=1234, dport=80), size, rng)


def bad_frames(rng):
    """``{name: frame}``: one of each malformed kind the parser must classify."""
    good = bytearray(udp_frame(rng, 100, dst="10.1.0.5"))
    out = {}
    f = bytearray(good); f[14] = 0x65; out["ipv4_version"] = bytes(f)
    f = bytearray(good); f[14] = 0x44; out["ipv4_ihl"] = bytes(f)
    f = bytearray(good); f[24] ^= 0x55; out["ipv4_checksum"] = bytes(f)
    out["ipv4_length"] = bytes(good[:30])                     # truncated in the IP header
    f = bytearray(good); f[16:18] = struct.pack(">H", 2000)   # total length beyond the frame
    f[24:26] = b"\0\0"
    f[24:26] = struct.pack(">H", checksum(bytes(f[14:34]))); out["ipv4_length_big"] = bytes(f)
    f = bytearray(good); f[38:40] = struct.pack(">H", 4); out["udp_length"] = bytes(f)
    f = bytearray(bytes(Ether(src=HOST_MAC, dst=ROUTER_MAC) /
                        IP(src="10.0.0.1", dst="10.1.0.5", flags="MF") / UDP() / Raw(b"x" * 40)))
    out["ipv4_fragment"] = bytes(f)
    out["runt"] = bytes(good[:13])
    out["short_eth"] = bytes(good[:14])
    out["oversize"] = bytes(udp_frame(rng, 9300, dst="10.1.0.5"))
    out["random"] = bytes(rng.getrandbits(8) for _ in range(rng.randrange(14, 200)))
    f = bytearray(good); f[42:] = bytes(rng.getrandbits(8) for _ in range(len(f) - 42))
    out["random_after_udp"] = bytes(f)
    return out
