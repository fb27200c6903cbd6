"""How many routes a hashed LPM table takes before the driver's first failed add
(:class:`netstor.driver.tables.TableWriter`: cuckoo moves between the banks of a length, a free
bank per new length, prefix expansion into held lengths), for several prefix-length mixes,
with banks taken as lengths come and with a fixed set of held lengths.

``python -m netstor.bench.lpm_load [--size 16384] [--banks 32] [--seeds 3] [--out FILE]``
prints one JSON line per (mix, held) and writes them all to ``--out`` (default
``build/bench/lpm_load.json``). Routes: distinct random prefixes, lengths uniform over the
mix; ``routes`` is the count placed before the first :class:`TableFullError`, ``entries``
the slots they take (expansions included)."""
from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

from netstor.driver.tables import TableFullError, TableWriter
from netstor.elements.table import Table
from netstor.lang import Pipeline, Program, Set
from netstor.lang.program import Action

__all__ = ["fill", "MIXES"]

#: name -> (prefix lengths, held lengths or None: banks taken as lengths come)
MIXES = {
    "one_length_24": ((24,), None),
    "two_lengths_24_28": ((24, 28), None),
    "five_lengths_16_32": ((16, 20, 24, 28, 32), None),
    "all_8_32": (tuple(range(8, 33)), None),
    "all_8_32_held_stride4": (tuple(range(8, 33)), (8, 12, 16, 20, 24, 28, 32)),
}


def fill(size, banks, lengths, held, seed):
    """``(routes, entries)`` at the first failed add."""
    p = Program("t")
    k, nh = p.meta("k", 32), p.meta("nh", 16)
    t = p.add(Table("r", kind="lpm", key=[k], size=size, lpm_banks=banks,
                    actions=[Action("route", {"nh": 16}, lambda a: [Set(nh, a.nh)])]))
    tw = TableWriter(Pipeline([p]), lpm_lengths=held and {t.qualname: held})
    rng = random.Random(seed)
    seen = set()
    while True:
        n = rng.choice(lengths)
        pre = rng.getrandbits(32) & (((1 << n) - 1) << (32 - n))
        if (pre, n) in seen:
            continue
        try:
            tw.lpm_add(t.qualname, pre, n, "route", {"nh": 1})
        except TableFullError:
            return len(seen), sum(tw._lpm[t.qualname].used)
        seen.add((pre, n))


def summary_line(res):
    """One line for people: per mix, the mean routes placed before the first failed add."""
    any_row = next(iter(res.values()))
    parts = [f"{name} {r['routes_mean']:,.0f}" + (f" (held {'/'.join(map(str, r['held']))})"
                                                   if r["held"] else "")
             for name, r in res.items()]
    return (f"hashed LPM, routes before the first failed add ({any_row['slots']:,} slots, "
            f"{any_row['banks']} banks, {len(any_row['routes'])} seeds): " + "; ".join(parts))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.bench.lpm_load")
    ap.add_argument("--size", type=int, default=1 << 14)
    ap.add_argument("--banks", type=int, default=32)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", default="build/bench/lpm_load.json")
    a = ap.parse_args(argv)
    res = {}
    for name, (lengths, held) in MIXES.items():
        t0 = time.perf_counter()
        runs = [fill(a.size, a.banks, lengths, held, s) for s in range(a.seeds)]
        r = {"slots": a.size, "banks": a.banks, "lengths": list(lengths),
             "held": list(held) if held else None,
             "routes": [x for x, _ in runs], "entries": [y for _, y in runs],
             "routes_mean": statistics.mean(x for x, _ in runs),
             "slot_load_mean": round(statistics.mean(y for _, y in runs) / a.size, 4),
             "seconds": round(time.perf_counter() - t0, 1)}
        res[name] = r
        print(json.dumps({name: r}), flush=True)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(summary_line(res))


if __name__ == "__main__":
    main()
