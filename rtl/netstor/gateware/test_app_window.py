"""The whole ``APP_BYTES`` = 42-byte application window, read and rewritten, in the gateware.

A program declares a header that fills the window (a 26-byte offload header, then a 16-byte
key) and one element that rewrites its first bytes, the header's last byte and the key. The
gateware path parser -> element -> deparser (prep and merge), driven beat by beat in Amaranth
simulation, must give the frame the golden model gives (``DataplaneModel``: parse, the
element, deparse), and that frame must equal one scapy builds with the rewritten header and a
freshly computed UDP checksum (an independent reference). The parsed key is also checked
against the wire bytes by hand. Packets: plain IPv4; 802.1Q + IHL 15 (the window's last byte
is the two-beat window's last byte, 127); long payloads; UDP checksum 0; and a short frame of
another UDP port (the window reaches past the frame's end; nothing of it is written).

The partial window (``test_partial_window``): a program with a 2-byte header whose element
rewrites the whole ``app`` window (every byte, through ``F.app``), on datagrams that end inside
the window, at even and odd lengths (the frame ending there, or followed by Ethernet padding
up to the 60-byte minimum), plain and 802.1Q + IHL 15. The app bytes inside the frame are
written; the UDP checksum counts only those inside the datagram (an odd one padded with a zero
byte). Reference: scapy recomputes the UDP checksum of the rewritten frame (RFC 768 over the
datagram; the padding is not part of it); the model must give that frame, and the gateware the
model's.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import data
from amaranth.sim import Simulator
from scapy.all import Ether, Dot1Q, IP, UDP, Raw, IPOption

from netstor.elements import Compute
from netstor.gateware.axis import arb_layout
from netstor.gateware.csr import CsrBuilder
from netstor.gateware.deparser import Deparser, PREP_LATENCY
from netstor.gateware.kit import HwEnv
from netstor.gateware.parser import Parser
from netstor.gateware.stages import build_element
from netstor.lang import APP_BYTES, Cat, F, Pipeline, Program, Set
from netstor.model.compiled import CompiledModel
from netstor.model.dataplane import DataplaneModel

PORT = 0x4B56
UW = 35                 # the recirculation user (bridge 32 + count 3) the parser reads


def _pipeline():
    p = Program("kv", udp_port=PORT)
    h = p.header([("op", 16), ("rest", 26 * 8 - 16), ("key", 128)])
    rw = p.add(Compute("rw", [Set(h["op"], h["op"] ^ 0x8001),
                              Set(h["rest"], Cat(h["rest"][0:8] + 1, h["rest"][8:])),
                              Set(h["key"], Cat(h["key"][64:128], h["key"][0:64]))]))
    return Pipeline([p], n_ports=1), rw


def _rewrite(hdr):
    """The element's rewrite of the 42 header bytes, by hand (wire order)."""
    op = int.from_bytes(hdr[0:2], "big") ^ 0x8001
    rest = bytearray(hdr[2:26])
    rest[-1] = (rest[-1] + 1) & 0xFF
    key = hdr[26:42]
    return op.to_bytes(2, "big") + bytes(rest) + key[8:16] + key[0:8]


def _frames():
    hdr = bytes((7 * i + 3) & 0xFF for i in range(42))
    hdr2 = bytes(range(0x80, 0x80 + 42))
    opts = [IPOption(b"\x01" * 40)]                  # 10 words of options: IHL 15
    eth = dict(dst="02:00:00:00:00:01", src="02:00:00:00:00:02")
    ip = dict(src="192.0.2.1", dst="10.0.0.9", id=0x1234)
    out = []
    for vlan, options, payload, csum in ((False, [], hdr, None),
                                         (True, opts, hdr2, None),
                                         (False, [], hdr + bytes(range(150)), None),
                                         (True, [], hdr2 + b"x" * 9, 0)):
        def build(pl, vlan=vlan, options=options, csum=csum):
            e = Ether(**eth) / Dot1Q(vlan=3) if vlan else Ether(**eth)
            u = UDP(sport=999, dport=PORT) if csum is None else UDP(sport=999, dport=PORT,
                                                                     chksum=csum)
            return bytes(e / IP(options=options, **ip) / u / Raw(pl))
        f = build(payload)
        ref = build(_rewrite(payload[:42]) + payload[42:])
        out.append((f, ref, payload[26:42]))
    assert len(out[1][0]) == 128                      # VLAN + IHL 15 + UDP + 42 = 128 bytes
    short = bytes(Ether(**eth) / IP(**ip) / UDP(sport=1, dport=PORT + 1) / Raw(b"ab"))
    short += bytes(60 - len(short))                    # padded to the 64-byte minimum frame
    out.append((short, short, None))
    return out


