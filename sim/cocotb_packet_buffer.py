"""cocotb testbench for PacketBuffer (run by sim/test_packet_buffer.py).

The top flattens ``i`` to ``s_axis_*`` and ``o`` to ``m_axis_*`` (+ ``m_axis_len``). The case's
parameters arrive as environment variables (PB_*). cocotbext-axi drives the input (random idle
gaps) and takes the output (random back-pressure); a per-cycle monitor (sampling on the falling
edge, when every signal has settled for the next rising edge) checks the stream rules, gapless
output, the ``len``/``user`` sideband and attributes each drop pulse to its frame. A Python
reference of the drop rules decides every frame's fate.
"""

import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

MIN_FRAME = 14
LATENCY = 3          # first beat valid this many cycles after the last input beat (idle output)


def env_int(name, default=None):
    v = os.environ.get(name)
    return int(v, 0) if v is not None else default


class Params:
    def __init__(self):
        self.dw = env_int("PB_DW")
        self.uw = env_int("PB_UW")
        self.depth = env_int("PB_DEPTH")
        self.max_packets = env_int("PB_MAXPK")
        self.bp = bool(env_int("PB_BP"))
        self.max_frame = env_int("PB_MAXF")
        self.error_bit = bool(env_int("PB_ERR"))
        self.mode = os.environ.get("PB_MODE", "random")
        self.npkt = env_int("PB_NPKT")
        self.max_len = env_int("PB_MAXLEN", self.max_frame + 200)
        self.seed = env_int("PB_SEED", 1)
        self.in_idle = float(os.environ.get("PB_IN_IDLE", "0.2"))
        self.out_stall = float(os.environ.get("PB_OUT_STALL", "0.3"))
        self.bpb = self.dw // 8
        self.lim = min(-(-self.max_frame // self.bpb), self.depth)


def reference_fate(p, length, err):
    """The buffer's drop rules for one frame, apart from `full` (which depends on occupancy)."""
    nbeats = -(-length // p.bpb)
    if nbeats > p.lim:
        return "oversize"
    if length < MIN_FRAME:
        return "runt"
    if length > p.max_frame:
        return "oversize"
    if p.error_bit and err:
        return "error"
    return "pass"


def random_length(rng, p):
    """Frame length: runts, small, medium, jumbo and oversize frames, capped at max_len."""
    buckets = [(0.06, 1, MIN_FRAME - 1), (0.39, MIN_FRAME, 128), (0.35, 129, 1518),
               (0.14, 1519, p.max_frame), (0.06, p.max_frame + 1, p.max_frame + 200)]
    buckets = [(w, lo, min(hi, p.max_len)) for w, lo, hi in buckets if lo <= p.max_len]
    r = rng.random() * sum(w for w, _, _ in buckets)
    for w, lo, hi in buckets:
        if r < w:
            break
        r -= w
    return rng.randint(lo, hi)


def pause_gen(rng, prob):
    while True:
        yield rng.random() < prob


class Monitor:
    """Per-cycle checks on the DUT's ports (sampled on the falling edge)."""

    def __init__(self, dut, p):
        self.dut, self.p = dut, p
        self.cycle = 0
        self.in_lasts = []          # cycle of each accepted last beat, in frame order
        self.drops = {}             # cycle -> reason
        self.out_pkts = []          # (len, user) per output packet
        self.out_first_cycles = []
        self.in_pkt = False
        self.prev = None            # (valid, ready, payload) of the previous cycle
        self.prev_xfer_nonlast = False
        self.committed = []         # cycles of last beats of frames that were not dropped
        self.errors = []
        self.latencies = []

    def fail(self, msg):
        if len(self.errors) < 20:
            self.errors.append(f"cycle {self.cycle}: {msg}")

    async def run(self):
        d = self.dut
        while True:
            await FallingEdge(d.clk)
            self.cycle += 1
            c = self.cycle
            if int(d.rst.value):
                continue
            # drop pulses belong to the frame whose last beat was accepted one cycle earlier
            for reason in ("runt", "oversize", "error", "full"):
                if int(getattr(d, f"drop_{reason}").value):
                    if c - 1 not in self.in_lasts[-1:]:
                        self.fail(f"drop_{reason} without a last beat the cycle before")
                    if c - 1 in self.drops:
                        self.fail("two drop pulses for one frame")
                    self.drops[c - 1] = reason
            if self.in_lasts and self.in_lasts[-1] == c - 1 and (c - 1) not in self.drops:
                self.committed.append(c - 1)
            if int(d.s_axis_tvalid.value) and int(d.s_axis_tready.value) \
                    and int(d.s_axis_tlast.value):
                self.in_lasts.append(c)
            if not self.p.bp and not int(d.s_axis_tready.value):
                self.fail("s_axis_tready low with backpressure=False")

            v = int(d.m_axis_tvalid.value)
            r = int(d.m_axis_tready.value)
            payload = None
            if v:
                payload = (int(d.m_axis_tdata.value), int(d.m_axis_tkeep.value),
                           int(d.m_axis_tlast.value), int(d.m_axis_tuser.value),
                           int(d.m_axis_len.value))
            if self.prev is not None:
                pv, pr, pp = self.prev
                if pv and not pr:
                    if not v:
                        self.fail("m_axis_tvalid dropped while stalled")
                    elif payload != pp:
                        self.fail("m_axis payload changed while stalled")
            if self.prev_xfer_nonlast and not v:
                self.fail("bubble inside a packet")
            if not v:
                # every frame committed at least LATENCY cycles ago must have started
                ready_pkts = sum(1 for cc in self.committed if cc <= c - LATENCY)
                if ready_pkts > len(self.out_first_cycles):
                    self.fail(f"bubble while a complete packet waits "
                              f"({ready_pkts} ready, {len(self.out_first_cycles)} started)")
            self.prev_xfer_nonlast = False
            if v and r:
                data, keep, last, user, length = payload
                if not self.in_pkt:
                    n = len(self.out_first_cycles)
                    self.out_first_cycles.append(c)
                    self.out_pkts.append((length, user))
                    if n < len(self.committed):
                        self.latencies.append(c - self.committed[n])
                    self.in_pkt = True
                else:
                    if (length, user) != self.out_pkts[-1]:
                        self.fail("len/user changed inside a packet")
                if last:
                    self.in_pkt = False
                else:
                    self.prev_xfer_nonlast = True
            self.prev = (v, r, payload)


@cocotb.test()
async def packet_buffer(dut):
    p = Params()
    rng = random.Random(p.seed)
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
    for x in (source, sink):
        x.log.setLevel("WARNING")
    mon = Monitor(dut, p)
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    cocotb.start_soon(mon.run())

    # ---- stimulus -------------------------------------------------------------------
    frames = []          # (payload bytes, first-beat user, error flag)
    for _ in range(p.npkt):
        length = random_length(rng, p)
        err = int(p.error_bit and rng.random() < 0.1)
        nbeats = -(-length // p.bpb)
        users = [rng.getrandbits(p.uw) for _ in range(nbeats)]
        if p.error_bit:
            users[-1] = (users[-1] & ~1) | err
        data = bytes(rng.getrandbits(8) for _ in range(length))
        frames.append((data, users, err))

    if p.mode == "overflow":
        sink.pause = True               # nothing leaves until every frame went in
    else:
        sink.set_pause_generator(pause_gen(rng, p.out_stall))
    source.set_pause_generator(pause_gen(rng, p.in_idle))

    for data, users, err in frames:
        tuser = [u for u in users for _ in range(p.bpb)][:len(data)]
        await source.send(AxiStreamFrame(data, tuser=tuser))
    await source.wait()
    await ClockCycles(dut.clk, 8)

    # ---- reference fates ------------------------------------------------------------
    ref = [reference_fate(p, len(d), e) for d, _, e in frames]
    if p.mode == "overflow":
        used = npk = 0
        for k, (d, _, _) in enumerate(frames):
            if ref[k] != "pass":
                continue
            nb = -(-len(d) // p.bpb)
            if used + nb <= p.depth and npk < p.max_packets + 1:
                used += nb
                npk += 1
            else:
                ref[k] = "full"
        sink.pause = False

    assert len(mon.in_lasts) == len(frames), (len(mon.in_lasts), len(frames))
    await ClockCycles(dut.clk, 4)
    obs = [mon.drops.get(c, "pass") for c in mon.in_lasts]
    n_pass = obs.count("pass")
    for _ in range(200000):
        if sink.count() >= n_pass:
            break
        await RisingEdge(dut.clk)
    await ClockCycles(dut.clk, 20)
    assert not mon.errors, "\n".join(mon.errors)

    # ---- compare ----------------------------------------------------------------------
    counts = {}
    for k, (o, r) in enumerate(zip(obs, ref)):
        counts[o] = counts.get(o, 0) + 1
        if r != "pass":
            assert o == r, f"frame {k} (L={len(frames[k][0])}): dropped as {o}, reference {r}"
        else:
            allowed = ("pass", "full") if (not p.bp and p.mode != "overflow") else ("pass",)
            assert o in allowed, f"frame {k} (L={len(frames[k][0])}): {o}, reference pass"
    dut._log.info("fates: %s (reference %s)", counts,
                  {f: ref.count(f) for f in set(ref)})
    expected = [frames[k] for k in range(len(frames)) if obs[k] == "pass"]
    assert sink.count() == len(expected), (sink.count(), len(expected))
    assert len(mon.out_pkts) == len(expected)
    for k, (data, users, err) in enumerate(expected):
        rx = sink.recv_nowait()
        assert bytes(rx.tdata) == data, f"output packet {k}: data mismatch (L={len(data)})"
        length, user = mon.out_pkts[k]
        assert length == len(data), f"output packet {k}: len {length} != {len(data)}"
        assert user == users[0], f"output packet {k}: user {user:#x} != {users[0]:#x}"
    if mon.latencies and p.mode != "overflow":
        dut._log.info("latency last-in -> first-out: min %d cycles", min(mon.latencies))
        assert min(mon.latencies) == LATENCY, min(mon.latencies)
    if p.mode == "overflow":
        assert counts.get("full", 0) > 0, "overflow case produced no full drop"
