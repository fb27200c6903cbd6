"""The ``xorinc:`` section: the controller's coefficients against galois (pinned), the copy
lists and delta table, validation, and the two ways it is applied (Device, model writes)."""
from __future__ import annotations

import galois
import numpy as np
import pytest

from netstor.model.dataplane import DataplaneModel
from netstor.programs import default_pipeline

from .config import apply_section, helpers, model_writes, plan, trust_entries

GF = galois.GF(2 ** 8, irreducible_poly=0x11D)


def gen(k, r):
    C = GF([[GF(1) / GF((k + i) ^ j) for j in range(k)] for i in range(r)])
    return np.vstack([GF.Identity(k), C]).view(GF), C


def section(k, r, code=3):
    n = k + r
    return {"smac": "02:00:00:00:ff:01",
            "nodes": {f"n{j}": {"ip": f"10.0.1.{j + 1}", "mac": f"02:00:00:00:01:{j:02x}",
                                "port": j % 2} for j in range(n)},
            "codes": {code: {"k": k, "r": r, "nodes": [f"n{j}" for j in range(n)]}},
            "clients": {"a": [0, 31], "b": [32, 63]}, "timeout": 500}


@pytest.mark.parametrize("k,r", [(k, 2 + k % 3) for k in range(3, 13)] + [(5, 2), (5, 4)])
def test_coefficients_and_copies_against_galois(k, r):
    n, code = k + r, 3
    p = plan(section(k, r, code))
    G, C = gen(k, r)
    rep = {tuple(key): params for t, key, _a, params in p.entries if t == "xi.repair"}
    assert len(rep) == n * k
    for lost in range(n):
        hs = helpers(n, k, lost)
        assert hs == [i for i in range(n) if i != lost][:k]
        a = G[[lost], :] @ np.linalg.inv(G[hs, :])
        for s, want in zip(hs, np.asarray(a)[0]):
            assert rep[(code, lost, s)] == {"coeff": int(want), "need": k}
    delta = {tuple(key): params for t, key, _a, params in p.entries if t == "xi.delta"}
    assert len(p.groups) == k and len(delta) == k * (r + 1)
    for j in range(k):
        g = p.group_of(code, j)
        copies = dict(p.groups)[g]
        assert copies == [(j % 2, 1 + j)] + [((k + i) % 2, 1 + k + i) for i in range(r)]
        assert delta[(code, j, 1 + j)]["coeff"] == 1
        assert delta[(code, j, 1 + j)]["ip"] == 0x0A000101 + j
        for i in range(r):
            d = delta[(code, j, 1 + k + i)]
            assert d["coeff"] == int(C[i, j]) and d["mac"] == 0x020000000100 + k + i
            assert d["smac"] == 0x020000_00FF01
    assert p.clients == {"a": (0, 31), "b": (32, 63)} and p.timeout == 500


@pytest.mark.parametrize("change, msg", [
    (lambda s: s["codes"][3].update(k=13), "not offered"),
    (lambda s: s["codes"][3].update(r=5), "not offered"),
    (lambda s: s["codes"][3]["nodes"].pop(), "nodes for n"),
    (lambda s: s["codes"][3]["nodes"].__setitem__(0, "nope"), "unknown node"),
    (lambda s: s["clients"].update(c=[31, 40]), "overlap"),
    (lambda s: s["clients"].update(c=[60, 70]), "outside"),
    (lambda s: s.update(extra=1), "unknown key"),
    (lambda s: s["nodes"]["n0"].pop("ip"), "node n0"),
])
def test_validation(change, msg):
    s = section(4, 2)
    change(s)
    with pytest.raises(ValueError, match=msg):
        plan(s)


def test_too_many_groups():
    s = section(12, 4)
    s["codes"][4] = dict(s["codes"][3])
    with pytest.raises(ValueError, match="groups needed"):
        plan(s, mcast_groups=16)


class _FakeDevice:
    """Records what apply_section asks of a netstor.api.Device."""

    def __init__(self, mode, memories=("xi.engine.timeout",)):
        self.mcast_mode, self.calls = mode, []
        self.schema = {"mcast_groups": 4096, "memories": [{"name": n} for n in memories]}

    def _write(self, writes):
        self.calls += [("mem",) + tuple(w) for w in writes]

    def set_trust(self, program, ports, sources=None, request_ports="any"):
        self.calls.append(("trust", program, ports, tuple(sources or ()), request_ports))

    def table(self, name):
        dev = self

        class T:
            def add(self, key, action, params):
                dev.calls.append((name, tuple(key), action, dict(params)))
        return T()

    def mcast_set(self, g, copies):
        self.calls.append(("mcast", g, tuple(copies)))


def test_apply_section_through_a_device():
    s = section(4, 2)
    dev = _FakeDevice("list")
    apply_section(dev, s, dry_run=True)
    assert dev.calls == []
    apply_section(dev, s)
    p = plan(s)
    assert [c for c in dev.calls if c[0] not in ("mcast", "mem", "trust")] == [
        (t, tuple(k), a, pr) for t, k, a, pr in p.entries]
    assert [c[1:] for c in dev.calls if c[0] == "mcast"] == [(g, tuple(c)) for g, c in p.groups]
    # the trust guard: contributions from the nodes (and the requesters) only
    assert [c for c in dev.calls if c[0] == "trust"] == [
        ("trust", "xi", "any", NODE_PREFIXES, "any")]
    # the engine's timeout reaches the device (the core's control shadow runs the scanner)
    assert [c for c in dev.calls if c[0] == "mem"] == [("mem", "xi.engine.timeout", 0, 500)]
    with pytest.raises(ValueError, match="copy-list"):
        apply_section(_FakeDevice("bitmap"), s)
    # a device without the memory refuses a nonzero timeout, takes 0
    with pytest.raises(ValueError, match="no xi.engine.timeout"):
        apply_section(_FakeDevice("list", memories=()), s)
    dev = _FakeDevice("list", memories=())
    apply_section(dev, dict(s, timeout=0))
    assert not [c for c in dev.calls if c[0] == "mem"]


def test_model_writes_configure_a_model():
    pl = default_pipeline()
    m = DataplaneModel(pl, groups="list")
    p, writes = model_writes(pl, section(4, 2))
    for mem, addr, word in writes:
        m.mem_write(mem, addr, word)
    assert m.mem_read("xi.engine.timeout", 0) == 500
    assert sum(1 for w in m.memory("xi.repair").words if w) == 6 * 4
    assert sum(1 for w in m.memory("tm.groups").words if w) == len(p.groups) == 4


#: section(4, 2)'s nodes 10.0.1.1 .. 10.0.1.6 as the fewest prefixes (by hand)
NODE_PREFIXES = ("10.0.1.1/32", "10.0.1.2/31", "10.0.1.4/31", "10.0.1.6/32")


def test_trust_entries():
    """The model's xi.trust entries equal what netstor.api.Device.trust_entries makes of the
    same sources (the device path), requesters included; too many sources are refused."""
    from netstor.api import Device
    s = dict(section(4, 2), requesters=["10.9.0.0/16"])
    p = plan(s)
    want = Device.trust_entries(None, "any", list(NODE_PREFIXES) + ["10.9.0.0/16"], "any")
    assert trust_entries(p) == want
    with pytest.raises(ValueError, match="requesters"):
        plan(dict(s, requesters=["10.9.0.1/16"]))
    with pytest.raises(ValueError, match="do not fit"):
        plan(dict(s, requesters=[f"10.{i}.0.1/32" for i in range(12)]))
