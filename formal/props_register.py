"""Formal harness for a RegisterOp stage (``netstor.gateware.stages.build_element``).

A one-element :class:`~netstor.lang.program.Program` is elaborated exactly as the data path
does it (``build_element`` with a :class:`~netstor.gateware.csr.CsrBuilder`), with free
inputs every cycle: ``valid``, the index (``index_width`` bits, so indexes ``>= depth`` occur),
the op's arguments and ``when``; one packet per clock, any index, back-to-back to the same
index. The host port (the bank's :class:`~netstor.gateware.csr.MemoryPort`) is driven like
:class:`~netstor.gateware.csr.AxiLiteCsr` drives it: a free choice starts a request (free
``we``/``addr``/``wdata``), held until ``ack``, dropped the cycle after.

Variants (``RegisterProps(variant, ...)``):

* ``"add"``: ``bank[i] += 1``, result = new value;
* ``"cas"``: compare-and-swap: if ``bank[i] == expect`` then ``bank[i] = value``;
  result = old value (a conditional write: ``write`` depends on ``Old``).
* ``"filter"``: NetClone's response filter (``netstor.offloads.netclone.program.filter_update`` and
  ``filter_drops``, the expressions the program uses): a reply with sequence number ``a``
  clears a slot holding ``a`` and is dropped, else records ``a`` and passes. Extra property:
  for a free sequence number ``S`` (constant over the trace, not 0, never written by the
  host), drops of ``S`` never exceed passes of ``S`` (at most one reply dropped per recorded
  reply), with the inductive strengthening drops + slots holding ``S`` <= passes.

Abstract model (kept in the harness, written from the spec, not from the expression the
gateware uses): an array ``shadow`` updated at the element's *input*, one packet per cycle,
in arrival order; a host write is applied in the first cycle of its request in which the
packet one cycle ahead (the one in the stage's second cycle) does not write, ordered after
that packet and before the packet at the input (the stages.py contract: "a host write in a
cycle in which no packet writes the bank").

Asserted, every cycle:

* the stage's output PHV equals the input PHV of two cycles earlier with the result field
  set to the model's result (old or new value) when the op acted (``when`` and ``index <
  depth``), untouched otherwise; ``valid`` is delayed by exactly 2;
* every memory cell equals the model (the model as of the memory's own timing: the packet in
  the second cycle has not written yet), so no update is lost, also for back-to-back
  packets hitting the same index;
* a host read returns the cell's value at a cycle inside the request window (the model's);
  a host write is performed before its ``ack``; ``ack`` only while ``req``; the
  ``index_oob`` counter pulses exactly for acting packets with ``index >= depth``.

Covers: two back-to-back acting packets to the same index with the second one seeing the
first's write; a host write interleaved between two packets to the same index.
"""

from amaranth.hdl import Assert, Assume, Cover, Module, Mux, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In

from netstor.gateware.csr import CsrBuilder
from netstor.gateware.stages import build_element
from netstor.lang.expr import Old
from netstor.elements import RegisterOp
from netstor.lang.program import Pipeline, Program
from props_packet_buffer import _started

__all__ = ["RegisterProps"]


def make_program(variant, width, depth, index_width):
    prog = Program("t")
    idx = prog.meta("idx", index_width)
    a = prog.meta("a", width)
    b = prog.meta("b", width)
    en = prog.meta("en", 1)
    res = prog.meta("res", width)
    bank = prog.bank("bank", width=width, depth=depth)
    if variant == "add":
        op = RegisterOp.add("op", bank, idx, 1, result=res, returns="new", when=en)
    elif variant == "cas":
        op = RegisterOp("op", bank, index=idx, update=lambda old: b,
                        write=(Old(width) == a), result=res, returns="old", when=en)
    elif variant == "filter":
        from netstor.offloads.netclone.program import filter_update
        op = RegisterOp("op", bank, index=idx, update=lambda old: filter_update(old, a),
                        result=res, returns="old", when=en)
    else:
        raise ValueError(variant)
    prog.add(op)
    return Pipeline([prog]), op


