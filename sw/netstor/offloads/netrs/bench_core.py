"""Bench figures of the XLS ranking core (``hls/ranking.x``, see ``hls/README.md``).

``ranking_figures(out)`` -> dict for the bench JSON: pipeline stages, latency in cycles (from
the generated Verilog's schedule), throughput (one selection per clock), XLS compile time, and
Yosys ``synth_xilinx -family xcup`` resources and logic depth of the generated module, run
through :func:`netstor.bench.synth.run_yosys` (same script, same cache ``<out>/synth_cache``,
same depth analysis as the other blocks; ``ltp -noff`` is not used for the reason given in
that module). ``python -m netstor.offloads.netrs.bench_core --out build/bench/hls.json`` writes it.
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

from netstor.bench import synth as _synth

CLOCK_MHZ = 250


def _dsp_registers(netlist_gz: Path):
    """How many DSP48E2 have none of their pipeline registers enabled (fully combinational)."""
    if not netlist_gz.exists():
        return None
    with gzip.open(netlist_gz, "rt") as f:
        j = json.load(f)
    n = comb = 0
    for mod in j["modules"].values():
        for cell in mod.get("cells", {}).values():
            if cell["type"].lstrip("\\").startswith("DSP48"):
                n += 1
                p = cell.get("parameters", {})
                regs = [p.get(k, "0") for k in ("AREG", "BREG", "MREG", "PREG")]
                if all(set(str(v)) <= {"0"} for v in regs):
                    comb += 1
    return {"dsp": n, "dsp_without_internal_registers": comb}


def ranking_figures(out: Path | str = "build/bench", *, stages: int | None = None,
                    timeout: int = 1800, log=print) -> dict:
    """Build (cached) and synthesise (cached by Verilog hash) the ranking core."""
    from . import ranking_core as hls
    out = Path(out)
    stages = hls.STAGES if stages is None else stages
    t0 = time.perf_counter()
    text, info = hls.ranking_verilog(stages)
    top = info["module"]
    work = out / "synth_work" / f"hls_{top}_s{stages}"
    r = _synth.run_yosys(text, top, work, timeout=timeout, cache_dir=out / "synth_cache")
    lat = info["latency"]
    res = {
        "block": "NetRS ranking core (XLS, hls/ranking.x)",
        "algorithms": ["C3 (R + q_hat^3 * T, q_hat = 1 + q + n*os, UQ.4 fixed point)",
                       "least outstanding requests", "power of two choices", "round robin"],
        "replicas_per_selection": hls.NR,
        "module": top, "verilog": info["verilog"], "xls_version": info["xls_version"],
        "delay_model": info["delay_model"], "pipeline_stages": info["stages"],
        "latency_cycles": lat,
        "latency_ns_at_250MHz": lat * 1000 / CLOCK_MHZ,
        "throughput_selections_per_clock": info["throughput_per_clock"],
        "selections_per_second_at_250MHz": CLOCK_MHZ * 1_000_000 * info["throughput_per_clock"],
        "xls_compile_seconds": info["compile_seconds"], "xls_cached": info.get("cached", False),
        "synth_ok": bool(r.get("ok")),
    }
    if r.get("ok"):
        d = r["depth"]
        res.update({
            "LUT": r["LUT"], "FF": r["FF"], "DSP": r["DSP"], "BRAM36_equiv": r["BRAM36_equiv"],
            "URAM": r["URAM"], "CARRY": r["CARRY"],
            "share_of_xcu250_pct": r["share_of_xcu250_pct"],
            "logic_depth_lut_levels": d["lut_levels"], "logic_depth_max_cells": d["max_cells"],
            "logic_depth_path": d["path_cell_types"], "path_from": d["path_from"],
            "path_to": d["path_to"],
            "lut_level_budget_250MHz": _synth.LUT_LEVELS_250MHZ,
            "within_lut_budget_250MHz": d["lut_levels"] <= _synth.LUT_LEVELS_250MHZ,
            "yosys_seconds": r.get("yosys_seconds"), "yosys_cached": r.get("cached", False),
        })
        dsp = _dsp_registers(work / "netlist.json.gz")
        if dsp is not None:
            res.update(dsp)
        res["notes"] = [
            "Latency counted from the generated Verilog (input flops + stage registers + "
            "output flops) and equal to the cycles measured in Verilator "
            "(sim/test_hls_ranking.py).",
            "Logic depth counts LUT levels between registers; DSP48E2 are path endpoints in "
            "that analysis. The XLS registers are not packed into the DSPs (AREG/BREG/MREG/"
            "PREG = 0), so the time through each multiplier (one or two cascaded DSPs, one "
            "multiplier level per pipeline stage) is not in the figure: check it with Vivado.",
        ]
    else:
        res["synth_error"] = r.get("error", "failed")[:500]
    res["wall_seconds"] = round(time.perf_counter() - t0, 1)
    log(f"netstor.bench: hls ranking: latency {lat} cycles, " + (
        f"LUT {res['LUT']} FF {res['FF']} DSP {res['DSP']} depth "
        f"{res['logic_depth_lut_levels']}" if r.get("ok") else res["synth_error"][:200]))
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="build/bench/hls.json", help="the JSON result")
    ap.add_argument("--stages", type=int, default=None)
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    res = ranking_figures(out.parent, stages=a.stages)
    out.write_text(json.dumps(res, indent=1) + "\n")
    return 0 if res["synth_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
