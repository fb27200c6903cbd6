"""Simulator traces replayed on the RTL (``netstor.cluster.replay``): a short run's switch
inputs go through the gateware in Verilator (the shared whole-core build) at their arrival
stamps, and every output equals the simulated switch's, byte for byte (the cases:
``netstor.cluster.replay.cases``: every scheme with its own switch configuration)."""
import pytest

from netstor.cluster.replay import cases, replay_on_rtl

CASES = cases()


@pytest.mark.cocotb
@pytest.mark.parametrize("scheme", sorted(CASES))
def test_replay(scheme):
    r = replay_on_rtl(scheme, requests=30, **CASES[scheme])
    assert r["frames"] >= 20 and r["outputs"] >= 20
    assert r["fed_late"] == 0
    assert r["mismatches"] == 0 and r["model_vs_trace_mismatches"] == 0
