"""Random streams, deterministic per seed, independent per name.

Two kinds, both derived from ``(seed, name)`` alone (never from the order in which streams are
created or used), so a scheme that adds a host, a clone or an extra draw does not move any
other stream:

* :meth:`Streams.generator` -- a ``numpy.random.Generator`` (PCG64 seeded from a
  ``SeedSequence`` of the seed and a hash of the name), for draws that are consumed in an order
  no scheme can change: a client's arrival times, group picks and keys, drawn in request order.
* :meth:`Streams.counter` -- a counter-based stream: ``uniform(index)`` is a pure function of
  ``(seed, name, index)`` (SplitMix64 of the stream key plus ``index`` golden-ratio steps, the
  generator Java's SplittableRandom and xoshiro's seeding use). For draws indexed by what a
  request *is* rather than when an event happens: a server's service time for request ``r`` is
  ``service(uniform(r * K + server))``, the same in every scheme that sends ``r`` there, whatever
  order requests reach the server in. That is what makes the schemes of one figure see common
  random numbers.
"""
from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["Streams", "CounterStream", "splitmix64"]

_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_INV53 = 1.0 / (1 << 53)


def splitmix64(x):
    """The SplitMix64 output function (a bijection of 64-bit integers)."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _M64
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _M64
    return x ^ (x >> 31)


def _name_key(seed, name):
    h = hashlib.blake2b(f"{int(seed)}\0{name}".encode(), digest_size=16).digest()
    return int.from_bytes(h[:8], "little"), int.from_bytes(h[8:], "little")


class CounterStream:
    """``uniform(i)`` in [0, 1) (53 bits) and ``bits(i)`` (64 bits), pure functions of the
    stream's key and ``i >= 0``."""

    __slots__ = ("key", "name")

    def __init__(self, key, name=""):
        self.key, self.name = key & _M64, name

    def bits(self, i):
        x = (self.key + (i + 1) * _GOLDEN) & _M64
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _M64
        x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _M64
        return x ^ (x >> 31)

    def uniform(self, i):
        x = (self.key + (i + 1) * _GOLDEN) & _M64
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _M64
        x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _M64
        return ((x ^ (x >> 31)) >> 11) * _INV53

    def uniforms(self, start, n):
        """``[uniform(i) for i in range(start, start + n)]`` as a numpy array (vectorised)."""
        i = np.arange(start + 1, start + n + 1, dtype=np.uint64)
        with np.errstate(over="ignore"):
            x = np.uint64(self.key) + i * np.uint64(_GOLDEN)
            x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            x = x ^ (x >> np.uint64(31))
        return (x >> np.uint64(11)).astype(np.float64) * _INV53


class Streams:
    """The named streams of one run (``seed``: any int)."""

    def __init__(self, seed):
        self.seed = int(seed)

    def generator(self, name) -> np.random.Generator:
        """A fresh numpy Generator for ``name`` (the same draws every time it is asked for)."""
        a, b = _name_key(self.seed, name)
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence([a, b])))

    def counter(self, name) -> CounterStream:
        a, _ = _name_key(self.seed, name)
        return CounterStream(a, name)
