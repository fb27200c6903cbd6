"""The simulator against closed forms: an M/M/c server.

:func:`mmc_check` runs one storage server with ``c`` workers and exponential service behind a
back-to-back cable of zero latency to one open-loop Poisson client (so the measured latency is
exactly the response time, waiting + service) and compares the mean and the p99 of the
measured response times with :mod:`netstor.cluster.erlang`; :func:`mmc_rack_check` does the
same through a rack's model switch, with the network's fixed latency subtracted.

``python -m netstor.cluster.validate [--requests N] [--seeds 0,1,2] [--rack]`` prints the JSON.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import types

import numpy as np

from .engine import Sim
from .erlang import erlang_c, mmc_mean_response, mmc_response_quantile
from .host import Client, Host, Server
from .net import Network
from .rng import Streams
from .scheme import Direct
from .service import ServiceTime

__all__ = ["mmc_check", "mmc_rack_check", "erlang_c_summary", "main"]


def mmc_check(*, c=4, rho=0.5, mean_us=25.0, requests=250_000, seed=0, warmup=0.05):
    """One M/M/c run; the result has the measured and the Erlang-C figures and the errors
    in percent (``mean_err_pct``, ``p99_err_pct``: measured / theory - 1)."""
    mu = 1e3 / mean_us                        # per worker, per us -> per ns below
    lam_per_ns = rho * c / (mean_us * 1e3)
    streams = Streams(seed)
    sim = Sim()
    net = Network(sim)
    cm, sm = b"\x02\0\0\0\0\x01", b"\x02\0\0\0\0\x02"
    ch = Host(net, "client", cm, "10.0.0.1", sm)
    sh = Host(net, "server", sm, "10.0.0.2", cm)
    net.connect(ch, 0, sh, 0, latency_ns=0, gbps=None)
    svc = ServiceTime(f"exp:{mean_us}", seed=seed)
    server = Server(sh, 0, 1, c, svc, (streams.counter("service/u"), streams.counter("service/v")))
    scheme = Direct()
    gaps = streams.generator("arrivals/0").standard_exponential(requests) / lam_per_ns
    arr = np.floor(np.cumsum(gaps)).astype(np.int64)
    client = Client(ch, 0, scheme, arr, stride=1, offset=0, timeout_ns=10**15)
    client.picks = streams.generator("picks/0").random(requests).tolist()
    client.keys = list(range(requests))
    scheme.setup(types.SimpleNamespace(clients=[client], servers=[server]))
    client.start()
    sim.run()
    first = math.ceil(warmup * requests)
    lat, to = client.samples(first)
    lat = lat.astype(np.float64) / 1e3       # us
    mean_th = mmc_mean_response(rho * c / mean_us, 1.0 / mean_us, c)
    p99_th = mmc_response_quantile(0.99, rho * c / mean_us, 1.0 / mean_us, c)
    mean_sim, p99_sim = float(lat.mean()), float(np.percentile(lat, 99))
    return {"c": c, "rho": rho, "mean_service_us": mean_us, "requests": requests,
            "measured": int(lat.size), "timeouts": int(to.sum()), "seed": seed,
            "erlang_c": round(erlang_c(c, rho * c), 6),
            "mean_us": {"sim": round(mean_sim, 4), "theory": round(mean_th, 4)},
            "p99_us": {"sim": round(p99_sim, 4), "theory": round(p99_th, 4)},
            "mean_err_pct": round(100 * (mean_sim / mean_th - 1), 3),
            "p99_err_pct": round(100 * (p99_sim / p99_th - 1), 3),
            "events": sim.events, "wall_s": round(sim.wall_s, 3),
            "events_per_s": round(sim.events_per_s)}


def mmc_rack_check(*, c=4, rho=0.5, mean_us=25.0, requests=150_000, seed=0, warmup=0.05,
                   link_ns=1_000, gbps=100.0, model_class=None):
    """The same M/M/c server in a rack (one client, one server behind the model switch):
    the measured latency minus the network's fixed part -- four cables, two switch passes
    (beats + BASE_CYCLES each), the frames' serialisation -- against Erlang C."""
    from .frames import wire_bytes
    from .rack import RackRun
    from .switch import CLOCK_NS, pass_cycles
    run = RackRun("direct", clients=1, servers=1, workers=c, service=f"exp:{mean_us}",
                  rate_rps=rho * c / (mean_us * 1e-6), requests=requests, seed=seed,
                  warmup=warmup, timeout_us=1e9, link_ns=link_ns, gbps=gbps,
                  model_class=model_class)
    res = run.run()
    frame = 14 + 20 + 8 + 32                     # request and reply: headers + storage header
    ser = 0 if gbps is None else -(-wire_bytes(frame) * round(8000 / gbps) // 1000)
    fixed = 4 * link_ns + 2 * pass_cycles(frame) * CLOCK_NS + 4 * ser
    cl = run.clients[0]
    first = math.ceil(warmup * cl.n)
    lat, to = cl.samples(first)
    lat = (lat.astype(np.float64) - fixed) / 1e3
    mean_th = mmc_mean_response(rho * c / mean_us, 1.0 / mean_us, c)
    p99_th = mmc_response_quantile(0.99, rho * c / mean_us, 1.0 / mean_us, c)
    mean_sim, p99_sim = float(lat.mean()), float(np.percentile(lat, 99))
    return {"c": c, "rho": rho, "mean_service_us": mean_us, "requests": requests,
            "measured": int(lat.size), "timeouts": int(to.sum()), "seed": seed,
            "network_fixed_ns": fixed, "min_latency_ns": int(cl.latency[first:].min()),
            "mean_us": {"sim": round(mean_sim, 4), "theory": round(mean_th, 4)},
            "p99_us": {"sim": round(p99_sim, 4), "theory": round(p99_th, 4)},
            "mean_err_pct": round(100 * (mean_sim / mean_th - 1), 3),
            "p99_err_pct": round(100 * (p99_sim / p99_th - 1), 3),
            "model": res["args"]["model"], "perf": res["perf"]}


def erlang_c_summary(*, requests=250_000, rack_requests=150_000, seed=0):
    """Both checks at the tests' settings (c = 4, rho = 0.5, Exp(25 us)): the summary keys
    ``erlang_c_mean_err_pct`` / ``erlang_c_p99_err_pct`` (the larger error of the two, in
    absolute value, with its sign) and each check's result."""
    a = mmc_check(c=4, rho=0.5, mean_us=25.0, requests=requests, seed=seed)
    b = mmc_rack_check(c=4, rho=0.5, mean_us=25.0, requests=rack_requests, seed=seed)

    def worst(key):
        return max((a[key], b[key]), key=abs)
    return {"erlang_c_mean_err_pct": worst("mean_err_pct"),
            "erlang_c_p99_err_pct": worst("p99_err_pct"),
            "servers_only": a, "rack": b}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.cluster.validate",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=250_000)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--c", type=int, default=4)
    ap.add_argument("--rho", type=float, default=0.5)
    ap.add_argument("--rack", action="store_true", help="through a rack's model switch")
    a = ap.parse_args(argv)
    check = mmc_rack_check if a.rack else mmc_check
    out = [check(c=a.c, rho=a.rho, requests=a.requests, seed=int(s))
           for s in a.seeds.split(",")]
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
