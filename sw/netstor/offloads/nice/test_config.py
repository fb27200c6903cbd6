"""The ``nice:`` section: entries and copy lists against hand-worked values, the division
cut, membership (down, joining, handoff, pending), validation, the diff, the ways it is
applied (a fake device, ``netstor apply`` on a model), and the tables at 1,024 storage nodes,
R = 3, written into the pipeline the program builds."""
from __future__ import annotations

import ipaddress
import time

import pytest

from netstor.api import Device
from netstor.driver.tables import TableWriter, apply_writes
from netstor.model.compiled import CompiledModel
from netstor.model.dataplane import DataplaneModel
from netstor.programs import default_pipeline

from .config import apply_section, diff, divide, entries, model_writes, parse, plan, section_of
from .header import NICE_UDP_PORT, OP_GET, OP_PUT, NiceHeader


def ip(s):
    return int(ipaddress.IPv4Address(s))


def section(**kw):
    s = {"smac": "02:00:00:00:ff:01", "mcast_base": 200,
         "unicast": "10.20.0.0/16", "multicast": "10.21.0.0/16", "subgroup": 17,
         "nodes": {1: {"ip": "10.0.1.1", "mac": "02:00:00:00:01:01", "port": 1},
                   2: {"ip": "10.0.1.2", "mac": "02:00:00:00:01:02", "port": 1, "udp": 7472},
                   3: {"ip": "10.0.1.3", "mac": "02:00:00:00:01:03", "port": 0},
                   4: {"ip": "10.0.1.4", "mac": "02:00:00:00:01:04", "port": 0}},
         "partitions": {0: [1, 2], 1: [2, 3]},
         "clients": ["192.168.0.0/16"]}
    s.update(kw)
    return s


SMAC = 0x020000_00FF01


def test_plan_hand_worked():
    p = plan(section())
    # two subgroups per ring (/16 in /17): subgroup 0 -> partition 0, 1 -> 1
    assert p.table("nice.rings") == {(ip("10.20.0.0"), 16): ("ring", {"kind": 1}),
                                     (ip("10.21.0.0"), 16): ("ring", {"kind": 2})}
    assert p.table("nice.unicast") == {
        (ip("10.20.0.0"), 17): ("primary", {"part": 0, "node": 1}),
        (ip("10.20.128.0"), 17): ("primary", {"part": 1, "node": 2})}
    assert p.table("nice.multicast") == {
        (ip("10.21.0.0"), 17): ("replicate", {"part": 0, "mcast": 200}),
        (ip("10.21.128.0"), 17): ("replicate", {"part": 1, "mcast": 201})}
    # two nodes per get set: a /17 each; partition 1 rotated by 1: 3 first
    assert p.table("nice.divisions") == {
        (ip("192.168.0.0"), 16 + 17): ("replica", {"node": 1}),
        (ip("192.168.128.0"), 16 + 17): ("replica", {"node": 2}),
        (1 << 32 | ip("192.168.0.0"), 16 + 17): ("replica", {"node": 3}),
        (1 << 32 | ip("192.168.128.0"), 16 + 17): ("replica", {"node": 2})}
    assert p.table("nice.nodes")[(2,)] == ("node", {"ip": ip("10.0.1.2"), "mac": 0x020000000102,
                                                    "smac": SMAC, "port": 1, "dport": 7472})
    assert p.table("nice.copies")[(3,)] == ("copy", {"ip": ip("10.0.1.3"),
                                                     "mac": 0x020000000103, "smac": SMAC,
                                                     "dport": NICE_UDP_PORT})
    assert sorted(p.table("nice.nodes")) == sorted(p.table("nice.copies")) == [(1,), (2,), (3,),
                                                                                 (4,)]
    assert p.mcast == {200: [(1, 1), (1, 2)], 201: [(1, 2), (0, 3)]}


@pytest.mark.parametrize("k", range(1, 9))
def test_divide_covers_the_client_space_once(k):
    """Independent check: every address of the client prefix in exactly one division, each
    node one division, sizes 1/2**m or 2/2**m of the space."""
    nodes = [10 + i for i in range(k)]
    divs = divide(ip("10.9.8.0"), 24, nodes, rotate=5)
    assert sorted(n for _, _, n in divs) == nodes
    nets = [ipaddress.IPv4Network((a, n)) for a, n, _ in divs]
    for host in range(256):
        addr = ipaddress.IPv4Address(ip("10.9.8.0") + host)
        assert sum(addr in net for net in nets) == 1
    sizes = sorted(net.num_addresses for net in nets)
    piece = 256 // (1 << (k - 1).bit_length())
    assert set(sizes) <= {piece, 2 * piece} and sum(sizes) == 256
    assert divs[0][2] == nodes[5 % k]                  # the rotation's first node


