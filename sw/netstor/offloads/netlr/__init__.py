"""NetLR: in-network leaderless replication (Kim & Lee, VLDB 2022), one folder. Protocol:
``docs/netlr.md``.

* :mod:`.header` -- the 26-byte header, declared once (program view, agents, scapy, Lua), the
  key -> (fingerprint, slot, group) rules.
* :mod:`.program` -- the data-plane program: switch-assigned write sequence, one copy per live
  replica of the group (copy-list multicast, each copy rewritten from its rid), ack
  aggregation in the inconsistent-object list, reads steered to the latest consistent replica
  or round robin.
* :mod:`.config` -- the ``netlr:`` configuration section (replica groups, rids, liveness).
* :mod:`.codec` / :mod:`.schemes` -- ``netstor-server``'s replicas (LMDB, per-object seq order,
  rejoin catch-up) and ``netstor-load``'s clients (NetLR, chain replication, Hermes-like).
* :mod:`netstor.lincheck` -- histories checked by porcupine; :mod:`.sim` / :mod:`.eval` -- the
  simulator's side and ``make eval``'s figures; :mod:`.demo` -- the test bed's switch and
  ``make demo``'s step.

In the default bitstream (``netstor.programs.default_pipeline()``, which ``make rtl`` and the
whole-core cocotb tests build): its cocotb case (:mod:`.cocotb_netlr`) runs in
``sim/test_core.py`` on the shared core build.
"""
from netstor.offload import Offload

OFFLOAD = Offload(
    name="netlr",
    title="NetLR (in-network leaderless replication)",
    udp_port=7460,
    program=f"{__name__}.program:make_netlr",
    header=f"{__name__}.header:HEADER",
    wire=f"{__name__}.header:wire",
    config_section=f"{__name__}.config:apply_section",
    codec=f"{__name__}.codec:NetLrCodec",
    schemes=f"{__name__}.schemes:SCHEMES",
    demo=f"{__name__}.demo:demo_step",
    evaluation=f"{__name__}.eval:EVALUATION",
    cocotb=((f"{__name__}.cocotb_netlr", "test_netlr"),),
)
