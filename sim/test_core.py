"""pytest entry: the whole core in Verilator, driven by cocotbext-axi, scored by the model.

One Verilator build (``core_build``, shared with the demo); each cocotb test runs in its own
simulator process so it starts from power-on state (memories included), like the model it is
compared with.
"""
import pytest

from netstor.offloads import offloads
from netstor.sim.core_build import run_core

CORE = ["test_identity", "test_l3_mixed_traffic", "test_primitives", "test_trust", "test_bad_input",
        "test_sizes_backpressure_updates", "test_ethernet_mac_ports", "test_fuzz",
        "test_host_api"]
#: (cocotb module, test): the platform's cases, then every offload's (its ``cocotb`` hook)
CASES = [("cocotb_core", c) for c in CORE] + [mc for o in offloads() for mc in o.cocotb]


@pytest.mark.cocotb
@pytest.mark.xdist_group("core")
@pytest.mark.parametrize("module,case", CASES, ids=[c for _, c in CASES])
def test_core(module, case):
    run_core(module, case)
