"""pytest entry of the whole-core soak (``sim/cocotb_soak.py``): random back-pressure on every
output, mixed traffic (multicast, recirculation, NetClone, NetRS), drops matched to the
counters by a drop-aware in-order scoreboard. Same Verilator build as ``sim/test_core.py``.
The figures land in ``build/sim/core/test_soak/soak.json``.

Opt-in (``NETSTOR_SOAK=1``) until it has passed on the RTL: it was written while the core was
being rebuilt by every engineer at once and has not completed a run yet (see the commit and
the issue's report)."""
import json
import os
from pathlib import Path

import pytest

from netstor.sim.core_build import run_core


@pytest.mark.cocotb
@pytest.mark.xdist_group("core")
def test_soak():
    if os.environ.get("NETSTOR_SOAK") != "1":
        pytest.skip("not yet validated on the RTL (NETSTOR_SOAK=1 runs it)")
    results = run_core("cocotb_soak", "test_soak")
    figures = json.loads((Path(results).parent / "soak.json").read_text())
    print(json.dumps({k: figures[k] for k in ("frames_in_total", "frames_out_total",
                                              "drops_total", "mismatches")}))
    assert figures["mismatches"] == 0
