"""Match-action stages elaborated from program elements.

Every element becomes a fixed-latency pipeline section that accepts one PHV per clock and never
stalls (there is no ready: the pipeline is a shift of ``(valid, phv)`` pairs). How a kind is
built, and its latency, is the kind's own (:meth:`netstor.lang.element.Element.elaborate`; each
module of :mod:`netstor.elements` documents its kind's latency and host access). This module
never asks which kind an element is.

Independent elements share a stage (:meth:`netstor.lang.Pipeline.stages`, elaborated by
:func:`build_stage`): the stage takes as long as its slowest element.
"""

from __future__ import annotations

from amaranth.hdl import Signal

from .kit import HwEnv, phv_signal as _phv_signal, target

__all__ = ["build_element", "build_stage"]


def build_element(m, e, pipeline, valid_in, phv_in, csr, *, prefix):
    """Elaborate element ``e``; returns ``(valid_out, phv_out, latency)``."""
    return e.elaborate(m, pipeline, valid_in, phv_in, csr, prefix=prefix)


def build_stage(m, elements, pipeline, valid_in, phv_in, csr, *, prefix):
    """Elaborate the elements of one stage (:meth:`netstor.lang.Pipeline.stages`) side by
    side on the same input; returns ``(valid_out, phv_out, latency)``, latency = the slowest
    element's. The slowest element's output is the base; every other element's written
    fields wait for it in short delay lines and replace the base's bits when that element's
    condition held (so of two elements of exclusive programs writing the same field, the one
    that acted wins; for the others it makes no difference)."""
    if len(elements) == 1:
        return build_element(m, elements[0], pipeline, valid_in, phv_in, csr,
                             prefix=f"{prefix}_{elements[0].program.name}_{elements[0].name}")
    env = HwEnv(pipeline, phv_in)
    built = []
    for e in elements:
        pre = f"{prefix}_{e.program.name}_{e.name}"
        when = Signal(name=f"{pre}_act")
        m.d.comb += when.eq(e.when.hw(env).any())
        v, p, lat = build_element(m, e, pipeline, valid_in, phv_in, csr, prefix=pre)
        built.append((e, when, v, p, lat, pre))
    L = max(b[4] for b in built)
    base = max(range(len(built)), key=lambda i: built[i][4])
    _, _, valid_out, base_phv, _, _ = built[base]
    out = _phv_signal(pipeline, f"{prefix}_out")
    m.d.comb += out.eq(base_phv)
    for i, (e, when, _, p, lat, pre) in enumerate(built):
        if i == base:
            continue
        names = pipeline.writes(e)
        if not names:
            continue
        act = when
        for k in range(L):                    # the condition, to the end of the stage
            nw = Signal(name=f"{pre}_act{k}")
            m.d.sync += nw.eq(act)
            act = nw
        vals = [target(pipeline, p, n) for n in names]
        for k in range(L - lat):              # the written fields, to the end of the stage
            nv = [Signal(len(v), name=f"{pre}_w{k}_{j}", reset_less=True)
                  for j, v in enumerate(vals)]
            m.d.sync += [a.eq(b) for a, b in zip(nv, vals)]
            vals = nv
        with m.If(act):
            m.d.comb += [target(pipeline, out, n).eq(v) for n, v in zip(names, vals)]
    return valid_out, out, L
