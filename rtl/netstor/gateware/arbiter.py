"""Ingress arbiter: packet-atomic round robin from the ingress buffers into the pipeline."""

from amaranth.hdl import Array, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .axis import PORT_WIDTH, arb_layout, axis_signature, checked_init, pkt_layout

__all__ = ["IngressArbiter"]


class IngressArbiter(wiring.Component):
    """Packet-atomic round-robin arbiter over ``n_inputs`` packet streams.

    Inputs ``i[k]`` carry ``pkt_layout`` beats (typically from :class:`PacketBuffer`, which
    presents each packet gapless once complete). The output ``o`` carries ``arb_layout``: the
    same beat plus ``port = k``.

    Grant rules: when no packet is in progress, the input with a valid beat that comes first
    after the last granted input (cyclically) is granted; all its beats then pass until the
    beat with ``last`` has transferred, and no other input is ready meanwhile (packet
    atomicity). The grant for the next packet is made in the cycle after the last beat was
    taken, which is also the cycle that beat sits in the output register, so there is no idle
    output cycle between packets when any input (the same one included) has a packet ready.
    Bounded wait: an input with a packet ready waits for at most ``n_inputs - 1`` packets of
    other inputs (the input just served has the lowest priority).

    The output is registered (valid/ready handshake implemented correctly: ``o.valid`` held
    until ``o.ready``, payload stable while stalled, inputs back-pressured while stalled). It is
    meant to feed the non-stalling pipeline, which keeps ``o.ready == 1``; a beat-gapless
    packet on the output then follows from the input's gapless presentation.

    ``hold``: in a cycle it is 1, no new packet is granted (a packet in progress goes on), so
    the output idles for a cycle between packets; blocks that need a cycle without packets
    (register banks serving the host, :attr:`netstor.lang.element.Element.slot_request`) ask
    for it this way. An input's bounded wait grows by the held cycles.

    Latency: 1 cycle (a beat taken from ``i[k]`` in cycle t is valid on ``o`` in cycle t+1).
    Throughput: 1 beat per clock.
    """

    @checked_init
    def __init__(self, n_inputs, data_width=512, user_width=1):
        if not isinstance(n_inputs, int) or not 1 <= n_inputs <= 2 ** PORT_WIDTH:
            raise ValueError(f"n_inputs must be an integer in 1..{2 ** PORT_WIDTH}, "
                             f"not {n_inputs!r}")
        self.n_inputs = n_inputs
        self.data_width = data_width
        self.user_width = user_width
        super().__init__({
            "i": In(axis_signature(pkt_layout(data_width, user_width))).array(n_inputs),
            "o": Out(axis_signature(arb_layout(data_width, user_width))),
            "hold": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.n_inputs

        busy = Signal()                            # a packet is in progress from `grant`
        grant = Signal(range(max(n, 2)))
        last_grant = Signal(range(max(n, 2)), init=n - 1)   # input 0 first after reset

        valids = [self.i[k].valid for k in range(n)]
        pick = Signal(range(max(n, 2)))
        any_valid = Signal()
        m.d.comb += any_valid.eq(sum(v for v in valids) != 0)
        with m.Switch(last_grant):
            for lg in range(n):
                with m.Case(lg):
                    order = [(lg + 1 + j) % n for j in range(n)]
                    # later assignments win: go from lowest to highest priority
                    for k in reversed(order):
                        with m.If(valids[k]):
                            m.d.comb += pick.eq(k)

        sel = Signal(range(max(n, 2)))
        sel_valid = Signal()
        m.d.comb += [
            sel.eq(Mux(busy, grant, pick)),
            sel_valid.eq(Mux(busy, Array(valids)[grant], any_valid & ~self.hold)),
        ]
        payloads = Array(self.i[k].payload for k in range(n))
        sel_payload = payloads[sel]

        en = Signal()
        m.d.comb += en.eq(~self.o.valid | self.o.ready)
        for k in range(n):
            m.d.comb += self.i[k].ready.eq(en & (sel == k) & (busy | ~self.hold))

        take = en & sel_valid
        # the output beat is data (no reset); only o.valid resets
        o_beat = Signal.like(self.o.payload, name="o_beat", reset_less=True)
        m.d.comb += self.o.payload.eq(o_beat)
        with m.If(en):
            m.d.sync += [
                self.o.valid.eq(sel_valid),
                o_beat.data.eq(sel_payload.data),
                o_beat.keep.eq(sel_payload.keep),
                o_beat.last.eq(sel_payload.last),
                o_beat.user.eq(sel_payload.user),
                o_beat.len.eq(sel_payload.len),
                o_beat.port.eq(sel),
            ]
        with m.If(take):
            m.d.sync += [
                last_grant.eq(sel),
                grant.eq(sel),
                busy.eq(~sel_payload.last),
            ]
        # exposed for formal harnesses (not ports)
        self._dbg = dict(busy=busy, grant=grant, last_grant=last_grant)
        return m
