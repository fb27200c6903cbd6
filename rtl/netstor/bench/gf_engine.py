"""The XORInc GF(2^8) engine (:class:`netstor.gateware.gf_engine.GFEngine`) synthesised on its
own at full size (64 operations x 4 KiB chunks = 4,096 slots of 541 bits): Yosys
``synth_xilinx -family xcup`` (block RAM) and ``-uram``, cached by Verilog hash.

``bench(out_dir)`` writes ``<out_dir>/gf_engine.json``: ``n_ops``, ``chunk_beats``,
``bytes_per_clock`` (64: one beat a clock at every chunk size, the engine never stalls),
``latency_cycles``, ``LUT``, ``FF``, ``BRAM36``, ``URAM``, ``lut_levels`` and the multiplier
alone (``multiplier``: 64 lanes). Also ``python -m netstor.bench.gf_engine [out_dir]``.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from amaranth.back import verilog
from amaranth.hdl import Elaboratable, Module, Signal

from netstor.gateware.gf_engine import GFEngine, GFVecMul, LATENCY, MUL_LATENCY
from netstor.paths import repo_root

from .register_bank import _drop_zero_init, run_yosys_uram
from .synth import run_yosys

__all__ = ["bench", "engine_verilog"]

TOP = "bench_gf_engine"


def engine_verilog(n_ops=64, chunk_beats=64):
    """``(verilog, slot word bits)`` of the engine with every port a top-level port."""
    eng = GFEngine(n_ops=n_ops, chunk_beats=chunk_beats)
    text = verilog.convert(eng, name=TOP, emit_src=False)
    return _drop_zero_init(text), eng.word_bits


class _MulTop(Elaboratable):
    def __init__(self):
        self.mul = GFVecMul()
        self.coeff, self.x, self.p = Signal(8), Signal(512), Signal(512)

    def elaborate(self, platform):
        m = Module()
        m.submodules.mul = self.mul
        m.d.comb += [self.mul.coeff.eq(self.coeff), self.mul.x.eq(self.x),
                     self.p.eq(self.mul.p)]
        return m


def _figures(r):
    return {"LUT": r["LUT"], "FF": r["FF"], "BRAM36": r["BRAM36_equiv"], "URAM": r["URAM"],
            "lut_levels": r["depth"]["lut_levels"],
            "yosys": {k: r[k] for k in ("cells", "depth", "yosys_seconds", "cached",
                                        "verilog_sha256") if k in r}}


def bench(out_dir, *, n_ops=64, chunk_beats=64, timeout=None, uram=True):
    out_dir = Path(out_dir)
    cache = out_dir / "synth_cache"
    text, word_bits = engine_verilog(n_ops, chunk_beats)
    r = run_yosys(text, TOP, out_dir / "synth_work" / "gf_engine", timeout=timeout,
                  cache_dir=cache)
    if not r.get("ok"):
        raise RuntimeError(f"yosys failed on the GF engine: {str(r.get('error'))[-2000:]}")
    fig = {"n_ops": n_ops, "chunk_beats": chunk_beats, "chunk_bytes": 64 * chunk_beats,
           "slots": n_ops * chunk_beats, "slot_bits": word_bits,
           "bytes_per_clock": 64, "latency_cycles": LATENCY, **_figures(r)}
    mt = _MulTop()
    mtext = verilog.convert(mt, name="bench_gf_mul", ports=[mt.coeff, mt.x, mt.p],
                            emit_src=False)
    rm = run_yosys(mtext, "bench_gf_mul", out_dir / "synth_work" / "gf_mul", timeout=timeout,
                   cache_dir=cache)
    if rm.get("ok"):
        fig["multiplier"] = dict(_figures(rm), lanes=64, latency_cycles=MUL_LATENCY)
    if uram:
        ru = run_yosys_uram(text, TOP, out_dir / "synth_work" / "gf_engine_uram",
                            timeout=timeout, cache_dir=cache)
        fig["uram_mapping"] = _figures(ru)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "gf_engine.json").write_text(json.dumps(fig, indent=1) + "\n")
    return fig


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", nargs="?", default=str(repo_root() / "build" / "bench"))
    ap.add_argument("--ops", type=int, default=64)
    ap.add_argument("--chunk-beats", type=int, default=64)
    ap.add_argument("--no-uram", action="store_true")
    a = ap.parse_args(argv)
    fig = bench(a.out_dir, n_ops=a.ops, chunk_beats=a.chunk_beats, uram=not a.no_uram)
    print(json.dumps({k: (v if k not in ("multiplier", "uram_mapping") else
                          {kk: vv for kk, vv in v.items() if kk != "yosys"})
                      for k, v in fig.items() if k != "yosys"}, indent=1))


if __name__ == "__main__":
    main()
