"""Deparser: writes a copy's PHV back into its frame, with checksum updates.

Implements the "Deparser" section of ``docs/dataplane-spec.md`` for one output copy.

Two parts with a fixed timing contract (the frame's beats come from a fixed-latency delay line,
so no handshake is needed):

* :class:`DeparsePrep` (``PREP_LATENCY`` = 4 cycles): from the copy's PHV and the original
  field values (``orig``), computes the IPv4 and UDP checksums incrementally (RFC 1624) and the
  128-byte rewrite window (``wdata``) with a per-byte write mask (``wmask``). Cycle A: the
  checksum partial sums (the application words in groups of ``APP_GROUP``, each app byte
  outside the UDP datagram read as 0 on both sides: :func:`datagram_mask`; each group a
  chain of kept two-operand adders, :func:`kept_sum`); A2: the
  application sum and the UDP total; B: the folds, registered, and one registered flag per placement
  (which field goes to which offset for the packet's VLAN/IHL/UDP/header); C: each window
  byte is the OR of its (flag & value) candidates (one-hot, no per-byte priority chain).
* the merge (0 cycles, combinational, :func:`merge_beat`, in :class:`Deparser`): merges the
  window into beat 0 and beat 1 of the frame as they pass. The prep result must be registered in the cycle beat 0 arrives and
  stays valid one more cycle (the next packet's prep result cannot arrive earlier, because a
  two-beat packet occupies the bus for two cycles).

Payload bytes beyond the first 128 are never touched; the frame length never changes.
"""

from __future__ import annotations

from amaranth.hdl import Signal, Module, Cat, Const, Mux
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .axis import axis_signature, beat_layout, flow_signature, frame_layout, pkt_layout
from .parser import orig_layout
from .kit import HwEnv

__all__ = ["Deparser", "DeparsePrep", "PREP_LATENCY", "RECIRC_USER", "merge_beat",
           "ones_sum_fold"]

PREP_LATENCY = 4
#: the recirculation user: ``{meta.bridge (32), meta.recirc_count + 1 (3)}``
RECIRC_USER = 35
#: application checksum terms summed per group in cycle A (the groups are added in A2). An app
#: byte is masked by its in-datagram flag (:func:`datagram_mask`, two LUT levels from
#: ``udp.len``) before it enters the sum. Groups of 3 terms: 7 groups, each a chain of kept
#: two-operand adders (:func:`kept_sum`); A2 adds them and the UDP partial sum (8 operands, from
#: registers). Measured (Yosys, bench_deparser): 8 LUT levels, udp.len -> mask -> a group's
#: last adder (9 with the group as one ``sum``, which Yosys made a carry-save tree)
APP_GROUP = 3


def ones_sum_fold(m, total, name):
    """Fold a wide sum of 16-bit words into 16 bits with end-around carry."""
    a = Signal(max(17, len(total) - 15), name=f"{name}_f1")
    b = Signal(17, name=f"{name}_f2")
    m.d.comb += a.eq(total[:16] + total[16:])
    m.d.comb += b.eq(a[:16] + a[16:])
    r = Signal(16, name=f"{name}_fold")
    m.d.comb += r.eq(b[:16] + b[16])
    return r


def kept_sum(m, terms, name):
    """``terms`` added left to right (``(t0 + t1) + t2``, the order of ``sum``) as a chain of
    two-operand adders whose operands and partial sums are kept wires. Without ``keep``,
    Yosys' ``alumacc`` merges the chain into one multi-operand ``$macc`` and ``maccmap``
    builds a carry-save tree: in the deparser, udp.len -> mask -> group measured 9 LUT levels
    (6,855 LUT); with kept two-operand adders (carry chains in between) 8 (6,423 LUT)."""
    acc = None
    for i, t in enumerate(terms):
        w = Signal(len(t), name=f"{name}_t{i}", attrs={"keep": 1})
        m.d.comb += w.eq(t)
        if acc is None:
            acc = w
            continue
        s = Signal(max(len(acc), len(w)) + 1, name=f"{name}_s{i}", attrs={"keep": 1})
        m.d.comb += s.eq(acc + w)
        acc = s
    return acc


