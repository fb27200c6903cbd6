"""The synthesis bench's own logic, without Yosys: the logic-depth walker on hand-made mapped
netlists (LUT levels counted by hand), the deepest-block summary and the standalone hook."""
import json
import re
import sys
import types

from netstor import bench
from netstor.bench import synth
from netstor.build import build_core
from netstor.paths import repo_root


class _Net:
    """A tiny mapped netlist in Yosys' write_json form."""

    def __init__(self):
        self.cells = {}
        self.bit = 10
        self.ports = {}

    def new(self, n=1):
        bits = list(range(self.bit, self.bit + n))
        self.bit += n
        return bits

    def cell(self, name, typ, ins, outs):
        conns = {**ins, **outs}
        dirs = {**{p: "input" for p in ins}, **{p: "output" for p in outs}}
        self.cells[name] = {"type": typ, "connections": conns, "port_directions": dirs}

    def ff(self, name, d):
        q = self.new()
        self.cell(name, "FDRE", {"D": d, "C": [2], "CE": ["1"], "R": ["0"]}, {"Q": q})
        return q

    def lut(self, name, *ins):
        o = self.new()
        self.cell(name, "LUT6", {f"I{i}": b for i, b in enumerate(ins)}, {"O": o})
        return o

    def chain(self, name, src, n):
        for i in range(n):
            src = self.lut(f"{name}{i}", src)
        return src

    def write(self, path):
        mod = {"cells": self.cells, "ports": self.ports, "netnames": {}}
        path.write_text(json.dumps({"modules": {"top": mod}}))
        return path


def _ram64m8(net, name, addr, wdata, we, used=("DOA",)):
    """A RAM64M8 (7 read ports A..G + the write/read port H); ``addr``: {letter: 6 bits}."""
    ins = {f"ADDR{c}": addr.get(c, ["0"] * 6) for c in "ABCDEFGH"}
    ins.update({f"DI{c}": wdata for c in "ABCDEFGH"})
    ins.update({"WE": we, "WCLK": [2]})
    outs = {f"DO{c}": net.new() for c in "ABCDEFGH"}
    net.cell(name, "RAM64M8", ins, outs)
    return {p: outs[p] for p in used}


def test_lutram_write_address_is_not_depth(tmp_path):
    net = _Net()
    src = net.ff("src", net.new())
    waddr = net.chain("w", src, 6)                    # 6 levels into the write address
    raddr = net.chain("r", src, 2)                    # 2 levels into a read address
    wdata = net.chain("d", src, 1)
    outs = _ram64m8(net, "ram", {"H": waddr * 6, "A": raddr * 6}, wdata, src)
    net.ff("dst", net.chain("o", outs["DOA"], 3))     # read -> 3 levels -> register
    d = synth.netlist_depth(net.write(tmp_path / "n.json"), "top")
    # write path: 6 levels ending at the RAM; read path: 2 + 1 (async read) + 3 = 6; the
    # walker of old joined them through the RAM: 6 + 1 + 3 = 10
    assert d["lut_levels"] == 6
    net2 = _Net()
    src = net2.ff("src", net2.new())
    waddr = net2.chain("w", src, 7)
    outs = _ram64m8(net2, "ram", {"H": waddr * 6, "A": src * 6}, src, src)
    net2.ff("dst", net2.chain("o", outs["DOA"], 1))
    assert synth.netlist_depth(net2.write(tmp_path / "n2.json"), "top")["lut_levels"] == 7


def test_lutram_read_of_the_write_port_counts(tmp_path):
    """When the write port's own read (DOH, address ADDRH) is used, that path is real."""
    net = _Net()
    src = net.ff("src", net.new())
    waddr = net.chain("w", src, 5)
    outs = _ram64m8(net, "ram", {"H": waddr * 6}, src, src, used=("DOH",))
    net.ff("dst", net.chain("o", outs["DOH"], 2))
    assert synth.netlist_depth(net.write(tmp_path / "n.json"), "top")["lut_levels"] == 5 + 1 + 2


def test_dual_port_x1d(tmp_path):
    """RAM64X1D: SPO is read at the write address A0..A5, DPO at DPRA0..DPRA5."""
    net = _Net()
    src = net.ff("src", net.new())
    a = net.chain("a", src, 4)
    dpra = net.chain("p", src, 1)
    spo, dpo = net.new(), net.new()
    net.cell("ram", "RAM64X1D", {**{f"A{i}": a for i in range(6)},
                                 **{f"DPRA{i}": dpra for i in range(6)},
                                 "D": src, "WE": src, "WCLK": [2]}, {"SPO": spo, "DPO": dpo})
    net.ff("dst", net.chain("o", dpo, 1))
    # DPO path: 1 + 1 + 1 = 3; the write address (4 levels) ends at the RAM; SPO unused
    assert synth.netlist_depth(net.write(tmp_path / "n.json"), "top")["lut_levels"] == 4
    net.ff("dst2", net.chain("s", spo, 2))            # now SPO is read: 4 + 1 + 2
    assert synth.netlist_depth(net.write(tmp_path / "n.json"), "top")["lut_levels"] == 7


