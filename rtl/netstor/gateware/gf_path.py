"""The GF(2^8) payload engine in the frame path (XORInc, issue 13): the three pieces that put
:class:`~.gf_engine.GFEngine` between a program's header logic and the frame's beats.

* :func:`build_accumulate` (the element ``GFAccumulate`` in the header path, latency
  :data:`ACC_LATENCY`): the packet's *status* (absorbed / done / dup / split / bad /
  misaligned, ``netstor.elements.gf``) from a control shadow of the slots: per slot the
  ``seen`` set and the ``count`` (21 bits), in 16 banks interleaved by the slot's offset mod 16,
  so the <= 16 slots of one packet are 16 reads and 16 writes in one cycle (one PHV per clock).
  Each bank is the register banks' pipelined read-modify-write with forwarding (W, H1, H2):
  back-to-back packets on one slot each see the one before. The program decides on the status
  (drop, rewrite, copy group) in the stages after it, as the model does.
* :class:`GFIngress` (in the frame path, before the copy lane's store): the frame's beats
  delayed to meet the element's decision (its *tap*, :data:`ACC_LATENCY` cycles after the
  element's input), then the data beats (frame byte 128 on, beat 2 on) through ``GFEngine``
  with the element's op, offset, coefficient, src and need: 64 bytes per clock, no stall. The
  engine keeps the accumulation slots (and its own control word, which makes the same
  decisions as the shadow: same beats, same order); a packet the element found DONE is stored
  with its data bytes replaced by the engine's result, every other packet as it came.
* :class:`GFScaleBeats` (in the copy lane, in front of the deparser): each copy's data bytes
  multiplied by the copy's coefficient (``GFScale``, after the egress elements), latency
  :data:`SCALE_LATENCY`.

Not in the core path (yet): the engine's timeouts (the model's ``xi.engine.timeout``: the
shadow has no generations, so a nonzero timeout is refused by the core's CSR map, which has
no such memory).
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .gf_engine import GFEngine, GFVecMul, LATENCY as ENGINE_LATENCY, MUL_LATENCY
from .kit import HwEnv, target

__all__ = ["build_accumulate", "GFIngress", "GFScaleBeats", "ACC_LATENCY", "SCALE_LATENCY",
           "BANKS", "DATA_BEAT"]

#: the element's latency in the header path (c0 addresses, c1 RAM latch, c2 update, c3 the
#: per-beat decisions registered, c4 the status in the PHV)
ACC_LATENCY = 4
#: the egress scale's latency on the copy's beats (multiplier 2, the byte select 1)
SCALE_LATENCY = MUL_LATENCY + 1
BANKS = 16
DATA_BEAT = 2                      # frame byte 128 = beat 2
SEEN, COUNT = 16, 5
CTL_BITS = SEEN + COUNT

# status values (netstor.elements.gf)
ST_NONE, ST_ABSORBED, ST_DONE, ST_DUP, ST_BAD, ST_MISALIGNED, ST_SPLIT = range(7)


def _const_lt(value, k):
    """``value < k`` for a constant ``k`` (unsigned)."""
    return value < k


def build_accumulate(el, m, pipeline, valid_in, phv_in, csr, prefix):
    """The header-path half of ``GFAccumulate`` ``el`` (module docstring). Returns
    ``(valid_out, phv_out, latency)``; sets ``el.payload_tap`` (a dict of signals valid
    :data:`ACC_LATENCY` cycles after the element's input: ``valid``, ``run`` (the engine
    takes the packet's data beats), ``status``, ``op``, ``off``, ``coeff``, ``src``,
    ``need``, ``length``)."""
    n_ops, cb, maxb = el.n_ops, el.chunk_beats, el.max_beats
    if cb % BANKS or cb & (cb - 1) or n_ops & (n_ops - 1):
        raise ValueError(f"{el.qualname}: the core path needs chunk_beats a power of 2 and a "
                         f"multiple of {BANKS}, n_ops a power of 2")
    if maxb > BANKS:
        raise ValueError(f"{el.qualname}: at most {BANKS} beats per packet in the core path")
    ob = max(1, (n_ops - 1).bit_length())
    fb = (cb - 1).bit_length()
    bank_depth = n_ops * cb // BANKS
    ab = (bank_depth - 1).bit_length()
    q = el.qualname

    def dreg(name, shape=1):
        return Signal(shape, name=f"{prefix}_{name}", reset_less=True)

    def ctl(name):
        return Signal(name=f"{prefix}_{name}")

    def phv_reg(name):
        return Signal(data.StructLayout(pipeline.phv.layout()), name=f"{prefix}_{name}",
                      reset_less=True)

    # ---- c0: the arguments, the range checks, the 16 banks' addresses -----------------------
    env0 = HwEnv(pipeline, phv_in)
    a_op, a_off, a_coeff, a_src, a_need, a_len, vlan, ver_ihl, pkt_len, _arr = [
        x.hw(env0) for x in el._args()]
    when0 = Signal(name=f"{prefix}_when")
    m.d.comb += when0.eq(valid_in & el.when.hw(env0).any())
    length = Signal(16, name=f"{prefix}_len0")
    m.d.comb += length.eq(a_len)
    nb = Signal(17, name=f"{prefix}_nb0")
    m.d.comb += nb.eq((length + 63) >> 6)
    aligned = Signal(name=f"{prefix}_aligned0")
    m.d.comb += aligned.eq(~vlan.any() & (ver_ihl[:4] == 5) & (pkt_len >= length + 128))
    ok = Signal(name=f"{prefix}_ok0")
    m.d.comb += ok.eq((length != 0) & (nb <= maxb) & (a_off + nb <= cb) & (a_op < n_ops)
                      & (a_src < 16) & (a_need != 0) & (a_need <= 31))
    off_lo = a_off[:4]
    addrs, lane_act = [], []
    for b in range(BANKS):
        # bank b holds the slots s with s mod 16 == b: the packet's slot there is the first
        # s >= off in it, beat index (b - off) mod 16
        i_b = Signal(4, name=f"{prefix}_bi{b}")
        m.d.comb += i_b.eq(Const(b, 4) - off_lo)
        hi = Signal(fb - 4 + 1, name=f"{prefix}_bhi{b}")
        m.d.comb += hi.eq(a_off[4:fb] + (Const(b, 4) < off_lo))
        ad = Signal(ab, name=f"{prefix}_ba{b}")
        m.d.comb += ad.eq(Cat(hi[:fb - 4], a_op[:ob]))
        addrs.append(ad)
        act = Signal(name=f"{prefix}_bact{b}")
        m.d.comb += act.eq(i_b < nb)
        lane_act.append(act)

    # ---- c1 ---------------------------------------------------------------------------------
    v1, go1 = ctl("v1"), ctl("go1")
    when1, mis1, bad1 = dreg("when1"), dreg("mis1"), dreg("bad1")
    nb1 = dreg("nb1", 5)
    src_oh1, need_m1, need_is1 = dreg("src_oh1", 16), dreg("need_m1", 5), dreg("need_is1")
    lact1 = dreg("lact1", BANKS)
    phv1 = phv_reg("phv1")
    args_l = [("op", a_op[:ob], ob), ("off", a_off[:fb], fb), ("coeff", a_coeff[:8], 8),
              ("src", a_src[:4], 4), ("need", a_need[:5], 5), ("length", length, 16)]
    args1 = {n: dreg(f"{n}1", w) for n, _, w in args_l}
    m.d.sync += [v1.eq(valid_in), go1.eq(when0 & aligned & ok), when1.eq(when0),
                 mis1.eq(~aligned), bad1.eq(aligned & ~ok), nb1.eq(nb[:5]),
                 src_oh1.eq(Const(1, 16) << a_src[:4]), need_m1.eq(a_need[:5] - 1),
                 need_is1.eq(a_need[:5] == 1), lact1.eq(Cat(*lane_act)), phv1.eq(phv_in)]
    m.d.sync += [args1[n].eq(s) for n, s, _ in args_l]

    # ---- c2 ---------------------------------------------------------------------------------
    v2, go2 = ctl("v2"), ctl("go2")
    when2, mis2, bad2 = dreg("when2"), dreg("mis2"), dreg("bad2")
    nb2 = dreg("nb2", 5)
    src_oh2, need_m2, need_is2 = dreg("src_oh2", 16), dreg("need_m2", 5), dreg("need_is2")
    lact2 = dreg("lact2", BANKS)
    phv2 = phv_reg("phv2")
    args2 = {n: dreg(f"{n}2", w) for n, _, w in args_l}
    m.d.sync += [v2.eq(v1), go2.eq(go1), when2.eq(when1), mis2.eq(mis1), bad2.eq(bad1),
                 nb2.eq(nb1), src_oh2.eq(src_oh1), need_m2.eq(need_m1), need_is2.eq(need_is1),
                 lact2.eq(lact1), phv2.eq(phv1)]
    m.d.sync += [args2[n].eq(args1[n]) for n, _, _ in args_l]

    done_b, dup_b = [], []
    for b in range(BANKS):
        p = f"{prefix}_b{b}"
        mem = Memory(shape=CTL_BITS, depth=bank_depth, init=[])
        m.submodules[f"{p}_ctl"] = mem
        rp, wp = mem.read_port(), mem.write_port()
        m.d.comb += [rp.addr.eq(addrs[b]), rp.en.eq(1)]
        w_we = Signal(name=f"{p}_w_we")
        w_addr, w_word = dreg(f"b{b}_w_addr", ab), dreg(f"b{b}_w_word", CTL_BITS)
        h1_we = Signal(name=f"{p}_h1_we")
        h1_addr, h1_word = dreg(f"b{b}_h1_addr", ab), dreg(f"b{b}_h1_word", CTL_BITS)
        m.d.comb += [wp.en.eq(w_we), wp.addr.eq(w_addr), wp.data.eq(w_word)]
        m.d.sync += [h1_we.eq(w_we), h1_addr.eq(w_addr), h1_word.eq(w_word)]
        # c1: the RAM's output latch; the forwarding compares (the read at the end of c0
        # missed the writes of the W slot in cycles c0, c1, c2: in c2 they are H2, H1, W)
        addr1 = dreg(f"b{b}_addr1", ab)
        addr2 = dreg(f"b{b}_addr2", ab)
        m.d.sync += [addr1.eq(addrs[b]), addr2.eq(addr1)]
        we2 = Signal(name=f"{p}_we2")
        m_w, use_fwd = Signal(name=f"{p}_m_w"), Signal(name=f"{p}_use_fwd")
        fwd = dreg(f"b{b}_fwd", CTL_BITS)
        hit_1 = w_we & (w_addr == addr1)
        hit_2 = h1_we & (h1_addr == addr1)
        m.d.sync += [m_w.eq(we2 & (addr2 == addr1)), use_fwd.eq(hit_1 | hit_2),
                     fwd.eq(Mux(hit_1, w_word, h1_word))]
        d2 = dreg(f"b{b}_rdata2", CTL_BITS)
        m.d.sync += d2.eq(rp.data)
        # c2: old = newest of W, H1, H2, RAM; the beat's decision
        older = Signal(CTL_BITS, name=f"{p}_older")
        m.d.comb += older.eq(Mux(use_fwd, fwd, d2))
        old = Signal(CTL_BITS, name=f"{p}_old")
        m.d.comb += old.eq(Mux(m_w, w_word, older))
        seen, count = old[:SEEN], old[SEEN:]
        live = count != 0
        dup = Signal(name=f"{p}_dup")
        done = Signal(name=f"{p}_done")
        m.d.comb += [dup.eq(live & (seen & src_oh2).any()),
                     done.eq(~dup & Mux(live, count >= need_m2, need_is2))]
        new = Signal(CTL_BITS, name=f"{p}_new")
        m.d.comb += new.eq(Mux(done, 0, Cat(Mux(live, seen, 0) | src_oh2,
                                            Mux(live, count + 1, 1)[:COUNT])))
        m.d.comb += we2.eq(go2 & lact2[b] & ~dup)
        # c3 (W): the write
        m.d.sync += [w_we.eq(we2), w_addr.eq(addr2), w_word.eq(new)]
        done_b.append(done)
        dup_b.append(dup)

    # ---- c3: the per-beat decisions registered; the status ----------------------------------
    v3, go3 = ctl("v3"), ctl("go3")
    when3, mis3, bad3 = dreg("when3"), dreg("mis3"), dreg("bad3")
    nb3 = dreg("nb3", 5)
    lact3, done3, dup3 = dreg("lact3", BANKS), dreg("done3", BANKS), dreg("dup3", BANKS)
    phv3 = phv_reg("phv3")
    args3 = {n: dreg(f"{n}3", w) for n, _, w in args_l}
    m.d.sync += [v3.eq(v2), go3.eq(go2), when3.eq(when2), mis3.eq(mis2), bad3.eq(bad2),
                 nb3.eq(nb2), lact3.eq(lact2), done3.eq(Cat(*done_b)), dup3.eq(Cat(*dup_b)),
                 phv3.eq(phv2)]
    m.d.sync += [args3[n].eq(args2[n]) for n, _, _ in args_l]
    all_done = ((done3 | ~lact3) == (1 << BANKS) - 1)
    all_dup = ((dup3 | ~lact3) == (1 << BANKS) - 1)
    none = ~((done3 | dup3) & lact3).any()
    status = Signal(3, name=f"{prefix}_status3")
    m.d.comb += status.eq(
        Mux(~when3, ST_NONE, Mux(mis3, ST_MISALIGNED, Mux(bad3, ST_BAD,
            Mux(all_done, ST_DONE, Mux(all_dup, ST_DUP, Mux(none, ST_ABSORBED, ST_SPLIT)))))))
    nxt = Signal(data.StructLayout(pipeline.phv.layout()), name=f"{prefix}_next")
    m.d.comb += nxt.eq(phv3)
    with m.If(when3):
        m.d.comb += target(pipeline, nxt, el.status.name).eq(status)
        with m.If(go3 & all_done):
            m.d.comb += target(pipeline, nxt, "udp.csum").eq(0)
    # counters (the model's names; a counter counts one cycle after its event)
    ev = {"absorbed": ST_ABSORBED, "done": ST_DONE, "dup": ST_DUP, "bad": ST_BAD,
          "misaligned": ST_MISALIGNED, "split": ST_SPLIT}
    for name, st in ev.items():
        c = csr.counter(f"{q}.{name}", doc=f"{q}: packets {name} (the engine's status)")
        m.d.comb += c.eq(v3 & when3 & (status == st))
    beats = csr.counter(f"{q}.beats", 5, doc=f"{q}: data beats the engine took")
    m.d.comb += beats.eq(Mux(v3 & go3, nb3, 0))
    timeouts = csr.counter(f"{q}.timeouts",
                           doc=f"{q}: operations freed by a timeout (not in the core path: 0)")
    m.d.comb += timeouts.eq(0)

    # ---- c4: the PHV leaves; the tap ----------------------------------------------------------
    v4, phv4 = ctl("valid"), phv_reg("phv")
    run4, st4 = ctl("run4"), dreg("status4", 3)
    args4 = {n: dreg(f"{n}4", w) for n, _, w in args_l}
    m.d.sync += [v4.eq(v3), phv4.eq(nxt), run4.eq(v3 & go3), st4.eq(status)]
    m.d.sync += [args4[n].eq(args3[n]) for n, _, _ in args_l]
    el.payload_tap = dict(valid=v4, run=run4, status=st4, **args4)
    el.payload_tap_latency = ACC_LATENCY
    return v4, phv4, ACC_LATENCY


class GFIngress(wiring.Component):
    """The frame's beats (the arbiter's output) through the engine, into the copy lane's store.

    Ports: ``i`` (flow of the arbiter's beats, ``beat_shape`` layout with ``data``, ``keep``,
    ``last``), ``tap_*`` (the element's tap, aligned with the packet's first beat at ``i``:
    the data path delays the beats by the tap's latency), ``o`` (the same flow,
    :data:`~.gf_engine.LATENCY` cycles later, a DONE packet's data bytes replaced by the
    result). Counters: ``mismatch`` pulses for a data beat of a DONE packet the engine did not
    complete, or a beat the engine refused (never, when the shadow and the engine agree).
    """

    def __init__(self, beat_shape, *, n_ops, chunk_beats):
        self.beat_shape = beat_shape
        self.n_ops, self.chunk_beats = n_ops, chunk_beats
        ob = max(1, (n_ops - 1).bit_length())
        fb = (chunk_beats - 1).bit_length()
        self.ob, self.fb = ob, fb
        super().__init__({
            "i_valid": In(1), "i": In(beat_shape),
            "tap_valid": In(1), "tap_run": In(1), "tap_done": In(1), "tap_op": In(ob),
            "tap_off": In(fb), "tap_coeff": In(8), "tap_src": In(4), "tap_need": In(5),
            "tap_length": In(16),
            "o_valid": Out(1), "o": Out(beat_shape), "mismatch": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        eng = m.submodules.engine = GFEngine(n_ops=self.n_ops, chunk_beats=self.chunk_beats)
        b = self.i
        in_pkt = Signal()
        with m.If(self.i_valid):
            m.d.sync += in_pkt.eq(~b.last)
        first = Signal()
        m.d.comb += first.eq(self.i_valid & ~in_pkt)
        # the packet's arguments, held from its first beat
        run, done = Signal(), Signal(reset_less=True)
        op, off = Signal(self.ob, reset_less=True), Signal(self.fb, reset_less=True)
        coeff, src, need = (Signal(8, reset_less=True), Signal(4, reset_less=True),
                            Signal(5, reset_less=True))
        rem = Signal(range(-64, 1 << 16), reset_less=True)   # data bytes left from this beat
        phase = Signal(2, reset_less=True)                  # beat index, saturating at 2
        with m.If(first):
            m.d.sync += [run.eq(self.tap_valid & self.tap_run), done.eq(self.tap_done),
                         op.eq(self.tap_op), off.eq(self.tap_off), coeff.eq(self.tap_coeff),
                         src.eq(self.tap_src), need.eq(self.tap_need),
                         rem.eq(self.tap_length), phase.eq(1)]
        with m.Elif(self.i_valid):
            with m.If(phase == DATA_BEAT):
                m.d.sync += [rem.eq(rem - 64), off.eq(off + 1)]
            with m.Else():
                m.d.sync += phase.eq(phase + 1)
        dbeat = Signal()
        m.d.comb += dbeat.eq(self.i_valid & ~first & (phase == DATA_BEAT) & run & (rem > 0))
        keep = Signal(64)
        m.d.comb += keep.eq(Cat(*[rem > k for k in range(64)]))
        m.d.comb += [eng.i_valid.eq(dbeat), eng.i_op.eq(op), eng.i_off.eq(off),
                     eng.i_coeff.eq(coeff), eng.i_src.eq(src), eng.i_need.eq(need),
                     eng.i_keep.eq(keep), eng.i_data.eq(b.data), eng.i_first.eq(done),
                     eng.i_last.eq(0), eng.timeout.eq(0)]
        # the beat waits for the engine
        line = [(self.i_valid, b)]
        for k in range(ENGINE_LATENCY):
            pv, pb = line[-1]
            nv = Signal(name=f"bv{k}")
            nbt = Signal(self.beat_shape, name=f"bd{k}", reset_less=True)
            m.d.sync += [nv.eq(pv), nbt.eq(pb)]
            line.append((nv, nbt))
        ov, ob_ = line[-1]
        repl = eng.o_valid & eng.o_first            # a data beat of a DONE packet
        keep_bits = Cat(*[eng.o_keep[i].replicate(8) for i in range(64)])
        m.d.comb += [self.o_valid.eq(ov), self.o.eq(ob_)]
        with m.If(repl):
            m.d.comb += self.o.data.eq((eng.o_data & keep_bits) | (ob_.data & ~keep_bits))
        m.d.comb += self.mismatch.eq(eng.o_valid & ((eng.o_first & ~eng.o_done) | eng.o_bad))
        return m


class GFScaleBeats(wiring.Component):
    """A copy's data bytes (frame byte 128 to 128 + ``length``) times its coefficient.

    Ports: ``i_valid``, ``i`` (the lane's beats, layout ``beat_shape`` with ``data``,
    ``first``), ``arg_valid`` with ``arg_run``, ``arg_coeff``, ``arg_length`` (the copy's,
    latched; given at or before its first beat, never while the previous copy's beats still
    enter), ``o_valid``, ``o``: the beats :data:`SCALE_LATENCY` cycles later."""

    def __init__(self, beat_shape):
        self.beat_shape = beat_shape
        super().__init__({
            "i_valid": In(1), "i": In(beat_shape),
            "arg_valid": In(1), "arg_run": In(1), "arg_coeff": In(8), "arg_length": In(16),
            "o_valid": Out(1), "o": Out(beat_shape),
        })

    def elaborate(self, platform):
        m = Module()
        run, coeff = Signal(), Signal(8, reset_less=True)
        length = Signal(16, reset_less=True)
        with m.If(self.arg_valid):
            m.d.sync += [run.eq(self.arg_run), coeff.eq(self.arg_coeff),
                         length.eq(self.arg_length)]
        b = self.i
        rem = Signal(range(-64, 1 << 16), reset_less=True)
        phase = Signal(2, reset_less=True)
        with m.If(self.i_valid & b.first):
            m.d.sync += [rem.eq(length), phase.eq(1)]
        with m.Elif(self.i_valid):
            with m.If(phase == DATA_BEAT):
                m.d.sync += rem.eq(rem - 64)
            with m.Else():
                m.d.sync += phase.eq(phase + 1)
        sel = Signal(64)
        m.d.comb += sel.eq(Mux(self.i_valid & ~b.first & (phase == DATA_BEAT) & run,
                               Cat(*[rem > k for k in range(64)]), 0))
        mul = m.submodules.mul = GFVecMul(64)
        m.d.comb += [mul.coeff.eq(coeff), mul.x.eq(b.data)]
        v1, v2 = Signal(), Signal()
        b1 = Signal(self.beat_shape, reset_less=True)
        b2 = Signal(self.beat_shape, reset_less=True)
        s1, s2 = Signal(64, reset_less=True), Signal(64, reset_less=True)
        m.d.sync += [v1.eq(self.i_valid), b1.eq(b), s1.eq(sel),
                     v2.eq(v1), b2.eq(b1), s2.eq(s1)]
        bits = Cat(*[s2[i].replicate(8) for i in range(64)])
        v3 = Signal()
        b3 = Signal(self.beat_shape, reset_less=True)
        m.d.sync += [v3.eq(v2), b3.eq(b2), b3.data.eq((mul.p & bits) | (b2.data & ~bits))]
        m.d.comb += [self.o_valid.eq(v3), self.o.eq(b3)]
        return m
