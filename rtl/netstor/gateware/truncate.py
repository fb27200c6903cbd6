"""Truncation where a copy leaves: a copy whose ``meta.truncate`` is set becomes a header-only
packet (``netstor.model.replication.truncate_frame`` is the reference).

:class:`Truncator` sits between a deparser and its egress queue, on the deparsed copy's beats
(:func:`~.axis.pkt_layout`, gapless as the non-stalling pipeline produces them). With ``trunc``
and a valid IPv4 header, the header end is ``e = u + 8 + (APP_BYTES if app)`` for UDP
(``u = l3 + 4 ihl``), ``u`` otherwise; when ``e < l3 + total_len`` the copy leaves with its
first ``e`` bytes (at most 86 + APP_BYTES <= 128: one or two beats, ``keep``/``last``/``len``
set, later beats removed), the IPv4 total length ``e - l3`` and header checksum (incremental,
RFC 1624 eqn. 3, from the deparsed checksum: equal to the recomputed one for a header with a
correct checksum), the UDP length ``e - u`` and, unless the deparsed UDP checksum is 0, the
UDP checksum recomputed over the pseudo-header, the UDP header and the kept app words. Other
copies pass unchanged.

**The arithmetic runs beside the deparser.** Every byte the UDP checksum of a header-only copy
covers is a PHV field the deparser writes as it is (``ipv4.src``/``dst``, ``udp.sport``/
``dport``, the ``app`` window; the lengths are the new ones), so the sums are taken from the
copy's PHV (``facts``, valid when the deparser takes the copy, :data:`FACTS_LEAD` cycles before
its first deparsed beat: the deparser's prep latency) while the deparser prepares the copy's
rewrite. What needs the deparsed bytes is small: the IPv4 checksum (one incremental add and a
fold) and whether the UDP checksum is 0.

Pipeline (fixed latency, never stalls):

* facts F (4 cycles ahead): U1 header end, ``l3``, ``u`` (one-hot over its 12 values), the
  address and port pairs, the app words in pairs; U2 the cut decision, the new lengths, the
  IPv4 length delta ``~total_len + (e - l3)``, app quads, byte masks; U3 the pseudo-header and
  UDP header sum, the app sum, the delta folded; U4 the UDP total, first fold.
* beats: P1 (the beat registered; with the first beat the packet's U4 results are taken, the
  UDP checksum's last fold done, ``~ip_csum + delta`` summed from the deparsed bytes; the
  deparsed UDP checksum compared with 0 at each of its possible offsets), P2 the output register
  (the IPv4 checksum folded and complemented, the four fields placed, ``keep``/``last``/
  ``len`` set, later beats removed).

Latency :data:`TRUNC_LATENCY` = 2 cycles from a beat in to the beat out (was 7 when the sums
were taken from the deparsed beats), one beat per clock.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from netstor.lang.phv import APP_BYTES

from .axis import flow_signature, pkt_layout

__all__ = ["Truncator", "TRUNC_LATENCY", "FACTS_LEAD", "trunc_facts_layout"]

TRUNC_LATENCY = 2
#: cycles from a copy's ``facts`` to its first beat on ``i`` (the deparser's prep latency)
FACTS_LEAD = 4
APP = APP_BYTES                 # the app window (netstor.lang), the default of ``app_bytes``
#: the UDP header offsets u = l3 + 4 ihl a valid IPv4 header allows (l3 14 or 18, ihl 5..15)
U_VALUES = sorted({l3 + 4 * ihl for l3 in (14, 18) for ihl in range(5, 16)})


def trunc_facts_layout(app_bytes=APP):
    """What the truncator needs of a copy's PHV (the values the deparser writes)."""
    return data.StructLayout({"trunc": 1, "vlan": 1, "ipv4": 1, "udp": 1, "ihl": 4, "app": 1,
                              "total_len": 16, "src": 32, "dst": 32, "sport": 16, "dport": 16,
                              "window": 8 * app_bytes})


def _byte(window, p):
    return window[8 * p:8 * p + 8]


