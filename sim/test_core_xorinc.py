"""pytest entry: the whole core built with XORInc's program (``default_pipeline(extra=
("xorinc",))``, the ``xorinc`` variant of ``netstor.sim.core_build``: the GF engine in the frame
path; here on L3 + XORInc alone, ``core_test_pipeline``, for a short build) in Verilator; the cocotb cases (``sim/cocotb_core_xorinc.py``) score NetRepair and
NetUpdate frames against the golden model and ``galois``.

Its own Verilator build (``build/sim/core_xorinc``): XORInc is not in the default bitstream, so
the default core every other whole-core case runs is not changed by it. Both cases run in one
simulator run (one build, one elaboration).
"""
import pytest

from netstor.sim.core_build import run_core

#: L3 + XORInc, 64 groups (a small build); the cocotb env builds the same pipeline
PIPELINE = "netstor.offloads.xorinc.program:core_test_pipeline"


@pytest.mark.cocotb
@pytest.mark.xdist_group("core_xorinc")
def test_core_xorinc():
    run_core("cocotb_core_xorinc", None, variant="xorinc", pipeline=PIPELINE,
             # galois' numba-compiled linear algebra does not compile with pytest-rewritten
             # asserts: rewrite the testbench's only
             extra_env={"COCOTB_REWRITE_ASSERTION_FILES": "cocotb_*.py"})
