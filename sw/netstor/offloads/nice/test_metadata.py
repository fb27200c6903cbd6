"""The metadata service: failure detection (missed heartbeats, reported time-outs, both
sides of each threshold), promotion, handoff in both rings, the two-phase rejoin's order,
reconfiguration, the diffed writes -- and, after every step of a random churn, an
independent check that a hidden node is in no mapping: over the entries (any node id in any
parameter, copy list or key) and over the switch itself (probe packets to every subgroup of
both rings from clients in every division; no copy may reach a hidden node's address).

Deployment: nodes 1..6 (10.0.1.n, port n mod 2), partitions p = 0..5 with members
[1 + p, 1 + (p + 1) % 6, 1 + (p + 2) % 6] (p 0 = [1, 2, 3], p 1 = [2, 3, 4], p 2 = [3, 4, 5],
...), /20 subgroups (16 per ring, subgroup s -> partition 6 s // 16), clients 10.0.0.0/24.
Time is a fake clock (``t[0]``), beats every 1 s.
"""
from __future__ import annotations

import random

import pytest

from netstor.driver.tables import TableWriter
from netstor.model.compiled import CompiledModel
from netstor.programs import default_pipeline

from .config import parse
from .header import NICE_UDP_PORT, OP_GET, OP_PUT, NiceHeader
from .metadata import Metadata, ModelSink
from .test_model import frame

NODES = range(1, 7)
SUBGROUPS = 16
CLIENTS = ("10.0.0.1", "10.0.0.129", "10.0.0.193", "10.9.9.9")


def ip(s):
    a, b, c, d = (int(x) for x in s.split("."))
    return a << 24 | b << 16 | c << 8 | d


def nip(n):
    return ip(f"10.0.1.{n}")


def section():
    return {"smac": 0x0200000000FF, "mcast_base": 50, "subgroup": 20,
            "nodes": {n: {"ip": nip(n), "mac": 0x020000000100 + n, "port": n % 2}
                      for n in NODES},
            "partitions": {p: [1 + p, 1 + (p + 1) % 6, 1 + (p + 2) % 6] for p in range(6)},
            "clients": ["10.0.0.0/24"]}


_PIPE = {}


def pipeline():
    if "p" not in _PIPE:
        _PIPE["p"] = default_pipeline()
    return _PIPE["p"]


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def service(with_switch=False, **kw):
    clock = Clock()
    if not with_switch:
        return Metadata(section(), clock=clock, **kw), clock, None
    m = CompiledModel(pipeline(), groups="list")
    md = Metadata(section(), clock=clock, sink=ModelSink(m, TableWriter(pipeline())), **kw)
    return md, clock, m


def beat_all(md, clock, upto, skip=()):
    """Every node but ``skip`` beats each second until ``upto``."""
    while clock.t + 1 <= upto:
        clock.t += 1
        for n in NODES:
            if n not in skip and n not in md.state.down:
                md.heartbeat(n)
    clock.t = upto


# ---- the independent checks -------------------------------------------------------------------
def named_in(plan):
    """``{"get": nodes, "put": nodes, "addr": nodes}`` named anywhere in the plan's raw
    entries: any ``node`` parameter of nice.unicast / nice.divisions, any rid of a copy list,
    any key of nice.nodes / nice.copies."""
    get, put, addr = set(), set(), set()
    for (table, match), (_action, params) in plan.entries.items():
        if table in ("nice.unicast", "nice.divisions"):
            get.add(params["node"])
        elif table in ("nice.nodes", "nice.copies"):
            addr.add(match[0])
    for copies in plan.mcast.values():
        put |= {rid for _port, rid in copies}
    return {"get": get, "put": put, "addr": addr}


def probe(m):
    """Send a GET from every client and a PUT to every subgroup of both rings: ``(gets,
    puts)``, the node ids each reached (by destination address), per subgroup."""
    by_ip = {nip(n): n for n in NODES}
    gets, puts = {}, {}
    for s in range(SUBGROUPS):
        for c in CLIENTS:
            h = NiceHeader(op=OP_GET, client=ip(c), req=s)
            out = m.process(frame(ip(c), ip("10.10.0.0") + (s << 12) + 9, 5000, NICE_UDP_PORT,
                                  h, bytes(16)), 0)
            gets.setdefault(s, []).extend(by_ip.get(int.from_bytes(o.frame[30:34], "big"), -1)
                                          for o in out)
        h = NiceHeader(op=OP_PUT, client=ip(CLIENTS[0]), req=s, size=1)
        out = m.process(frame(ip(CLIENTS[0]), ip("10.11.0.0") + (s << 12) + 9, 5000,
                              NICE_UDP_PORT, h, bytes(17)), 0)
        puts[s] = [by_ip.get(int.from_bytes(o.frame[30:34], "big"), -1) for o in out]
    return gets, puts


