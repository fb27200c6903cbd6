"""What an offload is, for the generic layers: one :class:`Offload` per offload folder.

An offload (NetClone, NetRS, ...) lives in one folder, ``sw/netstor/offloads/<name>/`` (or any
importable package outside this tree), whose ``__init__.py`` sets ``OFFLOAD = Offload(...)``
and registers it in one place (:mod:`netstor.offloads`). The generic layers (pipeline,
configuration format, wire registry, storage server, load generator, test bed, benchmarks,
core cocotb tests) read the description and name no offload.

Every hook is a ``"module:attribute"`` string, imported only when that layer needs it: an agent
that speaks the offload never imports Amaranth, and the registry never creates an import cycle.
See ``docs/adding-an-offload.md``.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

__all__ = ["Offload", "resolve"]


def resolve(ref):
    """The object named by ``"package.module:attribute"``."""
    mod, sep, attr = ref.partition(":")
    if not sep or not attr:
        raise ValueError(f"{ref!r}: expected 'module:attribute'")
    obj = importlib.import_module(mod)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass(frozen=True)
class Offload:
    """One offload, as the generic layers see it.

    * ``name``: identifier (``netclone``); its config section, CLI flags and result keys.
    * ``title``: one line for humans.
    * ``udp_port``: the UDP port its packets use (the parser's default for the program).
    * ``program``: ``f(n_ports) -> netstor.lang.Program``, its data-plane program, appended to
      the default bitstream's pipeline in registry order.
    * ``routed_by_l3``: the built-in L3 program routes the offload's packets too.
    * ``config_section``: ``f(device, value, dry_run)`` applying its top-level section of a
      configuration file (the section is named ``name``).
    * ``header``: its :class:`netstor.wire.header.Header` (``"module:HEADER"``), the one
      declaration the program, the agents and the wire tools share.
    * ``wire``: ``f(register)`` declaring its headers to :mod:`netstor.wire.registry` (scapy
      layers, Wireshark dissector) with enums, info fields, hex fields, a title; without it
      ``header`` is registered plainly as ``netstor_<name>`` on ``udp_port``.
    * ``codec``: the storage server's side (:class:`netstor.agent.codec.ServerCodec`): its
      socket, request header and reply header.
    * ``schemes``: ``{scheme name: netstor.agent.schemes.Scheme subclass}`` it adds to
      ``netstor-load``.
    * ``sim_schemes``: ``{scheme name: netstor.cluster.scheme.SimScheme subclass}`` it adds
      to the cluster simulator (:mod:`netstor.cluster`): what a simulated client does per
      request (destination, offload header, copies) and any logic on extra hosts.
    * ``demo``: ``f(rack, workdir, rate=, duration=) -> (result dict, line)``, one
      ``make demo`` step on the running rack.
    * ``frame_costs``: ``f(rack, n, model="compiled") -> {frame kind: us}``, the model
      switch's cost of its frames, the median of ``n`` (``netstor.testbed.framecost``;
      ``model``: ``"compiled"`` or ``"interpreter"``).
    * ``experiments``: ``(module, result file name)`` pairs; each module's ``main(argv)`` takes
      ``--out FILE``; ``make bench`` runs them all (``python -m netstor.experiments``).
    * ``evaluation``: its part of ``make eval`` (:mod:`netstor.evaluation`): an object with
      ``name``, ``tasks(scale, seed) -> [netstor.evaluation.runner.Task]`` (the simulation
      runs, each a ``"module:function"`` and keyword arguments) and ``summarise(results,
      out_dir, scale=) -> netstor.evaluation.report.Section`` (its summary, report section and
      plots).
    * ``cocotb``: ``(cocotb module, test)`` pairs run on the shared Verilator build of the
      whole core against the golden model (``sim/test_core.py``).
    * ``bitstream``: its program is in the default bitstream's pipeline
      (``netstor.programs.default_pipeline()``, ``make rtl``, the whole-core tests). ``False``:
      an offload the gateware does not carry yet; its program joins a pipeline only when
      named (``default_pipeline(extra=(name,))``: the model, the test bed, the simulator).
    * ``cli``: ``f(parser) -> run``, its own commands in the ``netstor`` CLI (``netstor
      <name> ...``, :mod:`netstor.cli`): ``f`` adds the sub-commands and options to
      ``parser`` (the ``argparse`` parser of ``netstor <name>``) and returns ``run(args) ->
      exit status``, called with the parsed namespace (the global ``--device``, ``--schema``,
      ``--json`` included; :func:`netstor.cli.open_device` opens the target). ``run`` raises
      :class:`netstor.cli.UsageError` for a bad argument or input (exit status 2), other
      errors as the built-in commands do (1). Resolved only when ``netstor <name>`` runs;
      ``netstor --help`` lists the command with ``title``.
    """
    name: str
    title: str
    udp_port: int
    program: str
    routed_by_l3: bool = True
    config_section: str | None = None
    header: str | None = None
    wire: str | None = None
    codec: str | None = None
    schemes: str | None = None
    sim_schemes: str | None = None
    demo: str | None = None
    frame_costs: str | None = None
    experiments: tuple = ()
    evaluation: str | None = None
    cocotb: tuple = ()
    bitstream: bool = True
    cli: str | None = None

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError(f"offload name {self.name!r} must be an identifier")
        if not 0 < self.udp_port < 65536:
            raise ValueError(f"offload {self.name}: UDP port {self.udp_port} out of range")

    def hook(self, field):
        """The object behind hook ``field`` (None when the offload has none)."""
        ref = getattr(self, field)
        return None if ref is None else resolve(ref)

    def make_program(self, n_ports=2):
        return resolve(self.program)(n_ports)
