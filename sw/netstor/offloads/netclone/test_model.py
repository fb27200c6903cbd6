"""NetClone in the golden model, against hand-worked expectations from the paper's steps
(cloning only when both candidates are idle, state from replies, the slower reply filtered)."""
import struct
import zlib

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from netstor.api import Device
from netstor.model.dataplane import DataplaneModel
from netstor.programs import default_pipeline
from netstor.offloads.netclone.program import (NETCLONE_UDP_PORT as PORT, OP_REQ, OP_REPLY, CLONE_NONE,
                                       CLONE_ORIGINAL, CLONE_COPY)

SW_MAC = "02:00:00:00:ff:01"
VIP = "10.77.2.1"
SERVERS = {1: ("10.77.1.1", "02:00:00:00:01:01"), 2: ("10.77.1.2", "02:00:00:00:01:02"),
           3: ("10.77.1.3", "02:00:00:00:01:03")}
CLIENT = ("10.77.0.1", "02:00:00:00:00:01")


def config(policy=1):
    routes = [{"prefix": f"{ip}/32", "action": "route",
               "params": {"port": 1, "dmac": mac, "smac": SW_MAC}} for ip, mac in SERVERS.values()]
    routes += [{"prefix": f"{CLIENT[0]}/32", "action": "route",
                "params": {"port": 0, "dmac": CLIENT[1], "smac": SW_MAC}},
               {"prefix": f"{VIP}/32", "action": "route",
                "params": {"port": 1, "dmac": "02:00:00:00:02:01", "smac": SW_MAC}}]
    return {"programs": {"nc": {"trusted_ports": [1]}},     # servers behind wire port 1
            "tables": {
        "l3.routes": {"entries": routes},
        "nc.groups": {"entries": [
            {"key": 10, "action": "candidates", "params": {"s1": 1, "s2": 2, "policy": policy}},
            {"key": 11, "action": "candidates", "params": {"s1": 2, "s2": 3, "policy": policy}},
            {"key": 12, "action": "candidates", "params": {"s1": 1, "s2": 9, "policy": policy}},
        ]},
        "nc.servers": {"entries": [
            {"key": sid, "action": "server",
             "params": {"ip": ip, "mac": mac, "smac": SW_MAC, "port": 1}}
            for sid, (ip, mac) in SERVERS.items()]},
    }}


@pytest.fixture(scope="module")
def schema():
    from netstor.build import build_core
    return build_core().schema


@pytest.fixture
def nc(schema):
    model = DataplaneModel(default_pipeline())
    dev = Device.open("model", schema=schema, model=model)
    dev.apply(config())
    return model, dev


def nc_hdr(op, group=0, seq=0, server_id=0, load=0, fidx=0, clone=0):
    return struct.pack("!BBHIHHHH", op, clone, group, seq, server_id, load, fidx, 0)


def request(group, payload=b"GET key 42"):
    return bytes(Ether(src=CLIENT[1], dst=SW_MAC) / IP(src=CLIENT[0], dst=VIP, ttl=64)
                 / UDP(sport=PORT, dport=PORT) / Raw(nc_hdr(OP_REQ, group) + payload))


def reply(req_hdr, server_id, load, payload=b"value"):
    ip, mac = SERVERS[server_id]
    h = nc_hdr(OP_REPLY, req_hdr["group"], req_hdr["seq"], server_id, load, req_hdr["fidx"],
               req_hdr["clone"])
    return bytes(Ether(src=mac, dst=SW_MAC) / IP(src=ip, dst=CLIENT[0], ttl=64)
                 / UDP(sport=PORT, dport=PORT) / Raw(h + payload))


