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


FF_TYPES = ("FDRE", "FDSE", "FDCE", "FDPE")


def _int_param(params, k, default=1):
    v = str(params.get(k, default))
    return int(v, 2) if v and set(v) <= {"0", "1"} else int(v)


def dsp_registers(netlist: Path):
    """The DSP48 cells of a mapped netlist and how they are registered, read from the netlist
    itself (``None`` if it is missing):

    * ``dsp_internal_registers``: cells with their own multiplier or output register on (the
      ``MREG`` or ``PREG`` parameter; Yosys writes every parameter of the cells it maps, and a
      missing one counts as the primitive's default 1, like ``synth.dsp_comb_inputs``);
      ``dsp_without_internal_registers``: the others (combinational from A/B to P);
    * ``dsp_between_registers``: cells with no logic on either side: every A/B/C/D input bit
      is registered in the cell (``AREG`` ...) or driven by a flip-flop, a constant or a DSP
      output whose ``PREG`` is on, and every used P bit is registered in the cell (``MREG`` or
      ``PREG``) or drives only flip-flop D inputs or DSP inputs registered there (``AREG``,
      ``BREG``, ``CREG``, ``DREG``). Such a multiply is a register-to-register path of its own:
      the shape a DSP absorbs as AREG/BREG + MREG/PREG (Vivado does; Yosys' ``xilinx_dsp`` packs
      registers only for DSP48E1, see hls/README.md).
    """
    netlist = Path(netlist)
    if not netlist.exists():
        return None
    opener = gzip.open if netlist.suffix == ".gz" else open
    with opener(netlist, "rt") as f:
        j = json.load(f)
    n = internal = between = 0
    for mod in j["modules"].values():
        cells = mod.get("cells", {})
        if not any(c["type"].lstrip("\\").startswith("DSP48") for c in cells.values()):
            continue
        drv, users = {}, {}
        for name, c in cells.items():
            dirs = c.get("port_directions", {})
            for port, bits in c["connections"].items():
                for b in bits:
                    if not isinstance(b, int):
                        continue
                    if dirs.get(port) == "output":
                        drv[b] = (name, port)
                    else:
                        users.setdefault(b, []).append((name, port))

        def is_dsp(name):
            return cells[name]["type"].lstrip("\\").startswith("DSP48")

        def registered_source(b):
            if b not in drv:
                return True                        # constant or top-level input
            name, port = drv[b]
            t = cells[name]["type"]
            if t.startswith(FF_TYPES):
                return True
            return is_dsp(name) and port == "P" and _int_param(cells[name]["parameters"], "PREG")

        def registered_sink(name, port):
            if cells[name]["type"].startswith(FF_TYPES):
                return port == "D"
            if is_dsp(name) and port in ("A", "B", "C", "D"):
                return _int_param(cells[name]["parameters"], port + "REG") > 0
            return False
        for name, c in cells.items():
            if not is_dsp(name):
                continue
            n += 1
            p = c.get("parameters", {})
            own = _int_param(p, "MREG") or _int_param(p, "PREG")
            internal += bool(own)
            conn = c["connections"]
            ins_ok = all(_int_param(p, port + "REG") or registered_source(b)
                         for port in ("A", "B", "C", "D") for b in conn.get(port, [])
                         if isinstance(b, int))
            outs = [u for b in conn.get("P", []) if isinstance(b, int) for u in users.get(b, [])]
            outs_ok = bool(own) or (bool(outs) and all(registered_sink(*u) for u in outs))
            between += ins_ok and outs_ok
    return {"dsp": n, "dsp_internal_registers": internal,
            "dsp_without_internal_registers": n - internal, "dsp_between_registers": between}


def xc7_packing(verilog: str, top: str, work: Path, cache_dir: Path, timeout=1800):
    """The same Verilog through ``synth_xilinx -family xc7`` (DSP48E1), the one family whose
    Yosys DSP pass packs A/B/M/P registers: :func:`dsp_registers` of that netlist, cached by
    the Verilog's hash. A proxy for what a packer does with the schedule, not the target."""
    import hashlib
    key = hashlib.sha256((verilog + "\0xc7 v2").encode()).hexdigest()[:20]
    hit = Path(cache_dir) / f"xc7_{top}-{key}.json"
    if hit.exists():
        return json.loads(hit.read_text())
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    (work / "design.v").write_text(verilog)
    (work / "xc7.ys").write_text(f"read_verilog -sv design.v\n"
                                 f"synth_xilinx -family xc7 -top {top} -flatten -noiopad "
                                 f"-noclkbuf\nwrite_json xc7.json\n")
    code, secs, _ = _synth._run_measured([_synth.yosys_bin(), "-q", "xc7.ys"], work, timeout)
    if code != 0 or not (work / "xc7.json").exists():
        return {"ok": False, "error": f"yosys exit {code}"}
    r = {"ok": True, "family": "xc7", **dsp_registers(work / "xc7.json"),
         "yosys_seconds": round(secs, 1)}
    with open(work / "xc7.json", "rb") as src, gzip.open(work / "xc7.json.gz", "wb") as dst:
        dst.write(src.read())
    (work / "xc7.json").unlink()
    hit.parent.mkdir(parents=True, exist_ok=True)
    hit.write_text(json.dumps(r, indent=1))
    return r


def ranking_figures(out: Path | str = "build/bench", *, stages: int | None = None,
                    timeout: int = 1800, log=print, xc7: bool = False) -> dict:
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
        dsp = dsp_registers(work / "netlist.json.gz")
        if dsp is None and r.get("cached"):
            net = out / "synth_cache" / f"{top}-{r.get('verilog_sha256')}.netlist.json.gz"
            dsp = dsp_registers(net)
        if dsp is not None:
            res.update(dsp)
        res["lut_levels_through_dsp"] = d.get("lut_levels_through_comb_dsp")
        if xc7:
            res["xc7_proxy"] = xc7_packing(text, top, out / "synth_work" / f"hls_{top}_xc7",
                                           out / "synth_cache", timeout)
        res["notes"] = [
            "Latency counted from the generated Verilog (input flops + stage registers + "
            "output flops) and equal to the cycles measured in Verilator "
            "(sim/test_hls_ranking.py).",
            "DSP figures are read from the mapped netlist's DSP48E2 parameters and "
            "connections. Yosys' xilinx_dsp packs A/B/M/P registers only for DSP48E1 (xc7), "
            "so on xcup every DSP48E2 has MREG = PREG = 0; dsp_between_registers counts those "
            "with no logic either side (operands straight from registers, product straight "
            "into registers: the pipeline registers Vivado absorbs as AREG/BREG and "
            "MREG/PREG), xc7_proxy the same Verilog through Yosys' DSP48E1 packer.",
        ]
    else:
        res["synth_error"] = r.get("error", "failed")[:500]
    res["wall_seconds"] = round(time.perf_counter() - t0, 1)
    log(f"netstor.bench: hls ranking: latency {lat} cycles, " + (
        f"LUT {res['LUT']} FF {res['FF']} DSP {res['DSP']} depth "
        f"{res['logic_depth_lut_levels']} DSP between registers "
        f"{res.get('dsp_between_registers')}" if r.get("ok")
        else res["synth_error"][:200]))
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="build/bench/hls.json", help="the JSON result")
    ap.add_argument("--stages", type=int, default=None)
    ap.add_argument("--xc7", action="store_true",
                    help="also map to xc7 (DSP48E1), where Yosys packs DSP registers")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    res = ranking_figures(out.parent, stages=a.stages, xc7=a.xc7)
    out.write_text(json.dumps(res, indent=1) + "\n")
    return 0 if res["synth_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
