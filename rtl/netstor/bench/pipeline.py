"""Pipeline benchmark: the whole core in Verilator, back-to-back frames, lean driver.

The simulation side is ``sim/cocotb_bench.py`` (run through ``sim/harness.py`` on the same
Verilator build as the whole-core tests, ``build/sim/core``); this module elaborates the core,
runs it, and turns the raw records into ``pipeline.json`` (rates, latencies and their
decomposition, line rates at 250 and 322.27 MHz against 100 GbE).
"""
from __future__ import annotations

import functools
import json
import os
import sys
import time
from pathlib import Path

from netstor.paths import repo_root
from netstor.sim import core_build
from netstor.sim.harness import run_cocotb
from netstor.sim.tb_core import tb_core_verilog

ROOT = repo_root()

SIZES = [64, 65, 72, 76, 128, 256, 512, 1024, 1518, 9000]
CASES = ["l3", "prim", "mixed"]
CLOCKS_MHZ = {"sync_250": 250.0, "direct_322": 322.265625}
ETH_OVERHEAD = 20            # preamble + SFD (8) + inter-frame gap (12)
LINE_GBPS = 100.0
BEAT_BYTES = 64

# Fixed latencies of the blocks around the header path (cycles, from their docstrings and
# checked by the measurement below).
PB_LAST_TO_OUT = 3           # PacketBuffer: last beat accepted -> first beat valid on o
ARB_LAT = 1                  # IngressArbiter: registered output
EQ_LAT = 2                   # EgressQueue: beat written -> valid on o


@functools.lru_cache(maxsize=None)
def generate_core():
    """Write ``build/sim/core/{netstor_core.v,schema.json}`` through ``sim/core_build.py`` (the
    whole-core tests and the demo use it too, so all share one Verilator build and, within one
    pytest worker, one elaboration); returns ``(core, dir, schema_path)``. ``core`` is a fresh
    ``NetstorCore`` of the same default pipeline (cheap: the Verilog conversion is the slow
    part), for the block list and the latency constants."""
    from netstor.build import build_core
    _, d, schema = core_build.generate()
    return build_core(), d, schema


def run_sim(cfg, raw_out: Path, core_info=None, testcase="bench"):
    """Run ``cocotb_bench`` with ``cfg``; returns ``(raw results, core, build seconds+run
    seconds)``."""
    core, d, schema = core_info or generate_core()
    raw_out.parent.mkdir(parents=True, exist_ok=True)
    if raw_out.exists():
        raw_out.unlink()
    t0 = time.perf_counter()
    # the build folder is the core's (``build/sim/core``, or a snapshot's copy of its sources)
    run_cocotb(d.name, "netstor.sim.cocotb_bench", toplevel="tb_core",
               verilog_text=tb_core_verilog(core.P), sources=core_build.sources(d),
               testcase=testcase,
               extra_env={"NETSTOR_SCHEMA": str(schema),
                          "NETSTOR_BENCH_CFG": json.dumps(cfg),
                          "NETSTOR_BENCH_OUT": str(raw_out.resolve())})
    return json.loads(raw_out.read_text()), core, time.perf_counter() - t0


def line_rates(size, pkts_per_clock):
    """Rates at both tap clocks, Ethernet line rate = (frame + 20 B) * 8 per packet."""
    wire_bits = (size + ETH_OVERHEAD) * 8
    max_mpps = LINE_GBPS * 1e3 / wire_bits
    out = {}
    for name, mhz in CLOCKS_MHZ.items():
        mpps = pkts_per_clock * mhz
        gbps = mpps * wire_bits / 1e3
        out[name] = {"clock_mhz": mhz, "mpps": round(mpps, 2), "line_gbps": round(gbps, 2),
                     "data_gbps": round(mpps * size * 8 / 1e3, 2),
                     "vs_100g": round(mpps / max_mpps, 4)}
    out["100g_max_mpps"] = round(max_mpps, 2)
    return out


