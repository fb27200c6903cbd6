"""Program descriptions: what a data-plane program declares, and nothing about how it is built.

A :class:`Program` is the netstor equivalent of a P4 program. It declares

* its storage header (``header``), recognised by UDP destination port (a run-time register
  whose reset value is ``udp_port``);
* metadata fields of its own (``meta``);
* its register banks (``bank``), the state its register ops update;
* an ordered list of **elements**, executed one after the other on every packet. The kinds
  (``Table``, ``RegisterOp``, ``Hash``, ``Compute``, ``Rank``, ...) are plug-ins, one module
  each in :mod:`netstor.elements`, all implementing :class:`netstor.lang.element.Element`.

  Every element has a ``when`` condition (an expression over the PHV); when it is false the
  element does nothing. Actions and computes are lists of ``Set(field, expr)`` evaluated in
  parallel (every right-hand side sees the PHV as it was before the element).

* egress elements (kinds whose ``egress_ok`` is set: tables and computes), run once per copy of the packet with
  ``meta.egress_port`` and ``meta.rid`` set for that copy.

The gateware (``netstor.gateware``) elaborates these descriptions into pipeline stages; the
golden model (``netstor.model``) executes them on Python integers. Both use the expression
language of :mod:`netstor.lang.expr`, so the logic is written once.
"""

from __future__ import annotations

import zlib

from .expr import Expr, Const, Field, Param, Old, as_expr
from .phv import Phv, PhvField, APP_BYTES

__all__ = ["Program", "Action", "Set", "RegisterBank", "Pipeline", "hash_crc32", "F"]


def hash_crc32(value, width_bits, seed=0):
    """The hash every netstor hash unit computes: CRC-32 (IEEE 802.3, as zlib) of the value's
    big-endian bytes (``ceil(width_bits/8)`` of them) preceded by one ``seed`` byte."""
    nbytes = (width_bits + 7) // 8
    return zlib.crc32(bytes([seed & 0xFF]) + int(value).to_bytes(nbytes, "big"))


class Set:
    """``field <- expr`` (value truncated to the field's width)."""

    def __init__(self, field, value):
        if not isinstance(field, Field):
            raise TypeError(f"Set() target must be a PHV field, got {field!r}")
        self.field, self.value = field, as_expr(value, field.width)

    def __repr__(self):
        return f"Set({self.field.name}, ...)"


def action_id(table, actions, name):
    """Id of action ``name`` in a table's ``actions`` (1..n in declaration order; 0 = none)."""
    for i, a in enumerate(actions):
        if a.name == name:
            return i + 1
    raise KeyError(f"table {table} has no action {name!r} (it has {[a.name for a in actions]})")


class Action:
    """A named action with typed parameters. ``body(params)`` returns a list of ``Set``; it
    gets a namespace whose attributes are the parameters as ``Param`` expressions."""

    def __init__(self, name, params=None, body=None):
        self.name = name
        self.params = dict(params or {})
        for p, w in self.params.items():
            if not (isinstance(w, int) and w > 0):
                raise ValueError(f"action {name}: parameter {p} needs a positive width")
        ns = type("Params", (), {p: Param(p, w) for p, w in self.params.items()})()
        self.sets = list(body(ns)) if body else []
        for s in self.sets:
            if not isinstance(s, Set):
                raise TypeError(f"action {name}: body must return Set(...) items, got {s!r}")

    @property
    def param_width(self):
        return sum(self.params.values())

    def pack_params(self, values):
        """Pack ``{name: int}`` into the entry's parameter word (first parameter lowest)."""
        word, shift = 0, 0
        unknown = set(values) - set(self.params)
        if unknown:
            raise KeyError(f"action {self.name} has no parameter(s) {sorted(unknown)}")
        for p, w in self.params.items():
            v = int(values.get(p, 0))
            if v < 0 or v >> w:
                raise ValueError(f"action {self.name}: {p}={v} does not fit in {w} bits")
            word |= v << shift
            shift += w
        return word

    def unpack_params(self, word):
        out, shift = {}, 0
        for p, w in self.params.items():
            out[p] = (word >> shift) & ((1 << w) - 1)
            shift += w
        return out


class RegisterBank:
    """A stateful array of ``depth`` cells of ``width`` bits, updated by one ``RegisterOp``."""

    def __init__(self, name, *, width, depth):
        if width <= 0 or depth <= 0:
            raise ValueError(f"register bank {name}: width and depth must be positive")
        self.name, self.width, self.depth = name, width, depth
        self.program = None

    @property
    def qualname(self):
        return f"{self.program.name}.{self.name}" if self.program else self.name

    @property
    def index_bits(self):
        return max(1, (self.depth - 1).bit_length())


