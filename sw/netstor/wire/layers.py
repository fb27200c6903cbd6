"""scapy layers for every registered netstor header (see :mod:`netstor.wire.registry`).

``Netstor`` (the storage protocol, UDP port 7430 either way) and ``NetstorPrim`` (the
primitives test program, UDP destination port 0x5EED) are generated from their registry
entries, as is a layer for any header registered later (:func:`layer_for`)::

    from scapy.all import Ether, IP, UDP
    from netstor.wire.layers import Netstor
    pkt = Ether() / IP() / UDP(sport=40000) / Netstor(op=2, key=7) / b"value"
    # dport 7430 and value_len 5 are filled in on build

For a header with a length field, the bytes after the header are the payload (``Raw``) up to
that length (a build leaves the field ``None`` to compute it); any further bytes are
``Padding``.
"""

from __future__ import annotations

from scapy.fields import (ConditionalField, BitEnumField, BitField, ByteField, EnumField, IntField, LongField,
                          ShortField, XBitField, XByteField, XIntField, XLongField,
                          XShortField, ByteEnumField)
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_bottom_up, bind_layers

from .registry import HEADERS, HeaderSpec

__all__ = ["layer_for", "make_layer", "LAYERS"]

_PLAIN = {8: (ByteField, XByteField), 16: (ShortField, XShortField),
          32: (IntField, XIntField), 64: (LongField, XLongField)}
_FMT = {8: "B", 16: "H", 32: "I", 64: "Q"}


def _field(spec: HeaderSpec, name, pos, width):
    default = spec.constants.get(name, None if name == spec.length_field else 0)
    enum = spec.enums.get(name)
    hexa = name in spec.hex_fields
    if pos % 8 == 0 and width in _PLAIN:
        if enum is not None:
            return (ByteEnumField(name, default, enum) if width == 8
                    else EnumField(name, default, enum, fmt="!" + _FMT[width]))
        return _PLAIN[width][hexa](name, default)
    if enum is not None:
        return BitEnumField(name, default, width, enum)
    return (XBitField if hexa else BitField)(name, default, width)


def make_layer(spec: HeaderSpec, *, bind=True) -> type:
    """A scapy Packet class for ``spec``; ``bind``: bind it to UDP by port (globally)."""
    fields_desc = [_field(spec, n, pos, w) for n, pos, w in spec.layout()]
    ns = {"name": spec.title, "fields_desc": fields_desc, "spec": spec,
          "__module__": __name__}
    if spec.variants:
        # one conditional field per (layout, field): present when the selector has one of the
        # values of that layout
        sel = spec.selector
        common = sum(w for _, w in spec.fields)
        layouts = {}
        for v, _label, extra in spec.variants:
            layouts.setdefault(extra, []).append(v)
        for extra, values in layouts.items():
            pos = common
            for n, w in extra:
                fields_desc.append(ConditionalField(
                    _field(spec, n, pos, w),
                    lambda pkt, _vals=frozenset(values): getattr(pkt, sel) in _vals))
                pos += w
        first = spec.variants[0][0]
        fields_desc[[f.name for f in fields_desc].index(sel)].default = first

        def mysummary(self):
            label = spec.variant(getattr(self, sel))[0] or f"unknown {sel}"
            return f"{spec.name} {label}"
        ns["mysummary"] = mysummary
    if spec.inner:
        def guess_payload_class(self, payload, _inner=spec.inner):
            return layer_for(_inner) if payload else Packet.guess_payload_class(self, payload)
        ns["guess_payload_class"] = guess_payload_class
    if spec.length_field:
        lname = spec.length_field
        lpos = next(pos for n, pos, _ in spec.layout() if n == lname)
        lwidth = spec.width(lname)
        if lpos % 8 or lwidth % 8:
            raise ValueError(f"{spec.name}: the length field must be byte-aligned")
        off, nb = lpos // 8, lwidth // 8

        def post_build(self, p, pay):
            if getattr(self, lname) is None:
                p = p[:off] + len(pay).to_bytes(nb, "big") + p[off + nb:]
            return p + pay

        def extract_padding(self, s):
            n = getattr(self, lname)
            if n is None:
                return s, b""
            return s[:n], s[n:]

        ns["post_build"] = post_build
        ns["extract_padding"] = extract_padding
    cls = type(spec.layer_name, (Packet,), ns)
    if not bind:
        return cls
    if spec.reply_sport:
        bind_bottom_up(UDP, cls, sport=spec.udp_port)
    bind_layers(UDP, cls, dport=spec.udp_port)     # last: building UDP()/X() sets dport
    return cls


#: registry name -> scapy Packet class
LAYERS: dict[str, type] = {}


def layer_for(name_or_spec) -> type:
    """The scapy class of a registered header (made and bound to UDP on first use)."""
    spec = name_or_spec if isinstance(name_or_spec, HeaderSpec) else HEADERS[name_or_spec]
    if spec.name not in LAYERS:
        LAYERS[spec.name] = make_layer(spec)
    return LAYERS[spec.name]


for _spec in list(HEADERS.values()):
    globals()[_spec.layer_name] = layer_for(_spec)
    __all__.append(_spec.layer_name)
