"""pytest entry: the whole core with ``copies="ports"`` (the earlier core, a build option: one
egress lane and deparser per output, at most one copy per port, multicast as bitmaps
``tm.mcast``) in Verilator, the platform's and the offloads' cocotb cases, scored by the model
in bitmap mode (``netstor.sim.core_env`` reads the mode from the build's schema).

Its own Verilator build (``build/sim/core_ports``, minutes of CPU), so it runs only with
``NETSTOR_PORTS=1``; CI runs the default core (the copy lane) in ``sim/test_core.py``.
"""
import json
import os
from pathlib import Path

import pytest

from netstor.offloads import offloads
from netstor.programs import payload_offloads
from netstor.sim.core_build import run_core

CORE = ["test_identity", "test_l3_mixed_traffic", "test_primitives", "test_trust",
        "test_bad_input", "test_sizes_backpressure_updates", "test_ethernet_mac_ports",
        "test_fuzz", "test_host_api"]
#: the platform's cases and those of the offloads the ports core carries (not those with a
#: payload element: ``build_core(copies="ports")`` leaves them out)
_PAYLOAD = set(payload_offloads())
CASES = [("cocotb_core", c) for c in CORE] + [
    mc for o in offloads() if o.name not in _PAYLOAD for mc in o.cocotb]

pytestmark = pytest.mark.skipif(os.environ.get("NETSTOR_PORTS") != "1",
                                reason="the copies='ports' core's own Verilator build: NETSTOR_PORTS=1")


@pytest.mark.cocotb
@pytest.mark.xdist_group("core_ports")
@pytest.mark.parametrize("module,case", CASES, ids=[c for _, c in CASES])
def test_core_ports(module, case):
    run_core(module, case, variant="ports")


@pytest.mark.cocotb
@pytest.mark.xdist_group("core_ports")
def test_soak_ports():
    """The soak (sim/test_soak.py) on the ports core: drops = drop_full per output."""
    env = ({} if os.environ.get("NETSTOR_SOAK") == "1"
           else {"NETSTOR_SOAK_SLOTS": os.environ.get("NETSTOR_SOAK_SLOTS", "24")})
    results = run_core("cocotb_soak", "test_soak", extra_env=env, variant="ports")
    figures = json.loads((Path(results).parent / "soak.json").read_text())
    print(json.dumps({k: figures.get(k) for k in ("slots", "frames_in_total", "frames_out_total",
                                                  "drops_total", "mismatches")}))
