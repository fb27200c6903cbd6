"""Packet and byte counts of a stream, for the host's per-port counters."""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .axis import LEN_WIDTH, tap_signature

__all__ = ["PacketCounter"]


class PacketCounter(wiring.Component):
    """Counter pulses for the packets a stream carries, by input port.

    Port ``tap`` (:func:`~.axis.tap_signature` of ``layout``, which has ``last`` and ``len``,
    and ``port`` when ``n_ports > 1``): the stream watched. A packet's first beat is the first
    transfer (``valid & ready``) after a ``last`` (or reset). Outputs, in that beat's cycle
    (combinational): ``pkts[k]`` = 1 and ``bytes[k]`` = ``len`` for the port ``k`` it came from
    (always 0 with ``n_ports == 1``), else 0.

    Latency: 0 cycles (one flag register, ``in packet``). Throughput: one beat per clock.
    """

    def __init__(self, layout, n_ports=1):
        self.n_ports = n_ports
        super().__init__({
            "tap": In(tap_signature(layout)),
            "pkts": Out(n_ports),
            "bytes": Out(data.ArrayLayout(LEN_WIDTH, n_ports)),
        })

    def elaborate(self, platform):
        m = Module()
        beat = self.tap.payload
        fire = self.tap.valid & self.tap.ready
        in_pkt = Signal()
        with m.If(fire):
            m.d.sync += in_pkt.eq(~beat.last)
        first = fire & ~in_pkt
        for k in range(self.n_ports):
            mine = first if self.n_ports == 1 else first & (beat.port == k)
            m.d.comb += [self.pkts[k].eq(mine), self.bytes[k].eq(Mux(mine, beat.len, 0))]
        return m
