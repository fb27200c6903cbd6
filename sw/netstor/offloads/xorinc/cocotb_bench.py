"""cocotb: XORInc NetRepair through the whole default core at full input rate (the benchmark
``netstor.offloads.xorinc.bench_core`` runs, on the shared Verilator build of the default core
through ``netstor.sim.core_build.run_core``).

Parameters from the environment:

* ``NETSTOR_XI_BENCH_CFG``: JSON ``{"runs": [[data bytes per packet, chunk bytes], ...],
  "k": 4, "r": 2, "budget_beats": int, "min_repairs": int, "max_repairs": int, "seed": int}``;
* ``NETSTOR_XI_BENCH_OUT``: where the raw records (JSON) go;
* ``NETSTOR_SCHEMA``: the host schema (``run_core`` sets it).

The lean AXI-Stream driver of the platform's benchmark (``netstor.sim.lean_axis``, as
``netstor.sim.cocotb_bench`` uses it): per run, the PART frames of a few repairs (RS(k, r),
k helpers per lost chunk, helper-major: each helper's packets of the chunk in order, then the
next helper's) are queued on one input (wire RX 1) and offered back to back, one beat a clock,
no idle cycle; no output is ever back-pressured and a MAC model completes every wire TX frame.
Every edge is counted at the ports (a beat is "accepted at edge ``c``").

Raw records per run (``bench_core.analyse`` turns them into the figures):

* ``inputs``: per PART frame in send order ``[first, last, data bytes, op, off, src]``: the
  edges its first and last beat were accepted at;
* ``outputs``: per REPAIRED frame on the requester's port ``[first, last, op, off, data
  bytes, bad bytes]``: ``bad bytes`` = data bytes that differ from ``galois``' repair of the
  chunk (``test_model.ref_repair``), plus the length difference when the lengths differ;
* ``unexpected``: other frames on any output (a second REPAIRED of one slot, a frame that is
  not REPAIRED, a wrong destination/port/UDP checksum, or any frame on another output);
* ``input_stalls``: edges at which the input's ``tvalid`` was high and ``tready`` low;
* ``counters``: the core's counters over the run (``in1.drop_full``, ``gf.mismatch``, ...).

The test fails (after writing the records) on any bad byte, missing or unexpected frame,
input drop or a nonzero ``gf.mismatch``: the figures are of correct repairs only.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles

from netstor.offloads.xorinc.config import helpers, model_writes
from netstor.offloads.xorinc.header import BEAT, HEADER, T_PART, T_REPAIRED, XiHeader
from netstor.offloads.xorinc.program import N_OPS
from netstor.offloads.xorinc.test_model import (CLIENT, NODE_BASE, SW_MAC, frame, parse_out,
                                                ref_parity, ref_repair, section)
from netstor.sim.cocotb_bench import Bench
from netstor.sim.lean_axis import LeanSink, LeanSource, frame_beats

P = 2
XI_IN = 1                    # wire RX 1: every PART frame enters here
REQ_PORT = 40000
CODE = 1
COUNTERS = ("in1.pkts", "in1.drop_full", "out0.pkts", "out0.drop_full", "xi.trust.miss",
            "xi.repair.hit", "xi.repair.miss", "xi.engine.absorbed", "xi.engine.done",
            "xi.engine.dup", "xi.engine.bad", "xi.engine.misaligned", "xi.engine.split",
            "xi.engine.beats", "gf.mismatch")


class RecordingMacSink(LeanSink):
    """A wire TX sink keeping every frame whole (``capture="all"``) that hands each
    finished frame's tag to the MAC model (as ``netstor.sim.cocotb_bench.CompletingSink``)."""

    def __init__(self, dut, prefix, mac):
        super().__init__(dut, prefix, capture="all")
        self.mac = mac

    def step(self, cycle):
        n = len(self.ends)
        super().step(cycle)
        if len(self.ends) != n:
            self.mac.pending.append((self.frames[-1][1] >> 1) & 0xFFFF)


