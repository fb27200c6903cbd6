"""The cluster simulator against the real-socket test bed at the test bed's own parameters.

``python -m netstor.offloads.netclone.calibrate [--duration 10] [--out FILE]`` (root: the test
bed's network namespaces)

The test bed's NetClone comparison (:mod:`.compare`: 2 clients x 60 req/s open loop, 4 storage
servers with one worker each, exponential service of mean 10 ms, every frame through the
model switch) runs once per scheme; then the simulator (:class:`netstor.cluster.rack.RackRun`)
runs the same set-up -- the same clients, servers, workers, service-time specification,
offered rate, number of requests (rate x duration), the test bed's 1 s client time-out and no
warm-up (the test bed keeps every sample) -- with the matching scheme (``single`` ->
``direct``, ``clone`` -> ``cclone``, ``netclone`` -> ``netclone``, random policy in both).
Nothing is fitted: the simulator's switch is the device (a few hundred ns), the test bed's is
a Python process on shared CPUs, and what the test bed adds on top (its ``model_us_per_frame``
and its sockets) shows as the difference of the means. That addition is measured in the same
session: the same schemes and load with no service time (``testbed_floor``); the difference
less that floor is what is left unexplained. The issue's bar: means within 25 %.

The simulator runs ``sim_scale`` (20) times the test bed's requests: its mean is then the
model's expectation at those parameters (within ~1 %), not a second ~1,000-request sample whose own noise
adds to the comparison (NetClone at 8 s: 11,554 / 12,901 / 12,559 / 12,386 us over seeds 1-4,
against 12,226 us over 48,000 requests; no cloning 14,060-14,473 against 14,298).
"""
from __future__ import annotations

import argparse
import io
import json
import sys
import time
from pathlib import Path

__all__ = ["calibrate", "SCHEME_MAP", "main"]

#: test-bed scheme -> the simulator's
SCHEME_MAP = {"single": "direct", "clone": "cclone", "netclone": "netclone"}


def simulate(scheme, *, clients, servers, workers, service, rate, duration, seed):
    """The simulator's run at the test bed's parameters (``rate`` per client)."""
    from netstor.cluster.rack import RackRun
    run = RackRun(SCHEME_MAP[scheme], clients=clients, servers=servers, workers=workers,
                  service=service, rate_rps=rate * clients,
                  requests=int(round(rate * clients * duration)), seed=seed, warmup=0.0,
                  timeout_us=1e6)
    return run.run()


def calibrate(*, duration=10.0, rate=60.0, clients=2, servers=4, workers=1,
              service="exp:10000", schemes=("single", "netclone"), seed=1, sim_scale=20,
              log=None):
    """Run both and return ``{"setup", "rows": [{scheme, testbed: {...}, sim: {...},
    testbed_floor: {...}, mean_diff_pct, p50_diff_pct, mean_diff_less_floor_pct}],
    "worst_mean_diff_pct"}`` (differences: test bed over simulator; ``testbed_floor``: the
    test bed with no service time, the latency it adds on its own; the simulator runs
    ``sim_scale`` times the test bed's requests)."""
    from .compare import run_compare
    t0 = time.monotonic()
    tb = run_compare(clients=clients, servers=servers, rate=rate, duration=duration,
                     dists={"exp": service, "floor": "none"}, schemes=list(schemes),
                     seed=seed, workers=workers, log=log or io.StringIO())
    floor = {r["scheme"]: r for r in tb["runs"]["floor"]}
    rows = []
    for r in tb["runs"]["exp"]:
        s = simulate(r["scheme"], clients=clients, servers=servers, workers=workers,
                     service=service, rate=rate, duration=duration * sim_scale, seed=seed)
        keys = ("mean_us", "p50_us", "p99_us", "timeouts")
        row = {"scheme": r["scheme"], "sim_scheme": SCHEME_MAP[r["scheme"]],
               "testbed": {k: r[k] for k in keys} | {"replies": r["replies"]},
               "sim": {k: s[k] for k in keys} | {"n": s["n"]}}
        for k in ("mean_us", "p50_us"):
            a, b = r[k], s[k]
            row[k.replace("_us", "_diff_pct")] = (round((a - b) / b * 100, 1)
                                                  if a is not None and b else None)
        # the test bed's own latency: the same scheme and load with no service time (its
        # Python clients, sockets and model switch), measured in the same session
        f = floor[r["scheme"]]
        row["testbed_floor"] = {k: f[k] for k in keys}
        row["mean_diff_less_floor_pct"] = round(
            (r["mean_us"] - f["mean_us"] - s["mean_us"]) / s["mean_us"] * 100, 1)
        rows.append(row)
    return {"setup": {"clients": clients, "servers": servers, "workers": workers,
                      "service": service, "rate_per_client": rate, "duration_s": duration,
                      "seed": seed, "sim_scale": sim_scale},
            "testbed_model_us_per_frame": tb.get("model_us_per_frame"),
            "rows": rows,
            "worst_mean_diff_pct": max(abs(r["mean_diff_pct"]) for r in rows),
            "wall_s": round(time.monotonic() - t0, 1)}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.offloads.netclone.calibrate",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="build/bench/calibration.json")
    a = ap.parse_args(argv)
    from netstor.testbed.experiment import run_main

    def run():
        res = calibrate(duration=a.duration, seed=a.seed,
                        schemes=tuple(SCHEME_MAP), log=sys.stderr)
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
        return res

    def table(r):
        lines = ["scheme     mean us (test bed / sim)   diff   p50 us (test bed / sim)   diff"
                 "   floor mean us   diff less floor"]
        for row in r["rows"]:
            t, s = row["testbed"], row["sim"]
            lines.append(f"{row['scheme']:<10} {t['mean_us']:>10.0f} / {s['mean_us']:<10.0f}"
                         f"{row['mean_diff_pct']:>+6.1f}% {t['p50_us']:>10.0f} / "
                         f"{s['p50_us']:<10.0f}{row['p50_diff_pct']:>+6.1f}%"
                         f"{row['testbed_floor']['mean_us']:>12.0f}"
                         f"{row['mean_diff_less_floor_pct']:>+12.1f}%")
        return "\n".join(lines)
    return run_main("netclone calibrate", run, table, a.out)


if __name__ == "__main__":
    sys.exit(main())
