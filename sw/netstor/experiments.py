"""``python -m netstor.experiments --out build/bench [--offload NAME ...]``: the golden model's
speed, interpreter and compiled side by side (``model_speed.json``,
:func:`netstor.testbed.framecost.model_speed`), then every registered offload's experiments
(its ``experiments`` hook), each writing its JSON into ``--out`` (``make bench`` runs this
after the platform's own benchmark)."""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from netstor.offloads import offloads
from netstor.testbed.framecost import format_model_speed, write_model_speed

__all__ = ["main"]


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.experiments",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="build/bench", help="folder for the JSON results")
    ap.add_argument("--offload", action="append", help="only these offloads (default all)")
    ap.add_argument("--list", action="store_true", help="list the experiments and stop")
    ap.add_argument("--no-model-speed", action="store_true",
                    help="skip the model speed measurement")
    a = ap.parse_args(argv)
    failed = []
    if not (a.no_model_speed or a.offload):
        out = Path(a.out) / "model_speed.json"
        if a.list:
            print(f"model: python -m netstor.testbed.framecost --model both --out {out}")
        else:
            print(f"netstor.experiments: model speed (interpreter vs compiled) -> {out}",
                  flush=True)
            print(format_model_speed(write_model_speed(out)), flush=True)
    for off in offloads():
        if a.offload and off.name not in a.offload:
            continue
        for module, filename in off.experiments:
            out = Path(a.out) / filename
            if a.list:
                print(f"{off.name}: python -m {module} --out {out}")
                continue
            print(f"netstor.experiments: {off.name}: {module} -> {out}", flush=True)
            rc = importlib.import_module(module).main(["--out", str(out)])
            if rc:
                failed.append(f"{module} (exit {rc})")
    if failed:
        print("netstor.experiments: failed: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
