"""Tables at scale, synthesised on their own (Yosys ``synth_xilinx -family xcup``): a
64K-entry exact table (4-way hash in RAM), a 1K x 32-bit ternary table (the RAM TCAM, with
5-bit chunks in LUTRAM and with 9-bit chunks in BRAM) and LPM tables of 16K prefixes (64K slots
in 64 hash banks of 1024, one prefix length per bank, :mod:`netstor.gateware.lpm`) and 4K
prefixes (16K slots in 32 banks of 512). Writes ``<out_dir>/tables.json``: per table the
entries, key bits, LUT, FF, BRAM36 (equivalent), URAM, LUT levels (the longest
register-to-register path of the mapped netlist) and the latency in cycles.

``python -m netstor.bench.tables [out_dir] [--only name,...] [--timeout s]``
(default ``build/bench``; results cached by Verilog hash in ``<out_dir>/synth_cache``)."""
from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

from netstor.bench.synth import block_element, run_yosys
from netstor.elements.table import Table
from netstor.lang import F, Pipeline, Program, Set
from netstor.lang.program import Action

__all__ = ["bench", "CASES", "summary_line"]

#: name -> (kind, entries, Table keyword arguments)
CASES = {
    "exact_64k": ("exact", 1 << 16, {"ways": 4}),
    "ternary_1k_chunk5": ("ternary", 1024, {"tcam_chunk": 5}),
    "ternary_1k_chunk9": ("ternary", 1024, {"tcam_chunk": 9}),
    # 16K prefixes: hash banks (netstor.gateware.lpm), 64 banks x 1024 slots (a bank RAM with
    # a lookup port and a host read/write port is a true dual-port RAMB18 of 1K x 18 per 18
    # bits: 512-slot banks take the same BRAM for half the slots)
    "lpm_16k": ("lpm", 1 << 16, {"lpm_banks": 64}),
    # 4K prefixes at the same 4 slots per prefix: 32 banks x 512 slots
    "lpm_4k": ("lpm", 1 << 14, {"lpm_banks": 32}),
}


def _table(kind, size, kw):
    """A program with one table on ``ipv4.dst`` (32-bit key) whose actions set a 16-bit
    next hop or a 16-bit tag."""
    p = Program("b")
    nh, tag = p.meta("nh", 16), p.meta("tag", 16)
    acts = [Action("route", {"nh": 16}, lambda a: [Set(nh, a.nh)]),
            Action("mark", {"tag": 16}, lambda a: [Set(tag, a.tag)])]
    t = p.add(Table("t", kind=kind, key=[F.ipv4.dst], actions=acts, size=size, **kw))
    return Pipeline([p]), t


#: an all-zero memory initialiser as Amaranth writes it (one assignment per word)
_ZERO_INIT = re.compile(r"  initial begin\n(?:    [\w$\\]+\[\d+\] = \d+'[hdb]0+;\n)+  end\n")


def strip_zero_inits(verilog):
    """``verilog`` without the all-zero ``initial`` blocks of its memories (block RAM powers up
    at 0 anyway); 64K lines of them take Yosys' Verilog front end longer than the synthesis."""
    return _ZERO_INIT.sub("", verilog)


def bench(out_dir, *, only=None, timeout=3600):
    out_dir = Path(out_dir)
    res = {}
    for name, (kind, size, kw) in CASES.items():
        if only and name not in only:
            continue
        pl, t = _table(kind, size, kw)
        t0 = time.perf_counter()
        verilog, lat = block_element(pl, t, f"bench_{name}")
        verilog = strip_zero_inits(verilog)
        r = run_yosys(verilog, f"bench_{name}", out_dir / "synth" / f"table_{name}",
                      timeout=timeout, cache_dir=out_dir / "synth_cache")
        row = {"kind": kind, "entries": size, "key_bits": t.key_width, **kw,
               "latency_cycles": lat, "ok": r.get("ok", False),
               "elaborate_seconds": round(time.perf_counter() - t0, 1)}
        if r.get("ok"):
            row.update({k: r[k] for k in ("LUT", "LUT_logic", "LUT_as_memory", "LUT_as_srl",
                                          "FF", "RAMB36", "RAMB18", "URAM", "CARRY")})
            row["BRAM36"] = r["BRAM36_equiv"]
            row["lut_levels"] = r["depth"]["lut_levels"]
            row["depth_path"] = r["depth"].get("path_cell_types")
            row["yosys_seconds"] = r.get("yosys_seconds")
        else:
            row["error"] = r.get("error", "")[-500:]
        res[name] = row
        print(json.dumps({name: row}), flush=True)
    path = out_dir / "tables.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    old.update(res)
    out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(old, indent=1, sort_keys=True) + "\n")
    return old


def summary_line(res):
    """One line for people: every table of ``res`` (tables.json) with its size and depth."""
    parts = []
    for name, r in sorted(res.items()):
        if not isinstance(r, dict) or "kind" not in r:
            continue
        if not r.get("ok"):
            parts.append(f"{name} failed")
            continue
        parts.append(f"{name}: {r['LUT']:,} LUT, {r['FF']:,} FF, {r['BRAM36']:g} BRAM36, "
                     f"{r['URAM']} URAM, {r['lut_levels']} LUT levels, latency "
                     f"{r['latency_cycles']}")
    return "tables: " + "; ".join(parts)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.bench.tables")
    ap.add_argument("out_dir", nargs="?", default="build/bench")
    ap.add_argument("--only", default="")
    ap.add_argument("--timeout", type=float, default=3600)
    a = ap.parse_args(argv)
    only = [s for s in a.only.split(",") if s]
    res = bench(a.out_dir, only=only, timeout=a.timeout)
    print(summary_line({k: v for k, v in res.items() if not only or k in only}))


if __name__ == "__main__":
    main()