def check_hidden(md, m=None):
    st = md.state
    named = named_in(md.plan)
    for n in st.down:
        assert n not in named["get"] | named["put"] | named["addr"], f"down node {n} mapped"
    for n in st.joining:
        assert n not in named["get"], f"joining node {n} in the get ring"
    pend = {n for p, ns in st.pending.items() for n in ns}
    for p, ns in st.pending.items():
        for n in ns:
            for (t, match), (_a, prm) in md.plan.entries.items():
                if t == "nice.divisions" and match[0] >> 32 == p:
                    assert prm["node"] != n
    if m is not None:
        gets, puts = probe(m)
        for s in range(SUBGROUPS):
            assert -1 not in gets[s] and -1 not in puts[s]
            assert not set(gets[s]) & (st.down | st.joining), (s, gets[s])
            assert not set(puts[s]) & st.down, (s, puts[s])
        return gets, puts, pend
    return None


# ---- detection --------------------------------------------------------------------------------
def test_three_missed_heartbeats_and_not_fewer():
    md, clock, _ = service()
    beat_all(md, clock, 2.0, skip={3})         # 3's last beat: time 0 (its registration)
    clock.t = 3.0
    assert md.tick() == [] and 3 not in md.state.down     # 3 intervals: not yet
    clock.t = 3.01
    ops = md.tick()
    assert md.state.down == {3} and ops
    assert md.events[0] == ("failed", 3, "heartbeats")
    # the others beat every second: never failed, however long
    beat_all(md, clock, 50.0, skip={3})
    assert md.tick() == [] and md.state.down == {3}


def test_a_late_beat_in_time_keeps_a_node():
    md, clock, _ = service()
    clock.t = 2.9
    for n in NODES:
        md.heartbeat(n)
    clock.t = 5.9                                          # exactly 3 intervals after
    assert md.tick() == []
    clock.t = 5.95
    assert md.tick() != [] and md.state.down == set(NODES)


def test_two_reported_timeouts_and_not_one():
    md, clock, _ = service(report_window=3.0)
    clock.t = 1.0
    assert md.report_timeout(1, 4) == [] and md.state.down == set()
    clock.t = 4.5                                          # the first report has expired
    assert md.report_timeout(2, 4) == [] and md.state.down == set()
    clock.t = 5.0
    assert md.report_timeout(2, 4) != [] and md.state.down == {4}
    assert ("failed", 4, "timeouts") in md.events
    assert md.report_timeout(1, 4) == []                   # already down


# ---- failure hiding -----------------------------------------------------------------------------
def test_failure_promotion_and_handoff_in_both_rings():
    md, clock, m = service(with_switch=True)
    md.fail(3)
    st = md.state
    # 3 was primary of 2: 4 promoted; handoffs (fewest duties, then ring distance after the
    # partition's primary): p 0 -> 4, p 1 -> 5, p 2 -> 6
    assert ("promote", 2, 4, 3) in md.events
    assert st.partitions[2] == [4, 3, 5]
    assert st.handoff == {0: {3: 4}, 1: {3: 5}, 2: {3: 6}}
    p = md.plan
    assert p.mcast[50] == [(1, 1), (0, 2), (0, 4)]
    assert p.mcast[51] == [(0, 2), (1, 5), (0, 4)]
    assert p.mcast[52] == [(0, 4), (0, 6), (1, 5)]
    divs = {}
    for (t, match), (_a, prm) in p.entries.items():
        if t == "nice.divisions":
            divs.setdefault(match[0] >> 32, set()).add(prm["node"])
    assert divs[0] == {1, 2, 4} and divs[1] == {2, 5, 4} and divs[2] == {4, 6, 5}
    prims = {prm["part"]: prm["node"] for (t, _), (_a, prm) in p.entries.items()
             if t == "nice.unicast"}
    assert prims == {0: 1, 1: 2, 2: 4, 3: 4, 4: 5, 5: 6}
    gets, puts, _ = check_hidden(md, m)
    # subgroups 6 and 7 -> partition 2 (6 s // 16): puts to [4, 6, 5], gets among them
    assert puts[6] == puts[7] == [4, 6, 5]
    assert set(gets[6]) == {4, 6, 5}


