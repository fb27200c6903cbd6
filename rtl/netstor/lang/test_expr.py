"""The expression language's two backends agree bit for bit (random expressions and inputs).

``eval`` (golden model) is compared with ``hw`` (Amaranth) simulated by Amaranth's own
simulator, and both with a third, independent reference: Python arithmetic written here.
"""
import random

import pytest
from amaranth.hdl import Signal, Module
from amaranth.sim import Simulator

from netstor.lang.expr import Const, Field, Param, Old, Mux, Cat

WIDTHS = {"a": 8, "b": 16, "c": 5}


class _PyEnv:
    def __init__(self, values):
        self.values = values

    def field(self, name):
        return self.values[name]

    def param(self, name):
        return self.values["p"]

    def old(self):
        return self.values["old"]


class _HwEnv:
    def __init__(self, sigs):
        self.sigs = sigs

    def field(self, name):
        return self.sigs[name]

    def param(self, name):
        return self.sigs["p"]

    def old(self):
        return self.sigs["old"]


def random_expr(rng, depth):
    """(expression, reference function) pairs built together."""
    if depth == 0 or rng.random() < 0.25:
        kind = rng.randrange(5)
        if kind < 3:
            n = "abc"[kind]
            return Field(n, WIDTHS[n]), (lambda v, n=n: v[n]), WIDTHS[n]
        if kind == 3:
            return Param("p", 12), (lambda v: v["p"]), 12
        w = rng.randrange(1, 20)
        c = rng.getrandbits(w)
        return Const(c, w), (lambda v, c=c: c), w
    op = rng.choice(["+", "-", "&", "|", "^", "~", "==", "<", ">=", "slice", "mux", "cat",
                     "<<", ">>"])
    x, fx, wx = random_expr(rng, depth - 1)
    if op == "~":
        return ~x, (lambda v: ~fx(v) & ((1 << wx) - 1)), wx
    if op == "slice":
        lo = rng.randrange(wx)
        hi = rng.randrange(lo + 1, wx + 1)
        return x[lo:hi], (lambda v: (fx(v) >> lo) & ((1 << (hi - lo)) - 1)), hi - lo
    if op in ("<<", ">>"):
        n = rng.randrange(0, wx + 2)
        m = (1 << wx) - 1
        f = (lambda v: (fx(v) << n) & m) if op == "<<" else (lambda v: (fx(v) >> n) & m)
        return (x << n if op == "<<" else x >> n), f, wx
    y, fy, wy = random_expr(rng, depth - 1)
    w = max(wx, wy)
    m = (1 << w) - 1
    if op == "+":
        return x + y, (lambda v: (fx(v) + fy(v)) & m), w
    if op == "-":
        return x - y, (lambda v: (fx(v) - fy(v)) & m), w
    if op == "&":
        return x & y, (lambda v: fx(v) & fy(v)), w
    if op == "|":
        return x | y, (lambda v: fx(v) | fy(v)), w
    if op == "^":
        return x ^ y, (lambda v: fx(v) ^ fy(v)), w
    if op == "==":
        return x == y, (lambda v: int(fx(v) == fy(v))), 1
    if op == "<":
        return x < y, (lambda v: int(fx(v) < fy(v))), 1
    if op == ">=":
        return x >= y, (lambda v: int(fx(v) >= fy(v))), 1
    if op == "mux":
        c, fc, _ = random_expr(rng, depth - 1)
        return Mux(c, x, y), (lambda v: fx(v) if fc(v) else fy(v)), w
    return Cat(x, y), (lambda v: fx(v) | (fy(v) << wx)), wx + wy


@pytest.mark.parametrize("seed", range(4))
def test_eval_hw_and_reference_agree(seed):
    rng = random.Random(seed)
    exprs = [random_expr(rng, 4) for _ in range(40)]
    sigs = {n: Signal(w, name=n) for n, w in WIDTHS.items()}
    sigs["p"] = Signal(12, name="p")
    sigs["old"] = Signal(8, name="old")
    m = Module()
    outs = []
    for i, (e, _, w) in enumerate(exprs):
        assert e.width == w, f"expression {i}: width {e.width}, reference says {w}"
        o = Signal(e.width, name=f"o{i}")
        m.d.comb += o.eq(e.hw(_HwEnv(sigs)))
        outs.append(o)
    vectors = []
    for _ in range(60):
        v = {n: rng.getrandbits(w) for n, w in WIDTHS.items()}
        v["p"] = rng.getrandbits(12)
        v["old"] = rng.getrandbits(8)
        vectors.append(v)
    for special in (0, 1):   # all zeros / all ones
        vectors.append({n: (0 if not special else (1 << w) - 1)
                        for n, w in list(WIDTHS.items()) + [("p", 12), ("old", 8)]})
    sim = Simulator(m)
    mismatches = []

    async def bench(ctx):
        for v in vectors:
            for n, val in v.items():
                ctx.set(sigs[n], val)
            for i, (e, ref, _) in enumerate(exprs):
                hw = ctx.get(outs[i])
                ev = e.eval(_PyEnv(v))
                r = ref(v)
                if not (hw == ev == r):
                    mismatches.append((i, v, hw, ev, r))
    sim.add_testbench(bench)
    sim.run()
    assert not mismatches, f"{len(mismatches)} mismatches, first: {mismatches[0]}"


def test_constants_are_checked():
    with pytest.raises(ValueError):
        Const(256, 8)
    with pytest.raises(ValueError):
        Const(-1, 8)
    with pytest.raises(TypeError):
        bool(Field("a", 8) == 1)
    with pytest.raises(ValueError):
        Field("a", 8)[4:9]
