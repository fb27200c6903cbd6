"""NetClone: dynamic request cloning in the data plane (Kim, SIGCOMM 2023), one folder.

* :mod:`.header` -- the 16-byte header, declared once (program view, agents, scapy, Lua).
* :mod:`.program` -- the data-plane program (clone when both candidates were idle, drop the
  slower reply).
* :mod:`.config` -- a rack's configuration: ``nc.groups`` (ordered server pairs),
  ``nc.servers``, the l3 routes including the service address.
* :mod:`.codec` -- what a storage server does with NetClone requests;
  :mod:`.schemes` -- the load generator's ``single``, ``clone`` and ``netclone`` schemes.
* :mod:`.sim` -- NetClone, client cloning and LAEDGE in the cluster simulator;
  :mod:`.eval` -- the paper's figures at its scale there.
* :mod:`.demo` -- the ``make demo`` step and the model switch's cost of NetClone frames;
  :mod:`.compare` -- NetClone against no cloning and client-side cloning (``make bench``).
* :mod:`.cocotb_netclone` -- the RTL against the golden model.
"""
from netstor.offload import Offload

OFFLOAD = Offload(
    name="netclone",
    title="NetClone (dynamic request cloning)",
    udp_port=7431,
    program=f"{__name__}.program:make_netclone",
    header=f"{__name__}.header:HEADER",
    wire=f"{__name__}.header:wire",
    codec=f"{__name__}.codec:NetCloneCodec",
    schemes=f"{__name__}.schemes:SCHEMES",
    sim_schemes=f"{__name__}.sim:SIM_SCHEMES",
    evaluation=f"{__name__}.eval:EVALUATION",
    demo=f"{__name__}.demo:demo_step",
    frame_costs=f"{__name__}.demo:frame_costs",
    experiments=((f"{__name__}.compare", "netclone.json"),),
    cocotb=((f"{__name__}.cocotb_netclone", "test_netclone"),),
)