class RepairBench(Bench):
    """The platform benchmark's harness (clock, AXI-Lite, lean engine, MAC models, reset)
    with XORInc's stripe."""

    def __init__(self, dut, cfg):
        super().__init__(dut, cfg)
        self.k, self.r = cfg.get("k", 4), cfg.get("r", 2)
        self.counter_names = {c["name"] for c in self.schema["counters"]}
        self.next_op = 0

    async def reset(self):
        self.dut.ptp_ts_96.value = 0
        await super().reset()

    async def setup(self):
        """Routes (the requester behind wire TX 0, the nodes behind wire TX 1) and the
        ``xorinc:`` section's writes (coefficients, trust), as ``cocotb_xorinc.XiEnv``."""
        w = self.writer
        writes = []
        for ipa, mac, port in [CLIENT] + [(NODE_BASE + j, 0x020000000001 + j, 1)
                                          for j in range(self.k + self.r)]:
            writes += w.lpm_add("l3.routes", ipa, 32, "route",
                                {"port": port, "dmac": mac, "smac": SW_MAC})
        _plan, cw = model_writes(self.pipeline, section(self.k, self.r, CODE), writer=w)
        for mem, addr, word in writes + cw:
            await self.csr.mem_write(mem, addr, word)

    async def counters(self):
        return {n: await self.csr.counter_read(n) for n in COUNTERS if n in self.counter_names}

    # ---- one run: repairs of chunks of ``chunk`` bytes in packets of ``size`` data bytes ---
    def repairs_for(self, size, chunk):
        """Repairs in a run: about ``budget_beats`` input beats, within the bounds."""
        c = self.cfg
        beats_per = self.k * sum(2 + -(-min(size, chunk - p) // BEAT)
                                 for p in range(0, chunk, size))
        n = c.get("budget_beats", 1500) // beats_per
        return max(c.get("min_repairs", 2), min(c.get("max_repairs", 32), N_OPS, n))

    def build(self, size, chunk, n_repairs):
        """``(frames [(beats, record)], expected {(op, off): bytes})``: the PART frames of
        ``n_repairs`` repairs, helper-major per repair, and galois' repaired data per slot."""
        k, r, n = self.k, self.r, self.k + self.r
        frames, expected = [], {}
        for i in range(n_repairs):
            op = self.next_op % N_OPS
            self.next_op += 1
            lost = i % n
            hs = helpers(n, k, lost)
            data = np.frombuffer(self.rng.randbytes(k * chunk), dtype=np.uint8).reshape(k, chunk)
            stripe = np.vstack([data, ref_parity(data, r)])
            ref = bytes(ref_repair(stripe, k, r, lost, hs))
            for s in hs:
                for pos in range(0, chunk, size):
                    d = bytes(stripe[s, pos:min(pos + size, chunk)])
                    h = HEADER.pack(type=T_PART, opid=op, stripe=i, chunk=lost, src=s, need=k,
                                    code=CODE, off=pos // BEAT, len=len(d), seq=pos,
                                    req_addr=CLIENT[0], req_port=REQ_PORT)
                    f = frame(NODE_BASE + s, CLIENT[0], XiHeader.unpack(h), d)
                    frames.append((frame_beats(f), (len(d), op, pos // BEAT, s)))
                    expected[(op, pos // BEAT)] = ref[pos:pos + len(d)]
        return frames, expected

    async def measure(self, size, chunk):
        dut, eng = self.dut, self.engine
        n_rep = self.repairs_for(size, chunk)
        frames, expected = self.build(size, chunk, n_rep)
        c0 = await self.counters()
        src = LeanSource(dut, f"wire_rx{XI_IN}")
        for beats, _rec in frames:
            src.send_beats(beats, 0)
        req = RecordingMacSink(dut, "wire_tx0", self.macs[0])
        # none expected on the other outputs (wire TX 1's completed too, or it would stop)
        others = [RecordingMacSink(dut, "wire_tx1", self.macs[1]),
                  LeanSink(dut, "host_rx0", capture="none"),
                  LeanSink(dut, "host_rx1", capture="none")]
        eng.agents = [src, req] + others
        eng.hooks = [m.step for m in self.macs]
        quiet = {"last": eng.cycle, "beats": 0}
        want = len(expected)

        def done():
            beats = req.beats + sum(o.beats for o in others)
            if beats != quiet["beats"]:
                quiet["beats"], quiet["last"] = beats, eng.cycle
            idle = src.idle_now()
            return idle and (len(req.ends) >= want or eng.cycle - quiet["last"] > 600)
        total_beats = sum(len(b) for b, _ in frames)
        t0 = time.perf_counter()
        ok = await eng.run_until(done, timeout=20 * total_beats + 5000, poll=32)
        await ClockCycles(dut.clk, 64)            # anything unexpected still in flight
        wall = time.perf_counter() - t0
        eng.agents = []
        c1 = await self.counters()
        # ---- records -------------------------------------------------------------------------
        inputs = [[src.starts[i] if i < len(src.starts) else None,
                   src.ends[i] if i < len(src.ends) else None, *rec]
                  for i, (_b, rec) in enumerate(frames)]
        outputs, unexpected, seen = [], 0, set()
        for i, (f, _user) in enumerate(req.frames):
            try:
                h, d, dport, dst, ucs = parse_out(f)
            except Exception:                     # noqa: BLE001 - too short to parse
                unexpected += 1
                continue
            key = (h.opid, h.off)
            if (h.type != T_REPAIRED or key not in expected or key in seen or dport != REQ_PORT
                    or dst != CLIENT[0] or ucs != 0):
                unexpected += 1
                continue
            seen.add(key)
            want_d = expected[key]
            bad = sum(a != b for a, b in zip(d, want_d)) + abs(len(d) - len(want_d))
            outputs.append([req.starts[i], req.ends[i], h.opid, h.off, len(d), bad])
        unexpected += sum(len(o.frames) for o in others)
        return {"size": size, "chunk": chunk, "k": self.k, "r": self.r, "repairs": n_rep,
                "completed": ok, "wall_s": round(wall, 2),
                "input": f"wire_rx{XI_IN}", "input_beats": src.beats,
                "input_stalls": src.busy_edges - src.beats,
                "inputs": inputs, "outputs": outputs, "unexpected": unexpected,
                "counters": {n: c1[n] - c0[n] for n in c1}}


def problems(run):
    """What makes a run's figures untrustworthy (the test fails on any)."""
    out = []
    got = {(o[2], o[3]) for o in run["outputs"]}
    want = {(i[3], i[4]) for i in run["inputs"]}
    bad = sum(o[5] for o in run["outputs"])
    tag = f"{run['size']}/{run['chunk']}"
    if bad:
        out.append(f"{tag}: {bad} REPAIRED data bytes differ from galois")
    if want - got:
        out.append(f"{tag}: {len(want - got)} REPAIRED frames missing")
    if run["unexpected"]:
        out.append(f"{tag}: {run['unexpected']} unexpected frames")
    if not run["completed"]:
        out.append(f"{tag}: timeout")
    for name in ("in1.drop_full", "gf.mismatch", "xi.repair.miss", "xi.trust.miss"):
        if run["counters"].get(name):
            out.append(f"{tag}: {name} = {run['counters'][name]}")
    return out


@cocotb.test()
async def bench_netrepair(dut):
    """NetRepair PART frames back to back on one input at every configured size; records for
    ``bench_core``."""
    cfg = json.loads(os.environ["NETSTOR_XI_BENCH_CFG"])
    b = RepairBench(dut, cfg)
    await b.reset()
    await b.setup()
    res = {"config": cfg, "runs": []}
    t0, e0 = time.perf_counter(), b.engine.cycle
    for size, chunk in cfg["runs"]:
        run = await b.measure(size, chunk)
        dut._log.info("xorinc bench %d/%d: %d repairs, %d in, %d REPAIRED, stalls %d, %s",
                      size, chunk, run["repairs"], len(run["inputs"]), len(run["outputs"]),
                      run["input_stalls"], json.dumps(run["counters"]))
        res["runs"].append(run)
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    res["sim_cycles"] = b.engine.cycle - e0
    Path(os.environ["NETSTOR_XI_BENCH_OUT"]).write_text(json.dumps(res) + "\n")
    bad = [p for run in res["runs"] for p in problems(run)]
    assert not bad, "\n".join(bad[:20])
