"""Truncator (gateware, Amaranth simulator) against netstor.model.replication.truncate_frame:
random program (prim) and plain UDP packets, VLAN, IPv4 options, UDP checksum 0, packets with
nothing to cut, non-IPv4 frames, 1..N beats, back to back and with gaps between packets."""

import random

import pytest

from amaranth.sim import Simulator
from scapy.all import Ether, Dot1Q, IP, UDP, Raw, IPOption

from netstor.gateware.truncate import Truncator, TRUNC_LATENCY, APP
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
        info = dict(trunc=int(rng.random() < 0.7), vlan=phv["meta.vlan_valid"],
                    ipv4=phv["meta.ipv4_valid"], udp=phv["meta.udp_valid"],
                    ihl=phv["ipv4.ver_ihl"] & 15, app=int(phv["meta.hdr_type"] != 0))
        exp = truncate_frame(f, phv, app) if info["trunc"] else f
        pkts.append((f, info, exp, rng.randrange(8)))
    got, cur, cuts = [], bytearray(), 0

    async def tb(ctx):
        nonlocal cur
        events = []                                   # (input beat or None)
        for f, info, _, user in pkts:
            nb = -(-len(f) // 64)
            for k in range(nb):
                chunk = f[64 * k:64 * k + 64]
                events.append((chunk, k == nb - 1, len(f), user, info if k == 0 else None))
            for _ in range(rng.choice([0, 0, 0, 1, 3])):
                events.append(None)
        events += [None] * (TRUNC_LATENCY + 2)
        for ev in events:
            if ev is None:
                ctx.set(dut.i.valid, 0)
            else:
                chunk, last, ln, user, info = ev
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.payload.data, int.from_bytes(chunk.ljust(64, b"\0"), "little"))
                ctx.set(dut.i.payload.keep, (1 << len(chunk)) - 1)
                ctx.set(dut.i.payload.last, last)
                ctx.set(dut.i.payload.len, ln)
                ctx.set(dut.i.payload.user, user)
                if info is not None:
                    for k, v in info.items():
                        ctx.set(getattr(dut.info, k), v)
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
    for (f, info, exp, user), (g, ln, u) in zip(pkts, got):
        assert g == exp and ln == len(exp) and u == user
        cuts += len(exp) < len(f)
    assert cuts > 60


def test_truncator_latency():
    dut = Truncator(user_width=1)
    f = bytes(Ether() / IP(src="1.2.3.4", dst="5.6.7.8") / UDP(sport=1, dport=2)
              / Raw(bytes(200)))
    seen = []

    async def tb(ctx):
        for cyc in range(20):
            k = cyc
            if k < 4:
                chunk = f[64 * k:64 * k + 64]
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.payload.data, int.from_bytes(chunk.ljust(64, b"\0"), "little"))
                ctx.set(dut.i.payload.keep, (1 << len(chunk)) - 1)
                ctx.set(dut.i.payload.last, k == 3)
                ctx.set(dut.info.trunc, 1)
                ctx.set(dut.info.ipv4, 1)
                ctx.set(dut.info.udp, 1)
                ctx.set(dut.info.ihl, 5)
            else:
                ctx.set(dut.i.valid, 0)
            if ctx.get(dut.o.valid):
                seen.append((cyc, ctx.get(dut.o.payload.last)))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert seen == [(TRUNC_LATENCY, 1)]          # 42 bytes: one beat, 7 cycles later
