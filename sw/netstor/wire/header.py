"""A header declared once, as its bit list: ``[(field, bits), ...]`` in wire order, network
(big-endian) byte order, every field a whole number of bytes.

From one declaration come the data-plane program's header view (``Program.header(h.fields)``),
the agents' pack/unpack (:meth:`Header.pack`, :meth:`Header.unpack`, :meth:`Header.tuple_class`),
and the scapy layer and Wireshark dissector (:mod:`netstor.wire.registry` takes ``h.fields``,
and for a header with variants ``h.selector`` and ``h.variants``). Dependency-free: the agents
import it without the gateware.

Variants: a header whose layout after a common part depends on one of its fields (NetRS: the
magic field tells a 13-byte request from a 22-byte response) is declared as the common part
plus ``selector`` (that field) and ``variants`` ``[(value, label, [(field, bits), ...])]``
(the fields after the common part, per selector value). :meth:`Header.layout` is the whole
header of one selector value; :meth:`Header.unpack` reads the selector and unpacks the
matching layout.
"""
from __future__ import annotations

import struct
from collections import namedtuple

__all__ = ["Header"]

_FMT = {8: "B", 16: "H", 32: "I", 64: "Q"}


class Header:
    """``Header(name, fields, selector=None, variants=())``.

    ``size``: bytes (of the common part for a header with variants); ``names``: field names;
    ``tuple``: the named tuple :meth:`unpack` returns; ``struct``: the ``struct.Struct`` of the
    layout when every field is 8, 16, 32 or 64 bits (else None), for hot paths.
    """

    def __init__(self, name, fields, *, selector=None, variants=()):
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
        self.struct = None if self._wide else self._struct
        self.size = self._struct.size
        self.names = tuple(names)
        self.tuple = namedtuple(_identifier(name), self.names)
        # variants
        self.selector = selector
        self.variants = tuple((int(v), str(label), tuple((str(n), int(w)) for n, w in tail))
                              for v, label, tail in variants)
        if (selector is None) != (not self.variants):
            raise ValueError(f"header {name}: selector and variants go together")
        self._layouts = {}
        if selector is not None:
            if selector not in self.names:
                raise ValueError(f"header {name}: selector {selector!r} is not a field")
            self._sel = self.names.index(selector)
            by_tail = {}
            for v, label, tail in self.variants:
                if v in self._layouts:
                    raise ValueError(f"header {name}: selector value {v:#x} declared twice")
                lay = by_tail.get(tail)
                if lay is None:
                    lay = by_tail[tail] = Header(f"{name} {label}", self.fields + tail)
                self._layouts[v] = lay

    def __repr__(self):
        return f"Header({self.name!r}, {len(self.fields)} fields, {self.size} B)"

    def layout(self, value):
        """The whole header (common part and tail) of selector value ``value``."""
        try:
            return self._layouts[value]
        except KeyError:
            raise ValueError(f"header {self.name}: no layout for {self.selector} = "
                             f"{value:#x}") from None

    def pack(self, values=None, /, **fields):
        """Bytes of ``values`` (a sequence in field order) or of keyword ``fields`` (missing
        ones 0). A value that does not fit its field, or an unknown field, raises
        ``ValueError`` naming it. A header with variants packs the layout its selector
        value chooses."""
        if values is not None and fields:
            raise TypeError(f"header {self.name}: values or fields, not both")
        if values is None:
            unknown = set(fields) - set(self._all_names())
            if unknown:
                raise ValueError(f"header {self.name}: unknown field(s) {sorted(unknown)}")
            if self.selector is not None:
                return self.layout(fields.get(self.selector, 0)).pack(**fields)
            values = [fields.get(n, 0) for n in self.names]
        elif self.selector is not None:
            values = list(values)
            lay = self.layout(values[self._sel] if len(values) > self._sel else 0)
            return lay.pack(values)
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
        """The fields of the first bytes of ``data`` as a named tuple (:attr:`tuple`; for a
        header with variants, the chosen layout's). Data shorter than the header, or a
        selector value with no layout, raises ``ValueError`` saying which."""
        if len(data) < self.size:
            raise ValueError(f"{len(data)} bytes: shorter than the {self.size}-byte "
                             f"{self.name} header")
        vals = list(self._struct.unpack_from(data))
        for i in self._wide:
            vals[i] = int.from_bytes(vals[i], "big")
        if self.selector is not None:
            return self.layout(vals[self._sel]).unpack(data)
        return self.tuple._make(vals)

    def _all_names(self):
        out = list(self.names)
        for _v, _label, tail in self.variants:
            out += [n for n, _ in tail if n not in out]
        return out

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


def _identifier(name):
    out = "".join(c if c.isalnum() else "_" for c in name)
    return out if out[:1].isalpha() else "H_" + out
