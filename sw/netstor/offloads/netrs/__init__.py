"""NetRS: in-network replica selection (Su et al., "NetRS: in-network replica selection",
IEEE TCC 2020), one folder.

* :mod:`.header` -- the request/response header, declared once (program view, agents, wire).
* :mod:`.program` -- the data-plane program (RSNode: traffic groups, replica groups, the
  ranking core, EWMA server state from responses, DRS, source marker, monitor);
  :mod:`.formats` -- its number formats (RV, per-group time unit and EWMA weight, samples,
  saturation and the share of saturated samples).
* :mod:`.ranking_core` -- the ranking core: ``hls/ranking.x`` compiled by XLS, its Amaranth
  wrapper and the core object a ``Rank`` element runs; :mod:`.ranking` -- its bit-exact
  Python reference (C3, least outstanding, power of two choices, round robin).
* :mod:`.topology`, :mod:`.placement`, :mod:`.rules` -- the controller: k-ary fat trees,
  RSNode placement (ILP on HiGHS, Algorithms 1 and 2, DRS), plans as table entries;
  :mod:`.config` -- the ``netrs:`` configuration section and per-switch configurations.
* :mod:`.codec` -- what a storage server does with NetRS requests; :mod:`.schemes` -- the
  load generator's ``netrs`` and client-side ``c3`` schemes.
* :mod:`.sim_schemes` -- NetRS and the paper's baselines (CliRS, CliRS-R95, Oracle) in the
  cluster simulator; :mod:`.evaluation` -- section 6 at the paper's scale there (``make eval``).
* :mod:`.demo` -- the ``make demo`` step and the model switch's cost of NetRS frames;
  :mod:`.compare` (NetRS vs client-side C3), :mod:`.bench` (placement: ILP vs heuristic) for
  ``make bench``; :mod:`.cocotb_netrs` -- the RTL against the golden model.
"""
from netstor.offload import Offload

OFFLOAD = Offload(
    name="netrs",
    title="NetRS (in-network replica selection)",
    udp_port=7432,
    program=f"{__name__}.program:make_netrs",
    config_section=f"{__name__}.config:apply_section",
    header=f"{__name__}.header:HEADER",
    wire=f"{__name__}.header:wire",
    codec=f"{__name__}.codec:NetRSCodec",
    schemes=f"{__name__}.schemes:SCHEMES",
    sim_schemes=f"{__name__}.sim_schemes:SIM_SCHEMES",
    evaluation=f"{__name__}.evaluation:EVALUATION",
    demo=f"{__name__}.demo:demo_step",
    frame_costs=f"{__name__}.demo:frame_costs",
    experiments=((f"{__name__}.bench_core", "hls.json"),
                 (f"{__name__}.bench", "placement.json"),
                 (f"{__name__}.compare", "netrs.json")),
    cocotb=((f"{__name__}.cocotb_netrs", "test_netrs"),),
)
