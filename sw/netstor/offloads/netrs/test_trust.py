"""Issue 11's NetRS reproducers on the golden model and the compiled model: forged responses
and monitor packets from a port the configuration does not trust are dropped and counted and
change no state; from the trusted (server) port the same packets act."""
import pytest

from netstor.driver.tables import TableWriter, apply_writes
from netstor.lang import Pipeline
from netstor.model.compiled import CompiledModel
from netstor.model.dataplane import DataplaneModel
from netstor.offloads.netrs.program import make_netrs, M_MON, M_RESP
from netstor.offloads.netrs.test_model import (MARKER, SERVERS, SW, UNIT, EWMA, cell, group, ip,
                                               parse, request, response)
from netstor.programs.l3 import make_l3

CLIENT_PORT, SERVER_PORT = 0, 1
RV = (UNIT << 24) | (EWMA << 28)


def switch(cls, report_ports, requests=True):
    """The test_model fixture's switch (RSNode 5, groups 7 (C3) of servers 1..3), the trust
    table holding reports from ``report_ports`` and requests from any port."""
    prog = make_netrs()
    pl = Pipeline([make_l3(2, also=[prog]), prog], guarded=True)
    model = cls(pl)
    w = TableWriter(pl)
    ops = [w.lpm_add("l3.routes", ip("10.77.0.0"), 24, "route", {"port": 0, "dmac": 0xC1,
                                                                 "smac": SW}),
           w.lpm_add("l3.routes", ip("10.77.1.0"), 24, "route", {"port": 1, "dmac": 0x51,
                                                                 "smac": SW}),
           w.lpm_add("rs.tgroups", ip("10.77.0.0"), 24, "rsnode", {"rid": 5, "tg": 2}),
           w.exact_add("rs.local", [5], "local"),
           w.exact_add("rs.rgroups", [7], "replicas", group(0, [1, 2, 3])),
           w.bank_write("rs.marker", 0, MARKER)]
    for sid, a in SERVERS.items():
        ops.append(w.exact_add("rs.servers", [sid], "server",
                               {"ip": ip(a), "mac": 0x500 + sid, "smac": SW, "port": 1}))
    prio = 0
    for p in report_ports:
        ops.append(w.ternary_add("rs.trust", [1, p, 0], [1, 0xF, 0], "trusted", {}, prio))
        prio += 1
    if requests:
        ops.append(w.ternary_add("rs.trust", [0, 0, 0], [1, 0, 0], "trusted", {}, prio))
    for o in ops:
        apply_writes(model, o)
    return model


def state(model):
    names = [f"rs.st{k}" for k in range(8)] + ["rs.samples", "rs.monitor", "rs.rr", "rs.seq"]
    return {n: list(model.memory(n).words) for n in names}


def picks(model, n, arrival=1 << 12):
    out = []
    for i in range(n):
        (o,) = model.process(request(7), CLIENT_PORT, arrival=arrival + i * 4096)
        out.append(parse(o.frame)["port_dst"])
    return out


MODELS = [DataplaneModel, CompiledModel]


@pytest.mark.parametrize("cls", MODELS)
def test_forged_responses_cannot_push_the_server_state(cls):
    """Reproducer: 40 forged responses for server 1 (queue 4095, 60 ms service) pushed
    ``rs.st0[1]`` so that C3 never picked server 1. From the untrusted client port: all 40
    dropped and counted, every state bank unchanged, server 1 still picked in its turn; the
    same 40 from the server port push the state and C3 avoids server 1."""
    model = switch(cls, [SERVER_PORT])
    before = state(model)
    forged = response(5, M_RESP, RV, 1, 4095, 60_000_000)
    for _ in range(40):
        assert model.process(forged, CLIENT_PORT, arrival=1 << 20) == []
    assert state(model) == before
    assert model.counter("rs.trust.miss") == 40
    assert SERVERS[1] in picks(model, 6)
    for _ in range(40):
        assert len(model.process(forged, SERVER_PORT, arrival=1 << 20)) == 1
    q, _, t, _ = cell(model, 0, 1)
    assert q > 0xF000 and t > 0xF000
    assert SERVERS[1] not in picks(model, 12, arrival=1 << 21)
    assert model.counter("rs.trust.miss") == 40


@pytest.mark.parametrize("cls", MODELS)
def test_forged_monitor_packets_do_not_count(cls):
    """Reproducer: forged ``M_MON`` packets counted in ``rs.monitor``. From the untrusted
    port they are dropped and counted in ``rs.trust.miss`` instead."""
    model = switch(cls, [SERVER_PORT])
    mon = response(5, M_MON, 0, 2, 0, 0)
    for _ in range(5):
        assert model.process(mon, CLIENT_PORT) == []
    assert sum(model.memory("rs.monitor").words) == 0
    assert model.counter("rs.trust.miss") == 5
    (o,) = model.process(mon, SERVER_PORT)
    assert o.port == CLIENT_PORT
    assert sum(model.memory("rs.monitor").words) == 1


@pytest.mark.parametrize("cls", MODELS)
def test_requests_from_any_port_and_recirculation(cls):
    """Requests are not reports: selected from either port (the recirculated second pass
    trusted), counting one outstanding request in every state copy."""
    model = switch(cls, [SERVER_PORT])
    for port in (CLIENT_PORT, SERVER_PORT):
        (o,) = model.process(request(7), port)
        assert parse(o.frame)["port_dst"] in SERVERS.values()
    assert sum(cell(model, 0, s)[1] for s in SERVERS) == 2
    assert model.counter("rs.trust.miss") == 0


def test_unconfigured_netrs_writes_no_state():
    model = switch(DataplaneModel, [], requests=False)        # the trust table empty
    before = state(model)
    assert model.process(request(7), CLIENT_PORT) == []
    for port in (0, 1, 2, 3):
        assert model.process(response(5, M_RESP, RV, 1, 9, 99), port) == []
        assert model.process(response(5, M_MON, 0, 2, 0, 0), port) == []
    assert state(model) == before
    assert model.counter("rs.trust.miss") == 9
