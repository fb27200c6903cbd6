"""A header declared once, as its bit list: ``[(field, bits), ...]`` in wire order, network
(big-endian) byte order, every field a whole number of bytes.

From one declaration come the data-plane program's header view (``Program.header(h.fields)``),
the agents' pack/unpack (:meth:`Header.tuple_class`), and the scapy layer and Wireshark
dissector (:mod:`netstor.wire.registry` takes ``h.fields``). Dependency-free: the agents import
it without the gateware.
"""
from __future__ import annotations

import struct
from collections import namedtuple

__all__ = ["Header"]

_FMT = {8: "B", 16: "H", 32: "I", 64: "Q"}


class Header:
    """``Header(name, fields)``; ``size`` in bytes; ``pack(values)``/``unpack(data)`` between
    bytes and a tuple of ints in field order."""

    def __init__(self, name, fields):
        self.name = name
        self.fields = tuple((str(n), int(w)) for n, w in fields)
        if not self.fields:
            raise ValueError(f"header {name}: no fields")
        names = [n for n, _ in self.fields]
        if len(set(names)) != len(names):
            raise ValueError(f"header {name}: a field name is used twice")
        fmt = "!"
        self._wide = []                 # indexes of fields packed as raw bytes (24, 48 bits...)
        for i, (n, w) in enumerate(self.fields):
            if w <= 0 or w % 8:
                raise ValueError(f"header {name}: field {n} is {w} bits, not whole bytes")
            if w in _FMT:
                fmt += _FMT[w]
            else:
                fmt += f"{w // 8}s"
                self._wide.append(i)
        self._struct = struct.Struct(fmt)
        self.size = self._struct.size
        self.names = tuple(names)

    def __repr__(self):
        return f"Header({self.name!r}, {len(self.fields)} fields, {self.size} B)"

    def pack(self, values):
        """``values`` (a sequence in field order) as bytes; a value that does not fit its
        field raises ``ValueError`` naming it."""
        vals = list(values)
        if len(vals) != len(self.fields):
            raise ValueError(f"header {self.name}: {len(vals)} values for "
                             f"{len(self.fields)} fields")
        for i, ((n, w), v) in enumerate(zip(self.fields, vals)):
            v = int(v)
            if v < 0 or v >> w:
                raise ValueError(f"header {self.name}: {n}={v} does not fit in {w} bits")
            vals[i] = v.to_bytes(w // 8, "big") if i in self._wide else v
        return self._struct.pack(*vals)

    def unpack(self, data):
        """The field values (a tuple) of the first ``size`` bytes of ``data``; shorter data
        raises ``ValueError``."""
        if len(data) < self.size:
            raise ValueError(f"{len(data)} bytes: shorter than the {self.size}-byte "
                             f"{self.name} header")
        vals = list(self._struct.unpack_from(data))
        for i in self._wide:
            vals[i] = int.from_bytes(vals[i], "big")
        return tuple(vals)

    def tuple_class(self, typename, defaults=None):
        """A named tuple class of the fields with ``pack()`` and ``unpack(data)`` (class
        method); ``defaults``: ``{field: value}`` (fields without one default to 0)."""
        header = self
        defaults = dict(defaults or {})
        unknown = set(defaults) - set(self.names)
        if unknown:
            raise ValueError(f"header {self.name}: defaults for unknown fields {sorted(unknown)}")
        base = namedtuple(typename, self.names,
                          defaults=[defaults.get(n, 0) for n in self.names])

        def pack(self):
            return header.pack(self)

        @classmethod
        def unpack(cls, data):
            return cls(*header.unpack(data))

        return type(typename, (base,), {"__slots__": (), "pack": pack, "unpack": unpack,
                                        "HEADER": header})
