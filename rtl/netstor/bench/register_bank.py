"""A large register bank synthesised on its own: the pipelined read-modify-write of
:class:`netstor.elements.RegisterOp` on a ``depth x width`` bank (default 128K x 64 bits,
NetLR's state at scale), ``bank[i] += amount`` with the new value returned, one packet per
clock, the host port brought out.

``bench(out_dir)`` runs Yosys (``synth_xilinx -family xcup``, :func:`netstor.bench.synth.run_yosys`,
cached by Verilog hash) and writes ``<out_dir>/register_bank.json``: ``depth``, ``width``,
``LUT``, ``FF``, ``BRAM36`` (RAMB36 + RAMB18/2), ``URAM``, ``lut_levels`` (longest
register-to-register path in LUTs, :func:`netstor.bench.synth.netlist_depth`),
``latency_cycles`` (the element's), plus the raw result under ``"yosys"``. Also
``python -m netstor.bench.register_bank [out_dir] [--depth N --width W]``.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import time
from pathlib import Path

from amaranth.back import verilog
from amaranth.hdl import Module, Signal
from amaranth.lib import data

from netstor.elements import RegisterOp
from netstor.gateware.csr import CsrBuilder
from netstor.gateware.stages import build_element
from netstor.lang.program import Pipeline, Program
from netstor.paths import repo_root

from .synth import netlist_depth, parse_stat, run_yosys, script, summarise, yosys_bin

__all__ = ["bench", "bank_verilog"]

TOP = "bench_register_bank"


def bank_verilog(depth=128 * 1024, width=64):
    """``(verilog, latency)`` of one RegisterOp on a ``depth x width`` bank: the index, the
    amount and the result are PHV fields; every port (PHV in/out, valid, the host memory port,
    the out-of-range counter, the slot request) is a top-level port."""
    ib = max(1, (depth - 1).bit_length())
    prog = Program("rb")
    idx = prog.meta("idx", ib)
    amount = prog.meta("amount", width)
    res = prog.meta("res", width)
    bank = prog.bank("bank", width=width, depth=depth)
    op = RegisterOp.add("op", bank, idx, amount, result=res, returns="new")
    prog.add(op)
    pl = Pipeline([prog])
    m = Module()
    csr = CsrBuilder()
    layout = data.StructLayout(pl.phv.layout())
    vin = Signal(name="valid_in")
    raw = Signal(layout.size, name="phv_in")
    vout, pout, lat = build_element(m, op, pl, vin, data.View(layout, raw), csr, prefix="rb")
    valid_out = Signal(name="valid_out")
    phv_out = Signal(layout.size, name="phv_out")
    m.d.comb += [valid_out.eq(vout), phv_out.eq(pout.as_value())]
    ports = [vin, raw, valid_out, phv_out, op.slot_request]
    for mem in csr.memories:
        p = mem.port
        ports += [p.req, p.we, p.addr, p.wdata, p.ack, p.rdata]
    ports += [c.inc for c in csr.counters]
    text = verilog.convert(m, name=TOP, ports=ports, emit_src=False)
    return _drop_zero_init(text), lat


def _drop_zero_init(text):
    """Without the RAM's all-zero ``initial`` block: the block RAMs power up with zeros
    anyway (URAM288 has no initial-content attribute and is cleared at configuration), and
    Yosys would otherwise keep a 128K-word init that rules out URAM."""
    out, n = re.subn(r"\n  initial begin\n(?:    \S+\[\d+\] = \d+'h0+;\n)+  end\n", "\n", text)
    if n != 1:
        raise RuntimeError(f"expected one zero-initialised RAM in the bank's Verilog, found {n}")
    return out


def run_yosys_uram(verilog_text, top, workdir: Path, *, timeout=None):
    """As :func:`netstor.bench.synth.run_yosys` (same script, its helpers for the figures)
    with ``synth_xilinx -uram`` (URAM288 inference for large memories, off by default in
    Yosys); not cached."""
    ys = script(top).replace(" -noclkbuf\n", " -noclkbuf -uram\n")
    assert "-uram" in ys
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "design.v").write_text(verilog_text)
    (workdir / "synth.ys").write_text(ys)
    t0 = time.perf_counter()
    p = subprocess.run([yosys_bin(), "-q", "-l", "yosys.log", "synth.ys"], cwd=workdir,
                       capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0 or not (workdir / "stat.json").exists():
        raise RuntimeError(f"yosys -uram failed: {(p.stderr or p.stdout)[-2000:]}")
    cells = parse_stat(workdir / "stat.json", top)
    return {"ok": True, "cells": cells, **summarise(cells),
            "depth": netlist_depth(workdir / "netlist.json", top),
            "yosys_seconds": round(time.perf_counter() - t0, 1), "cached": False}


def _figures(r, depth, width, lat):
    return {"depth": depth, "width": width, "LUT": r["LUT"], "FF": r["FF"],
            "BRAM36": r["BRAM36_equiv"], "URAM": r["URAM"],
            "lut_levels": r["depth"]["lut_levels"], "latency_cycles": lat,
            "yosys": {k: r[k] for k in ("cells", "depth", "yosys_seconds", "cached",
                                        "verilog_sha256") if k in r}}


def bench(out_dir, *, depth=128 * 1024, width=64, timeout=None, uram=True):
    """Synthesise the bank; write and return the figures (see the module docstring).

    Top level: the bench's standard script (``run_yosys``: Yosys maps the bank to block RAM,
    it infers URAM only when asked); with ``uram``, ``"uram_mapping"`` holds the same
    figures from a run with ``synth_xilinx -uram``."""
    out_dir = Path(out_dir)
    text, lat = bank_verilog(depth, width)
    r = run_yosys(text, TOP, out_dir / "synth_work" / f"register_bank_{depth}x{width}",
                  timeout=timeout, cache_dir=out_dir / "synth_cache")
    if not r.get("ok"):
        raise RuntimeError(f"yosys failed on the register bank: {r.get('error')}")
    fig = _figures(r, depth, width, lat)
    if uram:
        ru = run_yosys_uram(text, TOP, out_dir / "synth_work" /
                            f"register_bank_{depth}x{width}_uram", timeout=timeout)
        fig["uram_mapping"] = _figures(ru, depth, width, lat)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "register_bank.json").write_text(json.dumps(fig, indent=1) + "\n")
    return fig


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", nargs="?", default=str(repo_root() / "build" / "bench"))
    ap.add_argument("--depth", type=int, default=128 * 1024)
    ap.add_argument("--width", type=int, default=64)
    a = ap.parse_args(argv)
    fig = bench(a.out_dir, depth=a.depth, width=a.width)
    print(json.dumps({k: v for k, v in fig.items() if k not in ("yosys", "uram_mapping")}))
    if "uram_mapping" in fig:
        print("-uram:", json.dumps({k: v for k, v in fig["uram_mapping"].items()
                                    if k != "yosys"}))


if __name__ == "__main__":
    main()
