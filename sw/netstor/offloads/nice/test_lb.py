"""NICE's get divisions in the simulator (the paper's figure 10, section 6.5), against
independent references: with divisions, the switch hands each get to the replica of its
client's division (the per-replica counts equal those computed from the operation list by the
paper's rule, and the shares lie within a bound computed from the binomial); without them,
every get goes to the primary (the switch model's division counters say so too); primary-only
serves every get at the primary, 2PC's client-side choice spreads them like the divisions;
gets of a locked object wait for the commit, and the versions the gets return are ordered as
real time orders the operations."""
from __future__ import annotations

import math

import numpy as np
import pytest

from netstor.offloads.nice.sim import NiceRun, key_pool, lb_run, model_available

SWITCH = "model" if model_available() else "ref"


def _binomial_bound(n, p, alpha):
    """The smallest c with P(|X - n p| > c) <= alpha for X ~ Binomial(n, p) (exact sums)."""
    pmf = [math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(n + 1)]
    mean = n * p
    for c in range(n + 1):
        if sum(q for k, q in enumerate(pmf) if abs(k - mean) > c) <= alpha:
            return c
    return n


def _get_run(divisions, *, R=4, clients=8, n=400, seed=5):
    """Gets of one stored 4-byte object, open loop (one every 40 us), each from a client drawn
    uniformly at random."""
    key = key_pool(1, seed, prefix="div")[0]
    who = np.random.default_rng(seed).integers(0, clients, n)
    ops = [[] for _ in range(clients)]
    for k, c in enumerate(who.tolist()):
        ops[c].append(("get", key, 4, k * 40e-6))
    run = NiceRun("nice", replicas=R, clients=clients, ops=ops, seed=seed, switch=SWITCH,
                  divisions=divisions)
    reps = run.replicas_of(run.part_of(key))
    for m in reps:
        run.nodes[m - 1].store[key] = (1, 0, 0, 4)
    run.run()
    assert all(all(c.ok) for c in run.clients if c.ops)
    return run, who, [run.nodes[m - 1] for m in reps]


def _division_counters(run):
    c = run.switch.counters()
    if SWITCH == "model":
        return c["nice.divisions.hit"], c["nice.divisions.miss"]
    return c["nice.division"], c["nice.unicast"] - c["nice.division"]


def test_divisions_spread_gets_over_the_replicas_within_the_binomial_bound():
    R, clients, n = 4, 8, 400
    run, who, nodes = _get_run(True, R=R, clients=clients, n=n)
    got = [x.gets_in for x in nodes]
    # the paper's rule: a get goes to the replica of the division holding its source; the
    # simulator's divisions give client i's /32 to member i mod R
    expect = [int(np.sum(who % R == k)) for k in range(R)]
    assert got == expect and [x.gets_served for x in nodes] == expect
    # each client is equally likely: a replica's count ~ Binomial(n, 1/R); the bound holds
    # for all R replicas with probability >= 1 - 1e-6
    c = _binomial_bound(n, 1 / R, 1e-6 / R)
    assert 0 < c < n / R
    assert all(abs(g - n / R) <= c for g in got), (got, c)
    assert all(g > 0 for g in got)
    # the switch matched every get in a division (none went to the primary by default)
    assert _division_counters(run) == (n, 0)


def test_without_divisions_every_get_goes_to_the_primary():
    n = 400
    run, _, nodes = _get_run(False, n=n)
    assert [x.gets_in for x in nodes] == [n, 0, 0, 0]
    assert _division_counters(run) == (0, n)


def test_baselines_route_gets_as_the_paper_says():
    R, n = 5, 12
    pb = lb_run("pb", 4, R, n=n, get_only=True)
    tpc = lb_run("2pc", 4, R, n=n, get_only=True)
    nice = lb_run("nice", 4, R, n=n, get_only=True, switch=SWITCH)
    nodiv = lb_run("nice", 4, R, n=n, get_only=True, switch=SWITCH, divisions=False)
    # R-1 get clients (1 .. R-1): client i's division is replica i
    assert pb["gets_in"] == [(R - 1) * n] + [0] * (R - 1)
    assert tpc["gets_in"] == nice["gets_in"] == [0] + [n] * (R - 1)
    assert nodiv["gets_in"] == pb["gets_in"]
    # the same gets served by one node take longer than spread over R-1
    assert pb["get_us"] > 1.5 * nice["get_us"]
    with pytest.raises(ValueError):
        NiceRun("rac", consistency="pb", divisions=True)


@pytest.mark.parametrize("system", ["nice", "2pc", "pb"])
def test_gets_of_the_popular_object_are_ordered_by_real_time(system):
    r = lb_run(system, 4, 5, n=60, history=True, switch=SWITCH if system == "nice" else "ref")
    assert r["failed"] == 0
    h = r["history"]
    puts = sorted((s, e, ts) for c, k, s, e, ts in h if k == "put")
    gets = [(s, e, ts) for c, k, s, e, ts in h if k == "get"]
    assert len(puts) == 60 and len(gets) == 4 * 60
    # the one writer's versions grow
    assert all(a[2] < b[2] for a, b in zip(puts, puts[1:]))
    for s, e, ts in gets:
        # not older than the last put acknowledged before the get began, not newer than the
        # last put begun before it ended
        before = [p[2] for p in puts if p[1] < s]
        begun = [p[2] for p in puts if p[0] < e]
        assert ts >= (before[-1] if before else 1)
        assert ts <= (max(begun) if begun else 1)
    # a get that ended before another began returned no newer a version
    order = sorted(gets, key=lambda g: g[1])
    ends = np.array([g[1] for g in order])
    best = np.maximum.accumulate(np.array([g[2] for g in order]))
    for s, e, ts in gets:
        k = int(np.searchsorted(ends, s, side="left"))
        if k:
            assert ts >= best[k - 1]
    if system == "pb":
        assert r["gets_waited"] == 0
    else:
        # locks: some gets found the object locked and waited for the commit
        assert r["gets_waited"] > 0 and r["lock_wait_us"] > 0


@pytest.mark.skipif(not model_available(), reason="NICE's program / config not there")
def test_figure10_run_on_the_model_equals_the_reference_rules():
    a = lb_run("nice", 4, 3, n=30, switch="model")
    b = lb_run("nice", 4, 3, n=30, switch="ref")
    assert a["model"].startswith("CompiledModel") and b["model"] == "RefNice"
    for k in ("mean_op_us", "get_us", "put_us", "gets_in", "gets_waited", "events"):
        assert a[k] == b[k], k
