"""The bench of the offloads not in the default bitstream (netstor.bench.offload_elements; none
of the built-in ones: a toy offload stands in),
without Yosys: which elements it measures, the URAM arithmetic it compares with, the rows
``make bench`` prints."""
from __future__ import annotations

from netstor.bench import offload_elements as oe
from netstor.bench.synth import element_instances
from netstor.offloads import offloads
from netstor.programs import default_pipeline


def test_uram_arithmetic_matches_the_measured_64_bit_bank():
    # register_bank.py measured 29 URAM288 for 128K x 64 with Yosys -uram (no cascade):
    # 32 slices of 4K x 64 = 2,048 bits side by side, in 72-bit URAMs
    assert oe.uram_no_cascade(128 * 1024, 64) == 29
    # NetLR's slot table: 32 x 112 = 3,584 bits -> 50 (Vivado cascades 2 columns x 32)
    assert oe.uram_no_cascade(128 * 1024, 112) == 50
    assert oe.uram_cascade(128 * 1024, 112) == 64
    assert oe.uram_no_cascade(4096, 72) == 1 and oe.uram_no_cascade(4097, 72) == 2


def test_measures_what_each_non_bitstream_offload_adds(tmp_path, monkeypatch):
    """Every built-in offload is in the bitstream (nothing to measure: ``bench`` writes an
    empty result); a toy offload outside it: exactly its program's elements, ingress once and
    egress once per output."""
    from netstor.offloads.testing import NAME, PROGRAM, forget, outside_offload
    assert oe.offload_names() == [] and all(o.bitstream for o in offloads())
    assert oe.bench(tmp_path / "none") == {}
    outside_offload(tmp_path, monkeypatch)
    try:
        names = oe.offload_names()
        assert names == [NAME]
        base = {k for k, _e, _n in element_instances(default_pipeline())}
        pl, els = oe.new_elements(NAME)
        progs = {p.name for p in pl.programs} - {p.name for p in default_pipeline().programs}
        assert progs == {PROGRAM}
        assert els and all(k not in base for k, _e, _n in els)
        # every element of the offload's program, ingress and egress, and nothing else
        want = {f"element:{e.qualname}" for e in pl.elements
                if e.qualname.startswith(PROGRAM + ".")}
        want |= {f"egress:{e.qualname}" for e in pl.egress_elements
                 if e.qualname.startswith(PROGRAM + ".")}
        assert {k for k, _e, _n in els} == want == {f"element:{PROGRAM}.route",
                                                    f"egress:{PROGRAM}.copy"}
        for k, _e, n in els:
            assert n == (pl.n_outputs if k.startswith("egress:") else 1)
    finally:
        monkeypatch.undo()
        forget()


def test_zero_inits_dropped_and_rows():
    v = ("module m;\n  reg [3:0] a [1:0];\n  initial begin\n    a[0] = 4'h0;\n    a[1] = 4'h0;\n"
         "  end\n  reg [3:0] b [0:0];\n  initial begin\n    b[0] = 4'h3;\n  end\nendmodule\n")
    out = oe._drop_zero_inits(v)
    assert "a[0] = " not in out and "b[0] = 4'h3;" in out
    fig = {"LUT": 10, "FF": 20, "BRAM36": 0.0, "URAM": 50, "DSP": 0, "lut_levels": 7}
    full = {"offloads": {"x": {
        "programs": ["p"],
        "elements": {
            "element:p.big": dict(fig, ok=True, instances=1, BRAM36=448.0, URAM=0,
                                  banks=[{"bank": "p.big", "depth": 131072, "width": 112}],
                                  uram_mapping=fig),
            "element:p.a": dict(fig, ok=True, instances=1, URAM=0, lut_levels=5, banks=[]),
            "egress:p.e": dict(fig, ok=True, instances=4, URAM=0, lut_levels=3, banks=[]),
            "element:p.bad": {"ok": False, "error": "boom", "instances": 1}},
        "total_uram": {"LUT": 60, "FF": 120, "BRAM36": 0.0, "URAM": 50, "DSP": 0},
        "deepest": {"element": "element:p.big (-uram)", "lut_levels": 7},
        "failed": ["element:p.bad"]}}}
    rows = oe.rows(full)
    assert rows["p.big 131072x112 -uram"]["URAM"] == 50
    assert rows["p.big 131072x112 bram"]["BRAM36"] == 448.0
    other = rows["p other elements (2, x instances)"]
    assert other["LUT"] == 10 + 4 * 10 and other["lut_levels"] == 5
    assert rows["x total (large banks in URAM)"]["URAM"] == 50
    assert rows["element:p.bad"] == {"ok": False, "error": "boom"}
    line = oe.summary_line(rows)
    assert "p.big 131072x112 -uram: URAM 50" in line and "element:p.bad: failed" in line