def test_max_depth_names_the_block():
    def blk(lv, **kw):
        return {"ok": True, "depth": {"lut_levels": lv, "path_from": ["a"], "path_to": ["b"]},
                **kw}
    md = bench.max_depth({"parser": blk(10), "element:x.y": blk(12), "csr": blk(5),
                          "element:x.z": blk(12, same_config_as="element:x.y"),
                          "bad": {"ok": False}})
    assert (md["block"], md["lut_levels"], md["limit"]) == ("element:x.y", 12, 8)
    assert md["over_limit"] == [{"block": "element:x.y", "lut_levels": 12},
                                {"block": "parser", "lut_levels": 10}]


def test_standalone_hook(tmp_path, monkeypatch):
    calls = []
    mod = types.ModuleType("netstor_fake_bench")

    def fake(out):
        calls.append(out)
        return {"ok": True, "LUT": 7, "URAM": 32}
    mod.bench = fake
    monkeypatch.setitem(sys.modules, "netstor_fake_bench", mod)
    res = bench.run_standalone(tmp_path, ("netstor_fake_bench", "netstor.elements.no_such_bench"),
                               log=lambda *a: None)
    assert calls == [tmp_path]
    assert set(res) == {"netstor_fake_bench"}
    assert res["netstor_fake_bench"]["URAM"] == 32 and "wall_seconds" in res["netstor_fake_bench"]
    mod.bench = lambda out: 1 / 0
    res = bench.run_standalone(tmp_path, ("netstor_fake_bench",), log=lambda *a: None)
    assert res["netstor_fake_bench"]["ok"] is False and "ZeroDivision" in res["netstor_fake_bench"]["error"]


def _undefined_modules(v):
    inst = {m.group(1).lstrip("\\") for m in re.finditer(r"^  (\\?\S+)\s+\\?\S+\s*\($", v, re.M)}
    defined = {m.group(1).lstrip("\\") for m in re.finditer(r"^module (\\?\S+?)\s*\(", v, re.M)}
    return inst - defined


def test_core_verilog_given_to_yosys_defines_every_module():
    """The whole-core run gets the Rank element's XLS core (its DSPs were missing when only
    netstor_core.v went to Yosys); the generated netstor_core.v alone lacks it."""
    core = build_core()
    v = (repo_root() / "build" / "rtl" / "netstor_core.v").read_text()
    needed = _undefined_modules(v)
    assert needed, "the default core instantiates the XLS ranking core"
    assert not _undefined_modules(synth.core_verilog_text(v, core))
    # and the Rank instance's own block carries it too
    rank = [b for b in synth.blocks(core) if b[1].startswith("Rank")]
    assert rank and all(b[0].startswith("element:") and b[4] == 1 for b in rank)
    assert not _undefined_modules(rank[0][3]())


def test_combinational_dsp(tmp_path):
    """A DSP48E2 with no multiplier/output register passes paths through (0 LUT levels, one
    cell); with PREG = 1 it ends and starts them like a flip-flop."""
    for preg, levels, via in ((0, 1 + 2, 1 + 2), (1, 2, None)):
        net = _Net()
        src = net.ff("src", net.new())
        a = net.chain("a", src, 1)
        p = net.new(4)
        net.cell("dsp", "DSP48E2", {"A": a * 4, "B": src * 4, "C": ["0"] * 4, "CLK": [2]},
                 {"P": p})
        for k, v in (("AREG", 0), ("BREG", 0), ("CREG", 0), ("MREG", 0), ("PREG", preg)):
            net.cells["dsp"].setdefault("parameters", {})[k] = format(v, "032b")
        net.ff("dst", net.chain("o", p[:1], 2))
        d = synth.netlist_depth(net.write(tmp_path / "n.json"), "top")
        assert d["lut_levels"] == levels and d["lut_levels_through_comb_dsp"] == via
        assert d["comb_dsp_cells"] == (0 if preg else 1)


# ------------------------------------------------------------------ hierarchical core run

