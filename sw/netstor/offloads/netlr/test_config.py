"""The ``netlr:`` section: the controller's table entries and copy lists against hand-worked
values, validation, membership changes, and the ways it is applied (a Device running the
whole ``netstor apply`` path on a model, dry run included; model writes)."""
from __future__ import annotations

import random

import pytest

from netstor.api import Device
from netstor.driver.tables import TableWriter
from netstor.model.dataplane import DataplaneModel
from netstor.programs import default_pipeline

from .config import apply_section, model_writes, plan, trust_spec
from .header import NETLR_UDP_PORT, OP_WRITE, LrHeader


def section(**kw):
    s = {"smac": "02:00:00:00:ff:01", "mcast_base": 2000,
         "replicas": {1: {"ip": "10.0.1.1", "mac": "02:00:00:00:01:01", "port": 1,
                          "udp": 7461},
                      2: {"ip": "10.0.1.2", "mac": "02:00:00:00:01:02", "port": 1,
                          "udp": 7462},
                      7: {"ip": "10.0.2.7", "mac": "02:00:00:00:02:07", "port": 0},
                      9: {"ip": "10.0.2.9", "mac": "02:00:00:00:02:09", "port": 0}},
         "groups": {0: [1, 2, 7], 1: {"members": [9, 7]}}}
    s.update(kw)
    return s


def entries(p, table):
    return {tuple(k): (a, prm) for t, k, a, prm in p.entries if t == table}


def test_plan_hand_worked():
    p = plan(section())
    g = entries(p, "nl.groups")
    # group 0: members 1, 2, 7 at positions 0..2, all live
    assert g[(0,)] == ("group", {"mcast": 2000, "live": 0b111, "members": 1 | 2 << 8 | 7 << 16,
                                 "reads": 1 | 2 << 8 | 7 << 16, "nread": 3, "gidx": 0})
    assert g[(1,)] == ("group", {"mcast": 2001, "live": 0b11, "members": 9 | 7 << 8,
                                 "reads": 9 | 7 << 8, "nread": 2, "gidx": 1})
    assert p.mcast == [(2000, [(1, 1), (1, 2), (0, 7)]), (2001, [(0, 9), (0, 7)])]
    r = entries(p, "nl.replicas")
    assert r[(2,)] == ("replica", {"ip": 0x0A000102, "mac": 0x020000000102,
                                   "smac": 0x020000_00FF01, "port": 1, "dport": 7462})
    assert r[(7,)][1]["dport"] == NETLR_UDP_PORT                   # the default UDP port
    c = entries(p, "nl.copies")
    assert c[(9,)] == ("copy", {"ip": 0x0A000209, "mac": 0x020000000209,
                                "smac": 0x020000_00FF01, "dport": 7460})
    assert trust_spec(section()) == {"trusted_ports": [0, 1]}


def test_membership_down_and_joining():
    p = plan(section(down=[2], joining=[9]))
    g = entries(p, "nl.groups")
    # group 0: 2 is down (position 1): live mask 0b101, reads [1, 7]; no copy to 2
    assert g[(0,)][1] == {"mcast": 2000, "live": 0b101, "members": 1 | 2 << 8 | 7 << 16,
                          "reads": 1 | 7 << 8, "nread": 2, "gidx": 0}
    # group 1: 9 joins (phase 1): copies to 9 and 7, only 7 counted and read
    assert g[(1,)][1] == {"mcast": 2001, "live": 0b10, "members": 9 | 7 << 8,
                          "reads": 7, "nread": 1, "gidx": 1}
    assert p.mcast == [(2000, [(1, 1), (0, 7)]), (2001, [(0, 9), (0, 7)])]
    assert p.live(1) == [7] and p.write_set(1) == [9, 7]


@pytest.mark.parametrize("change, msg", [
    (lambda s: s.update(extra=1), "unknown key"),
    (lambda s: s["replicas"][1].pop("ip"), "replica 1"),
    (lambda s: s["replicas"][1].update(port=4), "port 4 out of range"),
    (lambda s: s["replicas"][1].update(bogus=1), "unknown key"),
    (lambda s: s["replicas"].update({256: s["replicas"][1]}), "out of range"),
    (lambda s: s["groups"].update({2: [1, 2, 7, 9, 1]}), "listed twice"),
    (lambda s: s["groups"].update({2: [3]}), "unknown replica"),
    (lambda s: s["groups"].update({3: [1]}), "0..N-1"),
    (lambda s: s["groups"].update({2: []}), "non-empty"),
    (lambda s: s.update(down=[2], joining=[2]), "both down and joining"),
    (lambda s: s.update(down=[5]), "unknown replica"),
    (lambda s: s.update(mcast_base=4095), "outside"),
    (lambda s: s.update(slots=1024), "data plane has"),
])
def test_validation(change, msg):
    s = section()
    change(s)
    with pytest.raises(ValueError, match=msg):
        plan(s, slots=128 * 1024)


