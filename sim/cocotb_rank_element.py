"""cocotb test of a ``Rank`` element as the data path builds it (``sim/rank_top.py``): one
PHV per clock (back to back, then random gaps), random inputs over every algorithm,
availability mask, tie and saturation case; every output PHV field compared with the golden
model executing the same element (``DataplaneModel._run``), and the latency checked."""
from __future__ import annotations

import os
import random
from collections import deque

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge

from netstor.model.dataplane import DataplaneModel
from rank_top import INPUTS, OUTPUTS, NREP, make_rank_pipeline

LATENCY = int(os.environ["RANK_ELEM_LATENCY"])
N = int(os.environ.get("RANK_ELEM_N", "1500"))
SEED = int(os.environ.get("RANK_ELEM_SEED", "3"))


def random_phv(rng):
    v = {k: rng.getrandbits(w) for k, w in INPUTS.items()}
    v["algo"] = rng.randrange(4)
    v["en"] = int(rng.random() < 0.85)
    shape = rng.randrange(4)
    for i in range(NREP):
        if shape == 0:                 # small values: close scores, ties
            v[f"q{i}"], v[f"os{i}"] = rng.randrange(4) * 16, rng.randrange(3)
            v[f"t{i}"], v[f"r{i}"] = 16, rng.randrange(2) * 8
        elif shape == 1:               # all equal
            v[f"q{i}"], v[f"os{i}"], v[f"t{i}"], v[f"r{i}"] = 16, 1, 32, 8
        elif shape == 2:               # saturation
            v[f"q{i}"], v[f"os{i}"] = 0xFFFF, 255
    return v


def expected(model, elem, v):
    phv = {f"t.m.{k}": x for k, x in v.items()}
    phv["t.m.score"] = 0
    model._run([elem], phv)
    return {k: phv[f"t.m.{k}"] for k in OUTPUTS}


@cocotb.test()
async def rank_element_matches_model(dut):
    rng = random.Random(SEED)
    pl, elem = make_rank_pipeline()
    model = DataplaneModel(pl)
    Clock(dut.clk, 4, unit="ns").start()
    dut.rst.value = 1
    dut.valid_in.value = 0
    await ClockCycles(dut.clk, 3)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    pending = deque()
    cycle = issued = checked = 0
    while issued < N or pending:
        # present a new PHV (or an idle cycle with random data) at this falling edge
        v = random_phv(rng)
        valid = issued < N and (issued < N // 3 or rng.random() < 0.6)
        dut.valid_in.value = int(valid)
        for k, x in v.items():
            getattr(dut, f"i_{k}").value = x
        if valid:
            pending.append((cycle, expected(model, elem, v), v))
            issued += 1
        await FallingEdge(dut.clk)
        cycle += 1
        # outputs now reflect what was presented LATENCY cycles ago
        out_valid = int(dut.valid_out.value)
        if pending and pending[0][0] == cycle - LATENCY:
            _, exp, v0 = pending.popleft()
            assert out_valid == 1, f"cycle {cycle}: valid_out 0, expected a result"
            got = {k: int(getattr(dut, f"o_{k}").value) for k in OUTPUTS}
            assert got == exp, f"inputs {v0}: hardware {got} != model {exp}"
            checked += 1
        else:
            assert out_valid == 0, f"cycle {cycle}: unexpected valid_out"
    assert checked == N
    dut._log.info(f"{checked} selections checked, latency {LATENCY}")
