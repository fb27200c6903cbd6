"""The XORInc GF(2^8) engine (:class:`netstor.gateware.gf_engine.GFEngine`) synthesised on its
own at full size (64 operations x 4 KiB chunks = 4,096 slots of 541 bits): Yosys
``synth_xilinx -family xcup`` (block RAM) and ``-uram``, cached by Verilog hash.

``bench(out_dir)`` writes ``<out_dir>/gf_engine.json``: ``n_ops``, ``chunk_beats``,
``LUT``, ``FF``, ``BRAM36``, ``URAM``, ``lut_levels``, the multiplier alone (``multiplier``:
64 lanes), and the figures measured in the Amaranth simulator on the engine as the core places
it (:class:`netstor.gateware.gf_path.GFIngress`, :func:`_ingress_throughput`, a few seconds):
``bytes_per_clock`` (``{size: data bytes per clock of the engine}``, ``size`` =
``"<data bytes per packet>/<chunk bytes>"``: one-packet contributions of 64..1,024 bytes, a
2 KiB chunk and whole chunks in 64-, 256- and 1,024-byte packets; ``None`` for a size whose
output was wrong),
``payload_bytes_per_clock`` (the same data bytes over the whole frames, the 128-byte header
of each packet included) and ``latency_cycles`` (beat in to beat out). Also ``python -m
netstor.bench.gf_engine [out_dir]``.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from amaranth.back import verilog
from amaranth.hdl import Elaboratable, Module, Signal

from netstor.gateware.gf_engine import GFEngine, GFVecMul, LATENCY, MUL_LATENCY
from netstor.paths import repo_root

from .register_bank import _drop_zero_init, run_yosys_uram
from .synth import run_yosys

__all__ = ["bench", "engine_verilog"]

TOP = "bench_gf_engine"


def engine_verilog(n_ops=64, chunk_beats=64):
    """``(verilog, slot word bits)`` of the engine with every port a top-level port."""
    eng = GFEngine(n_ops=n_ops, chunk_beats=chunk_beats)
    text = verilog.convert(eng, name=TOP, emit_src=False)
    return _drop_zero_init(text), eng.word_bits


class _MulTop(Elaboratable):
    def __init__(self):
        self.mul = GFVecMul()
        self.coeff, self.x, self.p = Signal(8), Signal(512), Signal(512)

    def elaborate(self, platform):
        m = Module()
        m.submodules.mul = self.mul
        m.d.comb += [self.mul.coeff.eq(self.coeff), self.mul.x.eq(self.x),
                     self.p.eq(self.mul.p)]
        return m


def _figures(r):
    return {"LUT": r["LUT"], "FF": r["FF"], "BRAM36": r["BRAM36_equiv"], "URAM": r["URAM"],
            "lut_levels": r["depth"]["lut_levels"],
            "yosys": {k: r[k] for k in ("cells", "depth", "yosys_seconds", "cached",
                                        "verilog_sha256") if k in r}}


def bench(out_dir, *, n_ops=64, chunk_beats=64, timeout=None, uram=True):
    out_dir = Path(out_dir)
    cache = out_dir / "synth_cache"
    text, word_bits = engine_verilog(n_ops, chunk_beats)
    r = run_yosys(text, TOP, out_dir / "synth_work" / "gf_engine", timeout=timeout,
                  cache_dir=cache)
    if not r.get("ok"):
        raise RuntimeError(f"yosys failed on the GF engine: {str(r.get('error'))[-2000:]}")
    ingress = _ingress_throughput(n_ops, chunk_beats)
    fig = {"n_ops": n_ops, "chunk_beats": chunk_beats, "chunk_bytes": 64 * chunk_beats,
           "slots": n_ops * chunk_beats, "slot_bits": word_bits,
           # measured (GFIngress in the Amaranth simulator), not the design's claim
           "bytes_per_clock": ingress["bytes_per_clock"],
           "payload_bytes_per_clock": ingress["payload_bytes_per_clock"],
           "latency_cycles": ingress["latency_cycles"],
           "engine_latency_design_cycles": LATENCY, **_figures(r)}
    mt = _MulTop()
    mtext = verilog.convert(mt, name="bench_gf_mul", ports=[mt.coeff, mt.x, mt.p],
                            emit_src=False)
    rm = run_yosys(mtext, "bench_gf_mul", out_dir / "synth_work" / "gf_mul", timeout=timeout,
                   cache_dir=cache)
    if rm.get("ok"):
        fig["multiplier"] = dict(_figures(rm), lanes=64, latency_cycles=MUL_LATENCY)
    if uram:
        ru = run_yosys_uram(text, TOP, out_dir / "synth_work" / "gf_engine_uram",
                            timeout=timeout, cache_dir=cache)
        fig["uram_mapping"] = _figures(ru)
    fig["core_path"] = core_path(out_dir, cache, n_ops=n_ops, chunk_beats=chunk_beats,
                                 timeout=timeout, ingress=ingress)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "gf_engine.json").write_text(json.dumps(fig, indent=1) + "\n")
    return fig


class _ShadowTop(Elaboratable):
    """``GFAccumulate``'s header-path half (:func:`netstor.gateware.gf_path.build_accumulate`)
    on a one-program pipeline, its PHV in and out as ports."""

    def __init__(self, n_ops, chunk_beats):
        from amaranth.lib import data
        from netstor.elements.gf import GFAccumulate
        from netstor.lang import Pipeline, Program
        p = Program("t")
        f = {n: p.meta(n, w) for n, w in (("op", 16), ("off", 16), ("coeff", 8), ("src", 4),
                                          ("need", 5), ("len", 16), ("status", 3))}
        self.el = p.add(GFAccumulate("eng", op=f["op"], off=f["off"], coeff=f["coeff"],
                                     src=f["src"], need=f["need"], length=f["len"],
                                     status=f["status"], n_ops=n_ops, chunk_beats=chunk_beats))
        self.pl = Pipeline([p])
        lay = data.StructLayout(self.pl.phv.layout())
        self.vin, self.phv_in = Signal(), Signal(lay.size)
        self.vout, self.phv_out = Signal(), Signal(lay.size)
        self.tap = Signal(64)
        # the host's timeout (a one-word memory) and the scanner's event, as ports (else the
        # timeout is a constant 0 and the scanner is optimised away)
        self.t_req, self.t_we, self.t_wdata = Signal(), Signal(), Signal(32)
        self.t_ack, self.t_rdata, self.event = Signal(), Signal(32), Signal(8)
        self.lay = lay

    def elaborate(self, platform):
        from netstor.gateware.csr import CsrBuilder
        from netstor.gateware.stages import build_element
        m = Module()
        phv = Signal(self.lay)
        m.d.comb += phv.as_value().eq(self.phv_in)
        csr = CsrBuilder()
        v, p, self.latency = build_element(m, self.el, self.pl, self.vin, phv, csr, prefix="ga")
        t = self.el.payload_tap
        from amaranth.hdl import Cat
        m.d.comb += [self.vout.eq(v), self.phv_out.eq(p.as_value()),
                     self.tap.eq(Cat(t["valid"], t["run"], t["status"], t["op"], t["off"],
                                     t["coeff"], t["src"], t["need"], t["length"]))]
        port = next(mi.port for mi in csr.memories if mi.name.endswith(".timeout"))
        ev = self.el.timeout_event
        m.d.comb += [port.req.eq(self.t_req), port.we.eq(self.t_we), port.addr.eq(0),
                     port.wdata.eq(self.t_wdata), self.t_ack.eq(port.ack),
                     self.t_rdata.eq(port.rdata), self.event.eq(Cat(ev["valid"], ev["op"]))]
        return m


#: the workloads of :func:`_ingress_throughput`: ``(data beats per packet, chunk beats of the
#: operation)``; one-packet contributions of 1..16 beats, a 2 KiB chunk in 16-beat (1,024-byte)
#: packets, and whole chunks (``None``: the engine's ``chunk_beats``) in packets of 1, 4 and
#: 16 beats
INGRESS_SIZES = ((1, 1), (2, 2), (4, 4), (8, 8), (16, 16), (16, 32), (1, None), (4, None),
                 (16, None))


def size_key(data_beats, chunk_beats):
    """``"<data bytes per packet>/<chunk bytes>"``: the key of a size in the figures."""
    return f"{64 * data_beats}/{64 * chunk_beats}"


def _ingress_throughput(n_ops, chunk_beats, sizes=INGRESS_SIZES, ops_per_size=2, seed=1):
    """Measured in the Amaranth simulator: :class:`~netstor.gateware.gf_path.GFIngress` (the
    engine as the core places it: the frame's beats delayed to meet the element's tap, the
    data beats through ``GFEngine``, a DONE packet's data replaced by the result).

    Per size of ``sizes`` (``(data beats per packet, chunk beats)``, the chunk split in
    packets of that many data beats; ``None`` = the engine's ``chunk_beats``; a size the
    engine does not hold is left out): ``ops_per_size`` repairs of two contributions each
    (``need`` 2, contributor 0's packets then contributor 1's, contributor 1's completing),
    every frame ``2 + data beats`` beats, all back to back at one beat a clock (the sizes
    follow each other with a few idle cycles). Every output
    beat is checked against the input beat it carries: a DONE packet's data bytes must be
    ``c0 * d0 ^ c1 * d1`` (:mod:`netstor.model.gf`'s tables, not the gateware's), every other
    byte as it came in.

    Returns ``{"sizes": {key: figures}, "bytes_per_clock": {key: ...},
    "payload_bytes_per_clock": {key: ...}, "latency_cycles": min, "latency_cycles_max": max,
    "beat_mismatches", "extra_beats_out", "mismatch_pulses", "beats_in", "beats_out",
    "cycles"}``, ``key`` as
    :func:`size_key`:

    * ``bytes_per_clock``: the engine's rate, data bytes (every contribution's) over the cycles
      its data beats took at the output (per packet, first to last data beat out); ``None``
      for a size with a missing, extra or wrong beat. The block has no ready: nothing can hold
      a beat, so this shows whether every data beat of every size left, one a clock.
    * ``payload_bytes_per_clock``: the same data bytes over the whole input span (first beat
      of the first frame to the last beat of the last): what a frame path of one beat a clock
      carries, the 2 header beats per packet included (``64 * d / (d + 2)``).
    * ``latency_cycles``: input beat to output beat (every beat)."""
    import numpy as np
    from amaranth.sim import Simulator
    from amaranth.lib import data
    from netstor.gateware.gf_path import GFIngress
    from netstor.model.gf import mul_vec
    rng = np.random.default_rng(seed)
    lay = data.StructLayout({"data": 512, "keep": 64, "last": 1})
    dut = GFIngress(lay, n_ops=n_ops, chunk_beats=chunk_beats)
    # ---- the workload: per size, frames [(tap dict, [beat ints], [expected out ints])] ------
    plan, op = [], 0
    for d, cb in sizes:
        cb = chunk_beats if cb is None else cb
        if cb % d or cb > chunk_beats or d > 16 or size_key(d, cb) in [p[0] for p in plan]:
            continue                        # not a size of this engine, or measured already
        frames = []
        for _ in range(ops_per_size):
            o = op % n_ops
            op += 1
            coeff = [int(x) for x in rng.integers(1, 256, 2)]
            chunk = rng.integers(0, 256, (2, 64 * cb), dtype=np.uint8)
            res = mul_vec(coeff[0], chunk[0]) ^ mul_vec(coeff[1], chunk[1])
            for src in (0, 1):
                for off in range(0, cb, d):
                    hdr = rng.integers(0, 256, 128, dtype=np.uint8).tobytes()
                    part = chunk[src, 64 * off:64 * (off + d)].tobytes()
                    want = res[64 * off:64 * (off + d)].tobytes() if src else part
                    beats = [int.from_bytes(hdr[:64], "little"),
                             int.from_bytes(hdr[64:], "little")]
                    beats += [int.from_bytes(part[64 * j:64 * j + 64], "little")
                              for j in range(d)]
                    wants = beats[:2] + [int.from_bytes(want[64 * j:64 * j + 64], "little")
                                         for j in range(d)]
                    tap = {"op": o, "off": off, "coeff": coeff[src], "src": src, "need": 2,
                           "length": 64 * d, "done": src}
                    frames.append((tap, beats, wants))
        plan.append((size_key(d, cb), d, frames))
    rec = {"in": [], "out": [], "mismatch": 0}   # in: (cycle, key, frame, beat); out: (cycle, data)

    async def bench(ctx):
        cyc = 0

        async def tick():
            nonlocal cyc
            await ctx.tick()
            cyc += 1
            if ctx.get(dut.o_valid):              # on the bus now: taken at the next edge
                rec["out"].append((cyc + 1, ctx.get(dut.o.data)))
            rec["mismatch"] += ctx.get(dut.mismatch)

        for key, d, frames in plan:
            for fi, (tap, beats, _w) in enumerate(frames):
                for j, b in enumerate(beats):
                    first = j == 0
                    ctx.set(dut.i_valid, 1)
                    ctx.set(dut.i.data, b)
                    ctx.set(dut.i.keep, (1 << 64) - 1)
                    ctx.set(dut.i.last, int(j == len(beats) - 1))
                    ctx.set(dut.tap_valid, int(first))
                    ctx.set(dut.tap_run, 1)
                    ctx.set(dut.tap_done, tap["done"])
                    ctx.set(dut.tap_op, tap["op"])          # generation 0
                    ctx.set(dut.tap_off, tap["off"])
                    ctx.set(dut.tap_coeff, tap["coeff"])
                    ctx.set(dut.tap_src, tap["src"])
                    ctx.set(dut.tap_need, tap["need"])
                    ctx.set(dut.tap_length, tap["length"])
                    rec["in"].append((cyc + 1, key, fi, j))  # accepted at the coming edge
                    await tick()
            ctx.set(dut.i_valid, 0)
            ctx.set(dut.tap_valid, 0)
            for _ in range(4):
                await tick()
        for _ in range(8):
            await tick()
        rec["cycles"] = cyc

    sim = Simulator(dut)
    sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()
    # ---- analysis: output beat i carries input beat i (the block keeps the order) -----------
    frames_of = {key: frames for key, _d, frames in plan}
    per = {key: {"data_beats_per_packet": d, "frames": len(frames), "data_bytes": 0,
                 "data_out_cycles": 0, "in_first": None, "in_last": None, "bad_beats": 0}
           for key, d, frames in plan}
    lat, bad = [], 0
    pkt_out = {}                                     # (key, frame) -> [first, last] data beat out
    for i, (c_in, key, fi, j) in enumerate(rec["in"]):
        p = per[key]
        p["in_first"] = c_in if p["in_first"] is None else p["in_first"]
        p["in_last"] = c_in
        if i >= len(rec["out"]):
            p["bad_beats"] += 1
            continue
        c_out, got = rec["out"][i]
        lat.append(c_out - c_in)
        if got != frames_of[key][fi][2][j]:
            p["bad_beats"] += 1
        if j >= 2:
            p["data_bytes"] += 64
            span = pkt_out.setdefault((key, fi), [c_out, c_out])
            span[1] = c_out
    for (key, _fi), (a, b) in pkt_out.items():
        per[key]["data_out_cycles"] += b - a + 1
    extra = len(rec["out"]) - len(rec["in"])
    out = {"sizes": per, "bytes_per_clock": {}, "payload_bytes_per_clock": {}}
    for key, p in per.items():
        ok = p["bad_beats"] == 0 and extra == 0 and rec["mismatch"] == 0
        bad += p["bad_beats"]
        out["bytes_per_clock"][key] = (round(p["data_bytes"] / p["data_out_cycles"], 4)
                                       if ok and p["data_out_cycles"] else None)
        span = p["in_last"] - p["in_first"] + 1
        out["payload_bytes_per_clock"][key] = round(p["data_bytes"] / span, 4) if ok else None
        p["input_span_cycles"] = span
    out.update({"latency_cycles": min(lat) if lat else None,
                "latency_cycles_max": max(lat) if lat else None,
                "beat_mismatches": bad, "extra_beats_out": extra,
                "mismatch_pulses": rec["mismatch"], "beats_in": len(rec["in"]),
                "beats_out": len(rec["out"]), "cycles": rec["cycles"]})
    return out


def core_path(out_dir, cache, *, n_ops=64, chunk_beats=64, timeout=None, ingress=None):
    """The engine's pieces in the frame path (:mod:`netstor.gateware.gf_path`): the
    header-path control shadow (Yosys), the egress scale (Yosys) and the ingress block's
    throughput (simulated, :func:`_ingress_throughput`, unless given as ``ingress``). The
    ingress block is ``GFEngine`` (above) plus its beat delay and byte select."""
    from netstor.gateware.gf_path import ACC_LATENCY, SCALE_LATENCY, GFScaleBeats
    from amaranth.lib import data
    out = {"header_path_latency_cycles": ACC_LATENCY, "scale_latency_cycles": SCALE_LATENCY,
           "ingress": ingress or _ingress_throughput(n_ops, chunk_beats)}
    sh = _ShadowTop(n_ops, chunk_beats)
    text = verilog.convert(sh, name="bench_gf_shadow", emit_src=False,
                           ports=[sh.vin, sh.phv_in, sh.vout, sh.phv_out, sh.tap, sh.t_req,
                                  sh.t_we, sh.t_wdata, sh.t_ack, sh.t_rdata, sh.event])
    r = run_yosys(text, "bench_gf_shadow",
                  Path(out_dir) / "synth_work" / "gf_shadow", timeout=timeout, cache_dir=cache)
    if r.get("ok"):
        out["control_shadow"] = _figures(r)
    lay = data.StructLayout({"data": 512, "first": 1})
    sc = GFScaleBeats(lay)
    text = verilog.convert(sc, name="bench_gf_scale", emit_src=False)
    r = run_yosys(text, "bench_gf_scale", Path(out_dir) / "synth_work" / "gf_scale",
                  timeout=timeout, cache_dir=cache)
    if r.get("ok"):
        out["scale"] = _figures(r)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", nargs="?", default=str(repo_root() / "build" / "bench"))
    ap.add_argument("--ops", type=int, default=64)
    ap.add_argument("--chunk-beats", type=int, default=64)
    ap.add_argument("--no-uram", action="store_true")
    a = ap.parse_args(argv)
    fig = bench(a.out_dir, n_ops=a.ops, chunk_beats=a.chunk_beats, uram=not a.no_uram)
    print(json.dumps({k: (v if k not in ("multiplier", "uram_mapping") else
                          {kk: vv for kk, vv in v.items() if kk != "yosys"})
                      for k, v in fig.items() if k != "yosys"}, indent=1))


if __name__ == "__main__":
    main()
