"""H3 hashes (the H3 family of Carter and Wegman, 1979): a ``kw``-bit key maps to an
``sbits``-bit slot through a random GF(2) matrix; bit ``j`` of the slot is the parity of
``key & M(index, j)``. In gateware each slot bit is an XOR tree over the key bits its mask
selects (one LUT6 level per ~6 bits: a 32-bit key, ~16 bits per mask, is 2 levels; 128 bits
is 3).

Several hashes drawn from the family (``index`` 0, 1, ...: the ways of an exact table, the banks
of a hashed LPM table) are independent: a pair of distinct keys collides in hash ``i`` with
probability ``2**-sbits``, independently across ``i``. A CRC with a per-way seed is not: the
seed only XORs a constant into the CRC (it is affine in the key), so two keys that collide in
one way collide in every way.

The matrices are fixed, so the gateware, the golden and compiled models and the driver compute
the same slots: ``M(index, j)`` is the ``kw``-bit integer whose 64-bit chunk ``c`` (key bits
``64c .. 64c + 63``) is ``splitmix64(c * 2**32 + index * 2**16 + j)`` (splitmix64: Steele, Lea
and Flood's finaliser, constants 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB);
for keys of at most 64 bits ``M(index, j) = splitmix64(index * 2**16 + j) mod 2**kw``.
"""
from __future__ import annotations

import functools

from amaranth.hdl import Cat, Const

__all__ = ["h3_masks", "h3_slot", "h3_hw", "H3Slots"]

_M64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


@functools.lru_cache(maxsize=None)
def h3_masks(index, kw, sbits, low_identity=False):
    """The ``sbits`` key masks ``M(index, j)`` of hash ``index`` on ``kw``-bit keys.
    ``low_identity``: mask ``j``'s low ``sbits`` bits are replaced by bit ``j`` alone (the
    matrix is ``[I | R]``: slot = the key's low ``sbits`` bits XOR a random linear hash of
    the others), so keys that differ only in their low ``sbits`` bits (ids 0, 1, 2, ...)
    never collide, in any way, and a run of ``depth`` of them fills a way exactly."""
    if not 0 <= index < 1 << 16 or not 0 <= sbits <= 1 << 16:
        raise ValueError("h3_masks: index and sbits must be below 2**16")
    out = []
    for j in range(sbits):
        mk = 0
        for c in range((kw + 63) // 64):
            mk |= splitmix64(c << 32 | index << 16 | j) << (64 * c)
        if low_identity:
            mk = mk & ~((1 << sbits) - 1) | 1 << j
        out.append(mk & ((1 << kw) - 1))
    return tuple(out)


def h3_slot(value, index, kw, sbits, low_identity=False):
    """Slot of ``value`` (``kw`` bits) under hash ``index``: bit ``j`` = parity of
    ``value & M(index, j)``."""
    s = 0
    for j, mk in enumerate(h3_masks(index, kw, sbits, low_identity)):
        s |= ((value & mk).bit_count() & 1) << j
    return s


def _xor_tree(bits):
    if not bits:
        return Const(0, 1)
    while len(bits) > 1:
        bits = [bits[i] ^ bits[i + 1] if i + 1 < len(bits) else bits[i]
                for i in range(0, len(bits), 2)]
    return bits[0]


def h3_hw(value, index, kw, sbits, low_identity=False):
    """:func:`h3_slot` as logic: ``sbits`` balanced XOR trees over the bits of ``value`` (an
    Amaranth value of ``kw`` bits) that each mask selects."""
    return Cat(*[_xor_tree([value[i] for i in range(kw) if mk >> i & 1])
                 for mk in h3_masks(index, kw, sbits, low_identity)])


class H3Slots:
    """Fast :func:`h3_slot` of hashes ``0 .. n - 1`` at once (the model and the driver look up
    many keys): the hash is linear, so the packed slots of a key are the XOR of one table entry
    per key byte. ``H3Slots(kw, sbits, n)(key)`` -> ``(slot_0, ..., slot_{n-1})``."""

    def __init__(self, kw, sbits, n, low_identity=False):
        self.kw, self.sbits, self.n = kw, sbits, n
        masks = [h3_masks(i, kw, sbits, low_identity) for i in range(n)]
        cols = []
        for b in range(kw):
            c = 0
            for i in range(n):
                for j, mk in enumerate(masks[i]):
                    c |= (mk >> b & 1) << (i * sbits + j)
            cols.append(c)
        self.tables = []
        for base in range(0, kw, 8):
            t = [0] * 256
            for v in range(1, 256):
                low = (v & -v).bit_length() - 1
                t[v] = t[v & (v - 1)] ^ (cols[base + low] if base + low < kw else 0)
            self.tables.append(t)
        self._fields = [(i * sbits, (1 << sbits) - 1) for i in range(n)]

    def packed(self, key):
        x = 0
        for t in self.tables:
            x ^= t[key & 0xFF]
            key >>= 8
        return x

    def __call__(self, key):
        x = self.packed(key)
        return tuple(x >> sh & m for sh, m in self._fields)
