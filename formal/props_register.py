"""Formal harness for a RegisterOp stage (``netstor.gateware.stages.build_element``): the
pipelined read-modify-write (3 cycles, forwarding, host access on the packet-write port).

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

Abstract model (kept in the harness, written from the spec, not from the gateware's
expressions): an array ``shadow``; the packet that entered in cycle x-3 is applied in cycle x
(its write slot), packets in arrival order, each on the array as left by every earlier packet;
a host access is applied in the first cycle x after the cycle its request is seen in which no
acting packet (``when`` and ``index < depth``) entered in x-3 (the write slot packets leave
free), between the packets before and after it.

Asserted, every cycle:

* the stage's output PHV equals the input PHV of three cycles earlier with the result field
  set to the model's result (old or new value) when the op acted, untouched otherwise;
  ``valid`` is delayed by exactly 3;
* every memory cell equals ``shadow`` (the RAM is the model, with no lag: forwarding is
  internal), so no update is lost, also for back-to-back packets hitting the same index and
  for host writes between them;
* a host read returns the model's cell at its slot; a host write is performed before its
  ``ack``; ``ack`` only while ``req``; ``index_oob`` pulses exactly for acting packets with
  ``index >= depth``;
* no starvation: ``slot_request`` pulses once a request has waited ``HOST_PATIENCE`` cycles;
  assuming the data path answers it with a bubble (no acting packet enters in that cycle: the
  arbiter-to-bank distance abstracted to 0),
  no request waits more than ``HOST_PATIENCE + 2`` cycles for its slot.

Covers: two back-to-back acting packets to the same index with the second seeing the first's
write; a host write landing between two packets to the same index, the second seeing it; a
host read; a request served through ``slot_request`` while packets act every other cycle.
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
    LAT = 3

    def __init__(self, variant="add", width=4, depth=4, index_width=3, patience=2):
        self.variant, self.width, self.depth = variant, width, depth
        self.patience = patience
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
        w, depth, L = self.width, self.depth, self.LAT
        pl, op = make_program(self.variant, w, depth, self.index_width)
        op.HOST_PATIENCE = self.patience       # short, so induction sees a whole wait
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
        assert lat == L
        mem = m.submodules["reg_mem"]
        cells = []
        for j in range(depth):
            p = mem.read_port(domain="comb")
            m.d.comb += p.addr.eq(j)
            cells.append(p.data)
        port = csr.memories[0].port
        oob = csr.counters[0].inc
        slot_req = op.slot_request

        # ---- host side: a request held until ack, dropped the cycle after ----------------
        with m.If(~port.req):
            with m.If(self.h_start):
                m.d.sync += [port.req.eq(1), port.we.eq(self.h_we), port.addr.eq(self.h_addr),
                             port.wdata.eq(self.h_wdata)]
        with m.Elif(port.ack):
            m.d.sync += port.req.eq(0)
        m.d.comb += Assume(self.h_addr < depth)    # the CSR block rejects larger addresses

        # ---- the packets, delayed to their write slot (cycle + 3) ------------------------
        act = Signal()
        m.d.comb += act.eq(self.valid & self.en & (self.idx < depth))

        chains = {}

        def delay(sig, n, name):
            cur = sig
            for k in range(n):
                nxt = Signal.like(sig, name=f"{name}_d{k + 1}")
                m.d.sync += nxt.eq(cur)
                cur = nxt
                chains.setdefault(name, []).append(cur)
            return cur
        act_w = delay(act, L, "act")              # the packet in its write slot now
        act_c = delay(act, L - 1, "act")          # the one that reaches it next cycle
        idx_w = delay(self.idx, L, "idx")
        a_w, b_w = delay(self.a, L, "a"), delay(self.b, L, "b")
        phv_w = delay(phv_in, L, "phv")
        valid_w = delay(self.valid, L, "valid")

        # ---- abstract model ---------------------------------------------------------------
        shadow = [Signal(w, name=f"shadow{j}") for j in range(depth)]
        hdone = Signal()           # the current request has been performed (or taken)
        take = Signal()            # the request is performed next cycle (a free slot)
        h_lin = Signal()           # the host access is performed now
        m.d.comb += take.eq(port.req & ~hdone & ~act_c)
        m.d.sync += h_lin.eq(take)
        with m.If(take):
            m.d.sync += hdone.eq(1)
        with m.If(~port.req):
            m.d.sync += hdone.eq(0)

        old = Signal(w)
        m.d.comb += old.eq(0)
        for j in range(depth):
            with m.If(idx_w == j):
                m.d.comb += old.eq(shadow[j])
        new, writes, result = Signal(w), Signal(), Signal(w)
        if self.variant == "add":
            m.d.comb += [new.eq(old + 1), writes.eq(1), result.eq(new)]
        elif self.variant == "filter":
            m.d.comb += [new.eq(Mux(old == a_w, 0, a_w)), writes.eq(1), result.eq(old)]
        else:
            m.d.comb += [new.eq(b_w), writes.eq(old == a_w), result.eq(old)]
        for j in range(depth):
            with m.If(act_w & writes & (idx_w == j)):
                m.d.sync += shadow[j].eq(new)
            with m.If(h_lin & port.we & (port.addr == j)):
                m.d.sync += shadow[j].eq(port.wdata)
        rd_val = Signal(w)
        for j in range(depth):
            with m.If(h_lin & (port.addr == j)):
                m.d.sync += rd_val.eq(shadow[j])

        exp = Signal(layout)
        m.d.comb += exp.eq(phv_w)
        with m.If(act_w):
            m.d.comb += f(exp, "t.m.res").eq(result)

        # ---- properties -------------------------------------------------------------------
        m.d.comb += [
            Assert(~(act_w & h_lin)),            # the model's own slot rule
            Assert(v_out == valid_w),
            Assert(Value.cast(phv_out) == Value.cast(exp)),
            Assert(oob == (self.valid & self.en & (self.idx >= depth))),
            Assert(~port.ack | port.req),
        ]
        h_lin_d = Signal()
        m.d.sync += h_lin_d.eq(h_lin)
        # the access is acked the cycle after it is performed, a read with the model's value
        m.d.comb += [Assert(~h_lin | (hdone & port.req)), Assert(~port.ack | hdone),
                     Assert(~(port.req & ~hdone) | ~h_lin_d),
                     Assert(port.ack == h_lin_d),
                     Assert(~(port.ack & ~port.we) | (port.rdata == rd_val))]
        for j in range(depth):
            m.d.comb += Assert(cells[j] == shadow[j])

        # ---- no starvation -----------------------------------------------------------------
        P = op.HOST_PATIENCE
        waited = Signal(range(P + 8))
        with m.If(port.req & ~hdone):
            with m.If(waited != P + 7):
                m.d.sync += waited.eq(waited + 1)
        with m.Else():
            m.d.sync += waited.eq(0)
        m.d.comb += [Assert(slot_req == (port.req & ~hdone & (waited == P))),
                     Assume(~slot_req | ~act),             # the data path's bubble
                     Assert(~(port.req & ~hdone) | (waited <= P + L - 1))]
        # helpers: the bank's own wait counter and busy flag are the model's
        m.d.comb += [Assert(op._dbg["host_busy"] == hdone),
                     Assert(~(port.req & ~hdone) | (op._dbg["host_wait"] == waited))]
        # helper: the packets that entered while the bank asked for a slot did not act
        for k, a_k in enumerate(chains["act"][:L - 1], start=1):
            m.d.comb += Assert(~(port.req & ~hdone & (waited == P + k)) | ~a_k)

        if self.variant == "filter":
            from netstor.offloads.netclone.program import filter_drops
            S = self.s
            s_prev = Signal(w)
            m.d.sync += s_prev.eq(S)
            m.d.comb += [Assume(~started | (S == s_prev)), Assume(S != 0),
                         Assume(~(port.req & port.we) | (port.wdata != S))]
            passes, drops = Signal(3), Signal(3)
            is_s = act_w & (a_w == S)
            # the drop decision as the program takes it, on the model's old value
            drop = Signal()
            m.d.comb += drop.eq(filter_drops(old, a_w))
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
        act_p, idx_p = Signal(), Signal(self.index_width)
        res_p, b_p, wr_p = Signal(w), Signal(w), Signal()
        m.d.sync += [act_p.eq(act_w), idx_p.eq(idx_w), res_p.eq(result), b_p.eq(b_w),
                     wr_p.eq(writes)]
        same = started & act_w & act_p & (idx_w == idx_p)
        self.cover_b2b = Signal()
        if self.variant == "add":
            m.d.comb += self.cover_b2b.eq(same & (result == res_p + 1))
        elif self.variant == "filter":
            # the second reply of a pair, right behind the first, is dropped
            m.d.comb += self.cover_b2b.eq(same & (old == a_w) & (res_p != a_w) & (a_w != 0))
        else:
            # second CAS succeeds on the value the first one wrote
            m.d.comb += self.cover_b2b.eq(same & wr_p & writes & (old == b_p)
                                          & (b_p != res_p))
        m.d.comb += Cover(self.cover_b2b)
        # a host write lands between two packets to one index; the second sees the host value
        hw_p, ha_p, hd_p = Signal(), Signal(self.ab), Signal(w)
        m.d.sync += [hw_p.eq(h_lin & port.we), ha_p.eq(port.addr), hd_p.eq(port.wdata)]
        act_pp, idx_pp = Signal(), Signal(self.index_width)
        m.d.sync += [act_pp.eq(act_p), idx_pp.eq(idx_p)]
        m.d.comb += Cover(started & hw_p & act_w & (ha_p == idx_w) & (old == hd_p)
                          & act_pp & (idx_pp == idx_w))
        m.d.comb += Cover(started & port.ack & ~port.we)
        # a request served after the bank asked for a slot, packets acting around the bubble
        m.d.comb += Cover(started & take & (waited == P + L - 1) & act_w)
        return m
