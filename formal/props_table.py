"""Formal harness for the RAM TCAM of ternary and LPM tables (:class:`netstor.gateware.tcam.Tcam`):
lowest index wins, and a lookup never sees a mix of an entry's old and new contents.

The engine is built alone with small parameters (``n`` entries, ``kw``-bit keys cut into
``chunk``-bit chunks, priority-tree fan-in ``fanin`` so that the tree has registered levels).
Inputs, free every cycle: the lookup ``key`` and the update request (``req``, ``index``,
``value``, ``mask``, ``valid``). Assumed (the CSR protocol of the table's memory port): while a
request is pending its index/value/mask/valid do not change; it stays up until ``upd_done``
and is low in the cycle after it; ``index < n``.

Reference (from the spec's meaning of a ternary entry, not from the gateware's expressions):
the harness keeps a shadow of every entry ``(valid, value, mask)``, replaced by the request's
at ``upd_done``; entry ``i`` matches key ``k`` when it is valid and ``(k ^ value) & mask == 0``;
the answer to a lookup is the lowest matching index (``hit`` 0 when none matches). For each
lookup it computes three answers from the shadow as it is in the lookup's cycle: the entry
being updated (if any) taken as it was (*old*), as absent, or as requested (*new*); they are
carried beside the lookup to its result cycle (``latency`` registers).

Asserted, every cycle:

1. *Priority*: a lookup's ``(hit, index)`` equals one of the three answers, and equals the
   *old* answer when no update is under way in its cycle (then the three are the same) --
   so the engine returns the lowest matching entry, and during an update a lookup sees the
   old entry, no entry or the new entry, never a mix of the two.
2. *Inductive invariant* (what the chunk RAMs hold): bit ``i`` of word ``a`` of chunk RAM ``c``
   is ``valid_i & ((a ^ value_i[c]) & mask_i[c] == 0)`` for every entry not being updated;
   for the entry being updated it is the old bit at addresses pass 1 has not reached, 0 at
   those it has, and in pass 2 the new bit at addresses already written and 0 beyond; the
   one-hot register names the entry being updated during a pass.
3. Initial state: RAMs and shadow 0 (the FPGA configuration's value).

Covers: a hit at an index > 0 behind a matching entry of lower priority turned off... (see
``cover`` in :class:`TableProps`): a lookup during pass 2 that hits the new entry, a lookup
that hits an entry above a valid non-matching one, a completed update.
"""
from __future__ import annotations

from amaranth.hdl import Assert, Assume, Cover, Module, Signal, Const
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from netstor.gateware.tcam import Tcam
from props_packet_buffer import _started


def _match(key, value, mask):
    return ((key ^ value) & mask) == 0


