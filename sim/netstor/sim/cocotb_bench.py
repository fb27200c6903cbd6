"""Throughput/latency benchmark of the whole core (``tb_core``) with the lean driver.

Run by ``netstor.bench`` (``make bench``) and ``sim/test_bench_smoke.py`` through
``harness.run_cocotb``. Parameters come from the environment:

* ``NETSTOR_BENCH_CFG``: JSON ``{"cases": [...], "sizes": [...], "budget_beats": int,
  "min_frames": int, "max_frames": int}``;
* ``NETSTOR_BENCH_OUT``: where the raw results (JSON) go;
* ``NETSTOR_SCHEMA``: the host schema (for the AXI-Lite CSR client).

Cases (every frame carries a sequence number in bytes the pipeline does not rewrite, so each
output frame is matched to its input frame; lengths and the routing rewrite are checked):

* ``l3``: UDP/IPv4 frames on wire RX 0, routed by LPM (10.1.0.0/16 -> port 1) to wire TX 1;
* ``prim``: prim-program frames (op FORWARD: flow hash, register RMW ``flows[flow] += 1`` on
  one flow, i.e. the same cell every packet, ternary ACL, exact ``ops`` table -> port 1) on
  wire RX 0 (trusted: ``prim.trust`` holds wire RX 0 with sources 10.0.0.0/16) to wire TX 1;
* ``mixed``: wire RX 0 (-> wire TX 1) and wire RX 1 (10.2.0.0/16 -> wire TX 0), both
  back-to-back at once: two inputs share the one pipeline (wire RX is never back-pressured, so
  what the pipeline cannot take is dropped at the input buffers, counted per input).

Every output (wire TX 0/1, host RX 0/1) is monitored; a frame on an output the case does not
expect is an error. A MAC model completes every wire TX frame (the completion tracker would
otherwise stop the wire TX outputs).
"""
from __future__ import annotations

import json
import os
import random
import struct
import time
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiLiteBus, AxiLiteMaster

from netstor.sim.axil_transport import AxilTransport
from netstor.sim.lean_axis import LeanEngine, LeanSink, LeanSource, frame_beats
from netstor.sim.frames import udp_frame, prim_frame
from netstor.programs import default_pipeline
from netstor.programs.primitives import OP_FORWARD
from netstor.driver.regs import AsyncCsrClient
from netstor.driver.tables import TableWriter

P = 2
ROUTE_DMAC = {1: 0x0A0000000011, 0: 0x0A0000000010}
ROUTE_SMAC = 0x020000000099


def ip(s):
    a = [int(x) for x in s.split(".")]
    return (a[0] << 24) | (a[1] << 16) | (a[2] << 8) | a[3]


class MacModel:
    """Completes every frame leaving on wire TX ``p`` (tag = its tuser[16:1]), one per cycle,
    in order. Fed by the wire TX sink's ends (``note``), stepped as an engine hook."""

    def __init__(self, dut, p):
        self.valid = getattr(dut, f"mac_cpl{p}_valid")
        self.tag = getattr(dut, f"mac_cpl{p}_tag")
        self.ts = getattr(dut, f"mac_cpl{p}_ts")
        self.pending = []
        self.driven = False
        self.count = 0
        self.valid.value = 0
        self.ts.value = 0
        self.tag.value = 0

    def step(self, cycle):
        if self.driven:                     # s_axis_sync_tx_cpl_ready is always 1
            self.pending.pop(0)
            self.count += 1
        if self.pending:
            self.tag.value = self.pending[0]
            if not self.driven:
                self.valid.value = 1
            self.driven = True
        elif self.driven:
            self.valid.value = 0
            self.driven = False


class CompletingSink(LeanSink):
    """A wire TX sink that hands each finished frame's tag to the MAC model."""

    def __init__(self, dut, prefix, mac, **kw):
        super().__init__(dut, prefix, capture="first", **kw)
        self.mac = mac

    def step(self, cycle):
        n = len(self.ends)
        super().step(cycle)
        if len(self.ends) != n:
            self.mac.pending.append((self.frames[-1][2] >> 1) & 0xFFFF)