class RegisterProps(wiring.Component):
    def __init__(self, variant="add", width=4, depth=4, index_width=3):
        self.variant, self.width, self.depth = variant, width, depth
        self.index_width = index_width
        self.ab = max(1, (depth - 1).bit_length())
        super().__init__({
            "valid": In(1), "idx": In(index_width), "a": In(width), "b": In(width),
            "en": In(1), "res_in": In(width),
            "h_start": In(1), "h_we": In(1), "h_addr": In(self.ab), "h_wdata": In(width),
            "s": In(width),
        })

    def elaborate(self, platform):
        m = Module()
        w, depth = self.width, self.depth
        pl, op = make_program(self.variant, w, depth, self.index_width)
        csr = CsrBuilder()
        started = _started(m)

        # ---- the element, fed with free inputs ----------------------------------------
        layout = data.StructLayout(pl.phv.layout())
        phv_in = Signal(layout)
        f = lambda phv, n: phv[pl.phv.fields[n].key]          # noqa: E731
        m.d.comb += [f(phv_in, "t.m.idx").eq(self.idx), f(phv_in, "t.m.a").eq(self.a),
                     f(phv_in, "t.m.b").eq(self.b), f(phv_in, "t.m.en").eq(self.en),
                     f(phv_in, "t.m.res").eq(self.res_in)]
        v_out, phv_out, lat = build_element(m, op, pl, self.valid, phv_in, csr, prefix="reg")
        assert lat == 2
        mem = m.submodules["reg_mem"]
        cells = []
        for j in range(depth):
            p = mem.read_port(domain="comb")
            m.d.comb += p.addr.eq(j)
            cells.append(p.data)
        port = csr.memories[0].port
        oob = csr.counters[0].inc

        # ---- host side: a request held until ack, dropped the cycle after ----------------
        with m.If(~port.req):
            with m.If(self.h_start):
                m.d.sync += [port.req.eq(1), port.we.eq(self.h_we), port.addr.eq(self.h_addr),
                             port.wdata.eq(self.h_wdata)]
        with m.Elif(port.ack):
            m.d.sync += port.req.eq(0)
        m.d.comb += Assume(self.h_addr < depth)    # the CSR block rejects larger addresses

        # ---- abstract model -------------------------------------------------------------
        shadow = [Signal(w, name=f"shadow{j}") for j in range(depth)]    # at the input
        mshadow = [Signal(w, name=f"mshadow{j}") for j in range(depth)]  # memory timing
        mshadow_prev = [Signal(w, name=f"mshadow_prev{j}") for j in range(depth)]
        s_mid = [Signal(w, name=f"s_mid{j}") for j in range(depth)]
        hw_done = Signal()
        pkt_write1 = Signal()      # the packet now in the stage's second cycle writes
        host_lin = Signal()        # the host write takes effect now
        m.d.comb += host_lin.eq(port.req & port.we & ~hw_done & ~pkt_write1)
        with m.If(host_lin):
            m.d.sync += hw_done.eq(1)
        with m.If(~port.req):
            m.d.sync += hw_done.eq(0)
        for j in range(depth):
            m.d.comb += s_mid[j].eq(Mux(host_lin & (port.addr == j), port.wdata, shadow[j]))

        act = Signal()
        m.d.comb += act.eq(self.valid & self.en & (self.idx < depth))
        old = Signal(w)
        m.d.comb += old.eq(0)
        for j in range(depth):
            with m.If(self.idx == j):
                m.d.comb += old.eq(s_mid[j])
        new, writes, result = Signal(w), Signal(), Signal(w)
        if self.variant == "add":
            m.d.comb += [new.eq(old + 1), writes.eq(1), result.eq(new)]
        elif self.variant == "filter":
            m.d.comb += [new.eq(Mux(old == self.a, 0, self.a)), writes.eq(1), result.eq(old)]
        else:
            m.d.comb += [new.eq(self.b), writes.eq(old == self.a), result.eq(old)]
        for j in range(depth):
            m.d.sync += shadow[j].eq(Mux(act & writes & (self.idx == j), new, s_mid[j]))
            m.d.sync += [mshadow[j].eq(s_mid[j]), mshadow_prev[j].eq(mshadow[j])]
        m.d.sync += pkt_write1.eq(act & writes)

        # expected output, two cycles later
        exp = Signal(layout)
        m.d.comb += exp.eq(phv_in)
        with m.If(act):
            m.d.comb += f(exp, "t.m.res").eq(result)
        exp1, exp2 = Signal(layout), Signal(layout)
        ev1, ev2 = Signal(), Signal()
        m.d.sync += [exp1.eq(exp), exp2.eq(exp1), ev1.eq(self.valid), ev2.eq(ev1)]

        # ---- properties -------------------------------------------------------------------
        m.d.comb += [
            Assert(v_out == ev2),
            Assert(Value.cast(phv_out) == Value.cast(exp2)),
            Assert(oob == (self.valid & self.en & (self.idx >= depth))),
            Assert(~port.ack | port.req),
            Assert(~(port.ack & port.we) | hw_done),
            # helper (true of this design: the write is acked the cycle after it lands)
            Assert(~(port.req & port.we & hw_done) | port.ack),
        ]
        rd_exp = Signal(w)
        for j in range(depth):
            with m.If(port.addr == j):
                m.d.comb += rd_exp.eq(mshadow_prev[j])
            m.d.comb += Assert(cells[j] == mshadow[j])
        m.d.comb += Assert(~(port.ack & ~port.we) | (port.rdata == rd_exp))

        if self.variant == "filter":
            from netstor.offloads.netclone.program import filter_drops
            S = self.s
            s_prev = Signal(w)
            m.d.sync += s_prev.eq(S)
            m.d.comb += [Assume(~started | (S == s_prev)), Assume(S != 0),
                         Assume(~(port.req & port.we) | (port.wdata != S))]
            passes, drops = Signal(3), Signal(3)
            is_s = act & (self.a == S)
            # the drop decision as the program takes it, on the element's result (two cycles
            # later in the gateware; here on the model's old value at the input)
            drop = Signal()
            m.d.comb += drop.eq(filter_drops(old, self.a))
            with m.If(is_s & drop):
                m.d.sync += drops.eq(drops + 1)
            with m.If(is_s & ~drop):
                m.d.sync += passes.eq(passes + 1)
            m.d.comb += Assume(passes < 6)
            held = sum(Mux(shadow[j] == S, 1, 0) for j in range(depth))
            m.d.comb += [Assert(drops <= passes), Assert(drops + held <= passes)]
            self.cover_drop = Signal()
            m.d.comb += self.cover_drop.eq(started & is_s & drop & (passes == 2))
            m.d.comb += Cover(self.cover_drop)

        # ---- covers ------------------------------------------------------------------------
        act_d = Signal()
        idx_d = Signal(self.index_width)
        res_d, b_d, wr_d = Signal(w), Signal(w), Signal()
        m.d.sync += [act_d.eq(act), idx_d.eq(self.idx), res_d.eq(result), b_d.eq(self.b),
                     wr_d.eq(writes)]
        same = started & act & act_d & (self.idx == idx_d)
        self.cover_b2b = Signal()
        if self.variant == "add":
            m.d.comb += self.cover_b2b.eq(same & (result == res_d + 1))
        elif self.variant == "filter":
            # the second reply of a pair, right behind the first, is dropped
            m.d.comb += self.cover_b2b.eq(same & (old == self.a) & (res_d != self.a)
                                          & (self.a != 0))
        else:
            # second CAS succeeds on the value the first one wrote
            m.d.comb += self.cover_b2b.eq(same & wr_d & writes & (old == b_d)
                                          & (b_d != res_d))
        m.d.comb += Cover(self.cover_b2b)
        # host write between two packets to the same index; the second sees the host value
        m.d.comb += Cover(started & host_lin & act & (port.addr == self.idx)
                          & (old == port.wdata))
        m.d.comb += Cover(started & port.ack & ~port.we)
        return m
