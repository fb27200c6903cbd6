"""The ``Rank`` element (ranking core as a pipeline element) in Verilator against the model.

Builds ``sim/rank_top.py`` (one element, 4 replicas, fed from flat ports) with the XLS
Verilog of the core into build/sim/rank_element/; ``sim/cocotb_rank_element.py`` compares
every output field with the golden model's execution of the same element."""
import pytest

from netstor.sim.harness import elaborate, run_cocotb
from netstor.offloads.netrs import ranking_core as hls
from rank_top import RankTop


@pytest.mark.cocotb
def test_rank_element():
    top = RankTop()
    text = elaborate(top, "rank_top")
    _, info = hls.ranking_verilog()
    assert top.latency == info["latency"] + 1
    run_cocotb("rank_element", "cocotb_rank_element", toplevel="rank_top", verilog_text=text,
               sources=[hls.ROOT / info["verilog"]],
               extra_env={"RANK_ELEM_LATENCY": str(top.latency), "RANK_ELEM_N": "1500"})


def test_rank_element_in_the_model_agrees_with_the_reference():
    """The model's Rank element is the reference function on the element's inputs (availability
    limited to the declared replicas, unused slots empty)."""
    import random
    from netstor.offloads.netrs import ranking as R
    from netstor.model.dataplane import DataplaneModel
    from rank_top import make_rank_pipeline, INPUTS, NREP
    pl, elem = make_rank_pipeline()
    model = DataplaneModel(pl)
    rng = random.Random(9)
    for _ in range(300):
        v = {k: rng.getrandbits(w) for k, w in INPUTS.items()}
        v["en"] = 1
        phv = {f"t.m.{k}": x for k, x in v.items()}
        phv["t.m.score"] = 0
        model._run([elem], phv)
        reps = [R.Replica(v[f"q{i}"], v[f"os{i}"], v[f"t{i}"], v[f"r{i}"]) for i in range(NREP)]
        exp = R.rank(v["algo"], v["avail"] & 0xF, reps, n=v["n"], rr=v["rr"], rnd=v["rnd"])
        assert (phv["t.m.found"], phv["t.m.index"], phv["t.m.score"]) == exp
    # when the element is disabled, the fields keep their values
    phv = {f"t.m.{k}": 1 for k in INPUTS}
    phv.update({"t.m.en": 0, "t.m.index": 5, "t.m.score": 77})
    model._run([elem], phv)
    assert phv["t.m.index"] == 5 and phv["t.m.score"] == 77
