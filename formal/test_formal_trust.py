"""SymbiYosys jobs for a program's trust guard (pytest -m formal); see formal/README.md.

| job | mode | what (parameters) |
| --- | --- | --- |
| trust | k-induction, k=6 | a guarded program's ingress stages (trust table of 8 entries, two banks, one added before the guard): with nothing ever trusted no first pass writes a bank; a first pass from an ingress port no valid entry admits never writes (other entries valid); such a packet of the program is counted as a miss and dropped |
| trust_cover | cover, 8 | trusted writes to both banks, a write right behind a barred packet, a recirculated pass writing, a barred packet dropped |

Assumption: the parser clears program metadata (``g.m.trusted = 0`` at the stages' input);
the entries start at their init value 0 (FPGA configuration / reset; asserted in the first
cycle). Jobs write into build/formal/<job>/.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import convert_harness, run_sby                 # noqa: E402
from props_trust import TrustProps                          # noqa: E402

# name: (harness factory, mode, depth)
JOBS = {
    "trust": (lambda: TrustProps(n_ports=2), "prove", 6),
    "trust_cover": (lambda: TrustProps(n_ports=2), "cover", 8),
}


@pytest.mark.formal
@pytest.mark.parametrize("job", list(JOBS))
def test_formal_trust(job):
    make, mode, depth = JOBS[job]
    path = convert_harness(job, make())
    assert run_sby(job, path, "top", mode=mode, depth=depth, engine="smtbmc yices")
