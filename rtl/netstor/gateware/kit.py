"""Gateware helpers the element kinds (:mod:`netstor.elements`) and the datapath share: the
expression environment over a PHV signal, assignments into a PHV, the CRC-32 hash as XOR
logic, balanced OR trees, PHV registers."""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Signal
from amaranth.lib import data

from netstor.lang.program import hash_crc32

__all__ = ["HwEnv", "target", "apply_sets", "crc_matrix_hw", "or_tree", "phv_signal"]


class HwEnv:
    """Expression environment over a PHV view (see :mod:`netstor.lang.expr`)."""

    def __init__(self, pipeline, phv, params=None, old=None):
        self.pipeline, self.phv, self.params, self._old = pipeline, phv, params or {}, old

    def field(self, name):
        fields = self.pipeline.phv.fields
        if name in fields:
            return self.phv[fields[name].key]
        base, lo, w = self.pipeline.phv.views[name]
        return self.phv[base][lo:lo + w]

    def param(self, name):
        return self.params[name]

    def old(self):
        if self._old is None:
            raise ValueError("Old() used outside a register update")
        return self._old


def target(pipeline, phv, name):
    return HwEnv(pipeline, phv).field(name)


def apply_sets(m, pipeline, sets, src, dst, env):
    """``dst`` gets each ``Set`` of ``sets`` (RHS evaluated in ``env`` over ``src``)."""
    for s in sets:
        t = target(pipeline, dst, s.field.name)
        v = s.value.hw(env)
        m.d.comb += t.eq(v[:len(t)] if len(v) > len(t) else v)


def crc_matrix_hw(value, width, seed=0):
    """``hash_crc32(value, width, seed)`` as XOR logic (the CRC is affine in the input bits for
    a fixed length, so each output bit is the XOR of a fixed subset of input bits, plus a
    constant)."""
    c0 = hash_crc32(0, width, seed)
    cols = [hash_crc32(1 << i, width, seed) ^ c0 for i in range(width)]
    bits = []
    for o in range(32):
        terms = [value[i] for i in range(width) if (cols[i] >> o) & 1]
        b = Const((c0 >> o) & 1, 1)
        for t in terms:
            b = b ^ t
        bits.append(b)
    return Cat(*bits)


def or_tree(values):
    """OR of ``values`` as a balanced tree (depth log2(n), not n)."""
    values = list(values)
    while len(values) > 1:
        values = [values[i] | values[i + 1] if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


def phv_signal(pipeline, name):
    """A PHV-shaped Signal. ``reset_less``: a PHV is data (its ``valid`` beside it is the
    control that resets), so the registers built from it carry no reset."""
    return Signal(data.StructLayout(pipeline.phv.layout()), name=name, reset_less=True)
