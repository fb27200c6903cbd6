"""``python -m netstor.lincheck HISTORY.jsonl [--html FILE]``: check a history
file (JSON lines, see the package docstring) and print the checker's JSON report."""
from __future__ import annotations

import argparse
import json
import sys

from . import check


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m netstor.lincheck")
    ap.add_argument("history", help="JSON lines, one operation each")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--html", help="write porcupine's visualization here")
    args = ap.parse_args(argv)
    with open(args.history) as f:
        ops = [json.loads(line) for line in f if line.strip()]
    rep = check(ops, timeout=args.timeout, html=args.html)
    print(json.dumps(rep))
    return 0 if rep["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