def header_path_parts(core):
    """The header path's cycles by block, from the data path's own constants: ``[(what,
    cycles)]``; their sum is ``datapath.latency`` (``analyse`` records both)."""
    from netstor.gateware.datapath import ENGINE_LATENCY, TM_LATENCY
    from netstor.gateware.deparser import PREP_LATENCY
    from netstor.gateware.parser import FIRST_TO_PHV
    from netstor.gateware.truncate import TRUNC_LATENCY
    dp = core.datapath
    S = sum(st.latency for st in dp.stages)
    E = dp.egress.latency
    if getattr(dp, "copies", "lane") == "lane":
        return [("parser", FIRST_TO_PHV), ("stages", S), ("copy decision", 1),
                ("engine (express start)", ENGINE_LATENCY), ("PHV ring read, registered", 2),
                ("egress elements", E), ("copy PHV register", 1), ("deparser prep", PREP_LATENCY),
                ("truncator", TRUNC_LATENCY)]
    return [("parser", FIRST_TO_PHV), ("stages", S), ("traffic manager", TM_LATENCY),
            ("egress elements", E), ("deparser prep", PREP_LATENCY)]


def analyse(raw, core):
    L = core.datapath.latency
    parts = header_path_parts(core)
    res = {
        "what": ("Whole netstor_core (Verilator, cocotb, lean driver) fed back-to-back frames "
                 "(zero idle cycles on the input bus), outputs never back-pressured, a MAC model "
                 "completing every wire TX frame. Cycles are counted at the ports (rising edges "
                 "at which a beat is accepted)."),
        "units": {"pkts_per_clock": "output packets per core clock over the output span "
                                    "(first beat of the first to last beat of the last frame)",
                  "bytes_per_clock": "frame (data) bytes per clock over the same span",
                  "latency": "cycles from a frame's first beat accepted on the input port to "
                             "its first beat accepted on the output port",
                  "line_gbps": "(frame + 20 B preamble/SFD/IFG) * 8 * Mpps; frame = the "
                               "AXI-Stream frame, which in Corundum excludes the 4-byte FCS"},
        "header_path_latency": {
            "datapath_latency_cycles": L,
            "schema_latency_cycles": raw.get("latency_cycles_schema"),
            "meaning": ("cycles from a packet's first beat leaving the ingress arbiter to its "
                        "first beat entering an egress queue; constant by construction (nothing "
                        "between arbiter and egress queues stalls)"),
        },
        "latency_model": {
            "formula": "latency = (B - 1) + PB + ARB + L + EQ",
            "B": "beats of the frame (ceil(size/64)): the ingress PacketBuffer is "
                 "store-and-forward, so the first beat waits for the last",
            "PB": PB_LAST_TO_OUT, "ARB": ARB_LAT, "L": L, "EQ": EQ_LAT,
            "PB_meaning": "PacketBuffer: last beat accepted -> first beat valid on its output",
            "ARB_meaning": "IngressArbiter output register",
            "L_meaning": "datapath.latency = " + " + ".join(f"{w} {c}" for w, c in parts)
                         + (f" (the parts sum to {sum(c for _, c in parts)}, not {L})"
                            if sum(c for _, c in parts) != L else ""),
            "L_parts": dict(parts),
            "copies": getattr(core.datapath, "copies", None),
            "EQ_meaning": "EgressQueue: beat written -> valid on its output (cut-through)",
            "constant_part": PB_LAST_TO_OUT + ARB_LAT + L + EQ_LAT - 1,
        },
        "runs": [],
    }
    for r in raw["cases"]:
        flows = []
        for f in r["flows"]:
            B = f["beats_per_frame"]
            size = f["frame_bytes"]
            predicted = (B - 1) + PB_LAST_TO_OUT + ARB_LAT + L + EQ_LAT
            ideal = 1.0 / B
            ent = dict(f)
            ent.update({
                "bus_limit_pkts_per_clock": round(ideal, 6),
                "bus_limit_bytes_per_clock": round(size / B, 4),
                "latency_predicted": predicted,
                "latency_min_minus_predicted": (f["latency_min"] - predicted
                                                if f["latency_min"] is not None else None),
                "buffer_store_and_forward_cycles": B - 1,
            })
            if "pkts_per_clock" in f:
                ent["efficiency_vs_bus_limit"] = round(f["pkts_per_clock"] / ideal, 4)
                ent["line_rate"] = line_rates(size, f["pkts_per_clock"])
            flows.append(ent)
        run = {k: r[k] for k in ("case", "size_requested", "frames_per_input", "inputs",
                                 "sim_cycles", "wall_s", "errors", "drop_counters",
                                 "mac_completions")}
        run["flows"] = flows
        if "aggregate" in r:
            agg = dict(r["aggregate"])
            size = flows[0]["frame_bytes"]
            agg["line_rate"] = line_rates(size, agg["pkts_per_clock"])
            agg["bus_limit_pkts_per_clock"] = round(1.0 / flows[0]["beats_per_frame"], 6)
            run["aggregate"] = agg
        res["runs"].append(run)
    res["sim_cycles"] = raw.get("sim_cycles")
    res["sim_wall_s"] = raw.get("wall_s")
    if raw.get("wall_s"):
        res["sim_cycles_per_s"] = round(raw["sim_cycles"] / raw["wall_s"], 1)
    res["frames_sent_total"] = sum(f["sent"] for r in res["runs"] for f in r["flows"])
    res["errors"] = [f"{r['case']} {r['size_requested']}: {e}" for r in raw["cases"]
                     for e in r["errors"]]
    res["findings"] = findings(res)
    return res


