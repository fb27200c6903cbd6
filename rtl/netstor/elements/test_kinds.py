"""Element kinds are plug-ins: a kind defined here, in a test file, runs in the golden model,
takes part in stage scheduling and elaborates to gateware (and Verilog) that computes what the
model does, with no generic module changed. And the generic layers do not know the built-in
kinds."""
from __future__ import annotations

import random
import subprocess
import sys

import pytest
from amaranth.back import verilog
from amaranth.hdl import Module, Signal
from amaranth.lib import data
from amaranth.sim import Simulator

from netstor.elements import Compute, Rank
from netstor.gateware.csr import CsrBuilder
from netstor.gateware.kit import HwEnv, phv_signal, target
from netstor.gateware.stages import build_element, build_stage
from netstor.lang import Element, F, Pipeline, Program, Set
from netstor.model.dataplane import DataplaneModel


class Popcount(Element):
    """A toy kind: ``dst <- number of one bits of src`` (1 cycle), counting the packets it
    saw with more than ``threshold`` ones in a counter of its own."""

    def __init__(self, name, dst, src, *, threshold, when=None):
        super().__init__(name, when)
        self.dst, self.src, self.threshold = dst, src, threshold

    def reads(self):
        return [self.src]

    def writes(self):
        return [self.dst]

    def set_items(self):
        return [Set(self.dst, 0)]

    def model_counters(self):
        return [f"{self.qualname}.heavy"]

    def evaluate(self, model, phv, env):
        n = bin(self.src.eval(env) & ((1 << self.src.width) - 1)).count("1")
        if n > self.threshold:
            model.count(f"{self.qualname}.heavy")
        model.assign(phv, [(self.dst.name, n)])

    def elaborate(self, m, pipeline, valid_in, phv_in, csr, *, prefix):
        env = HwEnv(pipeline, phv_in)
        src = self.src.hw(env)[:self.src.width]
        count = sum(src[i] for i in range(self.src.width))
        nxt = phv_signal(pipeline, f"{prefix}_next")
        m.d.comb += nxt.eq(phv_in)
        with m.If(self.when.hw(env).any()):
            t = target(pipeline, nxt, self.dst.name)
            m.d.comb += t.eq(count)
        heavy = csr.counter(f"{self.qualname}.heavy", doc="packets with many ones")
        m.d.comb += heavy.eq(valid_in & self.when.hw(env).any() & (count > self.threshold))
        valid_out, phv_out = Signal(name=f"{prefix}_v"), phv_signal(pipeline, f"{prefix}_p")
        m.d.sync += [valid_out.eq(valid_in), phv_out.eq(nxt)]
        return valid_out, phv_out, 1


def toy_pipeline():
    p = Program("toy")
    ones = p.meta("ones", 8)
    doubled = p.meta("doubled", 8)
    pc = p.add(Popcount("pc", ones, F.ipv4.src, threshold=20))
    p.add(Compute("double", [Set(doubled, ones + ones)]))
    return Pipeline([p]), pc, ones, doubled


