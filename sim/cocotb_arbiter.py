"""cocotb testbench for IngressArbiter (run by sim/test_arbiter.py).

The top puts one back-pressured PacketBuffer in front of each arbiter input (the real
configuration: the buffers supply ``len`` and gapless complete packets) and flattens the
streams: ``s<k>_axis_*`` are the buffer inputs, ``m_axis_*`` (+ ``m_axis_len``,
``m_axis_port``) the arbiter output, and ``arb_valid``/``arb_ready``/``arb_last`` (one bit per
input) the arbiter's input handshakes, which the monitor watches to measure waits.
"""

import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource


def env(name, default=None):
    return os.environ.get(name, default)


def pause_gen(rng, prob):
    while True:
        yield rng.random() < prob


class Monitor:
    def __init__(self, dut, n):
        self.dut, self.n = dut, n
        self.cycle = 0
        self.errors = []
        self.in_pkt = [False] * n          # arbiter input k is inside a packet
        self.wait = [0] * n                # packets of others granted while k waited
        self.max_wait = [0] * n
        self.out_pkts = []                 # (port, len, user) per output packet
        self.out_in_pkt = False
        self.prev = None
        self.prev_xfer_nonlast = False
        self.grants = 0

    def fail(self, msg):
        if len(self.errors) < 20:
            self.errors.append(f"cycle {self.cycle}: {msg}")

    async def run(self):
        d, n = self.dut, self.n
        while True:
            await FallingEdge(d.clk)
            self.cycle += 1
            if int(d.rst.value):
                continue
            av, ar, al = int(d.arb_valid.value), int(d.arb_ready.value), int(d.arb_last.value)
            ov, orr = int(d.m_axis_tvalid.value), int(d.m_axis_tready.value)
            xfer = av & ar
            if xfer & (xfer - 1):
                self.fail(f"two inputs transfer at once ({xfer:#x})")
            mid = [k for k in range(n) if self.in_pkt[k]]
            if mid and (ar & ~(1 << mid[0])):
                self.fail(f"input {mid[0]} is mid-packet but ready={ar:#x}")
            # no idle cycle: when the output register can take a beat and an input offers one
            if av and (orr or not ov) and not xfer:
                if not mid or (av >> mid[0]) & 1:
                    self.fail(f"idle: inputs valid {av:#x}, nothing taken")
            for k in range(n):
                if (xfer >> k) & 1:
                    if not self.in_pkt[k]:
                        self.grants += 1
                        self.max_wait[k] = max(self.max_wait[k], self.wait[k])
                        self.wait[k] = 0
                        for j in range(n):
                            if j != k and (av >> j) & 1 and not self.in_pkt[j]:
                                self.wait[j] += 1
                    self.in_pkt[k] = not (al >> k) & 1
            for k in range(n):
                if self.wait[k] > n - 1:
                    self.fail(f"input {k} waited {self.wait[k]} packets")

            payload = None
            if ov:
                payload = (int(d.m_axis_tdata.value), int(d.m_axis_tkeep.value),
                           int(d.m_axis_tlast.value), int(d.m_axis_tuser.value),
                           int(d.m_axis_len.value), int(d.m_axis_port.value))
            if self.prev is not None:
                pv, pr, pp = self.prev
                if pv and not pr and (not ov or payload != pp):
                    self.fail("output changed while stalled")
            if self.prev_xfer_nonlast and not ov:
                self.fail("bubble inside an output packet")
            self.prev_xfer_nonlast = False
            if ov and orr:
                _, _, last, user, length, port = payload
                if not self.out_in_pkt:
                    self.out_pkts.append((port, length, user))
                    self.out_in_pkt = True
                elif self.out_pkts[-1] != (port, length, user):
                    self.fail("port/len/user changed inside an output packet")
                if last:
                    self.out_in_pkt = False
                else:
                    self.prev_xfer_nonlast = True
            self.prev = (ov, orr, payload)


@cocotb.test()
async def arbiter(dut):
    n = int(env("ARB_N"))
    dw = int(env("ARB_DW"))
    uw = int(env("ARB_UW"))
    npkt = int(env("ARB_NPKT"))          # per input
    maxlen = int(env("ARB_MAXLEN"))
    in_idle = float(env("ARB_IN_IDLE"))
    out_stall = float(env("ARB_OUT_STALL"))
    rng = random.Random(int(env("ARB_SEED", "1")))
    bpb = dw // 8

    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    sources = [AxiStreamSource(AxiStreamBus.from_prefix(dut, f"s{k}_axis"), dut.clk, dut.rst)
               for k in range(n)]
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
    for x in sources + [sink]:
        x.log.setLevel("WARNING")
    mon = Monitor(dut, n)
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    cocotb.start_soon(mon.run())

    if out_stall > 0:
        sink.set_pause_generator(pause_gen(rng, out_stall))
    expected = [[] for _ in range(n)]
    for k, src in enumerate(sources):
        if in_idle > 0:
            src.set_pause_generator(pause_gen(rng, in_idle))
        for _ in range(npkt):
            length = rng.randint(14, maxlen) if rng.random() < 0.7 else rng.randint(14, 80)
            data = bytes(rng.getrandbits(8) for _ in range(length))
            user = rng.getrandbits(uw)
            expected[k].append((data, user))
            await src.send(AxiStreamFrame(data, tuser=user))

    total = n * npkt
    for _ in range(400000):
        if sink.count() >= total:
            break
        await RisingEdge(dut.clk)
    await ClockCycles(dut.clk, 10)
    assert not mon.errors, "\n".join(mon.errors)
    assert sink.count() == total, (sink.count(), total)
    assert len(mon.out_pkts) == total
    seen = [0] * n
    for k in range(total):
        rx = sink.recv_nowait()
        port, length, user = mon.out_pkts[k]
        assert port < n, port
        data, exp_user = expected[port][seen[port]]
        seen[port] += 1
        assert bytes(rx.tdata) == data, f"output packet {k} (port {port}): data mismatch"
        assert length == len(data), (k, length, len(data))
        assert user == exp_user, (k, user, exp_user)
    dut._log.info("max wait (packets of other inputs) per input: %s; bound %d",
                  mon.max_wait, n - 1)
    if env("ARB_EXPECT_TIGHT") == "1":
        assert max(mon.max_wait) == n - 1, mon.max_wait
