"""The GF(2^8) payload engine in the frame path (XORInc, issue 13): the three pieces that put
:class:`~.gf_engine.GFEngine` between a program's header logic and the frame's beats.

* :func:`build_accumulate` (the element ``GFAccumulate`` in the header path, latency
  :data:`ACC_LATENCY` = 3): the packet's *status* (absorbed / done / dup / split / bad /
  misaligned, ``netstor.elements.gf``) from a control shadow of the slots: per slot the
  ``seen`` set, the ``count`` and the generation (29 bits), in 16 banks interleaved by the
  slot's offset mod 16, so the <= 16 slots of one packet are 16 reads and 16 writes in one
  cycle (one PHV per clock). Each bank is a pipelined read-modify-write: c0 addresses the RAM,
  c1 updates from its word (the RAM's read latch, no output register) with forwarding from W
  (the packet one cycle ahead: the one-cycle loop) and H1 (two ahead, written on the edge the
  read happens on), c2 registers the per-beat decisions and forms the status, c3 the PHV
  leaves: back-to-back packets on one slot each see the one before. The program decides on
  the status (drop, rewrite, copy group) in the stages after it, as the model does.
  Timeouts: per op a generation (a slot of an older one reads free), its open-slot count and
  the time of its last packet; a scanner visits one op a clock and frees an op with open
  slots whose last packet is more than ``<el>.timeout`` cycles old (a host memory of one
  word, the model's; 0: never): generation + 1, counted (``.timeouts``), one pulse on
  ``el.timeout_event``, and one more in the op's word of host memory ``.expired`` (the
  model's: 32 bits per op, a LUT RAM read by the pulse and written + 1 a cycle later; the
  host reads it on its own port, writes only between increments). The model frees an op at the first packet that finds it more than
  ``timeout`` after its last; the scanner does so between ``timeout + 1`` and ``timeout +
  n_ops + 6`` cycles after it (its visit, the 3-cycle read and the packets still in
  flight), so a packet of the op arriving in that window finds the slot still live in the
  RTL, freed in the model. The engine takes the generation with each packet (the tap), so
  its slots are freed with the shadow's.
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
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .gf_engine import GFEngine, GFVecMul, LATENCY as ENGINE_LATENCY, MUL_LATENCY
from .kit import HwEnv, target

__all__ = ["build_accumulate", "GFIngress", "GFScaleBeats", "ACC_LATENCY", "SCALE_LATENCY",
           "BANKS", "DATA_BEAT"]

#: the element's latency in the header path (c0 addresses, c1 RAM word and update, c2 the
#: per-beat decisions registered and the status, c3 the PHV leaves)
ACC_LATENCY = 3
#: the egress scale's latency on the copy's beats (multiplier 2, the byte select 1)
SCALE_LATENCY = MUL_LATENCY + 1
BANKS = 16
DATA_BEAT = 2                      # frame byte 128 = beat 2
SEEN, COUNT, GEN = 16, 5, 8
CTL_BITS = SEEN + COUNT + GEN
#: cycles after the scanner's read in which a packet of the op it visits may still change
#: the op's state (c0..c3 of the packets and the two cycles the read is older than the
#: decision): the scanner does not free an op with a packet in them
SCAN_GUARD = 6

# status values (netstor.elements.gf)
ST_NONE, ST_ABSORBED, ST_DONE, ST_DUP, ST_BAD, ST_MISALIGNED, ST_SPLIT = range(7)


def _popcount(m, bits, name):
    """The number of ones of ``bits`` (a balanced adder tree)."""
    terms = [b for b in bits]
    k = 0
    while len(terms) > 1:
        nxt = []
        for i in range(0, len(terms) - 1, 2):
            s = Signal(len(terms[i]) + 1, name=f"{name}_{k}")
            k += 1
            m.d.comb += s.eq(terms[i] + terms[i + 1])
            nxt.append(s)
        if len(terms) % 2:
            nxt.append(terms[-1])
        terms = nxt
    return terms[0]


def build_accumulate(el, m, pipeline, valid_in, phv_in, csr, prefix):
    """The header-path half of ``GFAccumulate`` ``el`` (module docstring). Returns
    ``(valid_out, phv_out, latency)``; sets ``el.payload_tap`` (a dict of signals valid
    :data:`ACC_LATENCY` cycles after the element's input: ``valid``, ``run`` (the engine
    takes the packet's data beats), ``status``, ``op`` (the op id with the op's generation
    above it, :data:`GEN` bits), ``off``, ``coeff``, ``src``, ``need``, ``length``) and
    ``el.timeout_event`` (``valid``, ``op``: an op freed by the timeout scanner, one pulse,
    also counted per op in host memory ``<el>.expired``)."""
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

    # ---- per-op state: generation (slots of older generations read free), open slots,
    # the time of the op's last packet; the host's timeout -----------------------------------
    gens = Array(Signal(GEN, name=f"{prefix}_gen{i}") for i in range(n_ops))
    opens = Array(Signal(range(cb + 1), name=f"{prefix}_open{i}") for i in range(n_ops))
    stamps = Memory(shape=32, depth=n_ops, init=[])
    m.submodules[f"{prefix}_stamps"] = stamps
    st_rp, st_wp = stamps.read_port(), stamps.write_port()
    now = Signal(32, name=f"{prefix}_now")
    m.d.sync += now.eq(now + 1)
    tmo = Signal(32, init=el.timeout, name=f"{prefix}_timeout")
    tport = csr.memory(f"{q}.timeout", 32, 1,
                       doc=f"{q}: cycles after an operation's last packet after which its "
                           "open slots are freed (0: never)")
    m.d.comb += tport.rdata.eq(tmo)
    m.d.sync += tport.ack.eq(tport.req & ~tport.ack)
    with m.If(tport.req & tport.we & ~tport.ack):
        m.d.sync += tmo.eq(tport.wdata)

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
    go0 = Signal(name=f"{prefix}_go0")
    m.d.comb += go0.eq(when0 & aligned & ok)
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

    # ---- c1: the RAM words; the update --------------------------------------------------------
    v1, go1 = ctl("v1"), ctl("go1")
    when1, mis1, bad1 = dreg("when1"), dreg("mis1"), dreg("bad1")
    nb1 = dreg("nb1", 5)
    src_oh1, src1, need_is1 = dreg("src_oh1", 16), dreg("src1", 4), dreg("need_is1")
    lact1 = dreg("lact1", BANKS)
    gen1 = dreg("gen1", GEN)
    need_m1 = dreg("need_m1", COUNT)       # a slot of count c completes when c >= need - 1
    phv1 = phv_reg("phv1")
    args_l = [("op", a_op[:ob], ob), ("off", a_off[:fb], fb), ("coeff", a_coeff[:8], 8),
              ("src", a_src[:4], 4), ("need", a_need[:5], 5), ("length", length, 16)]
    args1 = {n: dreg(f"{n}1", w) for n, _, w in args_l}
    m.d.sync += [v1.eq(valid_in), go1.eq(go0), when1.eq(when0),
                 mis1.eq(~aligned), bad1.eq(aligned & ~ok), nb1.eq(nb[:5]),
                 src_oh1.eq(Const(1, 16) << a_src[:4]), src1.eq(a_src[:4]),
                 need_is1.eq(a_need[:5] == 1), lact1.eq(Cat(*lane_act)), phv1.eq(phv_in),
                 gen1.eq(gens[a_op[:ob]]), need_m1.eq(a_need[:5] - 1)]
    m.d.sync += [args1[n].eq(s) for n, s, _ in args_l]

    done_b, dup_b, live_b = [], [], []
    for b in range(BANKS):
        p = f"{prefix}_b{b}"
        mem = Memory(shape=CTL_BITS, depth=bank_depth, init=[])
        m.submodules[f"{p}_ctl"] = mem
        rp, wp = mem.read_port(), mem.write_port()
        m.d.comb += [rp.addr.eq(addrs[b]), rp.en.eq(1)]
        # W: the write of the packet one cycle ahead (written at the end of its c2); H1: the
        # one two cycles ahead (written at the end of our c0, the edge our read happens on,
        # so the RAM word misses it); three ahead is in the RAM word
        w_we = Signal(name=f"{p}_w_we")
        w_addr, w_word = dreg(f"b{b}_w_addr", ab), dreg(f"b{b}_w_word", CTL_BITS)
        w_live = dreg(f"b{b}_w_live")
        h1_live = dreg(f"b{b}_h1_live")
        h1_word = dreg(f"b{b}_h1_word", CTL_BITS)
        m.d.comb += [wp.en.eq(w_we), wp.addr.eq(w_addr), wp.data.eq(w_word)]
        m.d.sync += [h1_word.eq(w_word), h1_live.eq(w_live)]
        # c0 -> c1: the forwarding compares (W's occupant in our c1 is the packet now in c1,
        # H1's the one now in W)
        addr1 = dreg(f"b{b}_addr1", ab)
        m_w, hit_1 = dreg(f"b{b}_m_w"), dreg(f"b{b}_hit_h1")
        m.d.sync += [addr1.eq(addrs[b]), m_w.eq(addr1 == addrs[b]),
                     hit_1.eq(w_we & (w_addr == addrs[b]))]
        # c1: the RAM word (the read latch) and its liveness in our generation
        rd = rp.data
        ram_live = Signal(name=f"{p}_ram_live")
        m.d.comb += ram_live.eq((rd[SEEN + COUNT:] == gen1) & (rd[SEEN:SEEN + COUNT] != 0))

        def update(live, seen, count, tag):
            # shallow on purpose (the W loop): "src in seen" a 16:1 mux by the src, "count >=
            # need - 1" a compare (a carry chain), the count + 1 bit by bit
            dup_ = Signal(name=f"{p}_{tag}_dup")
            done_ = Signal(name=f"{p}_{tag}_done")
            ge_ = Signal(name=f"{p}_{tag}_ge")
            hit_ = Signal(name=f"{p}_{tag}_hit")
            inc_ = Signal(COUNT, name=f"{p}_{tag}_inc")
            new_ = Signal(SEEN + COUNT, name=f"{p}_{tag}_new")
            m.d.comb += [ge_.eq(count >= need_m1),
                         inc_.eq(Cat(*[count[i] ^ Cat(*[count[j] for j in range(i)]).all()
                                       if i else ~count[0] for i in range(COUNT)])),
                         hit_.eq(seen.bit_select(src1, 1)),
                         dup_.eq(live & hit_),
                         done_.eq(~dup_ & Mux(live, ge_, need_is1)),
                         new_.eq(Mux(done_, 0, Cat(Mux(live, seen, 0) | src_oh1,
                                                  Mux(live, inc_, 1))))]
            return dup_, done_, new_

        # three candidates side by side (W's: the one-cycle loop; H1's; the RAM word's, whose
        # generation check is the deepest input), chosen last by registered selects
        c_w = update(w_live, w_word[:SEEN], w_word[SEEN:SEEN + COUNT], "cw")
        c_h = update(h1_live, h1_word[:SEEN], h1_word[SEEN:SEEN + COUNT], "ch")
        c_r = update(ram_live, rd[:SEEN], rd[SEEN:SEEN + COUNT], "cr")
        sel_w = Signal(name=f"{p}_sel_w")
        m.d.comb += sel_w.eq(m_w & w_we)

        def pick(w_, h_, r_):
            return Mux(sel_w, w_, Mux(hit_1, h_, r_))

        live, dup, done = (Signal(name=f"{p}_{n}") for n in ("live", "dup", "done"))
        new = Signal(SEEN + COUNT, name=f"{p}_new")
        m.d.comb += [live.eq(pick(w_live, h1_live, ram_live)),
                     dup.eq(pick(c_w[0], c_h[0], c_r[0])),
                     done.eq(pick(c_w[1], c_h[1], c_r[1])), new.eq(pick(c_w[2], c_h[2], c_r[2]))]
        we1 = Signal(name=f"{p}_we1")
        m.d.comb += we1.eq(go1 & lact1[b] & ~dup)
        # c2 (W): the write
        m.d.sync += [w_we.eq(we1), w_addr.eq(addr1), w_word.eq(Cat(new, gen1)),
                     w_live.eq(~done)]
        done_b.append(done)
        dup_b.append(dup)
        live_b.append(live)

    # ---- c2: the per-beat decisions registered; the status ----------------------------------
    v2, go2 = ctl("v2"), ctl("go2")
    when2, mis2, bad2 = dreg("when2"), dreg("mis2"), dreg("bad2")
    nb2 = dreg("nb2", 5)
    lact2, done2, dup2 = dreg("lact2", BANKS), dreg("done2", BANKS), dreg("dup2", BANKS)
    live2 = dreg("live2", BANKS)
    gen2 = dreg("gen2", GEN)
    phv2 = phv_reg("phv2")
    args2 = {n: dreg(f"{n}2", w) for n, _, w in args_l}
    m.d.sync += [v2.eq(v1), go2.eq(go1), when2.eq(when1), mis2.eq(mis1), bad2.eq(bad1),
                 nb2.eq(nb1), lact2.eq(lact1), done2.eq(Cat(*done_b)), dup2.eq(Cat(*dup_b)),
                 live2.eq(Cat(*live_b)), gen2.eq(gen1),
                 phv2.eq(phv1)]
    m.d.sync += [args2[n].eq(args1[n]) for n, _, _ in args_l]
    all_done = ((done2 | ~lact2) == (1 << BANKS) - 1)
    all_dup = ((dup2 | ~lact2) == (1 << BANKS) - 1)
    none = ~((done2 | dup2) & lact2).any()
    status = Signal(3, name=f"{prefix}_status2")
    m.d.comb += status.eq(
        Mux(~when2, ST_NONE, Mux(mis2, ST_MISALIGNED, Mux(bad2, ST_BAD,
            Mux(all_done, ST_DONE, Mux(all_dup, ST_DUP, Mux(none, ST_ABSORBED, ST_SPLIT)))))))
    nxt = Signal(data.StructLayout(pipeline.phv.layout()), name=f"{prefix}_next")
    m.d.comb += nxt.eq(phv2)
    with m.If(when2):
        m.d.comb += target(pipeline, nxt, el.status.name).eq(status)
        with m.If(go2 & all_done):
            m.d.comb += target(pipeline, nxt, "udp.csum").eq(0)
    # counters (the model's names; a counter counts one cycle after its event)
    ev = {"absorbed": ST_ABSORBED, "done": ST_DONE, "dup": ST_DUP, "bad": ST_BAD,
          "misaligned": ST_MISALIGNED, "split": ST_SPLIT}
    for name, st in ev.items():
        c = csr.counter(f"{q}.{name}", doc=f"{q}: packets {name} (the engine's status)")
        m.d.comb += c.eq(v2 & when2 & (status == st))
    beats = csr.counter(f"{q}.beats", 5, doc=f"{q}: data beats the engine took")
    m.d.comb += beats.eq(Mux(v2 & go2, nb2, 0))
    # slots the packet opened (written, not done, was free) and closed (done, was live): the
    # op's open count
    open2 = Signal(BANKS, name=f"{prefix}_open2")
    close2 = Signal(BANKS, name=f"{prefix}_close2")
    m.d.comb += [open2.eq(Mux(go2, lact2 & ~dup2 & ~done2 & ~live2, 0)),
                 close2.eq(Mux(go2, lact2 & done2 & live2, 0))]
    n_open, n_close = _popcount(m, open2, f"{prefix}_nopen"), _popcount(m, close2,
                                                                       f"{prefix}_nclose")

    # ---- c3: the PHV leaves; the tap; the op's state updated ---------------------------------
    v3, phv3 = ctl("valid"), phv_reg("phv")
    run3, st3, gen3 = ctl("run3"), dreg("status3", 3), dreg("gen3", GEN)
    upd3 = ctl("upd3")
    nopen3, nclose3 = dreg("nopen3", 5), dreg("nclose3", 5)
    args3 = {n: dreg(f"{n}3", w) for n, _, w in args_l}
    m.d.sync += [v3.eq(v2), phv3.eq(nxt), run3.eq(v2 & go2), st3.eq(status), gen3.eq(gen2),
                 upd3.eq(v2 & go2), nopen3.eq(n_open), nclose3.eq(n_close)]
    m.d.sync += [args3[n].eq(args2[n]) for n, _, _ in args_l]
    op3 = args3["op"]
    el.payload_tap = dict(valid=v3, run=run3, status=st3, **args3)
    el.payload_tap["op"] = Cat(op3, gen3)
    el.payload_tap_latency = ACC_LATENCY
    m.d.comb += [st_wp.en.eq(upd3), st_wp.addr.eq(op3), st_wp.data.eq(now)]

    # ---- the timeout scanner: one op a clock. T0 reads its open count and (the RAM's read
    # port) its stamp, T1 its age, T2 decides: free it (generation + 1, no open slot) when it
    # has open slots, its last packet is more than ``timeout`` cycles old and none of its
    # packets is in c0..c3 nor was in c3 since T0 (their updates would race the decision) --
    scan = Signal(ob, name=f"{prefix}_scan")
    m.d.sync += scan.eq(scan + 1)
    m.d.comb += [st_rp.addr.eq(scan), st_rp.en.eq(1)]
    t1_op, t1_open = dreg("t1_op", ob), ctl("t1_open")
    m.d.sync += [t1_op.eq(scan), t1_open.eq(opens[scan] != 0)]
    t2_op, t2_open, t2_age = dreg("t2_op", ob), ctl("t2_open"), dreg("t2_age", 32)
    m.d.sync += [t2_op.eq(t1_op), t2_open.eq(t1_open), t2_age.eq(now - st_rp.data)]
    v4, v5 = ctl("upd4"), ctl("upd5")
    op4, op5 = dreg("op4", ob), dreg("op5", ob)
    m.d.sync += [v4.eq(upd3), op4.eq(op3), v5.eq(v4), op5.eq(op4)]
    flight = [(go0, a_op[:ob]), (go1, args1["op"]), (go2, args2["op"]), (upd3, op3),
              (v4, op4), (v5, op5)]
    assert len(flight) == SCAN_GUARD
    busy = Signal(name=f"{prefix}_scan_busy")
    m.d.comb += busy.eq(Cat(*[v & (o == t2_op) for v, o in flight]).any())
    fire = Signal(name=f"{prefix}_fire")
    m.d.comb += fire.eq(t2_open & (tmo != 0) & (t2_age > tmo) & ~busy)
    with m.If(upd3):
        m.d.sync += opens[op3].eq(opens[op3] + nopen3 - nclose3)
    with m.If(fire):
        m.d.sync += [gens[t2_op].eq(gens[t2_op] + 1), opens[t2_op].eq(0)]
    to_v, to_op = ctl("to_valid"), dreg("to_op", ob)
    m.d.sync += [to_v.eq(fire), to_op.eq(t2_op)]
    el.timeout_event = dict(valid=to_v, op=to_op)
    timeouts = csr.counter(f"{q}.timeouts", doc=f"{q}: operations freed by a timeout")
    m.d.comb += timeouts.eq(to_v)

    # ---- the per-op expired count (host memory ``.expired``, the model's: one 32-bit word
    # per op, address the op id): the scanner's pulse increments the op's word. E0 (the
    # pulse's cycle) reads it, E1 writes it + 1 (one write port). The host reads on its own
    # read port and writes (clears) only in a cycle with no increment in E0 or E1, so no
    # host write falls between an increment's read and its write (consecutive pulses are
    # other ops: the scanner visits an op once in n_ops clocks and freed it has no open
    # slot) -----------------------------------------------------------------------------------
    expired = Memory(shape=32, depth=n_ops, init=[])
    m.submodules[f"{prefix}_expired"] = expired
    ex_rp, ex_hp, ex_wp = expired.read_port(), expired.read_port(), expired.write_port()
    eport = csr.memory(f"{q}.expired", 32, n_ops,
                       doc=f"{q}: per operation, the timeouts that freed it (32 bits, "
                           "wrapping; the host reads it and may write it)")
    e1_v, e1_op = ctl("exp_v1"), dreg("exp_op1", ob)
    e1_inc = Signal(32, name=f"{prefix}_exp_inc")
    m.d.sync += [e1_v.eq(to_v), e1_op.eq(to_op)]
    m.d.comb += [ex_rp.addr.eq(to_op), ex_rp.en.eq(1), e1_inc.eq(ex_rp.data + 1)]
    htake = Signal(name=f"{prefix}_exp_host")
    m.d.comb += htake.eq(eport.req & ~eport.ack & ~to_v & ~e1_v)
    m.d.comb += [ex_hp.addr.eq(eport.addr), ex_hp.en.eq(1),
                 ex_wp.en.eq(e1_v | (htake & eport.we)),
                 ex_wp.addr.eq(Mux(e1_v, e1_op, eport.addr)),
                 ex_wp.data.eq(Mux(e1_v, e1_inc, eport.wdata)),
                 eport.rdata.eq(ex_hp.data)]
    m.d.sync += eport.ack.eq(htake)
    return v3, phv3, ACC_LATENCY


class GFIngress(wiring.Component):
    """The frame's beats (the arbiter's output) through the engine, into the copy lane's store.

    Ports: ``i`` (flow of the arbiter's beats, ``beat_shape`` layout with ``data``, ``keep``,
    ``last``), ``tap_*`` (the element's tap, aligned with the packet's first beat at ``i``;
    ``tap_op`` is the op id with the shadow's generation of the op above it, which the engine
    uses instead of its own, so the shadow's timeouts free the engine's slots too:
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
            "tap_valid": In(1), "tap_run": In(1), "tap_done": In(1), "tap_op": In(ob + GEN),
            "tap_off": In(fb), "tap_coeff": In(8), "tap_src": In(4), "tap_need": In(5),
            "tap_length": In(16),
            "o_valid": Out(1), "o": Out(beat_shape), "mismatch": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        eng = m.submodules.engine = GFEngine(n_ops=self.n_ops, chunk_beats=self.chunk_beats,
                                             gen_bits=GEN, ext_gen=True)
        b = self.i
        in_pkt = Signal()
        with m.If(self.i_valid):
            m.d.sync += in_pkt.eq(~b.last)
        first = Signal()
        m.d.comb += first.eq(self.i_valid & ~in_pkt)
        # the packet's arguments, held from its first beat
        run, done = Signal(), Signal(reset_less=True)
        op, off = Signal(self.ob, reset_less=True), Signal(self.fb, reset_less=True)
        gen = Signal(GEN, reset_less=True)
        coeff, src, need = (Signal(8, reset_less=True), Signal(4, reset_less=True),
                            Signal(5, reset_less=True))
        rem = Signal(range(-64, 1 << 16), reset_less=True)   # data bytes left from this beat
        phase = Signal(2, reset_less=True)                  # beat index, saturating at 2
        with m.If(first):
            m.d.sync += [run.eq(self.tap_valid & self.tap_run), done.eq(self.tap_done),
                         op.eq(self.tap_op[:self.ob]), gen.eq(self.tap_op[self.ob:]),
                         off.eq(self.tap_off), coeff.eq(self.tap_coeff),
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
                     eng.i_last.eq(0), eng.timeout.eq(0), eng.i_gen.eq(gen)]
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
