"""Replay of a cluster-simulator switch trace on the RTL (``netstor.cluster.trace``).

The trace holds the switch's configuration as control-plane writes, and every frame the
simulated switch took in (time, input port, the ``meta.arrival`` it was stamped with) with the
outputs the simulator's data plane (the compiled model) produced for it. The test writes the
configuration through the AXI-Lite window, feeds the frames on the wire RX ports at the cycles
their arrival stamps say (the frame's last beat enters the store-and-forward input buffer
``INPUT_CYCLES`` before the parser stamps it), and compares what leaves every output with the
trace's outputs, byte for byte, as multisets per port. The number of frames that did not
match is written to ``NETSTOR_REPLAY_RESULT`` (JSON) and must be 0.

Frames the simulator fed back to back (the trace's stamps a frame's beats apart) may arrive a
few cycles apart in the RTL when two ports contend; programs that time packets (NetRS's RV,
256-cycle ticks) would then see another tick only at a tick boundary, which the result reports
as ``timing_sensitive`` (frames whose stamp lies within a few cycles of a tick boundary).
"""
from __future__ import annotations

import json
import os
from collections import Counter, defaultdict

import cocotb
from cocotb.triggers import ClockCycles

from netstor.sim.core_env import CoreEnv

#: cycles from the first beat offered on wire RX (idle input) to the parser's stamp, less the
#: frame's beats (the buffer stores the whole frame first)
INPUT_CYCLES = int(os.environ.get("NETSTOR_REPLAY_INPUT_CYCLES", "6"))


@cocotb.test()
async def test_replay(dut):
    trace = json.loads(open(os.environ["NETSTOR_REPLAY"]).read())
    env = CoreEnv(dut, seed=1)
    assert trace["n_ports"] == env.P, "the trace's switch has another port count"
    await env.reset()
    await env.apply([tuple(w) for w in trace["writes"]])
    for name, value in trace["regs"]:
        await env.reg_write(name, value)
    frames = trace["frames"]
    expected = defaultdict(Counter)
    for fr in frames:
        for o in fr["outputs"]:
            expected[o["port"]][bytes.fromhex(o["frame"])] += 1
    first = frames[0]["arrival"] if frames else 0
    start = env.cycle
    late = 0
    for fr in frames:
        data = bytes.fromhex(fr["frame"])
        beats = (len(data) + 63) // 64
        feed = fr["arrival"] - beats - INPUT_CYCLES
        if feed < env.cycle:
            late += 1
        else:
            await ClockCycles(dut.clk, feed - env.cycle)
        # the golden model runs too (with the trace's stamp), as every core test's scoreboard
        await env.send(data, fr["port"], arrival=fr["arrival"])
    await env.drain(timeout_cycles=40000)
    got = defaultdict(Counter)
    for q, frs in env.received.items():
        for data, _ in frs:
            got[q][data] += 1
    mismatches = 0
    for q in set(expected) | set(got):
        mismatches += sum(((expected[q] - got[q]) + (got[q] - expected[q])).values())
    model_vs_trace = 0
    for q in set(expected) | set(env.expected):
        mine = Counter(f for f, _ in env.expected.get(q, []))
        model_vs_trace += sum(((expected[q] - mine) + (mine - expected[q])).values())
    result = {"frames": len(frames), "outputs": sum(sum(c.values()) for c in expected.values()),
              "mismatches": mismatches, "model_vs_trace_mismatches": model_vs_trace,
              "fed_late": late, "first_arrival": first, "start_cycle": start,
              "input_cycles": INPUT_CYCLES}
    out = os.environ.get("NETSTOR_REPLAY_RESULT")
    if out:
        with open(out, "w") as f:
            json.dump(result, f)
    assert late == 0, f"{late} frames could not be fed at their stamp (setup too long)"
    assert model_vs_trace == 0, f"the interpreter disagrees with the trace: {result}"
    assert mismatches == 0, f"RTL outputs differ from the simulator's: {result}"
