"""Deparser: writes a copy's PHV back into its frame, with checksum updates.

Implements the "Deparser" section of ``docs/dataplane-spec.md`` for one output copy.

Two parts with a fixed timing contract (the frame's beats come from a fixed-latency delay line,
so no handshake is needed):

* :class:`DeparsePrep` (``PREP_LATENCY`` = 2 cycles): from the copy's PHV and the original
  field values (``orig``), computes the IPv4 and UDP checksums incrementally (RFC 1624) and the
  128-byte rewrite window (``wdata``) with a per-byte write mask (``wmask``).
* :class:`DeparseMerge` (0 cycles, combinational): merges the window into beat 0 and beat 1 of
  the frame as they pass. The prep result must be registered in the cycle beat 0 arrives and
  stays valid one more cycle (the next packet's prep result cannot arrive earlier, because a
  two-beat packet occupies the bus for two cycles).

Payload bytes beyond the first 128 are never touched; the frame length never changes.
"""

from __future__ import annotations

from amaranth.hdl import Signal, Module, Cat, Mux
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .parser import orig_layout
from .kit import HwEnv

__all__ = ["Deparser", "DeparsePrep", "PREP_LATENCY", "merge_beat", "ones_sum_fold"]

PREP_LATENCY = 2


def ones_sum_fold(m, total, name):
    """Fold a wide sum of 16-bit words into 16 bits with end-around carry."""
    a = Signal(max(17, len(total) - 15), name=f"{name}_f1")
    b = Signal(17, name=f"{name}_f2")
    m.d.comb += a.eq(total[:16] + total[16:])
    m.d.comb += b.eq(a[:16] + a[16:])
    r = Signal(16, name=f"{name}_fold")
    m.d.comb += r.eq(b[:16] + b[16])
    return r


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
        app_terms = [term(app_old[16 * k:16 * k + 16], app_new[16 * k:16 * k + 16])
                     for k in range(len(app_new) // 16)]
        a_valid = Signal(name=f"{n}_a_valid")
        a_phv = Signal(data.StructLayout(pl.phv.layout()), name=f"{n}_a_phv")
        a_ipsum = Signal(20, name=f"{n}_a_ipsum")
        a_udpsum = Signal(20, name=f"{n}_a_udpsum")
        a_appsum = Signal(22, name=f"{n}_a_appsum")
        a_ipcsum, a_udpcsum = Signal(16, name=f"{n}_a_ipcsum"), Signal(16, name=f"{n}_a_udpcsum")
        a_extra = Signal(len(extra_in), name=f"{n}_a_extra")
        m.d.sync += [
            a_valid.eq(valid_in), a_phv.eq(phv_in), a_extra.eq(extra_in),
            a_ipsum.eq(sum(ip_terms) + (~orig.ip_csum)[:16]),
            a_udpsum.eq(sum(udp_terms) + (~orig.udp_csum)[:16]),
            a_appsum.eq(sum(app_terms)),
            a_ipcsum.eq(orig.ip_csum), a_udpcsum.eq(orig.udp_csum),
        ]

        # ---- cycle B: fold, place fields into the window ----------------------------------
        envb = HwEnv(pl, a_phv)
        fb = envb.field
        ip_fold = ones_sum_fold(m, a_ipsum, f"{n}_ip")
        ip_csum = Signal(16, name=f"{n}_ip_csum")
        m.d.comb += ip_csum.eq(~ip_fold)
        hdr = fb("meta.hdr_type") != 0
        udp_total = Signal(23, name=f"{n}_udp_total")
        m.d.comb += udp_total.eq(a_udpsum + Mux(hdr, a_appsum, 0))
        udp_fold = ones_sum_fold(m, udp_total, f"{n}_udp")
        udp_csum = Signal(16, name=f"{n}_udp_csum")
        m.d.comb += udp_csum.eq(Mux(a_udpcsum == 0, 0, Mux(~udp_fold == 0, 0xFFFF, ~udp_fold)))

        wdata = [Signal(8, name=f"{n}_wd{i}") for i in range(128)]
        wmask = [Signal(name=f"{n}_wm{i}") for i in range(128)]
        for i in range(128):
            m.d.comb += [wdata[i].eq(0), wmask[i].eq(0)]

        def put(offset, byte_values, enable):
            for k, b in enumerate(byte_values):
                m.d.comb += [wdata[offset + k].eq(b), wmask[offset + k].eq(enable)]

        put(0, _be_bytes(fb("eth.dst"), 6), 1)
        put(6, _be_bytes(fb("eth.src"), 6), 1)
        vlan = fb("meta.vlan_valid")
        ipv4 = fb("meta.ipv4_valid")
        udp = fb("meta.udp_valid")
        with m.If(vlan):
            put(14, _be_bytes(fb("vlan.tci"), 2), 1)
        ihl = fb("ipv4.ver_ihl")[0:4]
        for l3, vl in ((14, 0), (18, 1)):
            with m.If(ipv4 & (vlan == vl)):
                put(l3 + 1, [fb("ipv4.tos")], 1)
                put(l3 + 4, _be_bytes(fb("ipv4.ident"), 2), 1)
                put(l3 + 8, [fb("ipv4.ttl")], 1)
                put(l3 + 10, _be_bytes(ip_csum, 2), 1)
                put(l3 + 12, _be_bytes(fb("ipv4.src"), 4), 1)
                put(l3 + 16, _be_bytes(fb("ipv4.dst"), 4), 1)
                with m.Switch(ihl):
                    for h in range(5, 16):
                        with m.Case(h):
                            u = l3 + 4 * h
                            with m.If(udp):
                                put(u, _be_bytes(fb("udp.sport"), 2), 1)
                                put(u + 2, _be_bytes(fb("udp.dport"), 2), 1)
                                put(u + 6, _be_bytes(udp_csum, 2), 1)
                                with m.If(hdr):
                                    put(u + 8, _be_bytes(fb("app"), len(fb("app")) // 8), 1)

        valid = Signal(name=f"{n}_valid")
        wd = Signal(1024, name=f"{n}_wdata")
        wm = Signal(128, name=f"{n}_wmask")
        extra = Signal(len(extra_in), name=f"{n}_extra")
        m.d.sync += [valid.eq(a_valid), wd.eq(Cat(*wdata)), wm.eq(Cat(*wmask)),
                     extra.eq(a_extra)]
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
    window merged into the frame's first two beats as they pass.

    Timing contract: the copy (``copy_valid``, ``copy_phv``, ``orig``, ``extra``) enters
    ``PREP_LATENCY`` cycles before its frame's first beat arrives on ``beat_*`` (the datapath's
    beat delay line guarantees it; no handshake). ``active`` is 1 from the first beat to the
    last of a frame this copy takes; ``valid``/``data`` are that beat with the window applied
    (combinational from the beat), ``extra_out`` the copy's ``extra`` (registered with the
    prep). Throughput: one beat per clock.

    Ports: ``copy_valid``, ``copy_phv`` (the pipeline's PHV layout), ``orig`` (original field
    values, :func:`netstor.gateware.parser.orig_layout`), ``extra`` (``extra_width`` bits);
    ``beat_valid``, ``beat_first``, ``beat_last``, ``beat_index`` (0, 1, 2 = later),
    ``beat_data``; out ``active``, ``valid``, ``data``, ``extra_out``.
    """

    def __init__(self, pipeline, *, data_width, extra_width, name="dp"):
        self.pipeline, self.dw, self.name = pipeline, data_width, name
        super().__init__({
            "copy_valid": In(1), "copy_phv": In(data.StructLayout(pipeline.phv.layout())),
            "orig": In(orig_layout()), "extra": In(extra_width),
            "beat_valid": In(1), "beat_first": In(1), "beat_last": In(1), "beat_index": In(2),
            "beat_data": In(data_width),
            "active": Out(1), "valid": Out(1), "data": Out(data_width),
            "extra_out": Out(extra_width),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.name
        pv, wd, wm, pextra = DeparsePrep(self.pipeline, n).build(
            m, self.copy_valid, self.copy_phv, self.orig, self.extra)
        active_r = Signal(name=f"{n}_active_r")
        m.d.comb += self.active.eq(Mux(self.beat_first, pv, active_r))
        with m.If(self.beat_valid):
            m.d.sync += active_r.eq(self.active & ~self.beat_last)
        # the prep registers move on every cycle: keep this packet's window for beat 1
        wd_hold = Signal(len(wd), name=f"{n}_wd_hold")
        wm_hold = Signal(len(wm), name=f"{n}_wm_hold")
        with m.If(self.beat_first):
            m.d.sync += [wd_hold.eq(wd), wm_hold.eq(wm)]
        m.d.comb += [
            self.valid.eq(self.beat_valid & self.active),
            self.data.eq(merge_beat(self.beat_data, self.beat_index,
                                    Mux(self.beat_first, wd, wd_hold),
                                    Mux(self.beat_first, wm, wm_hold), self.dw)),
            self.extra_out.eq(pextra),
        ]
        return m
