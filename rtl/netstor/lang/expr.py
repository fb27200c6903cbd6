"""A small expression language for per-packet logic, executable in two ways.

Every expression has a fixed unsigned width and two meanings that must agree bit for bit:

* ``eval(env)`` computes a Python ``int`` (used by the golden model);
* ``hw(env)`` builds an Amaranth value (used to elaborate the gateware);
* ``py(ctx)`` writes Python source (a string) that computes what ``eval`` computes, for the
  compiled model (:mod:`netstor.model.compiled`): the string is an expression over the local
  variables ``ctx`` names (``ctx.field(name)``, ``ctx.param(name)``, ``ctx.old()``, and
  ``ctx.selected(program)`` for a program's ``selected`` condition). ``py_cond(ctx)`` is the
  same value for a truth test only (1-bit logic may become ``and``/``or``/``not``). Every
  operand a ``py`` string reads is already in its expression's range (fields and parameters
  are stored truncated), so only ``+``, ``-``, ``<<`` and slices mask. Comparisons give Python
  ``bool`` values (equal to the ints 0 and 1 in every later operation). An expression class
  without ``py`` falls back to its ``eval`` through ``ctx.fallback(expr)``.

Semantics (both backends), in the style of P4's ``bit<W>``:

* All values are unsigned. A result is always truncated to the expression's width.
* ``a + b``, ``a - b``, ``a & b``, ``a | b``, ``a ^ b``: width ``max(wa, wb)``, modular.
* ``~a``: width ``wa``. ``a << n`` / ``a >> n`` (``n`` a Python int): width ``wa``.
* ``a == b``, ``!=``, ``<``, ``<=``, ``>``, ``>=``: width 1.
* ``a[lo:hi]``: bits ``lo..hi-1``; ``Cat(a, b, ...)``: ``a`` in the low bits.
* ``Mux(c, a, b)``: ``a`` if ``c`` is non-zero, else ``b``; width ``max(wa, wb)``.
* ``Const(v, w)``: ``v`` must fit in ``w`` bits (checked, never silently truncated).

The environment maps references to values: ``Field`` (a PHV field, by dotted name),
``Param`` (an action parameter, by name) and ``Old`` (the old value of a register cell inside a
register update). Backends supply an ``env`` object with ``field(name)``, ``param(name)`` and
``old()``.
"""

from __future__ import annotations

__all__ = ["Expr", "Const", "Field", "Param", "Old", "Mux", "Cat", "as_expr"]


def _mask(width):
    return (1 << width) - 1


def _fit(value, width):
    """An Amaranth value of exactly ``width`` bits: zero-extended or truncated."""
    from amaranth.hdl import Cat as HCat, Const as HConst
    v = value.as_unsigned()
    if len(v) < width:
        v = HCat(v, HConst(0, width - len(v)))
    return v[:width]


class Expr:
    width: int

    # ---- construction helpers -------------------------------------------------------------
    def _bin(self, other, op):
        return _BinOp(op, self, as_expr(other, self.width))

    def _rbin(self, other, op):
        return _BinOp(op, as_expr(other, self.width), self)

    def __add__(self, o):  return self._bin(o, "+")
    def __radd__(self, o): return self._rbin(o, "+")
    def __sub__(self, o):  return self._bin(o, "-")
    def __rsub__(self, o): return self._rbin(o, "-")
    def __and__(self, o):  return self._bin(o, "&")
    def __rand__(self, o): return self._rbin(o, "&")
    def __or__(self, o):   return self._bin(o, "|")
    def __ror__(self, o):  return self._rbin(o, "|")
    def __xor__(self, o):  return self._bin(o, "^")
    def __rxor__(self, o): return self._rbin(o, "^")
    def __eq__(self, o):   return _CmpOp("==", self, as_expr(o, self.width))
    def __ne__(self, o):   return _CmpOp("!=", self, as_expr(o, self.width))
    def __lt__(self, o):   return _CmpOp("<", self, as_expr(o, self.width))
    def __le__(self, o):   return _CmpOp("<=", self, as_expr(o, self.width))
    def __gt__(self, o):   return _CmpOp(">", self, as_expr(o, self.width))
    def __ge__(self, o):   return _CmpOp(">=", self, as_expr(o, self.width))
    def __invert__(self):  return _Invert(self)

    def __lshift__(self, n):
        return _Shift("<<", self, int(n))

    def __rshift__(self, n):
        return _Shift(">>", self, int(n))

    def __getitem__(self, key):
        if isinstance(key, int):
            key = slice(key, key + 1)
        if not isinstance(key, slice) or key.step is not None:
            raise TypeError("expressions can be sliced with [lo:hi] or indexed with an int")
        lo = 0 if key.start is None else key.start
        hi = self.width if key.stop is None else key.stop
        if not 0 <= lo < hi <= self.width:
            raise ValueError(f"slice [{lo}:{hi}] is outside a {self.width}-bit expression")
        return _Slice(self, lo, hi)

    def __bool__(self):
        raise TypeError("an Expr has no Python truth value; use Mux() or a `when=` condition")

    __hash__ = object.__hash__

    # ---- backends -------------------------------------------------------------------------
    def eval(self, env) -> int:
        raise NotImplementedError

    def hw(self, env):
        raise NotImplementedError

    def py(self, ctx) -> str:
        """Python source computing :meth:`eval` (see the module doc). Default: ``eval`` of
        this expression on the values the generated code has (slow, but any subclass works)."""
        return ctx.fallback(self)

    def py_cond(self, ctx) -> str:
        """Python source whose truth value is ``eval(env) != 0``."""
        return self.py(ctx)

    def refs(self):
        """Yield every leaf reference (Field, Param, Old) in this expression."""
        yield from ()


