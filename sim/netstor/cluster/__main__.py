"""``python -m netstor.cluster --scheme NAME [options]``: one rack run, its result as JSON
(per-scheme latency figures, throughput, timeouts, the switch's counters, events/s).

Example: ``python -m netstor.cluster --scheme netclone --servers 6 --workers 15
--service exp:25 --slow 0.01:15 --rate 1e6 --requests 20000``.
"""
from __future__ import annotations

import argparse
import json
import sys

from .rack import RackRun
from .scheme import sim_schemes
from .service import ServiceTime


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.cluster",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--scheme", default="direct", help=f"one of {sorted(sim_schemes())}")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="a scheme option (JSON value), repeatable")
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--servers", type=int, default=6)
    ap.add_argument("--workers", type=int, default=15)
    ap.add_argument("--service", default="exp:25")
    ap.add_argument("--slow", default=None, metavar="P:FACTOR",
                    help="per-request slowdown, e.g. 0.01:15")
    ap.add_argument("--rate", type=float, default=1e5, help="requests/s, all clients")
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout-us", type=float, default=10_000)
    ap.add_argument("--link-ns", type=int, default=1000)
    ap.add_argument("--gbps", type=float, default=100.0)
    a = ap.parse_args(argv)
    opts = {}
    for kv in a.option:
        k, _, v = kv.partition("=")
        try:
            opts[k] = json.loads(v)
        except json.JSONDecodeError:
            opts[k] = v
    p, f = (0.0, 1.0) if a.slow is None else map(float, a.slow.split(":"))
    r = RackRun(a.scheme, scheme_options=opts or None, clients=a.clients, servers=a.servers,
                workers=a.workers, service=ServiceTime(a.service, slow_p=p, slow_factor=f,
                                                       seed=a.seed),
                rate_rps=a.rate, requests=a.requests, seed=a.seed, timeout_us=a.timeout_us,
                link_ns=a.link_ns, gbps=a.gbps).run()
    json.dump(r, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