def test_too_many_members():
    s = section()
    s["replicas"].update({r: {"ip": f"10.0.3.{r}", "mac": r, "port": 0} for r in range(20, 29)})
    s["groups"][2] = list(range(20, 29))
    with pytest.raises(ValueError, match="at most 8"):
        plan(s)


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
    s = section(down=[1])
    dev = _FakeDevice("list")
    apply_section(dev, s, dry_run=True)
    assert dev.calls == []
    apply_section(dev, s)
    p = plan(s)
    assert [c for c in dev.calls if c[0] != "mcast"] == [
        (t, tuple(k), a, pr) for t, k, a, pr in p.entries]
    assert [c[1:] for c in dev.calls if c[0] == "mcast"] == [(g, tuple(c)) for g, c in p.mcast]
    with pytest.raises(ValueError, match="copy-list"):
        apply_section(_FakeDevice("bitmap"), s)


@pytest.fixture(scope="module")
def schema():
    from netstor.build import build_core
    return build_core(default_pipeline()).schema


def _frame(hdr):
    from .test_model import frame
    return frame(0x0A000264, 0x0A0000FE, NETLR_UDP_PORT, NETLR_UDP_PORT, hdr, bytes(16))


def test_netstor_apply_on_a_model(schema):
    """The whole configuration path (``Device.apply``: the ``programs:`` trust and the
    ``netlr:`` section) on a model of the NetLR pipeline; a write then makes one copy per
    live replica, rewritten as configured; a dry run writes nothing."""
    model = DataplaneModel(default_pipeline(), groups="list")
    dev = Device.open("model", schema=schema, model=model)
    cfg = {"programs": {"nl": trust_spec(section())}, "netlr": section(down=[2])}
    dev.apply(cfg, dry_run=True)
    assert not any(model.memory("nl.groups").words)
    dev.apply(cfg)
    h = LrHeader(op=OP_WRITE, group=0, slot=5, fp=99, req=1)
    out = model.process(_frame(h), 0)
    got = [(o.port, int.from_bytes(o.frame[30:34], "big"), int.from_bytes(o.frame[36:38], "big"),
            LrHeader.unpack(o.frame[42:])) for o in out]
    assert got == [(1, 0x0A000101, 7461, h._replace(seq=1, rid=1, nrep=2)),
                   (0, 0x0A000207, 7460, h._replace(seq=1, rid=7, nrep=2))]
    # membership change: 2 back (phase 1 joining), re-applied in place
    dev.apply({"netlr": section(joining=[2])})
    out = model.process(_frame(h._replace(fp=100, slot=6)), 0)      # slot 5 is held
    assert [LrHeader.unpack(o.frame[42:]).rid for o in out] == [1, 2, 7]
    assert {LrHeader.unpack(o.frame[42:]).nrep for o in out} == {2}
    with pytest.raises(ValueError, match="data plane has 131072"):
        dev.apply({"netlr": section(slots=64)})


def test_model_writes_configure_a_model():
    pl = default_pipeline()
    m = DataplaneModel(pl, groups="list")
    p, writes = model_writes(pl, section(), trusted_ports=[1])
    for mem, addr, word in writes:
        m.mem_write(mem, addr, word)
    assert sum(1 for w in m.memory("nl.groups").words if w) == 2
    assert sum(1 for w in m.memory("nl.replicas").words if w) == 4
    assert sum(1 for w in m.memory("nl.copies").words if w) == 4
    assert sum(1 for w in m.memory("tm.groups").words if w) == len(p.mcast) == 2
    assert sum(1 for w in m.memory("nl.trust").words if w) == 2
    with pytest.raises(ValueError, match="data plane has"):
        model_writes(pl, section(slots=1 << 10))


# ---- the copy lists are the write sets (the multicast half of issue 14's formal item) -----------
def _spec_copy_list(word):
    """A ``tm.groups`` word decoded as docs/dataplane-spec.md writes it: ``n(5) | copy[0] |
    ... | copy[15]``, copy = ``port(4) | rid(16)``, ``n > 16`` counts as 16."""
    n = min(word & 0x1F, 16)
    return [((word >> 5 + 20 * k) & 0xF, (word >> 9 + 20 * k) & 0xFFFF) for k in range(n)]


