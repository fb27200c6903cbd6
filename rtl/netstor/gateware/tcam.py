"""A ternary match engine in RAM (split-key bitmap TCAM) and a pipelined lowest-index
priority encoder.

Lookup. The ``kw``-bit key is cut into chunks of ``chunk`` bits (the last one may be
narrower). Chunk ``c`` addresses RAM ``c`` (``2**chunk`` words of ``n`` bits): bit ``i`` of the
word at address ``a`` is 1 when entry ``i`` is valid and accepts ``a`` in that chunk, i.e.
``(a ^ value_c) & mask_c == 0``. A key matches entry ``i`` when bit ``i`` is 1 in every chunk's
word; the AND of the chunk words is the match vector, and the lowest set bit wins. Cycle 0:
every chunk RAM reads (synchronous read port, the RAM's own address register); cycle 1: the
AND and the first level of the priority tree (groups of ``FANIN``), registered; each further
level one cycle, the last one combinational (it is meant to drive a RAM address: the action
RAM's address register is that level's register). ``index``/``hit`` are valid ``latency``
cycles after the key.

Update (host writes never stall lookups: they use the RAMs' second port). ``upd_req`` held
with ``upd_index``, ``upd_value``, ``upd_mask``, ``upd_valid`` stable: pass 1 clears bit
``upd_index`` at every address of every chunk RAM (read-modify-write, 2 cycles per address),
then ``upd_mid`` pulses for one cycle (entry ``upd_index`` matches nothing now: the owner
rewrites what belongs to the entry, e.g. its action word), then pass 2 sets the entry's bits
from the new value/mask (skipped for an invalid entry) and ``upd_done`` pulses. A lookup
therefore sees the old entry, no entry, or the new entry, never a mix of the two; and a lookup
that matched the old entry has read its action long before ``upd_mid`` (a pass takes at least
``2 * 2**chunk`` cycles, more than the lookup latency).
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Signal
from amaranth.lib.memory import Memory

__all__ = ["FANIN", "priority_levels", "first_set", "Tcam"]

#: children per priority-tree node (8: a node is ~4 LUT levels)
FANIN = 8


def priority_levels(n, fanin=FANIN):
    """Levels of the priority tree over ``n`` bits (at least 1)."""
    lv, groups = 0, n
    while True:
        groups = -(-groups // fanin)
        lv += 1
        if groups <= 1:
            return lv


def _node(children, width, sb):
    """One tree node over ``children`` = ``[(found, index)]`` (``index`` ``width`` bits, None
    when ``width`` is 0): ``(found, index)`` of the lowest child that found something, the
    child's number (``sb`` bits) above its index bits."""
    found = Const(0, 1)
    before = Const(0, 1)
    idx = Const(0, width + sb)
    for j, (f, sub) in enumerate(children):
        first = f & ~before
        val = Cat(sub, Const(j, sb)) if width else Const(j, sb)
        idx = idx | (val & first.replicate(width + sb))
        before = before | f
        found = found | f
    return found, idx


def first_set(m, bits, *, prefix, fanin=FANIN):
    """Lowest set bit of ``bits`` (a list of 1-bit values) as a pipelined tree of ``fanin``-way
    nodes. Every level but the last is registered. Returns ``(found, index, regs)``: ``index``
    is the lowest set bit's position (undefined when ``found`` is 0), ``regs`` the number of
    registers on the path."""
    sb = max(1, (fanin - 1).bit_length())
    level = [(b, None) for b in bits]
    width, regs, lv = 0, 0, 0
    while True:
        nxt = [_node(level[i:i + fanin], width, sb) for i in range(0, len(level), fanin)]
        width += sb
        lv += 1
        if len(nxt) == 1:
            return nxt[0][0], nxt[0][1], regs
        level = []
        for gi, (f, idx) in enumerate(nxt):
            rf = Signal(name=f"{prefix}_l{lv}f{gi}", reset_less=True)
            ri = Signal(width, name=f"{prefix}_l{lv}i{gi}", reset_less=True)
            m.d.sync += [rf.eq(f), ri.eq(idx)]
            level.append((rf, ri))
        regs += 1


