"""Element kinds are plug-ins: a kind defined here, in a test file, runs in the golden model,
takes part in stage scheduling and elaborates to gateware that computes what the model does,
with no generic module changed. And the generic layers do not know the built-in kinds."""
from __future__ import annotations

import random
import subprocess
import sys

from amaranth.hdl import Module, Signal
from amaranth.lib import data
from amaranth.sim import Simulator

from netstor.elements import Compute
from netstor.gateware.csr import CsrBuilder
from netstor.gateware.kit import HwEnv, phv_signal, target
from netstor.gateware.stages import build_element
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


def test_a_new_kind_schedules_by_what_it_reads_and_writes():
    pl, pc, _, _ = toy_pipeline()
    stages = pl.stages()
    # `double` reads what `pc` writes: a later stage
    assert [[e.name for e in st] for st in stages] == [["pc"], ["double"]]
    assert pl.writes(pc) == ["toy.m.ones"]


def _frame(src_ip):
    eth = bytes(6) + bytes([2, 0, 0, 0, 0, 1]) + b"\x08\x00"
    ip = bytes([0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0]) + src_ip.to_bytes(4, "big") + bytes(4)
    return eth + ip + bytes(8)


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


def test_a_new_kind_elaborates_to_what_the_model_computes():
    pl, pc, ones, _ = toy_pipeline()
    m = Module()
    layout = data.StructLayout(pl.phv.layout())
    vin, phv_in = Signal(), Signal(layout)
    vout, pout, lat = build_element(m, pc, pl, vin, phv_in, CsrBuilder(), prefix="pc")
    assert lat == 1
    model = DataplaneModel(pl)
    rng = random.Random(6)
    vectors = []
    for _ in range(40):
        ip = rng.getrandbits(32)
        vectors.append((ip, model.parse(_frame(ip), 0)))
    got = []

    async def bench(ctx):
        for ip, phv in vectors:
            ctx.set(HwEnv(pl, phv_in).field("ipv4.src"), ip)
            ctx.set(vin, 1)
            await ctx.tick()
            got.append(ctx.get(HwEnv(pl, pout).field(ones.name)))

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    want = []
    for ip, phv in vectors:
        model._run([pc], phv)
        want.append(model.view(phv, ones.name))
    assert got == want == [bin(ip).count("1") for ip, _ in vectors]


def test_generic_layers_do_not_import_the_kinds():
    code = ("import sys, netstor.lang, netstor.gateware.stages, netstor.gateware.datapath, "
            "netstor.model.dataplane; "
            "print(any(m == 'netstor.elements' or m.startswith('netstor.elements.') "
            "for m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False"
