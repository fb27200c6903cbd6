"""Runs on a fat tree (FatTreeRun) and the large-N Zipf key sampler."""
import math

import numpy as np
import pytest

from netstor.cluster.fattree import FatTreeRun, deploy
from netstor.cluster.keys import ZipfKeys
from netstor.cluster.switch import BASE_CYCLES, CLOCK_NS
from netstor.cluster.topology import FatTree


def _run(seed=3, **kw):
    args = dict(k=4, clients=5, servers=4, workers=2, service="exp:50", rate_rps=20_000,
                requests=1_500, seed=seed, link_ns=2_000, keys=(1000, 0.99), timeout_us=50_000)
    args.update(kw)
    return FatTreeRun("direct", **args)


def test_deployment_distinct_hosts_servers_kept_across_client_counts():
    tree = FatTree(4)
    c5, s5 = deploy(tree, 5, 4, seed=7)
    c9, s9 = deploy(tree, 9, 4, seed=7)
    assert not set(c5) & set(s5) and len(set(c5)) == 5 and len(set(s5)) == 4
    assert s5 == s9 and set(c5) <= set(c9)
    assert deploy(tree, 5, 4, seed=8) != (c5, s5)
    with pytest.raises(ValueError):
        deploy(tree, 13, 4, seed=1)


def test_every_request_answered_deterministic_per_seed():
    r1 = _run().run()
    r2 = _run().run()
    r3 = _run(seed=4).run()
    assert r1["measured"] == 1_350 and r1["timeouts"] == 0
    assert r1["switch"]["unknown_mac"] == 0 and not r1["hosts_dropped"]
    assert sum(s["served"] for s in r1["servers"]) == 1_500
    strip = lambda r: {k: v for k, v in r.items() if k != "perf"}  # noqa: E731
    assert strip(r1) == strip(r2)
    assert strip(r1) != strip(r3)


def test_released_models_give_the_same_runs():
    """A run on models from the pool (reset after an earlier run of another scheme and seed)
    gives exactly the result of a run on freshly built models."""
    from netstor.cluster import switch
    switch._POOL.clear()
    fresh = _run(seed=5).run(release=False)
    _run(seed=9, requests=800).run(release=True)
    pooled = _run(seed=5)
    assert all(not switch._POOL.get(k) for k in switch._POOL)     # every model reused
    again = pooled.run(release=True)
    strip = lambda r: {k: v for k, v in r.items() if k != "perf"}  # noqa: E731
    assert strip(again) == strip(fresh)
    assert all(node.model is None for node in pooled.switches.values())


def test_latency_is_at_least_the_path():
    run = _run(service="const:0", requests=300, rate_rps=1_000)
    run.run()
    frame = 14 + 20 + 8 + 32
    pass_ns = CLOCK_NS * ((frame + 63) // 64 + BASE_CYCLES)
    tree = run.tree
    for c in run.clients:
        for i in range(c.n):
            # a request and its reply cross the same number of switches each way
            lat = int(c.latency[i])
            hops = [tree.forwards(c.host.name, s) for s in run.server_hosts]
            lo = min(2 * ((h + 1) * 2_000 + h * pass_ns) for h in hops)
            assert lat >= lo


def test_zipf_keys_head_exact_tail_mass():
    n, theta = 10**6, 0.99
    z = ZipfKeys(n, theta, head=1000)
    exact = np.arange(1, n + 1, dtype=np.float64) ** -theta
    assert z.total == pytest.approx(exact.sum(), rel=1e-8)
    assert z.p(0) == pytest.approx(exact[0] / exact.sum(), rel=1e-8)
    assert z.p(5000) == pytest.approx(exact[5000] / exact.sum(), rel=1e-8)
    s = z.sample(np.random.default_rng(1), 400_000)
    assert s.min() >= 0 and s.max() < n
    for k in (0, 1, 9):
        p = exact[k] / exact.sum()
        assert abs((s == k).mean() - p) < 5 * math.sqrt(p / 400_000)
    tail = exact[1000:].sum() / exact.sum()
    assert abs((s >= 1000).mean() - tail) < 5 * math.sqrt(tail / 400_000)
    # within the tail: the share beyond rank 10^5 (continuous part)
    far = exact[100_000:].sum() / exact.sum()
    assert abs((s >= 100_000).mean() - far) < 5 * math.sqrt(far / 400_000)
    # very many keys: the hot key's probability is the analytic one
    big = ZipfKeys(10**8, theta)
    assert 0.045 < big.p(0) < 0.05
