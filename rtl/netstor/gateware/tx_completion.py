"""TX completion bookkeeping between Corundum's MAC-side completion tap and the host.

Why this block exists
---------------------
Corundum's TX engine hands every host packet a tag (``tuser[16:1]`` on the TX stream) and
waits for one completion ``(ts, tag)`` per packet on the ``*_tx_cpl`` stream before it frees
the descriptor. Our data plane sits between host TX and wire TX, so the wire carries a mix of

* host packets leaving on their own port ("own"): the MAC's completion belongs to the host
  and must reach it untouched (it carries the PTP timestamp);
* packets the data plane made or moved (wire RX forwarded to another port, clones, multicast
  copies to other ports, recirculated packets, host packets redirected to another port): the
  MAC also completes these, but the host never sent them under that tag on that port, so the
  completion must be swallowed;

and some host packets never reach their own port's MAC at all (dropped, redirected,
recirculated, or their own-port copy was dropped by a full egress queue). The TX engine would
wait for those forever, so the data plane *synthesises* a completion (``ts = 0``) for them.

How it works (per port ``p``; ports are independent)
----------------------------------------------------
::

    tx_start/tx_own/tx_tag --> [record FIFO: own, tag] --+
                                                         | pop one record per MAC completion
    s_cpl (MAC, always ready) ---------------------------+--> own:     [forward FIFO: ts, tag] --+
                                                              not own: swallowed (counted)       +--> m_cpl
    synth/synth_tag ----------------------------------------> [synth FIFO: tag] (ts = 0) --------+   (host)

* ``tx_start[p]`` with ``tx_start_ready[p]`` records one packet leaving on wire TX ``p`` (pulse it
  at the packet's first beat). ``tx_own[p]`` says whether its completion belongs to the host;
  ``tx_tag[p]`` is the host tag (only used for own packets: checked against the completion).
* Each completion on ``s_cpl`` pops the oldest record. **In-order assumption**: the MAC
  completes the packets of one port in the order they left, exactly one completion per packet
  (Corundum's CMAC path timestamps every frame in order). A completion whose tag differs from
  an own record's tag still follows the record (the record order is the truth) and is counted
  in ``cnt_tag_mismatch``; a completion arriving while no record is outstanding is dropped and
  counted in ``cnt_unexpected``. ``s_cpl_ready`` is always 1: the completion tap is never stalled.
* ``synth[p]`` with ``synth_ready[p]`` queues a completion ``(ts=0, tag=synth_tag[p])``.
* ``m_cpl`` merges the forward and synth FIFOs, alternating between them when both hold
  entries (round robin, so neither starves). Once ``m_cpl_valid`` is high, the presented entry is
  held until ``m_cpl_ready`` (AXI-Stream rules).

Ordering seen by the host: forwarded completions leave in record order and synthesised ones in
``synth`` order, but the two are interleaved by arrival; Corundum matches a completion to its
descriptor by tag, not by position.

Flow control: ``tx_start_ready[p]`` is low while the outstanding records plus the forwarded
completions not yet taken by the host fill ``depth`` entries, so a completion always finds room
in the forward FIFO and nothing is lost while the host side is stalled; the TX output must hold
its next packet until ``tx_start_ready`` is high again. ``synth_ready[p]`` is low while the synth
FIFO is full.

Counters (one-cycle pulses, one bit per port): ``cnt_forwarded`` (own completion accepted into
the forward FIFO), ``cnt_swallowed`` (completion of a not-own packet), ``cnt_synthesised``
(synth event accepted), ``cnt_unexpected`` (completion with no record, dropped),
``cnt_tag_mismatch`` (own completion whose tag differs from the recorded one; still forwarded).

Latency: ``s_cpl`` -> ``m_cpl`` 1 cycle (FIFO write then read) when the host is ready;
``synth`` -> ``m_cpl`` 1 cycle. Throughput: one completion per cycle per port in and out.
Resources per port: three synchronous FIFOs of ``depth`` entries (1+tag, ts+tag, tag bits).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from .axis import axis_signature, beat_layout, frame_layout, pkt_layout, tap_signature

__all__ = ["TxCompletions", "CompletionEvents", "CompletionSynth", "TxStartGate"]


class TxCompletions(wiring.Component):
    """Per-port TX completion filter and synthesiser (see the module docstring).

    Parameters
    ----------
    n_ports : int
        Number of wire ports ``P`` (Alveo: 2).
    tag_width : int
        Corundum's ``TX_TAG_WIDTH`` (16).
    ts_width : int
        Corundum's ``PTP_TS_WIDTH`` (96).
    depth : int
        Entries per port of each FIFO; also the maximum number of packets in flight between
        ``tx_start`` and the host accepting their completion.

    Vector ports are packed the way Corundum packs arrays: lane ``p`` at bits
    ``[p*W +: W]``; index them as ``port[p]``.
    """

    def __init__(self, n_ports: int, tag_width: int = 16, ts_width: int = 96, depth: int = 64):
        for name, value, low in (("n_ports", n_ports, 1), ("tag_width", tag_width, 1),
                                 ("ts_width", ts_width, 1), ("depth", depth, 2)):
            bad = None
            if not isinstance(value, int) or isinstance(value, bool):
                bad = TypeError(f"{name} must be an int, not {value!r}")
            elif value < low:
                bad = ValueError(f"{name} must be at least {low}, not {value}")
            if bad is not None:
                self._MustUse__silence = True  # never built: no "unused elaboratable" warning
                raise bad
        self.n_ports = n_ports
        self.tag_width = tag_width
        self.ts_width = ts_width
        self.depth = depth
        n = n_ports
        tags = data.ArrayLayout(tag_width, n)
        tss = data.ArrayLayout(ts_width, n)
        super().__init__({
            # packets leaving on wire TX
            "tx_start": In(n),
            "tx_own": In(n),
            "tx_tag": In(tags),
            "tx_start_ready": Out(n),
            # host packets that will get no MAC completion of their own
            "synth": In(n),
            "synth_tag": In(tags),
            "synth_ready": Out(n),
            # completions from the MAC (Corundum s_axis_sync_tx_cpl)
            "s_cpl_ts": In(tss),
            "s_cpl_tag": In(tags),
            "s_cpl_valid": In(n),
            "s_cpl_ready": Out(n),
            # completions to the host (Corundum m_axis_sync_tx_cpl)
            "m_cpl_ts": Out(tss),
            "m_cpl_tag": Out(tags),
            "m_cpl_valid": Out(n),
            "m_cpl_ready": In(n),
            # counter pulses
            "cnt_forwarded": Out(n),
            "cnt_swallowed": Out(n),
            "cnt_synthesised": Out(n),
            "cnt_unexpected": Out(n),
            "cnt_tag_mismatch": Out(n),
        })

    def elaborate(self, platform):
        m = Module()
        tw, sw, depth = self.tag_width, self.ts_width, self.depth

        for p in range(self.n_ports):
            rec = m.submodules[f"records_{p}"] = SyncFIFO(width=1 + tw, depth=depth)
            fwd = m.submodules[f"forward_{p}"] = SyncFIFO(width=sw + tw, depth=depth)
            syn = m.submodules[f"synth_{p}"] = SyncFIFO(width=tw, depth=depth)

            # -- records of packets leaving on wire TX ------------------------------------
            # rec.level + fwd.level never exceeds depth, so the forward FIFO cannot overflow.
            room = Signal(name=f"room_{p}")
            m.d.comb += room.eq(rec.level + fwd.level < depth)
            m.d.comb += [
                self.tx_start_ready[p].eq(room),
                rec.w_en.eq(self.tx_start[p] & room),
                rec.w_data.eq(Cat(self.tx_own[p], self.tx_tag[p])),
            ]

            # -- MAC completions: pop one record each -----------------------------------
            rec_own = rec.r_data[0]
            rec_tag = rec.r_data[1:]
            cpl = self.s_cpl_valid[p]
            m.d.comb += [
                self.s_cpl_ready[p].eq(1),
                rec.r_en.eq(cpl),
                fwd.w_en.eq(cpl & rec.r_rdy & rec_own),
                fwd.w_data.eq(Cat(self.s_cpl_ts[p], self.s_cpl_tag[p])),
                self.cnt_forwarded[p].eq(cpl & rec.r_rdy & rec_own),
                self.cnt_swallowed[p].eq(cpl & rec.r_rdy & ~rec_own),
                self.cnt_unexpected[p].eq(cpl & ~rec.r_rdy),
                self.cnt_tag_mismatch[p].eq(cpl & rec.r_rdy & rec_own
                                            & (rec_tag != self.s_cpl_tag[p])),
            ]

            # -- synthesised completions ------------------------------------------------
            m.d.comb += [
                self.synth_ready[p].eq(syn.w_rdy),
                syn.w_en.eq(self.synth[p]),
                syn.w_data.eq(self.synth_tag[p]),
                self.cnt_synthesised[p].eq(self.synth[p] & syn.w_rdy),
            ]

            # -- merge to the host ------------------------------------------------------
            # sel: 0 = forward FIFO, 1 = synth FIFO. While an entry is presented and not
            # taken (hold), the choice is frozen so the payload stays stable.
            hold = Signal(name=f"hold_{p}")
            held_sel = Signal(name=f"held_sel_{p}")
            last_sel = Signal(name=f"last_sel_{p}")
            sel = Signal(name=f"sel_{p}")
            with m.If(hold):
                m.d.comb += sel.eq(held_sel)
            with m.Elif(fwd.r_rdy & syn.r_rdy):
                m.d.comb += sel.eq(~last_sel)
            with m.Else():
                m.d.comb += sel.eq(~fwd.r_rdy)
            valid = Signal(name=f"valid_{p}")
            m.d.comb += valid.eq(Cat(fwd.r_rdy, syn.r_rdy).bit_select(sel, 1))
            take = valid & self.m_cpl_ready[p]
            m.d.comb += [
                self.m_cpl_valid[p].eq(valid),
                fwd.r_en.eq(take & ~sel),
                syn.r_en.eq(take & sel),
            ]
            with m.If(sel):
                m.d.comb += [
                    self.m_cpl_ts[p].eq(Const(0, sw)),
                    self.m_cpl_tag[p].eq(syn.r_data),
                ]
            with m.Else():
                m.d.comb += [
                    self.m_cpl_ts[p].eq(fwd.r_data[:sw]),
                    self.m_cpl_tag[p].eq(fwd.r_data[sw:]),
                ]
            m.d.sync += [
                hold.eq(valid & ~self.m_cpl_ready[p]),
                held_sel.eq(sel),
            ]
            with m.If(take):
                m.d.sync += last_sel.eq(sel)

        return m


class CompletionEvents(wiring.Component):
    """Where the synthesised completions of one port come from: the datapath reports each
    event that leaves a host packet without a completion from its own port's MAC, with the
    packet's tag, as a one-cycle pulse on ``ev[i]`` / ``tag[i]`` (``n`` sources); this block
    keeps at most one pending event per source and offers the lowest-numbered pending one on
    ``o`` (a stream of tags, to :class:`TxCompletions`' synth input). An event that finds its
    source's slot still pending (and not taken in that cycle) is lost and pulses ``lost``
    (counted by the datapath). Latency: 1 cycle from an event to ``o.valid``."""

    def __init__(self, n, tag_width=16):
        self.n = n
        super().__init__({"ev": In(n), "tag": In(data.ArrayLayout(tag_width, n)),
                          "o": Out(stream.Signature(tag_width)), "lost": Out(1)})

    def elaborate(self, platform):
        m = Module()
        n = self.n
        pend = [Signal(name=f"pend{i}") for i in range(n)]
        ptag = [Signal(len(self.o.payload), name=f"ptag{i}", reset_less=True) for i in range(n)]
        sel = Signal(range(n + 1))
        m.d.comb += sel.eq(n)
        for i in reversed(range(n)):
            with m.If(pend[i]):
                m.d.comb += sel.eq(i)
        m.d.comb += self.o.valid.eq(sel != n)
        for i in range(n):
            with m.If(sel == i):
                m.d.comb += self.o.payload.eq(ptag[i])
        lost = Signal(n)
        for i in range(n):
            taken = self.o.valid & self.o.ready & (sel == i)
            with m.If(taken):
                m.d.sync += pend[i].eq(0)
            with m.If(self.ev[i]):
                with m.If(~pend[i] | taken):
                    m.d.sync += [pend[i].eq(1), ptag[i].eq(self.tag[i])]
                with m.Else():
                    m.d.comb += lost[i].eq(1)
        m.d.comb += self.lost.eq(lost.any())
        return m


class CompletionSynth(wiring.Component):
    """The synthesised completions of host TX port ``port`` (input ``n_ports + port``): which
    of its packets get no completion from their own port's MAC, and their tags.

    Ports (``tap_*``: :func:`~.axis.tap_signature`, watched, not consumed):

    * ``host_in``: the host TX input stream (``tx_user`` bits of tuser, tag at ``[16:1]``);
      the tag of its latest first beat is kept for ``host_drop``;
    * ``host_drop``: the input buffer dropped a host packet (runt or oversize) -> event (c);
    * ``beat``: the delayed frame (:func:`~.axis.frame_layout`) entering the deparsers, and
      ``own_copy``: the wire deparser of ``port`` takes this packet as its own copy. A first
      beat from the host port without ``own_copy`` -> event (a), the packet leaves the
      pipeline without a copy to its own wire port;
    * with ``miss_events`` = n (the copy lane, where a packet's beats pass once per copy, not
      once per packet): no ``beat``/``own_copy``; instead ``miss[i]`` = ``{tag, valid}``,
      event (a) as the data path finds it (n sources), and ``queue_first`` marks the first
      beats on ``queue``;
    * ``queue``: the stream into the wire egress queue of ``port`` (user = ``{own, tx tuser}``)
      and ``queue_drop``: that queue's ``drop_full`` pulse (one cycle after the refused first
      beat). A drop of an own packet -> event (b), with the tag of the packet whose first beat
      the queue saw last;
    * ``o``: the tags to synthesise a completion for (to :class:`TxCompletions`' ``synth``);
      ``lost``: an event found its slot still pending (:class:`CompletionEvents`).

    Latency: 1 cycle from an event to ``o.valid`` (event (b): 2 cycles from the first beat;
    the data path's ``miss`` events: 2 cycles, they are registered on entry).
    Throughput: one event per source per clock while ``o`` is taken.
    """

    def __init__(self, *, n_ports, port, data_width=512, user_width=97, tx_user=17,
                 tag_width=16, miss_events=0):
        self.n_ports, self.port, self.tx_user = n_ports, port, tx_user
        self.tag_width = tag_width
        self.miss_events = miss_events
        members = {
            "host_in": In(tap_signature(beat_layout(data_width, tx_user))),
            "host_drop": In(1),
            "queue": In(tap_signature(pkt_layout(data_width, tx_user + 1))),
            "queue_drop": In(1),
            "o": Out(stream.Signature(tag_width)),
            "lost": Out(1),
        }
        if miss_events:
            members["queue_first"] = In(1)
            members["miss"] = In(1 + tag_width).array(miss_events)
        else:
            members["beat"] = In(tap_signature(frame_layout(data_width, user_width)))
            members["own_copy"] = In(1)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        tw, k = self.tag_width, self.n_ports + self.port
        src = self.host_in
        tag_in = Signal(tw, name="host_first_tag", reset_less=True)
        src_in = Signal(name="host_in_pkt")
        with m.If(src.valid & src.ready):
            m.d.sync += src_in.eq(~src.payload.last)
            with m.If(~src_in):
                m.d.sync += tag_in.eq(src.payload.user[1:1 + tw])
        if self.miss_events:
            q_first = self.queue_first
        else:
            b = self.beat.payload
            q_first = self.beat.valid & b.first
        # the queue's drop pulse comes one cycle after the first beat it refused; remember the
        # tag and ownership of the packet whose first beat it saw last
        q_tag = Signal(tw, name="queue_tag", reset_less=True)
        q_own = Signal(name="queue_own")
        with m.If(self.queue.valid & q_first):
            m.d.sync += [q_tag.eq(self.queue.payload.user[1:1 + tw]),
                         q_own.eq(self.queue.payload.user[self.tx_user])]
        if self.miss_events:
            # (a), found by the data path: {tag, valid} per source, registered here first. The
            # data path finds them from other blocks' outputs (the copy lane's stale test is 4
            # LUT levels, the data path's compares 3 more), so taking them straight into the
            # pending slots was 9 LUT levels across modules (whole-core run at 2fb8dd6). These
            # events reach ``o`` one cycle later than (b) and (c); every source keeps its own
            # slot, and the host matches completions by tag, so only the timing moves.
            events = []
            for i, ev in enumerate(self.miss):
                ev_r = Signal(name=f"miss_valid_{i}")
                tag_r = Signal(tw, name=f"miss_tag_{i}", reset_less=True)
                m.d.sync += [ev_r.eq(ev[0]), tag_r.eq(ev[1:])]
                events.append((ev_r, tag_r))
        else:
            # (a) leaves the pipeline without a copy to its own wire port
            events = [(q_first & (b.port == k) & ~self.own_copy, b.user[1:1 + tw])]
        events += [
            # (b) its own-port copy found the egress queue full
            (self.queue_drop & q_own, q_tag),
            # (c) dropped by its input buffer (runt or oversize)
            (self.host_drop, tag_in),
        ]
        ce = m.submodules.events = CompletionEvents(len(events), tw)
        for i, (ev, tag) in enumerate(events):
            m.d.comb += [ce.ev[i].eq(ev), ce.tag[i].eq(tag)]
        wiring.connect(m, ce.o, wiring.flipped(self.o))
        m.d.comb += self.lost.eq(ce.lost)
        return m


class TxStartGate(wiring.Component):
    """Between a wire TX egress queue and the MAC: holds a packet's first beat until
    :class:`TxCompletions` can record it, and reports the record.

    Ports: ``i`` -> ``o`` (:func:`~.axis.axis_signature` of :func:`~.axis.pkt_layout` with
    ``user = {own (1), tx tuser}``), passed through except that a first beat is neither offered
    on ``o`` nor taken from ``i`` while ``start_ready`` is low; ``start`` pulses when a first
    beat transfers on ``o``, with ``own`` and ``tag`` (``user[16:1]``) of that packet (to
    ``TxCompletions.tx_start/tx_own/tx_tag``, ``start_ready`` from ``tx_start_ready``).

    Latency: 0 cycles (combinational; one ``in packet`` register). Throughput: one beat per
    clock.
    """

    def __init__(self, *, data_width=512, tx_user=17, tag_width=16):
        self.tx_user, self.tag_width = tx_user, tag_width
        layout = pkt_layout(data_width, tx_user + 1)
        super().__init__({
            "i": In(axis_signature(layout)), "o": Out(axis_signature(layout)),
            "start": Out(1), "own": Out(1), "tag": Out(tag_width), "start_ready": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        i, o = self.i, self.o
        in_pkt = Signal()
        start_ok = in_pkt | self.start_ready
        fire = i.valid & start_ok & o.ready
        with m.If(fire):
            m.d.sync += in_pkt.eq(~i.payload.last)
        m.d.comb += [
            o.valid.eq(i.valid & start_ok), o.payload.eq(i.payload),
            i.ready.eq(o.ready & start_ok),
            self.start.eq(fire & ~in_pkt),
            self.own.eq(i.payload.user[self.tx_user]),
            self.tag.eq(i.payload.user[1:1 + self.tag_width]),
        ]
        return m
