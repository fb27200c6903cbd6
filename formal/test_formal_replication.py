"""SymbiYosys jobs for the replication engine (pytest -m formal); see props_replication.py.

| job | mode | what (parameters) |
| --- | --- | --- |
| rep_bmc | BMC, 11 | ReplicationEngine (4 copies per group in this model): a watched packet's copies in list order with port/rid/first/last, under any back-pressure, other traffic and host reads/writes before it; stream rule; host port timing and read data (3 outputs, 2 groups, FIFO 2, tag 3 bits) |
| rep_cover | cover, 16 | a 3-copy packet completes; a stall mid-list; a host read of a written group |
| rep_direct_bmc | BMC, 11 | the data path's engine (``direct``): direct descriptors, the recirculation copy and the express way; the watched list as above, plus no overtaking: a later watched descriptor has no copy out before the first's last |
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import convert_harness, run_sby                 # noqa: E402
from props_replication import ReplicationProps              # noqa: E402

JOBS = {
    "rep_bmc": (lambda: ReplicationProps(), "bmc", 11),
    "rep_cover": (lambda: ReplicationProps(), "cover", 16),
    "rep_direct_bmc": (lambda: ReplicationProps(direct=True), "bmc", 11),
}


@pytest.mark.formal
@pytest.mark.parametrize("job", list(JOBS))
def test_formal_replication(job):
    make, mode, depth = JOBS[job]
    path = convert_harness(job, make())
    assert run_sby(job, path, "top", mode=mode, depth=depth, engine="smtbmc yices")