def test_divide_hand_worked_three():
    assert divide(ip("10.0.0.0"), 24, [7, 8, 9], rotate=1) == [
        (ip("10.0.0.0"), 25, 8), (ip("10.0.0.128"), 26, 9), (ip("10.0.0.192"), 26, 7)]
    assert divide(ip("10.0.0.0"), 30, [1, 2, 3]) == [
        (ip("10.0.0.0"), 31, 1), (ip("10.0.0.2"), 32, 2), (ip("10.0.0.3"), 32, 3)]
    # fewer addresses than nodes: one each for the first nodes of the rotation
    assert divide(ip("10.0.0.0"), 31, [1, 2, 3], rotate=2) == [
        (ip("10.0.0.0"), 32, 3), (ip("10.0.0.1"), 32, 1)]
    assert divide(ip("10.0.0.7"), 32, [1, 2]) == [(ip("10.0.0.7"), 32, 1)]


def test_membership_down_joining_handoff_pending():
    s = section(partitions={0: [1, 2, 3], 1: [2, 3, 4]}, down=[1], joining=[3],
                handoff={0: {1: 4}}, pending={1: [4]})
    st = parse(s)
    # partition 0: 1 down (handoff 4), 3 joining: primary 2; gets [4 (for 1), 2]; puts
    # [4 (for 1), 2, 3]
    assert st.primary(0) == 2
    assert st.get_set(0) == [4, 2]
    assert st.put_set(0) == [4, 2, 3]
    # partition 1: 3 joining, 4 pending: gets [2]; puts [2, 3, 4]
    assert st.get_set(1) == [2] and st.put_set(1) == [2, 3, 4]
    p = entries(st)
    assert (1,) not in p.table("nice.nodes") and (1,) not in p.table("nice.copies")
    assert p.mcast == {200: [(0, 4), (1, 2), (0, 3)], 201: [(1, 2), (0, 3), (0, 4)]}
    assert {v[1]["node"] for v in p.table("nice.unicast").values()} == {2}
    assert sorted(v[1]["node"] for v in p.table("nice.divisions").values()) == [2, 2, 4]
    # the section round-trips
    assert entries(parse(section_of(st))) == p


@pytest.mark.parametrize("change, msg", [
    (lambda s: s.update(extra=1), "unknown key"),
    (lambda s: s["nodes"][1].pop("ip"), "needs ip"),
    (lambda s: s["nodes"][1].update(port=4), "out of range 0..3"),
    (lambda s: s["nodes"][1].update(bogus=1), "unknown key"),
    (lambda s: s["nodes"].update({4096: s["nodes"][1]}), "out of range"),
    (lambda s: s["nodes"][2].update(ip="10.0.1.1"), "share an IP"),
    (lambda s: s["partitions"].update({2: [1, 1]}), "listed twice"),
    (lambda s: s["partitions"].update({2: [9]}), "unknown node 9"),
    (lambda s: s["partitions"].update({3: [1]}), "0..P-1"),
    (lambda s: s["partitions"].update({2: []}), "non-empty"),
    (lambda s: s.update(down=[2], joining=[2]), "both down and joining"),
    (lambda s: s.update(down=[5]), "unknown node"),
    (lambda s: s.update(mcast_base=4095), "outside"),
    (lambda s: s.update(multicast="10.20.128.0/17"), "same size"),
    (lambda s: s.update(multicast="10.20.0.0/16"), "overlap"),
    (lambda s: s.update(unicast="10.20.0.1/16"), "not a prefix"),
    (lambda s: s.update(subgroup=15), "longer than the subgroup"),
    (lambda s: s.update(subgroups={2: 0}), "out of range"),
    (lambda s: s.update(subgroups={0: 5}), "out of range"),
    (lambda s: s.update(handoff={0: {1: 2}}), "already a member"),
    (lambda s: s.update(handoff={0: {3: 4}}), "not a member"),
    (lambda s: s.update(pending={0: [3]}), "not members"),
    (lambda s: s.update(divisions={0: [["10.0.0.0/8"]]}), "not \\[prefix, node\\]"),
    (lambda s: s.update(clients=["10.0.0.1/8"]), "not a prefix"),
    (lambda s: s.update(subgroup=28), "data plane holds"),
])
def test_validation(change, msg):
    s = section()
    change(s)
    with pytest.raises(ValueError, match=msg):
        plan(s, subgroups_max=2048)


def test_too_many_copies():
    s = section()
    s["nodes"].update({n: {"ip": f"10.0.3.{n}", "mac": n, "port": 0} for n in range(20, 37)})
    s["partitions"][1] = list(range(20, 37))
    with pytest.raises(ValueError, match="copy list holds 16"):
        plan(s)


