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

from .fattree import FatTreeRun
from .rack import RackRun
from .service import ServiceTime
from .switch import cached_config_ops

__all__ = ["make_trace", "make_fattree_trace", "busiest_switch", "main"]


def make_trace(scheme, requests=50, load=0.3, seed=1, scheme_options=None, model_class=None,
               start_ns=0, service="exp:25"):
    svc = ServiceTime(service)
    run = RackRun(scheme, scheme_options=scheme_options, clients=2, servers=6, workers=15,
                  service=svc, rate_rps=load * 90 / (svc.mean_ns / 1e9), requests=requests,
                  seed=seed, trace=1 << 30, model_class=model_class,
                  start_ns=start_ns)
    run.run()
    writes, regs = cached_config_ops(run.config)
    return {"scheme": run.scheme.name, "n_ports": run.switch.P,
            "writes": [list(w) for w in writes], "regs": [list(r) for r in regs],
            "frames": run.switch.trace_json()}


def busiest_switch(switches):
    """The switch of a run whose trace exercises the most: the most hits in tables other than
    the routes and the trust guard (an offload's own state), then the most frames."""
    def score(item):
        name, node = item
        hits = sum(v for k, v in node.counters().items()
                   if k.endswith(".hit") and not k.startswith("l3.") and ".trust." not in k)
        return hits, len(node.trace), name
    return max(switches.items(), key=score)


def make_fattree_trace(scheme, requests=40, load=0.3, seed=1, scheme_options=None,
                       model_class=None, start_ns=0, service="exp:2", k=4, clients=4,
                       servers=6, workers=4):
    """A trace of one switch of a small k-ary fat-tree run (:func:`busiest_switch`), for the
    schemes that need a fat tree (NetRS's). Same JSON as :func:`make_trace`, plus
    ``switch``: the traced switch's name."""
    svc = ServiceTime(service)
    run = FatTreeRun(scheme, scheme_options=scheme_options, k=k, clients=clients,
                     servers=servers, workers=workers, service=svc,
                     rate_rps=load * servers * workers / (svc.mean_ns / 1e9),
                     requests=requests, seed=seed, trace=1 << 30, model_class=model_class,
                     start_ns=start_ns)
    run.run()
    name, node = busiest_switch(run.switches)
    writes, regs = cached_config_ops(node.config)
    return {"scheme": run.scheme.name, "switch": name, "n_ports": node.P,
            "writes": [list(w) for w in writes], "regs": [list(r) for r in regs],
            "frames": node.trace_json()}


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
