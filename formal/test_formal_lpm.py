"""SymbiYosys job for the hashed LPM engine (pytest -m formal); see formal/props_lpm.py.

| job | mode | what (parameters) |
| --- | --- | --- |
| lpm_longest | BMC, depth 8 | the hash-bank LPM engine (3 banks x 2 slots, 4-bit keys, lengths 0..7, the flat winner stage with its pairwise length flip-flops; 4 banks pass too, 6x slower): every lookup's hit and action equal the spec's longest hit over a shadow of the host's entry and length writes (lowest bank on a tie); entry writes in the lookup's cycle allowed |
| lpm_longest_tree | BMC, depth 8 | the same, 4 banks, the max-tree form (one tree stage; tables of more than 32 banks use it) |

Jobs write into build/formal/<job>/.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import convert_harness, run_sby                 # noqa: E402
from props_lpm import LpmProps                              # noqa: E402

JOBS = {
    "lpm_longest": (lambda: LpmProps(banks=3), "bmc", 8),
    "lpm_longest_tree": (lambda: LpmProps(select="tree"), "bmc", 8),
}


@pytest.mark.formal
@pytest.mark.parametrize("job", list(JOBS))
def test_formal_lpm(job):
    make, mode, depth = JOBS[job]
    path = convert_harness(job, make())
    assert run_sby(job, path, "top", mode=mode, depth=depth, engine="smtbmc yices")
