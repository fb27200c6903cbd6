"""``GFEngine``: the GF(2^8) multiply/XOR-accumulate payload engine (XORInc, issue 13).

Semantics: ``netstor.model.gf`` (module docstring and :class:`~netstor.model.gf.Engine`); the
field is GF(2^8) with polynomial 0x11D. The engine sees 64-byte beats of chunk words (aligning
a packet's payload to them is the frame path's job) and never stalls: one beat per clock in,
one beat per clock out, a fixed latency.

Ports (flat signals; ``i_*`` in, ``o_*`` out)
    ``i_valid``, ``i_op`` (operation id, ``log2 n_ops`` bits), ``i_off`` (beat offset in the
    chunk, ``log2 chunk_beats`` bits), ``i_coeff`` (8), ``i_src`` (contributor index, 4),
    ``i_need`` (contributions the result needs, 5), ``i_keep`` (64, bytes in the chunk; the
    others read as 0), ``i_data`` (512, byte i = bits 8i..8i+7), ``i_first``/``i_last`` (the
    packet's framing, passed through). ``timeout`` (16, run-time: ticks without a beat after
    which an op with open slots is freed; 0 = never).

    ``o_valid``, ``o_op``, ``o_off``, ``o_keep``, ``o_first``, ``o_last``: the input beat's,
    :data:`LATENCY` cycles later; ``o_done`` (the beat completed its slot: ``o_data`` is the
    result), ``o_dup`` (a duplicate contribution: not added), ``o_bad`` (``need`` 0: refused),
    ``o_data`` (the slot's sum after this beat; a refused beat leaves the sum as it was). ``to_valid``/``to_op``: an op timed out (its
    slots freed; one pulse per timeout, for the requester and a counter).

Pipeline (a beat entering in cycle t; the read-modify-write discipline of
``netstor.elements.register``)
    * t (s0): ``{op, off}`` addresses the slot RAM's read port; the coefficient's 8 x 8 bit
      matrix ``B[k] = coeff * x^k`` (each bit an XOR of <= 8 coefficient bits) and the masked
      data are registered (multiplier stage 1);
    * t+1 (s1): the RAM's output latch; the product ``p_j = XOR_k B[k][j] & d_k`` of all 64
      lanes (each bit an XOR of 8 AND terms: 2 LUT levels) registered (multiplier stage 2);
      the op's generation read; the forwarding compares (write slot W, history H1, H2 by
      address) registered;
    * t+2 (s2, C): the RAM's output register; ``old`` = the newest of W, H1, H2 writing the
      slot, else the RAM word; the slot is live when its generation is the op's and its count
      is not 0; ``dup`` = live and ``src`` already seen; ``acc = (live ? old : 0) ^ product``,
      count + 1 against ``need``: ``done`` frees the slot (count 0);
    * t+3 (s3, W): the write port writes the slot (not for ``dup``/``bad``); the beat leaves.

    So :data:`LATENCY` = 3, back-to-back beats on one slot (one a clock) each see the previous
    one's write, and the RAM equals the model applied in beat order.

Slot word (``n_ops * chunk_beats`` words): ``acc`` 512 | ``seen`` 16 | ``count`` 5 | ``gen``
``gen_bits``. ``lanes`` (default 64) sets the bytes per beat (the formal job uses 1).

Size (Yosys ``synth_xilinx -family xcup``, ``python -m netstor.bench.gf_engine``; 64 ops x 64
beats = 4 KiB chunks, 4,096 x 541 bits): 5,862 LUT, 5,592 FF, 61 BRAM36, 6 LUT levels; with
``-uram``: 5,877 LUT, 8 URAM288, 0 BRAM, 7 LUT levels (the scanner's 64:1 open-count read).
The 64-lane multiplier alone: 2,583 LUT, 1,053 FF, 3 LUT levels. 64 bytes per clock at every
chunk size (no stall), latency 3.

Timeouts: per op a generation (``gen_bits``), an open-slot count and the tick of its last beat
(flip-flops). A scanner visits one op per clock (every op every ``n_ops`` clocks): an op with
open slots whose last beat is more than ``timeout`` ticks old, and none of whose beats is in
the pipeline (s0..s3 and the two cycles after, so no update races the decision), gets its
generation advanced and its open count cleared (every slot of the old generation reads free),
``to_valid`` pulses. A tick is ``2 ** tick_shift`` clocks.

``ext_gen=True`` (the core's frame path, :class:`netstor.gateware.gf_path.GFIngress`): the
beat's generation is ``i_gen`` (given with the beat by the header path's control shadow,
which runs the timeout scanner; its ``timeout`` is then unused) instead of the op's own.
Either way a word forwarded from W, H1 or H2 is live only when its generation is the
reader's, so a slot freed between two beats 1-3 cycles apart reads free.

Data registers are ``reset_less``; valid/control registers and the per-op state reset.
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Elaboratable, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["GFEngine", "GFVecMul", "LATENCY", "MUL_LATENCY", "POLY", "coeff_matrix_taps"]

POLY = 0x11D
LATENCY = 3
MUL_LATENCY = 2
LANES = 64
SRC_BITS, NEED_BITS = 4, 5


def _xtime_mul(a, b):
    """``a * b`` in GF(2^8)/0x11D by shift-and-add (elaboration-time constants only)."""
    r = 0
    while b:
        if b & 1:
            r ^= a
        b >>= 1
        a <<= 1
        if a & 0x100:
            a ^= POLY
    return r


def coeff_matrix_taps():
    """``taps[k][j]``: the coefficient bits whose XOR is bit j of ``coeff * x^k``."""
    return [[[i for i in range(8) if _xtime_mul(1 << i, 1 << k) >> j & 1] for j in range(8)]
            for k in range(8)]


class GFVecMul(Elaboratable):
    """``lanes`` bytes times one coefficient, 2 register stages (latency :data:`MUL_LATENCY`):
    stage 1 registers the coefficient's bit matrix and the data, stage 2 the products."""

    def __init__(self, lanes=LANES):
        self.lanes = lanes
        self.coeff = Signal(8)
        self.x = Signal(8 * lanes)
        self.p = Signal(8 * lanes)

    def elaborate(self, platform):
        m = Module()
        taps = coeff_matrix_taps()
        bm = [Signal(8, name=f"bm{k}", reset_less=True) for k in range(8)]
        x1 = Signal(8 * self.lanes, reset_less=True)
        for k in range(8):
            m.d.sync += bm[k].eq(Cat(_xor([self.coeff[i] for i in taps[k][j]])
                                     for j in range(8)))
        m.d.sync += x1.eq(self.x)
        prod = []
        for lane in range(self.lanes):
            d = x1[8 * lane:8 * lane + 8]
            prod.append(Cat(_xor([bm[k][j] & d[k] for k in range(8)]) for j in range(8)))
        m.d.sync += self.p.eq(Cat(*prod))
        return m


