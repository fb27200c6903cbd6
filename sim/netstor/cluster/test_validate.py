"""The simulator's M/M/c server against Erlang C: mean and p99 of the response time within
2 % (fixed seed; 250k requests at rho 0.5: across seeds the errors spread by about +-0.4 %)."""
from netstor.cluster.validate import mmc_check, mmc_rack_check


def test_mmc_against_erlang_c():
    r = mmc_check(c=4, rho=0.5, mean_us=25.0, requests=250_000, seed=0)
    print(r)
    assert r["timeouts"] == 0 and r["measured"] > 200_000
    assert abs(r["mean_err_pct"]) < 2.0
    assert abs(r["p99_err_pct"]) < 2.0


def test_mmc_through_the_rack_switch_against_erlang_c():
    """The same queue behind the model switch: latency minus the fixed network part (cables,
    two passes of beats + BASE_CYCLES, serialisation) is the M/M/c response time; the fastest
    request took exactly the fixed part plus its service."""
    r = mmc_rack_check(c=4, rho=0.5, mean_us=25.0, requests=150_000, seed=0)
    print(r)
    assert r["timeouts"] == 0 and r["min_latency_ns"] >= r["network_fixed_ns"]
    assert abs(r["mean_err_pct"]) < 2.0
    assert abs(r["p99_err_pct"]) < 2.0


def test_server_is_a_fifo_multi_worker_queue_request_by_request():
    """Every response time equals an independent FIFO c-server recursion (Kiefer-Wolfowitz:
    each arrival starts on the earliest-free worker) fed the same arrival times and the same
    per-request service draws."""
    import heapq

    import numpy as np

    from netstor.cluster.host import SERVICE_STRIDE
    from netstor.cluster.rng import Streams
    from netstor.cluster.service import ServiceTime
    from netstor.cluster import validate

    seen = {}
    orig = validate.Client

    class Spy(orig):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            seen["client"] = self
    validate.Client = Spy
    try:
        validate.mmc_check(c=3, rho=0.85, requests=20_000, seed=9)
    finally:
        validate.Client = orig
    cl = seen["client"]
    svc, u = ServiceTime("exp:25.0"), Streams(9).counter("service/u")
    free = [0] * 3
    expect = []
    for i, t in enumerate(cl.arrivals.tolist()):
        start = max(t, heapq.heappop(free))
        s = svc.ns(u.uniform(i * SERVICE_STRIDE))
        heapq.heappush(free, start + s)
        expect.append(start + s - t)
    assert np.array_equal(cl.latency, np.array(expect))
