"""The whole core's one Verilator build, shared by every user of it.

``sim/test_core.py`` (the cocotb tests), ``netstor.sim.demo`` (``make demo-rtl``) and
``sim/test_demo_smoke.py`` all run their cocotb modules against the same ``tb_core`` model in
``build/sim/core``: the same generated Verilog, so ``harness.run_cocotb`` finds the same source
hash and reuses the build instead of recompiling (about two minutes).
"""
from __future__ import annotations

import functools
import json

from netstor.sim.harness import run_cocotb, BUILD, write_if_changed

NAME = "core"          # build/sim/core


#: core variants besides the default: name -> ``build_core`` keyword arguments
VARIANTS = {"ports": {"copies": "ports"}}


def _pipeline(spec):
    """The pipeline ``"module:function"`` names (the function called with no arguments)."""
    import importlib
    mod, _, fn = spec.partition(":")
    return getattr(importlib.import_module(mod), fn)()


@functools.lru_cache(maxsize=None)
def generate(variant=None, pipeline=None):
    """Elaborate the default core (or ``variant``, a :data:`VARIANTS` key, in
    ``build/sim/core_<variant>``; or a variant of that name on the pipeline ``pipeline``, a
    ``"module:function"`` string, e.g. an offload outside the bitstream): ``(P, build dir,
    schema path)``; files are rewritten only when their text changed."""
    from netstor.build import build_core, core_verilog
    if pipeline is not None:
        core = build_core(_pipeline(pipeline))
    else:
        core = build_core(**(VARIANTS[variant] if variant else {}))
    d = BUILD / (f"{NAME}_{variant}" if variant else NAME)
    schema = d / "schema.json"
    write_if_changed(schema, json.dumps(core.schema, indent=1, sort_keys=True))
    write_if_changed(d / "netstor_core.v", core_verilog(core))
    from netstor.build import extra_verilog
    for name, text in extra_verilog(core).items():
        write_if_changed(d / name, text)
    from netstor.build.corundum import mqnic_app_block_verilog
    write_if_changed(d / "mqnic_app_block.v", mqnic_app_block_verilog({"PORT_COUNT": core.P}))
    return core.P, d, schema


def sources(d):
    """Verilog sources of the shared build besides the generated ``tb_core.v``."""
    return [d / "mqnic_app_block.v", d / "netstor_core.v"] + sorted(d.glob("xls_*.v"))


def run_core(test_module, testcase, extra_env=None, variant=None, pipeline=None, **kw):
    """Run cocotb test ``testcase`` of module ``test_module`` (under ``sim/``) on the shared
    core build (or a ``variant``'s, ``pipeline`` as in :func:`generate`); ``NETSTOR_SCHEMA``
    points at the build's schema. Returns the results path, raises ``AssertionError`` on a
    failed test (see ``harness.run_cocotb``)."""
    from netstor.sim.tb_core import tb_core_verilog
    if pipeline is not None and not variant:
        raise ValueError("a core on its own pipeline needs a variant name (its build folder)")
    P, d, schema = generate(variant, pipeline)
    env = {"NETSTOR_SCHEMA": str(schema), **(extra_env or {})}
    return run_cocotb(d.name, test_module, toplevel="tb_core", verilog_text=tb_core_verilog(P),
                      sources=sources(d), extra_env=env, testcase=testcase, **kw)
