"""pytest entry: the whole core in Verilator, driven by cocotbext-axi, scored by the model.

One Verilator build; each cocotb test runs in its own simulator process so it starts from
power-on state (memories included), like the model it is compared with.
"""
import functools
import json

import pytest

from harness import run_cocotb, BUILD, write_if_changed

CASES = ["test_identity", "test_l3_mixed_traffic", "test_primitives", "test_bad_input",
         "test_sizes_backpressure_updates"]


@functools.lru_cache(maxsize=None)
def _generate():
    from netstor.build import build_core, core_verilog
    core = build_core()
    d = BUILD / "core"
    schema = d / "schema.json"
    write_if_changed(schema, json.dumps(core.schema, indent=1, sort_keys=True))
    write_if_changed(d / "netstor_core.v", core_verilog(core))
    return core.P, d, schema


@pytest.mark.cocotb
@pytest.mark.xdist_group("core")
@pytest.mark.parametrize("case", CASES)
def test_core(case):
    from tb_core import tb_core_verilog
    P, d, schema = _generate()
    run_cocotb("core", "cocotb_core", toplevel="tb_core", verilog_text=tb_core_verilog(P),
               sources=[d / "netstor_core.v"], extra_env={"NETSTOR_SCHEMA": str(schema)},
               testcase=case)
