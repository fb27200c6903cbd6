from collections import Counter

import pytest

from netstor.offloads.netrs.topology import AGG, CORE, TOR, FatTree, accelerator_capacity


@pytest.mark.parametrize("k", [4, 8, 16])
def test_fat_tree_shape(k):
    t = FatTree(k)
    h = k // 2
    assert len(t.cores) == h * h and len(t.aggs) == k * h and len(t.tors) == k * h
    assert len(t.hosts) == k ** 3 // 4
    for s in t.switches:
        assert len(t.neighbors(s)) == k                    # every switch has k ports
    for host in t.hosts:
        assert t.neighbors(host) == [t.hosts[host].tor]
    assert len(set(x.ip for x in t.hosts.values())) == len(t.hosts)
    assert len(t.operators) == len(t.switches)            # one accelerator per switch
    assert Counter(o.tier for o in t.operators.values()) == {CORE: h * h, AGG: k * h, TOR: k * h}


def test_distances_and_tiers():
    t = FatTree(4)
    assert t.distance("h0_0_0", "h0_0_1") == 2 and t.forwards("h0_0_0", "h0_0_1") == 1
    assert t.forwards("h0_0_0", "h0_1_0") == 3 and t.forwards("h0_0_0", "h1_0_0") == 5
    assert [t.traffic_tier("h0_0_0", x) for x in ("h0_0_1", "h0_1_0", "h3_1_1")] == [2, 1, 0]
    assert t.next_hops("t0_0", "c0") == ["a0_0"]
    assert t.next_hops("t0_0", "h1_0_0") == ["a0_0", "a0_1"]
    assert t.on_shortest_path("c2", "h0_0_0", "h1_0_0")
    assert not t.on_shortest_path("a0_0", "h0_0_0", "h0_0_1")


def test_accelerators_and_capacity():
    assert accelerator_capacity() == pytest.approx(50_000)
    t = FatTree(4, accelerators={"c0": 2, "t0_0": 1}, capacities={"c0/acc1": 7.0})
    assert sorted(t.operators) == ["c0/acc0", "c0/acc1", "t0_0/acc0"]
    assert t.operators["c0/acc1"].capacity == 7.0
    assert t.operators_of_switch("c0") == ["c0/acc0", "c0/acc1"]
    with pytest.raises(ValueError):
        FatTree(5)
