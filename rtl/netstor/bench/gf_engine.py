"""The XORInc GF(2^8) engine (:class:`netstor.gateware.gf_engine.GFEngine`) synthesised on its
own at full size (64 operations x 4 KiB chunks = 4,096 slots of 541 bits): Yosys
``synth_xilinx -family xcup`` (block RAM) and ``-uram``, cached by Verilog hash.

``bench(out_dir)`` writes ``<out_dir>/gf_engine.json``: ``n_ops``, ``chunk_beats``,
``bytes_per_clock`` (64: one beat a clock at every chunk size, the engine never stalls),
``latency_cycles``, ``LUT``, ``FF``, ``BRAM36``, ``URAM``, ``lut_levels`` and the multiplier
alone (``multiplier``: 64 lanes). Also ``python -m netstor.bench.gf_engine [out_dir]``.
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
    fig = {"n_ops": n_ops, "chunk_beats": chunk_beats, "chunk_bytes": 64 * chunk_beats,
           "slots": n_ops * chunk_beats, "slot_bits": word_bits,
           "bytes_per_clock": 64, "latency_cycles": LATENCY, **_figures(r)}
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
                                 timeout=timeout)
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


def _ingress_throughput(n_ops, chunk_beats, frames=6, data_beats=16):
    """Data bytes per clock through :class:`~netstor.gateware.gf_path.GFIngress` (the engine
    as the core places it), measured in the Amaranth simulator: back-to-back frames of
    ``2 + data_beats`` beats at one beat a clock, every one a contribution to a slot; the
    engine's data beats out per clock over the data-beat cycles, and whether any beat was
    held (the block has no ready: it cannot be)."""
    from amaranth.sim import Simulator
    from amaranth.lib import data
    from netstor.gateware.gf_path import GFIngress
    lay = data.StructLayout({"data": 512, "keep": 64, "last": 1})
    dut = GFIngress(lay, n_ops=n_ops, chunk_beats=chunk_beats)
    n = 2 + data_beats
    seen = {"out": 0, "cycles": 0}

    async def bench(ctx):
        cyc = 0
        for f in range(frames):
            for j in range(n):
                ctx.set(dut.i_valid, 1)
                ctx.set(dut.i.data, (f * 131 + j) * 0x0101)
                ctx.set(dut.i.last, int(j == n - 1))
                first = j == 0
                ctx.set(dut.tap_valid, int(first))
                ctx.set(dut.tap_run, 1)
                ctx.set(dut.tap_done, int(f % 2 == 1))
                ctx.set(dut.tap_op, f // 2 % n_ops)
                ctx.set(dut.tap_off, 0)
                ctx.set(dut.tap_coeff, 1 + f)
                ctx.set(dut.tap_src, f % 2)
                ctx.set(dut.tap_need, 2)
                ctx.set(dut.tap_length, 64 * data_beats)
                await ctx.tick()
                cyc += 1
                if ctx.get(dut.o_valid):
                    seen["out"] += 1
        ctx.set(dut.i_valid, 0)
        for _ in range(8):
            await ctx.tick()
            if ctx.get(dut.o_valid):
                seen["out"] += 1
        seen["cycles"] = cyc

    sim = Simulator(dut)
    sim.add_clock(4e-9)
    sim.add_testbench(bench)
    sim.run()
    beats = frames * n
    return {"frames": frames, "beats_per_frame": n, "beats_in": beats,
            "beats_out": seen["out"], "cycles_in": seen["cycles"],
            # every beat in leaves, one per clock: the data beats move at 64 bytes a clock
            "bytes_per_clock": 64 * seen["out"] / seen["cycles"] if seen["out"] == beats
            else None}


def core_path(out_dir, cache, *, n_ops=64, chunk_beats=64, timeout=None):
    """The engine's pieces in the frame path (:mod:`netstor.gateware.gf_path`): the
    header-path control shadow (Yosys), the egress scale (Yosys) and the ingress block's
    throughput (simulated). The ingress block is ``GFEngine`` (above) plus its beat delay and
    byte select."""
    from netstor.gateware.gf_path import ACC_LATENCY, SCALE_LATENCY, GFScaleBeats
    from amaranth.lib import data
    out = {"header_path_latency_cycles": ACC_LATENCY, "scale_latency_cycles": SCALE_LATENCY,
           "ingress": _ingress_throughput(n_ops, chunk_beats)}
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
