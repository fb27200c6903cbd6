"""SymbiYosys jobs for the RAM TCAM of ternary/LPM tables (pytest -m formal); see
formal/props_table.py and formal/README.md.

| job | mode | what (parameters) |
| --- | --- | --- |
| table_priority | k-induction, k=8 | the TCAM engine (5 entries, 4-bit keys in 2-bit chunks, priority tree of fan-in 2: two registered levels): every lookup returns the lowest valid matching entry of a shadow of the host's writes; during an update a lookup sees the entry old, absent or new, never a mix; the chunk RAMs hold exactly the shadow's bitmaps (inductive invariant) |
| table_priority_cover | cover, 40 | a lookup during an update that hits the new entry, a hit at the last index behind a valid entry 0, a completed update |

Jobs write into build/formal/<job>/.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import convert_harness, run_sby                 # noqa: E402
from props_table import TableProps                          # noqa: E402

# name: (harness factory, mode, depth)
JOBS = {
    "table_priority": (lambda: TableProps(), "prove", 8),
    "table_priority_cover": (lambda: TableProps(), "cover", 40),
}


@pytest.mark.formal
@pytest.mark.parametrize("job", list(JOBS))
def test_formal_table(job):
    make, mode, depth = JOBS[job]
    path = convert_harness(job, make())
    assert run_sby(job, path, "top", mode=mode, depth=depth, engine="smtbmc yices")