def parse(frame):
    pkt = Ether(frame)
    op, clone, group, seq, sid, load, fidx, _ = struct.unpack("!BBHIHHHH",
                                                              bytes(pkt[UDP].payload)[:16])
    assert IP(bytes(pkt[IP])).chksum == pkt[IP].chksum      # checksums stay valid
    return {"dst": pkt[IP].dst, "dmac": pkt.dst, "op": op, "clone": clone, "group": group,
            "seq": seq, "server_id": sid, "load": load, "fidx": fidx,
            "payload": bytes(pkt[UDP].payload)[16:], "ttl": pkt[IP].ttl}


def fidx_of(seq):
    return zlib.crc32(bytes([0]) + seq.to_bytes(4, "big")) & 0xFFFF


def test_both_idle_clones_and_filters_the_slower_reply(nc):
    model, dev = nc
    out = model.process(request(10), 0)
    assert sorted(o.port for o in out) == [1, 1]
    hdrs = sorted((parse(o.frame) for o in out), key=lambda h: h["clone"])
    orig, copy = hdrs
    assert (orig["clone"], orig["dst"], orig["server_id"]) == (CLONE_ORIGINAL, "10.77.1.1", 1)
    assert (copy["clone"], copy["dst"], copy["server_id"]) == (CLONE_COPY, "10.77.1.2", 2)
    assert orig["dmac"] == "02:00:00:00:01:01" and copy["dmac"] == "02:00:00:00:01:02"
    assert orig["seq"] == copy["seq"] == 1 and orig["fidx"] == copy["fidx"] == fidx_of(1)
    assert orig["payload"] == copy["payload"] == b"GET key 42"
    # the faster reply passes (routed to the client), the slower one is dropped
    first = model.process(reply(copy, 2, 0), 1)
    assert [o.port for o in first] == [0] and parse(first[0].frame)["dst"] == CLIENT[0]
    assert model.process(reply(orig, 1, 0), 1) == []
    assert dev.bank("nc.filtered").read(0) == 1
    assert dev.bank("nc.filter").read(fidx_of(1) & 0xFFF) == 0          # slot cleared


def test_busy_server_means_no_clone_and_least_loaded_choice(nc):
    model, dev = nc
    out = model.process(request(10), 0)
    orig = next(parse(o.frame) for o in out if parse(o.frame)["clone"] == CLONE_ORIGINAL)
    model.process(reply(orig, 1, 3), 1)                     # server 1 reports load 3
    assert dev.bank("nc.load1").read(1) == dev.bank("nc.load2").read(1) == 3
    out = model.process(request(10), 0)
    assert len(out) == 1
    h = parse(out[0].frame)
    assert (h["clone"], h["server_id"], h["dst"], h["seq"]) == (CLONE_NONE, 2, "10.77.1.2", 2)
    # an unfiltered reply (clone none) always passes and updates the state
    assert len(model.process(reply(h, 2, 5), 1)) == 1
    out = model.process(request(10), 0)                     # loads 3 vs 5: server 1
    assert [parse(o.frame)["server_id"] for o in out] == [1]
    model.process(reply({**h, "clone": 0}, 1, 0), 1)        # server 1 idle again, 2 busy
    out = model.process(request(10), 0)
    assert [parse(o.frame)["server_id"] for o in out] == [1]


def test_random_policy_uses_the_filter_hash_bit(nc):
    model, dev = nc
    dev.apply({"tables": {"nc.groups": {"replace": False, "entries": [
        {"key": 10, "action": "candidates", "params": {"s1": 1, "s2": 2, "policy": 0}}]}}})
    for sid in (1, 2):                                      # both busy: no cloning
        model.process(reply({"group": 10, "seq": 0, "fidx": 0, "clone": 0}, sid, 1), 1)
    picks = []
    for seq in range(1, 41):
        (o,) = model.process(request(10), 0)
        h = parse(o.frame)
        assert h["seq"] == seq
        picks.append(h["server_id"])
        assert h["server_id"] == (2 if fidx_of(seq) & 1 else 1)
    assert 10 < picks.count(1) < 30


