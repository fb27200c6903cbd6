"""XORInc: in-network erasure coding (Tang et al., MSST 2019), one folder. Protocol and the
payload element's semantics: ``docs/xorinc.md``.

* :mod:`.header` -- the 26-byte header, declared once (program view, agents, scapy, Lua);
  chunk data at frame byte 128.
* :mod:`.program` -- the data-plane program: NetRepair (decode coefficients per helper,
  REPAIRED to the requester) and NetUpdate (delta = old XOR new, copies scaled per parity)
  on the ``GFAccumulate`` payload element.
* :mod:`.config` -- the ``xorinc:`` configuration section (codes, stripe layout, the
  coefficient tables the controller computes, op-id ranges per client and their
  requesters).
* :mod:`.notify` -- the controller's timeout notifier: polls the engine's per-op expired
  counts (``xi.engine.expired``) and sends TIMEOUT to the op's requester; run by
  ``netstor xorinc notify CONFIG --device TARGET`` (the ``cli`` hook).

* :mod:`.cocotb_xorinc` -- NetRepair, NetUpdate and the engine's timeout on the whole core
  in Verilator (the ``cocotb`` hook: ``sim/test_core.py``'s shared build of the default core).

In the default bitstream: ``netstor.programs.default_pipeline()`` (``make rtl``, the
whole-core tests, the golden model, the test bed and the simulator) carries the program with
the payload engine in the frame path.
"""
from netstor.offload import Offload

OFFLOAD = Offload(
    name="xorinc",
    title="XORInc (in-network erasure coding: NetRepair, NetUpdate)",
    udp_port=7450,
    program=f"{__name__}.program:make_xorinc",
    header=f"{__name__}.header:HEADER",
    wire=f"{__name__}.header:wire",
    config_section=f"{__name__}.config:apply_section",
    codec=f"{__name__}.codec:XorIncCodec",
    schemes=f"{__name__}.schemes:SCHEMES",
    demo=f"{__name__}.demo:demo_step",
    evaluation=f"{__name__}.eval:EVALUATION",
    experiments=((f"{__name__}.bench_core", "xorinc_core.json"),),
    cocotb=((f"{__name__}.cocotb_xorinc", "test_netrepair"),
            (f"{__name__}.cocotb_xorinc", "test_netupdate"),
            (f"{__name__}.cocotb_xorinc", "test_timeout")),
    cli=f"{__name__}.notify:cli",
)