def _xor(terms):
    terms = list(terms)
    if not terms:
        return Const(0, 1)
    out = terms[0]
    for t in terms[1:]:
        out = out ^ t
    return out


class GFEngine(wiring.Component):
    """The engine (module docstring)."""

    def __init__(self, n_ops=64, chunk_beats=64, gen_bits=8, tick_shift=10, lanes=LANES,
                 ext_gen=False):
        for v, what in ((n_ops, "n_ops"), (chunk_beats, "chunk_beats")):
            if v < 2 or v & (v - 1):
                raise ValueError(f"{what} must be a power of 2 >= 2, got {v}")
        self.n_ops, self.chunk_beats = n_ops, chunk_beats
        self.gen_bits, self.tick_shift, self.lanes = gen_bits, tick_shift, lanes
        self.ext_gen = ext_gen
        self.op_bits = (n_ops - 1).bit_length()
        self.off_bits = (chunk_beats - 1).bit_length()
        self.word_bits = 8 * lanes + 16 + NEED_BITS + gen_bits
        ob, fb = self.op_bits, self.off_bits
        super().__init__({
            "i_valid": In(1), "i_op": In(ob), "i_off": In(fb), "i_coeff": In(8),
            "i_src": In(SRC_BITS), "i_need": In(NEED_BITS), "i_keep": In(lanes),
            "i_data": In(8 * lanes), "i_first": In(1), "i_last": In(1), "timeout": In(16),
            "i_gen": In(gen_bits),
            "o_valid": Out(1), "o_op": Out(ob), "o_off": Out(fb), "o_keep": Out(lanes),
            "o_first": Out(1), "o_last": Out(1), "o_done": Out(1), "o_dup": Out(1),
            "o_bad": Out(1), "o_data": Out(8 * lanes),
            "to_valid": Out(1), "to_op": Out(ob),
        })

    def elaborate(self, platform):
        m = Module()
        ob, fb, gb, ab = self.op_bits, self.off_bits, self.gen_bits, self.op_bits + self.off_bits
        D, L = 8 * self.lanes, self.lanes

        def dreg(name, shape=1):
            return Signal(shape, name=name, reset_less=True)

        # ---- the slot RAM: read port (s0 address), write port (W slot) -----------------------
        mem = Memory(shape=self.word_bits, depth=self.n_ops * self.chunk_beats, init=[])
        m.submodules.slots = mem
        rp = mem.read_port()
        wp = mem.write_port()
        addr0 = Cat(self.i_off, self.i_op)
        m.d.comb += [rp.addr.eq(addr0), rp.en.eq(1)]

        def fields(word):
            return (word[:D], word[D:D + 16], word[D + 16:D + 16 + NEED_BITS],
                    word[D + 16 + NEED_BITS:])

        # ---- the multiplier (stage 1 in s0 -> s1, stage 2 in s1 -> s2) -----------------------
        m.submodules.mul = mul = GFVecMul(L)
        keep_bits = Cat(*[self.i_keep[i].replicate(8) for i in range(L)])
        m.d.comb += [mul.coeff.eq(self.i_coeff), mul.x.eq(self.i_data & keep_bits)]

        # ---- s1 -------------------------------------------------------------------------------
        v1 = Signal(name="v1")
        op1, off1 = dreg("op1", ob), dreg("off1", fb)
        src1, need1 = dreg("src1", SRC_BITS), dreg("need1", NEED_BITS)
        keep1, first1, last1 = dreg("keep1", L), dreg("first1"), dreg("last1")
        m.d.sync += [v1.eq(self.i_valid), op1.eq(self.i_op), off1.eq(self.i_off),
                     src1.eq(self.i_src), need1.eq(self.i_need), keep1.eq(self.i_keep),
                     first1.eq(self.i_first), last1.eq(self.i_last)]
        addr1 = Cat(off1, op1)

        # per-op state (flip-flops)
        gens = Array(Signal(gb, name=f"gen{i}") for i in range(self.n_ops))
        # the beat's generation: the op's (own scanner) or the one given with the beat
        gen1 = Signal(gb, name="gen1")
        if self.ext_gen:
            ig1 = dreg("i_gen1", gb)
            m.d.sync += ig1.eq(self.i_gen)
            m.d.comb += gen1.eq(ig1)
        else:
            m.d.comb += gen1.eq(gens[op1])
        opens = [Signal(range(self.chunk_beats + 1), name=f"open{i}") for i in range(self.n_ops)]
        stamps = [Signal(16, name=f"stamp{i}") for i in range(self.n_ops)]

        # W slot (s3) and its history
        w_we = Signal(name="w_we")
        w_addr, w_word = dreg("w_addr", ab), dreg("w_word", self.word_bits)
        w_live = dreg("w_live")                 # W's word has count != 0 (did not complete)
        h1_live = dreg("h1_live")
        h1_we, h2_we = Signal(name="h1_we"), Signal(name="h2_we")
        h1_addr, h2_addr = dreg("h1_addr", ab), dreg("h2_addr", ab)
        h1_word, h2_word = dreg("h1_word", self.word_bits), dreg("h2_word", self.word_bits)
        m.d.comb += [wp.en.eq(w_we), wp.addr.eq(w_addr), wp.data.eq(w_word)]
        m.d.sync += [h1_we.eq(w_we), h1_addr.eq(w_addr), h1_word.eq(w_word),
                     h2_we.eq(h1_we), h2_addr.eq(h1_addr), h2_word.eq(h1_word),
                     h1_live.eq(w_live)]

        # ---- s2 (C) ---------------------------------------------------------------------------
        v2 = Signal(name="v2")
        op2, off2 = dreg("op2", ob), dreg("off2", fb)
        src_oh2 = dreg("src_oh2", 16)
        bad2, need_m1, need_is1 = dreg("bad2"), dreg("need_m1", NEED_BITS), dreg("need_is1")
        keep2, first2, last2 = dreg("keep2", L), dreg("first2"), dreg("last2")
        gen2, d2 = dreg("gen2", gb), dreg("rdata2", self.word_bits)
        m_w, hit_1, hit_2 = dreg("m_w"), dreg("hit_h1"), dreg("hit_h2")
        hl_1, hl_2 = dreg("live_h1"), dreg("live_h2")
        addr2 = Cat(off2, op2)
        m.d.sync += [v2.eq(v1), op2.eq(op1), off2.eq(off1), bad2.eq(need1 == 0),
                     need_m1.eq(need1 - 1), need_is1.eq(need1 == 1),
                     src_oh2.eq(Const(1, 16) << src1), keep2.eq(keep1), first2.eq(first1),
                     last2.eq(last1), gen2.eq(gen1), d2.eq(rp.data),
                     # the read (end of s0) missed the W writes of cycles s0, s1, s2; in s2
                     # they are H2, H1 and W (W's occupant then is the beat now in C). A
                     # forwarded word is live only in the reader's generation (a slot freed
                     # by a timeout between two beats reads free).
                     m_w.eq((addr2 == addr1) & (gen2 == gen1)),
                     hit_1.eq(w_we & (w_addr == addr1)),
                     hit_2.eq(h1_we & (h1_addr == addr1)),
                     hl_1.eq(w_live & (w_word[-gb:] == gen1)),
                     hl_2.eq(h1_live & (h1_word[-gb:] == gen1))]
        # Two candidates for the slot's old word, computed side by side and chosen last by a
        # registered select: W (the beat just before, on this slot: the one-cycle loop; its
        # liveness is a register, its generation is ours as no timeout fires while beats of
        # the op are in flight), or the newest of H1, H2 and the RAM word.
        def update(live, seen, count):
            hit = (seen & src_oh2).any()
            dup_ = live & hit & ~bad2
            done_ = ~dup_ & ~bad2 & Mux(live, count >= need_m1, need_is1)
            new_count_ = Mux(done_, 0, Mux(live, count + 1, 1))
            new_seen_ = Mux(done_, 0, Mux(live, seen, 0) | src_oh2)
            return dup_, done_, new_count_, new_seen_

        w_acc, w_seen, w_count, _ = fields(w_word)
        r_acc, r_seen, r_count, r_gen = fields(d2)
        h1f, h2f = fields(h1_word), fields(h2_word)
        live_d = Signal(name="live_ram")
        m.d.comb += live_d.eq((r_gen == gen2) & (r_count != 0))
        old_live = Signal(name="older_live")
        m.d.comb += old_live.eq(Mux(hit_1, hl_1, Mux(hit_2, hl_2, live_d)))
        old_seen = Mux(hit_1, h1f[1], Mux(hit_2, h2f[1], r_seen))
        old_count = Mux(hit_1, h1f[2], Mux(hit_2, h2f[2], r_count))
        old_acc = Mux(hit_1, h1f[0], Mux(hit_2, h2f[0], r_acc))
        cand_w = update(w_live, w_seen, w_count)
        cand_o = update(old_live, old_seen, old_count)
        sel_w = Signal(name="sel_w")
        m.d.comb += sel_w.eq(m_w & w_we)
        live = Signal(name="live")
        dup, bad, done, we = (Signal(name=n) for n in ("dup", "bad", "done", "we"))
        new_count = Signal(NEED_BITS, name="new_count")
        new_seen = Signal(16, name="new_seen")
        acc = Signal(D, name="acc")
        m.d.comb += [
            live.eq(Mux(sel_w, w_live, old_live)),
            bad.eq(bad2),
            dup.eq(Mux(sel_w, cand_w[0], cand_o[0])),
            done.eq(Mux(sel_w, cand_w[1], cand_o[1])),
            new_count.eq(Mux(sel_w, cand_w[2], cand_o[2])),
            new_seen.eq(Mux(sel_w, cand_w[3], cand_o[3])),
            we.eq(v2 & ~dup & ~bad),
            # a refused beat (dup, bad) leaves with the slot's sum as it was
            acc.eq(Mux(sel_w, Mux(w_live, w_acc, 0), Mux(old_live, old_acc, 0))
                   ^ (mul.p & (~dup & ~bad).replicate(D))),
        ]

        # ---- s3 (W): the write, the beat leaves ----------------------------------------------
        m.d.sync += [w_we.eq(we), w_addr.eq(addr2), w_live.eq(~done),
                     w_word.eq(Cat(acc, new_seen, new_count, gen2))]
        v3 = Signal(name="v3")
        op3 = dreg("op3", ob)
        opens3 = Signal(name="opens3")          # this beat opened a slot
        closes3 = Signal(name="closes3")        # this beat completed an open slot
        m.d.sync += [v3.eq(v2), op3.eq(op2), opens3.eq(we & ~done & ~live),
                     closes3.eq(v2 & done & live)]
        outs = [(self.o_op, op2), (self.o_off, off2), (self.o_keep, keep2),
                (self.o_first, first2), (self.o_last, last2)]
        m.d.sync += [dst.eq(src) for dst, src in outs]
        m.d.sync += [self.o_valid.eq(v2), self.o_done.eq(v2 & done), self.o_dup.eq(v2 & dup),
                     self.o_bad.eq(v2 & bad)]
        m.d.comb += self.o_data.eq(w_word[:D])

        # ---- per-op state: open counts and stamps updated from s3 ----------------------------
        now = Signal(16, name="now")
        if self.tick_shift:
            pre = Signal(self.tick_shift, name="prescale")
            m.d.sync += pre.eq(pre + 1)
            with m.If(pre == (1 << self.tick_shift) - 1):
                m.d.sync += now.eq(now + 1)
        else:
            m.d.sync += now.eq(now + 1)

        # the scanner: T1 reads one op's state, T2 its age, T3 decides (guarded)
        scan = Signal(ob, name="scan")
        m.d.sync += scan.eq(scan + 1)
        t1_op, t1_open, t1_stamp = dreg("t1_op", ob), Signal(name="t1_open"), dreg("t1_stamp", 16)
        m.d.sync += [t1_op.eq(scan), t1_open.eq(Array(o != 0 for o in opens)[scan]),
                     t1_stamp.eq(Array(stamps)[scan])]
        t2_op, t2_open, t2_age = dreg("t2_op", ob), Signal(name="t2_open"), dreg("t2_age", 16)
        m.d.sync += [t2_op.eq(t1_op), t2_open.eq(t1_open), t2_age.eq(now - t1_stamp)]
        # ops in flight: s0..s3 and two cycles after s3 (their stamp/open updates land late)
        v4, v5 = Signal(name="v4"), Signal(name="v5")
        op4, op5 = dreg("op4", ob), dreg("op5", ob)
        m.d.sync += [v4.eq(v3), op4.eq(op3), v5.eq(v4), op5.eq(op4)]
        busy = Signal(name="scan_busy")
        m.d.comb += busy.eq(_any([(self.i_valid, self.i_op), (v1, op1), (v2, op2), (v3, op3),
                                  (v4, op4), (v5, op5)], t2_op))
        fire = Signal(name="fire")
        m.d.comb += fire.eq(t2_open & (self.timeout != 0) & (t2_age > self.timeout) & ~busy
                            & Const(int(not self.ext_gen), 1))
        m.d.sync += [self.to_valid.eq(fire), self.to_op.eq(t2_op)]

        for i in range(self.n_ops):
            mine3 = v3 & (op3 == i)
            with m.If(fire & (t2_op == i)):
                m.d.sync += [gens[i].eq(gens[i] + 1), opens[i].eq(0)]
            with m.Elif(mine3 & opens3):
                m.d.sync += opens[i].eq(opens[i] + 1)
            with m.Elif(mine3 & closes3):
                m.d.sync += opens[i].eq(opens[i] - 1)
            with m.If(mine3):
                m.d.sync += stamps[i].eq(now)
        return m


def _any(pairs, op):
    out = Const(0, 1)
    for v, o in pairs:
        out = out | (v & (o == op))
    return out