def findings(res):
    """Plain statements derived from the numbers (the summary prints them)."""
    out = []
    single = [r for r in res["runs"] if r["case"] in ("l3", "prim")]
    short = []
    for r in single:
        f = r["flows"][0]
        if "efficiency_vs_bus_limit" in f and f["efficiency_vs_bus_limit"] < 0.999:
            short.append(f"{r['case']} {f['frame_bytes']} B: {f['pkts_per_clock']} pkt/clk vs "
                         f"bus limit {f['bus_limit_pkts_per_clock']} "
                         f"({f['output_idle_cycles_in_span']} idle output cycles)")
        d = f.get("latency_min_minus_predicted")
        if d not in (0, None):
            out.append(f"{r['case']} {f['frame_bytes']} B: latency differs from the model by "
                       f"{d} cycles")
    if short:
        out.append("below the bus limit: " + "; ".join(short))
    else:
        out.append("single input: every size runs at the bus limit (one beat per clock, "
                   "1/ceil(size/64) packets per clock; no idle output cycle)")
    below = {"sync_250": [], "direct_322": []}
    for r in res["runs"]:
        if r["case"] != "l3":
            continue
        f = r["flows"][0]
        for clk in below:
            lr = f.get("line_rate", {}).get(clk)
            if lr and lr["vs_100g"] < 1:
                below[clk].append(f"{f['frame_bytes']} B {lr['vs_100g'] * 100:.0f}%")
    out.append("100G line rate per port (l3): at 250 MHz "
               + ("reached for every size except " + ", ".join(below["sync_250"])
                  if below["sync_250"] else "reached for every size")
               + " (two beats per frame: 125 Mpps); at 322.27 MHz "
               + ("not reached for " + ", ".join(below["direct_322"]) if below["direct_322"]
                  else "reached for every size"))
    for r in res["runs"]:
        if r["case"] == "mixed" and "aggregate" in r:
            a = r["aggregate"]
            drops = sum(f["dropped"] for f in r["flows"])
            sent = sum(f["sent"] for f in r["flows"])
            out.append(f"mixed {r['flows'][0]['frame_bytes']} B (2 wire inputs at full rate): "
                       f"aggregate {a['beats_per_clock']} beats/clk, {a['pkts_per_clock']} "
                       f"pkt/clk = one shared 512-bit bus; each input gets half, the rest is "
                       f"dropped at the wire RX buffers ({drops}/{sent} in this short run, "
                       f"-> 50% at steady full load)")
            break
    return out
