"""The XLS-generated ranking core (hls/ranking.x -> build/hls/ranking.v) in Verilator.

Top: ``RankingCore`` (the Amaranth wrapper, an ``Instance`` of ``xls_ranking``). The testbench
(sim/cocotb_hls_ranking.py) feeds one selection per clock (back to back, then with random
valid gaps and random data on the idle cycles), compares every result bit for bit with the
Python reference (``netstor.offloads.netrs.ranking``) and checks that each result appears exactly the
schedule's latency after its request. Builds into build/sim/hls_ranking/.
"""
import pytest

from netstor.sim.harness import elaborate, run_cocotb
from netstor.offloads.netrs import ranking_core as hls


@pytest.mark.cocotb
def test_hls_ranking():
    core = hls.RankingCore()
    text, info = hls.ranking_verilog()
    vpath = hls.ROOT / info["verilog"]
    assert vpath.read_text() == text
    env = {"RANK_LATENCY": info["latency"], "RANK_N_B2B": 600, "RANK_N_GAPS": 900,
           "RANK_SEED": 5}
    run_cocotb("hls_ranking", "cocotb_hls_ranking", toplevel="ranking_top",
               verilog_text=elaborate(core, "ranking_top"), sources=[vpath],
               extra_env={k: str(v) for k, v in env.items()})