def test_diff_writes_only_what_changed():
    old = plan(section())
    assert diff(old, old) == []
    new = plan(section(down=[1]))
    ops = diff(old, new)
    # partition 0: primary 1 -> 2 (its one subgroup), get set [2]: the /16 division, copy
    # list [2]; node 1's addresses removed; the two /17 divisions of partition 0 deleted
    assert ops == [
        ("add", "nice.divisions", (ip("192.168.0.0"), 32), "replica", {"node": 2}),
        ("add", "nice.unicast", (ip("10.20.0.0"), 17), "primary", {"part": 0, "node": 2}),
        ("mcast", 200, [(1, 2)]),
        ("delete", "nice.nodes", (1,)), ("delete", "nice.copies", (1,)),
        ("delete", "nice.divisions", (ip("192.168.0.0"), 33)),
        ("delete", "nice.divisions", (ip("192.168.128.0"), 33))]
    # from nothing: every entry and every non-empty list
    assert len(diff(None, old)) == len(old.entries) + 2


class _FakeDevice:
    """Records what apply_section asks of a netstor.api.Device."""

    def __init__(self, mode):
        self.mcast_mode, self.schema, self.calls = mode, {"mcast_groups": 4096}, []

    def table(self, name):
        dev = self

        class T:
            def add(self, key, action, params):
                dev.calls.append((name, tuple(key), action, dict(params)))
        return T()

    def mcast_set(self, g, copies):
        self.calls.append(("mcast", g, tuple(copies)))


def test_apply_section_through_a_fake_device():
    s = section(down=[3])
    dev = _FakeDevice("list")
    apply_section(dev, s, dry_run=True)
    assert dev.calls == []
    apply_section(dev, s)
    p = plan(s)
    assert sorted(c for c in dev.calls if c[0] != "mcast") == sorted(
        (t, tuple(m), a, pr) for t, m, a, pr in p.rows())
    assert [c[1:] for c in dev.calls if c[0] == "mcast"] == [(200, ((1, 1), (1, 2))),
                                                             (201, ((1, 2),))]
    with pytest.raises(ValueError, match="copy-list"):
        apply_section(_FakeDevice("bitmap"), s)


def _frame(src, dst, hdr, body=bytes(16)):
    from .test_model import frame
    return frame(src, dst, 5000, NICE_UDP_PORT, hdr, body)


def test_netstor_apply_on_a_model():
    """The whole configuration path (``Device.apply`` with a ``nice:`` section) on a model
    of the NICE pipeline; a dry run writes nothing; a membership change re-applied."""
    from netstor.build import build_core
    pl = default_pipeline()
    schema = build_core(pl).schema
    model = DataplaneModel(pl, groups="list")
    dev = Device.open("model", schema=schema, model=model)
    cfg = {"nice": section()}
    dev.apply(cfg, dry_run=True)
    assert not any(model.memory("nice.nodes").words)
    dev.apply(cfg)
    h = NiceHeader(op=OP_PUT, client=ip("192.168.3.4"), req=1, size=1)
    out = model.process(_frame(ip("192.168.3.4"), ip("10.21.200.1"), h), 0)
    assert [(o.port, int.from_bytes(o.frame[30:34], "big"), int.from_bytes(o.frame[36:38],
                                                                            "big"),
             NiceHeader.unpack(o.frame[42:]).part) for o in out] == [
        (1, ip("10.0.1.2"), 7472, 1), (0, ip("10.0.1.3"), NICE_UDP_PORT, 1)]
    g = NiceHeader(op=OP_GET, client=ip("192.168.3.4"), req=2)
    out = model.process(_frame(ip("192.168.3.4"), ip("10.20.200.1"), g), 0)
    assert [int.from_bytes(o.frame[30:34], "big") for o in out] == [ip("10.0.1.3")]
    # 3 fails: the section applied again; its /17 division is deleted, not left behind
    dev.apply({"nice": section(down=[3])})
    out = model.process(_frame(ip("192.168.3.4"), ip("10.21.200.1"), h), 0)
    assert [int.from_bytes(o.frame[30:34], "big") for o in out] == [ip("10.0.1.2")]
    out = model.process(_frame(ip("192.168.3.4"), ip("10.20.200.1"), g), 0)
    assert [int.from_bytes(o.frame[30:34], "big") for o in out] == [ip("10.0.1.2")]
    assert not any(e["params"].get("node") == 3 for e in dev.table("nice.divisions").dump())
    assert dev.table("nice.nodes").get([3]) is None
    with pytest.raises(Exception, match="data plane holds"):
        dev.apply({"nice": section(subgroup=28)})


# ---- the tables at 1,024 storage nodes, R = 3 -------------------------------------------------
N, R = 1024, 3
FIRST = 1000                   # node ids 1000..2023: ids above 1,023 included


