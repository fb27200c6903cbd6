"""Truncation in the compiled model (``meta.truncate``, a platform field): copy lists through
the egress elements, each copy truncated or not by its rid, the compiled model against the
interpreter and the truncated frames against scapy."""

import random

import pytest
from scapy.all import Ether, IP, UDP, Raw

from netstor.elements import Compute
from netstor.lang import F, Mux, Pipeline, Program, Set
from netstor.lang.expr import Field
from netstor.model import DataplaneModel
from netstor.model.compiled import CompiledModel
from netstor.model.replication import encode_group


@pytest.fixture
def truncate_pipeline():
    raw = Program("raw")
    # ingress: multicast through group 1 + the UDP source port's low bit
    raw.add(Compute("mc", [Set(F.meta.mcast_group, Mux(F.udp.sport[0:1] == 1, 2, 1))]))
    # egress: copies with an odd rid leave header-only, when the packet asks (sport bit 1)
    raw.add_egress(Compute("cut", [Set(Field("meta.truncate", 1), F.meta.rid[0:1] & F.udp.sport[1:2])]))
    return Pipeline([raw], n_ports=2, mcast_groups=8)


def frame(rng, sport):
    return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
                 / IP(src="10.0.0.1", dst="10.0.0.2", ttl=9, id=rng.randrange(65536))
                 / UDP(sport=sport, dport=rng.randrange(1, 65536))
                 / Raw(bytes(rng.randrange(256) for _ in range(rng.choice([0, 6, 40, 300])))))


def test_compiled_truncation_equals_interpreter_and_scapy(truncate_pipeline):
    pl = truncate_pipeline
    assert "meta.truncate" in pl.phv.fields
    ref, dut = DataplaneModel(pl, groups="list"), CompiledModel(pl, groups="list")
    for m in (ref, dut):
        m.mem_write("tm.groups", 1, encode_group([(0, 1), (0, 2), (3, 3)]))
        m.mem_write("tm.groups", 2, encode_group([(1, 5), (9, 1), (1, 5)]))
    rng = random.Random(4)
    cut = 0
    for i in range(300):
        sport = rng.randrange(65536)
        f, inp = frame(rng, sport), rng.randrange(4)
        a, b = ref.process(f, inp), dut.process(f, inp)
        assert [(o.port, o.frame, o.user) for o in a] == [(o.port, o.frame, o.user) for o in b]
        g = 1 + (sport & 1)
        rids = [1, 2, 3] if g == 1 else [5, 5]
        assert len(a) == len(rids)
        for o, rid in zip(a, rids):
            if rid & 1 and sport & 2 and len(f) > 42:
                # UDP header only: scapy builds the expected packet from the header fields
                p = Ether(f)
                exp = bytes(Ether(src=p.src, dst=p.dst) / IP(
                    src=p[IP].src, dst=p[IP].dst, ttl=p[IP].ttl, id=p[IP].id)
                    / UDP(sport=p[UDP].sport, dport=p[UDP].dport))
                assert o.frame == exp
                cut += 1
            else:
                assert o.frame == f
    assert cut > 50
    assert ref.counters() == dut.counters()
    assert ref.counter("tm.bad_port") == dut.counter("tm.bad_port") > 0
