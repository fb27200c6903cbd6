"""``Hash``: CRC-32 of chosen fields into a field.

Gateware: 1 cycle (the CRC as an XOR matrix, affine over GF(2), registered).
"""
from __future__ import annotations

import zlib

from amaranth.hdl import Cat, Signal

from netstor.gateware.kit import HwEnv, crc_matrix_hw, phv_signal, target
from netstor.lang.element import Element
from netstor.lang.expr import Cat as ECat, as_expr
from netstor.lang.program import hash_crc32

__all__ = ["Hash"]


class Hash(Element):
    """``dst <- CRC-32(Cat(fields)) [0:dst.width]`` (see :func:`netstor.lang.hash_crc32`:
    the fields' concatenation, first field lowest, as big-endian bytes after a ``seed`` byte)."""

    def __init__(self, name, dst, fields, *, seed=0, when=None):
        super().__init__(name, when)
        self.dst = dst
        self.fields = [as_expr(f) for f in fields]
        self.seed = seed

    @property
    def in_width(self):
        return sum(f.width for f in self.fields)

    def reads(self):
        return list(self.fields)

    def writes(self):
        return [self.dst]

    def set_items(self):
        return []           # the destination may be any field the hash fits (checked by refs)

    def evaluate(self, model, phv, env):
        cat, shift = 0, 0
        for f in self.fields:
            cat |= (f.eval(env) & ((1 << f.width) - 1)) << shift
            shift += f.width
        h = hash_crc32(cat, self.in_width, self.seed) % (1 << self.dst.width)
        model.assign(phv, [(self.dst.name, h)])

    def compile(self, cg):
        # hash_crc32: CRC-32 of the seed byte, then the value's big-endian bytes (zlib's
        # running CRC continues from the seed byte's)
        cat = cg.tmp("cat")
        cg.emit(f"{cat} = {cg.expr(ECat(*self.fields))}")
        crc = cg.const(zlib.crc32, "crc32")
        start = zlib.crc32(bytes([self.seed & 0xFF]))
        nbytes = (self.in_width + 7) // 8
        cg.assign([(self.dst.name, (f"{crc}({cat}.to_bytes({nbytes}, 'big'), {start}) & "
                                    f"{hex((1 << self.dst.width) - 1)}", self.dst.width))])

    def elaborate(self, m, pipeline, valid_in, phv_in, csr, *, prefix):
        env = HwEnv(pipeline, phv_in)
        value = Cat(*[f.hw(env)[:f.width] for f in self.fields])
        crc = crc_matrix_hw(value, self.in_width, self.seed)
        nxt = phv_signal(pipeline, f"{prefix}_next")
        m.d.comb += nxt.eq(phv_in)
        with m.If(self.when.hw(env).any()):
            t = target(pipeline, nxt, self.dst.name)
            m.d.comb += t.eq(crc[:len(t)])
        valid_out, phv_out = Signal(name=f"{prefix}_valid"), phv_signal(pipeline, f"{prefix}_phv")
        m.d.sync += [valid_out.eq(valid_in), phv_out.eq(nxt)]
        return valid_out, phv_out, 1