def big_section(**kw):
    nodes = {FIRST + i: {"ip": ip("10.1.0.0") + i, "mac": 0x020000100000 + i, "port": i % 2}
             for i in range(N)}
    parts = {p: [FIRST + (p + j) % N for j in range(R)] for p in range(N)}
    s = {"smac": SMAC, "mcast_base": 1024, "subgroup": 26,       # 1,024 subgroups per ring
         "nodes": nodes, "partitions": parts, "clients": ["10.200.0.0/16"]}
    s.update(kw)
    return s


def test_tables_at_1024_nodes_r3_fit_and_route():
    """(R + 1) N entries on the unicast side (N subgroups + R N divisions), N on the
    multicast side, N copy lists, written into the pipeline the program builds (hashed LPMs
    and exact tables placed by the driver); packets then reach the right nodes; a failure
    rewrites only a handful of entries."""
    pl = default_pipeline()
    # structures that scale: hashed LPMs in BRAM banks and multi-way hashed exact tables
    from netstor.elements.table import FLOP_ENTRIES, LPM_HASH_MIN
    tabs = {t.qualname: t for t in pl.tables}
    for name in ("nice.unicast", "nice.multicast", "nice.divisions"):
        assert tabs[name].lpm_hashed and tabs[name].size >= LPM_HASH_MIN
    for name in ("nice.nodes", "nice.copies"):
        assert tabs[name].kind == "exact" and tabs[name].ways == 4 and tabs[name].size >= N
    assert tabs["nice.rings"].size <= FLOP_ENTRIES
    assert not [b for b in pl.banks if b.qualname.startswith("nice.")]      # no banks
    t0 = time.monotonic()
    m = CompiledModel(pl, groups="list")
    w = TableWriter(pl)
    p, writes = model_writes(pl, big_section(), writer=w)
    counts = {}
    for t, _ in p.entries:
        counts[t] = counts.get(t, 0) + 1
    assert counts == {"nice.rings": 2, "nice.unicast": N, "nice.multicast": N,
                      "nice.divisions": R * N, "nice.nodes": N, "nice.copies": N}
    assert counts["nice.unicast"] + counts["nice.divisions"] == (R + 1) * N
    assert sum(1 for c in p.mcast.values() if c) == N
    apply_writes(m, writes)
    # partition 1000 (subgroup 1000 = 10.10.250.0/26): members 2000, 2001, 2002; get set
    # rotated by 1000 mod 3 = 1: 2001 <- 10.200.0.0/17, 2002 <- .128.0/18, 2000 <- .192.0/18
    vaddr = ip("10.10.0.0") + 1000 * 64 + 5
    for client, node in (("10.200.1.1", 2001), ("10.200.130.0", 2002), ("10.200.255.9", 2000),
                         ("10.9.0.1", 2000)):
        h = NiceHeader(op=OP_GET, client=ip(client), req=1)
        out = m.process(_frame(ip(client), vaddr, h), 0)
        assert [(o.port, int.from_bytes(o.frame[30:34], "big")) for o in out] == [
            (node % 2, ip("10.1.0.0") + node - FIRST)], client
        assert NiceHeader.unpack(out[0].frame[42:]).part == 1000
    h = NiceHeader(op=OP_PUT, client=ip("10.200.1.1"), req=2, size=1)
    out = m.process(_frame(ip("10.200.1.1"), vaddr + (1 << 16), h), 0)
    assert [int.from_bytes(o.frame[30:34], "big") - ip("10.1.0.0") + FIRST for o in out] == [
        2000, 2001, 2002]
    # node 2001 fails: partitions 999, 1000, 1001 change (each: copy list, divisions, and
    # for 1001 its primary: 1 subgroup), plus its two address entries -- nothing else
    q = plan(big_section(down=[2001], handoff={999: {2001: 2003}, 1000: {2001: 2003},
                                               1001: {2001: 2004}}))
    ops = diff(p, q)
    tables = {op[1] for op in ops if op[0] != "mcast"}
    assert tables == {"nice.unicast", "nice.divisions", "nice.nodes", "nice.copies"}
    assert sorted(op[1] for op in ops if op[0] == "mcast") == [1024 + 999, 1024 + 1000,
                                                             1024 + 1001]
    assert len([op for op in ops if op[1] == "nice.unicast"]) == 1
    assert len(ops) <= 3 + 1 + 2 + 3 * 2 * R
    from .config import model_apply
    apply_writes(m, model_apply(w, ops))
    out = m.process(_frame(ip("10.200.1.1"), vaddr + (1 << 16), h), 0)
    assert [int.from_bytes(o.frame[30:34], "big") - ip("10.1.0.0") + FIRST for o in out] == [
        2000, 2003, 2002]
    assert time.monotonic() - t0 < 120