def test_two_phase_rejoin_put_ring_first():
    md, clock, m = service(with_switch=True)
    md.fail(3)
    # phase 1: the ops add 3 to copy lists and its addresses; nothing routes a get to it
    fetch = md.rejoin(3)
    assert fetch == {0: 4, 1: 5, 2: 6}
    last = md.events[-1]
    assert last == ("rejoin", 3, {0: 4, 1: 5, 2: 6})
    named = named_in(md.plan)
    assert 3 in named["put"] and 3 not in named["get"]
    assert {4, 5, 6} <= named["put"]                     # the handoffs stay until phase 2
    gets, puts, _ = check_hidden(md, m)
    assert puts[0] == [1, 2, 3, 4]                          # subgroup 0 -> partition 0
    assert 3 not in {n for g in gets.values() for n in g}
    # phase 2: 3 serves gets; the handoffs leave every mapping of those partitions
    ops = md.caught_up(3)
    assert any(op[0] == "add" and op[1] == "nice.divisions" and op[4]["node"] == 3
               for op in ops)
    assert md.state.handoff == {0: {}, 1: {}, 2: {}}
    p = md.plan
    assert p.mcast[50] == [(1, 1), (0, 2), (1, 3)]
    assert p.mcast[52] == [(0, 4), (1, 3), (1, 5)]         # 4 stays primary of 2
    gets, puts, _ = check_hidden(md, m)
    assert 3 in {n for g in gets.values() for n in g}
    assert 6 not in set(puts[6]) | set(gets[6])            # partition 2's handoff gone


def test_rejoin_ops_never_touch_the_get_ring():
    """The order itself: rejoin's writes name the node only in copy lists and address
    entries; the get ring changes only in caught_up's writes."""
    md, clock, _ = service()
    md.fail(2)
    before = md.writes
    md.rejoin(2)
    phase1 = md.writes - before
    assert phase1 == 3 + 2                                  # 3 copy lists, 2 address entries
    named = named_in(md.plan)
    assert 2 in named["put"] and 2 not in named["get"]
    ops = md.caught_up(2)
    # 2 is back in the divisions of 0, 1, 5 (3 stays primary of 1: no subgroup changes)
    assert {op[1] for op in ops if op[0] != "mcast"} == {"nice.divisions"}
    assert {op[4]["node"] for op in ops if op[0] == "add"} >= {2}


def test_diffed_writes_only_what_changed():
    md, clock, _ = service()
    assert md.writes == len(md.plan.entries) + 6          # everything once, 6 copy lists
    ops = md.fail(6)
    # 6 is in partitions 3 [4, 5, 6], 4 [5, 6, 1], 5 [6, 1, 2] (primary): 3 copy lists,
    # their divisions, partition 5's 2 subgroups' primary (subgroups 14, 15: 6 s // 16 = 5),
    # node 6's two address entries deleted
    assert sorted(op[1] for op in ops if op[0] == "mcast") == [53, 54, 55]
    assert len([op for op in ops if op[1] == "nice.unicast"]) == 2
    assert [op for op in ops if op[0] == "delete" and op[1] in ("nice.nodes", "nice.copies")] \
        == [("delete", "nice.nodes", (6,)), ("delete", "nice.copies", (6,))]
    assert {op[1] for op in ops} <= {53, 54, 55, "nice.unicast", "nice.divisions",
                                     "nice.nodes", "nice.copies"}
    assert md.fail(6) == []                                # nothing new


@pytest.mark.parametrize("seed", [1, 2])
def test_random_churn_hidden_nodes_are_in_no_mapping(seed):
    """Random failures (beats and reports), rejoins, catch-ups, a member added; after each
    step the entries and the switch are checked independently, and the switch written by
    diffs behaves as one configured from scratch with the same state."""
    rng = random.Random(seed)
    md, clock, m = service(with_switch=True)
    for step in range(12):
        live = [n for n in NODES if md.state.live(n)]
        act = rng.choice(["fail", "report", "rejoin", "caught_up", "tick"])
        if act == "fail" and len(live) > 3:
            md.fail(rng.choice(live))
        elif act == "report" and len(live) > 3:
            s = rng.choice(live)
            clock.t += 0.1
            md.report_timeout(rng.choice(live), s)
            md.report_timeout(rng.choice(live), s)
        elif act == "rejoin" and md.state.down:
            md.rejoin(rng.choice(sorted(md.state.down)))
        elif act == "caught_up" and md.state.joining:
            md.caught_up(rng.choice(sorted(md.state.joining)))
        else:
            beat_all(md, clock, clock.t + 1)
            md.tick()
        beat_all(md, clock, clock.t + 1)
        got = check_hidden(md, m)
        fresh = CompiledModel(pipeline(), groups="list")
        Metadata(md.state.copy(), clock=clock, sink=ModelSink(fresh, TableWriter(pipeline())))
        assert probe(fresh) == got[:2], step


