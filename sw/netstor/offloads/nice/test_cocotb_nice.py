"""pytest entry of :mod:`.cocotb_nice`: a whole core built with NICE (L3 and NICE at small
table sizes: :func:`.cocotb_nice.pipeline`; not the default bitstream) in its own Verilator
build (``build/sim/core_nice``), against the golden model."""
from __future__ import annotations

import functools
import json

import pytest


@functools.lru_cache(maxsize=None)
def _generate():
    from netstor.build import build_core, core_verilog, extra_verilog
    from netstor.build.corundum import mqnic_app_block_verilog
    from netstor.sim.harness import BUILD, write_if_changed
    from .cocotb_nice import pipeline
    core = build_core(pipeline())
    d = BUILD / "core_nice"
    schema = d / "schema.json"
    write_if_changed(schema, json.dumps(core.schema, indent=1, sort_keys=True))
    write_if_changed(d / "netstor_core.v", core_verilog(core))
    for name, text in extra_verilog(core).items():
        write_if_changed(d / name, text)
    write_if_changed(d / "mqnic_app_block.v", mqnic_app_block_verilog({"PORT_COUNT": core.P}))
    return core.P, d, schema


@pytest.mark.cocotb
@pytest.mark.xdist_group("core_nice")
def test_nice_core():
    from netstor.sim.core_build import sources
    from netstor.sim.harness import run_cocotb
    from netstor.sim.tb_core import tb_core_verilog
    P, d, schema = _generate()
    run_cocotb(d.name, "netstor.offloads.nice.cocotb_nice", toplevel="tb_core",
               verilog_text=tb_core_verilog(P), sources=sources(d),
               extra_env={"NETSTOR_SCHEMA": str(schema)}, testcase="test_nice")
