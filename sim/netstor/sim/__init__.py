"""The simulation library: the cocotb/Verilator harness (``harness``), the whole core's shared
Verilator build (``core_build``, ``tb_core``), the cocotb environment that drives it and scores
it against the golden model (``core_env``, ``axil_transport``, ``lean_axis``, ``frames``), and
the jobs that run the RTL: the cocotb demo
(``demo``, ``make demo-rtl``) and the pipeline benchmark's simulation side (``cocotb_bench``).

The testbenches themselves (``sim/test_*.py`` with their ``sim/cocotb_*.py`` modules) stay in
``sim/``, next to this package.
"""