_HIER_V = r"""module top(clk, a, y);
  input clk;
  input [3:0] a;
  output [3:0] y;
  \top.u0  u0 (.clk(clk), .a(a), .y(y));
  \top.u1  u1 (.clk(clk), .a(a), .y());
endmodule
module \top.u0 (clk, a, y);
  reg \$auto$verilog_backend.cc:2355:dump_module$7  = 0;
  input clk;
  wire clk;
  input [3:0] a;
  output [3:0] y;
  reg [3:0] u0_r;
  always @(posedge clk) u0_r <= a;
  assign y = u0_r;
endmodule
module \top.u1 (clk, a, y);
  reg \$auto$verilog_backend.cc:2355:dump_module$8  = 0;
  input clk;
  wire clk;
  input [3:0] a;
  output [3:0] y;
  reg [3:0] u1_r;
  always @(posedge clk) u1_r <= a;
  assign y = u1_r;
endmodule
"""


def test_hier_plan_splits_stubs_and_merges_identical_modules():
    """Three modules; u0 and u1 differ only in their own name prefix and Amaranth's dummy
    register number, so they are one design with 2 instances; the top's children are
    black-box stubs with their ports only, renamed under bench_mod."""
    from netstor.bench import hier
    mods = hier.split_modules(_HIER_V)
    assert list(mods) == ["top", "top.u0", "top.u1"]
    counts, kids = hier.instance_counts(mods, "top")
    assert counts == {"top": 1, "top.u0": 1, "top.u1": 1}
    assert kids["top"] == [("top.u0", "u0"), ("top.u1", "u1")]
    p = hier.plan(_HIER_V, top="top")
    assert sorted((e["modules"], e["instances"]) for e in p) == [
        (["top"], 1), (["top.u0", "top.u1"], 2)]
    top = next(e for e in p if e["modules"] == ["top"])
    assert top["boxes"] == ["bench_mod.u0", "bench_mod.u1"]
    assert top["verilog"].startswith("module bench_mod(")
    assert top["verilog"].count("(* blackbox *)") == 2
    assert "\\bench_mod.u0  u0 (" in top["verilog"]
    stub = top["verilog"][top["verilog"].index("(* blackbox *)"):]
    assert "always" not in stub and "output [3:0] y;" in stub
    leaf = next(e for e in p if e["instances"] == 2)
    assert "self_r" in leaf["verilog"] and "u0_r" not in leaf["verilog"]


def test_depth_box_ends_and_starts_paths_and_port_segments(tmp_path):
    """A black-box child instance cuts a path like a register; port segments: 2 LUTs from
    the input port to a flip-flop, 3 LUTs from a flip-flop to the output port."""
    net = _Net()
    a = net.new()
    net.ports = {"a": {"direction": "input", "bits": a}}
    x = net.chain("in", a, 2)
    q = net.ff("r", x)
    y = net.chain("out", q, 3)
    net.ports["y"] = {"direction": "output", "bits": y}
    # a box between two LUT chains of 4 and 5: not one path of 9
    b_in = net.chain("pre", q, 4)
    b_out = net.new()
    net.cell("u0", "bench_mod.u0", {"a": b_in}, {"y": b_out})
    net.ff("r2", net.chain("post", b_out, 5))
    path = net.write(tmp_path / "n.json")
    d = synth.netlist_depth(path, "top", boxes=["bench_mod.u0"])
    assert d["lut_levels"] == 5
    assert d["port_segments"] == {"from_in": 2, "to_out": 3, "in_to_out": 0}
    d = synth.netlist_depth(path, "top")       # unknown cell: a combinational node
    assert d["lut_levels"] == 9


def test_stitched_depth_joins_paths_through_child_ports(tmp_path):
    """Parent: FF -> 2 LUTs -> child.a; child.y -> 3 LUTs -> FF. Child: a -> 4 LUTs -> y
    (combinational). Alone, the parent's deepest path is 3 and the child's 4; joined, the path
    FF -> 2 + 4 + 3 LUTs -> FF is 9 levels."""
    import gzip
    from netstor.bench import hier
    par = _Net()
    q = par.ff("r0", par.new())
    a = par.chain("pre", q, 2)
    y = par.new()
    par.cell("c", "bench_mod.c", {"a": a}, {"y": y})
    par.ff("r1", par.chain("post", y, 3))
    ch = _Net()
    ca = ch.new()
    cy = ch.chain("mid", ca, 4)
    ch.ports = {"a": {"direction": "input", "bits": ca},
                "y": {"direction": "output", "bits": cy}}
    done = []
    for name, net, boxes in (("top", par, ["bench_mod.c"]), ("top.c", ch, [])):
        key = name.replace(".", "_")
        mod = {"cells": net.cells, "ports": net.ports, "netnames": {}}
        with gzip.open(tmp_path / f"bench_mod-{key}.netlist.json.gz", "wt") as f:
            json.dump({"modules": {"bench_mod": mod}}, f)
        done.append(({"modules": [name], "instances": 1, "boxes": boxes},
                     {"ok": True, "verilog_sha256": key}))
    d = hier.stitched_depth(done, tmp_path, top="top")
    assert d["lut_levels"] == 9 and d["modules_not_joined"] == []
    assert synth.module_depth({"cells": par.cells, "ports": {}}, ["bench_mod.c"])[
        "lut_levels"] == 3


