"""NetRS (sw/netstor/offloads/netrs/program.py) in the golden model: ToR rules, RSNode selection with
the ranking core's reference, state updates from responses (time unit and EWMA weight per
replica group, saturation instead of wrap-around, the saturation counter), DRS, source marker
and monitor. Expected selections come from an independent re-statement of the state
arithmetic in this file (exact fractions and floor division from the spec, not the program's
bit slices) plus ``netstor.offloads.netrs.ranking.rank`` (itself bit-exact with the DSLX and
the RTL core)."""
import struct
from fractions import Fraction
from math import floor

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from netstor.driver.tables import TableWriter, apply_writes
from netstor.lang import Pipeline
from netstor.offloads.netrs import ranking as R
from netstor.model.dataplane import DataplaneModel
from netstor.programs.l3 import make_l3
from netstor.offloads.netrs.program import (make_netrs, NETRS_UDP_PORT as PORT, M_REQ, M_RESP, M_MON,
                                    M_DRS, DRS_RID, f)

SW = 0x0200000000FF
SERVERS = {1: "10.77.1.1", 2: "10.77.1.2", 3: "10.77.1.3"}
MARKER = (1 << 16) | 1
UNIT, EWMA = 2, 2            # the fixture's groups 7 and 8: 4.096 us, weight 1/4
TICK_NS = 1024               # 256 cycles of 4 ns


def ip(s):
    return int.from_bytes(bytes(int(x) for x in s.split(".")), "big")


def group(algo, sids, n=1, unit=UNIT, ewma=EWMA):
    return {"algo": algo, "n": n, "mask": (1 << len(sids)) - 1, "unit": unit, "ewma": ewma,
            **{f"s{k}": (sids[k] if k < len(sids) else 0) for k in range(8)}}


@pytest.fixture
def rs():
    prog = make_netrs()
    pl = Pipeline([make_l3(2, also=[prog]), prog])
    model = DataplaneModel(pl)
    w = TableWriter(pl)
    ops = [w.lpm_add("l3.routes", ip("10.77.0.0"), 24, "route", {"port": 0, "dmac": 0xC1,
                                                                 "smac": SW}),
           w.lpm_add("l3.routes", ip("10.77.1.0"), 24, "route", {"port": 1, "dmac": 0x51,
                                                                 "smac": SW}),
           w.lpm_add("rs.tgroups", ip("10.77.0.0"), 24, "rsnode", {"rid": 5, "tg": 2}),
           w.lpm_add("rs.tgroups", ip("10.77.0.9"), 32, "rsnode", {"rid": DRS_RID, "tg": 3}),
           w.exact_add("rs.local", [5], "local"),
           w.exact_add("rs.rgroups", [7], "replicas", group(0, [1, 2, 3])),
           w.exact_add("rs.rgroups", [8], "replicas", group(1, [1, 2, 3])),
           w.bank_write("rs.marker", 0, MARKER),
           # trust: reports (responses, monitor packets) and requests from every port
           w.ternary_add("rs.trust", [1, 0, 0], [1, 0, 0], "trusted", {}, 0),
           w.ternary_add("rs.trust", [0, 0, 0], [1, 0, 0], "trusted", {}, 1)]
    for sid, a in SERVERS.items():
        ops.append(w.exact_add("rs.servers", [sid], "server",
                               {"ip": ip(a), "mac": 0x500 + sid, "smac": SW, "port": 1}))
    for o in ops:
        apply_writes(model, o)
    return model


def add_group(model, gid, params):
    apply_writes(model, TableWriter(model.pipeline).exact_add("rs.rgroups", [gid], "replicas",
                                                              params))


def request(group, avail=0xFF, src="10.77.0.1", dst="10.77.9.9", payload=b"GET 42" + bytes(26)):
    hdr = struct.pack("!H6sI", 0, M_REQ.to_bytes(6, "big"), 0) + struct.pack("!HB", group,
                                                                             avail)
    return bytes(Ether(dst="02:00:00:00:00:ff") / IP(src=src, dst=dst)
                 / UDP(sport=PORT, dport=PORT) / Raw(hdr + payload))


def response(rid, mf, rv, sid, q, t_ns, dst="10.77.0.1", payload=b"VALUE"):
    hdr = struct.pack("!H6sIIHHHI", rid, mf.to_bytes(6, "big"), rv, 0, 8, sid, q, t_ns)
    return bytes(Ether(dst="02:00:00:00:00:ff") / IP(src=SERVERS.get(sid, "10.77.1.9"), dst=dst)
                 / UDP(sport=PORT, dport=PORT) / Raw(hdr + payload))


