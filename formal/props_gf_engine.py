"""Formal harness for the GF(2^8) engine (:class:`netstor.gateware.gf_engine.GFEngine`): every
beat on a chosen slot leaves with what the spec's accumulation gives, whatever other beats
run beside it (back to back on the same slot, on its neighbours, or idle cycles).

The engine is built small: 2 operations x 2 beats (4 slots), one lane (8-bit data), 2-bit
generations, timeouts off. The engine's inputs are free top-level inputs, new every cycle;
the chosen slot ``(op*, off*)`` is a free input assumed constant.

Reference (the accumulate semantics of ``netstor.model.gf``, not the engine's expressions):
a shadow of the chosen slot (sum, contributor set, count) is updated in the cycle a beat of
that slot enters: ``need`` 0 is refused (bad); a contributor already in a live slot's set is
refused (dup); otherwise the sum XORs ``coeff * data`` (here by shift-and-add, not the engine's
bit matrix) and the count grows, the slot freed when it reaches ``need``. The answer (done,
dup, bad, the sum after the beat) is carried ``LATENCY`` cycles beside the beat.

Asserted (BMC from the all-zero state): every output beat of the chosen slot has the shadow's
done, dup, bad and data. So no contribution is lost or counted twice, also for beats one, two
or three cycles apart (each forwarding path), and the sum is linear: XOR of the products.
"""
from __future__ import annotations

from amaranth.hdl import Assert, Assume, Cat, Module, Mux, ResetSignal, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from netstor.gateware.gf_engine import GFEngine, LATENCY, POLY


def gf_mul_ref(m, a, b, name):
    """``a * b`` in GF(2^8)/0x11D by shift-and-add (8 conditional XORs of ``a * x^i``)."""
    acc = Signal(8, name=f"{name}_p0")
    m.d.comb += acc.eq(0)
    cur = a
    for i in range(8):
        nxt_acc = Signal(8, name=f"{name}_p{i + 1}")
        m.d.comb += nxt_acc.eq(acc ^ Mux(b[i], cur, 0))
        acc = nxt_acc
        sh = Signal(9, name=f"{name}_x{i + 1}")
        m.d.comb += sh.eq(Cat(Signal(1), cur))
        red = Signal(8, name=f"{name}_r{i + 1}")
        m.d.comb += red.eq(Mux(sh[8], (sh ^ POLY)[:8], sh[:8]))
        cur = red
    return acc


class GFEngineProps(wiring.Component):
    def __init__(self, n_ops=2, chunk_beats=2):
        self.n_ops, self.chunk_beats = n_ops, chunk_beats
        ob, fb = (n_ops - 1).bit_length(), (chunk_beats - 1).bit_length()
        super().__init__({
            "valid": In(1), "op": In(ob), "off": In(fb), "coeff": In(8), "src": In(4),
            "need": In(5), "keep": In(1), "data": In(8), "first": In(1), "last": In(1),
            "op_c": In(ob), "off_c": In(fb),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.eng = eng = GFEngine(n_ops=self.n_ops, chunk_beats=self.chunk_beats,
                                          gen_bits=2, tick_shift=0, lanes=1)
        m.d.comb += Assume(~ResetSignal())          # the RAM has no reset: neither the shadow
        for name in ("valid", "op", "off", "coeff", "src", "need", "keep", "data", "first",
                     "last"):
            m.d.comb += getattr(eng, f"i_{name}").eq(getattr(self, name))
        m.d.comb += eng.timeout.eq(0)

        op_c, off_c = self.op_c, self.off_c
        started = Signal()
        prev = Signal(len(op_c) + len(off_c))
        m.d.sync += [started.eq(1), prev.eq(Cat(op_c, off_c))]
        m.d.comb += Assume(~started | (Cat(op_c, off_c) == prev))
        mine = Signal()
        m.d.comb += mine.eq(eng.i_valid & (eng.i_op == op_c) & (eng.i_off == off_c))

        # the shadow slot
        s_acc, s_seen, s_count = Signal(8), Signal(16), Signal(5)
        live = s_count != 0
        x = Signal(8)
        m.d.comb += x.eq(Mux(eng.i_keep[0], eng.i_data, 0))
        prod = gf_mul_ref(m, eng.i_coeff, x, "ref")
        bad = eng.i_need == 0
        dup = ~bad & live & (s_seen >> eng.i_src)[0]
        cnt = Signal(6)
        m.d.comb += cnt.eq(Mux(live, s_count, 0) + 1)
        done = ~bad & ~dup & (cnt >= eng.i_need)
        base = Mux(live, s_acc, 0)
        e_data = Signal(8)
        m.d.comb += e_data.eq(Mux(bad | dup, base, base ^ prod))
        with m.If(mine & ~bad & ~dup):
            m.d.sync += s_acc.eq(e_data)
            with m.If(done):
                m.d.sync += [s_count.eq(0), s_seen.eq(0)]
            with m.Else():
                m.d.sync += [s_count.eq(cnt), s_seen.eq(Mux(live, s_seen, 0)
                                                         | (1 << eng.i_src))]

        # the expected answer, carried LATENCY cycles
        pipe = Cat(mine, done, dup, bad, e_data)
        for k in range(LATENCY):
            nxt = Signal(pipe.shape(), name=f"exp{k + 1}")
            m.d.sync += nxt.eq(pipe)
            pipe = nxt
        p_mine, p_done, p_dup, p_bad, p_data = pipe[0], pipe[1], pipe[2], pipe[3], pipe[4:12]
        with m.If(p_mine):
            m.d.comb += [Assert(eng.o_valid), Assert(eng.o_op == op_c),
                         Assert(eng.o_off == off_c), Assert(eng.o_done == p_done),
                         Assert(eng.o_dup == p_dup), Assert(eng.o_bad == p_bad),
                         Assert(eng.o_data == p_data)]
        return m
