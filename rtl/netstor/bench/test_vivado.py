"""The Vivado out-of-context script (boards/vivado/ooc.tcl): what is committed is what the
generator writes, and it names the core's real top, clock port, the AU250's part, 4 ns and
SLR1. It has not been run here (no Vivado); nothing is faked."""
import re

from netstor.bench import vivado
from netstor.paths import repo_root


def _tcl_sets(text):
    return dict(re.findall(r"^set (\w+) (\S+)$", text, re.M))


def test_committed_script_is_generated():
    assert vivado.COMMITTED.read_text() == vivado.tcl(), (
        "boards/vivado/ooc.tcl is stale: python -m netstor.bench.vivado")


def test_script_parameters():
    text = vivado.tcl()
    s = _tcl_sets(text)
    assert s["part"] == "xcu250-figd2104-2-e"            # Corundum's fpga_AU250 part
    assert s["top"] == "netstor_core" and s["clock_port"] == "clk"
    assert float(s["period"]) == 4.0 and s["slr"] == "SLR1"
    assert "synth_design -top $top -part $part -mode out_of_context" in text
    assert "create_clock -name $clock_port -period $period" in text
    assert "CLOCKREGION_X0Y4:CLOCKREGION_X7Y7" in text      # SLR1 of the VU13P die
    for rpt in ("report_utilization", "report_timing_summary",
                "report_design_analysis -logic_level_distribution"):
        assert rpt in text
    # other parameters reach the script
    s2 = _tcl_sets(vivado.tcl(period_ns=3.2, slr="SLR2"))
    assert float(s2["period"]) == 3.2 and s2["slr"] == "SLR2"
    # braces balance (a Tcl syntax slip shows here first)
    body = re.sub(r"\\[{}]", "", text)
    assert body.count("{") == body.count("}")


def test_names_match_the_generated_core():
    """The top and clock port the script uses are the generated core's (build/rtl, make rtl)."""
    v = (repo_root() / "build" / "rtl" / "netstor_core.v").read_text()
    m = re.search(r"^module (\w+)\(([^;]*)\);", v, re.M)
    assert m and m.group(1) == vivado.TOP
    ports = {p.strip() for p in m.group(2).split(",")}
    assert vivado.CLOCK_PORT in ports
    assert re.search(rf"^\s*input {vivado.CLOCK_PORT};", v, re.M)
