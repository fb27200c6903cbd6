"""Packet buffers: the store-and-forward ingress buffer and the cut-through egress queue.

Both keep beats in an ``amaranth.lib.memory.Memory`` with a synchronous read port whose data
register is the output register of the ``o`` stream, so the output is registered, 1 beat per
clock, and stall-correct (``valid`` held until ``ready``, payload stable while stalled).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .axis import (LEN_WIDTH, axis_signature, beat_layout, beats_for_len, checked_init,
                   pkt_layout)

__all__ = ["PacketBuffer", "EgressQueue", "MIN_FRAME"]

#: Frames shorter than this (no Ethernet header) are runts.
MIN_FRAME = 14


class _DescFIFO(wiring.Component):
    """A synchronous FIFO of ``depth`` entries with a registered output, cycle for cycle the
    behaviour of ``amaranth.lib.fifo.SyncFIFOBuffered`` (``depth - 1`` entries in a memory plus
    the output register; ``r_rdy`` two cycles after the first write), built so that its write
    side costs no LUT after ``w_en``: the write pointer and its successor are registers that
    ``w_en`` only enables (the successor is precomputed), ``w_rdy`` is one LUT after
    registers (``w_en`` and the inner read, both registered, pick one of two flags computed
    from the registered pointers the cycle before), and ``level`` and the read side are
    computed from registered pointers only (no level counter updated by ``w_en``). Neither
    ``w_en`` nor ``r_en`` reaches the write-ready flag through logic: each only sets a
    register (a reader whose ``r_en`` comes through an arbiter's grant, the ingress buffers',
    had 9 LUT levels across modules into the flag). ``w_en`` is not gated by ``w_rdy``: the
    writer must not write when ``w_rdy`` is low (the packet buffer drops the frame then; its
    formal harness asserts it)."""

    def __init__(self, *, width, depth):
        if depth < 2:
            raise ValueError(f"depth must be >= 2, not {depth!r}")
        self.width, self.depth = width, depth
        super().__init__({
            "w_data": In(width), "w_en": In(1), "w_rdy": Out(1),
            "r_data": Out(width), "r_en": In(1), "r_rdy": Out(1),
            "level": Out(range(depth + 1)),
        })
        inner = depth - 1
        self._aw = aw = (inner - 1).bit_length()      # memory of 2**aw >= inner entries
        # pointers with one extra bit: inner level = wp - rp (mod 2**(aw+1)), at most inner
        self._wp = Signal(aw + 1)
        self._wp1 = Signal(aw + 1, init=1)           # wp + 1, precomputed
        self._rp = Signal(aw + 1)
        self._rp1 = Signal(aw + 1, init=1)
        # w_rdy (the inner level now is not ``inner``) from the last cycle's inner level L:
        # ``wrote``/``read`` are the last cycle's write and inner read (registered), ``nf0``
        # = (L != inner) (no change, or one in and one out), ``nf1`` = (L != inner - 1) (one
        # in); one out leaves room. L, so both flags, come from the registered pointers.
        self._wrote = Signal()
        self._read = Signal()
        self._nf0 = Signal(init=1)
        self._nf1 = Signal(init=int(inner != 1))

    def _w_rdy(self):
        return Mux(self._wrote & ~self._read, self._nf1, self._nf0 | self._read)

    def invariant(self):
        """The pointer invariants (for formal harnesses): the precomputed successors are the
        successors, the memory holds at most ``depth - 1`` entries (now and the cycle before),
        the write-ready flags are the not-full flags of the cycle before, and ``w_rdy`` is
        not-full."""
        w, inner = self._aw + 1, self.depth - 1
        lvl = (self._wp - self._rp)[:w]
        prev = (self._wp - self._wrote - self._rp + self._read)[:w]
        return ((self._wp1 == (self._wp + 1)[:w]) & (self._rp1 == (self._rp + 1)[:w])
                & (lvl <= inner) & (prev <= inner)
                & (self._nf0 == (prev != inner)) & (self._nf1 == (prev != inner - 1))
                & (self._w_rdy() == (lvl != inner)))

    def elaborate(self, platform):
        m = Module()
        inner, aw = self.depth - 1, self._aw
        mem = m.submodules.mem = Memory(shape=self.width, depth=1 << aw, init=[])
        wport = mem.write_port()
        rport = mem.read_port(domain="sync", transparent_for=())
        wp, wp1, rp, rp1 = self._wp, self._wp1, self._rp, self._rp1
        inner_level = Signal(aw + 1)
        m.d.comb += inner_level.eq(wp - rp)
        inner_r_rdy = Signal()
        m.d.comb += [
            inner_r_rdy.eq(wp != rp),
            self.w_rdy.eq(self._w_rdy()),
            self.level.eq(inner_level + self.r_rdy),
        ]
        m.d.comb += [
            wport.addr.eq(wp[:aw]),
            wport.data.eq(self.w_data),
            wport.en.eq(self.w_en),
        ]
        with m.If(self.w_en):
            m.d.sync += [wp.eq(wp1), wp1.eq(wp1 + 1)]

        do_inner_read = Signal()
        m.d.comb += [
            do_inner_read.eq(inner_r_rdy & (~self.r_rdy | self.r_en)),
            rport.addr.eq(rp[:aw]),
            rport.en.eq(do_inner_read),
            self.r_data.eq(rport.data),
        ]
        # w_rdy is one LUT after registers; w_en and the inner read each only set a register
        m.d.sync += [
            self._wrote.eq(self.w_en),
            self._read.eq(do_inner_read),
            self._nf0.eq(inner_level != inner),
            self._nf1.eq(inner_level != inner - 1),
        ]

        with m.If(do_inner_read):
            m.d.sync += [rp.eq(rp1), rp1.eq(rp1 + 1), self.r_rdy.eq(1)]
        with m.Elif(self.r_en):
            m.d.sync += self.r_rdy.eq(0)
        return m


def _check_depth(name, value, minimum=2):
    if not isinstance(value, int) or value < minimum or value & (value - 1):
        raise ValueError(f"{name} must be a power of two >= {minimum}, not {value!r}")


class PacketBuffer(wiring.Component):
    """Store-and-forward ingress buffer with drop rules and packet length.

    A frame enters on ``i`` (plain AXI-Stream beats) and leaves on ``o`` with its length ``len``
    (bytes) and ``user`` held on every beat. A frame is offered on ``o`` only after its last
    beat was accepted and it passed the checks below; once ``o.valid`` rises for its first beat,
    the following beats are presented on consecutive cycles for as long as ``o.ready`` is high
    (no bubble inside a packet), and the first beat of the next complete packet follows the
    last beat of the previous one on the next cycle (no bubble between ready packets).

    Length: ``L = (beats - 1) * data_width/8 + k``, ``k`` = the index of the last beat's highest
    kept byte + 1 (its popcount, for the contiguous keep every AXI-Stream packer and Corundum
    produce; decoded as a thermometer, no popcount); beats other than the last are assumed full (as Corundum's MACs and FIFOs produce them). A last beat
    with ``keep == 0`` is not stored (the beat before it becomes the last), so every packet on
    ``o`` has exactly ``ceil(len / (data_width/8))`` beats, which :class:`EgressQueue` and the
    pipeline rely on. ``o`` carries the stored ``keep`` of each beat, ``last`` on the packet's
    final beat, and ``user`` = ``tuser`` of the packet's first beat.

    Drop rules, decided when the last beat is accepted, first matching reason wins (each a
    one-cycle pulse one clock after that beat; exactly one pulse per dropped frame):

    * ``drop_oversize``: the frame has more beats than ``ceil(max_frame / (data_width/8))`` or
      than ``depth_beats`` (it can never fit); its beats stop being stored from that point.
    * ``drop_runt``: ``L < 14``.
    * ``drop_oversize``: ``L > max_frame``.
    * ``drop_error``: ``error_bit`` and ``tuser[0]`` of the last beat is set.
    * ``drop_full`` (``backpressure=False`` only): a beat found the beat memory full (the rest
      of the frame is then discarded), or the descriptor FIFO (``max_packets`` entries) was full
      at the last beat. With ``backpressure=True``, ``i.ready`` is instead low while the memory
      or the descriptor FIFO is full (except for beats of a frame already known oversize, which
      are accepted and discarded, so an oversize frame can never deadlock the buffer).

    Storage: ``depth_beats`` beats of ``data``+``keep`` (576 bits at 512-bit data: eight 72-bit
    BRAM lanes). A beat's memory slot is freed when it is transferred on ``o``. Up to
    ``max_packets`` complete packets wait in the descriptor FIFO, plus the one being sent; a
    dropped frame's beats are released at once (write pointer rolled back to the frame start).

    Latency: the first beat is valid on ``o`` 3 cycles after the cycle the last beat was
    accepted on ``i`` (when the output is idle). Throughput: 1 beat per clock in and out.
    """

    @checked_init
    def __init__(self, *, data_width=512, user_width, depth_beats, max_packets=32,
                 backpressure, max_frame=9216, error_bit):
        _check_depth("depth_beats", depth_beats)
        if not isinstance(max_packets, int) or max_packets < 2:
            raise ValueError(f"max_packets must be an integer >= 2, not {max_packets!r}")
        self.bytes_per_beat = data_width // 8 if isinstance(data_width, int) else 0
        beat = beat_layout(data_width, user_width)   # validates widths
        if not isinstance(max_frame, int) or not MIN_FRAME <= max_frame:
            raise ValueError(f"max_frame must be an integer >= {MIN_FRAME}, not {max_frame!r}")
        if max_frame + self.bytes_per_beat >= 2 ** LEN_WIDTH:
            raise ValueError(f"max_frame {max_frame} + one beat does not fit the "
                             f"{LEN_WIDTH}-bit len field")
        if error_bit and user_width < 1:
            raise ValueError("error_bit needs user_width >= 1")
        self.data_width = data_width
        self.user_width = user_width
        self.depth_beats = depth_beats
        self.max_packets = max_packets
        self.backpressure = bool(backpressure)
        self.max_frame = max_frame
        self.error_bit = bool(error_bit)
        self.max_beats = -(-max_frame // self.bytes_per_beat)
        super().__init__({
            "i": In(axis_signature(beat)),
            "o": Out(axis_signature(pkt_layout(data_width, user_width))),
            "drop_runt": Out(1),
            "drop_oversize": Out(1),
            "drop_error": Out(1),
            "drop_full": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        D = self.depth_beats
        aw = D.bit_length() - 1
        bpb = self.bytes_per_beat
        lim = min(self.max_beats, D)       # a frame with more beats than this is oversize

        mem = m.submodules.mem = Memory(shape=self.data_width + bpb, depth=D, init=[])
        wp = mem.write_port()
        rp = mem.read_port(domain="sync", transparent_for=())

        desc_layout = data.StructLayout({
            "len": LEN_WIDTH, "user": self.user_width, "beats": range(D + 1)})
        dfifo = m.submodules.dfifo = _DescFIFO(width=desc_layout.size,
                                               depth=self.max_packets)
        w_desc = data.View(desc_layout, dfifo.w_data)
        r_desc = data.View(desc_layout, dfifo.r_data)

        # Pointers carry one extra bit so that full (used == D) and empty differ.
        wr_ptr = Signal(aw + 1)        # next slot to write (speculative, current frame)
        start_ptr = Signal(aw + 1)     # first slot of the current frame (= committed end)
        free_ptr = Signal(aw + 1)      # oldest slot not yet transferred on o
        rd_ptr = Signal(aw + 1)        # next slot to read from memory
        used = Signal(aw + 1)
        m.d.comb += used.eq(wr_ptr - free_ptr)
        space = Signal()
        m.d.comb += space.eq(used < D)

        # ---- write side -------------------------------------------------------------
        first = Signal(init=1)             # the next beat starts a frame
        idx = Signal(range(lim + 1))       # index of the next beat within the frame
        idx_p1 = Signal(range(lim + 2), init=1)    # idx + 1
        too_long = Signal()                # sticky: frame has more than `lim` beats
        full_q = Signal()                  # sticky: a beat was lost for lack of room
        user_q = Signal(self.user_width, reset_less=True)   # tuser of the first beat

        cur_idx = Mux(first, 0, idx)
        cur_too_long = Signal()
        m.d.comb += cur_too_long.eq((too_long & ~first) | (cur_idx >= lim))
        cur_full = Signal()
        if self.backpressure:
            m.d.comb += self.i.ready.eq((space & dfifo.w_rdy) | cur_too_long)
        else:
            m.d.comb += [
                self.i.ready.eq(1),
                cur_full.eq((full_q & ~first) | ~space),
            ]

        accept = self.i.valid & self.i.ready
        m.d.comb += [
            wp.addr.eq(wr_ptr[:aw]),
            wp.data.eq(Cat(self.i.payload.data, self.i.payload.keep)),
            wp.en.eq(accept & ~cur_too_long & ~cur_full),
        ]

        # Length without a popcount: the last beat's keep is read as a thermometer. ``thermo``
        # is its suffix OR (bit b set when any byte >= b is kept), so the beat carries
        # ``kc = highest kept byte + 1`` bytes (the popcount of a contiguous keep, as Corundum
        # produces it). The drop decision compares only single thermometer bits and flags of
        # the beat index; ``kc`` itself (a one-hot-to-binary encode) feeds the descriptor.
        keep = self.i.payload.keep
        thermo = Signal(bpb)
        for b in range(bpb):
            m.d.comb += thermo[b].eq(keep[b:].any())
        onehot = Signal(bpb)             # the highest kept byte
        m.d.comb += onehot.eq(thermo & ~(thermo >> 1))
        kc = Signal(range(bpb + 1))
        for j in range(len(kc)):
            terms = [onehot[b] for b in range(bpb) if (b + 1) >> j & 1]
            m.d.comb += kc[j].eq(Cat(*terms).any() if terms else 0)
        nonempty = thermo[0]
        idx_n = Signal(range(lim + 2))   # cur_idx + 1, without an adder on the data path
        m.d.comb += idx_n.eq(Mux(first, 1, idx_p1))
        length = Signal(LEN_WIDTH + 1)
        if bpb & (bpb - 1) == 0:
            # a beat that is not full has kc < bpb: its length is a concatenation, no adder
            lb = bpb.bit_length() - 1
            m.d.comb += length.eq(Mux(thermo[bpb - 1], Cat(Const(0, lb), idx_n),
                                      Cat(kc[:lb], cur_idx)))
        else:
            m.d.comb += length.eq(Mux(thermo[bpb - 1], idx_n * bpb, cur_idx * bpb + kc))

        # The drop decision reads the last beat's keep through a few thermometer bits (wide
        # ORs of keep, 3 LUT levels at 64 bytes) and otherwise only flags of the beat index.
        # Those flags are registers, set for the next beat whenever a beat is accepted, so the
        # decision is the ORs plus a short product after them (the index compares, the
        # ``first`` mux and the sticky oversize flag stay off that path).
        def len_below_terms(c):
            """``cur_idx * bpb + kc < c`` as ``[(index condition, thermometer bit or None)]``
            (true when some term's condition holds and its bit, if any, is clear)."""
            q, r = divmod(c, bpb)
            terms = []
            if q >= 2:
                terms.append((lambda ci, q=q: ci <= q - 2, None))
            if q >= 1:
                terms.append((lambda ci, q=q: ci == q - 1, bpb - 1 if r == 0 else None))
            if r > 0:
                terms.append((lambda ci, q=q: ci == q, r - 1))
            return terms

        runt_terms = len_below_terms(MIN_FRAME)
        over_terms = len_below_terms(self.max_frame + 1)
        conds = [cond for cond, _ in runt_terms + over_terms]
        too_long_at = lambda ci: ci >= lim                       # noqa: E731

        def flag_values(ci, sticky=None):
            """Index flags for the beat at index ``ci`` (``sticky``: the frame was already
            oversize before it): ``[too long, runt/over term conditions...]``."""
            tl = too_long_at(ci) if sticky is None else sticky | too_long_at(ci)
            return [tl] + [cond(ci) for cond in conds]

        def const_flags(ci):
            return [int(bool(v)) if isinstance(v, bool) else v for v in flag_values(ci)]

        # the flags of the beat now on ``i`` (the first beat of a frame: index 0)
        flags = [Signal(name=f"iflag{j}", init=int(bool(v)))
                 for j, v in enumerate(const_flags(0))]
        f_too_long, f_terms = flags[0], flags[1:]
        f_runt, f_over = f_terms[:len(runt_terms)], f_terms[len(runt_terms):]

        def below(terms, fl):
            return Cat(*[f & (~thermo[bit] if bit is not None else 1)
                         for (_, bit), f in zip(terms, fl)]).any() if terms else Const(0)

        cur_user = Mux(first, self.i.payload.user, user_q)
        is_over = f_too_long | ~below(over_terms, f_over)
        is_runt = ~f_too_long & below(runt_terms, f_runt)
        is_err = Const(0)
        if self.error_bit:
            is_err = self.i.payload.user[0]
        is_full = cur_full | ~dfifo.w_rdy
        idx_next = Signal(range(lim + 1))      # the next beat's index within this frame
        m.d.comb += idx_next.eq(Mux(cur_idx >= lim, lim, cur_idx + 1))
        with m.If(accept):
            with m.If(self.i.payload.last):
                m.d.sync += [f.eq(v) for f, v in zip(flags, const_flags(0))]
            with m.Else():
                m.d.sync += [f.eq(v) for f, v in
                             zip(flags, flag_values(idx_next, sticky=cur_too_long))]

        m.d.sync += [
            self.drop_runt.eq(0), self.drop_oversize.eq(0),
            self.drop_error.eq(0), self.drop_full.eq(0),
        ]
        # A last beat without any byte (tkeep == 0, legal AXI-Stream, never from Corundum) is
        # not kept, so that a packet always has ceil(len / bytes_per_beat) beats.
        m.d.comb += [
            w_desc.len.eq(length),
            w_desc.user.eq(cur_user),
            w_desc.beats.eq(Mux(nonempty, idx_n, cur_idx)),
        ]
        with m.If(accept):
            with m.If(first):
                m.d.sync += user_q.eq(self.i.payload.user)
            with m.If(self.i.payload.last):
                m.d.sync += [first.eq(1), idx.eq(0), idx_p1.eq(1), too_long.eq(0),
                             full_q.eq(0)]
                with m.If(is_runt):
                    m.d.sync += [self.drop_runt.eq(1), wr_ptr.eq(start_ptr)]
                with m.Elif(is_over):
                    m.d.sync += [self.drop_oversize.eq(1), wr_ptr.eq(start_ptr)]
                with m.Elif(is_err):
                    m.d.sync += [self.drop_error.eq(1), wr_ptr.eq(start_ptr)]
                with m.Elif(is_full):
                    m.d.sync += [self.drop_full.eq(1), wr_ptr.eq(start_ptr)]
                with m.Else():
                    m.d.comb += dfifo.w_en.eq(1)
                    m.d.sync += [wr_ptr.eq(wr_ptr + nonempty), start_ptr.eq(wr_ptr + nonempty)]
            with m.Else():
                m.d.sync += [
                    first.eq(0),
                    idx.eq(idx_next),
                    idx_p1.eq(Mux(cur_idx >= lim, lim + 1, cur_idx + 2)),
                    too_long.eq(cur_too_long),
                    full_q.eq(cur_full),
                ]
                with m.If(wp.en):
                    m.d.sync += wr_ptr.eq(wr_ptr + 1)

        # ---- read side --------------------------------------------------------------
        # The read port's data register is the output register for data/keep; last, len and
        # user are registered alongside with the same enable.
        remaining = Signal(range(D + 1))   # beats of the current packet not yet read
        cur_len = Signal(LEN_WIDTH, reset_less=True)
        cur_user_r = Signal(self.user_width, reset_less=True)
        o_last = Signal(reset_less=True)
        o_len = Signal(LEN_WIDTH, reset_less=True)
        o_user = Signal(self.user_width, reset_less=True)

        en = Signal()
        m.d.comb += [
            en.eq(~self.o.valid | self.o.ready),
            rp.en.eq(en),
            rp.addr.eq(rd_ptr[:aw]),
            self.o.payload.data.eq(rp.data[:self.data_width]),
            self.o.payload.keep.eq(rp.data[self.data_width:]),
            self.o.payload.last.eq(o_last),
            self.o.payload.len.eq(o_len),
            self.o.payload.user.eq(o_user),
        ]
        with m.If(en):
            with m.If(remaining != 0):
                m.d.sync += [
                    rd_ptr.eq(rd_ptr + 1), remaining.eq(remaining - 1),
                    self.o.valid.eq(1), o_last.eq(remaining == 1),
                    o_len.eq(cur_len), o_user.eq(cur_user_r),
                ]
            with m.Elif(dfifo.r_rdy):
                m.d.comb += dfifo.r_en.eq(1)
                m.d.sync += [
                    rd_ptr.eq(rd_ptr + 1), remaining.eq(r_desc.beats - 1),
                    cur_len.eq(r_desc.len), cur_user_r.eq(r_desc.user),
                    self.o.valid.eq(1), o_last.eq(r_desc.beats == 1),
                    o_len.eq(r_desc.len), o_user.eq(r_desc.user),
                ]
            with m.Else():
                m.d.sync += self.o.valid.eq(0)
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += free_ptr.eq(free_ptr + 1)

        # exposed for formal harnesses (not ports)
        self._dbg = dict(wr_ptr=wr_ptr, start_ptr=start_ptr, free_ptr=free_ptr, rd_ptr=rd_ptr,
                         remaining=remaining, dfifo=dfifo, first=first,
                         # invariant: the registered index flags equal their definitions
                         flags_ok=Cat(*[f == v for f, v in zip(
                             flags, flag_values(cur_idx, sticky=too_long & ~first))]).all())
        return m


class EgressQueue(wiring.Component):
    """Cut-through egress queue that admits or drops whole packets at their first beat.

    ``i.ready`` is always 1. At the first beat of each packet (the beat after a ``last``, or
    the first after reset) the packet is admitted when the free space is at least
    ``ceil(len / (data_width/8))`` beats, else all its beats are discarded and ``drop_full``
    pulses once (one clock after that first beat). Admitted beats can be read on ``o`` at once
    (cut-through): the writer is never slower than the reader because

    **assumption**: input packets are gapless (their beats arrive on consecutive cycles, as the
    non-stalling pipeline produces them) and carry ``ceil(len/(data_width/8))`` beats. A packet
    with more beats than its ``len`` announces loses the beats that find the queue full.

    Each entry stores the whole ``pkt_layout`` payload (data, keep, last, user, len).

    Latency: a beat written in cycle t is valid on ``o`` in cycle t+2 (when the output is idle).
    Throughput: 1 beat per clock in and out.
    """

    @checked_init
    def __init__(self, *, data_width=512, user_width, depth_beats):
        _check_depth("depth_beats", depth_beats)
        layout = pkt_layout(data_width, user_width)
        self.data_width = data_width
        self.user_width = user_width
        self.depth_beats = depth_beats
        self.bytes_per_beat = data_width // 8
        super().__init__({
            "i": In(axis_signature(layout)),
            "o": Out(axis_signature(layout)),
            "drop_full": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        D = self.depth_beats
        aw = D.bit_length() - 1
        layout = pkt_layout(self.data_width, self.user_width)

        mem = m.submodules.mem = Memory(shape=layout.size, depth=D, init=[])
        wp = mem.write_port()
        rp = mem.read_port(domain="sync", transparent_for=())

        wr_ptr = Signal(aw + 1)
        free_ptr = Signal(aw + 1)
        rd_ptr = Signal(aw + 1)
        used = Signal(aw + 1)
        free = Signal(aw + 1)
        m.d.comb += [used.eq(wr_ptr - free_ptr), free.eq(D - used)]

        first = Signal(init=1)
        admit = Signal()
        need = Signal(LEN_WIDTH)
        m.d.comb += need.eq(beats_for_len(self.i.payload.len, self.bytes_per_beat))
        fits = need <= free
        cur_admit = Mux(first, fits, admit)

        m.d.comb += [
            self.i.ready.eq(1),
            wp.addr.eq(wr_ptr[:aw]),
            wp.data.eq(self.i.payload.as_value()),
            wp.en.eq(self.i.valid & cur_admit & (used < D)),
        ]
        m.d.sync += self.drop_full.eq(0)
        with m.If(self.i.valid):
            m.d.sync += first.eq(self.i.payload.last)
            with m.If(first):
                m.d.sync += [admit.eq(fits), self.drop_full.eq(~fits)]
        with m.If(wp.en):
            m.d.sync += wr_ptr.eq(wr_ptr + 1)

        en = Signal()
        m.d.comb += [
            en.eq(~self.o.valid | self.o.ready),
            rp.en.eq(en),
            rp.addr.eq(rd_ptr[:aw]),
            self.o.payload.eq(rp.data),
        ]
        with m.If(en):
            with m.If(rd_ptr != wr_ptr):
                m.d.sync += [rd_ptr.eq(rd_ptr + 1), self.o.valid.eq(1)]
            with m.Else():
                m.d.sync += self.o.valid.eq(0)
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += free_ptr.eq(free_ptr + 1)

        self._dbg = dict(wr_ptr=wr_ptr, free_ptr=free_ptr, rd_ptr=rd_ptr, first=first,
                         admit=admit)
        return m
