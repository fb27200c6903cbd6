"""Corundum integration: the generated mqnic_app_block wrapper, TX completions, the board build.

* The wrapper's parameters (names, template defaults) and ports (names, directions, widths
  resolved by Verilator for the Alveo 100G configuration) equal boards/corundum/app_block_ports.json.
* The wrapper lints clean (``verilator --lint-only -Wall``) with a stand-in ``netstor_core``,
  for control windows narrower, equal to and wider than the core's; wrong configurations
  (APP_ID, PORT_COUNT, stream width) fail elaboration with the named error module.
* TxCompletions under cocotb (sim/cocotb_tx_completion.py).
* The board build script in dry-run mode against a fake Corundum tree.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from netstor.sim import harness
from netstor.build.corundum import APP_ID, CoreConfig, core_port_list, mqnic_app_block_verilog

ROOT = Path(__file__).resolve().parent.parent
PORTS_JSON = ROOT / "boards" / "corundum" / "app_block_ports.json"


def expected():
    return json.loads(PORTS_JSON.read_text())


def alveo_overrides():
    out = []
    for prm in expected()["parameters"]:
        out.append(f"-G{prm['name']}={prm['value']}")
    return out


def stub_core_verilog(cfg=None) -> str:
    """A stand-in netstor_core with the agreed port list: loops host TX to wire TX and wire RX
    to host RX per lane, completions straight through, AXI-Lite answers OKAY with zeros."""
    ports = core_port_list(cfg)
    lines = ["// Stand-in for the Amaranth-generated netstor_core (tests only).",
             "`default_nettype none", "module netstor_core ("]
    lines.append(",\n".join(f"    {d} wire [{w - 1}:0] {n}" for n, d, w in ports))
    lines.append(");")
    for kind in ("tx", "rx"):
        for s in ("tdata", "tkeep", "tvalid", "tlast", "tuser"):
            lines.append(f"assign m_axis_sync_{kind}_{s} = s_axis_sync_{kind}_{s};")
        lines.append(f"assign s_axis_sync_{kind}_tready = m_axis_sync_{kind}_tready;")
    for s in ("ts", "tag", "valid"):
        lines.append(f"assign m_axis_sync_tx_cpl_{s} = s_axis_sync_tx_cpl_{s};")
    lines.append("assign s_axis_sync_tx_cpl_ready = m_axis_sync_tx_cpl_ready;")
    lines += ["reg bvalid, rvalid;",
              "assign s_axil_awready = !bvalid && s_axil_awvalid && s_axil_wvalid;",
              "assign s_axil_wready = s_axil_awready;",
              "assign s_axil_bvalid = bvalid;", "assign s_axil_bresp = 2'b00;",
              "assign s_axil_arready = !rvalid;", "assign s_axil_rvalid = rvalid;",
              "assign s_axil_rresp = 2'b00;", "assign s_axil_rdata = 0;",
              "always @(posedge clk) begin",
              "    if (s_axil_awready) bvalid <= 1'b1; else if (s_axil_bready) bvalid <= 1'b0;",
              "    if (s_axil_arvalid && !rvalid) rvalid <= 1'b1; else if (s_axil_rready) rvalid <= 1'b0;",
              "    if (rst) begin bvalid <= 1'b0; rvalid <= 1'b0; end",
              "end",
              "wire unused_core_inputs = &{1'b0, s_axil_awaddr, s_axil_awprot, s_axil_wdata,",
              "                           s_axil_wstrb, s_axil_araddr, s_axil_arprot};",
              "endmodule"]
    return "\n".join(lines) + "\n"


def write_sources(tmp_path: Path, cfg=None):
    top = tmp_path / "mqnic_app_block.v"
    core = tmp_path / "netstor_core.v"
    top.write_text(mqnic_app_block_verilog(cfg))
    core.write_text(stub_core_verilog(cfg))
    return top, core


def verilator(*args, cwd):
    harness.setup_verilator_env()
    return subprocess.run(["verilator", *args], cwd=cwd, capture_output=True, text=True)


# ---------------------------------------------------------------------------------------------
# (a) interface against the recorded Corundum interface
# ---------------------------------------------------------------------------------------------

def test_json_is_self_consistent():
    doc = expected()
    assert doc["module"] == "mqnic_app_block"
    names = [p["name"] for p in doc["ports"]]
    assert len(names) == len(set(names))
    prm = {p["name"]: p["value"] for p in doc["parameters"]}
    assert prm["APP_ID"] == f"32'h{APP_ID:08X}"
    assert (prm["IF_COUNT"], prm["PORTS_PER_IF"], prm["PORT_COUNT"]) == (2, 1, 2)
    assert (prm["AXIS_SYNC_DATA_WIDTH"], prm["AXIS_SYNC_TX_USER_WIDTH"],
            prm["AXIS_SYNC_RX_USER_WIDTH"]) == (512, 17, 97)
    assert (prm["PTP_TS_WIDTH"], prm["TX_TAG_WIDTH"], prm["AXIL_APP_CTRL_ADDR_WIDTH"]) == (96, 16, 24)
    for p in doc["ports"]:
        assert p["direction"] in ("input", "output") and p["resolved"] >= 1


def _norm(expr: str) -> str:
    e = expr.replace(" ", "")
    while e.startswith("(") and e.endswith(")") and e.count("(") == 1:
        e = e[1:-1]
    return e


def test_parameters_match_json():
    text = mqnic_app_block_verilog()
    header = text[text.index("module mqnic_app_block"):text.index(")\n(")]
    got = re.findall(r"^\s*parameter\s+(\w+)\s*=\s*(.*?),?\s*$", header, re.M)
    want = [(p["name"], p["default"]) for p in expected()["parameters"]]
    assert [n for n, _ in got] == [n for n, _ in want], "parameter names/order differ"
    for (n, d_got), (_, d_want) in zip(got, want):
        assert _norm(d_got) == _norm(d_want), f"{n}: default {d_got!r} != {d_want!r}"


def _verilator_ports(json_path: Path, module: str):
    d = json.loads(json_path.read_text())
    index = {}

    def walk(x):
        if isinstance(x, dict):
            if "addr" in x:
                index[x["addr"]] = x
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(d)
    mod = next(m for m in d["modulesp"] if m.get("origName") == module)
    ports = {}
    for st in mod["stmtsp"]:
        if st.get("type") == "VAR" and st.get("direction") in ("INPUT", "OUTPUT"):
            dt = index[st["dtypep"]]
            rng = dt.get("range")
            if rng:
                hi, lo = (int(v) for v in rng.split(":"))
                width = abs(hi - lo) + 1
            else:
                width = 1
            ports[st["name"]] = (st["direction"].lower(), width)
    return ports


def test_ports_match_json(tmp_path):
    top, core = write_sources(tmp_path)
    out = tmp_path / "tree.json"
    r = verilator("--json-only", "--json-only-output", str(out), "--top-module", "mqnic_app_block",
                  *alveo_overrides(), str(top), str(core), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    got = _verilator_ports(out, "mqnic_app_block")
    want = {p["name"]: (p["direction"], p["resolved"]) for p in expected()["ports"]}
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    assert not missing and not extra, f"missing {missing}, extra {extra}"
    wrong = {n: (got[n], want[n]) for n in want if got[n] != want[n]}
    assert not wrong, f"direction/width mismatches (got, want): {wrong}"
    # the width expressions, too (textually, from the generated declarations)
    text = top.read_text()
    for p in expected()["ports"]:
        m = re.search(rf"^\s*(input|output)\s+wire\s+(\[(.*)-1:0\])?\s+{p['name']},?\s*$", text, re.M)
        assert m, p["name"]
        expr = m.group(3) or "1"
        assert expr.replace(" ", "") == p["width"].replace(" ", ""), \
            f"{p['name']}: width {expr!r} != {p['width']!r}"


# ---------------------------------------------------------------------------------------------
# (b) lint and configuration checks
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("addr_width", [16, 24, 28])
def test_wrapper_lints_clean(tmp_path, addr_width):
    top, core = write_sources(tmp_path)
    args = [a for a in alveo_overrides() if not a.startswith("-GAXIL_APP_CTRL_ADDR_WIDTH=")]
    r = verilator("--lint-only", "-Wall", "-Wno-DECLFILENAME", "--top-module", "mqnic_app_block",
                  *args, f"-GAXIL_APP_CTRL_ADDR_WIDTH={addr_width}", str(top), str(core),
                  cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "%Warning" not in r.stderr, r.stderr


@pytest.mark.parametrize("override, error", [
    ("-GAPP_ID=32'h12340001", "netstor_config_error_APP_ID_must_be_32h4E530001"),
    ("-GIF_COUNT=1", "netstor_config_error_PORT_COUNT_must_be_2"),
    ("-GAXIS_SYNC_DATA_WIDTH=256", "netstor_config_error_AXIS_SYNC_DATA_WIDTH_must_be_512"),
    ("-GAPP_AXIS_SYNC_ENABLE=0", "netstor_config_error_APP_AXIS_SYNC_ENABLE_must_be_1"),
    ("-GAXIL_APP_CTRL_DATA_WIDTH=64", "netstor_config_error_AXIL_APP_CTRL_DATA_WIDTH_must_be_32"),
])
def test_wrong_configuration_fails_elaboration(tmp_path, override, error):
    top, core = write_sources(tmp_path)
    name = override[2:].split("=")[0]
    args = [a for a in alveo_overrides() if not a.startswith(f"-G{name}=")]
    if name == "IF_COUNT":  # PORT_COUNT follows IF_COUNT in Corundum
        args = [a for a in args if not a.startswith("-GPORT_COUNT=")] + ["-GPORT_COUNT=1"]
    r = verilator("--lint-only", "-Wno-fatal", "--top-module", "mqnic_app_block", *args, override,
                  str(top), str(core), cwd=tmp_path)
    assert r.returncode != 0
    assert error in r.stderr, r.stderr


def test_core_config_validation():
    with pytest.raises(ValueError):
        CoreConfig(n_ports=0)
    with pytest.raises(ValueError):
        CoreConfig.coerce({"ports": 2})
    with pytest.raises(ValueError):
        CoreConfig(tx_user_width=18)
    text = mqnic_app_block_verilog({"n_ports": 4})
    assert "PORT_COUNT == 4" in text
    # Corundum's names work too; the user widths follow the tag/timestamp widths
    assert CoreConfig.coerce({"PORT_COUNT": 3, "TX_TAG_WIDTH": 8}) == \
        CoreConfig(n_ports=3, tag_width=8, tx_user_width=9)


# ---------------------------------------------------------------------------------------------
# (c) TX completions under cocotb
# ---------------------------------------------------------------------------------------------

@pytest.mark.cocotb
@pytest.mark.parametrize("n_ports, depth", [(2, 8), (1, 64)])
def test_tx_completions_cocotb(n_ports, depth):
    from netstor.gateware.tx_completion import TxCompletions
    dut = TxCompletions(n_ports, tag_width=16, ts_width=96, depth=depth)
    harness.run_cocotb(f"tx_completion_p{n_ports}_d{depth}", "cocotb_tx_completion",
                       toplevel="tx_completions",
                       verilog_text=harness.elaborate(dut, "tx_completions"),
                       extra_env={"TXC_PORTS": str(n_ports), "TXC_DEPTH": str(depth),
                                  "TXC_TAG_WIDTH": "16", "TXC_TS_WIDTH": "96"})


def test_tx_completions_arguments():
    from netstor.gateware.tx_completion import TxCompletions
    with pytest.raises(ValueError):
        TxCompletions(0)
    with pytest.raises(ValueError):
        TxCompletions(2, depth=1)
    with pytest.raises(TypeError):
        TxCompletions(2, tag_width=16.0)


# ---------------------------------------------------------------------------------------------
# board build: dry run against a fake Corundum tree
# ---------------------------------------------------------------------------------------------

FAKE_MAKEFILE = """\
FPGA_PART = xcu250-figd2104-2-e
FPGA_TOP = fpga
SYN_FILES = rtl/fpga_au200.v
SYN_FILES += rtl/fpga_core.v
SYN_FILES += lib/axis/rtl/axis_fifo.v