def _be16(window, p):
    """Big-endian 16-bit word at byte ``p`` of a little-endian byte window (byte 0 = bits 0..7)."""
    return Cat(_byte(window, p + 1), _byte(window, p))


def _fold(x):
    """One end-around-carry fold of a 17-bit one's-complement partial sum."""
    return (x[:16] + x[16])[:16]


class Truncator(wiring.Component):
    """See the module docstring. Ports: ``facts`` (flow of :func:`trunc_facts_layout`: one
    per copy, :data:`FACTS_LEAD` cycles before the copy's first beat), ``i`` (flow of
    :func:`~.axis.pkt_layout` beats), ``o`` (flow, same layout, :data:`TRUNC_LATENCY` cycles
    later)."""

    def __init__(self, *, data_width=512, user_width=1, app_bytes=APP):
        if data_width != 512:
            raise ValueError("the truncation window is two 512-bit beats")
        # the largest header end: VLAN (18) + IPv4 with options (60) + UDP (8) + app window
        if 18 + 60 + 8 + app_bytes > 128 or app_bytes % 2 or app_bytes <= 0:
            raise ValueError(f"the app window ({app_bytes} bytes) must be whole 16-bit words "
                             "and end within the two-beat window")
        self.app = app_bytes
        self.dw, self.uw = data_width, user_width
        layout = pkt_layout(data_width, user_width)
        super().__init__({"facts": In(flow_signature(trunc_facts_layout(app_bytes))),
                          "i": In(flow_signature(layout)),
                          "o": Out(flow_signature(layout))})

    def elaborate(self, platform):
        m = Module()
        layout = pkt_layout(self.dw, self.uw)
        APP = self.app
        NU = len(U_VALUES)
        END_BITS = (18 + 60 + 8 + APP).bit_length()
        R = dict(reset_less=True)

        # ==== the copy's facts: U1..U4 =========================================================
        fv, fa = self.facts.valid, self.facts.payload
        # ---- U1: header end, l3, u, the sums' first level -------------------------------------
        u1 = Signal()
        u1_cutok, u1_udp = Signal(**R), Signal(**R)
        u1_l3 = Signal(5, **R)
        u1_u = Signal(7, **R)
        u1_uoh = Signal(NU, **R)
        u1_end = Signal(END_BITS, **R)
        u1_tot = Signal(16, **R)
        u1_h = [Signal(17, name=f"u1_h{k}", **R) for k in range(3)]
        app_words = [fa.window[16 * k:16 * k + 16] for k in range(APP // 2)]   # any order
        app_words += [Const(0, 16)] * (len(app_words) % 2)
        u1_a = [Signal(17, name=f"u1_a{k}", **R) for k in range(len(app_words) // 2)]
        l3 = Mux(fa.vlan, 18, 14)
        u_now = Signal(7)
        m.d.comb += u_now.eq(l3 + 4 * fa.ihl)
        m.d.sync += [u1.eq(fv),
                     u1_cutok.eq(fa.trunc & fa.ipv4 & (fa.ihl >= 5)), u1_udp.eq(fa.udp),
                     u1_l3.eq(l3), u1_u.eq(u_now), u1_tot.eq(fa.total_len),
                     u1_uoh.eq(Cat(*[u_now == uv for uv in U_VALUES])),
                     u1_end.eq(Mux(fa.udp, u_now + Mux(fa.app, 8 + APP, 8), u_now)),
                     u1_h[0].eq(fa.src[16:] + fa.src[:16]), u1_h[1].eq(fa.dst[16:] + fa.dst[:16]),
                     u1_h[2].eq(fa.sport + fa.dport)]
        with m.If(fa.udp & fa.app):              # a program's packet: the app words count
            m.d.sync += [a.eq(app_words[2 * k] + app_words[2 * k + 1])
                         for k, a in enumerate(u1_a)]
        with m.Else():
            m.d.sync += [a.eq(0) for a in u1_a]

        # ---- U2: cut decision, new lengths, length delta, app quads, byte masks --------------
        u2 = Signal()
        u2_cut, u2_udp, u2_one = Signal(**R), Signal(**R), Signal(**R)
        u2_l3 = Signal(5, **R)
        u2_uoh = Signal(NU, **R)
        u2_end = Signal(END_BITS, **R)
        u2_iplen, u2_ulen = Signal(16, **R), Signal(16, **R)
        u2_d = Signal(17, **R)
        u2_h = Signal(18, **R)
        u2_h2 = Signal(17, **R)
        nq = (len(u1_a) + 3) // 4
        a4 = u1_a + [Const(0, 17)] * (4 * nq - len(u1_a))
        u2_a = [Signal(19, name=f"u2_a{k}", **R) for k in range(nq)]
        u2_keep = Signal(128, **R)
        iplen = Signal(16)
        m.d.comb += iplen.eq(u1_end - u1_l3)
        m.d.sync += [u2.eq(u1), u2_cut.eq(u1_cutok & (iplen < u1_tot)), u2_udp.eq(u1_udp),
                     u2_one.eq(u1_end <= 64), u2_l3.eq(u1_l3), u2_uoh.eq(u1_uoh),
                     u2_end.eq(u1_end), u2_iplen.eq(iplen), u2_ulen.eq(u1_end - u1_u),
                     u2_d.eq((~u1_tot)[:16] + iplen),
                     u2_h.eq(u1_h[0] + u1_h[1]), u2_h2.eq(u1_h[2])]
        m.d.sync += [q.eq((a4[4 * k] + a4[4 * k + 1]) + (a4[4 * k + 2] + a4[4 * k + 3]))
                     for k, q in enumerate(u2_a)]
        m.d.sync += [u2_keep[b].eq(u1_end > b) for b in range(128)]

        # ---- U3: pseudo-header + UDP header sum, app sum, the delta folded -------------------
        keep3 = [Signal.like(x, name=f"u3_{x.name[3:]}") for x in
                 (u2_cut, u2_udp, u2_one, u2_l3, u2_uoh, u2_end, u2_iplen, u2_ulen, u2_keep)]
        u3 = Signal()
        u3_h = Signal(20, **R)
        u3_a = Signal(21, **R)
        u3_d = Signal(16, **R)
        m.d.sync += [u3.eq(u2)] + [d.eq(s_) for d, s_ in zip(keep3, (
            u2_cut, u2_udp, u2_one, u2_l3, u2_uoh, u2_end, u2_iplen, u2_ulen, u2_keep))]
        # pseudo-header (src, dst, protocol 17, UDP length) + UDP header (ports, length, 0)
        m.d.sync += [u3_h.eq(u2_h + (u2_h2 + 17 + 2 * u2_ulen)),
                     u3_a.eq(sum(u2_a[1:], u2_a[0]) if u2_a else 0),
                     u3_d.eq(_fold(u2_d))]
        cut3, udp3, one3, l33, uoh3, end3, iplen3, ulen3, keepm3 = keep3

        # ---- U4: the UDP total, first fold -----------------------------------------------------
        keep4 = [Signal.like(x, name=f"u4_{x.name[3:]}") for x in keep3]
        u4 = Signal()
        u4_f = Signal(17, **R)
        u4_d = Signal(16, **R)
        tot = Signal(21)
        m.d.comb += tot.eq(u3_h + u3_a)
        m.d.sync += [u4.eq(u3), u4_d.eq(u3_d), u4_f.eq(tot[:16] + tot[16:])]
        m.d.sync += [d.eq(s_) for d, s_ in zip(keep4, keep3)]
        cut4, udp4, one4, l34, uoh4, end4, iplen4, ulen4, keepm4 = keep4

        # ==== the beats: P1, P2 ================================================================
        ib = self.i.payload
        in_pkt = Signal()
        idx_in = Signal(2)
        with m.If(self.i.valid):
            m.d.sync += in_pkt.eq(~ib.last)
            with m.If(~in_pkt):
                m.d.sync += idx_in.eq(1)
            with m.Elif(idx_in != 3):
                m.d.sync += idx_in.eq(idx_in + 1)
        idx = Mux(in_pkt, idx_in, 0)
        is0 = self.i.valid & ~in_pkt

        # ---- P1: the beat; the packet's results taken with its first beat ---------------------
        p1v = Signal()
        p1b = Signal(layout, **R)
        p1_idx = Signal(2, **R)
        m.d.sync += [p1v.eq(self.i.valid), p1b.eq(ib), p1_idx.eq(idx)]
        c_cut = Signal()                          # the current packet is cut
        c_udp, c_one = Signal(**R), Signal(**R)
        c_l3 = Signal(5, **R)
        c_uoh = Signal(NU, **R)
        c_end = Signal(END_BITS, **R)
        c_iplen, c_ulen, c_ucs = Signal(16, **R), Signal(16, **R), Signal(16, **R)
        c_keep = Signal(128, **R)
        c_x = Signal(17, **R)                     # ~ip_csum (deparsed) + length delta
        f2 = Signal(16)
        m.d.comb += f2.eq(_fold(u4_f))
        with m.If(is0):
            m.d.sync += [c_cut.eq(u4 & cut4), c_udp.eq(udp4), c_one.eq(one4), c_l3.eq(l34),
                         c_uoh.eq(uoh4), c_end.eq(end4), c_iplen.eq(iplen4), c_ulen.eq(ulen4),
                         c_keep.eq(keepm4),
                         c_ucs.eq(Mux(f2 == 0xFFFF, 0xFFFF, ~f2)),
                         c_x.eq((~Mux(l34 == 18, _be16(ib.data, 28), _be16(ib.data, 24)))[:16]
                                + u4_d)]
        # the deparsed UDP checksum is 0 (stays 0): the word at every possible offset tested
        # in P1 (registered, one flag per UDP offset), the packet's offset and beat chosen in
        # P2 where the checksum field is placed (the beat comes combinationally through the
        # deparser's merge: testing and choosing in P1 measured 10 LUT levels across modules,
        # data path -> deparser merge -> this flag)
        zero_at = Signal(NU, **R)
        m.d.sync += zero_at.eq(Cat(*[_be16(ib.data, (uv + 6) % 64) == 0 for uv in U_VALUES]))

        # ---- P2: IPv4 checksum folded, fields placed, keep/last/len, later beats removed -----
        ipc = Signal(16)
        m.d.comb += ipc.eq(~_fold(c_x))
        # (byte position in the two-beat window, select, byte) of the four rewritten fields
        fields = []
        for l3v in (14, 18):
            sel = c_l3 == l3v
            fields += [(l3v + 2, sel, c_iplen[8:16]), (l3v + 3, sel, c_iplen[0:8]),
                       (l3v + 10, sel, ipc[8:16]), (l3v + 11, sel, ipc[0:8])]
        for j, uv in enumerate(U_VALUES):
            sel = c_uoh[j] & c_udp
            ucs = Mux(zero_at[j], 0, c_ucs)      # placed only in the beat that holds it
            fields += [(uv + 4, sel, c_ulen[8:16]), (uv + 5, sel, c_ulen[0:8]),
                       (uv + 6, sel, ucs[8:16]), (uv + 7, sel, ucs[0:8])]
        patched = Signal(512)
        for k in range(64):
            byte = p1b.data[8 * k:8 * k + 8]
            for bi in (0, 1):
                for pos, sel, val in fields:
                    if pos == 64 * bi + k:
                        byte = Mux(sel & (p1_idx == bi), val, byte)
            m.d.comb += patched[8 * k:8 * k + 8].eq(byte)
        ov = Signal()
        od = Signal(layout, **R)
        with m.If(c_cut & p1v):
            m.d.sync += [ov.eq((p1_idx == 0) | ((p1_idx == 1) & ~c_one)),
                         od.data.eq(patched), od.user.eq(p1b.user), od.len.eq(c_end),
                         od.keep.eq(Mux(p1_idx == 0, c_keep[:64], c_keep[64:])),
                         od.last.eq((p1_idx == 1) | c_one)]
        with m.Else():
            m.d.sync += [ov.eq(p1v), od.eq(p1b)]
        m.d.comb += [self.o.valid.eq(ov), self.o.payload.eq(od)]
        return m
