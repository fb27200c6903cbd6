"""Truncation where a copy leaves: a copy whose ``meta.truncate`` is set becomes a header-only
packet (``netstor.model.replication.truncate_frame`` is the reference).

:class:`Truncator` sits between a deparser and its egress queue, on the deparsed copy's beats
(:func:`~.axis.pkt_layout`, gapless as the non-stalling pipeline produces them). The copy's
header facts come on ``info`` with its first beat (from the copy's PHV: ``trunc``,
``vlan``, ``ipv4`` (valid IPv4), ``udp`` (valid UDP), ``ihl``, ``app`` (a program's packet:
its ``APP_BYTES`` app window is a header)). With ``trunc`` and ``ipv4``, the header end is
``e = u + 8 + (APP_BYTES if app)`` for UDP (``u = l3 + 4 ihl``), ``u`` otherwise; when
``e < l3 + total_len`` the copy leaves with its first ``e`` bytes (at most 86 + APP_BYTES <= 128: one or two
beats, ``keep``/``last``/``len`` set, later beats removed), the IPv4 total length ``e - l3``
and header checksum (incremental, RFC 1624, which equals the recomputed one for a header
with a correct checksum), the UDP length ``e - u`` and, unless it was 0, the UDP checksum
recomputed over the pseudo-header, the UDP header and the kept app words. Other copies pass
unchanged.

Pipeline (fixed latency, never stalls): the two-beat window is complete one cycle after the
first beat; field selection (``u`` one-hot over its 12 values), then adder-tree stages
(two adder levels per register), fold, then one registered byte-placement stage. Latency
:data:`TRUNC_LATENCY` = 7 cycles, one beat per clock.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from netstor.lang.phv import APP_BYTES

from .axis import flow_signature, pkt_layout

__all__ = ["Truncator", "TRUNC_LATENCY", "trunc_info_layout"]

TRUNC_LATENCY = 7
APP = APP_BYTES                 # the app window (netstor.lang), the default of ``app_bytes``
#: the UDP header offsets u = l3 + 4 ihl a valid IPv4 header allows (l3 14 or 18, ihl 5..15)
U_VALUES = sorted({l3 + 4 * ihl for l3 in (14, 18) for ihl in range(5, 16)})


def trunc_info_layout():
    return data.StructLayout({"trunc": 1, "vlan": 1, "ipv4": 1, "udp": 1, "ihl": 4, "app": 1})


def _byte(window, p):
    return window[8 * p:8 * p + 8]


def _be16(window, p):
    """Big-endian 16-bit word at byte ``p`` of a little-endian byte window (byte 0 = bits 0..7)."""
    return Cat(_byte(window, p + 1), _byte(window, p))


class Truncator(wiring.Component):
    """See the module docstring. Ports: ``i`` (flow of :func:`~.axis.pkt_layout` beats),
    ``info`` (:func:`trunc_info_layout`, sampled with each packet's first beat), ``o`` (flow,
    same layout, :data:`TRUNC_LATENCY` cycles later)."""

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
        super().__init__({"i": In(flow_signature(layout)), "info": In(trunc_info_layout()),
                          "o": Out(flow_signature(layout))})

    def elaborate(self, platform):
        m = Module()
        layout = pkt_layout(self.dw, self.uw)
        D = TRUNC_LATENCY - 1                    # beat stages before the output register
        APP = self.app
        END_BITS = (18 + 60 + 8 + APP).bit_length()
        # app words summed pairwise (S2), then in groups of four (S3)
        _APP_PAIRS = (APP // 2 + 1) // 2
        _APP_QUADS = (_APP_PAIRS + 3) // 4

        # ---- beat index at the input, beats delayed -----------------------------------------
        in_pkt = Signal()
        idx_in = Signal(2)
        with m.If(self.i.valid):
            m.d.sync += in_pkt.eq(~self.i.payload.last)
            with m.If(~in_pkt):
                m.d.sync += idx_in.eq(1)
            with m.Elif(idx_in != 3):
                m.d.sync += idx_in.eq(idx_in + 1)
        first_in = self.i.valid & ~in_pkt
        idx_now = Mux(in_pkt, idx_in, 0)
        beats = [Signal(layout, reset_less=True, name=f"beat{k}") for k in range(D)]
        vals = [Signal(name=f"bval{k}") for k in range(D)]
        idxs = [Signal(2, name=f"bidx{k}", reset_less=True) for k in range(D)]
        m.d.sync += [beats[0].eq(self.i.payload), vals[0].eq(self.i.valid),
                     idxs[0].eq(idx_now)]
        for k in range(1, D):
            m.d.sync += [beats[k].eq(beats[k - 1]), vals[k].eq(vals[k - 1]),
                         idxs[k].eq(idxs[k - 1])]
        info0 = Signal(trunc_info_layout(), reset_less=True)
        first0 = Signal()
        m.d.sync += [info0.eq(self.info), first0.eq(first_in)]

        # ---- S1 (window = beat0 in beats[0], beat1 on the input): select the fields ----------
        win = Cat(beats[0].data, self.i.payload.data)     # 128 bytes, byte 0 = bits 0..7
        s1 = Signal()
        s1_cutok = Signal(reset_less=True)
        s1_tot, s1_ipc, s1_src_h, s1_src_l, s1_dst_h, s1_dst_l = (
            Signal(16, reset_less=True, name=f"s1_{n}")
            for n in ("tot", "ipc", "srch", "srcl", "dsth", "dstl"))
        s1_sport, s1_dport, s1_ucs = (Signal(16, reset_less=True, name=f"s1_{n}")
                                      for n in ("sport", "dport", "ucs"))
        s1_app = Signal(8 * APP, reset_less=True)
        s1_l3 = Signal(5, reset_less=True)
        s1_u = Signal(7, reset_less=True)
        s1_uoh = Signal(len(U_VALUES), reset_less=True)
        s1_end = Signal(END_BITS, reset_less=True)
        s1_udp = Signal(reset_less=True)
        inf = info0
        l3 = Mux(inf.vlan, 18, 14)
        m.d.sync += s1.eq(first0 & vals[0])
        m.d.sync += [s1_cutok.eq(inf.trunc & inf.ipv4 & (inf.ihl >= 5)), s1_udp.eq(inf.udp),
                     s1_l3.eq(l3)]
        for sig, off in ((s1_tot, 2), (s1_ipc, 10), (s1_src_h, 12), (s1_src_l, 14),
                         (s1_dst_h, 16), (s1_dst_l, 18)):
            m.d.sync += sig.eq(Mux(inf.vlan, _be16(win, 18 + off), _be16(win, 14 + off)))
        # u one-hot over its possible values, and the fields at u
        uoh = Cat(*[(Mux(inf.vlan, 18, 14) + 4 * inf.ihl) == uv for uv in U_VALUES])
        m.d.sync += s1_uoh.eq(uoh)
        for sig, rel, width in ((s1_sport, 0, 2), (s1_dport, 2, 2), (s1_ucs, 6, 2),
                                (s1_app, 8, APP)):
            cases = []
            for j, uv in enumerate(U_VALUES):
                p = uv + rel
                if width == 2:
                    val = _be16(win, p)
                else:                                   # app bytes kept in window order
                    val = win[8 * p:8 * (p + APP)]
                cases.append(Mux(uoh[j], val, 0))
            acc = cases[0]
            for c in cases[1:]:
                acc = acc | c
            m.d.sync += sig.eq(acc)
        u_now = Signal(7)
        m.d.comb += u_now.eq(l3 + 4 * inf.ihl)
        m.d.sync += [s1_u.eq(u_now),
                     s1_end.eq(Mux(inf.udp, u_now + Mux(inf.app, 8 + APP, 8), u_now))]

        # ---- S2: cut decision, new lengths, first adder level ---------------------------------
        s2 = Signal()
        s2_cut = Signal(reset_less=True)
        s2_keepcs = Signal(reset_less=True)      # UDP checksum 0 stays 0
        s2_udp = Signal(reset_less=True)
        s2_iplen = Signal(16, reset_less=True)
        s2_ulen = Signal(16, reset_less=True)
        s2_end, s2_l3, s2_u = (Signal(END_BITS, reset_less=True), Signal(5, reset_less=True),
                               Signal(7, reset_less=True))
        s2_uoh = Signal(len(U_VALUES), reset_less=True)
        s2_ipc, s2_tot = Signal(16, reset_less=True), Signal(16, reset_less=True)
        s2_h = [Signal(17, reset_less=True, name=f"s2_h{k}") for k in range(3)]
        app_words = [Cat(s1_app[8 * (2 * k + 1):8 * (2 * k + 2)], s1_app[16 * k:16 * k + 8])
                     for k in range(APP // 2)]
        app_words += [Const(0, 16)] * (2 * _APP_PAIRS - len(app_words))
        s2_a = [Signal(17, reset_less=True, name=f"s2_a{k}") for k in range(_APP_PAIRS)]
        m.d.sync += [s2.eq(s1),
                     s2_cut.eq(s1_cutok & ((s1_end - s1_l3) < s1_tot)),
                     s2_keepcs.eq(s1_ucs == 0), s2_udp.eq(s1_udp),
                     s2_iplen.eq(s1_end - s1_l3), s2_ulen.eq(s1_end - s1_u),
                     s2_end.eq(s1_end), s2_l3.eq(s1_l3), s2_u.eq(s1_u), s2_uoh.eq(s1_uoh),
                     s2_ipc.eq(s1_ipc), s2_tot.eq(s1_tot),
                     s2_h[0].eq(s1_src_h + s1_src_l), s2_h[1].eq(s1_dst_h + s1_dst_l),
                     s2_h[2].eq(s1_sport + s1_dport)]
        with m.If(s1_udp & (s1_end - s1_u > 8)):   # a program's packet: the app words count
            m.d.sync += [s2_a[k].eq(app_words[2 * k] + app_words[2 * k + 1])
                         for k in range(_APP_PAIRS)]
        with m.Else():
            m.d.sync += [a.eq(0) for a in s2_a]

        # ---- S3: two adder levels; IPv4 incremental sum --------------------------------------
        s3 = Signal()
        keep3 = [Signal.like(x, name=f"s3_{x.name}") for x in
                 (s2_cut, s2_keepcs, s2_udp, s2_iplen, s2_ulen, s2_end, s2_l3, s2_u, s2_uoh)]
        s3_a = [Signal(19, reset_less=True, name=f"s3_a{k}") for k in range(_APP_QUADS)]
        s3_h = Signal(20, reset_less=True)
        s3_ip = Signal(18, reset_less=True)
        m.d.sync += [s3.eq(s2)] + [d.eq(s) for d, s in zip(keep3, (
            s2_cut, s2_keepcs, s2_udp, s2_iplen, s2_ulen, s2_end, s2_l3, s2_u, s2_uoh))]
        a4 = s2_a + [Const(0, 17)] * (4 * _APP_QUADS - len(s2_a))
        m.d.sync += [s3_a[k].eq((a4[4 * k] + a4[4 * k + 1]) + (a4[4 * k + 2] + a4[4 * k + 3]))
                     for k in range(_APP_QUADS)]
        m.d.sync += [s3_h.eq((s2_h[0] + s2_h[1]) + (s2_h[2] + 17 + 2 * s2_ulen)),
                     s3_ip.eq((~s2_ipc)[:16] + (~s2_tot)[:16] + s2_iplen)]
        cut3, keepcs3, udp3, iplen3, ulen3, end3, l33, u3, uoh3 = keep3

        # ---- S4: total sums, first folds ------------------------------------------------------
        s4 = Signal()
        keep4 = [Signal.like(x, name=f"s4_{x.name}") for x in keep3]
        s4_s = Signal(23, reset_less=True)
        s4_ip = Signal(17, reset_less=True)
        m.d.sync += [s4.eq(s3)] + [d.eq(s) for d, s in zip(keep4, keep3)]
        s3_sum = s3_h
        for a in s3_a:                           # 2 or 3 adders (APP_BYTES <= 42)
            s3_sum = s3_sum + a
        m.d.sync += [s4_s.eq(s3_sum),
                     s4_ip.eq(s3_ip[:16] + s3_ip[16:])]
        cut4, keepcs4, udp4, iplen4, ulen4, end4, l34, u4, uoh4 = keep4

        # ---- S5: final folds and complements -> patch bytes, masks, keep ----------------------
        f1 = Signal(17)
        f2 = Signal(16)
        m.d.comb += [f1.eq(s4_s[:16] + s4_s[16:]), f2.eq(f1[:16] + f1[16:])]
        ipf = Signal(16)
        m.d.comb += ipf.eq(s4_ip[:16] + s4_ip[16:])
        ucs_new = Signal(16)
        m.d.comb += ucs_new.eq(Mux(keepcs4, 0, Mux(f2 == 0xFFFF, 0xFFFF, ~f2)))
        ipc_new = (~ipf)[:16]
        s5 = Signal()
        s5_cut = Signal(reset_less=True)
        s5_patch = Signal(128 * 8, reset_less=True)
        s5_pmask = Signal(128, reset_less=True)
        s5_keep0 = Signal(64, reset_less=True)
        s5_keep1 = Signal(64, reset_less=True)
        s5_one = Signal(reset_less=True)         # the header-only copy is one beat
        s5_end = Signal(END_BITS, reset_less=True)
        m.d.sync += [s5.eq(s4), s5_cut.eq(cut4), s5_end.eq(end4), s5_one.eq(end4 <= 64)]
        m.d.sync += [s5_keep0[b].eq(end4 > b) for b in range(64)]
        m.d.sync += [s5_keep1[b].eq(end4 > 64 + b) for b in range(64)]
        # byte placement: IPv4 total length and checksum at l3 + 2 / l3 + 10 (l3 14 or 18),
        # UDP length and checksum at u + 4 / u + 6 (u one-hot), all big-endian
        fields = []                              # (byte position, select, byte value)
        for l3v in (14, 18):
            sel = l34 == l3v
            fields += [(l3v + 2, sel, iplen4[8:16]), (l3v + 3, sel, iplen4[0:8]),
                       (l3v + 10, sel, ipc_new[8:16]), (l3v + 11, sel, ipc_new[0:8])]
        for j, uv in enumerate(U_VALUES):
            sel = uoh4[j] & udp4
            fields += [(uv + 4, sel, ulen4[8:16]), (uv + 5, sel, ulen4[0:8]),
                       (uv + 6, sel, ucs_new[8:16]), (uv + 7, sel, ucs_new[0:8])]
        for p in range(128):
            here = [(s, v) for pos, s, v in fields if pos == p]
            if not here:
                m.d.sync += [s5_pmask[p].eq(0), s5_patch[8 * p:8 * p + 8].eq(0)]
                continue
            msk, val = here[0][0], Mux(here[0][0], here[0][1], 0)
            for s, v in here[1:]:
                msk, val = msk | s, val | Mux(s, v, 0)
            m.d.sync += [s5_pmask[p].eq(msk), s5_patch[8 * p:8 * p + 8].eq(val)]

        # the packet's results stay in s5_* until the next packet's first beat reaches S5
        # (at least two cycles later when this packet has two beats): its beat 0 reaches the
        # output stage with s5 (cycle t0 + 6), its beat 1 one cycle later.
        cur_cut = Signal()
        cur_one = Signal(reset_less=True)
        cur_keep1 = Signal(64, reset_less=True)
        cur_patch1 = Signal(64 * 8, reset_less=True)
        cur_pmask1 = Signal(64, reset_less=True)
        cur_end = Signal(END_BITS, reset_less=True)

        # ---- output stage: patch beat 0 / beat 1 of a cut copy, drop its later beats -------
        b = beats[D - 1]
        bv, bi = vals[D - 1], idxs[D - 1]
        is0 = bv & (bi == 0)
        cut_now = Mux(is0, s5 & s5_cut, cur_cut)
        with m.If(is0):
            m.d.sync += [cur_cut.eq(s5 & s5_cut), cur_one.eq(s5_one), cur_keep1.eq(s5_keep1),
                         cur_patch1.eq(s5_patch[512:]), cur_pmask1.eq(s5_pmask[64:]),
                         cur_end.eq(s5_end)]
        o = self.o.payload
        patched = Signal(512)
        pm = Mux(is0, s5_pmask[:64], cur_pmask1)
        pv = Mux(is0, s5_patch[:512], cur_patch1)
        for p in range(64):
            m.d.comb += patched[8 * p:8 * p + 8].eq(
                Mux(pm[p], pv[8 * p:8 * p + 8], b.data[8 * p:8 * p + 8]))
        ov = Signal()
        od = Signal(layout, reset_less=True)
        with m.If(cut_now & bv):
            m.d.sync += [ov.eq(Mux(is0, 1, (bi == 1) & ~cur_one)),
                         od.data.eq(patched), od.user.eq(b.user),
                         od.len.eq(Mux(is0, s5_end, cur_end)),
                         od.keep.eq(Mux(is0, Mux(s5_one, s5_keep0, Const(-1, 64)), cur_keep1)),
                         od.last.eq(Mux(is0, s5_one, 1))]
        with m.Else():
            m.d.sync += [ov.eq(bv), od.eq(b)]
        m.d.comb += [self.o.valid.eq(ov), o.eq(od)]
        return m
