"""``Compute``: plain assignments, the per-packet logic without state.

Gateware: 1 cycle (the assignments, registered). Runs in ingress and in egress.
"""
from __future__ import annotations

from amaranth.hdl import Signal

from netstor.gateware.kit import HwEnv, apply_sets, phv_signal
from netstor.lang.element import Element

__all__ = ["Compute"]


class Compute(Element):
    """``sets``: a list of :class:`~netstor.lang.Set`, evaluated in parallel (every right-hand
    side sees the PHV as it was before the element)."""
    egress_ok = True

    def __init__(self, name, sets, when=None):
        super().__init__(name, when)
        self.sets = list(sets)

    def reads(self):
        return [s.value for s in self.sets]

    def writes(self):
        return [s.field for s in self.sets]

    def set_items(self):
        return self.sets

    def evaluate(self, model, phv, env):
        model.assign(phv, [(s.field.name, s.value.eval(env)) for s in self.sets])

    def compile(self, cg):
        cg.assign([(s.field.name, s.value) for s in self.sets])

    def elaborate(self, m, pipeline, valid_in, phv_in, csr, *, prefix):
        nxt = phv_signal(pipeline, f"{prefix}_next")
        env = HwEnv(pipeline, phv_in)
        m.d.comb += nxt.eq(phv_in)
        with m.If(self.when.hw(env).any()):
            apply_sets(m, pipeline, self.sets, phv_in, nxt, env)
        valid_out, phv_out = Signal(name=f"{prefix}_valid"), phv_signal(pipeline, f"{prefix}_phv")
        m.d.sync += [valid_out.eq(valid_in), phv_out.eq(nxt)]
        return valid_out, phv_out, 1
