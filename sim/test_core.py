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
        "test_host_api", "test_copy_lists", "test_copy_lane_stale", "test_copy_lane_overflow",
        "test_copy_list_own_port_twice", "test_host_access_under_updates"]
#: (cocotb module, test): the platform's cases, then every offload's (its ``cocotb`` hook)
CASES = [("cocotb_core", c) for c in CORE] + [mc for o in offloads() for mc in o.cocotb]
#: the cases of xdist group "core"; the others, the soak, the demo and the other users of the
#: same Verilator build are group "core2": two workers, each one group's cases in turn (about
#: 14 minutes each, by the copy-lane core's case times: trust ~300 s, copy_lane_stale 185,
#: netclone 145, primitives 142 here; host_api 267, netrs 127, sizes 97, soak 87, bad_input 84
#: there). Whoever comes first builds the core, the other waits on the build lock
#: (``harness.run_cocotb``). The lane's overflow (~35 s), own-port-twice (~25 s) and host
#: access under per-clock updates (~25 s) cases (measured with the machine loaded) split
#: between the two
GROUP_CORE = {"test_identity", "test_trust", "test_netclone", "test_primitives",
              "test_l3_mixed_traffic", "test_ethernet_mac_ports", "test_copy_lists",
              "test_copy_lane_stale", "test_copy_list_own_port_twice",
              "test_host_access_under_updates",
              # XORInc's and NICE's cases (measured with 4 simulations on 2 cores: netrepair
              # 188 s, netupdate 104, timeout 248, nice 243), two on each side
              "test_nice", "test_netupdate"}


def _group(case):
    return "core" if case in GROUP_CORE else "core2"


@pytest.mark.cocotb
@pytest.mark.parametrize("module,case", [
    pytest.param(mod, c, id=c, marks=pytest.mark.xdist_group(_group(c))) for mod, c in CASES])
def test_core(module, case):
    # cocotb rewrites the asserts of the testbench modules only: galois' numba-compiled linear
    # algebra (XORInc's reference) does not compile from pytest-rewritten modules
    run_core(module, case, extra_env={"COCOTB_REWRITE_ASSERTION_FILES": "cocotb_*.py"})
