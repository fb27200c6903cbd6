"""The platform's part of the evaluation: how fast the compiled model is against the
interpreter, and the checks that make the simulator's figures worth reading (the M/M/c
queue against Erlang C, the compiled model against the interpreter, simulator traces
replayed on the RTL in Verilator: ``netstor.cluster.replay``, not at the smoke scale)."""
from __future__ import annotations

from .report import Section
from .runner import Task

__all__ = ["PLATFORM", "compiled_equivalence"]

#: packets per built-in program the evaluation compares (the test suite compares 10^5 each)
EQUIV_PACKETS = {"smoke": 500, "headline": 20_000, "full": 100_000}
PROGRAMS = ("l3", "prim", "nc", "rs")
MMC = {"smoke": 20_000, "headline": 300_000, "full": 1_000_000}


def compiled_equivalence(program, n, seed=1):
    """``n`` packets of ``program``'s traffic through the interpreter and the compiled model
    side by side (``sw/netstor/model/test_compiled.py``: every output, counter and memory
    cell compared); a difference raises."""
    from netstor.model.test_compiled import compare    # the traffic lives with the test
    pair = compare(program, n, seed=seed)
    return {"program": program, "packets": pair.packets, "mismatches": 0}


class _Platform:
    name = "platform"

    def tasks(self, scale, seed):
        ts = [Task("platform/model_speed", "netstor.testbed.framecost:model_speed",
                   {"n": 60 if scale == "smoke" else 300, "rounds": 1 if scale == "smoke" else 3},
                   cost=3)]
        ts += [Task(f"platform/equiv/{p}", "netstor.evaluation.platform:compiled_equivalence",
                    {"program": p, "n": EQUIV_PACKETS[scale], "seed": seed}, cost=2)
               for p in PROGRAMS]
        for c, rho in ((4, 0.7), (15, 0.9)):
            ts.append(Task(f"platform/mmc/c{c}_rho{rho}", "netstor.cluster.validate:mmc_check",
                           {"c": c, "rho": rho, "requests": MMC[scale], "seed": seed}, cost=2))
        if scale != "smoke":      # minutes of Verilator each: not in the test suite's smoke run
            from netstor.cluster.replay import cases
            ts += [Task(f"platform/replay/{s}", "netstor.cluster.replay:replay_case",
                        {"scheme": s, "seed": seed}, cost=8) for s in cases()]
        return ts

    def summarise(self, results, out_dir, scale="headline"):
        speed = results["platform/model_speed"]
        eq = [r for k, r in results.items() if k.startswith("platform/equiv/")]
        mmc = [r for k, r in results.items() if k.startswith("platform/mmc/")]
        rep = [r for k, r in results.items() if k.startswith("platform/replay/")]
        worst = lambda key: max((abs(r[key]) for r in mmc), default=None)   # noqa: E731
        summary = {
            "model_speed": {"interpreted_us": speed["interpreted_us"],
                            "compiled_us": speed["compiled_us"],
                            "speedup": speed["speedup"]},
            "validation": {
                "compiled_packets_compared": sum(r["packets"] for r in eq),
                "compiled_mismatches": sum(r["mismatches"] for r in eq),
                "erlang_c_mean_err_pct": worst("mean_err_pct"),
                "erlang_c_p99_err_pct": worst("p99_err_pct"),
                "rtl_replay_mismatches": (sum(r["mismatches"] for r in rep) if rep else None),
                "rtl_replay_frames": sum(r["frames"] for r in rep),
                "rtl_replay_schemes": sorted(r["scheme"] for r in rep),
                "mmc_runs": mmc,
            },
        }
        rows = ["| frame kind | interpreter us | compiled us | speedup |", "|---|---|---|---|"]
        for k in speed["compiled_us"]:
            rows.append(f"| {k} | {speed['interpreted_us'][k]} | {speed['compiled_us'][k]} | "
                        f"{speed['speedup'][k]}x |")
        mrows = ["| c | rho | requests | mean us (sim / Erlang C) | err | p99 us (sim / theory) | err |",
                 "|---|---|---|---|---|---|---|"]
        for r in mmc:
            mrows.append(f"| {r['c']} | {r['rho']} | {r['measured']:,} | {r['mean_us']['sim']} / "
                         f"{r['mean_us']['theory']} | {r['mean_err_pct']:+.2f} % | "
                         f"{r['p99_us']['sim']} / {r['p99_us']['theory']} | "
                         f"{r['p99_err_pct']:+.2f} % |")
        v = summary["validation"]
        replay = ("not run at the smoke scale (the test suite replays the same cases)" if not rep
                  else f"{v['rtl_replay_frames']} switch input frames of short simulator runs "
                  f"({', '.join(v['rtl_replay_schemes'])}: a rack or the busiest switch of a "
                  f"4-ary fat tree, as each scheme declares) replayed on the RTL in Verilator at their arrival stamps, "
                  f"every output compared byte for byte: **{v['rtl_replay_mismatches']} "
                  f"mismatches**")
        md = "\n".join([
            "Median cost of one frame in the switch's data plane, interpreter (the golden "
            "model, the reference) and compiled model (generated from the same program "
            "descriptions), measured side by side in one process:", "", *rows, "",
            f"Compiled model against the interpreter: {v['compiled_packets_compared']:,} "
            f"packets of the built-in programs' traffic (structured, fuzzed, malformed), every "
            f"output, counter and memory cell compared: **{v['compiled_mismatches']} "
            "mismatches** (the test suite compares 10^5 per program).", "",
            "M/M/c queue in the simulator against Erlang C (exponential service, mean 25 us):",
            "", *mrows, "", f"RTL replay: {replay}."])
        return Section("platform", "Platform: model speed and validation", summary, md)


PLATFORM = _Platform()
