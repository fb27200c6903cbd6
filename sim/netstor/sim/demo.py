"""``make demo-rtl`` (``python -m netstor.sim.demo``): the application block under realistic traffic.

Builds the whole core with Verilator, or reuses the build the core tests made
(``sim/core_build.py``: same generated Verilog, same ``build/sim/core``), then runs the
cocotb module ``sim/cocotb_demo.py``: routes and the ``prim`` program configured over AXI-Lite,
a few hundred frames of mixed traffic on all four inputs, every output compared with the golden
model, per-frame latency measured in clock cycles. Prints a report of the hardware counters
(read over AXI-Lite), the latency per traffic class, and whether hardware and model agreed;
writes the same figures to ``build/demo/report.json``. Exits non-zero when the hardware
disagreed with the model or the simulation failed.

Options / environment: ``--frames N`` (``NETSTOR_DEMO_FRAMES``, default 400), ``--seed S``
(``NETSTOR_SEED``, default 1), ``--out DIR`` (``NETSTOR_DEMO_OUT``, default ``build/demo``).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
import time
from pathlib import Path

from netstor.paths import build_dir
from netstor.sim.core_build import generate, run_core

CLOCK_MHZ = 250


def _fmt(n):
    return f"{n:,}" if isinstance(n, int) else str(n)


def _table(header, rows, indent="  "):
    """Aligned columns: first column left-aligned, the others right-aligned."""
    cols = [header] + rows
    widths = [max(len(str(r[i])) for r in cols) for i in range(len(header))]
    out = []
    for r in cols:
        cells = [str(r[0]).ljust(widths[0])] + [str(c).rjust(w) for c, w in
                                                zip(r[1:], widths[1:])]
        out.append(indent + "  ".join(cells).rstrip())
    return out


def format_report(r, *, build_note="", wall=None):
    L = []
    ns = 1000 / r["clock_mhz"]
    cyc = r["cycles"]
    L.append(f"netstor demo: whole core (Verilator) against the golden model - seed {r['seed']}, "
             f"{r['frames_sent']} frames, {r['clock_mhz']:g} MHz")
    line = (f"  simulated {cyc['total']:,} cycles ({cyc['total'] * ns / 1000:.1f} us: config "
            f"{cyc['config']:,}, traffic {cyc['traffic']:,}, drain {cyc['drain']:,}), "
            f"simulator {r['sim_wall_s']} s")
    if wall is not None:
        line += f", total {wall:.0f} s"
    L.append(line)
    if build_note:
        L.append("  " + build_note)
    L.append("")
    rows = []
    for name, d in r["inputs"].items():
        rows.append([name, _fmt(d.get("sent_frames", "-")), _fmt(d["pkts"]), _fmt(d["bytes"]),
                     d["drop_runt"], d["drop_oversize"], d["drop_error"], d["drop_full"]])
    L.append("INPUTS (hardware counters in<k>.*; 'sent' = offered by the testbench)")
    L += _table(["port", "sent", "pkts", "bytes", "runt", "oversize", "mac_err", "full"], rows)
    rows = []
    for name, d in r["outputs"].items():
        rows.append([name, _fmt(d["pkts"]), _fmt(d["bytes"]), d["drop_full"],
                     _fmt(d["received_frames"]), _fmt(d["expected_frames"])])
    L.append("OUTPUTS (out<q>.*; 'received' by the sinks, 'model' = golden model's count)")
    L += _table(["port", "pkts", "bytes", "drop_full", "received", "model"], rows)
    L.append("TABLES")
    L += _table(["table", "hit", "miss"],
                [[t, _fmt(v["hit"]), _fmt(v["miss"])] for t, v in r["tables"].items()])
    pe = r["parser_errors"]
    L.append("PARSE ERRORS  " + "  ".join(f"{k} {v}" for k, v in pe.items())
             + f"   (total {sum(pe.values())})")
    L.append("TM DROPS      " + "  ".join(f"{k} {v}" for k, v in r["tm"].items())
             + "    REG OPS  " + "  ".join(f"{k.split('.')[1]}.oob {v}"
                                             for k, v in r["register_ops"].items()))
    cpl = r["tx_completions"]
    fields = list(next(iter(cpl.values())))
    L.append("TX COMPLETIONS (to the host)")
    L += _table(["", *fields], [[p, *[v[f] for f in fields]] for p, v in cpl.items()])
    L.append("")
    L.append(f"LATENCY first beat in -> first beat out, per output copy "
             f"(cycles, and ns at {r['clock_mhz']:g} MHz)")
    hdr = ["class", "frames", "outs", "min", "mean", "p99", "max", "min ns", "mean ns",
           "p99 ns", "max ns", ""]
    rows = []
    for cls, c in r["classes"].items():
        s = c["latency"]
        if cls == "all":
            rows.append(["-" * 11] + [""] * (len(hdr) - 1))
        if s["n"]:
            lat = [s["min"], s["mean"], s["p99"], s["max"],
                   s["min_ns"], s["mean_ns"], s["p99_ns"], s["max_ns"]]
        else:
            lat = ["-"] * 8
        note = f"{c['no_output']} dropped" if c["no_output"] else ""
        rows.append([cls, c["frames"], c["outputs"], *lat, note])
    L += _table(hdr, rows)
    L.append("  by input frame size:")
    rows = []
    for b, s in r["latency_by_size"].items():
        if s["n"]:
            rows.append([b, "", s["n"], s["min"], s["mean"], s["p99"], s["max"],
                         s["min_ns"], s["mean_ns"], s["p99_ns"], s["max_ns"], ""])
    L += _table(["size", "", "outs", "min", "mean", "p99", "max", "min ns", "mean ns",
                 "p99 ns", "max ns", ""], rows)
    L.append("")
    ch = r["checks"]
    L.append(f"CHECKS  outputs {ch.get('outputs')}  completions {ch.get('completions')} "
             f"({r['completions']})  counters {ch.get('counters')} ({r['counters_compared']})"
             f"  register cells {ch.get('registers')} ({r['register_cells_compared']})")
    if r["status"] == "PASS":
        L.append(f"hardware == golden model: {r['frames_sent']} frames, "
                 f"{r['outputs_compared']} outputs compared")
    else:
        L.append(f"hardware != golden model ({r['frames_sent']} frames, "
                 f"{r['outputs_compared']} outputs received, {r['outputs_expected']} expected):")
        for p in r["problems"]:       # on screen without the frames' hex (report.json has it)
            for line in p.splitlines():
                short = line.split("; missing ")[0]
                L += textwrap.wrap(short, 110, initial_indent="  ", subsequent_indent="      ")
    return "\n".join(L)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.sim.demo", description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int,
                    default=int(os.environ.get("NETSTOR_DEMO_FRAMES", "400")))
    ap.add_argument("--seed", type=int, default=int(os.environ.get("NETSTOR_SEED", "1")))
    ap.add_argument("--out", type=Path,
                    default=Path(os.environ.get("NETSTOR_DEMO_OUT", build_dir("demo"))))
    args = ap.parse_args(argv)


    t0 = time.monotonic()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    report_path = out / "report.json"
    report_path.unlink(missing_ok=True)
    print(f"netstor demo: elaborating the core, then building it with Verilator in build/sim/core "
          f"(reused when unchanged; a fresh build takes ~2 min) ...", flush=True)
    _, d, _ = generate()
    exe = d / "tb_core"      # Verilator's executable: its mtime tells a rebuild from a reuse
    before = exe.stat().st_mtime if exe.exists() else None
    print(f"netstor demo: simulating {args.frames} frames (seed {args.seed}) ...", flush=True)
    error = None
    try:
        run_core("netstor.sim.cocotb_demo", "demo", extra_env={
            "NETSTOR_DEMO_FRAMES": str(args.frames), "NETSTOR_SEED": str(args.seed),
            "NETSTOR_DEMO_OUT": str(out)})
    except AssertionError as e:
        error = e
    wall = time.monotonic() - t0
    after = exe.stat().st_mtime if exe.exists() else None
    note = ("build: reused build/sim/core" if before is not None and before == after
            else "build: Verilator model (re)built in build/sim/core")
    if not report_path.exists():
        print(f"\nnetstor demo FAILED before writing a report (simulation log: "
              f"{d / 'demo' / 'sim.log'}):\n{error}", file=sys.stderr)
        return 1
    report = json.loads(report_path.read_text())
    report["wall_s"] = round(wall, 1)
    report_path.write_text(json.dumps(report, indent=1))
    print()
    print(format_report(report, build_note=note, wall=wall))
    print(f"\nreport: {report_path}")
    if error is not None or report["status"] != "PASS":
        print(f"\nnetstor demo FAILED: the hardware disagreed with the golden model "
              f"(simulation log: {d / 'demo' / 'sim.log'})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
