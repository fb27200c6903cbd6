"""The registry of every header netstor puts on the wire (after a UDP header).

Each entry is built from the header's single source of truth (``netstor.proto.FIELDS`` for
the storage protocol, a :class:`netstor.lang.Program`'s ``header_fields`` for the built-in
programs, an offload's :class:`netstor.wire.header.Header` through its ``wire`` hook); the
scapy layers (:mod:`netstor.wire.layers`) and the generated Wireshark Lua dissector
(:mod:`netstor.wire.dissector`) are derived from it. Adding a header is one call::

    register("netstor_myoffload", MY_UDP_PORT, HEADER.fields, enums={"op": {1: "REQ"}})

(in the offload's ``wire(register)`` hook), or :func:`register_program` for a program. After
adding one, regenerate the committed dissector: ``python -m netstor.wire.dissector`` (a test
fails while ``netstor.lua`` is stale).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["HeaderSpec", "HEADERS", "register", "make_spec", "register_program", "program_op_enum"]

#: widths a field may have when it starts on a byte boundary and covers whole bytes
_ALIGNED = {8, 16, 24, 32, 40, 48, 56, 64}


@dataclass(frozen=True)
class HeaderSpec:
    """One header right after UDP. See :func:`register` for the meaning of each attribute."""
    name: str
    udp_port: int
    fields: tuple            # ((name, bits), ...) in wire order
    length_field: str | None = None
    enums: dict = field(default_factory=dict)      # {field: {int: str}}
    constants: dict = field(default_factory=dict)  # {field: expected value}
    hex_fields: tuple = ()
    info: tuple = ()
    reply_sport: bool = False
    trailer: str = "data"
    title: str = ""
    selector: str | None = None     # variants: the field whose value picks the layout
    variants: tuple = ()            # ((value, label, ((name, bits), ...)), ...)
    inner: str | None = None        # registered header that dissects the trailer

    def variant(self, value):
        """``(label, extra fields)`` of selector ``value``; ``(None, ())`` when unknown."""
        for v, label, extra in self.variants:
            if v == value:
                return label, extra
        return None, ()

    @property
    def all_fields(self):
        """Every field of every variant (first definition of a name wins), common first."""
        out = dict(self.fields)
        for _, _, extra in self.variants:
            for n, w in extra:
                out.setdefault(n, w)
        return tuple(out.items())

    @property
    def nbytes(self):
        return sum(w for _, w in self.fields) // 8

    @property
    def layer_name(self):
        """The scapy class name: ``netstor_prim`` -> ``NetstorPrim``."""
        return "".join(p[:1].upper() + p[1:] for p in self.name.split("_"))

    def layout(self):
        """``[(name, bit offset, width)]`` from the first header bit."""
        out, pos = [], 0
        for n, w in self.fields:
            out.append((n, pos, w))
            pos += w
        return out

    def width(self, name):
        return dict(self.fields)[name]


#: name -> HeaderSpec, in registration order
HEADERS: dict[str, HeaderSpec] = {}


def register(name, udp_port, fields, **kw):
    """Register a header (arguments: see :func:`make_spec`) and return its HeaderSpec."""
    if name in HEADERS:
        raise ValueError(f"header {name!r} registered twice")
    for other in HEADERS.values():
        if other.udp_port == udp_port:
            raise ValueError(f"header {name}: UDP port {udp_port} already used by {other.name}")
    spec = make_spec(name, udp_port, fields, **kw)
    HEADERS[name] = spec
    return spec


def make_spec(name, udp_port, fields, *, length_field=None, enums=None, constants=None,
              hex_fields=None, info=None, reply_sport=False, trailer="data", title=None,
              selector=None, variants=(), inner=None):
    """A checked :class:`HeaderSpec` (not registered).

    * ``name``: the protocol name (Wireshark protocol and filter prefix, e.g. ``netstor`` gives
      ``netstor.op``); an identifier.
    * ``udp_port``: recognised on UDP destination port ``udp_port`` (and source port too when
      ``reply_sport``: replies come from the server's port). Wireshark: the ``udp.port`` table.
    * ``fields``: ``[(name, bits), ...]`` in wire order, big-endian, MSB first, total a whole
      number of bytes.
    * ``length_field``: the field that counts the bytes after the header (they are the
      ``trailer`` field); ``None`` when everything after the header is opaque data.
    * ``enums``: ``{field: {value: text}}`` value strings (op, status...).
    * ``constants``: ``{field: value}`` a well-formed header always carries (scapy default;
      the dissector flags other values as malformed).
    * ``hex_fields``: fields shown in hex (default: the constants).
    * ``info``: fields summarised in the Info column (default: the enum fields).
    * ``selector`` and ``variants``: a header whose layout depends on a field of the common
      part ``fields`` (NetRS: the magic field): ``variants`` is ``[(value, label, [(name,
      bits), ...]), ...]``, the fields that follow the common part when ``selector`` has
      that value; the label names the packet kind (Info column, scapy summary). An unknown
      selector value leaves only the common part (the dissector flags it). Variant fields
      must be byte-aligned; no length field.
    * ``inner``: a registered header (by name) that dissects the bytes after this one.
    """
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise ValueError(f"header name {name!r} must be a lower-case identifier")
    fields = tuple((str(n), int(w)) for n, w in fields)
    names = [n for n, _ in fields]
    if not fields or len(set(names)) != len(names):
        raise ValueError(f"header {name}: empty or duplicate field names {names}")
    if trailer in names:
        raise ValueError(f"header {name}: trailer name {trailer!r} clashes with a field")
    if not isinstance(udp_port, int) or not 0 < udp_port < 65536:
        raise ValueError(f"header {name}: bad UDP port {udp_port!r}")
    pos = 0
    for n, w in fields:
        if w <= 0:
            raise ValueError(f"header {name}: field {n} has width {w}")
        if pos % 8 or w % 8:        # bit-packed: must sit within a 1..4-byte container
            if (pos % 8 + w + 7) // 8 > 4:
                raise ValueError(f"header {name}: bit field {n} ({w} bits at bit {pos}) "
                                 "spans more than 4 bytes")
        elif w not in _ALIGNED:
            raise ValueError(f"header {name}: field {n} is {w} bits (max 64)")
        pos += w
    if pos % 8:
        raise ValueError(f"header {name}: {pos} bits is not a whole number of bytes")
    variants = tuple((int(v), str(label), tuple((str(n), int(w)) for n, w in extra))
                     for v, label, extra in variants)
    if variants:
        if selector not in names:
            raise ValueError(f"header {name}: variants need a selector field of the common "
                             f"part, got {selector!r}")
        if length_field is not None:
            raise ValueError(f"header {name}: variants cannot have a length field")
        if len({v for v, _, _ in variants}) != len(variants):
            raise ValueError(f"header {name}: a selector value is used twice")
        for v, label, extra in variants:
            vn = [n for n, _ in extra]
            if set(vn) & set(names) or len(set(vn)) != len(vn) or trailer in vn:
                raise ValueError(f"header {name}: variant {label!r} repeats a field name")
            if pos % 8 or any(w % 8 or w not in _ALIGNED for _, w in extra):
                raise ValueError(f"header {name}: variant {label!r} fields must be whole "
                                 "bytes")
        names += [n for _, _, extra in variants for n, _ in extra if n not in names]
    elif selector is not None:
        raise ValueError(f"header {name}: a selector without variants")
    enums = {k: dict(v) for k, v in (enums or {}).items()}
    constants = dict(constants or {})
    for what, keys in (("length_field", [length_field] if length_field else []),
                       ("enums", enums), ("constants", constants),
                       ("hex_fields", hex_fields or ()), ("info", info or ())):
        for k in keys:
            if k not in names:
                raise ValueError(f"header {name}: {what} names unknown field {k!r}")
    if length_field is not None:
        lay = {n: (p, w) for n, p, w in HeaderSpec(name, udp_port, fields).layout()}
        lp, lw = lay.get(length_field, (0, 0))
        if lp % 8 or lw not in (8, 16, 24, 32):
            raise ValueError(f"header {name}: length field {length_field!r} must be a "
                             "byte-aligned field of 8..32 bits")
    return HeaderSpec(name=name, udp_port=udp_port, fields=fields, length_field=length_field,
                      enums=enums, constants=constants,
                      hex_fields=tuple(hex_fields if hex_fields is not None else constants),
                      info=tuple(info if info is not None else enums),
                      reply_sport=reply_sport, trailer=trailer,
                      title=title or f"netstor {name} header", selector=selector,
                      variants=variants, inner=inner)


def program_op_enum(module, prefix="OP_"):
    """``{value: NAME}`` from a program module's ``OP_NAME = value`` constants."""
    return {v: k[len(prefix):] for k, v in vars(module).items()
            if k.startswith(prefix) and isinstance(v, int)}


def register_program(program, *, name=None, **kw):
    """Register a :class:`netstor.lang.Program`'s storage header (its ``header_fields`` and
    ``udp_port``) as ``netstor_<program name>``."""
    if not program.header_fields:
        raise ValueError(f"program {program.name} declares no header")
    return register(name or f"netstor_{program.name}", program.udp_port,
                    program.header_fields, **kw)


# ---- the headers netstor defines ---------------------------------------------------------------

def _builtin():
    from netstor import proto
    from netstor.programs import primitives

    ops = dict(proto.Op.NAMES)
    ops.update({v | proto.REPLY: f"{n} reply" for v, n in proto.Op.NAMES.items()})
    register("netstor", proto.STORAGE_UDP_PORT, proto.FIELDS, length_field="value_len",
             enums={"op": ops, "status": proto.Status.NAMES},
             constants={"magic": proto.MAGIC, "ver": proto.VERSION},
             hex_fields=("magic", "op", "flags", "key"),
             info=("op", "status", "req_id", "key"), reply_sport=True, trailer="value",
             title="netstor storage protocol")
    register_program(primitives.make_primitives(), enums={"op": program_op_enum(primitives)},
                     hex_fields=("flags", "tag"), info=("op", "tag"),
                     title="netstor primitives test program")
    from netstor.offloads import offloads
    for off in offloads():                  # each offload declares its own headers
        declare = off.hook("wire")
        if declare is not None:
            declare(register)
        elif off.header is not None:        # or just names its Header: the plain layer
            h = off.hook("header")
            register(f"netstor_{off.name}", off.udp_port, h.fields, selector=h.selector,
                     variants=h.variants, title=off.title)

_builtin()
