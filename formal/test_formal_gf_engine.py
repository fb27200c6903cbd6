"""SymbiYosys job for the GF(2^8) engine (pytest -m formal); see formal/props_gf_engine.py.

| job | mode | what (parameters) |
| --- | --- | --- |
| gf_slot | BMC, depth 10 | the engine (2 ops x 2 beats, 1 lane, 2-bit generations, timeouts off) with free beats every cycle: each beat of a chosen slot leaves with the spec's done/dup/bad and sum (shadow slot, reference multiplier by shift-and-add), so no contribution is lost or doubled for beats 1, 2, 3 cycles apart |
| gf_path_slot | BMC, depth 9 | the core's header-path half (GFAccumulate's control shadow: 16 banks, 2 ops x 16 beats) with free packets of 1 or 2 beats every cycle: each packet covering a chosen slot gets the status the spec's accumulation gives (no contribution lost or doubled for packets 1, 2, 3 cycles apart, across two banks) |

Jobs write into build/formal/<job>/.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import convert_harness, run_sby                 # noqa: E402
from props_gf_engine import GFEngineProps, GFPathProps      # noqa: E402

JOBS = {
    "gf_slot": (lambda: GFEngineProps(), "bmc", 10),
    "gf_path_slot": (lambda: GFPathProps(), "bmc", 9),
}


@pytest.mark.formal
@pytest.mark.parametrize("job", list(JOBS))
def test_formal_gf_engine(job):
    make, mode, depth = JOBS[job]
    path = convert_harness(job, make())
    assert run_sby(job, path, "top", mode=mode, depth=depth, engine="smtbmc yices")