class _Selected(Expr):
    """``meta.hdr_type == program.hdr_type``, resolved once the Pipeline numbered programs."""
    width = 1

    def __init__(self, program):
        self.program = program

    def _ref(self):
        if self.program.hdr_type is None:
            raise ValueError(f"program {self.program.name} has no storage header or is not "
                             "part of a Pipeline yet")
        return Field("meta.hdr_type", 4) == self.program.hdr_type

    def eval(self, env):             # on the model's hot path: no expression tree per call
        if self.program.hdr_type is None:
            self._ref()                  # raises the explanation
        return int(env.field("meta.hdr_type") == self.program.hdr_type)

    def hw(self, env):
        return self._ref().hw(env)

    def py(self, ctx):               # the compiled model knows which program's block it is in
        if self.program.hdr_type is None:
            self._ref()
        return ctx.selected(self.program)

    def refs(self):
        yield Field("meta.hdr_type", 4)

    def __repr__(self):
        return f"selected({self.program.name})"


class _FieldNamespace:
    """``F.ipv4.ttl`` -> ``Field("ipv4.ttl", 8)`` for the platform fields."""

    def __init__(self, phv, prefix=""):
        self._phv, self._prefix = phv, prefix

    def __getattr__(self, attr):
        name = self._prefix + attr
        if name in self._phv.fields:
            return Field(name, self._phv.fields[name].width)
        if any(n.startswith(name + ".") for n in self._phv.fields):
            return _FieldNamespace(self._phv, name + ".")
        raise AttributeError(f"no PHV field {name!r}")


F = _FieldNamespace(Phv())


class Program:
    """One offload (or test) program. See the module docstring."""

    def __init__(self, name, *, udp_port=None):
        if not name.isidentifier():
            raise ValueError(f"program name {name!r} must be an identifier")
        self.name = name
        self.udp_port = udp_port
        self.header_fields = []      # (name, width) in wire order inside the app window
        self.user_meta = []          # PhvField
        self._body = []              # ingress elements in program order (see ``elements``)
        self._tail = []              # the guard's last element, kept after every other one
        self.trusted = None          # the guard's condition (see :meth:`guard`)
        self.egress_elements = []
        self.banks = []
        self.hdr_type = None         # assigned by Pipeline

    # ---- declarations -----------------------------------------------------------------------
    def header(self, fields):
        """Declare the storage header: ``[(name, bits), ...]`` in wire order from the first
        byte after the UDP header. Needs ``udp_port``. Returns ``{name: Field}``."""
        if self.udp_port is None:
            raise ValueError(f"program {self.name}: a storage header needs a udp_port")
        total = sum(w for _, w in fields)
        if total > APP_BYTES * 8 or total % 16:
            raise ValueError(f"program {self.name}: header is {total} bits; it must be a "
                             f"multiple of 16 and at most {APP_BYTES * 8}")
        self.header_fields = list(fields)
        return {n: self.hfield(n) for n, _ in fields}

    @property
    def header_bytes(self):
        return sum(w for _, w in self.header_fields) // 8

    def hfield(self, name):
        for n, w in self.header_fields:
            if n == name:
                return Field(f"{self.name}.{name}", w)
        raise KeyError(f"program {self.name} has no header field {name!r}")

    def meta(self, name, width):
        f = PhvField(f"{self.name}.m.{name}", width, True, doc=f"metadata of {self.name}")
        self.user_meta.append(f)
        return Field(f.name, width)

    def bank(self, name, *, width, depth):
        b = RegisterBank(name, width=width, depth=depth)
        b.program = self
        self.banks.append(b)
        return b

    @property
    def elements(self):
        """The ingress elements in program order (the guard's first element first and its
        last element last, :meth:`guard`)."""
        return self._body + self._tail

    def _own(self, element):
        element.program = self
        if self.udp_port is not None:
            element.when = element.when & self.selected

    def add(self, element):
        """Append an ingress element. A program with a UDP port acts on its own packets only:
        ``selected`` is ANDed into the element's condition (which lets the compiler run the
        elements of two such programs side by side, :meth:`Pipeline.stages`). Once the
        program has a guard (:meth:`guard`), an element that updates register banks
        (:meth:`~netstor.lang.element.Element.banks`) also gets the guard's ``trusted``."""
        self._own(element)
        if self.trusted is not None and element.banks():
            element.when = element.when & self.trusted
        self._body.append(element)
        return element

    def guard(self, first, trusted, last):
        """Make the program's register state writable only by trusted packets.

        ``first`` (an element, run before every other element of the program) decides per
        packet; ``trusted`` (a 1-bit expression over what ``first`` wrote) is ANDed into the
        condition of every element that updates a register bank, those added before and
        after this call, so an untrusted packet reads and writes no bank; ``last`` (run after
        every other element of the program, whatever is added later) disposes of untrusted
        packets (drops them). :func:`netstor.elements.trust.guard` builds the usual one: a
        run-time table of trusted ingress ports and source prefixes, empty (nothing trusted)
        until the configuration fills it. A pipeline built with ``guarded=True`` requires a
        guard on every program that has register banks."""
        if self.trusted is not None:
            raise ValueError(f"program {self.name} already has a guard")
        if first.banks() or last.banks():
            raise ValueError(f"program {self.name}: a guard's own elements update no bank")
        self._own(first)
        self._own(last)
        self.trusted = trusted
        for e in self._body:
            if e.banks():
                e.when = e.when & trusted
        self._body.insert(0, first)
        self._tail = [last]

    def add_egress(self, element):
        """Append an egress element (run once per copy). As in :meth:`add`, a program with a
        UDP port acts on its own packets only: ``selected`` is ANDed into the condition (what
        the golden model assumes; it lets :meth:`Pipeline.egress_stages` put the egress
        elements of two such programs side by side)."""
        if not element.egress_ok:
            raise TypeError(f"{element.kind_name} elements cannot run in egress")
        self._own(element)
        self.egress_elements.append(element)
        return element

    @property
    def selected(self):
        """1 when the parser recognised this program's storage header in the packet."""
        return _Selected(self)

    def header_views(self):
        """``[(dotted name, lo bit inside app, width)]``; app byte 0 is the MSB of ``app``."""
        out, pos = [], 0
        for n, w in self.header_fields:
            out.append((f"{self.name}.{n}", APP_BYTES * 8 - pos - w, w))
            pos += w
        return out


