"""Smoke test of ``make bench`` (``netstor.bench``): the pipeline benchmark for two sizes with a
few frames on the shared whole-core build, and one small synthesis (the ingress arbiter).
Checks the shape and sanity of the JSON, not the performance figures themselves."""
import json

import pytest


@pytest.mark.cocotb
@pytest.mark.xdist_group("core2")
def test_bench_smoke(tmp_path, monkeypatch):
    # the bench's Yosys runs at nice 19 by default (make bench beside interactive work); in
    # the suite, beside two busy workers, that starved it (~1 % of a core): normal priority
    monkeypatch.setenv("NETSTOR_BENCH_NICE", "0")
    from netstor.bench import run_pipeline, run_synth, pipeline as pb
    from netstor.bench.report import summary_text

    pipe = run_pipeline(tmp_path, sizes=[64, 256], cases=["l3", "mixed"], budget_beats=48,
                        min_frames=6, max_frames=24, testcase="bench_smoke")
    on_disk = json.loads((tmp_path / "pipeline.json").read_text())
    assert on_disk["runs"] == pipe["runs"]
    assert not pipe["errors"], pipe["errors"]
    L = pipe["header_path_latency"]["datapath_latency_cycles"]
    assert L == pipe["header_path_latency"]["schema_latency_cycles"] and L > 0
    # the header path's parts (from the data path's constants) add up to its latency
    assert sum(pipe["latency_model"]["L_parts"].values()) == L
    assert {(r["case"], r["size_requested"]) for r in pipe["runs"]} == {
        ("l3", 64), ("l3", 256), ("mixed", 64), ("mixed", 256)}
    for r in pipe["runs"]:
        for f in r["flows"]:
            assert f["received"] > 0
            assert 0 < f["pkts_per_clock"] <= 1
            assert 0 < f["bytes_per_clock"] <= 64
            assert 0 < f["latency_min"] <= f["latency_max"]
            assert f["latency_min"] > L
            for clk in ("sync_250", "direct_322"):
                assert f["line_rate"][clk]["mpps"] > 0
        if r["case"] == "l3":
            f = r["flows"][0]
            assert f["dropped"] == 0 and f["received"] == r["frames_per_input"]
            # one input, no back-pressure: the latency is the documented constant
            assert f["latency_min"] == f["latency_max"] == f["latency_predicted"]
        else:
            assert 0 < r["aggregate"]["beats_per_clock"] <= 1

    core = pb.generate_core()[0]
    syn = run_synth(tmp_path, core, only=["arbiter"], whole_core=False, standalone=False)
    arb = syn["blocks"]["arbiter"]
    assert arb["ok"], arb.get("error")
    assert arb["LUT"] > 0 and arb["FF"] > 0 and arb["depth"]["lut_levels"] > 0
    assert 0 < arb["share_of_xcu250_pct"]["LUT"] < 1
    assert arb["peak_rss_mib"] > 0 and arb["instances_in_core"] == 1
    assert syn["total"]["source"] == "sum_of_blocks"
    on_disk = json.loads((tmp_path / "synth.json").read_text())
    assert on_disk["max_depth"]["block"] == "arbiter"
    assert on_disk["max_depth"]["lut_levels"] == arb["depth"]["lut_levels"]
    text = summary_text(pipe, syn, {"git": "test", "seconds": 1})
    assert "Header path" in text and "arbiter" in text and "LUT lv" in text
    assert len(text.splitlines()) < 40
