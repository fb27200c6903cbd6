"""The simulator's parts against independent references: frames against scapy and the
checksum helper, service times against the test bed's service model, the event order, the
random streams."""
import math
import random

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from netstor.agent.servicetime import parse
from netstor.cluster.engine import Sim
from netstor.cluster.frames import (ip4, mac, parse_udp, udp_frame, verify_checksums,
                                    wire_bytes)
from netstor.cluster.net import Link, Network, Node
from netstor.cluster.rng import Streams
from netstor.cluster.service import ServiceTime


@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 200])
def test_frames_equal_scapy(n):
    rng = random.Random(n)
    payload = bytes(rng.getrandbits(8) for _ in range(n))
    got = udp_frame(mac("02:00:00:00:00:02"), mac("02:00:00:00:00:01"), ip4("10.77.0.10"),
                    ip4("10.77.1.12"), 40000, 7430, payload, ttl=64, ident=77)
    ref = bytes(Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")
                / IP(src="10.77.0.10", dst="10.77.1.12", ttl=64, id=77, flags=0)
                / UDP(sport=40000, dport=7430) / payload)
    assert got == ref
    assert verify_checksums(got)
    v = parse_udp(got)
    assert (v.sport, v.dport, v.payload, v.src_ip, v.ttl) == (40000, 7430, payload,
                                                              ip4("10.77.0.10"), 64)
    bad = bytearray(got)
    bad[-1 if n else 20] ^= 1
    assert not verify_checksums(bytes(bad))


def test_udp_checksum_zero_sum_is_sent_as_ffff():
    # search a payload whose UDP checksum computes to 0: it must go out as 0xFFFF
    for k in range(200000):
        f = udp_frame(bytes(6), bytes(6), ip4("10.0.0.1"), ip4("10.0.0.2"), 1, 2,
                      k.to_bytes(4, "big"))
        if f[40:42] == b"\xff\xff":
            assert verify_checksums(f)
            break
    else:
        pytest.fail("no zero-sum payload found")


def test_parse_refuses_non_udp():
    f = bytearray(udp_frame(bytes(6), bytes(6), ip4("10.0.0.1"), ip4("10.0.0.2"), 1, 2, b"x"))
    f[23] = 6                                     # TCP
    assert parse_udp(bytes(f)) is None
    assert parse_udp(bytes(20)) is None


@pytest.mark.parametrize("spec", ["exp:25", "bimodal:0.1:25:250", "const:7.5"])
def test_service_times_equal_the_test_beds_model(spec):
    """Fed the uniforms the test bed's model draws, the simulator's service time is the test
    bed's (same spec language, same inversion)."""
    m = parse(spec, seed=11)
    rng = random.Random(11)
    us = [rng.random() for _ in range(2000)]
    ref = [m.sample_ns() for _ in range(2000)]
    st = ServiceTime(spec)
    assert [st.ns(u) for u in us] == ref


def test_slowdown_and_mean():
    st = ServiceTime("exp:25", slow_p=0.01, slow_factor=15)
    assert st.mean_ns == pytest.approx(25e3 * 1.14)
    assert st.ns(0.5, 0.0099) == int(-math.log(0.5) * 25e3 * 15)
    assert st.ns(0.5, 0.01) == st.ns(0.5, 0.5) == int(-math.log(0.5) * 25e3)
    s = Streams(3)
    u, v = s.counter("u"), s.counter("v")
    draws = [st.ns(u.uniform(i), v.uniform(i)) for i in range(200_000)]
    assert sum(draws) / len(draws) == pytest.approx(st.mean_ns, rel=0.02)


def test_fluct_follows_the_test_beds_modes():
    st = ServiceTime("fluct:4000:3:50", seed=7)
    for server in (0, 3):
        ref = parse("fluct:4000:3:50", seed=7 * 1_000_003 + server)
        for i in range(40):
            now = i * 50_000_000 + 1234
            slow = ref.fluct_slow(ref._t0 + now)
            mean = 4000 if slow else 4000 / 3
            assert st.ns(0.5, 1.0, server, now) == int(-math.log(0.5) * mean * 1e3)


def test_events_run_in_time_then_schedule_order():
    sim, seen = Sim(), []
    for t, tag in [(5, "a"), (3, "b"), (5, "c"), (3, "d"), (0, "e")]:
        sim.at(t, seen.append, tag)
    sim.run()
    assert seen == ["e", "b", "d", "a", "c"] and sim.now == 5 and sim.events == 5
    with pytest.raises(ValueError):
        sim.at(1, seen.append, "past")


def test_streams_depend_on_seed_and_name_only():
    a, b = Streams(1), Streams(1)
    assert a.counter("x").uniform(5) == b.counter("x").uniform(5)
    assert a.counter("x").uniform(5) != a.counter("y").uniform(5)
    assert a.counter("x").uniform(5) != Streams(2).counter("x").uniform(5)
    assert list(a.generator("g").random(3)) == list(b.generator("g").random(3))
    c = a.counter("x")
    assert list(c.uniforms(10, 5)) == [c.uniform(i) for i in range(10, 15)]
    us = c.uniforms(0, 100_000)
    assert 0 <= us.min() and us.max() < 1 and abs(us.mean() - 0.5) < 0.005


def test_link_serialises_and_delays():
    sim = Sim()
    net = Network(sim)

    class Sink(Node):
        def __init__(self, net, name):
            super().__init__(net, name)
            self.macs[0] = bytes([2, 0, 0, 0, 0, len(net.nodes)])
            self.got = []

        def receive(self, frame, port):
            self.got.append((self.sim.now, len(frame)))
    a, b = Sink(net, "a"), Sink(net, "b")
    net.connect(a, 0, b, 0, latency_ns=1000, gbps=10)
    a.transmit(0, bytes(100))
    a.transmit(0, bytes(100))
    sim.run()
    ser = -(-wire_bytes(100) * 800 // 1000)          # 10 Gb/s: 0.8 ns a byte
    assert b.got == [(ser + 1000, 100), (2 * ser + 1000, 100)]
    assert isinstance(net.links()[0], Link)