def _hexlit(v):
    return str(v) if v < 1 << 16 else hex(v)


def _is_true(src):
    return src in ("1", "True")


def as_expr(value, width_hint=32):
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool):
        return Const(int(value), 1)
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"constants are unsigned; got {value}")
        return Const(value, max(value.bit_length(), 1))
    raise TypeError(f"cannot use {value!r} as an expression")


class Const(Expr):
    def __init__(self, value, width=None):
        value = int(value)
        if value < 0:
            raise ValueError(f"constants are unsigned; got {value}")
        if width is None:
            width = max(value.bit_length(), 1)
        if value >> width:
            raise ValueError(f"constant {value} does not fit in {width} bits")
        self.value, self.width = value, width

    def eval(self, env):
        return self.value

    def hw(self, env):
        from amaranth.hdl import Const as HConst
        return HConst(self.value, self.width)

    def py(self, ctx):
        return _hexlit(self.value)

    def __repr__(self):
        return f"Const({self.value}, {self.width})"


class Field(Expr):
    """A PHV field by dotted name (``ipv4.ttl``, ``meta.egress_port``). Width from the PHV."""

    def __init__(self, name, width):
        self.name, self.width = name, width

    def eval(self, env):
        return env.field(self.name)

    def hw(self, env):
        return env.field(self.name)

    def py(self, ctx):
        return ctx.field(self.name)

    def refs(self):
        yield self

    def __repr__(self):
        return f"Field({self.name!r})"


class Param(Expr):
    """An action parameter (a value stored in the matched table entry)."""

    def __init__(self, name, width):
        self.name, self.width = name, width

    def eval(self, env):
        return env.param(self.name)

    def hw(self, env):
        return env.param(self.name)

    def py(self, ctx):
        return ctx.param(self.name)

    def refs(self):
        yield self

    def __repr__(self):
        return f"Param({self.name!r})"


class Old(Expr):
    """The value a register cell held before this packet's update."""

    def __init__(self, width):
        self.width = width

    def eval(self, env):
        return env.old()

    def hw(self, env):
        return env.old()

    def py(self, ctx):
        return ctx.old()

    def refs(self):
        yield self

    def __repr__(self):
        return "Old()"


class _BinOp(Expr):
    def __init__(self, op, a, b):
        self.op, self.a, self.b = op, a, b
        self.width = max(a.width, b.width)

    def eval(self, env):
        a, b = self.a.eval(env), self.b.eval(env)
        r = {"+": a + b, "-": a - b, "&": a & b, "|": a | b, "^": a ^ b}[self.op]
        return r & _mask(self.width)

    def hw(self, env):
        w = self.width
        a, b = self.a.hw(env).as_unsigned(), self.b.hw(env).as_unsigned()
        if self.op == "+":
            r = a + b
        elif self.op == "-":
            r = a - b
        elif self.op == "&":
            r = a & b
        elif self.op == "|":
            r = a | b
        else:
            r = a ^ b
        return _fit(r, w)

    def py(self, ctx):
        a, b = self.a.py(ctx), self.b.py(ctx)
        if self.op in "+-":
            return f"(({a} {self.op} {b}) & {_hexlit(_mask(self.width))})"
        if self.width == 1 and self.op in "&|":
            return self._logic(a, b)
        return f"({a} {self.op} {b})"       # operands in range: so is the result

    def py_cond(self, ctx):
        if self.width == 1 and self.op in "&|":
            return self._logic(self.a.py_cond(ctx), self.b.py_cond(ctx))
        return self.py(ctx)

    def _logic(self, a, b):
        # 1-bit operands (0/1 or bool): ``and``/``or`` return one of them, which is the
        # value of ``&``/``|`` on 0/1, and they skip the second operand when they can
        if self.op == "&":
            if _is_true(a):
                return b
            if _is_true(b):
                return a
            return f"({a} and {b})"
        return f"({a} or {b})"

    def __repr__(self):
        return f"({self.a!r} {self.op} {self.b!r})"

    def refs(self):
        yield from self.a.refs()
        yield from self.b.refs()


