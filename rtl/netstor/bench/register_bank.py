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

Why ``synth_xilinx -uram`` gives 58 URAM288 for 128K x 64 (``memory_libmap`` debug log,
``debug memory_libmap -lib +/xilinx/urams.txt ...`` on the bank):

* **29 per copy, not 32**: Yosys' URAM model (``+/xilinx/urams.txt``) is 4K x 72 with byte
  writes and no cascade, so libmap folds the depth into width: the 32 slices of 4K x 64 sit
  side by side as one 4K x 2,048-bit memory (the write selects its 64-bit word with byte
  enables, the read is a 32:1 LUT mux), and 2,048 bits need ceil(2048 / 72) = 29 URAMs (every
  URAM's 72 bits are used; 32 would leave 8 of 72 idle). Vivado would instead cascade 32
  (no LUT mux).
* **x 2 copies ("replicates for ports: 2")**: the bank has one write port and two read
  ports, the packet read (port A, its own address) and the host read, which shares the write
  port's address (port B). A URAM port is single read/write with ``rdwr no_change``: a port
  that writes does not read in the same cycle. Yosys may put the host read on port B only if
  it can see that the read is never enabled while that port writes; the element's read enable
  is ``host & ~host_we`` and the write enable ``packet_we | host & host_we``, so the exclusion
  (a host access only in a cycle without a packet write) is a property of the control logic,
  not of the two expressions. Without it libmap needs three ports and builds two copies, each
  with the write on B and one read on A: 2 x 29 = 58.
* **The fix is a one-term change in the element**, logically redundant: read enable
  ``host & ~host_we & ~packet_we`` (or ``& ~we``). ``"uram_mapping_read_gated"`` measured it
  on the Verilog of that time with the term added (``_gate_host_read``): 29 URAM288. The
  element now has the term (``elements/register.py``), so ``"uram_mapping"`` itself should
  give 29 and the gated what-if the same (not re-run since).
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from amaranth.back import verilog
from amaranth.hdl import Module, Signal
from amaranth.lib import data

from netstor.elements import RegisterOp
from netstor.gateware.csr import CsrBuilder
from netstor.gateware.stages import build_element
from netstor.lang.program import Pipeline, Program
from netstor.paths import repo_root

from .synth import run_yosys, uram_script

__all__ = ["bench", "bank_verilog", "summary_line"]

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


def run_yosys_uram(verilog_text, top, workdir: Path, *, timeout=None, cache_dir=None):
    """As :func:`netstor.bench.synth.run_yosys` (same script, cached alike) with
    ``synth_xilinx -uram`` (URAM288 inference for large memories, off by default in Yosys)."""
    ys = uram_script(top)
    r = run_yosys(verilog_text, top, workdir, timeout=timeout, cache_dir=cache_dir, ys=ys)
    if not r.get("ok"):
        raise RuntimeError(f"yosys -uram failed: {str(r.get('error'))[-2000:]}")
    return r


def _gate_host_read(text):
    """The bank's Verilog with the host read port's enable ANDed with the write enable's
    complement (``if (<en>)`` -> ``if (<en> && !<we>)``), the shape that lets Yosys share URAM
    port B between the write and the host read (see the module docstring)."""
    we = re.search(r"if \((\S+)\)\n\s+(\S+_mem)\[(\S+)\] <= ", text)
    if not we:
        raise RuntimeError("bank write port not found in the Verilog")
    en_re = (r"if \((\S+)\) begin\n(\s+\S+ <= " + re.escape(we.group(2)) + r"\["
             + re.escape(we.group(3)) + r"\];)")
    out, n = re.subn(en_re, lambda m: f"if ({m.group(1)} && !{we.group(1)}) begin\n"
                     + m.group(2), text)
    if n != 1:
        raise RuntimeError(f"expected one host read port at the write address, found {n}")
    return out


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
                            f"register_bank_{depth}x{width}_uram", timeout=timeout,
                            cache_dir=out_dir / "synth_cache")
        fig["uram_mapping"] = _figures(ru, depth, width, lat)
        rg = run_yosys_uram(_gate_host_read(text), TOP, out_dir / "synth_work" /
                            f"register_bank_{depth}x{width}_uram_gated", timeout=timeout,
                            cache_dir=out_dir / "synth_cache")
        fig["uram_mapping_read_gated"] = dict(
            _figures(rg, depth, width, lat),
            note="host read enable ANDed with ~write enable (what-if on the generated "
                 "Verilog; the element's control already never overlaps them)")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "register_bank.json").write_text(json.dumps(fig, indent=1) + "\n")
    return fig


def summary_line(fig):
    """One line for people: the bank's BRAM mapping and, if run, its ``-uram`` mappings."""
    def one(f):
        return (f"{f['URAM']} URAM288 + {_n(f['BRAM36'])} BRAM36, {f['LUT']:,} LUT, "
                f"{f['FF']:,} FF, {f['lut_levels']} LUT levels")
    out = (f"register bank {fig['depth'] >> 10}K x {fig['width']} (latency "
           f"{fig['latency_cycles']}): {one(fig)}")
    if "uram_mapping" in fig:
        out += f"; -uram: {one(fig['uram_mapping'])}"
    if "uram_mapping_read_gated" in fig:
        out += f"; -uram, host read gated (what-if): {fig['uram_mapping_read_gated']['URAM']} URAM288"
    return out


def _n(x):
    return f"{x:g}" if isinstance(x, float) else str(x)


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
    print(summary_line(fig))


if __name__ == "__main__":
    main()