# ---- reconfiguration, statistics, the view, the host API --------------------------------------
def test_add_member_put_set_first_then_get_ring():
    md, clock, _ = service()
    md.add_node(7, ip="10.0.1.7", mac="02:00:00:00:01:07", port=1)
    md.add_member(0, 7)
    st = md.state
    assert st.put_set(0) == [1, 2, 3, 7] and st.get_set(0) == [1, 2, 3]
    assert 7 in named_in(md.plan)["put"] and 7 not in named_in(md.plan)["get"]
    md.caught_up(7, partition=0)
    assert st.get_set(0) == [1, 2, 3, 7]
    assert len([k for k in md.plan.entries if k[0] == "nice.divisions"
                and k[1][0] >> 32 == 0]) == 4


def test_remove_node_hands_its_place_to_its_handoff():
    md, clock, _ = service()
    md.fail(1)                                             # handoff of p 0: 4 (see above)
    assert md.state.handoff[0] == {1: 4}
    md.remove_node(1)
    st = md.state
    assert 1 not in st.nodes and all(1 not in ms for ms in st.partitions.values())
    assert st.partitions[0] == [2, 3, 4] and st.pending[0] == {4}
    assert st.primary(0) == 2 and st.get_set(0) == [2, 3] and st.put_set(0) == [2, 3, 4]
    named = named_in(md.plan)
    assert 1 not in named["get"] | named["put"] | named["addr"]


def test_rebalance_from_reported_clients():
    md, clock, _ = service()
    md.heartbeat(1, clients=["10.3.0.5", "10.3.0.77"])
    md.heartbeat(2, clients=["10.3.0.120"])
    md.rebalance()
    assert md.state.clients == [(ip("10.3.0.0"), 25)]
    divs = [k[1] for k in md.plan.entries if k[0] == "nice.divisions" and k[1][0] >> 32 == 0]
    assert sorted(divs) == [(ip("10.3.0.0"), 16 + 26), (ip("10.3.0.64"), 16 + 27),
                            (ip("10.3.0.96"), 16 + 27)]


def test_describe_shows_roles_and_sets():
    md, clock, _ = service()
    md.fail(3)
    md.rejoin(3)
    text = md.describe()
    assert "node     3 10.0.1.3        joining" in text
    assert "part     2 primary 4 members [4, 3, 5] get [4, 6, 5] put [4, 3, 6, 5]" in text


def test_metadata_through_the_host_api():
    """DeviceSink: the writes go through netstor.api.Device (the controller's path)."""
    from netstor.api import Device
    from netstor.build import build_core
    from netstor.model.dataplane import DataplaneModel
    from .metadata import DeviceSink
    model = DataplaneModel(pipeline(), groups="list")
    dev = Device.open("model", schema=build_core(pipeline()).schema, model=model)
    clock = Clock()
    md = Metadata(section(), clock=clock, sink=DeviceSink(dev))
    assert dev.mcast_get(50) == [(1, 1), (0, 2), (1, 3)]
    md.fail(2)
    # handoffs: p 0 [1, 2, 3] -> 4; p 1 (3 promoted: [3, 2, 4]) -> 5; p 5 [6, 1, 2] -> 3
    assert md.state.handoff == {0: {2: 4}, 1: {2: 5}, 5: {2: 3}}
    assert dev.mcast_get(50) == [(1, 1), (0, 4), (1, 3)]
    assert dev.table("nice.nodes").get([2]) is None
    assert all(e["params"]["node"] != 2 for e in dev.table("nice.divisions").dump())
    # a restarted controller that knows 2 is down takes over the switch: what it does not
    # plan (here: node 2's divisions, as a stale run would have left them) is deleted
    dev.table("nice.divisions").add((ip("10.0.0.0") | 7 << 32, 16 + 24), "replica",
                                    {"node": 2})
    md2 = Metadata(md.state.copy(), clock=clock, sink=DeviceSink(dev))
    assert md2.plan == md.plan
    assert all(e["params"]["node"] != 2 for e in dev.table("nice.divisions").dump())
    assert parse(section()).partitions == {p: [1 + p, 1 + (p + 1) % 6, 1 + (p + 2) % 6]
                                           for p in range(6)}


def test_text_view_of_a_config(tmp_path, capsys):
    """``python -m netstor.offloads.nice.metadata CONFIG.yaml``: the view of a nice: section."""
    import yaml
    from .metadata import main
    s = section()
    s["down"] = [5]
    cfg = tmp_path / "nice.yaml"
    cfg.write_text(yaml.safe_dump({"nice": s}))
    assert main([str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "6 nodes, 6 partitions" in out
    assert "node     5 10.0.1.5        down" in out
    # partition 4 = [5, 6, 1]: 6 is the primary while 5 is down (a section: no handoff)
    assert "part     4 primary 6 members [5, 6, 1] get [6, 1] put [6, 1]" in out