def _run(frames, pipeline=None):
    pl, rw = pipeline or _pipeline()
    csr = CsrBuilder()
    m = Module()
    par = m.submodules.parser = Parser(pl, arb_layout(512, UW), csr)
    dep = m.submodules.deparser = Deparser(pl, data_width=512, output="host", user_width=UW,
                                           n_ports=1, name="dp")
    vout, pout, lat = build_element(m, rw, pl, par.o.valid, par.o.payload, csr, prefix="w")
    # the parser's original values, delayed by the element's latency (as the data path does)
    orig = par.orig
    for k in range(lat):
        o = Signal.like(par.orig, name=f"orig_d{k}")
        m.d.sync += o.eq(orig)
        orig = o
    m.d.comb += [dep.copy.valid.eq(vout), dep.copy.payload.eq(pout), dep.orig.eq(orig)]
    hw_keys, outs = [], []

    def beats(f):
        n = (len(f) + 63) // 64
        return [(f[64 * k:64 * k + 64], k, k == n - 1) for k in range(n)]

    async def bench(ctx):
        feed = [f for f, _, _ in frames]
        pend = []                       # {"f": frame, "t0": cycle of beat 0 at the deparser}
        cur, outbuf = [], bytearray()
        for cyc in range(60 * len(frames)):
            # the parser's input: one packet at a time, its beats back to back
            if not cur and feed and cyc % 12 == 0:
                f = feed.pop(0)
                cur = beats(f)
                pend.append({"f": f, "t0": None})
            if cur:
                d, k, last = cur.pop(0)
                ctx.set(par.i.valid, 1)
                ctx.set(par.i.payload.data, int.from_bytes(d.ljust(64, b"\0"), "little"))
                ctx.set(par.i.payload.keep, (1 << len(d)) - 1)
                ctx.set(par.i.payload.last, int(last))
                ctx.set(par.i.payload.len, len(pend[-1]["f"]))
                ctx.set(par.i.payload.port, 0)
                ctx.set(par.i.payload.user, 0)
            else:
                ctx.set(par.i.valid, 0)
            # the frame reaches the deparser PREP_LATENCY cycles after its copy
            due = [p for p in pend if p["t0"] is not None and p["t0"] <= cyc]
            if due:
                p = due[0]
                d, k, last = beats(p["f"])[cyc - p["t0"]]
                b = dep.beat.payload
                ctx.set(dep.beat.valid, 1)
                ctx.set(b.data, int.from_bytes(d.ljust(64, b"\0"), "little"))
                ctx.set(b.keep, (1 << len(d)) - 1)
                ctx.set(b.last, int(last))
                ctx.set(b.len, len(p["f"]))
                ctx.set(b.port, 0)
                ctx.set(b.first, int(k == 0))
                ctx.set(b.index, min(k, 3))
                if last:
                    pend.remove(p)
            else:
                ctx.set(dep.beat.valid, 0)
            await ctx.delay(1e-9)
            if ctx.get(par.o.valid) and "kv.key" in pl.phv.views:
                hw_keys.append(ctx.get(HwEnv(pl, par.o.payload).field("kv.key")))
            if ctx.get(vout):
                next(p for p in pend if p["t0"] is None)["t0"] = cyc + PREP_LATENCY
            if ctx.get(dep.o.valid):
                o = dep.o.payload
                keep = ctx.get(o.keep)
                raw = ctx.get(o.data).to_bytes(64, "little")
                outbuf += bytes(raw[i] for i in range(64) if keep >> i & 1)
                if ctx.get(o.last):
                    outs.append(bytes(outbuf))
                    outbuf = bytearray()
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()
    return pl, rw, hw_keys, outs


