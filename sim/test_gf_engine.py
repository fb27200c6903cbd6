"""GFEngine (XORInc's GF(2^8) payload engine) under cocotb + Verilator (testbench:
sim/cocotb_gf_engine.py): the multiplier on all 65,536 pairs, interleaved RS(k, r) repairs in
random order with duplicates against the library, back-to-back beats on one slot, timeouts.

One small build (8 operations x 64-beat = 4 KiB chunks) in build/sim/gf_engine/, one simulator
run: the cocotb tests share the engine's state and one model (sim/cocotb_gf_engine.py)."""

import gc
import warnings

import pytest

from netstor.gateware.gf_engine import GFEngine, LATENCY
from netstor.sim.harness import elaborate, run_cocotb

OPS, CHUNK_BEATS = 8, 64


@pytest.mark.cocotb
def test_gf_engine():
    top = GFEngine(n_ops=OPS, chunk_beats=CHUNK_BEATS, tick_shift=0)
    run_cocotb("gf_engine", "cocotb_gf_engine", toplevel="gf_engine",
               verilog_text=elaborate(top, "gf_engine"),
               extra_env={"GF_OPS": str(OPS), "GF_CHUNK_BEATS": str(CHUNK_BEATS),
                          "GF_LATENCY": str(LATENCY),
                          # assertion rewriting for the testbench only: galois' numba-compiled
                          # linear algebra does not compile with pytest-rewritten asserts
                          "COCOTB_REWRITE_ASSERTION_FILES": "cocotb_*.py"})


def test_gf_engine_rejects_bad_sizes():
    with warnings.catch_warnings():          # the half-built objects are collected here
        warnings.simplefilter("ignore")
        for ops, beats in ((3, 64), (64, 0), (64, 48)):
            with pytest.raises(ValueError):
                GFEngine(n_ops=ops, chunk_beats=beats)
        gc.collect()