class Bench:
    def __init__(self, dut, cfg):
        self.dut, self.cfg = dut, cfg
        self.rng = random.Random(cfg.get("seed", 1))
        self.pipeline = default_pipeline(P)
        self.writer = TableWriter(self.pipeline)
        self.schema = json.loads(Path(os.environ["NETSTOR_SCHEMA"]).read_text())
        cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
        self.csr = AsyncCsrClient(self.schema, AxilTransport(self.axil), max_polls=200)
        self.engine = LeanEngine(dut.clk)
        self.macs = []

    async def reset(self):
        dut = self.dut
        for p in range(P):
            for pre in ("wire_rx", "host_tx"):
                getattr(dut, f"{pre}{p}_tvalid").value = 0
            for pre in ("wire_tx", "host_rx"):
                getattr(dut, f"{pre}{p}_tready").value = 1
            getattr(dut, f"host_cpl{p}_ready").value = 1
        self.macs = [MacModel(dut, p) for p in range(P)]
        dut.rst.value = 1
        await ClockCycles(dut.clk, 8)
        dut.rst.value = 0
        await ClockCycles(dut.clk, 4)

    async def setup_tables(self):
        w = self.writer
        for mem, addr, word in (
                w.lpm_add("l3.routes", ip("10.1.0.0"), 16, "route",
                          {"port": 1, "dmac": ROUTE_DMAC[1], "smac": ROUTE_SMAC})
                + w.lpm_add("l3.routes", ip("10.2.0.0"), 16, "route",
                            {"port": 0, "dmac": ROUTE_DMAC[0], "smac": ROUTE_SMAC})
                + w.exact_add("prim.ops", [OP_FORWARD], "forward", {"port": 1})
                # the primitives program acts only on trusted packets (issue 11; without this
                # entry every ``prim`` frame was dropped, counted prim.trust.miss): wire RX 0,
                # sources 10.0.0.0/16
                + w.ternary_add("prim.trust", [1, 0, ip("10.0.0.0")], [1, 0xF, 0xFFFF0000],
                                "trusted", priority=0)):
            await self.csr.mem_write(mem, addr, word)
        self.latency = self.schema.get("latency_cycles")

    # ---- frames --------------------------------------------------------------------------
    def template(self, case, size, flow):
        rng = self.rng
        if case == "prim":
            f = bytearray(prim_frame(rng, OP_FORWARD, size, src="10.0.0.1", dst="10.1.0.9",
                                     sport=1000))
            seq_off = 42 + 8          # prim.value: never rewritten by op FORWARD
        else:
            dst = "10.1.0.7" if flow == 0 else "10.2.0.7"
            f = bytearray(udp_frame(rng, size, src="10.0.0.1", dst=dst, sport=1000 + flow,
                                    dport=2000, udp_csum=False))
            seq_off = 44              # UDP payload
        f[40:42] = b"\0\0"            # no UDP checksum: the sequence number may change
        return f, seq_off

    def frames_for(self, case, size, flow, n):
        f, off = self.template(case, size, flow)
        out = []
        for i in range(n):
            f[off:off + 4] = struct.pack(">I", (flow << 24) | i)
            out.append(frame_beats(bytes(f)))
        return out, len(f), off

    def n_frames(self, size):
        beats = -(-size // 64)
        c = self.cfg
        return max(c.get("min_frames", 8), min(c.get("max_frames", 200),
                                              c.get("budget_beats", 3000) // beats))

    # ---- one measurement --------------------------------------------------------------------
    async def measure(self, case, size):
        dut = self.dut
        n = self.n_frames(size)
        flows = {"l3": [(0, "wire_rx0", 1)], "prim": [(0, "wire_rx0", 1)],
                 "mixed": [(0, "wire_rx0", 1), (1, "wire_rx1", 0)]}[case]
        eng = self.engine
        drops0 = {name: await self.csr.counter_read(f"in{name[-1]}.drop_full")
                  for _, name, _ in flows}
        srcs, expect = {}, {}
        for flow, src_name, out_port in flows:
            beats, length, off = self.frames_for(case, size, flow, n)
            src = LeanSource(dut, src_name)
            for b in beats:
                src.send_beats(b, 0)
            srcs[flow] = (src, length, off, out_port)
        sinks = {}
        for q in range(P):
            sinks[("wire_tx", q)] = CompletingSink(dut, f"wire_tx{q}", self.macs[q])
            sinks[("host_rx", q)] = LeanSink(dut, f"host_rx{q}", capture="first")
        eng.agents = [s for s, *_ in srcs.values()] + list(sinks.values())
        eng.hooks = [m.step for m in self.macs]
        t0, c0 = time.perf_counter(), eng.cycle
        want = n * len(flows)
        quiet = {"last": eng.cycle, "beats": 0}

        def done():
            got = sum(len(s.ends) for s in sinks.values())
            beats = sum(s.beats for s in sinks.values())
            if beats != quiet["beats"]:
                quiet["beats"], quiet["last"] = beats, eng.cycle
            srcs_idle = all(s.idle_now() for s, *_ in srcs.values())
            # finished, or (drops) sources idle and nothing out for a while
            return got >= want and srcs_idle or (
                srcs_idle and eng.cycle - quiet["last"] > 400)
        ok = await eng.run_until(done, timeout=50 * n * (-(-size // 64)) + 5000, poll=32)
        await ClockCycles(dut.clk, 64)          # anything unexpected still in flight
        wall = time.perf_counter() - t0
        cycles = eng.cycle - c0
        res = {"case": case, "size_requested": size, "frames_per_input": n,
               "inputs": [s for _, s, _ in flows], "completed": ok, "sim_cycles": cycles,
               "wall_s": round(wall, 2), "errors": []}
        # ---- analysis ----
        errs = res["errors"]
        per_flow = []
        all_out_starts, all_out_ends, total_out_beats, total_out_bytes, total_out_pkts = \
            [], [], 0, 0, 0
        for flow, (src, length, off, out_port) in srcs.items():
            beats_pf = -(-length // 64)
            sink = sinks[("wire_tx", out_port)]
            lat, seqs = [], []
            for k, (first, ln, user) in enumerate(sink.frames):
                fb = first.to_bytes(64, "little")
                seq = struct.unpack(">I", fb[off:off + 4])[0]
                if seq >> 24 != flow:
                    continue
                seq &= 0xFFFFFF
                seqs.append(seq)
                if ln != length:
                    errs.append(f"flow {flow} seq {seq}: length {ln} != {length}")
                if case != "prim" and int.from_bytes(fb[0:6], "big") != ROUTE_DMAC[out_port]:
                    errs.append(f"flow {flow} seq {seq}: dst MAC not rewritten")
                if case != "prim" and fb[22] != 63:
                    errs.append(f"flow {flow} seq {seq}: TTL {fb[22]} != 63")
                lat.append(sink.starts[k] - src.starts[seq])
            if seqs != sorted(seqs) or len(set(seqs)) != len(seqs):
                errs.append(f"flow {flow}: sequence out of order or duplicated")
            recv = len(seqs)
            in_span = src.ends[-1] - src.starts[0] + 1 if src.starts else 0
            ent = {"input": src.prefix,
                   "output": f"wire_tx{out_port}", "frame_bytes": length,
                   "beats_per_frame": beats_pf, "sent": src.frames_sent, "received": recv,
                   "dropped": src.frames_sent - recv,
                   "input_span_cycles": in_span,
                   "input_pkts_per_clock": round(src.frames_sent / in_span, 6) if in_span else 0,
                   "latency_min": min(lat) if lat else None,
                   "latency_max": max(lat) if lat else None,
                   "latency_first": lat[0] if lat else None}
            mine = [k for k, (first, _, _) in enumerate(sink.frames)
                    if struct.unpack(">I", first.to_bytes(64, "little")[off:off + 4])[0] >> 24
                    == flow]
            if mine:
                s0, s1 = sink.starts[mine[0]], sink.ends[mine[-1]]
                span = s1 - s0 + 1
                ent.update({"output_span_cycles": span,
                            "output_beats": recv * beats_pf,
                            "output_idle_cycles_in_span": span - recv * beats_pf,
                            "pkts_per_clock": round(recv / span, 6),
                            "bytes_per_clock": round(recv * length / span, 4)})
                all_out_starts.append(s0)
                all_out_ends.append(s1)
                total_out_beats += recv * beats_pf
                total_out_bytes += recv * length
                total_out_pkts += recv
            per_flow.append(ent)
        res["flows"] = per_flow
        if all_out_starts:
            span = max(all_out_ends) - min(all_out_starts) + 1
            res["aggregate"] = {"span_cycles": span, "pkts": total_out_pkts,
                                "beats": total_out_beats,
                                "idle_cycles_in_span": span - total_out_beats,
                                "pkts_per_clock": round(total_out_pkts / span, 6),
                                "bytes_per_clock": round(total_out_bytes / span, 4),
                                "beats_per_clock": round(total_out_beats / span, 6)}
        used = {("wire_tx", o) for _, _, o in flows}
        for key, s in sinks.items():
            if key not in used and s.frames:
                errs.append(f"{key[0]}{key[1]}: {len(s.frames)} unexpected frames")
        if not ok:
            errs.append("timeout")
        # the input buffers' drop_full counters must account for every frame that did not
        # come out (wire RX is never back-pressured: what the pipeline cannot take is dropped)
        res["drop_counters"] = {}
        for flow, src_name, _ in flows:
            d = await self.csr.counter_read(f"in{src_name[-1]}.drop_full") - drops0[src_name]
            res["drop_counters"][src_name] = d
            ent = next(f for f in per_flow if f["input"] == src_name)
            if d != ent["dropped"]:
                errs.append(f"{src_name}: {ent['dropped']} frames missing but drop_full "
                            f"counted {d}")
        res["mac_completions"] = [m.count for m in self.macs]
        return res


@cocotb.test()
async def bench(dut):
    """``make bench``."""
    await _bench(dut)


@cocotb.test()
async def bench_smoke(dut):
    """The same for sim/test_bench_smoke.py (its own results folder, so a smoke test and
    ``make bench`` may run at the same time)."""
    await _bench(dut)


async def _bench(dut):
    cfg = json.loads(os.environ["NETSTOR_BENCH_CFG"])
    b = Bench(dut, cfg)
    await b.reset()
    await b.setup_tables()
    results = {"latency_cycles_schema": b.latency, "cases": []}
    t0 = time.perf_counter()
    c0 = b.engine.cycle
    for case in cfg["cases"]:
        for size in cfg["sizes"]:
            r = await b.measure(case, size)
            dut._log.info("%s %d: %s", case, size,
                          json.dumps({k: r[k] for k in ("flows", "errors")})[:400])
            results["cases"].append(r)
    results["wall_s"] = round(time.perf_counter() - t0, 1)
    results["sim_cycles"] = b.engine.cycle - c0
    Path(os.environ["NETSTOR_BENCH_OUT"]).write_text(json.dumps(results, indent=1))
    bad = [f"{r['case']} {r['size_requested']}: {e}" for r in results["cases"] for e in r["errors"]]
    assert not bad, "\n".join(bad[:20])