def _frame(src_ip, ttl=64):
    eth = bytes(6) + bytes([2, 0, 0, 0, 0, 1]) + b"\x08\x00"
    ip = bytearray([0x45, 0, 0, 28, 0, 0, 0, 0, ttl, 17, 0, 0]) + src_ip.to_bytes(4, "big") \
        + bytes([10, 0, 0, 1])
    s = sum(int.from_bytes(ip[i:i + 2], "big") for i in range(0, 20, 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    ip[10:12] = (~s & 0xFFFF).to_bytes(2, "big")
    return eth + bytes(ip) + bytes(8)


def _ip_header_ok(frame):
    s = sum(int.from_bytes(frame[14 + i:16 + i], "big") for i in range(0, 20, 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s == 0xFFFF


def test_a_new_kind_schedules_by_what_it_reads_and_writes():
    pl, pc, _, _ = toy_pipeline()
    stages = pl.stages()
    # `double` reads what `pc` writes: a later stage
    assert [[e.name for e in st] for st in stages] == [["pc"], ["double"]]
    assert pl.writes(pc) == ["toy.m.ones"]


def test_a_new_kind_is_checked_like_any_element():
    p = Program("bad")
    p.add(Popcount("pc", F.ipv4.ver_ihl, F.ipv4.src, threshold=1))    # a read-only field
    with pytest.raises(ValueError, match="read-only"):
        Pipeline([p])
    q = Program("eg")
    with pytest.raises(TypeError, match="Popcount elements cannot run in egress"):
        q.add_egress(Popcount("pc", q.meta("n", 8), F.ipv4.src, threshold=1))


def test_a_new_kind_runs_in_the_model():
    pl, _, ones, doubled = toy_pipeline()
    m = DataplaneModel(pl)
    rng = random.Random(5)
    heavy = 0
    for _ in range(200):
        ip = rng.getrandbits(32)
        phv = m.parse(_frame(ip), 0)
        m._run(pl.elements, phv)
        n = bin(ip).count("1")                         # the independent reference
        heavy += n > 20
        assert m.view(phv, ones.name) == n
        assert m.view(phv, doubled.name) == 2 * n
    assert m.counter("toy.pc.heavy") == heavy > 0


def test_a_new_kind_changes_the_packet_the_model_sends():
    """Through the model's public entry point: the toy kind writes ``ipv4.tos``; the frame
    leaves (wire RX 0 -> host RX 2) with the popcount there and a valid header checksum."""
    p = Program("tos")
    p.add(Popcount("pc", F.ipv4.tos, F.ipv4.src, threshold=16))
    m = DataplaneModel(Pipeline([p]))
    rng = random.Random(7)
    heavy = 0
    for _ in range(50):
        ip = rng.getrandbits(32)
        frame = _frame(ip)
        (out,) = m.process(frame, 0)
        n = bin(ip).count("1")
        heavy += n > 16
        assert out.port == 2
        assert out.frame[15] == n
        assert out.frame[:15] == frame[:15] and out.frame[16:24] == frame[16:24]
        assert out.frame[26:] == frame[26:]
        assert _ip_header_ok(out.frame)
    assert m.counter("tos.pc.heavy") == heavy > 0


def _simulate(m, pl, vin, phv_in, pout, inputs, out_fields, latency):
    """Drive ``inputs`` (``[{field: value}]``, one per clock) and collect ``out_fields`` of
    the output PHV ``latency`` clocks later."""
    got = []

    async def bench(ctx):
        for k in range(len(inputs) + latency):
            if k < len(inputs):
                for name, v in inputs[k].items():
                    ctx.set(HwEnv(pl, phv_in).field(name), v)
            ctx.set(vin, int(k < len(inputs)))
            await ctx.tick()
            if k + 1 >= latency and len(got) < len(inputs):
                got.append(tuple(ctx.get(HwEnv(pl, pout).field(n)) for n in out_fields))

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return got


def test_a_new_kind_elaborates_to_what_the_model_computes():
    pl, pc, ones, _ = toy_pipeline()
    m = Module()
    layout = data.StructLayout(pl.phv.layout())
    vin, phv_in = Signal(), Signal(layout)
    vout, pout, lat = build_element(m, pc, pl, vin, phv_in, CsrBuilder(), prefix="pc")
    assert lat == 1
    model = DataplaneModel(pl)
    rng = random.Random(6)
    ips = [rng.getrandbits(32) for _ in range(40)]
    got = _simulate(m, pl, vin, phv_in, pout, [{"ipv4.src": ip} for ip in ips],
                    [ones.name], lat)
    want = []
    for ip in ips:
        phv = model.parse(_frame(ip), 0)
        model._run([pc], phv)
        want.append((model.view(phv, ones.name),))
    assert got == want == [(bin(ip).count("1"),) for ip in ips]


def test_a_new_kind_shares_a_stage_and_converts_to_verilog():
    """The toy kind and an independent Compute land in one stage; the generic stage builder
    merges them; the stage converts to Verilog and computes what the model does."""
    p = Program("toy")
    ones, ttl2 = p.meta("ones", 8), p.meta("ttl2", 8)
    pc = p.add(Popcount("pc", ones, F.ipv4.src, threshold=20))
    p.add(Compute("ttl", [Set(ttl2, F.ipv4.ttl + 1)]))
    pl = Pipeline([p])
    (stage,) = pl.stages()
    assert [e.name for e in stage] == ["pc", "ttl"]

    def build():
        m = Module()
        layout = data.StructLayout(pl.phv.layout())
        vin, raw = Signal(name="valid_in"), Signal(layout.size, name="phv_in")
        phv_in = data.View(layout, raw)
        csr = CsrBuilder()
        vout, pout, lat = build_stage(m, stage, pl, vin, phv_in, csr, prefix="st0")
        return m, vin, raw, phv_in, vout, pout, lat, csr

    m, vin, raw, _, vout, pout, lat, csr = build()
    text = verilog.convert(m, name="toy_stage", ports=[vin, raw, vout, pout.as_value()],
                           emit_src=False)
    assert "module toy_stage" in text and "st0_toy_pc" in text
    assert "toy.pc.heavy" in {c.name for c in csr.counters}

    m, vin, _, phv_in, _, pout, lat, _ = build()
    model = DataplaneModel(pl)
    rng = random.Random(8)
    vecs = [(rng.getrandbits(32), rng.randrange(256)) for _ in range(30)]
    got = _simulate(m, pl, vin, phv_in, pout,
                    [{"ipv4.src": ip, "ipv4.ttl": t} for ip, t in vecs],
                    [ones.name, ttl2.name], lat)
    want = []
    for ip, t in vecs:
        phv = model.parse(_frame(ip, ttl=t), 0)
        model._run(pl.elements, phv)
        want.append((model.view(phv, ones.name), model.view(phv, ttl2.name)))
    assert got == want == [(bin(ip).count("1"), (t + 1) & 0xFF) for ip, t in vecs]


def test_rank_takes_its_core_as_a_parameter_and_checks_it():
    p = Program("r")
    f = p.meta("found", 1), p.meta("index", 3)
    with pytest.raises(TypeError, match="lacks component, reference, verilog"):
        Rank("rank", core=object(), algo=0, avail=1, replicas=[(1, 1, 1, 1)],
             found=f[0], index=f[1])


def test_generic_layers_do_not_import_the_kinds():
    code = ("import sys, netstor.lang, netstor.lang.schema, netstor.gateware, "
            "netstor.gateware.kit, netstor.gateware.stages, netstor.gateware.datapath, "
            "netstor.gateware.core, netstor.model, netstor.model.dataplane; "
            "print(sorted(m for m in sys.modules if m == 'netstor.elements' "
            "or m.startswith('netstor.elements.')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"
