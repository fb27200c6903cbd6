"""pytest entry: the whole core with the copy lane (``Datapath(copies="lane")``: every copy
through the replication engine and one egress lane, multicast as copy lists ``tm.groups``) in
Verilator, the same cocotb cases as ``sim/test_core.py``, scored by the model in list mode.

Its own Verilator build (``build/sim/core_lane``, minutes of CPU), so it runs only with
``NETSTOR_LANE=1`` until the lane becomes the default core (then ``sim/test_core.py`` covers
it and this file goes).
"""
import json
import os
from pathlib import Path

import pytest

from netstor.offloads import offloads
from netstor.sim.core_build import run_core

CORE = ["test_identity", "test_l3_mixed_traffic", "test_primitives", "test_trust",
        "test_bad_input", "test_sizes_backpressure_updates", "test_ethernet_mac_ports",
        "test_fuzz", "test_host_api", "test_copy_lists", "test_copy_lane_stale"]
CASES = [("cocotb_core", c) for c in CORE] + [mc for o in offloads() for mc in o.cocotb]

pytestmark = pytest.mark.skipif(os.environ.get("NETSTOR_LANE") != "1",
                                reason="the copy-lane core's own Verilator build: NETSTOR_LANE=1")


@pytest.mark.cocotb
@pytest.mark.xdist_group("core_lane")
@pytest.mark.parametrize("module,case", CASES, ids=[c for _, c in CASES])
def test_core_lane(module, case):
    run_core(module, case, variant="lane")


@pytest.mark.cocotb
@pytest.mark.xdist_group("core_lane")
def test_soak_lane():
    """The soak (sim/test_soak.py) on the copy-lane core: drops = drop_full + drop_stale per
    output (the scoreboard), no mismatch."""
    env = ({} if os.environ.get("NETSTOR_SOAK") == "1"
           else {"NETSTOR_SOAK_SLOTS": os.environ.get("NETSTOR_SOAK_SLOTS", "24")})
    results = run_core("cocotb_soak", "test_soak", extra_env=env, variant="lane")
    figures = json.loads((Path(results).parent / "soak.json").read_text())
    print(json.dumps({k: figures[k] for k in ("slots", "frames_in_total", "frames_out_total",
                                              "drops_total", "stale_total", "recirc_stale",
                                              "tm_overflow", "mismatches")}))
    assert figures["mismatches"] == 0
