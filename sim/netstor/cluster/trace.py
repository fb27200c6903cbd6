"""A short switch trace from the simulator, for replay on the model or the RTL.

``python -m netstor.cluster.trace --scheme NAME [--requests 50] [--load 0.3] --out FILE``
runs a rack (2 clients, 6 servers of 15 workers, Exp(25 us), the scheme's switch
configuration) and writes JSON: ``writes`` ``[[memory, address, word]]`` and ``regs``
``[[register, value]]`` (the configuration as control-plane writes on a fresh data plane,
:func:`netstor.compiler.config_ops`), ``n_ports``, and ``frames``: the switch's inputs in order,
each ``{t_ns, port, arrival, frame (hex), outputs: [{t_ns, port, frame}]}`` (recirculated
outputs with the frame that caused them). Replaying the inputs in order with their
``arrival`` on a data plane holding those writes must give every output byte for byte.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .rack import RackRun
from .service import ServiceTime
from .switch import cached_config_ops

__all__ = ["make_trace", "main"]


def make_trace(scheme, requests=50, load=0.3, seed=1, scheme_options=None, model_class=None,
               start_ns=0):
    svc = ServiceTime("exp:25")
    run = RackRun(scheme, scheme_options=scheme_options, clients=2, servers=6, workers=15,
                  service=svc, rate_rps=load * 90 / (svc.mean_ns / 1e9), requests=requests,
                  seed=seed, trace=1 << 30, model_class=model_class,
                  start_ns=start_ns)
    run.run()
    writes, regs = cached_config_ops(run.config)
    return {"scheme": run.scheme.name, "n_ports": run.switch.P,
            "writes": [list(w) for w in writes], "regs": [list(r) for r in regs],
            "frames": run.switch.trace_json()}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.cluster.trace",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--scheme", default="direct")
    ap.add_argument("--requests", type=int, default=50)
    ap.add_argument("--load", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    tr = make_trace(a.scheme, a.requests, a.load, a.seed)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(tr) + "\n")
    print(f"{len(tr['frames'])} frames, {sum(len(f['outputs']) for f in tr['frames'])} "
          f"outputs -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
