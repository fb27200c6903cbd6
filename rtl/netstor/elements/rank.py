"""``Rank``: the best of up to 8 replicas by a pipelined ranking core (NetRS's replica
selection).

Gateware: L + 1 cycles, L the core's pipeline latency (11 for NetRS's XLS core). The core is fed
from the PHV; the PHV and the condition wait in an L-deep shift register; the results are merged
and registered. One selection per clock. Ingress only.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Signal

from netstor.gateware.kit import HwEnv, phv_signal, target
from netstor.lang.element import Element
from netstor.lang.expr import Field, as_expr
from netstor.lang.program import Set

__all__ = ["Rank"]


def _mask(w):
    return (1 << w) - 1


class Rank(Element):
    """Replica selection by a ranking ``core`` (NetRS's: the XLS pipeline of ``hls/ranking.x``,
    :data:`netstor.offloads.netrs.ranking_core.XLS_RANKING`): among up to 8 replicas, the best
    by algorithm ``algo`` (NetRS's core: 0 C3, 1 least outstanding, 2 power of two choices, 3
    round robin; see hls/README.md for formats and tie-breaking).

    ``core`` gives ``component()`` (an Amaranth component with ``valid_in``, the inputs
    ``algo avail n rr rnd q os t r`` (the replicas' values packed, replica 0 lowest),
    ``found index score`` and its ``latency``), ``reference(algo, avail, replicas, n=, rr=,
    rnd=)`` (the model's bit-exact ``(found, index, score)``) and ``verilog()`` (the files the
    component instantiates).

    ``replicas``: up to 8 ``(q, os, t, r)`` expression tuples (EWMA queue length UQ12.4,
    outstanding requests, service time UQ12.4, response time UQ12.4); missing replicas are
    unavailable. ``avail`` (8 bits, bit i = replica i may be chosen), ``n`` (C3's multiplier
    of os), ``rr`` (round-robin pointer / tie start), ``rnd`` (16 random bits for P2C) are
    expressions. Results go to fields ``found`` (1 bit), ``index`` (3 bits) and optionally
    ``score`` (up to 53 bits, truncated to the field); nothing is written when ``when`` is
    false. One selection per clock; its latency is the core's pipeline depth plus one.
    """
    N = 8
    WIDTHS = {"q": 16, "os": 8, "t": 16, "r": 16}

    def __init__(self, name, *, core, algo, avail, replicas, found, index, score=None, n=1,
                 rr=0, rnd=0, when=None):
        super().__init__(name, when)
        missing = [a for a in ("component", "reference", "verilog")
                   if not callable(getattr(core, a, None))]
        if missing:
            raise TypeError(f"rank {name}: core {core!r} lacks {', '.join(missing)} (a ranking "
                            "core gives component(), reference() and verilog())")
        self.core = core
        replicas = list(replicas)
        if not 1 <= len(replicas) <= self.N:
            raise ValueError(f"rank {name}: 1..{self.N} replicas, got {len(replicas)}")
        self.replicas = []
        for i, rep in enumerate(replicas):
            if len(rep) != 4:
                raise ValueError(f"rank {name}: replica {i} needs (q, os, t, r)")
            self.replicas.append(tuple(as_expr(x) for x in rep))
        self.algo, self.avail = as_expr(algo), as_expr(avail)
        self.n, self.rr, self.rnd = as_expr(n), as_expr(rr), as_expr(rnd)
        for f, w in ((found, 1), (index, 3)):
            if not isinstance(f, Field) or f.width < w:
                raise ValueError(f"rank {name}: result fields found/index need >= 1/3 bits")
        self.found, self.index, self.score = found, index, score

    def inputs(self):
        yield from (self.algo, self.avail, self.n, self.rr, self.rnd)
        for rep in self.replicas:
            yield from rep

    def outputs(self):
        return [f for f in (self.found, self.index, self.score) if f is not None]

    # ---- language ----------------------------------------------------------------------------
    def reads(self):
        return list(self.inputs())

    def writes(self):
        return self.outputs()

    def set_items(self):
        return [Set(f, 0) for f in self.outputs()]

    # ---- golden model ------------------------------------------------------------------------
    def evaluate(self, model, phv, env):
        W = self.WIDTHS
        reps = [tuple(x.eval(env) & _mask(W[k]) for x, k in zip(rep, W))
                for rep in self.replicas]
        reps += [(0, 0, 0, 0)] * (self.N - len(reps))
        avail = self.avail.eval(env) & _mask(len(self.replicas))
        found, index, score = self.core.reference(
            self.algo.eval(env) & 3, avail, reps, n=self.n.eval(env) & 0xFF,
            rr=self.rr.eval(env) & 7, rnd=self.rnd.eval(env) & 0xFFFF)
        out = [(self.found.name, found), (self.index.name, index)]
        if self.score is not None:
            out.append((self.score.name, score))
        model.assign(phv, out)

    # ---- compiled model ----------------------------------------------------------------------
    def compile(self, cg):
        """The inputs as straight-line code, the core's own ``reference`` for the selection
        (what :meth:`evaluate` calls)."""
        W = self.WIDTHS

        def val(x, w):
            src = cg.expr(x)
            return src if x.width <= w else f"({src} & {hex(_mask(w))})"
        reps = ["(" + ", ".join(val(x, W[k]) for x, k in zip(rep, W)) + ")"
                for rep in self.replicas]
        reps += ["(0, 0, 0, 0)"] * (self.N - len(reps))
        res = [cg.tmp(n) for n in ("found", "index", "score")]
        ref = cg.const(self.core.reference, "rank_reference")
        cg.emit(f"{', '.join(res)} = {ref}({val(self.algo, 2)} & 3, {cg.expr(self.avail)} & "
                f"{hex(_mask(len(self.replicas)))}, [{', '.join(reps)}], n={val(self.n, 8)}, "
                f"rr={val(self.rr, 3)}, rnd={val(self.rnd, 16)})")
        out = [(self.found.name, (res[0], None)), (self.index.name, (res[1], None))]
        if self.score is not None:
            out.append((self.score.name, (res[2], None)))
        cg.assign(out)

    # ---- gateware ----------------------------------------------------------------------------
    def elaborate(self, m, pipeline, valid_in, phv_in, csr, *, prefix):
        return _build(m, self, pipeline, valid_in, phv_in, prefix)

    def extra_verilog(self):
        return self.core.verilog()


def _build(m, e, pipeline, valid_in, phv_in, prefix):
    core = e.core.component()
    m.submodules[f"{prefix}_core"] = core
    env = HwEnv(pipeline, phv_in)
    W = e.WIDTHS

    def val(x, w):
        v = x.hw(env)
        return v[:w] if len(v) > w else v

    packed = {k: [] for k in W}
    for i in range(e.N):
        rep = e.replicas[i] if i < len(e.replicas) else None
        for k, x in zip(W, rep or [Const(0, 1)] * 4):
            packed[k].append(val(x, W[k]) if rep else Const(0, W[k]))
    when = Signal(name=f"{prefix}_when")
    m.d.comb += [
        when.eq(e.when.hw(env).any()),
        core.valid_in.eq(valid_in),
        core.algo.eq(val(e.algo, 2)),
        core.avail.eq(val(e.avail, 8) & ((1 << len(e.replicas)) - 1)),
        core.n.eq(val(e.n, 8)), core.rr.eq(val(e.rr, 3)), core.rnd.eq(val(e.rnd, 16)),
    ] + [getattr(core, k).eq(Cat(*packed[k])) for k in W]
    # the PHV and `when` wait for the core
    v, p, w = valid_in, phv_in, when
    for k in range(core.latency):
        nv, np_, nw = (Signal(name=f"{prefix}_v{k}"), phv_signal(pipeline, f"{prefix}_p{k}"),
                       Signal(name=f"{prefix}_w{k}"))
        m.d.sync += [nv.eq(v), np_.eq(p), nw.eq(w)]
        v, p, w = nv, np_, nw
    nxt = phv_signal(pipeline, f"{prefix}_next")
    m.d.comb += nxt.eq(p)
    with m.If(w):
        outs = [(e.found, core.found), (e.index, core.index)]
        if e.score is not None:
            outs.append((e.score, core.score))
        for f, sig in outs:
            t = target(pipeline, nxt, f.name)
            m.d.comb += t.eq(sig[:len(t)])
    valid_out, phv_out = Signal(name=f"{prefix}_valid"), phv_signal(pipeline, f"{prefix}_phv")
    m.d.sync += [valid_out.eq(v), phv_out.eq(nxt)]
    return valid_out, phv_out, core.latency + 1
