"""The simulator at the test bed's parameters against a test-bed run (root): the mean latency
within 25 % for no cloning and for NetClone, once the test bed's own latency at the same load
with no service time (measured in the same session, ``testbed_floor``: its Python clients,
sockets and model switch on CPUs the rest of the suite shares) is taken off. The simulator's
side is its expectation (``calibrate``'s ``sim_scale``: 20 times the requests); against its
single 960-request sample (seed 1, 6 % below its expectation for NetClone) NetClone came out
at 13-26 % less the floor in six runs on an idle machine, and failed this bound about half the
time. Against the expectation, on an idle machine (three runs): no cloning +4.6 to +9.2 %,
NetClone +10.1 to +22.7 % at 8 s and once above 25 % (raw +20 to +31 %: the Python switch
carries three frames per cloned request). What is left is the test bed's own sample noise (its
960-request mean varied from 14.0 to 16.1 ms for NetClone), so the test runs 16 s (1,920
requests per scheme; NetClone +7.7 % in one idle run, wall ~80 s), and an unexplained NetClone
excess of ~15 %; under the suite's
load the raw figures grow with the CPU share the test bed gets, which the floor measures. ``python -m netstor.offloads.netclone.calibrate``
reports client cloning too (+30 % even less its floor; not asserted).

It is load-sensitive beyond what the floor captures: beside a whole-core Verilator case on the
other of two cores, NetClone came out at +39 % and +42 % less its floor (twice, in the suite),
against +8 % alone. So it is a ``solo`` test: ``make test`` runs it after the parallel phase,
alone on the machine (it was the last test of the ``core`` xdist group before, which only
worked while one worker ran every whole-core case)."""
import os

import pytest

from netstor.offloads.netclone.calibrate import calibrate


@pytest.mark.solo
@pytest.mark.skipif(os.geteuid() != 0, reason="the test bed needs root (network namespaces)")
def test_simulator_matches_testbed_mean():
    res = calibrate(duration=16.0, schemes=("single", "netclone"))
    rows = {r["scheme"]: r for r in res["rows"]}
    for row in rows.values():
        assert row["testbed"]["replies"] >= 1600 and row["sim"]["n"] >= 36000, row
        assert row["testbed"]["timeouts"] == 0 and row["sim"]["timeouts"] == 0, row
    for row in rows.values():
        assert abs(row["mean_diff_less_floor_pct"]) <= 25.0, res
