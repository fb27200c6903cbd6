"""NICE: network-integrated key-value storage (Al-Kiswany et al., HPDC 2017), one folder.
Protocol: ``docs/nice.md``.

* :mod:`.header` -- the 26-byte header, declared once, and the key -> vnode -> subgroup ->
  partition rules.
* :mod:`.program` -- the data-plane program: two vrings (unicast: gets to the division's
  replica or the primary; multicast: puts and timestamps through the partition's copy list,
  each copy rewritten from its rid); no register banks, no per-object state.
* :mod:`.config` -- the ``nice:`` configuration section (nodes, partitions, subgroups,
  divisions, failed / handoff / rejoining members) -> table entries and copy lists, a pure
  function the metadata service reuses.
* :mod:`.metadata` -- the metadata service's membership logic (heartbeats, failure
  detection, handoff, two-phase rejoin, primary promotion), written as diffed table writes;
  its view is ``netstor nice view CONFIG`` (the ``cli`` hook).
* :mod:`.codec` / :mod:`.schemes` -- ``netstor-server``'s storage nodes (NICE-2PC on LMDB,
  handoff, catch-up, promotion, the NOOB baselines) and the clients: the history-recording
  ones and ``netstor-load --scheme nice``.

* :mod:`.cocotb_nice` -- the program on the whole core in Verilator (the ``cocotb`` hook:
  ``sim/test_core.py``'s shared build of the default core).

In the default bitstream: ``netstor.programs.default_pipeline()`` (``make rtl``, the
whole-core tests, the golden model, the test bed and the simulator).
"""
from netstor.offload import Offload

OFFLOAD = Offload(
    name="nice",
    title="NICE (network-integrated key-value storage)",
    udp_port=7470,
    program=f"{__name__}.program:make_nice",
    header=f"{__name__}.header:HEADER",
    wire=f"{__name__}.header:wire",
    config_section=f"{__name__}.config:apply_section",
    codec=f"{__name__}.codec:NiceCodec",
    schemes=f"{__name__}.schemes:SCHEMES",
    demo=f"{__name__}.demo:demo_step",
    evaluation=f"{__name__}.eval:EVALUATION",
    cocotb=((f"{__name__}.cocotb_nice", "test_nice"),),
    cli=f"{__name__}.metadata:cli",
)
