"""The element protocol: what the language, the golden model and the gateware ask of an
element, whatever its kind.

A program is a list of elements. Each *kind* of element (table, register op, hash, compute,
rank, ... see :mod:`netstor.elements`) is one module that subclasses :class:`Element` and says,
in one place:

* **what it reads and writes** (:meth:`Element.reads`, :meth:`Element.writes`, :meth:`Element.set_items`): the stage
  scheduler (:meth:`netstor.lang.Pipeline.stages`) and the field checks work from these alone;
* **how the golden model runs it** (:meth:`Element.model_memories`,
  :meth:`Element.model_counters`, :meth:`Element.evaluate`), on the model's integers;
* **how the compiled model runs it** (:meth:`Element.compile`): straight-line Python the
  compiled model (:mod:`netstor.model.compiled`) puts into its generated pass function; the
  default runs :meth:`Element.evaluate` there, so a kind without it works, only slower;
* **how the gateware builds it** (:meth:`Element.elaborate`): a fixed-latency section that
  takes one PHV per clock, plus any Verilog it instantiates (:meth:`Element.extra_verilog`);
* what the host schema says about it (:meth:`Element.schema`, tables only) and how the
  synthesis benchmark files and describes it (:attr:`Element.bench_key`,
  :attr:`Element.bench_label`).

The language, the model and the gateware call these methods and never ask which kind an
element is, so a new kind (a payload engine, say) is one new module and nothing else.
"""
from __future__ import annotations

from .expr import Const, as_expr

__all__ = ["Element"]


class Element:
    """Base of every element kind. ``when`` (an expression; default: always) gates it: when
    false the element writes nothing and changes no state."""

    #: may run in the egress part of the pipeline (once per copy of a packet)
    egress_ok = False
    #: a match table the host fills (tables have entry memories, a schema, hit/miss counters)
    is_table = False
    #: set by :meth:`elaborate` of a kind that may need a cycle without packets (a register
    #: bank's host access): a 1-bit Signal that pulses for one cycle when it does; the data
    #: path answers each pulse with an ingress bubble (``IngressArbiter.hold``)
    slot_request = None
    #: the element may rewrite the packet's payload (bytes beyond the parser's window, e.g. a
    #: GF(2^8) engine): the models hand it the frame (``model.frame`` in :meth:`evaluate`,
    #: the ``frame`` local in :meth:`compile`, rebound to the new bytes) and keep it per copy
    #: in egress
    rewrites_payload = False

    def __init__(self, name, when=None):
        if not str(name).isidentifier():
            raise ValueError(f"element name {name!r} must be an identifier")
        self.name = name
        self.when = as_expr(when) if when is not None else Const(1, 1)
        self.program = None

    @property
    def qualname(self):
        return f"{self.program.name}.{self.name}" if self.program else self.name

    @property
    def kind_name(self):
        """The kind's name in the host schema (``Table``, ``RegisterOp``, ...)."""
        return type(self).__name__

    @property
    def bench_key(self):
        """The key the synthesis benchmark files this element under (one block per key)."""
        return type(self).__name__.lower()

    @property
    def bench_label(self):
        """How the synthesis benchmark describes the block it builds from this element."""
        return f"{self.kind_name} {self.qualname}"

    # ---- language ------------------------------------------------------------------------------
    def reads(self):
        """The expressions the element evaluates besides ``when`` (their field references are
        what it reads)."""
        return []

    def writes(self):
        """The PHV fields (``Field`` expressions) the element may write."""
        return []

    def set_items(self):
        """The ``Set`` items (assignments) whose targets must be writable PHV fields and whose
        values must fit them (checked when the :class:`~netstor.lang.Pipeline` is built)."""
        return []

    def banks(self):
        """Register banks the element updates (one read-modify-write per bank and packet)."""
        return []

    def check(self, pipeline):
        """Kind-specific checks once the pipeline is assembled; raise ``ValueError``."""

    def schema(self, pipeline):
        """This element's entry in the host schema's ``tables`` (tables only)."""
        raise TypeError(f"{self.qualname} is not a table")

    # ---- golden model --------------------------------------------------------------------------
    def model_memories(self):
        """``[(name, depth, width, reset)]``: the model memories the element owns (its control
        plane state, addressed like the hardware's)."""
        return []

    def model_counters(self):
        """Names of the counters the element increments."""
        return []

    def evaluate(self, model, phv, env):
        """Run the element on one packet in the golden model (``when`` already held): read
        ``env`` (fields, see :class:`netstor.model.dataplane.DataplaneModel`), write with
        ``model.assign(phv, [(field name, value)])``, state in ``model.memory(name).words``,
        counters with ``model.count(name)``."""
        raise NotImplementedError(f"{type(self).__name__}.evaluate")

    # ---- compiled model ------------------------------------------------------------------------
    def compile(self, cg):
        """Emit Python source that does what :meth:`evaluate` does, into the compiled model's
        pass function (:class:`netstor.model.compiled.CompiledModel`). It runs inside the
        element's ``if <when>:`` (the generator emits that). ``cg`` (a
        :class:`netstor.model.compiled.Codegen`) gives:

        * ``cg.expr(e)`` / ``cg.cond(e)``: source of an :class:`~netstor.lang.Expr`'s value /
          truth (:meth:`netstor.lang.Expr.py`); inside ``with cg.scope(params={name: src},
          old=src):`` ``Param`` and ``Old`` read those sources;
        * ``cg.emit(line)``, ``with cg.block("if ...:"):`` (indented lines), ``cg.tmp(hint)``
          (a fresh local name), ``cg.const(obj, hint)`` (a global of the generated module bound
          to ``obj``: functions, tables, caches);
        * ``cg.words(memory)``: the name of a memory's live cell list (the very list
          ``model.memory(memory).words`` is, which host writes change in place: never copy
          it); ``cg.count(counter, amount="1")``; ``cg.on_write(memory, fn)``: ``fn()`` runs
          whenever the host writes that memory (to invalidate a lookup cache);
        * ``cg.assign([(field, value)])``: parallel assignment like ``model.assign``, a value
          being an ``Expr`` or ``(source, width or None)``;
        * ``cg.evaluate(self)``: the fallback below, for a part of a kind that has no code.

        The default is that fallback: it packs the PHV (kept in local variables) into a dict,
        calls :meth:`evaluate` with the model itself and unpacks the fields the element writes.
        Nothing else changes, so a new kind is correct without ``compile``, only slower."""
        cg.evaluate(self)

    # ---- gateware ------------------------------------------------------------------------------
    def elaborate(self, m, pipeline, valid_in, phv_in, csr, *, prefix):
        """Build the element into Amaranth module ``m`` (helpers: :mod:`netstor.gateware.kit`):
        one PHV per clock in (``valid_in``, ``phv_in``), never stalling; control-plane state
        through ``csr`` (:class:`netstor.gateware.csr.CsrBuilder`). Returns
        ``(valid_out, phv_out, latency in cycles)``."""
        raise NotImplementedError(f"{type(self).__name__}.elaborate")

    def extra_verilog(self):
        """``{file name: Verilog text}`` of modules the elaborated element instantiates."""
        return {}