class Tcam:
    """Build the engine into module ``m`` (see the module docstring). ``key``: the lookup key
    (a ``kw``-bit value, sampled in the cycle it is given). After construction: ``hit``,
    ``index`` (valid ``latency`` cycles after the key; combinational from the last tree level)
    and the update handshake ``upd_req``/``upd_index``/``upd_value``/``upd_mask``/``upd_valid``
    (inputs, to drive) and ``upd_mid``/``upd_done`` (one-cycle pulses)."""

    def __init__(self, m, *, n, kw, key, chunk=5, prefix, fanin=FANIN):
        self.n, self.kw, self.chunk = n, kw, chunk
        #: the chunk RAMs (chunk 0 first), for harnesses that inspect them
        self.mems = []
        ib = max(1, (n - 1).bit_length())
        self.upd_req = Signal(name=f"{prefix}_upd_req")
        self.upd_index = Signal(ib, name=f"{prefix}_upd_index")
        self.upd_value = Signal(kw, name=f"{prefix}_upd_value")
        self.upd_mask = Signal(kw, name=f"{prefix}_upd_mask")
        self.upd_valid = Signal(name=f"{prefix}_upd_valid")
        self.upd_mid = Signal(name=f"{prefix}_upd_mid")
        self.upd_done = Signal(name=f"{prefix}_upd_done")

        chunks = [(lo, min(chunk, kw - lo)) for lo in range(0, kw, chunk)]
        self.chunks = chunks
        abits = chunk
        # update state: pass (0 idle, 1 clear, 2 set), address, phase (0 read, 1 write)
        pas = Signal(2, name=f"{prefix}_upd_pass")
        ua = Signal(abits, name=f"{prefix}_upd_addr")
        ph = Signal(name=f"{prefix}_upd_phase")
        self.state = (pas, ua, ph)
        # one-hot of the entry being updated (decoded once per update, registered)
        onehot = Signal(n, name=f"{prefix}_upd_onehot", reset_less=True)
        self.onehot = onehot
        m.d.sync += onehot.eq(Const(1, n) << self.upd_index)

        words = []
        for c, (lo, w) in enumerate(chunks):
            mem = Memory(shape=n, depth=1 << w, init=[])
            m.submodules[f"{prefix}_chunk{c}"] = mem
            self.mems.append(mem)
            rp = mem.read_port()
            m.d.comb += rp.addr.eq(key[lo:lo + w])
            words.append(rp.data)
            up = mem.read_port()
            wp = mem.write_port()
            a = ua[:w]
            m.d.comb += [up.addr.eq(a), wp.addr.eq(a)]
            m.d.comb += up.en.eq((pas != 0) & ~ph)
            # the new bit of this chunk at address a: the entry accepts a (pass 2) or 0 (pass 1)
            v, mk = self.upd_value[lo:lo + w], self.upd_mask[lo:lo + w]
            acc = Signal(name=f"{prefix}_c{c}_acc")
            m.d.comb += acc.eq((pas == 2) & self.upd_valid & (((a ^ v) & mk) == 0))
            m.d.comb += [
                wp.data.eq((up.data & ~onehot) | (onehot & acc.replicate(n))),
                wp.en.eq(((pas != 0) & ph).replicate(n)),
            ]

        # cycle 1: AND of the chunk words -> match vector -> priority tree
        anded = Const(-1, n) if not words else words[0]
        for wd in words[1:]:
            anded = anded & wd
        match = Signal(n, name=f"{prefix}_match")
        m.d.comb += match.eq(anded)
        found, index, regs = first_set(m, [match[i] for i in range(n)], prefix=f"{prefix}_pe",
                                       fanin=fanin)
        self.hit = Signal(name=f"{prefix}_hit")
        self.index = Signal(ib, name=f"{prefix}_index")
        m.d.comb += [self.hit.eq(found), self.index.eq(index[:ib])]
        self.latency = 1 + regs

        # update sequencer
        last = ua == (1 << abits) - 1
        m.d.comb += [self.upd_mid.eq(0), self.upd_done.eq(0)]
        started = Signal(name=f"{prefix}_upd_started")
        self.started = started
        with m.If(self.upd_req & (pas == 0) & ~started):
            # one cycle for the one-hot register, then pass 1
            m.d.sync += [started.eq(1), ua.eq(0), ph.eq(0)]
        with m.Elif(started & (pas == 0)):
            m.d.sync += [pas.eq(1), started.eq(0)]
        with m.Elif(pas != 0):
            m.d.sync += ph.eq(~ph)
            with m.If(ph):
                m.d.sync += ua.eq(ua + 1)
                with m.If(last):
                    with m.If(pas == 1):
                        m.d.comb += self.upd_mid.eq(1)
                        with m.If(self.upd_valid):
                            m.d.sync += pas.eq(2)
                        with m.Else():
                            m.d.sync += pas.eq(0)
                            m.d.comb += self.upd_done.eq(1)
                    with m.Else():
                        m.d.sync += pas.eq(0)
                        m.d.comb += self.upd_done.eq(1)
