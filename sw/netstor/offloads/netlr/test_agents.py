"""NetLR in the storage agents over real UDP sockets on loopback (no switch): the replica's
side of NetLR (per-object seq order, replies, op-id deduplication of retries), the rejoin
catch-up between two servers, and the two baselines (chain replication, Hermes-like) run by
several client threads against three ``netstor-server``\\ s, their histories checked by
porcupine (:mod:`netstor.lincheck`) and the replicas' final stores compared."""
import socket
import struct
import time

import pytest

from netstor.agent.server import Server
from netstor.offloads.netlr import codec as C
from netstor import lincheck
from netstor.offloads.netlr.header import (OP_READ, OP_READ_REPLY, OP_WRITE, OP_WRITE_REPLY,
                                           LrHeader)
from netstor.offloads.netlr.schemes import ChainClient, HermesClient, run_workload

LOOP = "127.0.0.1"


def _go():
    try:
        lincheck.go_binary()
        return True
    except lincheck.LincheckUnavailable:
        return False


needs_go = pytest.mark.skipif(not _go(), reason="no Go toolchain (`go` absent): no checker")


@pytest.fixture
def servers(tmp_path):
    srvs = [Server(tmp_path / f"db{i}", bind=LOOP, port=0, server_id=i + 1, sync=False,
                   netlr_port=0).start() for i in range(3)]
    yield srvs
    for s in srvs:
        s.stop()


