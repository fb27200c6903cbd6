"""Egress elements are grouped into stages by the ingress rules (``Pipeline.egress_stages``):
elements of programs that never act on one packet share a stage. The grouped gateware
(:class:`netstor.gateware.stage.EgressStages`) computes what the golden model computes by
running the egress elements one after another."""
from __future__ import annotations

import random

from amaranth.sim import Simulator

from netstor.elements import Compute, Table
from netstor.gateware.csr import CsrBuilder
from netstor.gateware.kit import HwEnv
from netstor.gateware.stage import EgressStages
from netstor.lang import Action, F, Pipeline, Program, Set
from netstor.model.dataplane import DataplaneModel
from netstor.programs import default_pipeline


def egress_pipeline():
    """Hand-worked egress schedule (see the test below for the expected stages)."""
    base = Program("base")                                          # no UDP port
    base.add_egress(Compute("a", [Set(F.ipv4.ttl, F.meta.rid[0:8] ^ F.ipv4.ttl)]))
    x = Program("x", udp_port=1000)
    hx = x.header([("f", 16), ("g", 16)])
    put = Action("put", {"v": 16}, lambda a: [Set(hx["f"], F.meta.rid[0:16] + a.v)])
    # a 3-cycle element (default action on a miss: the table stays empty)
    x.add_egress(Table("tx", kind="exact", key=[F.meta.rid[0:8]], size=8, ways=2,
                       actions=[put], default=put, default_params={"v": 0x1234}))
    x.add_egress(Compute("s", [Set(hx["g"], hx["f"] + 1)]))       # RAW on x.f: after tx
    y = Program("y", udp_port=1001)
    hy = y.header([("k", 8), ("rest", 24)])                         # k = x.f's high bits
    # writes x.f's bits (exclusive with x.tx: same stage, 1 cycle beside 3)
    y.add_egress(Compute("i", [Set(hy["k"], F.meta.rid[0:8] ^ 0x5A)]))
    # RAW on y.k, WAW on ttl with base.a (a program without UDP port): a later stage
    y.add_egress(Compute("t", [Set(F.ipv4.ttl, hy["k"] + F.ipv4.ttl)]))
    z = Program("z")                                                # no UDP port
    mz = z.meta("mz", 1)
    z.add_egress(Compute("l", [Set(mz, F.app[0:8] == 0)]))          # reads all of app
    return Pipeline([base, x, y, z])


def test_egress_stages_follow_the_ingress_rules():
    pl = egress_pipeline()
    got = [[e.qualname for e in st] for st in pl.egress_stages()]
    assert got == [["base.a", "x.tx", "y.i"], ["x.s", "y.t"], ["z.l"]]
    # add_egress gives a UDP-port program's egress elements `selected`, as add() does
    assert all("selected(" in repr(e.when) for e in pl.egress_elements
               if e.program.name in ("x", "y"))
    assert not any("selected" in repr(e.when) for e in pl.egress_elements
                   if e.program.name in ("base", "z"))


def test_default_pipeline_egress_of_exclusive_programs_share_a_stage():
    """NetLR's, XORInc's and NICE's per-copy tables sit beside the primitives' (one 3-cycle
    stage); XORInc's scale reads what its table writes (its own stage, 0 header-path
    cycles)."""
    pl = default_pipeline()
    got = [[e.qualname for e in st] for st in pl.egress_stages()]
    assert got == [["prim.copy_tag", "nl.copies", "xi.delta", "nice.copies"], ["xi.scale"]]


def test_grouped_egress_gateware_equals_the_model_run_in_order():
    """Random PHVs (all four header types, random app/ttl/rid) through copy 0 and the
    recirculation copy of EgressStages (Amaranth simulation) against
    ``DataplaneModel._run(pipeline.egress_elements)``: every written container is equal, and
    the recirculation copy leaves unchanged after the same latency."""
    pl = egress_pipeline()
    eg = EgressStages(pl, CsrBuilder(), n_copies=1)
    assert eg.latency == 3 + 1 + 1
    model = DataplaneModel(pl)
    rng = random.Random(13)
    A = pl.phv.fields["app"].width
    ins = [{"meta.hdr_type": rng.randrange(4), "meta.rid": rng.getrandbits(16),
            "ipv4.ttl": rng.getrandbits(8),
            "app": rng.getrandbits(A) if rng.random() < 0.8 else rng.getrandbits(A - 8)}
           for _ in range(120)]
    outs = ["app", "ipv4.ttl", "z.m.mz"]
    want = []
    for v in ins:
        phv = {n: 0 for n in pl.phv.fields}
        phv.update(v)
        model._run(pl.egress_elements, phv)
        want.append(tuple(model.view(phv, n) for n in outs))
    # the merge is exercised: x's and y's packets both get app rewritten, by different
    # elements of one stage
    for t in (1, 2):
        assert any(v["meta.hdr_type"] == t and w[0] != v["app"] for v, w in zip(ins, want))
    got, recirc = [], []
    L = eg.latency

    async def bench(ctx):
        for k in range(len(ins) + L + 1):
            for lane in (0, 1):
                if k < len(ins):
                    env = HwEnv(pl, eg.i[lane].payload)
                    for name, val in ins[k].items():
                        ctx.set(env.field(name), val)
                ctx.set(eg.i[lane].valid, int(k < len(ins)))
            # outputs of the PHV that entered L cycles ago (before this edge)
            if k >= L and len(got) < len(ins):
                assert ctx.get(eg.o[0].valid) and ctx.get(eg.o[1].valid)
                o, r = HwEnv(pl, eg.o[0].payload), HwEnv(pl, eg.o[1].payload)
                got.append(tuple(ctx.get(o.field(n)) for n in outs))
                recirc.append(tuple(ctx.get(r.field(n)) for n in ("app", "ipv4.ttl")))
            await ctx.tick()

    sim = Simulator(eg)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert got == want
    assert recirc == [(v["app"], v["ipv4.ttl"]) for v in ins]