def datagram_mask(m, udp_len, nbytes, name):
    """``nbytes`` flags, wire order: app byte ``j`` (at ``u + 8 + j``) lies inside the UDP
    datagram, ``8 + j < udp_len``. Two LUT levels: the low 6 bits against the constant (one
    LUT6) OR ``udp_len >= 64`` (every byte inside; the window is 42 bytes)."""
    assert 8 + nbytes <= 64
    hi = Signal(name=f"{name}_ulen_hi")
    m.d.comb += hi.eq(udp_len[6:] != 0)
    out = []
    for j in range(nbytes):
        b = Signal(name=f"{name}_in{j}")
        m.d.comb += b.eq(hi | (udp_len[:6] > 8 + j))
        out.append(b)
    return out


def app_words(app, dmask):
    """The app window's 16-bit words (``app`` bit 0 = the last byte's LSB; word ``k`` holds
    wire bytes ``nbytes-2-2k`` (high) and ``nbytes-1-2k`` (low)) with every byte outside the
    datagram (``dmask``, wire order) read as 0, so it adds nothing to the UDP checksum (RFC
    768: a datagram of odd length is padded with a zero byte)."""
    nb = len(app) // 8
    words = []
    for k in range(nb // 2):
        hi, lo = nb - 2 - 2 * k, nb - 1 - 2 * k
        words.append(Cat(app[8 * (nb - 1 - lo):8 * (nb - lo)] & dmask[lo].replicate(8),
                         app[8 * (nb - 1 - hi):8 * (nb - hi)] & dmask[hi].replicate(8)))
    return words


def _be_bytes(value, nbytes):
    """Bytes of ``value`` in wire (big-endian) order."""
    return [value[8 * (nbytes - 1 - k):8 * (nbytes - k)] for k in range(nbytes)]


class DeparsePrep:
    """The prep half of :class:`Deparser`, built into the deparser's module (and, alone,
    into the synthesis benchmark's): call :meth:`build`."""

    def __init__(self, pipeline, name):
        self.pipeline, self.name = pipeline, name

    def build(self, m, valid_in, phv_in, orig_in, extra_in):
        """Returns ``(valid, wdata, wmask, extra)`` registered ``PREP_LATENCY`` cycles later.
        ``extra_in`` is any Value carried alongside (copy flags, user)."""
        pl, n = self.pipeline, self.name
        env = HwEnv(pl, phv_in)
        f = env.field
        orig = orig_in

        # ---- cycle A: checksum partial sums, offsets ------------------------------------
        # the app bytes inside the UDP datagram (``udp.len`` is read-only: the parsed value)
        dmask = self.dmask = datagram_mask(m, f("udp.len"), len(f("app")) // 8, n)
        def term(old, new):
            return (~old)[:16] + new

        ver_ihl_tos = Cat(f("ipv4.tos"), f("ipv4.ver_ihl"))
        ttl_proto = Cat(f("ipv4.proto"), f("ipv4.ttl"))
        ip_terms = [
            term(orig.ver_ihl_tos, ver_ihl_tos), term(orig.ident, f("ipv4.ident")),
            term(orig.ttl_proto, ttl_proto),
            term(orig.ip_src[16:], f("ipv4.src")[16:]), term(orig.ip_src[:16], f("ipv4.src")[:16]),
            term(orig.ip_dst[16:], f("ipv4.dst")[16:]), term(orig.ip_dst[:16], f("ipv4.dst")[:16]),
        ]
        udp_terms = [
            term(orig.ip_src[16:], f("ipv4.src")[16:]), term(orig.ip_src[:16], f("ipv4.src")[:16]),
            term(orig.ip_dst[16:], f("ipv4.dst")[16:]), term(orig.ip_dst[:16], f("ipv4.dst")[:16]),
            term(orig.sport, f("udp.sport")), term(orig.dport, f("udp.dport")),
        ]
        app_new, app_old = f("app"), orig.app
        app_terms = [term(o, w) for o, w in zip(app_words(app_old, dmask),
                                                app_words(app_new, dmask))]
        a_valid = Signal(name=f"{n}_a_valid")
        a_phv = Signal(data.StructLayout(pl.phv.layout()), name=f"{n}_a_phv", reset_less=True)
        a_ipsum = Signal(20, name=f"{n}_a_ipsum", reset_less=True)
        a_udpsum = Signal(20, name=f"{n}_a_udpsum", reset_less=True)
        D = dict(reset_less=True)
        a_appg = [Signal(20, name=f"{n}_a_appg{k}", **D)
                  for k in range(0, len(app_terms), APP_GROUP)]
        a_ipcsum = Signal(16, name=f"{n}_a_ipcsum", **D)
        a_udpcsum = Signal(16, name=f"{n}_a_udpcsum", **D)
        a_extra = Signal(len(extra_in), name=f"{n}_a_extra", **D)
        m.d.sync += [
            a_valid.eq(valid_in), a_phv.eq(phv_in), a_extra.eq(extra_in),
            a_ipsum.eq(sum(ip_terms) + (~orig.ip_csum)[:16]),
            a_udpsum.eq(sum(udp_terms) + (~orig.udp_csum)[:16]),
            a_ipcsum.eq(orig.ip_csum), a_udpcsum.eq(orig.udp_csum),
        ]
        for i, (g, k) in enumerate(zip(a_appg, range(0, len(app_terms), APP_GROUP))):
            m.d.sync += g.eq(kept_sum(m, app_terms[k:k + APP_GROUP], f"{n}_appg{i}"))

        # ---- cycle A2: the application sum and the UDP total ----------------------------
        hdr_a = HwEnv(pl, a_phv).field("meta.hdr_type") != 0
        a2_valid = Signal(name=f"{n}_a2_valid")
        a2_phv = Signal(data.StructLayout(pl.phv.layout()), name=f"{n}_a2_phv", **D)
        a2_extra = Signal(len(extra_in), name=f"{n}_a2_extra", **D)
        a2_ipsum = Signal(20, name=f"{n}_a2_ipsum", **D)
        a2_udptotal = Signal(23, name=f"{n}_a2_udptotal", **D)
        a2_udpcsum = Signal(16, name=f"{n}_a2_udpcsum", **D)
        m.d.sync += [
            a2_valid.eq(a_valid), a2_phv.eq(a_phv), a2_extra.eq(a_extra),
            a2_ipsum.eq(a_ipsum), a2_udpcsum.eq(a_udpcsum),
            a2_udptotal.eq(a_udpsum + Mux(hdr_a, sum(a_appg) if a_appg else 0, 0)),
        ]
        a_valid, a_phv, a_extra, a_ipsum, a_udpcsum = (a2_valid, a2_phv, a2_extra, a2_ipsum,
                                                       a2_udpcsum)

        # ---- cycle B: checksum folds; which field goes where, as one flag per placement ------
        envb = HwEnv(pl, a_phv)
        fb = envb.field
        ip_fold = ones_sum_fold(m, a_ipsum, f"{n}_ip")
        hdr = fb("meta.hdr_type") != 0
        udp_fold = ones_sum_fold(m, a2_udptotal, f"{n}_udp")
        b_valid = Signal(name=f"{n}_b_valid")
        b_phv = Signal(data.StructLayout(pl.phv.layout()), name=f"{n}_b_phv", **D)
        b_extra = Signal(len(extra_in), name=f"{n}_b_extra", **D)
        ip_csum = Signal(16, name=f"{n}_ip_csum", **D)
        udp_csum = Signal(16, name=f"{n}_udp_csum", **D)
        m.d.sync += [
            b_valid.eq(a_valid), b_phv.eq(a_phv), b_extra.eq(a_extra),
            ip_csum.eq(~ip_fold),
            udp_csum.eq(Mux(a_udpcsum == 0, 0, Mux(~udp_fold == 0, 0xFFFF, ~udp_fold))),
        ]
        vlan = fb("meta.vlan_valid")
        ipv4 = fb("meta.ipv4_valid")
        udp = fb("meta.udp_valid")
        ihl = fb("ipv4.ver_ihl")[0:4]

        def flag(name, cond):
            r = Signal(name=f"{n}_at_{name}", **D)
            m.d.sync += r.eq(cond)
            return r

        # At most one (VLAN, IHL) combination holds, and the fields one combination places
        # never overlap, so each window byte takes the OR of its (flag & value) candidates.
        fc = HwEnv(pl, b_phv).field
        places = [(0, _be_bytes(fc("eth.dst"), 6), None),     # None: always placed
                  (6, _be_bytes(fc("eth.src"), 6), None),
                  (14, _be_bytes(fc("vlan.tci"), 2), flag("vlan", vlan))]
        for l3, vl in ((14, 0), (18, 1)):
            at_ip = flag(f"ip{vl}", ipv4 & (vlan == vl))
            places += [(l3 + 1, [fc("ipv4.tos")], at_ip),
                       (l3 + 4, _be_bytes(fc("ipv4.ident"), 2), at_ip),
                       (l3 + 8, [fc("ipv4.ttl")], at_ip),
                       (l3 + 10, _be_bytes(ip_csum, 2), at_ip),
                       (l3 + 12, _be_bytes(fc("ipv4.src"), 4), at_ip),
                       (l3 + 16, _be_bytes(fc("ipv4.dst"), 4), at_ip)]
            for h in range(5, 16):
                u = l3 + 4 * h
                at_udp = flag(f"udp{vl}_{h}", ipv4 & (vlan == vl) & (ihl == h) & udp)
                at_app = flag(f"app{vl}_{h}", ipv4 & (vlan == vl) & (ihl == h) & udp & hdr)
                places += [(u, _be_bytes(fc("udp.sport"), 2), at_udp),
                           (u + 2, _be_bytes(fc("udp.dport"), 2), at_udp),
                           (u + 6, _be_bytes(udp_csum, 2), at_udp),
                           (u + 8, _be_bytes(fc("app"), len(fc("app")) // 8), at_app)]

        # ---- cycle C: one-hot byte placement into the window ----------------------------
        cand = [[] for _ in range(128)]
        for off, byte_values, en in places:
            for k, bv in enumerate(byte_values):
                if off + k < 128:
                    cand[off + k].append((en, bv))
        wdata, wmask = [], []
        for i in range(128):
            if not cand[i]:
                wdata.append(Const(0, 8))
                wmask.append(Const(0, 1))
                continue
            msk = Const(1, 1) if any(en is None for en, _ in cand[i]) else Cat(
                *[en for en, _ in cand[i]]).any()
            vals = [bv if en is None else Mux(en, bv, 0) for en, bv in cand[i]]
            acc = vals[0]
            for v in vals[1:]:
                acc = acc | v
            wdata.append(acc)
            wmask.append(msk)

        valid = Signal(name=f"{n}_valid")
        wd = Signal(1024, name=f"{n}_wdata", **D)
        wm = Signal(128, name=f"{n}_wmask", **D)
        extra = Signal(len(extra_in), name=f"{n}_extra", **D)
        m.d.sync += [valid.eq(b_valid), wd.eq(Cat(*wdata)), wm.eq(Cat(*wmask)),
                     extra.eq(b_extra)]
        return valid, wd, wm, extra


def merge_beat(data_in, beat_index, wdata, wmask, data_width):
    """Beat ``beat_index`` (0 or 1, a Value) of the frame with the rewrite window applied."""
    nb = data_width // 8
    out = []
    for b in range(nb):
        lo = Mux(wmask[b], wdata[8 * b:8 * b + 8], data_in[8 * b:8 * b + 8])
        hi = Mux(wmask[nb + b], wdata[8 * (nb + b):8 * (nb + b) + 8], data_in[8 * b:8 * b + 8])
        out.append(Mux(beat_index == 0, lo, Mux(beat_index == 1, hi, data_in[8 * b:8 * b + 8])))
    return Cat(*out)


class Deparser(wiring.Component):
    """One output copy's deparser: :class:`DeparsePrep` on the copy's PHV, then the rewrite
    window merged into the frame's first two beats as they pass, and the beat handed on with
    the ``user`` its output carries.

    Ports:

    * ``copy`` (:func:`~.axis.flow_signature` of the PHV layout): the copy, ``PREP_LATENCY``
      cycles before its frame's first beat arrives on ``beat`` (the data path's
      :class:`~.delay.FrameDelay` guarantees it; no handshake); ``orig``: the parser's original
      field values (:func:`~.parser.orig_layout`) for this copy, in the same cycle;
    * ``beat`` (:func:`~.axis.flow_signature` of :func:`~.axis.frame_layout`): the frame;
    * ``o`` (:func:`~.axis.axis_signature`): the beats of the frames this copy takes, with the
      window applied (combinational from ``beat``). ``o.ready`` is not looked at: the consumer
      must take every beat (an :class:`~.packet_buffer.EgressQueue`, or the recirculation
      :class:`~.packet_buffer.PacketBuffer` that drops on full). Its payload by ``output``:

      - ``"wire"`` (wire TX port ``port``): :func:`~.axis.pkt_layout` with ``user`` =
        ``{own (1), host TX tuser (tx_user)}``: a host packet keeps its TX tuser on every wire
        port, 0 for the others; ``own`` when the packet came from host TX ``port`` (input
        ``n_ports + port``). ``own_first`` pulses at the first beat of such an own copy;
      - ``"host"`` (host RX): :func:`~.axis.pkt_layout`, ``user`` = the wire RX tuser of a packet
        from wire RX (inputs ``< n_ports``), else 0;
      - ``"recirc"``: :func:`~.axis.beat_layout` of ``user_width`` bits, ``user`` =
        ``{meta.bridge (32), meta.recirc_count + 1 (3)}`` (what the parser reads back);
      - ``"lane"`` (the copy lane's one deparser for every output): :func:`~.axis.pkt_layout`
        with ``user`` = ``{recirc user (35), beat user (user_width)}``: the data path picks
        each output's user after the truncator.

    Latency: ``PREP_LATENCY`` = 4 cycles from ``copy`` to the window; 0 cycles from ``beat``
    to ``o``. Throughput: one beat per clock.
    """

    def __init__(self, pipeline, *, data_width, output, user_width, n_ports=1, port=0,
                 tx_user=17, name="dp"):
        if output not in ("wire", "host", "recirc", "lane"):
            raise ValueError(f"output must be 'wire', 'host', 'recirc' or 'lane', not {output!r}")
        self.pipeline, self.dw, self.name = pipeline, data_width, name
        self.output, self.n_ports, self.port, self.tx_user = output, n_ports, port, tx_user
        self.user_width = user_width
        phv = data.StructLayout(pipeline.phv.layout())
        if output == "wire":
            out = pkt_layout(data_width, tx_user + 1)
        elif output == "host":
            out = pkt_layout(data_width, user_width)
        elif output == "lane":
            out = pkt_layout(data_width, user_width + RECIRC_USER)
        else:
            out = beat_layout(data_width, user_width)
        members = {
            "copy": In(flow_signature(phv)), "orig": In(orig_layout()),
            "beat": In(flow_signature(frame_layout(data_width, user_width))),
            "o": Out(axis_signature(out)),
        }
        if output == "wire":
            members["own_first"] = Out(1)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        n, pl = self.name, self.pipeline
        P = self.n_ports
        cp = self.copy.payload
        extra = Cat((HwEnv(pl, cp).field("meta.recirc_count") + 1)[:3],
                    HwEnv(pl, cp).field("meta.bridge"))
        pv, wd, wm, pextra = DeparsePrep(pl, n).build(m, self.copy.valid, cp, self.orig, extra)
        b = self.beat.payload
        active = Signal(name=f"{n}_active")
        active_r = Signal(name=f"{n}_active_r")
        m.d.comb += active.eq(Mux(b.first, pv, active_r))
        with m.If(self.beat.valid):
            m.d.sync += active_r.eq(active & ~b.last)
        # the prep registers move on every cycle: keep this packet's window for beat 1
        wd_hold = Signal(len(wd), name=f"{n}_wd_hold")
        wm_hold = Signal(len(wm), name=f"{n}_wm_hold")
        with m.If(b.first):
            m.d.sync += [wd_hold.eq(wd), wm_hold.eq(wm)]
        o = self.o.payload
        m.d.comb += [
            self.o.valid.eq(self.beat.valid & active),
            o.data.eq(merge_beat(b.data, b.index, Mux(b.first, wd, wd_hold),
                                 Mux(b.first, wm, wm_hold), self.dw)),
            o.keep.eq(b.keep), o.last.eq(b.last),
        ]
        if self.output == "recirc":
            m.d.comb += o.user.eq(pextra[:35])
        elif self.output == "lane":
            # every copy on one deparser: the beat's user as it came, and the recirculation
            # user (valid with the first beat, held for the copy's later beats)
            rx_hold = Signal(RECIRC_USER, name=f"{n}_rx_hold")
            with m.If(b.first):
                m.d.sync += rx_hold.eq(pextra[:RECIRC_USER])
            m.d.comb += [o.user.eq(Cat(b.user, Mux(b.first, pextra[:RECIRC_USER], rx_hold))),
                         o.len.eq(b.len)]
        elif self.output == "wire":
            own = b.port == P + self.port
            from_host = (b.port >= P) & (b.port < 2 * P)
            m.d.comb += [o.user.eq(Cat(Mux(from_host, b.user[:self.tx_user], 0), own)),
                         o.len.eq(b.len),
                         self.own_first.eq(b.first & active & own)]
        else:
            m.d.comb += [o.user.eq(Mux(b.port < P, b.user, 0)), o.len.eq(b.len)]
        return m
