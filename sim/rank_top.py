"""A one-element pipeline around a ``Rank`` element, for its cocotb test and the model check.

``make_rank_pipeline()`` builds program ``t`` whose metadata carries every input of the
element (4 replicas: the other 4 slots are unavailable by construction), a pass-through
``tag`` and the ``en`` bit the element's ``when`` reads; ``RankTop`` drives those fields from
flat ports and brings the element's output PHV fields out, exactly as the data path wires an
element (``netstor.gateware.stages.build_element``)."""
from amaranth.hdl import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from netstor.elements import Rank
from netstor.lang import Program, Pipeline
from netstor.offloads.netrs.ranking_core import XLS_RANKING

NREP = 4
INPUTS = {"algo": 2, "avail": 8, "n": 8, "rr": 3, "rnd": 16, "tag": 16, "en": 1,
          "found": 1, "index": 3}
INPUTS.update({f"{k}{i}": w for i in range(NREP) for k, w in Rank.WIDTHS.items()})
OUTPUTS = {"found": 1, "index": 3, "score": 53, "tag": 16}


def make_rank_pipeline():
    p = Program("t")
    f = {k: p.meta(k, w) for k, w in {**INPUTS, "score": 53}.items()}
    e = Rank("rank", core=XLS_RANKING, algo=f["algo"], avail=f["avail"], n=f["n"], rr=f["rr"], rnd=f["rnd"],
             replicas=[tuple(f[f"{k}{i}"] for k in Rank.WIDTHS) for i in range(NREP)],
             found=f["found"], index=f["index"], score=f["score"], when=f["en"])
    p.add(e)
    return Pipeline([p]), e


class RankTop(wiring.Component):
    def __init__(self):
        self.pl, self.elem = make_rank_pipeline()
        members = {"valid_in": In(1), "valid_out": Out(1)}
        members.update({f"i_{k}": In(w) for k, w in INPUTS.items()})
        members.update({f"o_{k}": Out(w) for k, w in OUTPUTS.items()})
        super().__init__(members)

    def elaborate(self, platform):
        from netstor.gateware.stages import build_element
        m = Module()
        pl = self.pl
        phv_in = Signal(data.StructLayout(pl.phv.layout()))
        key = lambda n: pl.phv.fields[f"t.m.{n}"].key          # noqa: E731
        m.d.comb += [phv_in[key(k)].eq(getattr(self, f"i_{k}")) for k in INPUTS]
        v, phv, self.latency = build_element(m, self.elem, pl, self.valid_in, phv_in, None,
                                             prefix="rank")
        m.d.comb += [self.valid_out.eq(v)]
        m.d.comb += [getattr(self, f"o_{k}").eq(phv[key(k)]) for k in OUTPUTS]
        return m