class TableProps(wiring.Component):
    def __init__(self, n=5, kw=4, chunk=2, fanin=2):
        self.n, self.kw, self.chunk, self.fanin = n, kw, chunk, fanin
        ib = max(1, (n - 1).bit_length())
        super().__init__({
            "key": In(kw), "req": In(1), "index": In(ib), "value": In(kw), "mask": In(kw),
            "valid": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        n, kw, chunk = self.n, self.kw, self.chunk
        tc = Tcam(m, n=n, kw=kw, key=self.key, chunk=chunk, prefix="t", fanin=self.fanin)
        pas, ua, ph = tc.state
        started = _started(m)
        m.d.comb += [tc.upd_req.eq(self.req), tc.upd_index.eq(self.index),
                     tc.upd_value.eq(self.value), tc.upd_mask.eq(self.mask),
                     tc.upd_valid.eq(self.valid)]

        # ---- assumptions: the memory port protocol ---------------------------------------
        req_q = Signal()
        done_q = Signal()
        prev = [Signal.like(s, name=f"prev_{s.name}") for s in
                (self.index, self.value, self.mask, self.valid)]
        m.d.sync += [req_q.eq(self.req), done_q.eq(tc.upd_done)]
        m.d.sync += [p.eq(s) for p, s in zip(prev, (self.index, self.value, self.mask,
                                                      self.valid))]
        m.d.comb += Assume(self.index < n)
        with m.If(req_q & ~done_q):
            m.d.comb += Assume(self.req)
            m.d.comb += Assume((self.index == prev[0]) & (self.value == prev[1])
                               & (self.mask == prev[2]) & (self.valid == prev[3]))
        with m.If(done_q):
            m.d.comb += Assume(~self.req)
        # an update is under way exactly when the engine is not idle (it starts on req)
        busy = (pas != 0) | tc.started

        # ---- shadow -------------------------------------------------------------------------
        sv = [Signal(name=f"sv{i}") for i in range(n)]
        sval = [Signal(kw, name=f"sval{i}") for i in range(n)]
        smask = [Signal(kw, name=f"smask{i}") for i in range(n)]
        with m.If(tc.upd_done):
            for i in range(n):
                with m.If(self.index == i):
                    m.d.sync += [sv[i].eq(self.valid), sval[i].eq(self.value),
                                 smask[i].eq(self.mask)]

        def answer(mode):
            """(hit, index) over the shadow, entry ``self.index`` taken as old/absent/new
            when an update is under way."""
            hit = Const(0, 1)
            idx = Const(0, len(tc.index))
            for i in reversed(range(n)):
                mt = sv[i] & _match(self.key, sval[i], smask[i])
                if mode == "absent":
                    mt = Mux_(busy & (self.index == i), Const(0, 1), mt)
                elif mode == "new":
                    mt = Mux_(busy & (self.index == i),
                              self.valid & _match(self.key, self.value, self.mask), mt)
                hit = hit | mt
                idx = Mux_(mt, Const(i, len(idx)), idx)
            return hit, idx

        answers = [answer(md) for md in ("old", "absent", "new")]
        L = tc.latency
        # carry the answers (and whether an update was under way) to the result cycle
        carried = []
        for k, (h, i) in enumerate(answers):
            for d in range(L):
                h2, i2 = Signal(name=f"a{k}h{d}"), Signal(len(i), name=f"a{k}i{d}")
                m.d.sync += [h2.eq(h), i2.eq(i)]
                h, i = h2, i2
            carried.append((h, i))
        b = busy
        for d in range(L):
            b2 = Signal(name=f"busy{d}")
            m.d.sync += b2.eq(b)
            b = b2
        was_busy = b

        def same(ans):
            h, i = ans
            return (tc.hit == h) & (~h | (tc.index == i))

        # the first L cycles have no lookup behind them in the pipeline yet
        age = Signal(range(L + 2))
        with m.If(age <= L):
            m.d.sync += age.eq(age + 1)
        with m.If(started & (age > L)):
            m.d.comb += Assert(same(carried[0]) | same(carried[1]) | same(carried[2]))
            with m.If(~was_busy):
                m.d.comb += Assert(same(carried[0]))

        # ---- inductive invariant on the RAM contents ----------------------------------------
        chunks = tc.chunks
        cur = tc.onehot
        with m.If(pas != 0):
            m.d.comb += Assert(cur == (Const(1, n) << self.index)[:n])
        with m.If(tc.started):
            m.d.comb += Assert(pas == 0)
        m.d.comb += Assert(pas != 3)
        with m.If(busy):            # an update under way was requested in the cycle before
            m.d.comb += Assert(req_q & ~done_q)
        for c, (lo, w) in enumerate(chunks):
            mem = tc.mems[c]
            for a in range(1 << w):
                rp = mem.read_port(domain="comb")
                m.d.comb += rp.addr.eq(a)
                for i in range(n):
                    old = sv[i] & (((a ^ sval[i][lo:lo + w]) & smask[i][lo:lo + w]) == 0)
                    new = self.valid & (((a ^ self.value[lo:lo + w])
                                         & self.mask[lo:lo + w]) == 0)
                    bit = rp.data[i]
                    upd = (pas != 0) & (self.index == i)
                    with m.If(~upd):
                        m.d.comb += Assert(bit == old)
                    with m.Elif(pas == 1):
                        m.d.comb += Assert(bit == Mux_(a < ua, Const(0, 1), old))
                    with m.Elif(pas == 2):
                        m.d.comb += Assert(bit == Mux_(a < ua, new, Const(0, 1)))
                    if a == 0 and c == 0:
                        with m.If(~started):
                            m.d.comb += Assert(~bit & ~sv[i])

        # ---- covers -------------------------------------------------------------------------
        m.d.comb += [
            Cover(started & (age > L) & was_busy & tc.hit & same(carried[2])
                  & ~same(carried[0])),
            Cover(started & (age > L) & tc.hit & (tc.index == n - 1) & sv[0]),
            Cover(started & tc.upd_done & self.valid),
        ]
        return m


def Mux_(sel, a, b):
    from amaranth.hdl import Mux
    return Mux(sel, a, b)
