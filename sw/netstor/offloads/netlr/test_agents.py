"""NetLR in the storage agents over real UDP sockets on loopback (no switch): the replica's
side of NetLR (per-object seq order, replies, op-id deduplication of retries), the rejoin
catch-up between two servers, and the two baselines (chain replication, Hermes-like) run by
several client threads against three ``netstor-server``\\ s, their histories checked by
porcupine (:mod:`.lincheck`) and the replicas' final stores compared."""
import socket
import struct
import time

import pytest

from netstor.agent.server import Server
from netstor.offloads.netlr import codec as C
from netstor.offloads.netlr import lincheck
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
