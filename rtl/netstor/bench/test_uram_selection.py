"""Which blocks of the per-block bench get a second Yosys run with ``-uram`` (a register bank
of at least 256 Kbit), and where ``run_synth`` puts that figure (``blocks[key]["uram"]``, beside
the block RAM one), on a small hand-built pipeline with Yosys replaced by a recorder: no
synthesis runs here."""
import json

from netstor import bench
from netstor.bench import synth
from netstor.bench.report import synth_lines
from netstor.elements import RegisterOp
from netstor.lang.program import Pipeline, Program
from netstor.programs import default_pipeline

THRESHOLD = 256 * 1024


def _pipeline():
    """Four register banks around the threshold: 4096 x 64 is exactly 256 Kbit (selected),
    4096 x 63 one column short, 8192 x 32 selected by depth, 64 x 8 small. Two small banks in
    one element do not add up to a large one (each bank counts on its own)."""
    p = Program("t")
    for name, depth, width in (("at", 4096, 64), ("below", 4096, 63), ("deep", 8192, 32),
                               ("small", 64, 8)):
        idx = p.meta(f"{name}_idx", (depth - 1).bit_length())
        amt = p.meta(f"{name}_amt", width)
        res = p.meta(f"{name}_res", width)
        p.add(RegisterOp.add(name, p.bank(name, width=width, depth=depth), idx, amt,
                             result=res, returns="new"))
    return Pipeline([p])


def test_selection_rule_on_a_hand_built_pipeline():
    pl = _pipeline()
    assert synth.URAM_MIN_BITS == THRESHOLD
    sel = synth.uram_selection(pl)
    assert sel == {"element:t.at": [("t.at", 4096, 64)],
                   "element:t.deep": [("t.deep", 8192, 32)]}
    # the keys are the per-block bench's element keys (the block RAM run's entries)
    keys = [k for k, _e, _n in synth.element_instances(pl)]
    assert list(sel) == [k for k in keys if k in sel]
    # a lower threshold takes the bank one column short too, never the 512-bit one
    assert set(synth.uram_selection(pl, min_bits=4096 * 63)) == {
        "element:t.at", "element:t.below", "element:t.deep"}


def test_default_core_selects_netlr_slot_table_only():
    sel = synth.uram_selection(default_pipeline())
    assert sel == {"element:nl.slots": [("nl.slots", 128 * 1024, 112)]}
    # the count the report compares with (Yosys' URAM model: 4K x 72, no cascade)
    assert synth.uram_no_cascade(128 * 1024, 112) == 50
    assert synth.uram_cascade(128 * 1024, 112) == 64


def test_uram_script_and_verilog():
    ys = synth.uram_script("top")
    assert ys == synth.script("top").replace("-noclkbuf\n", "-noclkbuf -uram\n") != ys.replace(
        " -uram", "")
    v = ("module m;\n  reg [3:0] a [1:0];\n  initial begin\n    a[0] = 4'h0;\n    a[1] = 4'h0;\n"
         "  end\n  reg [3:0] b [0:0];\n  initial begin\n    b[0] = 4'h3;\n  end\n"
         "  reg [31:0] c [1:0];\n  initial begin\n    c[0] = 32'd0;\n    c[1] = 32'd0;\n  end\n"
         "  reg [31:0] d [1:0];\n  initial begin\n    d[0] = 32'd0;\n    d[1] = 32'd10;\n"
         "  end\nendmodule\n")
    out, n = synth.drop_zero_inits(v)
    assert n == 2 and "a[0] = " not in out and "c[0] = " not in out
    assert "b[0] = 4'h3;" in out and "d[0] = 32'd0;" in out and "d[1] = 32'd10;" in out
    assert synth.uram_verilog(v) == out


class _Core:
    P = 2

    def __init__(self, pl):
        self.pipeline = pl


def _fake_result(top, uram):
    figs = {"LUT": 300 if uram else 400, "LUT_logic": 200, "LUT_as_memory": 0,
            "LUT_as_srl": 100, "FF": 50, "RAMB36": 0 if uram else 8, "RAMB18": 0,
            "BRAM36_equiv": 0.0 if uram else 8.0, "URAM": 4 if uram else 0, "DSP": 0,
            "CARRY": 0, "share_of_xcu250_pct": {"LUT": 0.0, "FF": 0.0, "BRAM": 0.0,
                                                "URAM": 0.0, "DSP": 0.0}}
    return {"top": top, "ok": True, "yosys_seconds": 1.0, "cached": False, **figs,
            "depth": {"lut_levels": 5 if uram else 6, "path_from": ["a"], "path_to": ["b"]}}


