"""XORInc NetRepair on the whole default core (Verilator): payload bytes per clock at the
input, input stalls, REPAIRED bytes and latency, every repaired byte checked against galois.

``python -m netstor.offloads.xorinc.bench_core --out build/bench/xorinc_core.json`` (the
offload's ``experiments`` hook: ``make bench`` runs it through ``python -m
netstor.experiments``). It runs :mod:`.cocotb_bench` (``bench_netrepair``) on the shared
build of the default core (``netstor.sim.core_build.run_core``: ``build/sim/core``, built
once for every user), writes its raw records next to ``--out`` (``<stem>_raw.json``) and
the figures (:func:`analyse`) to ``--out``, and prints one line.

Workload per size (:data:`RUNS`, ``"<data bytes per packet>/<chunk bytes>"``): RS(4, 2),
the 4 helpers' PART frames of a few repairs (:func:`cocotb_bench.RepairBench.repairs_for`:
about ``budget_beats`` input beats, at least 2 repairs), helper-major, back to back on one
input (wire RX 1, one beat a clock, no idle cycle), outputs never back-pressured.

Figures (``{size: value}`` unless said):

* ``bytes_per_clock``: contribution data bytes entering the core over the input span (the
  first beat of the first PART accepted to the last beat of the last, edges inclusive). A
  PART frame is 128 header bytes (2 beats of the 64-byte bus) + its data, so at one beat a
  clock the input carries at most ``64 * d / (d + 2)`` data bytes a clock for ``d`` data
  beats per packet (``bus_limit_bytes_per_clock``): 64 only with no header at all. The
  engine behind it takes the data beats at 64 bytes a clock (``netstor.bench.gf_engine``);
* ``input_beats_per_clock``: beats accepted over the same span (1.0: the input never waited);
* ``input_stalls``: edges at which the input offered a beat (``tvalid``) and the core did not
  take it (``tready`` low), all sizes (per size: ``input_stalls_by_size``). Wire RX is not
  back-pressured by the core: what it cannot take is dropped at the input buffer, counted in
  ``dropped_at_input`` (``in1.drop_full``);
* ``repaired_bytes``: REPAIRED data bytes out to the requester; ``repaired_bytes_per_clock``
  over the output span (first beat of the first REPAIRED to last beat of the last);
* ``latency_cycles``: from the completing (last) contribution's first beat accepted at the
  input to its REPAIRED frame's first beat out (the smallest; ``latency_cycles_max`` the
  largest): store-and-forward of the PART frame at the input buffer + the core's fixed path;
* ``frames``: ``contributions_in``, ``repaired_out``, ``repaired_expected`` (one per packet
  position of each repair), ``repaired_missing``, ``unexpected_out`` (totals);
* ``byte_mismatches``: REPAIRED data bytes that differ from galois' repair plus the data
  bytes of expected REPAIRED frames that never came (0, or the figures are not of correct
  repairs; the run then exits 1).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

__all__ = ["RUNS", "analyse", "config", "main", "run", "size_key", "summary_line"]

#: (data bytes per packet, chunk bytes) measured
RUNS = ((64, 64), (64, 1024), (64, 4096), (256, 256), (256, 1024), (256, 4096),
        (1024, 1024), (1024, 4096))
MODULE = "netstor.offloads.xorinc.cocotb_bench"
TESTCASE = "bench_netrepair"
BEAT = 64


def size_key(size, chunk):
    return f"{size}/{chunk}"


def config(runs=RUNS, *, k=4, r=2, budget_beats=1500, min_repairs=2, max_repairs=32, seed=1):
    """The cocotb bench's configuration; a size must be a whole number of beats (a packet's
    data starts on a 64-byte boundary of the chunk), at most 1,024 bytes, and the chunk at
    most 4 KiB (the engine's 64 beats)."""
    for size, chunk in runs:
        if not (0 < size <= 1024 and size % BEAT == 0 and 0 < chunk <= 4096):
            raise ValueError(f"size {size}/{chunk}: packets of 64..1024 bytes in whole "
                             f"beats, chunks of at most 4096 bytes")
    return {"runs": [list(x) for x in runs], "k": k, "r": r, "budget_beats": budget_beats,
            "min_repairs": min_repairs, "max_repairs": max_repairs, "seed": seed}


def _run_figures(run):
    """The figures of one run's raw records (``cocotb_bench``'s format)."""
    ins = [i for i in run["inputs"] if i[0] is not None and i[1] is not None]
    outs = run["outputs"]
    data_in = sum(i[2] for i in ins)
    beats_in = sum(i[1] - i[0] + 1 for i in ins)
    span_in = max(i[1] for i in ins) - min(i[0] for i in ins) + 1 if ins else 0
    # the completing contribution of a slot: the last of its PARTs to arrive
    completing = {}
    for i in ins:
        key = (i[3], i[4])
        if key not in completing or i[0] > completing[key][0]:
            completing[key] = i
    lat = [o[0] - completing[(o[2], o[3])][0] for o in outs if (o[2], o[3]) in completing]
    expected = {(i[3], i[4]): i[2] for i in run["inputs"]}
    got = {(o[2], o[3]) for o in outs}
    missing = [key for key in expected if key not in got]
    rep_bytes = sum(o[4] for o in outs)
    span_out = max(o[1] for o in outs) - min(o[0] for o in outs) + 1 if outs else 0
    d = -(-run["size"] // BEAT)
    return {
        "bytes_per_clock": round(data_in / span_in, 4) if span_in else None,
        "bus_limit_bytes_per_clock": round(run["size"] / (d + 2), 4),
        "input_beats_per_clock": round(beats_in / span_in, 4) if span_in else None,
        "input_stalls": run["input_stalls"],
        "dropped_at_input": run["counters"].get("in1.drop_full", 0),
        "repaired_bytes": rep_bytes,
        "repaired_bytes_per_clock": round(rep_bytes / span_out, 4) if span_out else None,
        "latency_cycles": min(lat) if lat else None,
        "latency_cycles_max": max(lat) if lat else None,
        "frames": {"contributions_in": len(run["inputs"]), "repaired_out": len(outs),
                   "repaired_expected": len(expected), "repaired_missing": len(missing),
                   "unexpected_out": run["unexpected"]},
        "byte_mismatches": sum(o[5] for o in outs) + sum(expected[key] for key in missing),
        "repairs": run["repairs"], "input_span_cycles": span_in,
        "counters": run["counters"],
    }


def analyse(raw):
    """The figures (module docstring) of ``cocotb_bench``'s raw records."""
    per = {size_key(r["size"], r["chunk"]): _run_figures(r) for r in raw["runs"]}

    def by(name):
        return {key: f[name] for key, f in per.items()}
    frames = {}
    for f in per.values():
        for name, v in f["frames"].items():
            frames[name] = frames.get(name, 0) + v
    cfg = raw.get("config", {})
    return {
        "what": ("XORInc NetRepair through the whole default core (Verilator, lean "
                 "AXI-Stream driver): RS(%d, %d), the helpers' PART frames back to back on "
                 "one input (wire RX 1), no back-pressure on outputs; keys are "
                 "'<data bytes per packet>/<chunk bytes>'; every REPAIRED byte checked "
                 "against galois" % (cfg.get("k", 4), cfg.get("r", 2))),
        "bytes_per_clock": by("bytes_per_clock"),
        "bus_limit_bytes_per_clock": by("bus_limit_bytes_per_clock"),
        "input_beats_per_clock": by("input_beats_per_clock"),
        "input_stalls": sum(f["input_stalls"] for f in per.values()),
        "input_stalls_by_size": by("input_stalls"),
        "dropped_at_input": sum(f["dropped_at_input"] for f in per.values()),
        "repaired_bytes": by("repaired_bytes"),
        "repaired_bytes_per_clock": by("repaired_bytes_per_clock"),
        "latency_cycles": by("latency_cycles"),
        "latency_cycles_max": by("latency_cycles_max"),
        "frames": frames,
        "byte_mismatches": sum(f["byte_mismatches"] for f in per.values()),
        "runs": per,
        "config": cfg,
        "sim_cycles": raw.get("sim_cycles"),
        "sim_wall_s": raw.get("wall_s"),
    }


def ok(fig):
    """The figures are of correct repairs, all delivered."""
    fr = fig["frames"]
    return (fig["byte_mismatches"] == 0 and fr["repaired_missing"] == 0
            and fr["unexpected_out"] == 0 and fr["repaired_out"] == fr["repaired_expected"] > 0)


def summary_line(fig):
    bpc = ", ".join(f"{k} {v}" for k, v in fig["bytes_per_clock"].items())
    lat = ", ".join(f"{k} {v}" for k, v in fig["latency_cycles"].items())
    fr = fig["frames"]
    return (f"XORInc core NetRepair: input data bytes/clock {bpc}; input stalls "
            f"{fig['input_stalls']}, dropped {fig['dropped_at_input']}; latency cycles {lat}; "
            f"{fr['repaired_out']}/{fr['repaired_expected']} REPAIRED from "
            f"{fr['contributions_in']} PARTs, {fig['byte_mismatches']} byte mismatches "
            f"vs galois")


def run(out, cfg=None):
    """Run the cocotb bench, analyse, write ``out``; returns ``(figures, error or None)``."""
    from netstor.sim.core_build import run_core
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    raw_path = out.with_name(out.stem + "_raw.json").resolve()
    if raw_path.exists():
        raw_path.unlink()
    cfg = cfg or config()
    t0 = time.perf_counter()
    err = None
    try:
        # cocotb rewrites the asserts of cocotb_*.py only: galois (the reference) is
        # numba-compiled and breaks under assertion rewriting (as sim/test_core.py)
        run_core(MODULE, TESTCASE, extra_env={
            "COCOTB_REWRITE_ASSERTION_FILES": "cocotb_*.py",
            "NETSTOR_XI_BENCH_CFG": json.dumps(cfg),
            "NETSTOR_XI_BENCH_OUT": str(raw_path)})
    except AssertionError as e:
        err = str(e)[-4000:]
    if not raw_path.exists():
        raise RuntimeError(f"{MODULE}.{TESTCASE} wrote no records: {err}")
    fig = analyse(json.loads(raw_path.read_text()))
    fig["run_seconds"] = round(time.perf_counter() - t0, 1)
    fig["raw"] = raw_path.name
    if err:
        fig["error"] = err
    out.write_text(json.dumps(fig, indent=1) + "\n")
    return fig, err


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.offloads.xorinc.bench_core",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="build/bench/xorinc_core.json")
    ap.add_argument("--budget-beats", type=int, default=1500,
                    help="input beats per size (at least 2 repairs each)")
    ap.add_argument("--runs", help="sizes as SIZE/CHUNK,... (default: %s)"
                    % ",".join(size_key(*x) for x in RUNS))
    a = ap.parse_args(argv)
    runs = RUNS
    if a.runs:
        runs = [tuple(int(v) for v in x.split("/")) for x in a.runs.split(",")]
    try:
        fig, err = run(a.out, config(runs, budget_beats=a.budget_beats))
    except RuntimeError as e:                 # the simulation wrote no records
        print(f"netstor.offloads.xorinc.bench_core: FAILED: {e}", file=sys.stderr)
        return 1
    print(summary_line(fig), flush=True)
    if err or not ok(fig):
        print(f"netstor.offloads.xorinc.bench_core: FAILED: {err or 'see ' + str(a.out)}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
