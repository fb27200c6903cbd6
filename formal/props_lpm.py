"""Formal harness for the hashed LPM engine (:class:`netstor.gateware.lpm.LpmHash`): every
lookup returns the longest hit of the spec's bank rule over a shadow of the host's writes.

The engine is built alone, small: 4 banks of 2 slots, 4-bit keys (lengths 0..7: beyond ``kw``
too), 2-bit payloads; the winner stage is the flat one (a flip-flop per bank pair, updated
a cycle after a length write) or, with ``select="tree"``, the max tree (two node levels in
one registered stage). Inputs,
free every cycle: the lookup ``key``, an entry write (``wr_en``, ``wr_addr``, ``wr_data``) and a
length write (``len_we``, ``len_addr``, ``len_wdata``).

Reference (from docs/dataplane-spec.md, "Hashed LPM", not from the gateware's expressions):
the harness keeps a shadow of every slot word and every length word, written in the cycle the
engine is asked to write. In a lookup's cycle, bank ``b`` with length word ``enable | L``
offers the shadow word at slot ``h(key & pm(L), b)`` (bit ``j`` = parity of ``x & M(b, j)``,
the constants of ``hash_masks``); it hits when ``enable``, ``valid``, its mask is ``pm(L)`` and
``(key ^ value) & pm(L) == 0``; the answer is the hit of the largest ``L``, the lowest bank on
a tie (a scan over the banks in order). It is carried ``latency`` cycles beside the lookup.

Asserted (BMC from the configuration's all-zero state): a lookup's ``hit`` equals the
answer's, and so does its ``payload`` when it hits -- for every lookup in whose cycle no length
word is written (the spec lets a length written in a lookup's cycle apply to some of its
steps). Entry writes in the lookup's cycle are allowed: the lookup sees the word before it.
"""
from __future__ import annotations

from amaranth.hdl import Assert, Assume, Cat, Const, Cover, Module, Mux, ResetSignal, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from netstor.gateware.lpm import LpmHash, hash_masks


class LpmProps(wiring.Component):
    def __init__(self, banks=4, depth=2, kw=4, pw=2, select="flat"):
        self.banks, self.depth, self.kw, self.pw = banks, depth, kw, pw
        self.select = select
        self.lb = max(1, kw.bit_length())
        self.sbits = (depth - 1).bit_length()
        bbits = max(1, (banks - 1).bit_length())
        ew = 1 + 2 * kw + pw
        super().__init__({
            "key": In(kw), "wr_en": In(1), "wr_addr": In(self.sbits + bbits), "wr_data": In(ew),
            "len_we": In(1), "len_addr": In(bbits), "len_wdata": In(1 + self.lb),
        })

    def elaborate(self, platform):
        m = Module()
        m.d.comb += Assume(~ResetSignal())    # the RAMs have no reset: neither has the shadow
        banks, depth, kw, pw, lb = self.banks, self.depth, self.kw, self.pw, self.lb
        eng = LpmHash(m, banks=banks, depth=depth, kw=kw, pw=pw, key=self.key, prefix="e",
                      select=self.select)
        m.d.comb += [eng.wr_en.eq(self.wr_en), eng.wr_addr.eq(self.wr_addr),
                     eng.wr_data.eq(self.wr_data), eng.len_we.eq(self.len_we),
                     eng.len_addr.eq(self.len_addr), eng.len_wdata.eq(self.len_wdata),
                     eng.rd_addr.eq(0)]
        # shadow
        words = [Signal(len(self.wr_data), name=f"sw{a}") for a in range(banks * depth)]
        lens = [Signal(1 + lb, name=f"sl{b}") for b in range(banks)]
        for a in range(banks * depth):
            with m.If(self.wr_en & (self.wr_addr == a)):
                m.d.sync += words[a].eq(self.wr_data)
        for b in range(banks):
            with m.If(self.len_we & (self.len_addr == b)):
                m.d.sync += lens[b].eq(self.len_wdata)

        def pm_of(length):
            # the top min(L, kw) bits: bit i (from 0 at the bottom) when i >= kw - L
            return Mux(length >= kw, Const((1 << kw) - 1, kw),
                       Const(0, kw) | sum_mux(length))

        def sum_mux(length):
            out = Const(0, kw)
            for n in range(kw):
                out = Mux(length == n, Const(((1 << n) - 1) << (kw - n), kw), out)
            return out

        best_h, best_l, best_p = Const(0, 1), Const(0, lb), Const(0, pw)
        for b in range(banks):
            en, length = lens[b][0], lens[b][1:]
            pm = Signal(kw, name=f"ref_pm{b}")
            m.d.comb += pm.eq(pm_of(length))
            x = self.key & pm
            slot_bits = []
            for j, mk in enumerate(hash_masks(b, kw, self.sbits)):
                par = Const(0, 1)
                for i in range(kw):
                    if mk >> i & 1:
                        par = par ^ x[i]
                slot_bits.append(par)
            slot = Signal(max(1, self.sbits), name=f"ref_slot{b}")
            m.d.comb += slot.eq(Cat(*slot_bits))
            w = Signal(len(self.wr_data), name=f"ref_w{b}")
            with m.Switch(slot):
                for s in range(depth):
                    with m.Case(s):
                        m.d.comb += w.eq(words[b * depth + s])
            valid, value, mask, pay = w[0], w[1:1 + kw], w[1 + kw:1 + 2 * kw], w[1 + 2 * kw:]
            h = Signal(name=f"ref_h{b}")
            m.d.comb += h.eq(en & valid & (mask == pm) & (((self.key ^ value) & pm) == 0))
            take = h & (~best_h | (length > best_l))
            best_h, best_l, best_p = (Mux(take, 1, best_h), Mux(take, length, best_l),
                                      Mux(take, pay, best_p))
        ah, ap = Signal(name="ans_h"), Signal(pw, name="ans_p")
        ok = Signal(name="ans_ok")
        m.d.comb += [ah.eq(best_h), ap.eq(best_p), ok.eq(~self.len_we)]
        for d in range(eng.latency):
            h2, p2, o2 = Signal(name=f"ah{d}"), Signal(pw, name=f"ap{d}"), Signal(name=f"ao{d}")
            m.d.sync += [h2.eq(ah), p2.eq(ap), o2.eq(ok)]
            ah, ap, ok = h2, p2, o2
        age = Signal(range(eng.latency + 2))
        with m.If(age <= eng.latency):
            m.d.sync += age.eq(age + 1)
        with m.If((age > eng.latency) & ok):
            m.d.comb += Assert(eng.hit == ah)
            with m.If(ah):
                m.d.comb += Assert(eng.payload == ap)
        # covers: a hit of a longer bank over a shorter one that also hits
        m.d.comb += Cover((age > eng.latency) & ok & ah & (eng.length >= 2))
        return m
