"""Fat trees in the simulator: every host reaches every other host through the switches'
data planes, on a shortest path (TTL), with the latency of its hops; the routes fit the
table at k = 16 and k = 32."""
import pytest

from netstor.cluster.engine import Sim
from netstor.cluster.net import Network
from netstor.cluster.switch import BASE_CYCLES
from netstor.cluster.topology import FatTree, build_fat_tree, route_config
from netstor.model.dataplane import DataplaneModel


def test_every_host_reaches_every_host_on_a_shortest_path():
    tree = FatTree(4)
    sim = Sim()
    net = Network(sim)
    ft = build_fat_tree(net, tree, link_ns=1000, model_class=DataplaneModel)
    got = {}
    for name, h in ft.hosts.items():
        h.bind(9000, lambda v, name=name: got.setdefault((v.src_ip, name), (v.ttl, sim.now)))
    names = list(ft.hosts)
    t0 = {}
    for i, a in enumerate(names):
        for b in names:
            if a != b:
                start = (i * len(names) + names.index(b)) * 100_000
                t0[(ft.hosts[a].ip, b)] = start
                sim.at(start, ft.hosts[a].send, ft.hosts[b].ip, 9000, 9000, b"hello")
    sim.run()
    assert len(got) == len(names) * (len(names) - 1)
    frame_len = 14 + 20 + 8 + 5
    pass_ns = 4 * ((frame_len + 63) // 64 + BASE_CYCLES)
    for (src_ip, dst), (ttl, t) in got.items():
        src = next(n for n, h in ft.hosts.items() if h.ip == src_ip)
        switches = tree.forwards(src, dst)
        assert ttl == 64 - switches
        assert t - t0[(src_ip, dst)] == (switches + 1) * 1000 + switches * pass_ns
    # no frame went astray
    assert all(sw.unknown_mac == 0 and sw.to_host == 0 for sw in ft.switches.values())
    assert all(not any(h.dropped.values()) for h in ft.hosts.values())


@pytest.mark.parametrize("k", [16, 32])
def test_routes_fit_the_table(k):
    tree = FatTree(k)
    for name in ("t0_0", "a0_0", "c0"):
        assert len(route_config(tree, name)["tables"]["l3.routes"]["entries"]) <= 64
    assert len(route_config(tree, "t0_0")["tables"]["l3.routes"]["entries"]) == \
        k // 2 + k - 1 + k // 2 - 1


def test_ecmp_spreads_over_aggregation_switches():
    tree = FatTree(8)
    nexts = {e["params"]["dmac"] for e in route_config(tree, "t0_0")["tables"]["l3.routes"]
             ["entries"] if e["params"]["port"] == 1}
    assert len(nexts) == 4
