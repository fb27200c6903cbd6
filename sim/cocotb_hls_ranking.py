"""cocotb test of the XLS ranking core (run by ``sim/test_hls_ranking.py``).

Drives and samples on the falling edge: a request presented at falling edge c is captured by
the core's input flops at the next rising edge; its result must be visible (``valid_out``)
at falling edge c + latency, with found/index/score equal to the Python reference.
"""
from __future__ import annotations

import os
import random
from collections import deque

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge

from netstor.offloads.netrs import ranking as R

LATENCY = int(os.environ["RANK_LATENCY"])
N_B2B = int(os.environ.get("RANK_N_B2B", "500"))
N_GAPS = int(os.environ.get("RANK_N_GAPS", "800"))
SEED = int(os.environ.get("RANK_SEED", "1"))


def drive(dut, valid, ports):
    dut.valid_in.value = int(valid)
    for k, v in ports.items():
        getattr(dut, k).value = v


@cocotb.test()
async def one_selection_per_clock(dut):
    rng = random.Random(SEED)
    Clock(dut.clk, 4, unit="ns").start()
    drive(dut, 0, R.random_inputs(rng))
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    pending = deque()            # (cycle presented, expected (found, index, score))
    checked = 0
    gaps = 0
    # after reset, nothing comes out of an idle pipeline
    for _ in range(LATENCY + 2):
        await FallingEdge(dut.clk)
        assert int(dut.valid_out.value) == 0
    total = N_B2B + N_GAPS
    cycle = 0
    issued = 0
    while issued < total or pending:
        # sample this cycle's outputs
        if int(dut.valid_out.value):
            assert pending, f"cycle {cycle}: valid_out without a request"
            c0, want = pending.popleft()
            got = (int(dut.found.value), int(dut.index.value), int(dut.score.value))
            assert cycle - c0 == LATENCY, f"latency {cycle - c0} != {LATENCY}"
            assert got == want, f"request of cycle {c0}: got {got}, want {want}"
            checked += 1
        else:
            assert not pending or cycle - pending[0][0] < LATENCY, \
                f"cycle {cycle}: result of cycle {pending[0][0]} missing"
        # present the next request (or an idle cycle with random data)
        ports = R.random_inputs(rng)
        valid = issued < total and (issued < N_B2B or rng.random() < 0.6)
        if valid:
            pending.append((cycle, R.rank(ports["algo"], ports["avail"], [
                R.Replica((ports["q"] >> 16 * i) & 0xFFFF, (ports["os"] >> 8 * i) & 0xFF,
                          (ports["t"] >> 16 * i) & 0xFFFF, (ports["r"] >> 16 * i) & 0xFFFF)
                for i in range(R.NR)], ports["n"], ports["rr"], ports["rnd"])))
            issued += 1
        elif issued < total:
            gaps += 1
        drive(dut, valid, ports)
        await FallingEdge(dut.clk)
        cycle += 1
    assert checked == total and gaps > N_GAPS // 4
    dut._log.info(f"{checked} selections checked ({N_B2B} back to back, {gaps} idle cycles), "
                  f"latency {LATENCY} cycles")