def test_run_synth_adds_uram_runs_beside_the_block_ram_figure(tmp_path, monkeypatch):
    pl = _pipeline()
    calls = []

    def fake_run_yosys(verilog, top, workdir, *, timeout=None, cache_dir=None,
                       cached_only=False, boxes=(), ys=None):
        uram = ys is not None and "-uram" in ys
        calls.append((workdir.name, uram, verilog))
        assert cache_dir == tmp_path / "synth_cache"
        return _fake_result(top, uram)

    verilog = {}                                    # each element converted once
    thunk_calls = []

    def block_verilog(pl, e):
        thunk_calls.append(e.qualname)
        if e.qualname not in verilog:
            verilog[e.qualname] = synth.block_element(pl, e, "bench_element")[0]
        return verilog[e.qualname]

    def fake_blocks(core):
        return [(k, e.bench_label, "bench_element",
                 (lambda e=e: block_verilog(core.pipeline, e)), n)
                for k, e, n in synth.element_instances(core.pipeline)]

    monkeypatch.setattr(synth, "run_yosys", fake_run_yosys)
    monkeypatch.setattr(synth, "blocks", fake_blocks)
    monkeypatch.setattr(bench, "_yosys_version", lambda: "test")
    for jobs in (1, 2):
        calls.clear()
        thunk_calls.clear()
        res = bench.run_synth(tmp_path, _Core(pl), whole_core=False, standalone=False,
                              jobs=jobs, log=lambda *a: None)
        uram_calls = [c for c in calls if c[1]]
        assert sorted(c[0] for c in uram_calls) == ["element_t.at_uram", "element_t.deep_uram"]
        assert len(calls) == 4 + 2                  # every block once in block RAM, 2 -uram
        assert sorted(thunk_calls) == ["t.at", "t.below", "t.deep", "t.small"]  # Verilog once
        # both runs get the block's Verilog as the core's is written: the bank declared,
        # no initial block of its zero contents (URAM cannot be initialised; Yosys would keep
        # the init and refuse URAM)
        bram_at = next(v for w, u, v in calls if w == "element_t.at" and not u)
        assert bram_at == next(v for w, u, v in uram_calls if w == "element_t.at_uram")
        assert "[4095:0]" in bram_at and "initial begin" not in bram_at
        saved = json.loads((tmp_path / "synth.json").read_text())
        assert saved == json.loads(json.dumps(res))
        blocks = saved["blocks"]
        for key in ("element:t.below", "element:t.small"):
            assert "uram" not in blocks[key]
        at = blocks["element:t.at"]
        assert (at["BRAM36_equiv"], at["URAM"], at["depth"]["lut_levels"]) == (8.0, 0, 6)
        u = at["uram"]
        assert (u["URAM"], u["BRAM36_equiv"], u["depth"]["lut_levels"]) == (4, 0.0, 5)
        assert u["banks"] == [{"bank": "t.at", "depth": 4096, "width": 64, "bits": THRESHOLD}]
        assert u["uram_expected"] == {"yosys_no_cascade": 1, "with_cascade": 1,
                                      "bits_over_288k": 0.9}
        assert blocks["element:t.deep"]["uram"]["uram_expected"]["yosys_no_cascade"] == 1
        # the sums stay the block RAM mapping; the summary shows both
        assert saved["sum_of_blocks"]["URAM"] == 0 and saved["sum_of_blocks"][
            "BRAM36_equiv"] == 4 * 8.0
        assert any(f.startswith("element:t.at (t.at 4096x64) with -uram: 4 URAM288")
                   for f in saved["findings"])
        text = "\n".join(synth_lines(saved))
        assert text.count("-uram") >= 4 and "URAM288 4 (t.at 4096x64" in text


def test_uram_run_failure_is_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(synth, "run_yosys", lambda *a, **k: {"ok": False, "error": "boom"})
    r = bench.uram_run(lambda: "module m; endmodule\n", "m", [("t.x", 4096, 64)],
                       tmp_path / "w", tmp_path / "c", log=lambda *a: None)
    assert r["ok"] is False and r["banks"][0]["bits"] == THRESHOLD
    res = {"blocks": {"element:t.x": {"ok": True, "uram": r, "depth": {"lut_levels": 1}}}}
    assert bench._synth_findings(res) == ["element:t.x -uram run failed: boom"]


def test_block_verilog_leaves_out_zero_memory_inits_only():
    from amaranth.back import verilog
    from amaranth.hdl import Module, Signal
    from amaranth.lib.memory import Memory

    def design():
        m = Module()
        ports = []
        for name, init in (("zero", []), ("table", [3, 5])):
            mem = m.submodules[name] = Memory(shape=8, depth=4, init=init)
            rd = mem.read_port()
            a, d = Signal(2, name=f"{name}_a"), Signal(8, name=f"{name}_d")
            m.d.comb += [rd.addr.eq(a), d.eq(rd.data)]
            ports += [a, d]
        return m, ports

    m, ports = design()
    assert verilog.convert(m, name="t", ports=ports, emit_src=False).count("initial begin") == 2
    m, ports = design()
    v = synth.to_verilog(m, "t", ports)
    assert v.count("initial begin") == 1 and "8'h03;" in v and "8'h05;" in v