def _sock(timeout=2.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((LOOP, 0))
    s.settimeout(timeout)
    return s


def _h(op, seq=0, req=1, rid=0):
    return LrHeader(op=op, flags=0, group=3, slot=0x1234, fp=0xABCDEF, seq=seq, rid=rid,
                    nrep=2, req=req)


def _write(s, addr, key, value, seq, opid=0, rid=5, req=1):
    s.sendto(C.pack_msg(_h(OP_WRITE, seq, req, rid), key, C.write_value(opid, value)), addr)
    return C.unpack_msg(s.recvfrom(4096)[0])


def _read(s, addr, key, req=2):
    s.sendto(C.pack_msg(_h(OP_READ, 0, req, rid=7), key), addr)
    h, k, value = C.unpack_msg(s.recvfrom(4096)[0])
    assert h.op == OP_READ_REPLY and h.req == req and h.rid == 7 and k == C.key16(key)
    return h.seq, value


def test_replica_applies_newer_seqs_only_and_always_answers(servers):
    addr = servers[0].offload_address("netlr")
    s = _sock()
    assert _read(s, addr, "a") == (0, b"")                      # absent: seq 0
    h, key, rest = _write(s, addr, "a", b"v10", 10, req=77)
    # the header echoed, op WRITE_REPLY, the copy's rid, the key, nothing else
    assert h == _h(OP_WRITE_REPLY, 10, 77, 5) and key == C.key16("a") and rest == b""
    assert _read(s, addr, "a") == (10, b"v10")
    h, _, _ = _write(s, addr, "a", b"v7", 7, req=78)              # older: answered, not applied
    assert (h.op, h.seq, h.req) == (OP_WRITE_REPLY, 7, 78)
    assert _read(s, addr, "a") == (10, b"v10")
    _write(s, addr, "a", b"v10b", 10)                             # equal: not newer
    assert _read(s, addr, "a") == (10, b"v10")
    _write(s, addr, "a", b"v11", 11)
    assert _read(s, addr, "a") == (11, b"v11")
    # serial arithmetic: 2**32 - 5 < 3 (wrapped)
    _write(s, addr, "w", b"old", 0xFFFFFFFB)
    _write(s, addr, "w", b"new", 3)
    assert _read(s, addr, "w") == (3, b"new")
    st = servers[0].stats()
    assert (st["lr_writes"], st["lr_applied"], st["lr_stale"]) == (6, 4, 2)
    assert st["lr_reads"] == 6 and st["lr_dropped"] == 0


def test_retry_of_a_superseded_write_is_acknowledged_not_applied(servers):
    addr = servers[0].offload_address("netlr")
    s = _sock()
    _write(s, addr, "k", b"X", 5, opid=0x01000001)               # op A, first try
    _write(s, addr, "k", b"Y", 6, opid=0x02000001)               # op B supersedes it
    h, _, _ = _write(s, addr, "k", b"X", 9, opid=0x01000001)     # A's retry (a new seq)
    assert h.op == OP_WRITE_REPLY and h.seq == 9                  # acknowledged ...
    assert _read(s, addr, "k") == (6, b"Y")                       # ... but Y stays
    assert servers[0].stats()["lr_done"] == 1
    # a retry of the operation that is still the current writer is applied (same value)
    _write(s, addr, "k", b"Y", 12, opid=0x02000001)
    assert _read(s, addr, "k") == (12, b"Y")
    # an unknown op id (a first try) with a newer seq is applied
    _write(s, addr, "k", b"Z", 13, opid=0x03000001)
    assert _read(s, addr, "k") == (13, b"Z")
    # remembered per client, however many other writes came since (the test bed found a
    # retry 300 ms and 20 writes later): 40 clients write, then A's retry, then an old try
    # of client 3's first op arriving after its second op
    for c in range(10, 50):
        _write(s, addr, "k", b"c%d" % c, 100 + c, opid=c << 24 | 1)
    _write(s, addr, "k", b"X", 200, opid=0x01000001)
    assert _read(s, addr, "k") == (149, b"c49")
    _write(s, addr, "k", b"W", 201, opid=0x03000002)              # client 3's next op
    _write(s, addr, "k", b"c49", 202, opid=49 << 24 | 1)          # superseded by W now
    _write(s, addr, "k", b"Z", 203, opid=0x03000001)              # client 3's old op
    assert _read(s, addr, "k") == (201, b"W")
    assert servers[0].stats()["lr_done"] == 4


def test_bad_datagrams_are_dropped_and_counted(servers):
    addr = servers[0].offload_address("netlr")
    s = _sock(timeout=0.3)
    s.sendto(b"\x02" * 10, addr)                                  # too short
    s.sendto(C.pack_msg(_h(OP_WRITE_REPLY), "k"), addr)           # not served by a replica
    s.sendto(C.pack_msg(_h(OP_WRITE, 5), "k", b"\x00\x00"), addr)  # write without its op id
    with pytest.raises(socket.timeout):
        s.recvfrom(4096)
    assert servers[0].stats()["lr_dropped"] == 3


def test_catch_up_copies_only_newer_objects(servers):
    donor, joiner = (srv.offload_address("netlr") for srv in servers[:2])
    s = _sock()
    for i in range(300):                                          # several batches
        _write(s, donor, f"key{i}", b"d%d" % i * 10, 100 + i, opid=0x05000000 + i)
    _write(s, joiner, "key3", b"newer", 1000)                     # the joiner is ahead here
    _write(s, joiner, "key4", b"older", 50)                       # and behind here
    _write(s, joiner, "only-here", b"mine", 7)
    h = LrHeader(op=C.T_CATCHUP, flags=0, group=0, slot=0, fp=0, seq=0, rid=0, nrep=0,
                 req=42)
    s.sendto(C.pack_host(h, b"", struct.pack("!IH", C.ip_int(donor[0]), donor[1])), joiner)
    s.settimeout(20)
    rh, _, value, _ = C.unpack_host(s.recvfrom(65535)[0])
    import json
    rep = json.loads(value)
    assert rh.op == C.T_CATCHUP_DONE and rh.req == 42 and rep["ok"]
    assert rep["objects"] == 300 and rep["applied"] == 299 and rep["batches"] > 1
    assert _read(s, joiner, "key3") == (1000, b"newer")
    assert _read(s, joiner, "key4") == (104, b"d4" * 10)
    assert _read(s, joiner, "key299") == (399, b"d299" * 10)
    assert _read(s, joiner, "only-here") == (7, b"mine")
    # op ids travel with the objects: a retry of a superseded op is not applied at the joiner
    _write(s, donor, "key5", b"later", 2000, opid=0x06000000)
    s.sendto(C.pack_host(h, b"", struct.pack("!IH", C.ip_int(donor[0]), donor[1])), joiner)
    s.recvfrom(65535)
    _write(s, joiner, "key5", b"d5" * 10, 3000, opid=0x05000005)
    assert _read(s, joiner, "key5") == (2000, b"later")


def _states(servers, keys):
    out = []
    for srv in servers:
        store = C.ObjectStore(srv.env)
        out.append({k: store.get(C.key16(k)) for k in keys})
    return out


def _workload(servers, cls, **kw):
    nodes = [srv.offload_address("netlr") for srv in servers]
    res = run_workload(lambda cid, rec: cls(nodes, client_id=cid, recorder=rec, seed=cid,
                                            bind=(LOOP, 0), timeout=1.0),
                       clients=4, ops=150, keys=6, write_ratio=0.4, seed=3, **kw)
    rep = lincheck.check(res["history"])
    lost = lincheck.acked_writes_lost(res["history"])
    return res, rep, lost


@needs_go
@pytest.mark.parametrize("cls", [ChainClient, HermesClient], ids=["cr", "hermes"])
def test_baseline_histories_are_linearizable(servers, cls):
    t0 = time.monotonic()
    res, rep, lost = _workload(servers, cls)
    print(cls.scheme, rep, lost["acked_writes"], f"{time.monotonic() - t0:.1f} s")
    assert res["errors"] == []
    assert rep["ok"] and rep["violations"] == 0, rep
    assert rep["operations"] == 4 * 150 + 6 and rep["partitions"] == 6
    assert lost["lost"] == 0 and lost["acked_writes"] > 100
    # every replica ends with the same version of every key
    states = _states(servers, [f"k{i}" for i in range(6)])
    assert states[0] == states[1] == states[2] and all(states[0].values())
    if cls is ChainClient:
        # chain: the head versions each object 1, 2, 3, ...: the final version is the
        # number of writes of the key (no retries on loopback)
        writes = {}
        for op in res["history"]:
            if op["op"] == "write":
                writes[op["key"]] = writes.get(op["key"], 0) + 1
        assert sum(s["retries"] for s in res["stats"]) == 0
        assert {C.key16(k).rstrip(b"\0").hex(): v[0] for k, v in states[0].items()} == writes


@needs_go
def test_a_history_with_reads_off_the_chain_head_is_rejected(servers):
    """The checker on this scheme's real histories can fail: reads taken at the head (which
    applies a write before the tail does). The chain's middle link is a socket that never
    answers, so the write stops after the head and stays pending; a read at the head sees
    the new value, a later read at the tail still nothing: not linearizable."""
    nodes = [srv.offload_address("netlr") for srv in servers]
    hole = _sock()                               # bound, never read: the write dies here
    rec = lincheck.Recorder()
    chain = [nodes[0], hole.getsockname(), nodes[1]]
    w = ChainClient(chain, client_id=1, recorder=rec, bind=(LOOP, 0), timeout=0.2, tries=1)
    at_head = ChainClient(chain[:1], client_id=2, recorder=rec, bind=(LOOP, 0))
    at_tail = ChainClient(chain, client_id=3, recorder=rec, bind=(LOOP, 0))
    try:
        with pytest.raises(Exception):
            w.write("x", "new")                  # never acknowledged: pending
        assert at_head.read("x") == "new"        # the head applied it
        assert at_tail.read("x") is None         # the tail never saw it
    finally:
        for c in (w, at_head, at_tail):
            c.close()
        hole.close()
    rep = lincheck.check(rec.history())
    assert not rep["ok"] and rep["violations"] == 1 and rep["pending_writes"] == 1
    # the correct scheme's history (tail reads only) of the same events is linearizable
    assert lincheck.check([op for op in rec.history() if op["client"] != 2])["ok"]


# ---- the replicas' codec behind NetLR's switch (golden model), no sockets --------------------
class _Replica:
    """A replica for the in-process switch: the real codec (:meth:`NetLrCodec.serve`) on an
    LMDB store; ``sendto`` collects its answers."""

    def __init__(self, path, ip):
        import lmdb
        self.env = lmdb.open(str(path), map_size=1 << 24)
        self.ip = ip
        self.codec = C.NetLrCodec()
        self.out = []

    def count(self, name, n=1):
        pass

    def sendto(self, payload, to):
        self.out.append((payload, to))

    def serve(self, payload, src):
        self.codec.serve(self, self, payload, src)
        out, self.out = self.out, []
        return out


def _rack_switch(tmp_path):
    """NetLR's switch (the demo's switch state: routes, the netlr: section) for a rack of one
    client and three replicas, and the replicas."""
    from netstor.offloads.netlr import demo
    from netstor.testbed.rack import Host, host_mac, route_config
    client = Host("c0", "-", 0, 0, "10.77.0.10", host_mac(0, 0), "10.77.0.1")
    servers = [Host(f"s{i}", "-", 1, i, f"10.77.1.{10 + i}", host_mac(1, i), "10.77.1.1")
               for i in range(3)]

    class Rack:
        pass
    rack = Rack()
    rack.servers, rack.clients = servers, [client]
    cfg = route_config([client] + servers)
    cfg["netlr"] = demo.rack_section(rack)
    state = demo._SwitchState(cfg)
    return state.dp, client, servers, [_Replica(tmp_path / f"r{i}", h.ip)
                                       for i, h in enumerate(servers)]


def _frame(src, dst, payload, port=7460):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from netstor.testbed.rack import port_mac
    return bytes(Ether(src="02:00:00:00:00:01", dst=f"{port_mac(0):012x}")
                 / IP(src=src, dst=dst) / UDP(sport=port, dport=port) / payload)


def _udp(frame):
    from scapy.layers.l2 import Ether
    p = Ether(frame)
    return p["IP"].dst, bytes(p["UDP"].payload)


@pytest.mark.parametrize("dedup", [True, False], ids=["op-ids", "no-op-ids"])
def test_superseded_write_retried_through_the_switch_model(tmp_path, dedup):
    """The case the checker found in the test bed, deterministic: write A of an object is
    applied at every replica, a concurrent write B of the same object supersedes it in the
    switch's slot and commits, so A's acks are stale (dropped): A's client times out and
    sends A again (a new seq). With op ids the replicas acknowledge the retry without
    applying it (A took effect before B) and the object keeps B; without them A's value
    comes back after B's: the checker rejects that history."""
    from netstor.offloads.netlr.header import fingerprint, group_of, slot_of
    dp, client, servers, replicas = _rack_switch(tmp_path)
    key = C.key16("obj")
    by_ip = {r.ip: r for r in replicas}

    def head(op, req):
        return LrHeader(op=op, flags=0, group=group_of(key, 1), slot=slot_of(key),
                        fp=fingerprint(key), seq=0, rid=0, nrep=0, req=req)

    def to_switch(payload, port=0, src=client.ip, dst="10.77.1.250"):
        return [(p, *_udp(f)) for p, f in dp.process(_frame(src, dst, payload), port)]

    def copies(payload):
        outs = to_switch(payload)
        assert len(outs) == 3 and all(p == 1 for p, _, _ in outs)
        return [(by_ip[ip], body) for _, ip, body in outs]

    def replies(pairs):
        return [(r, pl) for r, body in pairs for pl, _ in r.serve(body, (client.ip, 7460))]

    def ack(r, pl):
        return to_switch(pl, port=1, src=r.ip, dst=client.ip)

    def read(req):
        (_, ip, body), = to_switch(C.pack_msg(head(OP_READ, req), key))
        (pl, _), = by_ip[ip].serve(body, (client.ip, 7460))
        (port, _, body), = to_switch(pl, port=1, src=ip, dst=client.ip)
        h, _, value = C.unpack_msg(body)
        assert port == 0 and h.op == OP_READ_REPLY
        return value.decode() if h.seq else None

    rec = lincheck.Recorder()
    op_a = 0x01000001 if dedup else 0
    op_b = 0x02000001 if dedup else 0
    ta = rec.call(1, "write", "obj", "A")
    a_acks = replies(copies(C.pack_msg(head(OP_WRITE, 1), key, C.write_value(op_a, b"A"))))
    t = rec.call(3, "read", "obj")
    rec.ret(t, read(50))                                 # A is visible (the slot's replica)
    tb = rec.call(2, "write", "obj", "B")
    b_acks = replies(copies(C.pack_msg(head(OP_WRITE, 2), key, C.write_value(op_b, b"B"))))
    passed = [o for r, pl in b_acks for o in ack(r, pl)]
    assert len(passed) == 1 and passed[0][0] == 0        # B commits: one reply to the client
    rec.ret(tb)
    assert all(ack(r, pl) == [] for r, pl in a_acks)     # A's acks: stale, dropped
    t = rec.call(3, "read", "obj")
    rec.ret(t, read(51))
    # A's client times out and retries
    retry = replies(copies(C.pack_msg(head(OP_WRITE, 3), key, C.write_value(op_a, b"A"))))
    passed = [o for r, pl in retry for o in ack(r, pl)]
    assert len(passed) == 1                              # the retry commits either way
    rec.ret(ta)
    t = rec.call(3, "read", "obj")
    final = read(52)
    rec.ret(t, final)
    rep = lincheck.check(rec.history()) if _go() else None
    if dedup:
        assert final == "B"
        assert rep is None or rep["ok"]
    else:
        assert final == "A"                              # A took effect twice
        assert rep is None or (not rep["ok"] and rep["key"] == "obj")


def test_load_scheme_storage_mode_on_a_replica(servers):
    """``netstor-load --scheme netlr``'s requests (the storage request behind a NetLR header,
    flag F_STORAGE) answered by a replica addressed directly (no switch: a PUT without a
    seq takes the object's next one): PUT then GET of the same key through the load
    generator's engine, the NetLR header unwrapped, the key's group/slot/fp by the rule."""
    import random
    from netstor.agent.client import Engine
    from netstor.offloads.netlr.header import fingerprint, group_of, slot_of
    from netstor.offloads.netlr.schemes import SCHEMES
    from netstor.proto import Op, Status
    cls = SCHEMES["netlr"]
    sch = cls(1, random.Random(1), 1, lr_groups=4, lr_bind_port=0)
    addr = servers[1].offload_address("netlr")
    seen = []

    with Engine([addr], timeout=2.0, bind=(LOOP, 0), codec=sch.codec) as eng:
        eng.sock = _Wrap(eng.sock, seen)
        got = []
        for op, key, value in ((Op.PUT, 0x1234, b"one"), (Op.PUT, 0x1234, b"two"),
                               (Op.GET, 0x1234, b""), (Op.GET, 0x9999, b"")):
            sch.send(eng, op, key, value, None)
            (c,) = eng.poll(2.0)
            sch.record(c)
            got.append(c)
    put1, put2, get, miss = got
    assert [c.reply.status for c in got] == [Status.OK, Status.OK, Status.OK,
                                             Status.NOT_FOUND]
    assert get.reply.value == b"two" and get.head.op == OP_READ_REPLY and get.head.seq == 2
    assert (put1.head.op, put1.head.seq, put2.head.seq) == (OP_WRITE_REPLY, 1, 2)
    h = LrHeader.unpack(seen[0])
    k = C.key16(0x1234)
    assert (h.op, h.flags, h.group, h.slot, h.fp) == (OP_WRITE, C.F_STORAGE, group_of(k, 4),
                                                     slot_of(k), fingerprint(k))
    assert sch.result(4, [addr]) == {"by_rid": {"0": 4}}


class _Wrap:
    """A socket whose ``sendto`` also records the datagram."""

    def __init__(self, sock, seen):
        self._s, self._seen = sock, seen

    def sendto(self, data, a):
        self._seen.append(bytes(data))
        return self._s.sendto(data, a)

    def __getattr__(self, name):
        return getattr(self._s, name)
