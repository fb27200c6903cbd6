"""A longest-prefix-match engine for large LPM tables: one hash table per *bank*, each bank
serving one prefix length chosen at run time, every bank probed in parallel, the longest hit
wins through a pipelined max tree.

Why banks with a run-time length (and not one fixed table per length): a fixed table per
length must be sized for the worst length (16K prefixes could all be /24), 33 x 16K slots for
IPv4; a pool of equal banks that the host assigns to lengths as prefixes arrive holds any
length mix in ``banks * depth`` slots, several banks on a busy length acting as the ways of
one multi-way hash. The cost: at most ``banks`` distinct lengths at a time, and a length with
few prefixes holds a whole bank.

Layout. Bank ``b`` (``depth`` words) holds entries ``valid(1) | value(kw) | mask(kw) |
payload(pw)`` (the table's ternary/LPM word); the host writes word ``b * depth + slot`` through
the RAM's second port in one cycle (a lookup reads the word before or after the write). Its
length register ``lengths[b] = enable(1) | length(lb)`` selects the prefix mask ``pm(b)``
(the top ``min(length, kw)`` key bits).

Lookup of ``key`` (one per clock, fixed latency 3 with ``select="flat"`` or ``2 + tree
stages`` with ``select="tree"``; ``"auto"``, the default, is flat up to
:data:`FLAT_MAX_BANKS` banks):

* c0: bank ``b`` reads slot :func:`lpm_slot` ``(key & pm(b), b)``: bit ``j`` of the slot is the
  parity of ``key & pm(b) & M(b, j)`` (:func:`netstor.gateware.h3.h3_masks`; XOR logic,
  the RAM's address register is the stage's register);
* c1: ``hit(b) = enable(b) & valid & mask == pm(b) & (value ^ key) & pm(b) == 0``, registered
  with the bank's length and the entry's payload;
* flat (c2): bank ``b`` wins when it hits and, for every other bank ``c`` that hits,
  ``beats(b, c)``: a flip-flop per bank pair holding ``len(b) >= len(c)`` for ``b < c`` (the
  lower bank wins a tie), rewritten one cycle after a length write from that length compared
  with each other bank's (so a lookup's c2 sees the lengths its c1 saw); the winner's payload
  through an AND-OR, registered. ``banks * (banks - 1) / 2`` flip-flops, no compare on the
  lookup path.
* tree (the first form): 2-input nodes, the child with the larger ``(hit, length)`` wins, the
  lower bank on a tie; two node levels per registered stage.

``hit``/``payload`` are registers, valid ``latency`` cycles after the key.

The hash. Each bank has its own random GF(2)-linear map (the H3 family of Carter and Wegman:
a pair of distinct keys collides in a bank with probability ``1/depth``, independently across
banks), so the host can move a route between the banks of its length (cuckoo hashing). A CRC
seeded per bank is not such a family: a seed only XORs a constant into the CRC, so two keys
that collide in one bank would collide in every bank.
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Mux, Signal
from amaranth.lib.memory import Memory

from netstor.gateware.h3 import h3_hw, h3_masks, h3_slot
from netstor.gateware.kit import or_tree

__all__ = ["LpmHash", "tree_stages", "prefix_mask", "hash_masks", "lpm_slot"]

#: the banks' hashes are H3 hashes (:mod:`netstor.gateware.h3`, index = bank), the same
#: family as the exact tables' ways
hash_masks = h3_masks


def lpm_slot(masked_key, bank, kw, depth):
    """Slot of ``masked_key`` (the key with the bits beyond the bank's length cleared) in
    ``bank`` of ``depth`` slots: bit ``j`` = parity of ``masked_key & M(bank, j)``."""
    return h3_slot(masked_key, bank, kw, (depth - 1).bit_length())


#: node levels of the max tree per registered stage (a node: a 7-bit compare and a mux)
LEVELS_PER_STAGE = 2

#: ``select="auto"``: the flat winner stage up to this many banks, the max tree beyond.
#: Measured (Yosys, xcup, 32-bit keys, 18-bit payloads; ``python -m netstor.bench.tables``):
#: 32 banks x 512 flat 8 LUT levels, 8,251 LUT, 2,565 FF, latency 3 (tree: 6 levels, 6,979
#: LUT, 2,499 FF, latency 5); 64 banks x 1024 flat 9 levels, 17,699 LUT, 5,943 FF (the
#: 63-pair AND into the 64-way AND-OR in one stage; tree: 7 levels, 12,883 LUT, 4,798 FF)
FLAT_MAX_BANKS = 32


def tree_stages(banks):
    """Registered stages of the max tree over ``banks`` inputs."""
    levels = max(0, (banks - 1).bit_length())
    return max(1, -(-levels // LEVELS_PER_STAGE))


def prefix_mask(length, kw):
    """The top ``min(length, kw)`` bits of a ``kw``-bit key."""
    n = min(length, kw)
    return ((1 << n) - 1) << (kw - n)


class LpmHash:
    """Build the engine into ``m``. ``key``: the lookup key (``kw`` bits, sampled in the cycle
    it is given). Host side (drive): ``wr_en``/``wr_addr``/``wr_data`` (an entry write, one
    cycle), ``rd_addr`` (an entry read: ``rd_data`` holds the word two cycles later, a
    register), ``len_we``/``len_addr``/``len_wdata`` (a length register write, one cycle);
    ``len_rdata`` is the addressed length register (combinational). Results: ``hit``,
    ``payload`` (registers, ``latency`` cycles after the key)."""

    def __init__(self, m, *, banks, depth, kw, pw, key, prefix, select="auto"):
        if banks < 1 or depth < 2 or depth & (depth - 1):
            raise ValueError("LpmHash: banks >= 1 and a power-of-two depth >= 2")
        if select not in ("auto", "flat", "tree"):
            raise ValueError("LpmHash: select is 'auto', 'flat' or 'tree'")
        if select == "auto":
            select = "flat" if banks <= FLAT_MAX_BANKS else "tree"
        self.select = select
        self.banks, self.depth, self.kw, self.pw = banks, depth, kw, pw
        lb = max(1, kw.bit_length())
        self.lb = lb
        ew = 1 + 2 * kw + pw
        self.entry_width = ew
        sbits = (depth - 1).bit_length()
        bbits = max(1, (banks - 1).bit_length())
        ab = sbits + bbits
        self.wr_en = Signal(name=f"{prefix}_wr_en")
        self.wr_addr = Signal(ab, name=f"{prefix}_wr_addr")
        self.wr_data = Signal(ew, name=f"{prefix}_wr_data")
        self.rd_addr = Signal(ab, name=f"{prefix}_rd_addr")
        self.rd_data = Signal(ew, name=f"{prefix}_rd_data", reset_less=True)
        self.len_we = Signal(name=f"{prefix}_len_we")
        self.len_addr = Signal(bbits, name=f"{prefix}_len_addr")
        self.len_wdata = Signal(1 + lb, name=f"{prefix}_len_wdata")
        self.len_rdata = Signal(1 + lb, name=f"{prefix}_len_rdata")

        # the length registers and their prefix masks (decoded when written)
        lens = [Signal(1 + lb, name=f"{prefix}_len{b}") for b in range(banks)]
        pms = [Signal(kw, name=f"{prefix}_pm{b}") for b in range(banks)]
        self.lens, self.pms = lens, pms
        therm = Signal(kw, name=f"{prefix}_len_therm")
        wl = self.len_wdata[1:]
        m.d.comb += therm.eq(Cat(*[wl >= kw - i for i in range(kw)]))
        for b in range(banks):
            with m.If(self.len_we & (self.len_addr == b)):
                m.d.sync += [lens[b].eq(self.len_wdata), pms[b].eq(therm)]
        m.d.comb += self.len_rdata.eq(Array(lens)[self.len_addr])

        key1 = Signal(kw, name=f"{prefix}_key1", reset_less=True)
        m.d.sync += key1.eq(key)
        # the host's read: address -> RAM (1) -> bank mux, registered (2)
        rsel = Signal(bbits, name=f"{prefix}_rd_bank", reset_less=True)
        m.d.sync += rsel.eq(self.rd_addr[sbits:] if banks > 1 else 0)
        hrd = []
        level = []
        #: the bank RAMs, for harnesses that inspect them
        self.mems = []
        for b in range(banks):
            mem = Memory(shape=ew, depth=depth, init=[])
            m.submodules[f"{prefix}_bank{b}"] = mem
            self.mems.append(mem)
            rp, hp, wp = mem.read_port(), mem.read_port(), mem.write_port()
            m.d.comb += rp.addr.eq(h3_hw(key & pms[b], b, kw, sbits))
            sel = (self.wr_addr[sbits:] == b) if banks > 1 else Const(1, 1)
            m.d.comb += [wp.addr.eq(self.wr_addr[:sbits]), wp.data.eq(self.wr_data),
                         wp.en.eq(self.wr_en & sel), hp.addr.eq(self.rd_addr[:sbits])]
            hrd.append(hp.data)
            ent = rp.data
            valid, value = ent[0], ent[1:1 + kw]
            mask, pay = ent[1 + kw:1 + 2 * kw], ent[1 + 2 * kw:]
            h = Signal(name=f"{prefix}_hit1_{b}")
            ln = Signal(lb, name=f"{prefix}_len1_{b}", reset_less=True)
            p = Signal(pw, name=f"{prefix}_pay1_{b}", reset_less=True)
            m.d.sync += [
                h.eq(lens[b][0] & valid & (mask == pms[b]) & (((value ^ key1) & pms[b]) == 0)),
                ln.eq(lens[b][1:]), p.eq(pay)]
            level.append((h, ln, p))
        m.d.sync += self.rd_data.eq(Array(hrd)[rsel] if banks > 1 else hrd[0])
        if select == "flat":
            self._flat(m, level, prefix)
            return

        # the max tree: (hit, length) decides, the left (lower bank) child on a tie
        def node(a, c):
            ha, la, pa = a
            hc, lc, pc = c
            right = Cat(lc, hc) > Cat(la, ha)
            return (Mux(right, hc, ha), Mux(right, lc, la), Mux(right, pc, pa))

        stages, lv = 0, 0
        while True:
            if len(level) > 1:
                level = [node(level[i], level[i + 1]) if i + 1 < len(level) else level[i]
                         for i in range(0, len(level), 2)]
                lv += 1
            if len(level) == 1 or lv % LEVELS_PER_STAGE == 0:
                regs = []
                for gi, (h, ln, p) in enumerate(level):
                    rh = Signal(name=f"{prefix}_t{stages}h{gi}")
                    rl = Signal(lb, name=f"{prefix}_t{stages}l{gi}", reset_less=True)
                    rpay = Signal(pw, name=f"{prefix}_t{stages}p{gi}", reset_less=True)
                    m.d.sync += [rh.eq(h), rl.eq(ln), rpay.eq(p)]
                    regs.append((rh, rl, rpay))
                level = regs
                stages += 1
                if len(level) == 1:
                    break
        assert stages == tree_stages(banks), (stages, banks)
        self.hit, self.length, self.payload = level[0]
        self.latency = 2 + stages

    def _flat(self, m, level, prefix):
        """The winner in one registered stage (latency 3): bank ``b`` wins when it hits and
        beats every other bank that hits. ``beats(b, c)`` (``b < c``: ``len(b) >= len(c)``,
        so the lower bank wins a tie; ``c < b``: its complement) is a flip-flop per pair,
        updated one cycle after a length write, from that write's length compared with every
        other bank's (two compares per bank, not per pair): so the winner stage of a lookup
        sees the lengths its hit stage saw. The payload is an AND-OR of the winner's."""
        banks, lb = self.banks, self.lb
        dwe = Signal(name=f"{prefix}_dlen_we")
        daddr = Signal(len(self.len_addr), name=f"{prefix}_dlen_addr", reset_less=True)
        dlen = Signal(lb, name=f"{prefix}_dlen", reset_less=True)
        m.d.sync += [dwe.eq(self.len_we), daddr.eq(self.len_addr), dlen.eq(self.len_wdata[1:])]
        ge = [Signal(name=f"{prefix}_ge{c}") for c in range(banks)]   # new >= len(c)
        le = [Signal(name=f"{prefix}_le{c}") for c in range(banks)]   # len(c) >= new
        for c in range(banks):
            m.d.comb += [ge[c].eq(dlen >= self.lens[c][1:]), le[c].eq(self.lens[c][1:] >= dlen)]
        beat = {}
        for b in range(banks):
            for c in range(b + 1, banks):
                x = Signal(init=1, name=f"{prefix}_beat{b}_{c}")   # all lengths 0 at reset
                beat[(b, c)] = x
                with m.If(dwe & (daddr == b)):
                    m.d.sync += x.eq(ge[c])
                with m.If(dwe & (daddr == c)):
                    m.d.sync += x.eq(le[b])
        hits = [h for h, _, _ in level]
        wins = []
        for b in range(banks):
            terms = [hits[b]]
            for c in range(banks):
                if c != b:
                    bc = beat[(b, c)] if b < c else ~beat[(c, b)]
                    terms.append(~hits[c] | bc)
            w = Signal(name=f"{prefix}_win{b}")
            m.d.comb += w.eq(Cat(*terms).all())
            wins.append(w)
        rh = Signal(name=f"{prefix}_fh")
        rl = Signal(lb, name=f"{prefix}_fl", reset_less=True)
        rp = Signal(self.pw, name=f"{prefix}_fp", reset_less=True)
        m.d.sync += [rh.eq(Cat(*hits).any()),
                     rl.eq(or_tree([Mux(wins[b], level[b][1], 0) for b in range(banks)])),
                     rp.eq(or_tree([Mux(wins[b], level[b][2], 0) for b in range(banks)]))]
        self.hit, self.length, self.payload = rh, rl, rp
        self.latency = 3