def parse(frame):
    pkt = Ether(frame)
    b = bytes(pkt[UDP].payload)
    rid, mf, rv = struct.unpack("!H6sI", b[:12])
    return {"port_dst": pkt[IP].dst, "rid": rid, "mf": int.from_bytes(mf, "big"), "rv": rv,
            "x": int.from_bytes(b[12:16], "big"), "payload15": b[15:], "dmac": pkt.dst}


def cell(model, k, sid):
    c = model.mem_read(f"rs.st{k}", sid)
    return [c & 0xFFFF, (c >> 16) & 0xFF, (c >> 24) & 0xFFFF, c >> 40]


class State:
    """Independent re-statement of the per-server state (spec: program.py's and formats.py's
    docstrings): samples as exact fractions floored and capped, the EWMA as
    ``old + floor((sample - old) * 2^-w)``; and the count of samples by saturation."""

    def __init__(self):
        self.s = {}
        self.saturated = [0] * 8

    def get(self, sid):
        return self.s.setdefault(sid, [0, 0, 0, 0])           # q, os, t, r

    def sent(self, sid):
        st = self.get(sid)
        st[1] = min(st[1] + 1, 255)

    @staticmethod
    def capped(x):
        v = floor(x)
        return (0xFFFF, True) if v > 0xFFFF else (v, False)

    def reply(self, sid, q, t_ns, sent_cycle, now_cycle, unit, w):
        """A response: ``t_ns`` reported service time; the request was stamped at
        ``sent_cycle`` and the response arrives at ``now_cycle`` (cycles of 4 ns)."""
        st = self.get(sid)
        unit_ns = TICK_NS * 2 ** unit
        ticks = ((now_cycle // 256) - (sent_cycle // 256)) % 2 ** 24
        sq, a = self.capped(Fraction(16 * q))
        stt, b = self.capped(Fraction(16 * t_ns, unit_ns))
        sr, c = self.capped(Fraction(16 * ticks * TICK_NS, unit_ns))
        self.saturated[a | b << 1 | c << 2] += 1
        ew = lambda old, x: old + floor(Fraction(x - old, 2 ** w))     # noqa: E731
        st[0], st[1] = ew(st[0], sq), max(st[1] - 1, 0)
        st[2], st[3] = ew(st[2], stt), ew(st[3], sr)

    def pick(self, algo, avail, sids, n=1, rr=0, rnd=0):
        reps = [R.Replica(*self.get(s)) for s in sids]
        found, idx, _ = R.rank(algo, avail, reps + [R.Replica()] * (8 - len(reps)), n=n,
                               rr=rr, rnd=rnd)
        return sids[idx] if found else None


class Pointer:
    """The per-group round-robin pointer: 0 .. slots in use - 1, one step per selection."""

    def __init__(self, used):
        self.used, self.v = used, 0

    def step(self):
        v, self.v = self.v, (self.v + 1) % self.used
        return v


def test_selection_follows_the_state_and_the_ranking_core(rs):
    st = State()
    sids = [1, 2, 3]
    arrival = 1 << 12
    chosen = []
    ptr = Pointer(3)
    for i in range(12):
        exp = st.pick(0, 0b111, sids, rr=ptr.step())
        chosen.append(exp)
        out = rs.process(request(7), 0, arrival=arrival)
        assert len(out) == 1 and out[0].port == 1
        h = parse(out[0].frame)
        assert h["port_dst"] == SERVERS[exp], (i, h, st.s)
        # RV: the arrival in 1.024 us ticks, the group's unit and weight above it
        assert h["mf"] == f(M_RESP) and h["rid"] == 5
        assert h["rv"] == (arrival >> 8) + (UNIT << 24) + (EWMA << 28)
        assert h["payload15"][:6] == b"GET 42" and h["x"] >> 8 == (7 << 8) | 0xFF
        st.sent(exp)
        # the chosen server answers some of them, slowly or quickly
        if i % 3 != 2:
            q, t = (i % 4), 1000 * (1 + 3 * (exp == 1)) + 37 * i
            now = arrival + (5 << 8) * (1 + exp) + 3 * i
            back = rs.process(response(5, M_RESP, h["rv"], exp, q, t), 1, arrival=now)
            assert [o.port for o in back] == [0]
            b = parse(back[0].frame)
            assert b["mf"] == M_MON and b["x"] == MARKER
            st.reply(exp, q, t, arrival, now, UNIT, EWMA)
        arrival += 1 << 10
    assert len(set(chosen)) == 3, chosen           # the state moved the choice around
    for k in range(8):                   # every copy holds the same state
        for sid in sids:
            assert cell(rs, k, sid) == st.get(sid)
    assert rs.mem_read("rs.monitor", 2 * 4 + 0) == 8        # tg 2, same rack
    assert [rs.mem_read("rs.samples", k) for k in range(8)] == st.saturated == [8] + [0] * 7


def test_a_70ms_response_reads_70ms_and_saturates_where_the_unit_ends(rs):
    """Hand-computed: a request stamped at cycle 4096 (tick 16) answered 70 ms later (cycle
    4096 + 17,500,000: tick 68,375; 68,359 ticks = 69.999 ms). The old 16-bit RV read it
    modulo 2^16 ticks as 2,823 ticks = 2.9 ms. With the unit 65.536 us (u = 6) and weight 1
    (w = 0, the state is the sample): r = floor(68,359 * 16 / 64) = 17,089 (1068.06 units =
    69.996 ms); service 40 ms: t = floor(40e6 * 16 / 65,536) = 9,765 (39.998 ms). With the
    unit 1.024 us (u = 0, up to 4.19 ms) both saturate at 0xFFFF, and the counter of
    samples by saturation pattern says so (cell 6: t and r)."""
    add_group(rs, 20, group(0, [1], unit=6, ewma=0))
    add_group(rs, 21, group(0, [2], unit=0, ewma=0))
    sent, now = 4096, 4096 + 17_500_000
    for g, sid in ((20, 1), (21, 2)):
        (o,) = rs.process(request(g), 0, arrival=sent)
        h = parse(o.frame)
        assert h["port_dst"] == SERVERS[sid] and h["rv"] & 0xFFFFFF == 16
        rs.process(response(5, M_RESP, h["rv"], sid, 3, 40_000_000), 1, arrival=now)
    assert cell(rs, 0, 1) == [48, 0, 9765, 17089]
    assert 69.99 < 17089 / 16 * 65.536 / 1000 < 70.0 and 39.99 < 9765 / 16 * 65.536 / 1000 < 40
    assert cell(rs, 3, 2) == [48, 0, 0xFFFF, 0xFFFF]
    assert [rs.mem_read("rs.samples", k) for k in range(8)] == [1, 0, 0, 0, 0, 0, 1, 0]


def test_units_weights_and_saturation_against_the_state_model(rs):
    """Groups with every unit code (0..12) and every EWMA weight (1 .. 1/128), responses from
    microseconds to seconds (and queue lengths up to 5000): every state copy equals the
    independent model, and rs.samples counts exactly the model's saturations."""
    import random
    rng = random.Random(5)
    st = State()
    settings = {}
    for g in range(13):                  # group 30 + g: server 10 + g alone, unit g
        sid = 10 + g
        settings[sid] = (g, rng.randrange(8))
        add_group(rs, 30 + g, group(rng.choice([0, 1, 3]), [sid], unit=g,
                                    ewma=settings[sid][1]))
    arrival = 1 << 20
    for i in range(300):
        g = rng.randrange(13)
        sid = 10 + g
        (o,) = rs.process(request(30 + g), 0, arrival=arrival)
        h = parse(o.frame)
        st.sent(sid)
        elapsed = rng.choice([rng.randrange(1, 1 << 12), rng.randrange(1, 1 << 20),
                              rng.randrange(1, 1 << 26), rng.randrange(1, 1 << 31)])
        t_ns = rng.choice([rng.randrange(1 << 14), rng.randrange(1 << 24),
                           rng.randrange(1 << 32), 0xFFFFFFFF])
        q = rng.choice([0, 1, 7, 4095, 4096, 5000, 0xFFFF])
        now = (arrival + elapsed) & 0xFFFFFFFF
        rs.process(response(5, M_RESP, h["rv"], sid, q, t_ns), 1, arrival=now)
        st.reply(sid, q, t_ns, arrival, arrival + elapsed, *settings[sid])
        arrival = (arrival + rng.randrange(1 << 16)) & 0xFFFFFFFF
    for sid in settings:
        for k in (0, 7):
            assert cell(rs, k, sid) == st.get(sid), (sid, settings[sid])
    got = [rs.mem_read("rs.samples", k) for k in range(8)]
    assert got == st.saturated and sum(got) == 300
    # every kind of saturation happened, and not every sample saturated
    assert all(sum(c for k, c in enumerate(got) if k & b) > 0 for b in (1, 2, 4)) and got[0]


def test_c3_multiplier_above_255_in_the_switch(rs):
    """n = 500 clients travels as code 0x9F (n = 496); the switch's choice is the
    reference's with that code. Server 1 is fast (1 ms) with 2 requests outstanding, server 2
    slow (30 ms) and idle (unit 65.536 us, weight 1: the state is the last sample): with
    n = 1, q_hat = 3 for server 1 and 27 * 1 ms < 30 ms picks it; with n = 496, q_hat = 993
    and server 2 wins."""
    sids = [1, 2]
    add_group(rs, 40, group(0, sids, n=R.n_code(500), unit=6, ewma=0))
    add_group(rs, 41, group(0, sids, n=1, unit=6, ewma=0))
    st = State()
    for sid, t_ns in ((1, 1_000_000), (2, 30_000_000)):
        (o,) = rs.process(request(40, avail=1 << (sid - 1)), 0, arrival=0)
        st.sent(sid)
        rs.process(response(5, M_RESP, parse(o.frame)["rv"], sid, 0, t_ns), 1, arrival=2560)
        st.reply(sid, 0, t_ns, 0, 2560, 6, 0)
    for _ in range(2):
        rs.process(request(40, avail=0b01), 0)
        st.sent(1)
    assert [cell(rs, 0, s) for s in sids] == [st.get(s) for s in sids] \
        == [[0, 2, 244, 2], [0, 0, 7324, 2]]
    picks = {}
    for gid, n in ((40, R.n_code(500)), (41, 1)):
        rr = rs.mem_read("rs.rr", gid)
        want = st.pick(0, 0b11, sids, n=n, rr=rr)
        (o,) = rs.process(request(gid), 0)
        assert parse(o.frame)["port_dst"] == SERVERS[want]
        picks[gid] = want
        st.sent(want)
    assert R.n_code(500) == 0x9F and picks == {40: 2, 41: 1}


def test_availability_lor_and_no_replica(rs):
    for _ in range(6):                   # server 1 excluded by the RGID's availability bits
        (o,) = rs.process(request(7, avail=0b110), 0)
        assert parse(o.frame)["port_dst"] != SERVERS[1]
    # LOR (group 8): outstanding counts after the requests above decide
    st = {s: rs.mem_read("rs.st0", s) >> 16 & 0xFF for s in (1, 2, 3)}
    (o,) = rs.process(request(8), 0)
    best = min((1, 2, 3), key=lambda s: (st[s], s))
    assert parse(o.frame)["port_dst"] == SERVERS[best]
    # nothing available: dropped and counted
    assert rs.process(request(7, avail=0b11111000), 0) == []
    assert rs.mem_read("rs.noreplica", 0) == 1
    # unknown replica group: dropped
    assert rs.process(request(99), 0) == []


def test_requests_for_another_rsnode_are_forwarded_towards_it(rs):
    w = TableWriter(rs.pipeline)
    for o in (w.lpm_add("rs.tgroups", ip("10.77.0.20"), 32, "rsnode", {"rid": 9, "tg": 4}),
              w.lpm_add("rs.tgroups", ip("10.77.0.21"), 32, "rsnode", {"rid": 10, "tg": 4}),
              w.exact_add("rs.forward", [9], "forward", {"port": 1, "dmac": 0xA99,
                                                         "smac": SW})):
        apply_writes(rs, o)
    before = {s: rs.mem_read("rs.st0", s) for s in (1, 2, 3)}
    (o,) = rs.process(request(7, src="10.77.0.20", dst=SERVERS[2]), 0)
    h = parse(o.frame)
    # unchanged but for the RID the ToR set: no selection, no state, the next hop's MAC
    assert o.port == 1 and h["port_dst"] == SERVERS[2] and h["dmac"] == "00:00:00:00:0a:99"
    assert h["rid"] == 9 and h["mf"] == M_REQ and h["rv"] == 0
    assert {s: rs.mem_read("rs.st0", s) for s in (1, 2, 3)} == before
    # an RSNode ID this device neither owns nor knows a way to: dropped
    assert rs.process(request(7, src="10.77.0.21", dst=SERVERS[2]), 0) == []
    # the server's response goes back towards RSNode 9 (not by the client's route), keeps
    # its label, changes no state here, and is marked by this device (the server's ToR)
    (b,) = rs.process(response(9, M_RESP, 3, 2, 1, 16, dst="10.77.0.20"), 1)
    r = parse(b.frame)
    assert b.port == 1 and r["dmac"] == "00:00:00:00:0a:99" and r["mf"] == M_RESP
    assert r["x"] == MARKER
    assert {s: rs.mem_read("rs.st0", s) for s in (1, 2, 3)} == before
    # already marked further down (another ToR's marker): kept; unknown RSNode: routed
    marked = bytearray(response(10, M_RESP, 3, 2, 1, 16, dst="10.77.0.21"))
    marked[42 + 12:42 + 16] = ((4 << 16) | 2).to_bytes(4, "big")
    (c,) = rs.process(bytes(marked), 1)
    r = parse(c.frame)
    assert c.port == 0 and r["x"] == (4 << 16) | 2 and r["mf"] == M_RESP


def test_drs_and_monitor_classes(rs):
    # the controller put client 10.77.0.9 on DRS: no selection, the backup replica it named
    (o,) = rs.process(request(7, src="10.77.0.9", dst=SERVERS[3]), 0)
    h = parse(o.frame)
    assert o.port == 1 and h["port_dst"] == SERVERS[3] and h["mf"] == f(M_DRS)
    assert h["rid"] == DRS_RID
    # its response (the server inverts f): relabelled for the monitor, marked, counted (tg 3)
    (b,) = rs.process(response(DRS_RID, M_DRS, 0, 3, 0, 0, dst="10.77.0.9"), 1)
    assert parse(b.frame)["mf"] == M_MON and parse(b.frame)["x"] == MARKER
    assert rs.mem_read("rs.monitor", 3 * 4 + 0) == 1
    # a monitored response that comes in from the client side with another pod's marker
    other = bytearray(response(5, M_MON, 0, 2, 0, 0))
    other[42 + 12:42 + 16] = ((2 << 16) | 4).to_bytes(4, "big")
    rs.process(bytes(other), 0)
    assert rs.mem_read("rs.monitor", 2 * 4 + 2) == 1
    same_pod = bytearray(response(5, M_MON, 0, 2, 0, 0))
    same_pod[42 + 12:42 + 16] = ((1 << 16) | 7).to_bytes(4, "big")
    rs.process(bytes(same_pod), 0)
    assert rs.mem_read("rs.monitor", 2 * 4 + 1) == 1
    # a response for another RSNode is not used for state and keeps its label
    (n,) = rs.process(response(6, M_RESP, 0, 1, 9, 99), 1)
    assert parse(n.frame)["mf"] == M_RESP and rs.mem_read("rs.st0", 1) == 0


def test_bad_magic_is_plain_traffic(rs):
    frame = bytearray(request(7))
    frame[42 + 2] ^= 0xFF                                       # MF corrupted
    (o,) = rs.process(bytes(frame), 0)
    assert parse(o.frame)["port_dst"] == "10.77.9.9"            # routed as addressed
    assert all(rs.mem_read(f"rs.st{k}", s) == 0 for k in range(8) for s in (1, 2, 3))


def test_round_robin_and_power_of_two_choices(rs):
    w = TableWriter(rs.pipeline)
    for o in (w.exact_add("rs.rgroups", [9], "replicas", group(3, [1, 2, 3])),
              w.exact_add("rs.rgroups", [10], "replicas", group(2, [1, 2, 3]))):
        apply_writes(rs, o)
    # round robin: 1, 2, 3, 1, 2, ... (the pointer wraps at the 3 slots in use), and a slot
    # the request excludes is skipped to the next one
    got = [parse(rs.process(request(9), 0)[0].frame)["port_dst"] for _ in range(7)]
    assert got == [SERVERS[s] for s in (1, 2, 3, 1, 2, 3, 1)]
    (o,) = rs.process(request(9, avail=0b101), 0)           # pointer at slot 1 -> slot 2
    assert parse(o.frame)["port_dst"] == SERVERS[3]
    # P2C: two candidates from CRC-32(client address, request count), the one with fewer
    # outstanding requests wins (state: every request so far is outstanding)
    from netstor.lang.program import hash_crc32
    st = State()
    for s in got + [SERVERS[3]]:
        st.sent({v: k for k, v in SERVERS.items()}[s])
    count = rs.mem_read("rs.seq", 0)
    picks = []
    for i in range(40):
        rnd = hash_crc32(ip("10.77.0.1") | (count + 1 + i) << 32, 64) & 0xFFFF
        exp = st.pick(2, 0b111, [1, 2, 3], rnd=rnd)
        (o,) = rs.process(request(10), 0)
        assert parse(o.frame)["port_dst"] == SERVERS[exp], i
        st.sent(exp)
        picks.append(exp)
    assert sorted(set(picks)) == [1, 2, 3] and max(map(picks.count, (1, 2, 3))) <= 16


def test_server_ids_beyond_64_are_selected_counted_and_learnt(rs):
    """10-bit server ids (header.SID_BITS): servers 1000 and 64 with server 1 in group 1000
    (C3). The switch picks what the independent state model and the ranking reference pick,
    server 1000 among them; every state copy of 1000 and 64 counts its outstanding requests
    and learns its responses' EWMAs at its own cell (not at 1000 mod 64 = 40, where 6-bit
    indices put it); the group's round-robin pointer sits at cell 1000. A response naming
    server 2024 (beyond the 1,024 ids; 2024 mod 1024 = 1000) teaches nothing."""
    from netstor.offloads.netrs.header import SERVERS as N_IDS, SID_BITS
    assert (SID_BITS, N_IDS) == (10, 1024)
    addr = {1000: "10.77.1.100", 64: "10.77.1.64", 1: SERVERS[1]}
    w = TableWriter(rs.pipeline)
    for sid in (1000, 64):
        apply_writes(rs, w.exact_add("rs.servers", [sid], "server",
                                     {"ip": ip(addr[sid]), "mac": 0x500 + sid, "smac": SW,
                                      "port": 1}))
    sids = [1000, 64, 1]
    add_group(rs, 1000, group(0, sids))
    st, ptr = State(), Pointer(3)
    arrival, picks, answered = 1 << 12, [], 0
    for i in range(15):
        exp = st.pick(0, 0b111, sids, rr=ptr.step())
        (o,) = rs.process(request(1000), 0, arrival=arrival)
        h = parse(o.frame)
        assert o.port == 1 and h["port_dst"] == addr[exp], (i, st.s)
        assert h["dmac"] == f"00:00:00:00:{(0x500 + exp) >> 8:02x}:{(0x500 + exp) & 0xFF:02x}"
        st.sent(exp)
        picks.append(exp)
        # counted: every copy of the chosen server has one more request outstanding
        assert [cell(rs, k, exp)[1] for k in range(8)] == [st.get(exp)[1]] * 8
        if i % 4 != 3:                   # most are answered: server 1000 slowly
            q, t = i % 3, (9000 if exp == 1000 else 1500) + 11 * i
            now = arrival + (3 << 8) * (1 + (exp == 1000))
            back = rs.process(response(5, M_RESP, h["rv"], exp, q, t), 1, arrival=now)
            assert [parse(b.frame)["mf"] for b in back] == [M_MON]
            st.reply(exp, q, t, arrival, now, UNIT, EWMA)
            answered += 1
        arrival += 1 << 10
    assert set(picks) == {1000, 64, 1} and picks[0] == 1000, picks
    for k in range(8):
        for sid in sids:
            assert cell(rs, k, sid) == st.get(sid), (k, sid)
        assert cell(rs, k, 1000 % 64) == [0, 0, 0, 0]
    assert st.get(1000)[2] > st.get(64)[2] > 0      # learnt: 1000 is the slow one
    assert rs.mem_read("rs.rr", 1000) == ptr.v and rs.mem_read("rs.rr", 1000 % 64) == 0
    assert sum(rs.mem_read("rs.samples", k) for k in range(8)) == answered
    # an id beyond the state: relabelled as any response, but no cell changes
    before = [cell(rs, k, 1000) for k in range(8)]
    (b,) = rs.process(response(5, M_RESP, rv_now(arrival), 2024, 7, 50_000), 1,
                      arrival=arrival + 512)
    assert parse(b.frame)["mf"] == M_MON
    assert [cell(rs, k, 1000) for k in range(8)] == before
    assert sum(rs.mem_read("rs.samples", k) for k in range(8)) == answered


def rv_now(arrival, unit=UNIT, ewma=EWMA):
    return (arrival >> 8) + (unit << 24) + (ewma << 28)