XDC_FILES = fpga_au200.xdc

include ../common/vivado.mk
"""

FAKE_CONFIG = """\
set params [dict create]
dict set params IF_COUNT "{if_count}"
dict set params PORTS_PER_IF "1"
dict set params APP_ID "32'h00000000"
dict set params APP_ENABLE "0"
dict set params AXIL_APP_CTRL_ADDR_WIDTH "24"
set_property generic $param_list [get_filesets sources_1]
"""


def fake_corundum(root: Path, boards={"AU250": 2, "AU280": 2, "AU50": 1}) -> Path:
    top = root / "fpga" / "mqnic" / "Alveo" / "fpga_100g"
    (top / "common").mkdir(parents=True)
    (top / "common" / "vivado.mk").write_text("# fake\n")
    (root / "fpga" / "app").mkdir(parents=True)
    (top / "app").symlink_to(Path("..") / ".." / ".." / "app")
    for board, ifc in boards.items():
        d = top / f"fpga_{board}"
        d.mkdir()
        (d / "Makefile").write_text(FAKE_MAKEFILE)
        (d / "config.tcl").write_text(FAKE_CONFIG.format(if_count=ifc))
    return root


def fake_rtl(d: Path, cfg=None) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "mqnic_app_block.v").write_text(mqnic_app_block_verilog(cfg))
    (d / "netstor_core.v").write_text(stub_core_verilog(cfg))
    (d / "rank_core.v").write_text("module rank_core; endmodule\n")
    return d


def run_board_script(*args):
    return subprocess.run([sys.executable, str(ROOT / "boards" / "build_corundum.py"), *args],
                          capture_output=True, text=True)


@pytest.mark.parametrize("board", ["AU250", "AU280"])
def test_board_build_dry_run(tmp_path, board):
    cdir = fake_corundum(tmp_path / "corundum")
    rtl = fake_rtl(tmp_path / "rtl")
    r = run_board_script("--board", board, "--corundum-dir", str(cdir), "--rtl-dir", str(rtl),
                         "--dry-run")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "would run: make -C" in r.stdout
    top = cdir / "fpga" / "mqnic" / "Alveo" / "fpga_100g"
    build = top / f"fpga_{board}_app_netstor"
    # RTL copied into fpga/app/netstor/rtl
    app = cdir / "fpga" / "app" / "netstor" / "rtl"
    for f in ("mqnic_app_block.v", "netstor_core.v", "rank_core.v"):
        assert (app / f).read_text() == (rtl / f).read_text()
    # Makefile: the board's, plus our files after the last SYN_FILES line
    mk = (build / "Makefile").read_text()
    syn = [ln for ln in mk.splitlines() if ln.startswith("SYN_FILES")]
    assert syn[:3] == ["SYN_FILES = rtl/fpga_au200.v", "SYN_FILES += rtl/fpga_core.v",
                       "SYN_FILES += lib/axis/rtl/axis_fifo.v"]
    assert syn[3:] == ["SYN_FILES += app/netstor/rtl/mqnic_app_block.v",
                       "SYN_FILES += app/netstor/rtl/netstor_core.v",
                       "SYN_FILES += app/netstor/rtl/rank_core.v"]
    assert "include ../common/vivado.mk" in mk
    for ln in syn[3:]:  # paths resolve from fpga_100g/, as vivado.mk uses them
        assert (top / ln.split("+= ")[1]).exists()
    # config.tcl: APP_ENABLE=1 and our APP_ID, the rest untouched
    cfg = (build / "config.tcl").read_text()
    assert 'dict set params APP_ENABLE "1"' in cfg
    assert f"dict set params APP_ID \"32'h{APP_ID:08X}\"" in cfg
    assert 'dict set params APP_ENABLE "0"' not in cfg
    assert 'dict set params AXIL_APP_CTRL_ADDR_WIDTH "24"' in cfg
    man = json.loads((build / "netstor_build.json").read_text())
    assert man["board"] == board and man["app_id"] == f"32'h{APP_ID:08X}" and man["ports"] == 2
    # the plain build directory is untouched
    assert (top / f"fpga_{board}" / "Makefile").read_text() == FAKE_MAKEFILE
    # a second run reuses the directory
    r = run_board_script("--board", board, "--corundum-dir", str(cdir), "--rtl-dir", str(rtl),
                         "--dry-run", "--link")
    assert r.returncode == 0, r.stderr
    assert (app / "netstor_core.v").is_symlink()


def test_board_build_refuses_mismatches(tmp_path):
    cdir = fake_corundum(tmp_path / "corundum")
    rtl = fake_rtl(tmp_path / "rtl")
    # AU50: one port, core built for two
    r = run_board_script("--board", "AU50", "--corundum-dir", str(cdir), "--rtl-dir", str(rtl),
                         "--dry-run")
    assert r.returncode == 1 and "1 port(s)" in r.stderr
    # APP_ID other than the wrapper's
    r = run_board_script("--board", "AU250", "--corundum-dir", str(cdir), "--rtl-dir", str(rtl),
                         "--dry-run", "--app-id", "0x12340001")
    assert r.returncode == 1 and "APP_ID" in r.stderr
    # not a Corundum tree
    r = run_board_script("--board", "AU250", "--corundum-dir", str(tmp_path / "nothing"),
                         "--rtl-dir", str(rtl), "--dry-run")
    assert r.returncode == 1 and "Corundum checkout" in r.stderr
    # no core generated
    (rtl / "netstor_core.v").unlink()
    r = run_board_script("--board", "AU250", "--corundum-dir", str(cdir), "--rtl-dir", str(rtl),
                         "--dry-run")
    assert r.returncode == 1 and "make rtl" in r.stderr


def test_board_makefile_dry_run(tmp_path):
    """boards/Makefile passes the board and DRY_RUN through (its 'rtl' prerequisite skipped)."""
    cdir = fake_corundum(tmp_path / "corundum")
    rtl = fake_rtl(tmp_path / "rtl")
    r = subprocess.run(["make", "-C", str(ROOT / "boards"), "-o", "rtl", "AU280",
                        f"CORUNDUM_DIR={cdir}", f"RTL_DIR={rtl}", "DRY_RUN=1",
                        f"PY={sys.executable}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (cdir / "fpga" / "mqnic" / "Alveo" / "fpga_100g" / "fpga_AU280_app_netstor"
            / "config.tcl").exists()
