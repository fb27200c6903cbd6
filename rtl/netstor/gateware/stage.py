"""Match-action stages as components: the element stages :mod:`.stages` builds, behind PHV
stream ports.

* :class:`Stage`: one ingress stage (:meth:`netstor.lang.Pipeline.stages`), built by
  :func:`.stages.build_stage`.
* :class:`EgressStages`: the egress elements, replicated once per output copy, plus the
  recirculation copy (no egress elements) delayed to the same latency.

Both are fixed-latency and never stall (:func:`~.axis.flow_signature` ports): a PHV entering
in cycle t leaves in cycle t + ``latency``; throughput one PHV per clock per port. They build
their logic at construction, because elements declare their host registers, counters and
memories in ``csr`` while they are built and the control block needs the complete list.
"""

from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .axis import flow_signature
from .csr import MemoryPort
from .stages import build_stage

__all__ = ["Stage", "EgressStages"]


def _phv_stream(pipeline):
    return flow_signature(data.StructLayout(pipeline.phv.layout()))


class Stage(wiring.Component):
    """One ingress stage: the elements of ``elements`` side by side on the same PHV
    (:func:`.stages.build_stage`).

    Ports: ``i``, ``o`` (PHV streams). Latency: ``self.latency`` cycles (the stage's slowest
    element). Throughput: one PHV per clock.
    """

    def __init__(self, pipeline, elements, csr, *, prefix):
        super().__init__({"i": In(_phv_stream(pipeline)), "o": Out(_phv_stream(pipeline))})
        m = Module()
        valid, phv, self.latency = build_stage(m, elements, pipeline, self.i.valid,
                                               self.i.payload, csr, prefix=prefix)
        m.d.comb += [self.o.valid.eq(valid), self.o.payload.eq(phv)]
        self._module = m

    def elaborate(self, platform):
        return self._module


class EgressStages(wiring.Component):
    """The egress elements once per output copy, in the stages of
    :meth:`~netstor.lang.Pipeline.egress_stages` (elements of programs that never act on the same
    packet side by side, :func:`.stages.build_stage`; the same result as running them in order).

    Ports: ``i[q]``, ``o[q]`` for ``q < n_outputs`` (copy ``q``; ``n_copies`` lanes instead
    of ``n_outputs`` when given), and ``i[n_outputs]``, ``o[n_outputs]`` for the recirculation copy, which runs through no element and is only
    delayed. Host access is shared (:class:`_SharedCsr`): copy 0 declares each element's
    memories, the other copies mirror its writes; counters are summed over the copies.

    Latency: ``self.latency`` cycles (the sum of the egress stages' latencies, each its
    slowest element's; the same for every copy, and the recirculation copy's delay).
    Throughput: one PHV per clock per copy.
    """

    def __init__(self, pipeline, csr, *, n_copies=None):
        # n_copies: element lanes (default one per output; the copy lane's data path uses 1)
        n = pipeline.n_outputs if n_copies is None else n_copies
        super().__init__({"i": In(_phv_stream(pipeline)).array(n + 1),
                          "o": Out(_phv_stream(pipeline)).array(n + 1)})
        m = Module()
        E = 0
        shared = _SharedCsr(csr, m)
        for q in range(n):
            shared.q = q
            cv, cp = self.i[q].valid, self.i[q].payload
            lat_q = 0
            for s, elements in enumerate(pipeline.egress_stages()):
                cv, cp, lat = build_stage(m, elements, pipeline, cv, cp, shared,
                                          prefix=f"e{q}_{s}")
                lat_q += lat
            E = lat_q
            m.d.comb += [self.o[q].valid.eq(cv), self.o[q].payload.eq(cp)]
        shared.finish()
        rv, rp = self.i[n].valid, self.i[n].payload
        for k in range(E):
            nv = Signal(name=f"copyr_v{k}")
            np_ = Signal(data.StructLayout(pipeline.phv.layout()), name=f"copyr_phv{k}",
                         reset_less=True)
            m.d.sync += [nv.eq(rv), np_.eq(rp)]
            rv, rp = nv, np_
        m.d.comb += [self.o[n].valid.eq(rv), self.o[n].payload.eq(rp)]
        self.latency = E
        self._module = m

    def elaborate(self, platform):
        return self._module


class _SharedCsr:
    """Egress elements are replicated per output copy. Copy 0 declares the host memories;
    the other copies get mirrors that see the same write requests (one host write updates
    every copy; copy 0 answers reads). Counters are summed over the copies."""

    def __init__(self, csr, m):
        self.csr, self.m, self.q = csr, m, 0
        self.counters = {}

    def memory(self, name, entry_width, depth, doc="", **meta):
        if self.q == 0:
            return self.csr.memory(name, entry_width, depth, doc, **meta)
        main = next(mi.port for mi in self.csr.memories if mi.name == name)
        mirror = MemoryPort(f"{name.replace('.', '__')}_copy{self.q}", entry_width, depth)
        self.m.d.comb += [mirror.req.eq(main.req & main.we), mirror.we.eq(main.we),
                          mirror.addr.eq(main.addr), mirror.wdata.eq(main.wdata)]
        return mirror

    def counter(self, name, inc_width=1, doc=""):
        sig = Signal(inc_width, name=f"{name.replace('.', '__')}_copy{self.q}")
        self.counters.setdefault(name, (inc_width, doc, []))[2].append(sig)
        return sig

    def reg(self, *a, **kw):
        raise TypeError("egress elements cannot declare registers")

    def finish(self):
        for name, (w, doc, sigs) in self.counters.items():
            total = self.csr.counter(name, w + len(sigs).bit_length(), doc=doc)
            self.m.d.comb += total.eq(sum(sigs))
