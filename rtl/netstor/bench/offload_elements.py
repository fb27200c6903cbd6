"""The elements of the offloads that are not in the default bitstream (``bitstream=False``),
synthesised one by one at their programs' default sizes: the per-block bench
(:mod:`netstor.bench.synth`) covers only the default core's elements, so an offload that runs in
the model, the test bed and the simulator but not yet in the core has its gateware measured
here, before it joins the core.

For every such offload the pipeline is ``default_pipeline(extra=(name,))`` and the elements
measured are the ones that pipeline adds to the default one (ingress and egress; an egress
element is built once per output copy in the core, ``instances``). Each element alone
(:func:`netstor.bench.synth.block_element`, PHV in and out as ports, its host ports brought
out) goes through Yosys ``synth_xilinx -family xcup`` (block RAM), cached by Verilog hash; an
element whose banks hold at least :data:`URAM_MIN_BITS` bits (a large register bank, e.g. an
in-network object list at 128K slots) is synthesised again with ``-uram``
(:func:`netstor.bench.register_bank.run_yosys_uram`). Zero ``initial`` blocks of large RAMs are
dropped first (block RAM and URAM power up cleared; Yosys keeps an init and then refuses URAM).

``bench(out_dir)`` writes ``<out_dir>/offload_elements.json``:

* ``offloads.<name>``: ``program``, ``pipeline_header_path_cycles`` (not measured here: see the
  offload's docs), ``elements`` (per element: ``kind``, ``label``, ``instances``,
  ``latency_cycles``, ``bank_bits``, ``LUT`` (of which ``LUT_as_srl``: SRL16E delay lines,
  mostly the PHV carried through the element's latency: each block alone carries the whole
  PHV, which the core shares per stage), ``FF``, ``BRAM36``, ``URAM``, ``DSP``,
  ``lut_levels`` and, for a large bank, ``uram_mapping`` with the same figures and
  ``uram_expected`` (:func:`uram_no_cascade`, the count a 4K x 72 URAM without cascade gives),
  ``yosys`` seconds/cached), ``total_bram`` / ``total_uram`` (instances x element, every
  large bank in block RAM, respectively in URAM), ``deepest`` (element, LUT levels),
  ``over_limit`` (elements above 8 LUT levels);
* the dict returned (merged into ``synth.json["standalone"]["offload_elements"]`` and printed
  by ``make bench``'s summary, one row per entry): per offload program ``<prog>.<element> <depth
  x width> -uram`` / ``bram`` for every large bank, ``<prog>.others (n)`` (the sum of the other
  elements, instances counted, deepest of them) and ``<prog> total, large banks in URAM``.

``python -m netstor.bench.offload_elements [out_dir] [--offload NAME ...]``.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from netstor.paths import repo_root

from .register_bank import run_yosys_uram
from .synth import (LUT_LEVELS_250MHZ, URAM_MIN_BITS, _extra_verilog, block_element,
                    drop_zero_inits, element_instances, run_yosys, uram_cascade, uram_no_cascade)

__all__ = ["bench", "summary_line", "uram_no_cascade", "offload_names"]

TOP = "bench_offload_element"
FIGS = ("LUT", "FF", "BRAM36", "URAM", "DSP")


def offload_names():
    """The registered offloads not in the default bitstream."""
    from netstor.offloads import offloads
    return [o.name for o in offloads() if not o.bitstream]


def _drop_zero_inits(text):
    """``text`` without the all-zero ``initial`` blocks of RAMs (any number of them)."""
    return drop_zero_inits(text)[0]


def _figs(r):
    return {"LUT": r["LUT"], "LUT_as_srl": r.get("LUT_as_srl"), "FF": r["FF"],
            "BRAM36": r["BRAM36_equiv"], "URAM": r["URAM"],
            "DSP": r["DSP"], "lut_levels": r["depth"]["lut_levels"],
            "path": r["depth"].get("path_cell_types"),
            "yosys": {"seconds": r.get("yosys_seconds"), "cached": bool(r.get("cached")),
                      "peak_rss_mib": r.get("peak_rss_mib"),
                      "verilog_sha256": r.get("verilog_sha256")}}


def _bank_shapes(e):
    banks = getattr(e, "banks", None)
    return [(b.qualname, b.depth, b.width) for b in (banks() if callable(banks) else [])]


def new_elements(name):
    """``(pipeline, [(key, element, instances)])``: what offload ``name`` adds to the default
    pipeline, in pipeline order."""
    from netstor.programs import default_pipeline
    base = {k for k, _e, _n in element_instances(default_pipeline())}
    pl = default_pipeline(extra=(name,))
    return pl, [x for x in element_instances(pl) if x[0] not in base]


def bench_offload(name, out_dir: Path, *, timeout=None, uram=True, log=print):
    pl, els = new_elements(name)
    cache, work = out_dir / "synth_cache", out_dir / "synth_work"
    res = {"elements": {}, "programs": sorted({e.qualname.split(".")[0] for _k, e, _n in els})}
    for key, e, n in els:
        t0 = time.perf_counter()
        v, lat = block_element(pl, e, TOP)
        v = _drop_zero_inits(v + _extra_verilog(e))
        shapes = _bank_shapes(e)
        bits = sum(d * w for _q, d, w in shapes)
        row = {"kind": type(e).__name__, "label": e.bench_label, "instances": n,
               "latency_cycles": lat, "bank_bits": bits,
               "banks": [{"bank": q, "depth": d, "width": w} for q, d, w in shapes]}
        r = run_yosys(v, TOP, work / ("oe_" + key.replace(":", "_")), timeout=timeout,
                      cache_dir=cache)
        if not r.get("ok"):
            row.update(ok=False, error=str(r.get("error"))[-600:])
            res["elements"][key] = row
            log(f"netstor.bench: offload element {key}: FAILED {row['error'][:200]}")
            continue
        row.update(ok=True, **_figs(r))
        if uram and bits >= URAM_MIN_BITS:
            ru = run_yosys_uram(v, TOP, work / ("oe_" + key.replace(":", "_") + "_uram"),
                                timeout=timeout, cache_dir=cache)
            row["uram_mapping"] = _figs(ru)
            row["uram_expected"] = {
                "yosys_no_cascade": sum(uram_no_cascade(d, w) for _q, d, w in shapes),
                "with_cascade": sum(uram_cascade(d, w) for _q, d, w in shapes),
                "bits_over_288k": round(bits / (4096 * 72), 1)}
        row["wall_seconds"] = round(time.perf_counter() - t0, 1)
        res["elements"][key] = row
        u = row.get("uram_mapping")
        log(f"netstor.bench: offload element {key}: LUT {row['LUT']} FF {row['FF']} BRAM36 "
            f"{row['BRAM36']} levels {row['lut_levels']}"
            + (f"; -uram: URAM {u['URAM']} BRAM36 {u['BRAM36']} LUT {u['LUT']} levels "
               f"{u['lut_levels']}" if u else "") + f" ({row['wall_seconds']} s)")
    ok = [r for r in res["elements"].values() if r.get("ok")]
    for tag, pick in (("total_bram", lambda r: r), ("total_uram",
                                                      lambda r: r.get("uram_mapping", r))):
        res[tag] = {k: sum(r["instances"] * pick(r)[k] for r in ok) for k in FIGS}
    levels = [(k, r["lut_levels"]) for k, r in res["elements"].items() if r.get("ok")]
    levels += [(k + " (-uram)", r["uram_mapping"]["lut_levels"])
               for k, r in res["elements"].items() if r.get("uram_mapping")]
    if levels:
        k, lv = max(levels, key=lambda x: x[1])
        res["deepest"] = {"element": k, "lut_levels": lv}
    res["over_limit"] = [{"element": k, "lut_levels": lv} for k, lv in levels
                         if lv > LUT_LEVELS_250MHZ]
    res["failed"] = [k for k, r in res["elements"].items() if not r.get("ok")]
    return res


def rows(full):
    """The compact rows (``synth.json``'s standalone entry, one printed line each)."""
    out = {}
    for name, res in full["offloads"].items():
        big = {k: r for k, r in res["elements"].items() if r.get("uram_mapping")}
        for k, r in big.items():
            shp = " + ".join(f"{b['depth']}x{b['width']}" for b in r["banks"])
            el = k.split(":", 1)[1]
            out[f"{el} {shp} -uram"] = {x: r["uram_mapping"][x] for x in FIGS + ("lut_levels",)}
            out[f"{el} {shp} bram"] = {x: r[x] for x in FIGS + ("lut_levels",)}
        rest = [r for k, r in res["elements"].items() if r.get("ok") and k not in big]
        if rest:
            agg = {x: sum(r["instances"] * r[x] for r in rest) for x in FIGS}
            agg["lut_levels"] = max(r["lut_levels"] for r in rest)
            progs = "+".join(res["programs"])
            out[f"{progs} other elements ({len(rest)}, x instances)"] = agg
        tot = dict(res["total_uram"])
        tot["lut_levels"] = max([r["uram_mapping"]["lut_levels"] for r in big.values()]
                                + [r["lut_levels"] for r in rest], default=None)
        out[f"{name} total (large banks in URAM)"] = tot
        for k in res["failed"]:
            out[k] = {"ok": False, "error": res["elements"][k].get("error")}
    return out


def bench(out_dir, *, names=None, timeout=None, uram=True, log=print):
    """Synthesise every element the offloads ``names`` (default: every registered offload
    not in the default bitstream) add to the default pipeline; write
    ``offload_elements.json``; return the compact rows (see the module docstring)."""
    out_dir = Path(out_dir)
    full = {"limit_lut_levels": LUT_LEVELS_250MHZ, "uram_min_bits": URAM_MIN_BITS,
            "method": "each element alone (netstor.bench.synth.block_element) in "
                      "default_pipeline(extra=(offload,)), Yosys synth_xilinx -family xcup "
                      "(-uram again for banks >= uram_min_bits); zero RAM inits dropped",
            "offloads": {}}
    for name in names if names is not None else offload_names():
        full["offloads"][name] = bench_offload(name, out_dir, timeout=timeout, uram=uram,
                                               log=log)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "offload_elements.json").write_text(json.dumps(full, indent=1) + "\n")
    return rows(full)


def summary_line(rows_):
    """One line: every row's LUT/FF/BRAM36/URAM/levels."""
    return "offload elements: " + "; ".join(
        f"{k}: " + (f"URAM {r['URAM']}, BRAM36 {r['BRAM36']:g}, LUT {r['LUT']:,}, FF "
                    f"{r['FF']:,}, {r['lut_levels']} LUT levels" if r.get("ok", True)
                    else "failed") for k, r in rows_.items() if isinstance(r, dict))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", nargs="?", default=str(repo_root() / "build" / "bench"))
    ap.add_argument("--offload", action="append", default=None,
                    help="offload name (repeatable; default: every bitstream=False offload)")
    ap.add_argument("--no-uram", action="store_true")
    a = ap.parse_args(argv)
    r = bench(a.out_dir, names=a.offload, uram=not a.no_uram)
    print(summary_line(r))


if __name__ == "__main__":
    main()