def test_unknown_group_and_server_are_dropped_and_counted(nc):
    model, dev = nc
    assert model.process(request(99), 0) == []
    assert dev.counters("nc.groups.")["nc.groups.miss"] == 1
    # group 12's second candidate (9) is not in nc.servers: the clone copy is dropped
    out = model.process(request(12), 0)
    assert [parse(o.frame)["server_id"] for o in out] == [1]
    assert dev.counters("nc.servers.")["nc.servers.miss"] == 1


def test_filter_collision_and_lost_partner(nc):
    """Two cloned requests whose filter slots collide; a clone whose partner never answers."""
    model, dev = nc
    (a_orig, a_copy) = sorted((parse(o.frame) for o in model.process(request(10), 0)),
                              key=lambda h: h["clone"])
    (b_orig, b_copy) = sorted((parse(o.frame) for o in model.process(request(11), 0)),
                              key=lambda h: h["clone"])
    # force B into A's slot (servers echo fidx): a collision in the hash-indexed filter
    b_orig["fidx"] = b_copy["fidx"] = a_orig["fidx"]
    assert len(model.process(reply(a_copy, 2, 0), 1)) == 1     # A first: records seq 1
    assert len(model.process(reply(b_copy, 3, 0), 1)) == 1     # B first: overwrites with 2
    # A's second reply finds B's seq: passes (a duplicate gets through; never a lost reply)
    assert len(model.process(reply(a_orig, 1, 0), 1)) == 1
    # B's second reply: slot holds A's seq now, so it passes too; nothing was dropped
    assert len(model.process(reply(b_orig, 2, 0), 1)) == 1
    assert dev.bank("nc.filtered").read(0) == 0
    # lost partner: C's first reply records its seq; the partner never comes; a later cloned
    # request D with the same slot overwrites it and its pair is filtered normally
    (c_orig, c_copy) = sorted((parse(o.frame) for o in model.process(request(10), 0)),
                              key=lambda h: h["clone"])
    assert len(model.process(reply(c_orig, 1, 0), 1)) == 1
    (d_orig, d_copy) = sorted((parse(o.frame) for o in model.process(request(10), 0)),
                              key=lambda h: h["clone"])
    d_orig["fidx"] = d_copy["fidx"] = c_orig["fidx"]
    assert len(model.process(reply(d_orig, 1, 0), 1)) == 1
    assert model.process(reply(d_copy, 2, 0), 1) == []
    assert dev.bank("nc.filtered").read(0) == 1


def test_back_to_back_sequence_and_bad_fields(nc):
    model, dev = nc
    seqs = []
    for _ in range(5):
        out = model.process(request(11), 0)
        seqs.append(parse(out[0].frame)["seq"])
        for o in out:                    # keep both servers idle: answer each with load 0
            model.process(reply(parse(o.frame), parse(o.frame)["server_id"], 0), 1)
    assert seqs == [1, 2, 3, 4, 5] and dev.bank("nc.seq").read(0) == 5
    # a request whose clone field is garbage: the data plane sets it
    f = bytearray(request(10))
    f[42 + 1] = 0x7F
    out = model.process(bytes(f), 0)
    assert sorted(parse(o.frame)["clone"] for o in out) == [CLONE_ORIGINAL, CLONE_COPY]
    # an unknown op is routed like plain IPv4 (to the VIP's route), state untouched
    g = bytearray(request(10))
    g[42] = 9
    before = dev.bank("nc.seq").read(0)
    out = model.process(bytes(g), 0)
    assert [o.port for o in out] == [1] and parse(out[0].frame)["dst"] == VIP
    assert dev.bank("nc.seq").read(0) == before
    # a truncated NetClone header (UDP payload shorter than 16 bytes) is not NetClone
    short = bytes(Ether(src=CLIENT[1], dst=SW_MAC) / IP(src=CLIENT[0], dst=VIP)
                  / UDP(sport=PORT, dport=PORT) / Raw(b"\x01\x00"))
    model.process(short, 0)
    assert dev.bank("nc.seq").read(0) == before