def test_whole_window_read_and_rewritten():
    assert APP_BYTES == 42
    frames = _frames()
    pl, rw, hw_keys, outs = _run(frames)
    model = DataplaneModel(pl)
    assert len(outs) == len(frames) and len(hw_keys) == len(frames)
    for (f, ref, key), got, hw_key in zip(frames, outs, hw_keys):
        phv = model.parse(f, 0)
        if key is not None:
            assert phv["meta.hdr_type"] != 0
            assert model.view(phv, "kv.key") == int.from_bytes(key, "big") == hw_key
        else:
            assert phv["meta.hdr_type"] == 0
        model._run(pl.elements, phv)
        want = model.deparse(f, phv)
        assert want == ref                      # the model against scapy
        assert got == want                      # the gateware against the model


#: the rewrite of every app byte (all bytes nonzero, so every byte changes)
XOR = int.from_bytes(bytes((0x5A + 37 * i) & 0xFF or 1 for i in range(APP_BYTES)), "big")


def _pipeline_whole_app():
    p = Program("sm", udp_port=PORT)
    p.header([("op", 16)])
    wr = p.add(Compute("wr", [Set(F.app, F.app ^ XOR)]))
    return Pipeline([p], n_ports=1), wr


def _partial_frames():
    """``[(frame, reference)]``: the frame as sent, and as scapy makes it after the rewrite
    (app bytes inside the frame XORed, the UDP checksum recomputed over the datagram)."""
    from scapy.all import Ether as E
    eth = dict(dst="02:00:00:00:00:01", src="02:00:00:00:00:02")
    ip = dict(src="192.0.2.1", dst="10.0.0.9", id=0x4321)
    out = []
    opts = [IPOption(b"\x01" * 40)]
    # (VLAN + IHL 15 or not, app bytes in the datagram); the frame is padded to 60 bytes
    for tagged, n in ((False, 19), (False, 22), (False, 41), (False, 27), (False, 5),
                      (False, 6), (True, 13), (True, 14), (True, 3)):
        pl = bytes((0x11 * (i + 1) + 3) & 0xFF for i in range(n))
        e = Ether(**eth) / Dot1Q(vlan=5) if tagged else Ether(**eth)
        f = bytes(e / IP(options=opts if tagged else [], **ip) / UDP(sport=7, dport=PORT)
                  / Raw(pl))
        f += bytes(max(0, 60 - len(f)))
        a = (18 + 60 if tagged else 34) + 8
        assert a + n <= len(f) < a + APP_BYTES     # the window passes the frame's end
        new = bytearray(f)
        x = XOR.to_bytes(APP_BYTES, "big")
        for i in range(APP_BYTES):
            if a + i < len(f):
                new[a + i] ^= x[i]
        pkt = E(bytes(new))
        del pkt[UDP].chksum
        ref = bytes(pkt)
        assert len(ref) == len(f)
        out.append((f, ref, None))
    return out


def test_partial_window():
    """A window cut by the datagram's and the frame's end, every app byte rewritten."""
    frames = _partial_frames()
    pl, rw, _, outs = _run(frames, _pipeline_whole_app())
    model = DataplaneModel(pl)
    assert len(outs) == len(frames)
    odd_cut = 0
    for (f, ref, _), got in zip(frames, outs):
        phv = model.parse(f, 0)
        assert phv["meta.hdr_type"] != 0 and phv["meta.udp_valid"]
        model._run(pl.elements, phv)
        want = model.deparse(f, phv)
        assert want == ref                      # the model against scapy
        assert got == want                      # the gateware against the model
        u = len(f) - len(Ether(f)[UDP])
        odd_cut += phv["udp.len"] % 2 and u + phv["udp.len"] == len(f)
        assert want[u + 6:u + 8] != f[u + 6:u + 8]
    assert odd_cut >= 2          # a datagram of odd length ending at the frame's end
    # the compiled model's deparser (its own code) on the same frames, whole passes
    compiled, interp = CompiledModel(pl), DataplaneModel(pl)
    for f, ref, _ in frames:
        assert [o.frame for o in compiled.process(f, 0)] == [ref]
        assert [o.frame for o in interp.process(f, 0)] == [ref]
