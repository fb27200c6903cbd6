"""NetRS (sw/netstor/offloads/netrs/program.py) in the golden model: ToR rules, RSNode selection with
the ranking core's reference, state updates from responses, DRS, source marker and monitor.
Expected selections come from an independent re-statement of the state arithmetic in this
file plus ``netstor.offloads.netrs.ranking.rank`` (itself bit-exact with the DSLX and the RTL core)."""
import struct

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


def ip(s):
    return int.from_bytes(bytes(int(x) for x in s.split(".")), "big")


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
           w.exact_add("rs.rgroups", [7], "replicas", {"algo": 0, "n": 1, "mask": 0b111,
                                                       "s0": 1, "s1": 2, "s2": 3, "s3": 0,
                                                       "s4": 0, "s5": 0, "s6": 0, "s7": 0}),
           w.exact_add("rs.rgroups", [8], "replicas", {"algo": 1, "n": 1, "mask": 0b111,
                                                       "s0": 1, "s1": 2, "s2": 3, "s3": 0,
                                                       "s4": 0, "s5": 0, "s6": 0, "s7": 0}),
           w.bank_write("rs.marker", 0, MARKER)]
    for sid, a in SERVERS.items():
        ops.append(w.exact_add("rs.servers", [sid], "server",
                               {"ip": ip(a), "mac": 0x500 + sid, "smac": SW, "port": 1}))
    for o in ops:
        apply_writes(model, o)
    return model


def request(group, avail=0xFF, src="10.77.0.1", dst="10.77.9.9", payload=b"GET 42" + bytes(26)):
    hdr = struct.pack("!H6sH", 0, M_REQ.to_bytes(6, "big"), 0) + struct.pack("!HB", group,
                                                                             avail)
    return bytes(Ether(dst="02:00:00:00:00:ff") / IP(src=src, dst=dst)
                 / UDP(sport=PORT, dport=PORT) / Raw(hdr + payload))


def response(rid, mf, rv, sid, q, t, dst="10.77.0.1", payload=b"VALUE"):
    hdr = struct.pack("!H6sHIHHHH", rid, mf.to_bytes(6, "big"), rv, 0, 6, sid, q, t)
    return bytes(Ether(dst="02:00:00:00:00:ff") / IP(src=SERVERS.get(sid, "10.77.1.9"), dst=dst)
                 / UDP(sport=PORT, dport=PORT) / Raw(hdr + payload))


def parse(frame):
    pkt = Ether(frame)
    b = bytes(pkt[UDP].payload)
    rid, mf, rv = struct.unpack("!H6sH", b[:10])
    return {"port_dst": pkt[IP].dst, "rid": rid, "mf": int.from_bytes(mf, "big"), "rv": rv,
            "x": int.from_bytes(b[10:14], "big"), "payload13": b[13:], "dmac": pkt.dst}


class State:
    """Independent re-statement of the per-server state (spec in netrs.py's docstring)."""

    def __init__(self):
        self.s = {}

    def get(self, sid):
        return self.s.setdefault(sid, [0, 0, 0, 0])           # q, os, t, r

    def sent(self, sid):
        st = self.get(sid)
        st[1] = min(st[1] + 1, 255)

    def reply(self, sid, q, t, rt_units):
        st = self.get(sid)
        ew = lambda old, x: (7 * old + x) >> 3                  # noqa: E731
        st[0] = ew(st[0], min(q * 16, 0xFFFF))
        st[1] = max(st[1] - 1, 0)
        st[2] = ew(st[2], t)
        st[3] = ew(st[3], min(rt_units * 16, 0xFFFF))

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
        assert h["mf"] == f(M_RESP) and h["rid"] == 5 and h["rv"] == (arrival >> 8) & 0xFFFF
        assert h["payload13"][:6] == b"GET 42" and h["x"] >> 8 == (7 << 8) | 0xFF
        st.sent(exp)
        # the chosen server answers some of them, slowly or quickly
        if i % 3 != 2:
            q, t = (i % 4), 16 * (1 + 3 * (exp == 1))
            now = arrival + (5 << 8) * (1 + exp)
            back = rs.process(response(5, M_RESP, h["rv"], exp, q, t), 1, arrival=now)
            assert [o.port for o in back] == [0]
            b = parse(back[0].frame)
            assert b["mf"] == M_MON and b["x"] == MARKER
            st.reply(exp, q, t, ((now >> 8) - h["rv"]) & 0xFFFF)
        arrival += 1 << 10
    assert len(set(chosen)) == 3, chosen           # the state moved the choice around
    for k in range(8):                   # every copy holds the same state
        for sid in sids:
            cell = rs.mem_read(f"rs.st{k}", sid)
            assert [cell & 0xFFFF, (cell >> 16) & 0xFF, (cell >> 24) & 0xFFFF,
                    cell >> 40] == st.get(sid)
    assert rs.mem_read("rs.monitor", 2 * 4 + 0) == 8        # tg 2, same rack


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
    marked[42 + 10:42 + 14] = ((4 << 16) | 2).to_bytes(4, "big")
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
    other[42 + 10:42 + 14] = ((2 << 16) | 4).to_bytes(4, "big")
    rs.process(bytes(other), 0)
    assert rs.mem_read("rs.monitor", 2 * 4 + 2) == 1
    same_pod = bytearray(response(5, M_MON, 0, 2, 0, 0))
    same_pod[42 + 10:42 + 14] = ((1 << 16) | 7).to_bytes(4, "big")
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
    slots = {"s0": 1, "s1": 2, "s2": 3, **{f"s{k}": 0 for k in range(3, 8)}}
    for o in (w.exact_add("rs.rgroups", [9], "replicas", {"algo": 3, "n": 1, "mask": 0b111,
                                                          **slots}),
              w.exact_add("rs.rgroups", [10], "replicas", {"algo": 2, "n": 1, "mask": 0b111,
                                                           **slots})):
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
