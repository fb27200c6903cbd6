"""The put-set limit: what one copy list of the data plane holds (16 copies).

``header.MAX_REPLICAS`` is the copy list's size, ``config`` refuses a section with a larger
put set, and the metadata service refuses a rejoin or a new member that would make one
(nothing written, its state as before). A 16-node put set is written into the compiled
model and a PUT leaves as 16 copies, one to each node's address (checked against the
section's addresses, not the plan).
"""
from __future__ import annotations

import pytest

from netstor.driver.tables import GROUP_COPIES, TableWriter
from netstor.model.compiled import CompiledModel
from netstor.model.replication import MAX_COPIES as ENGINE_COPIES
from netstor.programs import default_pipeline

from . import config
from .config import parse, plan
from .header import MAX_REPLICAS, NICE_UDP_PORT, OP_PUT, NiceHeader
from .metadata import Metadata, ModelSink
from .test_model import frame

NODES = range(1, 19)            # partition 0: nodes 1..16 (a full copy list); 17, 18 spare
CLIENT = 0x0A000001             # 10.0.0.1


def nip(n):
    return 0x0A000100 + n       # 10.0.1.n


def section(members0=tuple(range(1, 17)), **kw):
    s = {"smac": 0x0200000000FF, "mcast_base": 50, "subgroup": 20,
         "nodes": {n: {"ip": nip(n), "mac": 0x020000000100 + n, "port": n % 2} for n in NODES},
         "partitions": {0: list(members0), 1: [17, 18, 1]}}
    s.update(kw)
    return s


class Clock:
    t = 0.0

    def __call__(self):
        return self.t


_PIPE = {}


def pipeline():
    if "p" not in _PIPE:
        _PIPE["p"] = default_pipeline()
    return _PIPE["p"]


def put_copies(m):
    """The node ids a PUT to partition 0 (subgroup 0 of the multicast ring) reaches, by
    destination address."""
    by_ip = {nip(n): n for n in NODES}
    h = NiceHeader(op=OP_PUT, client=CLIENT, req=1, size=1)
    out = m.process(frame(CLIENT, 0x0A0B0009, 5000, NICE_UDP_PORT, h, bytes(17)), 0)
    return [by_ip.get(int.from_bytes(o.frame[30:34], "big"), -1) for o in out]


def test_the_limit_is_the_copy_list():
    assert MAX_REPLICAS == 16
    assert config.MAX_COPIES == MAX_REPLICAS == ENGINE_COPIES == GROUP_COPIES


def test_config_accepts_16_and_refuses_17():
    pl = plan(section())
    assert [rid for _port, rid in pl.mcast[50]] == list(range(1, 17))
    with pytest.raises(ValueError, match=r"partition 0: put set of 17 nodes .* a copy list "
                                         r"holds 16 \(MAX_REPLICAS\)"):
        parse(section(members0=range(1, 18)))


def test_config_counts_handoffs_and_joining_nodes():
    # 16 members, one down with a handoff: 15 + the handoff = 16, fits
    st = parse(section(down=[16], handoff={0: {16: 17}}))
    assert st.put_set(0) == list(range(1, 16)) + [17]
    # the same member rejoining (phase 1): it and its handoff both take copies: 17
    with pytest.raises(ValueError, match="put set of 17 nodes"):
        parse(section(joining=[16], handoff={0: {16: 17}}))
    # a pending member on top of 16
    with pytest.raises(ValueError, match="put set of 17 nodes"):
        parse(section(members0=range(1, 18), pending={0: [17]}))


def _service():
    m = CompiledModel(pipeline(), groups="list")
    writes = []

    class Sink(ModelSink):
        def __call__(self, ops):
            writes.append(list(ops))
            super().__call__(ops)

    md = Metadata(section(), clock=Clock(), sink=Sink(m, TableWriter(pipeline())))
    return md, m, writes


def test_sixteen_copies_through_the_model_and_the_refused_rejoin():
    md, m, writes = _service()
    assert put_copies(m) == list(range(1, 17))
    md.fail(16)                                     # hidden: its handoff takes its copy
    h = md.state.handoff[0][16]
    assert h in (17, 18)
    got = put_copies(m)
    assert sorted(got) == sorted(list(range(1, 16)) + [h]) and 16 not in got
    n_writes, events, state = len(writes), list(md.events), md.state.copy()
    # phase 1 of the rejoin would put node 16 and its handoff in one put set: 17 copies
    with pytest.raises(ValueError, match=r"put set of 17 nodes .*: the rejoin of node 16 "
                                         r"refused"):
        md.rejoin(16)
    assert md.state == state and md.events == events and len(writes) == n_writes
    assert 16 in md.state.down and 16 not in md.state.joining
    assert sorted(put_copies(m)) == sorted(got)     # the switch as before


def test_add_member_refused_on_a_full_copy_list_and_accepted_below():
    md, m, writes = _service()
    n_writes, state = len(writes), md.state.copy()
    with pytest.raises(ValueError, match=r"put set of 17 nodes .*: adding node 17 to "
                                         r"partition 0 refused"):
        md.add_member(0, 17)
    assert md.state == state and len(writes) == n_writes
    assert put_copies(m) == list(range(1, 17))
    # below the limit: a 15-node partition takes a 16th member (put set first)
    md2 = Metadata(section(members0=range(1, 16)), clock=Clock())
    md2.add_member(0, 17)
    assert md2.state.put_set(0) == list(range(1, 16)) + [17]
    assert [rid for _p, rid in md2.plan.mcast[50]] == list(range(1, 16)) + [17]


def test_metadata_refuses_an_oversized_state_before_writing():
    st = parse(section())
    st.partitions[0].append(17)                     # edited behind the service's back
    writes = []
    with pytest.raises(ValueError, match="put set of 17 nodes"):
        Metadata(st, clock=Clock(), sink=writes.append)
    assert writes == []