def _exclusive(a, b):
    """Elements of two different programs that both have UDP ports never act on one packet."""
    pa, pb = a.program, b.program
    return (pa is not None and pb is not None and pa is not pb
            and pa.udp_port is not None and pb.udp_port is not None)


def _overlap(xs, ys):
    return any(c == d and lo < hi2 and lo2 < hi for c, lo, hi in xs for d, lo2, hi2 in ys)


class Pipeline:
    """The programs of one bitstream, in order, and the PHV they share."""

    def __init__(self, programs, *, n_ports=2, mcast_groups=16, max_recirc=2, guarded=False):
        self.programs = list(programs)
        if guarded:
            for p in self.programs:
                if p.banks and p.trusted is None:
                    raise ValueError(f"program {p.name} has register banks but no guard "
                                     "(Program.guard): packets could write its state")
        names = [p.name for p in self.programs]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate program names: {names}")
        if len(self.programs) > 14:
            raise ValueError("at most 14 programs (meta.hdr_type is 4 bits, 15 = reserved)")
        self.n_ports = n_ports
        self.mcast_groups = mcast_groups
        self.max_recirc = max_recirc
        if not 1 <= max_recirc <= 7:
            raise ValueError("max_recirc must be 1..7 (meta.recirc_count is 3 bits)")
        self.phv = Phv([f for p in self.programs for f in p.user_meta])
        t = 1
        for p in self.programs:
            p.hdr_type = None
            if p.udp_port is not None:
                p.hdr_type = t
                t += 1
            for name, lo, w in p.header_views():
                self.phv.add_view(name, "app", lo, w)
        seen = set()
        for e in self.elements + self.egress_elements:
            if e.qualname in seen:
                raise ValueError(f"element {e.qualname} declared twice")
            seen.add(e.qualname)
        self._check_fields()

    # inputs: 0..P-1 wire RX, P..2P-1 host TX, 2P recirculation
    # outputs: 0..P-1 wire TX, P..2P-1 host RX; recirculation is a flag, not a port
    @property
    def n_inputs(self):
        return 2 * self.n_ports + 1

    @property
    def n_outputs(self):
        return 2 * self.n_ports

    @property
    def recirc_input(self):
        return 2 * self.n_ports

    def default_egress(self, ingress_port):
        """The path a packet takes when no program decides: wire RX p -> host RX p,
        host TX p -> wire TX p, recirculated -> wire TX 0 (programs always decide these)."""
        P = self.n_ports
        if ingress_port < P:
            return ingress_port + P
        if ingress_port < 2 * P:
            return ingress_port - P
        return 0

    @property
    def elements(self):
        return [e for p in self.programs for e in p.elements]

    @property
    def egress_elements(self):
        return [e for p in self.programs for e in p.egress_elements]

    @property
    def tables(self):
        return [e for e in self.elements + self.egress_elements if e.is_table]

    @property
    def banks(self):
        return [b for p in self.programs for b in p.banks]

    def stages(self):
        """The ingress elements grouped into stages that run side by side (each stage takes
        as long as its slowest element), in order; the result equals running the elements
        one after another in program order (what the golden model does).

        An element goes into the earliest stage after every earlier element it depends on,
        at bit level over the PHV (a view into ``app`` is its bits): it reads bits an earlier
        one writes (read after write) or writes bits it writes (write after write): a later
        stage; it writes bits an earlier one reads (write after read): the same stage at the
        earliest (elements of a stage read the stage's input). Elements of two different
        programs that have UDP ports never depend on each other: each acts on its own
        program's packets only (:meth:`Program.add`), so at most one of them acts on a
        packet; the stage takes each element's writes only when its condition held."""
        return self._group(self.elements)

    def egress_stages(self):
        """The egress elements grouped into stages by the rules of :meth:`stages` (the result
        equals running them one after another in order, as the golden model does per copy):
        egress elements of two programs with UDP ports share a stage (:meth:`Program.add_egress`
        makes each act on its own program's packets only)."""
        return self._group(self.egress_elements)

    def _group(self, elements):
        info = [(e, *self.access(e)) for e in elements]
        stage_of = []
        for i, (e, rd, wr) in enumerate(info):
            st = 0
            for j in range(i):
                d, drd, dwr = info[j]
                if _exclusive(d, e):
                    continue
                if _overlap(rd, dwr) or _overlap(wr, dwr):
                    st = max(st, stage_of[j] + 1)
                elif _overlap(wr, drd):
                    st = max(st, stage_of[j])
            stage_of.append(st)
        out = [[] for _ in range(max(stage_of, default=-1) + 1)]
        for (e, _, _), st in zip(info, stage_of):
            out[st].append(e)
        return out

    def writes(self, e):
        """Names of the PHV fields element ``e`` may write."""
        return list(dict.fromkeys(f.name for f in e.writes()))

    def access(self, e):
        """``(reads, writes)`` of element ``e`` as bit ranges ``{(container, lo, hi)}``."""
        exprs = [e.when] + list(e.reads())
        reads = {self._bits(r.name) for x in exprs for r in x.refs() if isinstance(r, Field)}
        return reads, {self._bits(n) for n in self.writes(e)}

    def _bits(self, name):
        if name in self.phv.fields:
            return (name, 0, self.phv.fields[name].width)
        base, lo, w = self.phv.views[name]
        return (base, lo, lo + w)

    def field_width(self, name):
        if name in self.phv.fields:
            return self.phv.fields[name].width
        return self.phv.views[name][2]

    def _check_fields(self):
        def check_ref(r, where):
            if isinstance(r, Field):
                if r.name not in self.phv.fields and r.name not in self.phv.views:
                    raise ValueError(f"{where}: unknown field {r.name!r}")
                if self.field_width(r.name) != r.width:
                    raise ValueError(f"{where}: field {r.name} width mismatch")

        def check_set(s, where, egress=False):
            check_ref(s.field, where)
            f = self.phv.fields.get(s.field.name)
            if f is not None and not f.writable:
                raise ValueError(f"{where}: field {s.field.name} is read-only")
            for r in s.value.refs():
                check_ref(r, where)

        for e in self.elements + self.egress_elements:
            where = f"element {e.qualname}"
            for x in [e.when] + list(e.reads()):
                for r in x.refs():
                    check_ref(r, where)
            for f in e.writes():
                check_ref(f, where)
            for st in e.set_items():
                check_set(st, where)
            e.check(self)
        for e in self.egress_elements:
            if not e.egress_ok:
                raise ValueError(f"{e.qualname}: a {e.kind_name} element runs in "
                                 "ingress only")
            for f in e.writes():
                if f.name in ("meta.egress_port", "meta.mcast_group", "meta.recirc",
                              "meta.clone"):
                    raise ValueError(f"egress element {e.qualname} cannot set {f.name}")
        ops = {}
        for e in self.elements:
            for b in e.banks():
                if b.qualname in ops:
                    raise ValueError(f"register bank {b.qualname} is used by two ops "
                                     f"({ops[b.qualname]} and {e.qualname}); one RMW "
                                     "per packet per bank")
                ops[b.qualname] = e.qualname