def _random_rack(rng):
    """A random ``netlr:`` section: 2..10 replicas (any rids, rid 0 included at times) on
    ports 0..3 (several on one port), 1..4 groups of 1..8 members sharing replicas."""
    rids = rng.sample(range(256), rng.randint(2, 10))
    reps = {r: {"ip": 0x0A010000 + r, "mac": 0x020000010000 + r, "port": rng.randrange(4),
                "udp": 7461 + r} for r in rids}
    groups = {g: rng.sample(rids, rng.randint(1, min(8, len(rids))))
              for g in range(rng.randint(1, 4))}
    return {"smac": 0x0200000000FF, "mcast_base": rng.randint(1, 3000), "replicas": reps,
            "groups": groups}


def _membership(rng, rids):
    """A random membership: each replica live, down or joining."""
    st = {r: rng.choice(("live", "live", "down", "joining")) for r in rids}
    return ([r for r in rids if st[r] == "down"], [r for r in rids if st[r] == "joining"])


def test_copy_lists_are_the_write_sets_random():
    """Property against a reference written here from the protocol (docs/netlr.md,
    "Membership"): for random racks (40 seeds), each taken through 6 membership changes
    applied in place with one writer (what the controller does), every group's copy list, as
    the replication engine reads it from the model's ``tm.groups`` word at the group's
    ``mcast`` id (decoded per the spec), is exactly one ``(port, rid)`` copy per member not
    down (live or joining), in position order, nothing else; the ``nl.groups`` entry's
    ``live`` mask is the positions neither down nor joining, ``reads``/``nread`` the live
    rids in position order; and a WRITE to the group through the model leaves as exactly
    those copies, each addressed to its replica (IPv4 destination and UDP port of its rid,
    ``rid`` set), ``nrep`` = the live count (none at all when nothing is live)."""
    pl = default_pipeline()
    checked = writes_sent = 0
    for seed in range(40):
        rng = random.Random(seed)
        sec = _random_rack(rng)
        rids = list(sec["replicas"])
        m = DataplaneModel(pl, groups="list")
        w = TableWriter(pl)
        first = True
        for change in range(6):
            down, joining = _membership(rng, rids)
            s = dict(sec, down=down, joining=joining)
            p, cw = model_writes(pl, s, writer=w, trusted_ports=[0, 1, 2, 3] if first else None)
            first = False
            for mem, addr, word in cw:
                m.mem_write(mem, addr, word)
            g_entries = entries(p, "nl.groups")
            for g, members in sec["groups"].items():
                # the reference, from the section alone
                want = [(sec["replicas"][r]["port"], r) for r in members if r not in down]
                live = [r for r in members if r not in down and r not in joining]
                live_mask = sum(1 << i for i, r in enumerate(members) if r in live)
                prm = g_entries[(g,)][1]
                assert prm["live"] == live_mask and prm["nread"] == len(live)
                assert prm["reads"] == sum(r << 8 * i for i, r in enumerate(live))
                assert prm["members"] == sum(r << 8 * i for i, r in enumerate(members))
                word = m.memory("tm.groups").words[prm["mcast"]]
                got = _spec_copy_list(word)
                assert got == want, (seed, change, g, got, want)
                assert len(set(got)) == len(got)                 # each copy exactly once
                # end to end: a WRITE of a fresh object through the model
                checked += 1
                h = LrHeader(op=OP_WRITE, group=g, slot=checked, fp=checked, req=checked)
                out = m.process(_frame(h), 0)
                if not live:
                    assert out == [], (seed, change, g)
                    continue
                writes_sent += 1
                got_out = [(o.port, int.from_bytes(o.frame[30:34], "big"),
                            int.from_bytes(o.frame[36:38], "big"),
                            LrHeader.unpack(o.frame[42:])) for o in out]
                assert [(o[0], o[3].rid) for o in got_out] == want, (seed, change, g)
                for port, ip, dport, hh in got_out:
                    rep = sec["replicas"][hh.rid]
                    assert (ip, dport, hh.nrep, hh.op, hh.fp) == (
                        rep["ip"], rep["udp"], len(live), OP_WRITE, checked)
    assert writes_sent > 300, (checked, writes_sent)   # groups with a live replica written
