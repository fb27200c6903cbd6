"""Formal harness for a program's trust guard (``netstor.elements.trust.guard``).

A small guarded program ``g`` (UDP port, 16-bit header ``op | idx``) is built with the same
language calls the offloads use, and its ingress stages (``Pipeline.stages()``) are
elaborated and chained exactly as :class:`~netstor.gateware.datapath.Datapath` chains its
:class:`~netstor.gateware.stage.Stage` s (``build_stage`` one after another, one
:class:`~netstor.gateware.csr.CsrBuilder`):

* bank ``a`` (4 x 4): ``a[idx[0:2]] += 1``, added *before* ``guard(p)`` (the guard must gate
  elements added earlier too);
* ``guard(p, reports=(op == 2))``: the table ``g.trust`` (8 entries, key
  ``report | meta.ingress_port | ipv4.src``) and the last element ``g.untrusted``;
* bank ``b`` (3 x 4): compare-and-swap ``if b[idx[4:6]] == idx[0:4]: b[...] = op[0:4]``,
  only when ``op[4]``, added after the guard (a conditional write, index out of range
  possible);
* ``fwd``: sets ``meta.drop = 0`` (the guard's drop must come after it).

Inputs, every cycle: ``valid`` and the whole 751-bit PHV are free (any program's packets,
any header, any ingress port and source, ``meta.recirc_count`` free, so recirculated passes
occur), except ``g.m.trusted = 0`` (the parser clears every program metadata field,
``Parser``: ``phv.eq(0)`` before the parsed fields). The host ports of ``g.trust`` and of
``g.trust.default`` are free (any request, any entry word, any time, the AXI protocol not
even assumed). The register banks' host ports are idle, so every write enable of a bank's
memory is a packet's. Reset is not asserted after the start (``_started``).

Reference (from the spec, not from the gateware's expressions): a trust entry word is
``valid(1) | value(kw) | mask(kw) | action(ab) | params``, key parts first part lowest
(docs/dataplane-spec.md, "Entry encodings"), so the ingress-port part of an entry is bits
``1 + 1 ..`` of value and mask. For each packet the harness computes, in the cycle the table
looks it up (its stage-0 cycle; the entries as they are then) and the next (the default
action as it is then, when the table applies a miss):

* ``barred``: no valid entry whose port value/mask admits the packet's ingress port (whatever
  the rest of its key) and the default action is 0 -- a packet from a port the configuration
  does not name, while entries for other ports may be valid (an empty table bars every
  packet);
* ``first``: ``meta.recirc_count == 0`` (a first pass; recirculated passes are trusted by
  design, their first pass having been trusted or dropped).

and carries these tags beside the packet with its own delay registers (latencies from the
built stages).

Asserted, every cycle:

1. *Unconfigured*: as long as no trust entry has been valid and the default action has been
   0 in every cycle since configuration, no first pass makes any bank's write enable fire.
   With 4. (the entries' power-up value), the unconfigured bitstream lets no packet write a
   bank (recirculated passes of ``g`` need a trusted first pass: ``g.untrusted`` drops the
   others, and a dropped packet is not recirculated, see the ``tm`` job).
2. *Untrusted port*: no bank's write enable fires for a ``barred`` first pass, whatever
   other entries are valid (for an empty table this is 1. per packet).
3. A ``barred`` first pass of ``g`` is counted in ``g.trust.miss`` (at the lookup's second
   cycle) and leaves the stages with ``meta.drop = 1`` (after ``fwd`` cleared it).
4. The trust entries are 0 in the initial state (flip-flops with init 0: the FPGA
   configuration's and the reset's value).

Covers (non-vacuity): a first pass writes bank ``a`` and one writes bank ``b`` through a
valid entry; a write right behind a ``barred`` packet from another port while an entry is
valid; a recirculated pass writes with the table empty; a ``barred`` packet dropped at the
output while an entry is valid.

The properties depend on the table as each packet observes it, not on how it got there, so
they are inductive without an invariant on the entries (k-induction with ``k`` larger than
the latency from the stages' input to the last write and to the output: a RegisterOp writes
``RegisterOp.LATENCY`` cycles after its stage's input).
The initial state matters only for 4.: the entries are flip-flops with ``init`` 0 and a
synchronous reset to 0 (Amaranth ``sync`` domain; checked in the RTLIL).
"""