class _CmpOp(Expr):
    width = 1

    def __init__(self, op, a, b):
        self.op, self.a, self.b = op, a, b

    def eval(self, env):
        a, b = self.a.eval(env), self.b.eval(env)
        return int({"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b,
                    ">": a > b, ">=": a >= b}[self.op])

    def hw(self, env):
        a, b = self.a.hw(env).as_unsigned(), self.b.hw(env).as_unsigned()
        return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b,
                ">": a > b, ">=": a >= b}[self.op]

    def py(self, ctx):
        return f"({self.a.py(ctx)} {self.op} {self.b.py(ctx)})"

    def __repr__(self):
        return f"({self.a!r} {self.op} {self.b!r})"

    def refs(self):
        yield from self.a.refs()
        yield from self.b.refs()


class _Invert(Expr):
    def __init__(self, a):
        self.a, self.width = a, a.width

    def eval(self, env):
        return ~self.a.eval(env) & _mask(self.width)

    def hw(self, env):
        return ~_fit(self.a.hw(env), self.width)

    def py(self, ctx):
        return f"({self.a.py(ctx)} ^ {_hexlit(_mask(self.width))})"

    def py_cond(self, ctx):
        if self.width == 1:
            return f"(not {self.a.py_cond(ctx)})"
        return self.py(ctx)

    def __repr__(self):
        return f"~{self.a!r}"

    def refs(self):
        yield from self.a.refs()


class _Shift(Expr):
    def __init__(self, op, a, n):
        if n < 0:
            raise ValueError("shift amounts are non-negative")
        self.op, self.a, self.n, self.width = op, a, n, a.width

    def eval(self, env):
        v = self.a.eval(env)
        return ((v << self.n) if self.op == "<<" else (v >> self.n)) & _mask(self.width)

    def hw(self, env):
        v = _fit(self.a.hw(env), self.width)
        r = v.shift_left(self.n) if self.op == "<<" else v.shift_right(self.n)
        return _fit(r, self.width)

    def py(self, ctx):
        a = self.a.py(ctx)
        if self.n == 0:
            return a
        if self.op == ">>":
            return f"({a} >> {self.n})"
        if self.n >= self.width:
            return "0"
        return f"(({a} << {self.n}) & {_hexlit(_mask(self.width))})"

    def __repr__(self):
        return f"({self.a!r} {self.op} {self.n})"

    def refs(self):
        yield from self.a.refs()


class _Slice(Expr):
    def __init__(self, a, lo, hi):
        self.a, self.lo, self.hi, self.width = a, lo, hi, hi - lo

    def eval(self, env):
        return (self.a.eval(env) >> self.lo) & _mask(self.width)

    def hw(self, env):
        return _fit(self.a.hw(env), self.a.width)[self.lo:self.hi]

    def py(self, ctx):
        a = self.a.py(ctx)
        shifted = f"({a} >> {self.lo})" if self.lo else a
        if self.hi >= self.a.width:          # the operand has no bits above hi
            return shifted
        return f"({shifted} & {_hexlit(_mask(self.width))})"

    def __repr__(self):
        return f"{self.a!r}[{self.lo}:{self.hi}]"

    def refs(self):
        yield from self.a.refs()


class _Cat(Expr):
    def __init__(self, parts):
        self.parts = [as_expr(p) for p in parts]
        if not self.parts:
            raise ValueError("Cat() needs at least one part")
        self.width = sum(p.width for p in self.parts)

    def eval(self, env):
        v, shift = 0, 0
        for p in self.parts:
            v |= (p.eval(env) & _mask(p.width)) << shift
            shift += p.width
        return v

    def hw(self, env):
        from amaranth.hdl import Cat as HCat
        return HCat(*[_fit(p.hw(env), p.width) for p in self.parts])

    def py(self, ctx):
        terms, shift = [], 0
        for p in self.parts:
            if not (isinstance(p, Const) and p.value == 0):
                src = p.py(ctx)
                terms.append(f"({src} << {shift})" if shift else src)
            shift += p.width
        if not terms:
            return "0"
        return terms[0] if len(terms) == 1 else "(" + " | ".join(terms) + ")"

    def __repr__(self):
        return "Cat(" + ", ".join(map(repr, self.parts)) + ")"

    def refs(self):
        for p in self.parts:
            yield from p.refs()


class _Mux(Expr):
    def __init__(self, c, a, b):
        self.c, self.a, self.b = as_expr(c), as_expr(a), as_expr(b)
        self.width = max(self.a.width, self.b.width)

    def eval(self, env):
        return self.a.eval(env) if self.c.eval(env) else self.b.eval(env)

    def hw(self, env):
        from amaranth.hdl import Mux as HMux
        return HMux(self.c.hw(env).any(), _fit(self.a.hw(env), self.width),
                    _fit(self.b.hw(env), self.width))

    def py(self, ctx):
        return f"({self.a.py(ctx)} if {self.c.py_cond(ctx)} else {self.b.py(ctx)})"

    def __repr__(self):
        return f"Mux({self.c!r}, {self.a!r}, {self.b!r})"

    def refs(self):
        yield from self.c.refs()
        yield from self.a.refs()
        yield from self.b.refs()


def Mux(c, a, b):
    return _Mux(c, a, b)


def Cat(*parts):
    return _Cat(parts)
