"""Truncator (gateware, Amaranth simulator) against netstor.model.replication.truncate_frame:
random program (prim) and plain UDP packets, VLAN, IPv4 options, UDP checksum 0, packets with
nothing to cut, non-IPv4 frames, 1..N beats, back to back and with gaps between packets."""

import random

import pytest

from amaranth.sim import Simulator
from scapy.all import Ether, Dot1Q, IP, UDP, Raw, IPOption

from netstor.gateware.truncate import Truncator, TRUNC_LATENCY, FACTS_LEAD, APP
from netstor.lang import APP_BYTES
from netstor.model import DataplaneModel
from netstor.model.replication import truncate_frame
from netstor.programs import default_pipeline
from netstor.programs.primitives import PRIM_UDP_PORT


def frames(rng, n):
    out = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.08:
            out.append(bytes(Ether(type=0x0806) / Raw(bytes(rng.randrange(46, 200)))))
            continue
        l2 = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        if rng.random() < 0.3:
            l2 = l2 / Dot1Q(vlan=rng.randrange(4096))
        kw = dict(src=f"10.0.{rng.randrange(256)}.{rng.randrange(256)}",
                  dst=f"192.168.{rng.randrange(256)}.{rng.randrange(256)}",
                  ttl=rng.randrange(1, 256), id=rng.randrange(65536), tos=rng.randrange(256))
        if rng.random() < 0.3:
            kw["options"] = [IPOption(b"\x94\x04\x00\x00")] * rng.randrange(1, 11)
        dport = PRIM_UDP_PORT if rng.random() < 0.5 else rng.randrange(1, 65536)
        u = UDP(sport=rng.randrange(65536), dport=dport)
        if rng.random() < 0.15:
            u.chksum = 0
        plen = rng.choice([0, 4, 24, 30, 32, 40, 42, 44, 60, 100, 200, 1000, rng.randrange(1400)])
        pkt = l2 / IP(**kw) / u / Raw(bytes(rng.randrange(256) for _ in range(plen)))
        f = bytes(pkt)
        if rng.random() < 0.2:
            f += bytes(rng.randrange(1, 20))            # Ethernet padding
        out.append(f)
    return out


@pytest.mark.parametrize("app", sorted({APP_BYTES, 32, 42}))
def test_truncator_against_model(app):
    """The window the language declares (APP_BYTES) and both widths issue 12 names (32 bytes
    before the app window grew, 42 = a 16-byte key plus NetRS's 26-byte header)."""
    assert APP == APP_BYTES
    rng = random.Random(5)
    model = DataplaneModel(default_pipeline())
    dut = Truncator(user_width=3, app_bytes=app)
    pkts = []
    for f in frames(rng, 220):
        phv = model.parse(f, 0)
        facts = dict(trunc=int(rng.random() < 0.7), vlan=phv["meta.vlan_valid"],
                     ipv4=phv["meta.ipv4_valid"], udp=phv["meta.udp_valid"],
                     ihl=phv["ipv4.ver_ihl"] & 15, app=int(phv["meta.hdr_type"] != 0),
                     total_len=phv["ipv4.total_len"], src=phv["ipv4.src"], dst=phv["ipv4.dst"],
                     sport=phv["udp.sport"], dport=phv["udp.dport"],
                     # the PHV's window, wire byte 0 the most significant (app bytes past the
                     # block's narrower window are not its)
                     window=phv["app"] >> (8 * (APP_BYTES - app)))
        exp = truncate_frame(f, phv, app) if facts["trunc"] else f
        pkts.append((f, facts, exp, rng.randrange(8)))
    got, cur, cuts = [], bytearray(), 0

    async def tb(ctx):
        nonlocal cur
        # cycle by cycle: the input beat (or None) and the facts presented (or None); a
        # packet's facts FACTS_LEAD cycles before its first beat
        beats, facts_at = [None] * FACTS_LEAD, {}
        for f, facts, _, user in pkts:
            nb = -(-len(f) // 64)
            facts_at[len(beats) - FACTS_LEAD] = facts
            for k in range(nb):
                beats.append((f[64 * k:64 * k + 64], k == nb - 1, len(f), user))
            for _ in range(rng.choice([0, 0, 0, 1, 3])):
                beats.append(None)
        beats += [None] * (TRUNC_LATENCY + 2)
        for cyc, ev in enumerate(beats):
            fa = facts_at.get(cyc)
            ctx.set(dut.facts.valid, fa is not None)
            for k, v in (fa or {}).items():
                ctx.set(getattr(dut.facts.payload, k), v)
            if ev is None:
                ctx.set(dut.i.valid, 0)
            else:
                chunk, last, ln, user = ev
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.payload.data, int.from_bytes(chunk.ljust(64, b"\0"), "little"))
                ctx.set(dut.i.payload.keep, (1 << len(chunk)) - 1)
                ctx.set(dut.i.payload.last, last)
                ctx.set(dut.i.payload.len, ln)
                ctx.set(dut.i.payload.user, user)
            if ctx.get(dut.o.valid):
                p = ctx.get(dut.o.payload)
                keep = p.keep
                n = keep.bit_length()
                assert keep == (1 << n) - 1
                cur += p.data.to_bytes(64, "little")[:n]
                if p.last:
                    got.append((bytes(cur), p.len, p.user))
                    cur = bytearray()
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert len(got) == len(pkts)
    for (f, facts, exp, user), (g, ln, u) in zip(pkts, got):
        assert g == exp and ln == len(exp) and u == user
        cuts += len(exp) < len(f)
    assert cuts > 60


def test_truncator_latency():
    """A cut copy's single output beat TRUNC_LATENCY cycles after its first input beat, which
    comes FACTS_LEAD cycles after its facts."""
    dut = Truncator(user_width=1)
    f = bytes(Ether() / IP(src="1.2.3.4", dst="5.6.7.8") / UDP(sport=1, dport=2)
              / Raw(bytes(200)))
    seen = []

    async def tb(ctx):
        for cyc in range(20):
            ctx.set(dut.facts.valid, cyc == 0)
            if cyc == 0:
                for k_, v in dict(trunc=1, ipv4=1, udp=1, ihl=5, total_len=len(f) - 14,
                                  src=0x01020304, dst=0x05060708, sport=1, dport=2).items():
                    ctx.set(getattr(dut.facts.payload, k_), v)
            k = cyc - FACTS_LEAD
            if 0 <= k < 4:
                chunk = f[64 * k:64 * k + 64]
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.payload.data, int.from_bytes(chunk.ljust(64, b"\0"), "little"))
                ctx.set(dut.i.payload.keep, (1 << len(chunk)) - 1)
                ctx.set(dut.i.payload.last, k == 3)
            else:
                ctx.set(dut.i.valid, 0)
            if ctx.get(dut.o.valid):
                seen.append((cyc, ctx.get(dut.o.payload.last), ctx.get(dut.o.payload.len)))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    # 42 bytes (14 + 20 + 8): one beat, TRUNC_LATENCY cycles after the first
    assert seen == [(FACTS_LEAD + TRUNC_LATENCY, 1, 42)]
