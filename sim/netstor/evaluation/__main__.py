"""``python -m netstor.evaluation`` (``make eval``): run the evaluation and write
``summary.json``, ``report.md`` and the plots into ``--out``.

Sections: the platform's (model speed, validation of the simulator and the compiled model),
then every registered offload's ``evaluation`` hook, in registry order. All their runs go to
one executor (a local process pool by default; ``--executor tcp://HOST:8786`` for a Dask
cluster), so the machine's cores stay busy across sections.
"""
from __future__ import annotations

import argparse
import sys
import time

from netstor.offloads import offloads

from .report import meta_info, write_outputs
from .runner import EXECUTORS, make_executor, run_tasks

__all__ = ["main", "sections"]

SCALES = ("smoke", "headline", "full")


def sections(only=None):
    """``[(name, evaluation object)]``: the platform's, then the offloads' (their
    ``evaluation`` hook)."""
    from .platform import PLATFORM      # imports the simulator: only when evaluating
    out = [(PLATFORM.name, PLATFORM)]
    for off in offloads():
        ev = off.hook("evaluation")
        if ev is not None:
            out.append((off.name, ev))
    if only:
        unknown = set(only) - {n for n, _ in out}
        if unknown:
            raise SystemExit(f"netstor.evaluation: no section(s) {sorted(unknown)}; "
                             f"known: {[n for n, _ in out]}")
        out = [(n, e) for n, e in out if n in only]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.evaluation",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="build/eval", help="output folder")
    ap.add_argument("--scale", choices=SCALES, default="headline",
                    help="smoke: seconds (tests); headline: the subset make eval runs "
                         "(<= 30 min on 2 cores); full: the papers' whole sweeps (a cluster)")
    ap.add_argument("--executor", default="local", help=f"one of {', '.join(EXECUTORS)}")
    ap.add_argument("--workers", type=int, default=None,
                    help="local pool / dask-local workers (default: the cores)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", action="append", help="only these sections (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the sections' runs and stop")
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    secs = sections(a.only)
    tasks = {name: ev.tasks(a.scale, a.seed) for name, ev in secs}
    if a.list:
        for name, ts in tasks.items():
            print(f"{name}: {len(ts)} runs")
            for t in ts:
                print(f"  {t.key}: {t.fn}({t.kwargs})")
        return 0
    t0 = time.perf_counter()
    ex = make_executor(a.executor, a.workers)
    print(f"netstor.evaluation: {sum(map(len, tasks.values()))} runs "
          f"({', '.join(f'{n} {len(t)}' for n, t in tasks.items())}) on {ex.name}", flush=True)
    try:
        all_tasks = [t for ts in tasks.values() for t in ts]
        results, seconds = run_tasks(all_tasks, ex, progress=not a.no_progress)
    finally:
        ex.close()
    out_sections = []
    for name, ev in secs:
        mine = {t.key: results[t.key] for t in tasks[name]}
        out_sections.append(ev.summarise(mine, a.out, scale=a.scale))
    wall = time.perf_counter() - t0
    meta = meta_info(a.scale, a.seed, ex.name, wall)
    meta["run_seconds"] = {k: round(v, 2) for k, v in sorted(seconds.items())}
    summary, report = write_outputs(a.out, out_sections, meta=meta)
    print(f"netstor.evaluation: wrote {summary} and {report} in {wall / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