from amaranth.hdl import Assert, Assume, Cover, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In

from netstor.elements import Compute, RegisterOp
from netstor.elements.trust import guard, TRUST_SIZE
from netstor.gateware.csr import CsrBuilder
from netstor.gateware.stages import build_stage
from netstor.lang import F, Old, Set
from netstor.lang.program import Pipeline, Program
from common import delay as _delay
from props_packet_buffer import _started

__all__ = ["TrustProps", "make_program"]

PORT = 0x1234


def make_program(n_ports=2, size=TRUST_SIZE):
    p = Program("g", udp_port=PORT)
    h = p.header([("op", 8), ("idx", 8)])
    a = p.bank("a", width=4, depth=4)
    p.add(RegisterOp.add("count", a, h["idx"][0:2]))
    guard(p, reports=h["op"] == 2, size=size)
    b = p.bank("b", width=4, depth=3)
    p.add(RegisterOp("swap", b, index=h["idx"][4:6], update=lambda old: h["op"][0:4],
                     write=(Old(4) == h["idx"][0:4]), when=h["op"][4]))
    p.add(Compute("fwd", [Set(F.meta.drop, 0)]))
    return Pipeline([p], n_ports=n_ports, guarded=True)


class TrustProps(wiring.Component):
    def __init__(self, n_ports=2, size=TRUST_SIZE):
        self.pl = make_program(n_ports, size)
        self.prog = self.pl.programs[0]
        self.table = self.prog.elements[0]
        assert self.table.name == "trust"
        self.size = size
        t = self.table
        self.kw, self.ab = t.key_width, t.action_bits
        self.ew = 1 + 2 * self.kw + self.ab + t.param_width
        phv_w = data.StructLayout(self.pl.phv.layout()).size
        super().__init__({
            "valid": In(1), "phv": In(phv_w),
            "t_req": In(1), "t_we": In(1), "t_addr": In(max(1, (size - 1).bit_length())),
            "t_wdata": In(self.ew),
            "d_req": In(1), "d_we": In(1), "d_wdata": In(self.ab + t.param_width),
        })

    def elaborate(self, platform):
        m = Module()
        pl, prog = self.pl, self.prog
        csr = CsrBuilder()
        started = _started(m)
        layout = data.StructLayout(pl.phv.layout())
        fld = lambda phv, n: phv[pl.phv.fields[n].key]          # noqa: E731

        phv_in = Signal(layout)
        m.d.comb += phv_in.eq(self.phv)
        m.d.comb += Assume(fld(phv_in, "g.m.trusted") == 0)     # the parser clears it

        # ---- the ingress stages, chained as Datapath chains them ---------------------------
        v, p, t0 = self.valid, phv_in, 0
        start = {}                      # element -> cycle its stage takes the packet
        for idx, stage in enumerate(pl.stages()):
            for e in stage:
                start[e] = t0
            v, p, lat = build_stage(m, stage, pl, v, p, csr, prefix=f"i{idx}")
            t0 += lat
        v_out, phv_out, latency = v, p, t0
        driven = {s.name: s for s in m._driving.keys()}
        tpre = f"i{[i for i, st in enumerate(pl.stages()) if self.table in st][0]}_g_trust"
        ents = [driven[f"{tpre}_ent{i}"] for i in range(self.size)]
        dflt = driven[f"{tpre}_default"]
        assert start[self.table] == 0

        ports = {mi.name: mi.port for mi in csr.memories}
        tp, dp = ports["g.trust"], ports["g.trust.default"]
        m.d.comb += [tp.req.eq(self.t_req), tp.we.eq(self.t_we), tp.addr.eq(self.t_addr),
                     tp.wdata.eq(self.t_wdata),
                     dp.req.eq(self.d_req), dp.we.eq(self.d_we), dp.wdata.eq(self.d_wdata)]
        miss = {c.name: c.inc for c in csr.counters}["g.trust.miss"]
        banks = [(e, m.submodules[f"i{[i for i, st in enumerate(pl.stages()) if e in st][0]}"
                                  f"_g_{e.name}_mem"].write_ports[0].en)
                 for e in prog.elements if e.banks()]
        assert [e.name for e, _ in banks] == ["count", "swap"]

        # ---- reference tags, computed at the lookup ----------------------------------------
        kw, ab = self.kw, self.ab
        pw = pl.phv.fields["meta.ingress_port"].width
        port = fld(phv_in, "meta.ingress_port")
        valid_bits = Signal(self.size)
        admits = Signal(self.size)
        for i, ent in enumerate(ents):
            value, mask = ent[1:1 + kw], ent[1 + kw:1 + 2 * kw]
            vp, mp = value[1:1 + pw], mask[1:1 + pw]        # key part 1: meta.ingress_port
            m.d.comb += [valid_bits[i].eq(ent[0]),
                         admits[i].eq(ent[0] & (((port ^ vp) & mp) == 0))]
        dflt_on = Signal()
        m.d.comb += dflt_on.eq(dflt[:ab] != 0)
        first = Signal()
        sel = Signal()
        m.d.comb += [first.eq(fld(phv_in, "meta.recirc_count") == 0),
                     sel.eq(fld(phv_in, "meta.hdr_type") == prog.hdr_type)]
        # stage-0 cycle: the entries; the next cycle: the default action (a miss applies it then)
        barred0 = Signal()
        m.d.comb += barred0.eq(self.valid & first & (admits == 0))
        barred1 = _delay(m, barred0, 1, "barred")
        sel1 = _delay(m, sel, 1, "sel")
        entry1 = _delay(m, self.valid & first & (admits != 0), 1, "entry")
        barred, by_entry = Signal(), Signal()
        m.d.comb += [barred.eq(barred1 & ~dflt_on), by_entry.eq(entry1 & ~dflt_on)]

        # "nothing has ever been trusted": no valid entry and default 0 in every cycle so far
        never = Signal(init=1)
        m.d.sync += never.eq(never & (valid_bits == 0) & ~dflt_on)
        any_valid = Signal()
        m.d.comb += any_valid.eq(valid_bits != 0)
        other_valid1 = _delay(m, any_valid, 1, "other_valid")

        # ---- properties ------------------------------------------------------------------
        # 4. power-up / reset value of the entries and the default
        m.d.comb += Assert(started | ((valid_bits == 0) & ~dflt_on))
        for e, wen in banks:
            d = start[e] + RegisterOp.LATENCY   # a RegisterOp writes LATENCY cycles after its
            #                                     stage's input (its write slot)
            assert d >= 1
            first_w = _delay(m, first & self.valid, d, f"first_{e.name}")
            barred_w = _delay(m, barred, d - 1, f"barred_{e.name}")
            ov_w = _delay(m, other_valid1, d - 1, f"ov_{e.name}")
            m.d.comb += [
                Assert(~(wen & first_w & never)),                           # 1.
                Assert(~(wen & barred_w)),                                  # 2.
            ]
            # covers: trusted first-pass write; a write right behind a barred packet while an
            # entry (for another port) is valid; a recirculated pass writing with nothing valid
            by_entry_w = _delay(m, by_entry, d - 1, f"by_entry_{e.name}")
            barred_prev = _delay(m, barred_w, 1, f"barred_prev_{e.name}")
            ov_prev = _delay(m, ov_w, 1, f"ov_prev_{e.name}")
            m.d.comb += [
                Cover(started & wen & first_w & by_entry_w),
                Cover(started & wen & first_w & barred_prev & ov_prev),
                Cover(started & wen & ~first_w & never),
            ]
        # 3. a barred first pass of g is counted as a miss and dropped at the output
        m.d.comb += Assert(~(barred & sel1) | miss)
        out_barred = _delay(m, barred & sel1, latency - 1, "out_barred")
        out_ov = _delay(m, other_valid1, latency - 1, "out_ov")
        m.d.comb += [
            Assert(~out_barred | (v_out & fld(phv_out, "meta.drop"))),
            Cover(started & out_barred & out_ov),
        ]
        return m
