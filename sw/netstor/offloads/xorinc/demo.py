"""XORInc in the test bed: the model switch with XORInc's program.

XORInc is not in the default bitstream (``bitstream=False``), so the test bed's switch
(``python -m netstor.testbed.switch``, the default pipeline) does not carry it.
``python -m netstor.offloads.xorinc.demo switch --config FILE [--stats-json FILE]
[--port0 p0 --port1 p1]`` runs the same model switch on
``default_pipeline(extra=("xorinc",))`` with copy-list multicast groups: the configuration's
routes and other sections as the switch applies them (:func:`netstor.compiler.config_ops`),
its ``xorinc:`` section as the controller computes it (:func:`.config.model_writes`:
coefficients, copy lists, the engine's timeout). It prints the switch's ready line and, on
SIGTERM, its final counters, like the generic switch. (No ``--control``: the control
window's schema is the default bitstream's.)
"""
from __future__ import annotations

import argparse
import sys

from netstor.compiler import config_ops
from netstor.config import load_config
from netstor.programs import default_pipeline
from netstor.testbed.stats import format_stats
from netstor.testbed.switch import _Stop, run_model_switch

from .config import model_writes

__all__ = ["xorinc_pipeline", "switch_ops", "main"]


def xorinc_pipeline(n_ports=2):
    return default_pipeline(n_ports, extra=("xorinc",))


def switch_ops(config, pipeline):
    """``(writes, regs)`` for a model of ``pipeline``: the configuration without its
    ``xorinc:`` section through the generic loader, then the section's writes."""
    cfg = dict(config)
    section = cfg.pop("xorinc", None)
    writes, regs = config_ops(cfg)
    writes = list(writes)
    if section is not None:
        writes += model_writes(pipeline, section)[1]
    return writes, list(regs)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.offloads.xorinc.demo",
                                 description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sw = sub.add_parser("switch", help="the model switch with XORInc's program")
    sw.add_argument("--port0", default="p0")
    sw.add_argument("--port1", default="p1")
    sw.add_argument("--config", required=True, help="table configuration (YAML/TOML/JSON)")
    sw.add_argument("--stats-json", default=None)
    args = ap.parse_args(argv)
    pipeline = xorinc_pipeline(2)
    try:
        writes, regs = switch_ops(load_config(args.config), pipeline)
    except ValueError as e:
        print(f"xorinc switch: error: {e}", file=sys.stderr)
        return 1
    stop = _Stop()
    stop.install()
    try:
        final = run_model_switch([args.port0, args.port1], writes, regs,
                                 stats_json=args.stats_json, stop=stop,
                                 pipeline=pipeline, groups="list")
    finally:
        stop.restore()
    print(format_stats(final), flush=True)
    return 1 if final.get("error") else 0


if __name__ == "__main__":
    sys.exit(main())