def _core_entry(lut, levels, commit):
    return {"ok": True, "method": "hierarchical", "LUT": lut, "LUT_logic": lut, "FF": 2 * lut,
            "RAMB36": 1, "RAMB18": 2, "BRAM36_equiv": 2.0, "URAM": 0, "DSP": 3,
            "share_of_xcu250_pct": {"LUT": 1.0, "FF": 1.0, "BRAM": 1.0, "URAM": 0.0,
                                    "DSP": 0.1},
            "depth": {"lut_levels": levels, "lut_levels_within_modules": 7, "max_cells": 9,
                      "path_from": ["a"], "path_to": ["b"],
                      "across_boundaries": {"lut_levels": levels}},
            "yosys_seconds": 1.0, "commit": commit, "modules": {}}


def test_core_variant_sits_beside_the_default_core(tmp_path):
    """A variant's whole-core run (synth.json["core_lane"]) is stored beside the default
    core's and never replaces the totals, which come from "core"."""
    (tmp_path / "synth.json").write_text(json.dumps({"blocks": {}}))
    res = bench.merge_core(tmp_path, _core_entry(100, 8, "aaa"))
    assert res["total"]["LUT"] == 100 and res["total"]["source"] == "core"
    res = bench.merge_core(tmp_path, _core_entry(150, 9, "bbb"),
                           key=bench.CORE_VARIANTS["lane"][0])
    saved = json.loads((tmp_path / "synth.json").read_text())
    assert saved["core"]["commit"] == "aaa" and saved["core_lane"]["commit"] == "bbb"
    assert saved["total"]["LUT"] == 100 and saved["total"]["lut_levels"] == 8
    assert any(f.startswith("lane core (bbb): LUT 150") and "across 9" in f
               for f in saved["findings"])
    from netstor.bench.report import synth_lines
    text = "\n".join(synth_lines(saved))
    assert "copy-lane core (copies=lane)" in text and "bbb" in text


def test_equivalent_module_joins_through_renamed_auto_ports(tmp_path):
    """A child whose netlist comes from a design equal up to Amaranth's auto-numbered names
    (``port$7$0`` there, ``port$9$0`` here): its ports are renamed for the join, so the path
    FF -> 2 LUTs -> child (4) -> 3 LUTs -> FF is still 9 levels; without the rename the
    child's input is not joined and the path starts at it (4 + 3)."""
    import gzip
    from netstor.bench import hier
    a_text = "module m(\\port$7$0 , y);\n  input \\port$7$0 ;\n  x \\port$3$1 ;\n"
    b_text = a_text.replace("port$7$0", "port$9$0").replace("port$3$1", "port$5$1")
    na, names_a = hier.port_numbering(a_text)
    nb, names_b = hier.port_numbering(b_text)
    assert na == nb and names_a == ["port$7$0", "port$3$1"] and names_b[0] == "port$9$0"
    assert hier.port_numbering(a_text.replace("input", "output"))[0] != nb
    par = _Net()
    a = par.chain("pre", par.ff("r0", par.new()), 2)
    y = par.new()
    par.cell("c", "bench_mod.c", {"port$9$0": a}, {"y": y})
    par.ff("r1", par.chain("post", y, 3))
    ch = _Net()
    ca = ch.new()
    ch.ports = {"port$7$0": {"direction": "input", "bits": ca},
                "y": {"direction": "output", "bits": ch.chain("mid", ca, 4)}}
    levels = []
    for rename in ({"port$7$0": "port$9$0"}, {}):
        done = []
        for name, net, boxes, extra in (("top", par, ["bench_mod.c"], {}),
                                        ("top.c", ch, [], {"port_rename": rename})):
            key = name.replace(".", "_")
            with gzip.open(tmp_path / f"bench_mod-{key}.netlist.json.gz", "wt") as f:
                json.dump({"modules": {"bench_mod": {"cells": net.cells, "ports": net.ports,
                                                     "netnames": {}}}}, f)
            done.append(({"modules": [name], "instances": 1, "boxes": boxes},
                         {"ok": True, "verilog_sha256": key, **extra}))
        levels.append(hier.stitched_depth(done, tmp_path, top="top")["lut_levels"])
    assert levels == [9, 7]
