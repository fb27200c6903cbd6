"""pytest entry: the whole core in Verilator, driven by cocotbext-axi, scored by the model.

One Verilator build (``core_build``, shared with the demo); each cocotb test runs in its own
simulator process so it starts from power-on state (memories included), like the model it is
compared with.
"""
import pytest

from netstor.sim.core_build import run_core

CASES = ["test_identity", "test_l3_mixed_traffic", "test_primitives", "test_bad_input",
         "test_sizes_backpressure_updates", "test_ethernet_mac_ports", "test_fuzz",
         "test_host_api", "test_netclone", "test_netrs"]


@pytest.mark.cocotb
@pytest.mark.xdist_group("core")
@pytest.mark.parametrize("case", CASES)
def test_core(case):
    run_core("cocotb_core", case)
