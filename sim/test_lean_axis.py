"""The lean AXI-Stream driver/monitor (sim/lean_axis.py) against the cocotbext-axi models.

Top: two independent 512-bit channels through one valid/ready register stage each
(``a``: ``s_a_* -> m_a_*``, ``b``: ``s_b_* -> m_b_*``), so a frame's first beat leaves exactly
one cycle after it entered when nothing stalls. Testbench: sim/cocotb_lean_axis.py.
"""
import pytest

from netstor.sim.harness import run_cocotb


def passthrough_verilog(width=512, user=16):
    k = width // 8
    chans = []
    ports = ["input wire clk", "input wire rst"]
    for c in ("a", "b"):
        ports += [f"input wire [{width - 1}:0] s_{c}_tdata", f"input wire [{k - 1}:0] s_{c}_tkeep",
                  f"input wire s_{c}_tvalid", f"output wire s_{c}_tready",
                  f"input wire s_{c}_tlast", f"input wire [{user - 1}:0] s_{c}_tuser",
                  f"output reg [{width - 1}:0] m_{c}_tdata", f"output reg [{k - 1}:0] m_{c}_tkeep",
                  f"output reg m_{c}_tvalid", f"input wire m_{c}_tready",
                  f"output reg m_{c}_tlast", f"output reg [{user - 1}:0] m_{c}_tuser"]
        chans.append(f"""
assign s_{c}_tready = ~m_{c}_tvalid | m_{c}_tready;
always @(posedge clk) begin
  if (rst) m_{c}_tvalid <= 1'b0;
  else if (s_{c}_tready) begin
    m_{c}_tvalid <= s_{c}_tvalid;
    m_{c}_tdata <= s_{c}_tdata; m_{c}_tkeep <= s_{c}_tkeep;
    m_{c}_tlast <= s_{c}_tlast; m_{c}_tuser <= s_{c}_tuser;
  end
end""")
    return ("`timescale 1ns/1ps\nmodule tb_lean (\n  " + ",\n  ".join(ports) + "\n);\n"
            + "\n".join(chans) + "\nendmodule\n")


@pytest.mark.cocotb
def test_lean_axis():
    run_cocotb("lean_axis", "cocotb_lean_axis", toplevel="tb_lean",
               verilog_text=passthrough_verilog())
