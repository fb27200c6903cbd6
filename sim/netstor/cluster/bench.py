"""The simulator's speed: one rack through the model switch, per scheme.

``python -m netstor.cluster.bench [--requests N] [--model default|compiled|interpreter]``
prints JSON: per scheme (``direct`` and every registered offload's simulator schemes, default
options) the events, wall and CPU seconds, events/s and requests simulated per minute (wall and
CPU: the machine may be shared), for 2 clients and 6 servers of 15 workers at 30 % of their
capacity (Exp(25 us) service), and which model class ran the switch (a scheme that does not
run on a rack is listed with its error). The target is >= 10^5 requests a minute on a rack
through the model switch.
"""
from __future__ import annotations

import argparse
import json
import sys

from .rack import RackRun
from .scheme import sim_schemes
from .service import ServiceTime

__all__ = ["bench", "main"]


def _model(name):
    if name == "interpreter":
        from netstor.model.dataplane import DataplaneModel
        return DataplaneModel
    if name == "compiled":
        from netstor.model.compiled import CompiledModel
        return CompiledModel
    return None


def bench(requests=20_000, model="default", schemes=None, seed=1):
    svc = ServiceTime("exp:25")
    rate = 0.3 * 90 / (svc.mean_ns / 1e9)
    out = {"setup": {"clients": 2, "servers": 6, "workers": 15, "service": svc.spec,
                     "rate_rps": rate, "requests": requests}, "schemes": {}}
    for name in schemes or sim_schemes():
        try:
            r = RackRun(name, clients=2, servers=6, workers=15, service=svc, rate_rps=rate,
                        requests=requests, seed=seed, model_class=_model(model)).run()
        except Exception as e:          # a scheme made for another topology (a fat tree)
            if schemes:
                raise
            out["schemes"][name] = {"error": f"{type(e).__name__}: {e}"}
            continue
        out["model"] = r["args"]["model"]
        p = r["perf"]
        p["frames_through_switch"] = r["switch"]["frames_in"] + r["switch"]["recirculated"]
        out["schemes"][name] = p
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.cluster.bench",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--model", default="default", choices=["default", "compiled", "interpreter"])
    ap.add_argument("--schemes", default=None, help="comma-separated (default: all)")
    a = ap.parse_args(argv)
    json.dump(bench(a.requests, a.model, a.schemes.split(",") if a.schemes else None),
              sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
