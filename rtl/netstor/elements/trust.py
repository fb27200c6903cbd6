"""The trust guard of a program: which packets may update its register state.

:func:`guard` gives a program (:meth:`netstor.lang.Program.guard`) two elements built from
the ordinary kinds, so the golden model, the compiled model and the gateware all get the
guard from the program description:

* ``<prog>.trust``: a ternary table (TCAM, ``size`` entries) looked up by every first pass of
  the program's packets, key ``[<prog>.report, meta.ingress_port, ipv4.src]`` (first part
  lowest; ``report`` is 1 for the packets the program declares as *reports* -- replies,
  responses, monitor data: what a server or another switch tells the device -- and 0 for the
  others, its *requests*). Its one action ``trusted`` sets ``<prog>.m.trusted``; no default
  action: a miss leaves the packet untrusted and counts in ``<prog>.trust.miss``.
  **Empty at reset: nothing is trusted**, so the unconfigured data plane lets no packet of
  the program write state. The configuration (section ``programs:``, :mod:`netstor.config`)
  writes one entry per trusted (ingress port, source prefix) for reports and one per
  request port (default: any port) for requests.
* ``<prog>.untrusted``: the program's last element: drops an untrusted packet
  (``meta.drop``), after every element that might set ``meta.drop`` back to 0.

A recirculated pass (``meta.recirc_count != 0``) is trusted: only the data plane puts packets
on the recirculation path, and their first pass was trusted or dropped. Every element of the
program that updates a register bank runs only when the packet is trusted (the program ANDs
``trusted`` into its condition), so ``<prog>.trust.miss`` counts exactly the packets of the
program that were dropped for coming from an untrusted port or source.
"""
from __future__ import annotations

from netstor.lang import Action, Const, Expr, F, Set
from netstor.lang.expr import as_expr

from .compute import Compute
from .table import Table

__all__ = ["guard", "TRUST_SIZE"]

#: entries of a program's trust table (TCAM in flip-flops)
TRUST_SIZE = 8


class _Named(Expr):
    """An expression under a name (the host schema shows table key parts by name)."""

    def __init__(self, name, inner):
        self.name, self.inner, self.width = name, inner, inner.width

    def eval(self, env):
        return self.inner.eval(env)

    def hw(self, env):
        return self.inner.hw(env)

    def py(self, ctx):
        return self.inner.py(ctx)

    def py_cond(self, ctx):
        return self.inner.py_cond(ctx)

    def refs(self):
        return self.inner.refs()

    def __repr__(self):
        return self.name


def guard(program, reports=None, *, size=TRUST_SIZE):
    """Install the trust guard on ``program`` (call it before or after adding elements).
    ``reports``: a 1-bit expression, true for the packets that report state (default: every
    packet of the program is one). Returns ``trusted`` (the 1-bit condition)."""
    report = Const(1, 1) if reports is None else as_expr(reports)
    if report.width != 1:
        raise ValueError(f"program {program.name}: reports must be a 1-bit expression")
    ok = program.meta("trusted", 1)
    first = F.meta.recirc_count == 0
    table = Table("trust", kind="ternary",
                  key=[_Named(f"{program.name}.report", report), F.meta.ingress_port,
                       F.ipv4.src],
                  size=size, actions=[Action("trusted", {}, lambda a: [Set(ok, 1)])],
                  when=first)
    trusted = ok | ~first
    drop = Compute("untrusted", [Set(F.meta.drop, 1)], when=~trusted)
    program.guard(table, trusted, drop)
    return trusted
