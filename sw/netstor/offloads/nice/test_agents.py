"""NICE's storage agents over real UDP sockets on loopback (no switch: the test sends each
put to the put set's physical addresses, as the multicast vring's copy list would; nodes
send TS by fanout): fragments reassembled byte for byte, NACK repair, a get of a locked
object waiting for the commit, ABORT on a silent secondary and the retry that keeps its
``req``, primary promotion's commit/abort rules, the handoff's separate store, forwarded
gets and the rejoin catch-up, and the NOOB baselines; concurrent histories checked by
porcupine (:mod:`netstor.lincheck`)."""
import json
import socket
import struct
import threading
import time

import lmdb
import pytest

from netstor import lincheck
from netstor.agent.server import Server
from netstor.offloads.nice import codec as C
from netstor.offloads.nice.header import (FRAG_DATA, OP_ABORT, OP_GET, OP_GET_REPLY, OP_NACK,
                                          OP_PUT, OP_PUT_REPLY, key_bytes)
from netstor.offloads.nice.schemes import (MODES, Direct, NiceClient, NoobClient, Placement,
                                           run_workload)

LOOP = "127.0.0.1"


def _go():
    try:
        lincheck.go_binary()
        return True
    except lincheck.LincheckUnavailable:
        return False


needs_go = pytest.mark.skipif(not _go(), reason="no Go toolchain (`go` absent): no checker")


class Rig:
    """``n`` servers with NICE sockets, one partition (primary node 1, replicas 1..3)."""

    def __init__(self, tmp, n=3):
        self.tmp = tmp
        self.srvs = [self._start(i) for i in range(n)]
        self.nodes = {i + 1: list(s.offload_address("nice")) for i, s in enumerate(self.srvs)}
        self.set(primary=1, replicas=[1, 2, 3], put_set=[1, 2, 3])

    def _start(self, i):
        s = Server(self.tmp / f"db{i}", bind=LOOP, port=0, server_id=i + 1, sync=False,
                   workers=1, nice_port=0).start()
        s.codecs["nice"][0].attach(s)
        return s

    def codec(self, node):
        return self.srvs[node - 1].codecs["nice"][0]

    def cfg(self, node, **part):
        return {"node": node, "nodes": self.nodes, "n_partitions": 1, "fanout": True,
                "partitions": {0: part}}

    def set(self, **part):
        part.setdefault("handoff", None)
        self.part = part
        for i, s in enumerate(self.srvs):
            if s.running:
                self.codec(i + 1).configure(self.cfg(i + 1, **part))

    def addr(self, node):
        return tuple(self.nodes[node])

    def placement(self):
        return Placement(self.nodes, {0: self.part}, 1)

    def client(self, cid=1, **kw):
        kw.setdefault("timeout", 1.0)
        return NiceClient(Direct(self.placement()), client_id=cid, bind=(LOOP, 0), **kw)

    def stop(self):
        for s in self.srvs:
            s.stop()


@pytest.fixture
def rig(tmp_path):
    r = Rig(tmp_path)
    yield r
    r.stop()


def _sock(timeout=2.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((LOOP, 0))
    s.settimeout(timeout)
    return s


def _frags(s, key, value, req, to, only=None, flags=0):
    parts = C.frags_of(value)
    port = s.getsockname()[1]
    for i, chunk in enumerate(parts):
        if only is None or i in only:
            for a in to:
                s.sendto(C.pack(C.head(OP_PUT, flags=flags, frag=i, nfrag=len(parts),
                                       client=LOOP, rsv=port, req=req, size=len(value)),
                                key, chunk), a)


def _recv(s, op=None, timeout=2.0):
    s.settimeout(timeout)
    while True:
        h, key, rest = C.unpack(s.recvfrom(65535)[0])
        if op is None or h.op == op:
            return h, key, rest


def _get(s, addr, key, req=900, timeout=2.0):
    """One get from a raw socket: ``(ts, value)``."""
    port = s.getsockname()[1]
    s.sendto(C.pack(C.head(OP_GET, client=LOOP, rsv=port, req=req), key), addr)
    got, first = {}, None
    while True:
        h, _, rest = _recv(s, OP_GET_REPLY, timeout)
        if h.req != req:
            continue
        first = first or h
        got[h.frag] = rest
        if len(got) == h.nfrag:
            return first.ts, b"".join(got[i] for i in range(h.nfrag))


def _value(n, seed=1):
    return bytes((i * 131 + seed * 7 + (i >> 8)) & 0xFF for i in range(n))


@pytest.mark.parametrize("size", [4, FRAG_DATA, 64 * 1024, 1 << 20],
                         ids=["4B", "1400B", "64KiB", "1MiB"])
def test_objects_reassembled_byte_for_byte(rig, size):
    """A put of ``size`` bytes reaches every replica whole: each node's get answers the same
    bytes and the primary's timestamp; the LMDB record holds them."""
    v = _value(size, size)
    with rig.client() as c:
        c.put("obj", v)
        for n in (1, 2, 3):
            c.fabric.get_node = n
            assert c.get("obj") == v
    for n in (1, 2, 3):
        rec = rig.codec(n).record(key_bytes("obj"))
        assert rec.value == v and rec.ts == 1 and rec.primary == 1
        st = rig.srvs[n - 1].stats()
        assert st["ni_puts"] == 1 and st["ni_commits"] == 1
    # every fragment once per replica, plus what NACKs asked again (loopback drops some of a
    # 1 MiB burst when a socket buffer fills)
    assert c.stats["retries"] == 0
    assert sum(s.stats()["ni_frags"] for s in rig.srvs) == \
        3 * -(-size // FRAG_DATA) + c.stats["resent"]
    assert (c.stats["resent"] > 0) == (c.stats["nacks"] > 0)


def test_lost_fragment_repaired_by_nack(rig):
    """Fragment 1 of 3 never arrives: every replica NACKs exactly [1] to the client, which
    re-sends it unicast to each NACK's source; then the put commits."""
    s = _sock()
    v = _value(3 * FRAG_DATA - 100)
    key = key_bytes("nacked")
    _frags(s, key, v, 7, [rig.addr(n) for n in (1, 2, 3)], only={0, 2})
    nacks = {}
    while len(nacks) < 3:
        h, k, rest, src = (*_recv(s, OP_NACK), None)
        assert k == key and h.req == 7 and h.nfrag == 3
        nacks[h.frag] = [struct.unpack_from("!H", rest, i)[0] for i in range(0, len(rest), 2)]
    assert nacks == {1: [1], 2: [1], 3: [1]}
    _frags(s, key, v, 7, [rig.addr(n) for n in (1, 2, 3)], only={1}, flags=C.F_RESEND)
    h, _, _ = _recv(s, OP_PUT_REPLY)
    assert h.req == 7 and h.ts == 1
    for n in (1, 2, 3):
        assert _get(s, rig.addr(n), key, req=100 + n) == (1, v)
    assert sum(rig.srvs[n].stats()["ni_nacks"] for n in range(3)) >= 3


def test_get_of_a_locked_object_waits_for_the_commit(rig):
    """The put's fragments reach the secondaries but not (yet) the primary: both lock it and
    ack; a get at a secondary gets no answer while the lock holds (the primary, which holds
    no lock, still answers the old value: nothing is committed anywhere); once the primary
    has the object it sends TS, and the waiting get is answered with the new value."""
    s, g = _sock(), _sock()
    key = key_bytes("locked")
    old, new = _value(10, 1), _value(5000, 2)
    _frags(s, key, old, 1, [rig.addr(n) for n in (1, 2, 3)])
    _recv(s, OP_PUT_REPLY)
    _frags(s, key, new, 2, [rig.addr(2), rig.addr(3)])
    time.sleep(0.1)
    assert rig.codec(2).pending == {key: {(C.cid_of(C.head(0, client=LOOP,
                                                              rsv=s.getsockname()[1]), None),
                                            2): (5000, 0)}}
    port = g.getsockname()[1]
    g.sendto(C.pack(C.head(OP_GET, client=LOOP, rsv=port, req=55), key), rig.addr(2))
    with pytest.raises(socket.timeout):
        g.settimeout(0.3)
        g.recvfrom(65535)
    assert _get(g, rig.addr(1), key, req=56) == (1, old)
    _frags(s, key, new, 2, [rig.addr(1)])
    h, _, _ = _recv(s, OP_PUT_REPLY)
    assert h.req == 2 and h.ts == 2
    got, first = {}, None
    while len(got) < 4:
        h, _, rest = _recv(g, OP_GET_REPLY)
        if h.req == 55:
            got[h.frag] = rest
            first = h
    assert first.ts == 2 and b"".join(got[i] for i in range(4)) == new
    assert rig.srvs[1].stats()["ni_get_waits"] == 1


def test_retry_of_a_committed_put_is_not_applied_again(rig):
    """A put's try keeps its req: a late try of put (A, 7) after B's put is answered at once
    (the primary knows it committed) and does not bring A's value back."""
    s = _sock()
    key = key_bytes("retry")
    all3 = [rig.addr(n) for n in (1, 2, 3)]
    _frags(s, key, b"AAAA", 7, all3)
    assert _recv(s, OP_PUT_REPLY)[0].ts == 1
    with rig.client(cid=9) as c:
        c.put("retry", b"BBBB")
    _frags(s, key, b"AAAA", 7, all3, flags=0x01)
    h, _, _ = _recv(s, OP_PUT_REPLY)
    assert h.req == 7 and h.ts == 0                       # answered, no new timestamp
    for n in (1, 2, 3):
        assert _get(s, rig.addr(n), key, req=200 + n) == (2, b"BBBB")
    assert rig.srvs[0].stats()["ni_done"] >= 1


def test_silent_secondary_aborts_the_put_and_the_retry_succeeds_without_it(rig):
    """Node 3 is stopped: the primary has the object and node 2's ack but not node 3's:
    after ACK_TIMEOUT it answers ABORT and reports node 3; node 2 keeps the put locked
    (a get there waits). The metadata service's new view (put set 1, 2) lets the client's
    retry (same req) commit on both."""
    rig.srvs[2].stop()
    s = _sock()
    key = key_bytes("abort")
    _frags(s, key, b"v1v1", 3, [rig.addr(n) for n in (1, 2)])
    t0 = time.monotonic()
    h, _, _ = _recv(s, OP_ABORT)
    assert h.req == 3 and C.ACK_TIMEOUT - 0.05 < time.monotonic() - t0 < C.ACK_TIMEOUT + 0.5
    assert rig.codec(1).reports[:1] == [3]
    assert key in rig.codec(2).pending                    # still locked after the abort
    rig.set(primary=1, replicas=[1, 2], put_set=[1, 2])
    _frags(s, key, b"v1v1", 3, [rig.addr(n) for n in (1, 2)], flags=0x01)
    h, _, _ = _recv(s, OP_PUT_REPLY)
    assert h.req == 3 and h.ts == 1
    for n in (1, 2):
        assert _get(s, rig.addr(n), key, req=300 + n) == (1, b"v1v1")
    assert not rig.codec(2).pending


def test_promotion_commits_what_any_node_committed_and_aborts_the_rest(rig):
    """The primary (node 1) dies mid-puts: put X is locked on nodes 2 and 3 (no node has its
    TS); put Y is locked on node 2 but committed on node 3 (the old primary's TS reached
    node 3 only). Node 2 promoted: Y committed everywhere with node 3's timestamp, X aborted
    (the pending records dropped, locks released)."""
    s = _sock()
    kx, ky = key_bytes("x"), key_bytes("y")
    port = s.getsockname()[1]
    cid = (C.ip_int(LOOP) << 16) | port
    _frags(s, kx, b"xxxx", 11, [rig.addr(2), rig.addr(3)])
    _frags(s, ky, b"yyyy", 12, [rig.addr(2), rig.addr(3)])
    time.sleep(0.1)
    rig.srvs[0].stop()
    ts = C.head(C.OP_TS, frag=1, cid=cid, req=12, ts=5)
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(C.pack(ts, ky), rig.addr(3))
    time.sleep(0.1)
    assert rig.codec(3).put_state(ky, cid, 12) == ("committed", 5, 1)
    assert rig.codec(2).put_state(ky, cid, 12)[0] == "pending"
    rig.set(primary=2, replicas=[2, 3], put_set=[2, 3])
    res = rig.codec(2).promote(0)
    assert res == {"ok": True, "locked": 2, "committed": 1, "aborted": 1}
    time.sleep(0.1)
    for n in (2, 3):
        assert _get(s, rig.addr(n), ky, req=400 + n) == (5, b"yyyy")
        assert _get(s, rig.addr(n), kx, req=410 + n) == (0, b"")       # absent, not locked
        assert not rig.codec(n).pending


def test_handoff_store_forwarded_gets_and_rejoin_catch_up(tmp_path):
    """Node 3 fails; node 4 is the handoff (put set 1, 2, 4). A new object lands in node 4's
    separate handoff store (not its main one); a get at node 4 of an old object is forwarded
    to the primary, which answers the client itself. Node 3 comes back on its stale
    database, joins the put set, catches up from the handoff's store: it then holds the new
    object and the newer value of the old one."""
    r = Rig(tmp_path, n=4)
    try:
        s = _sock()
        with r.client() as c:
            c.put("old", b"old-1")
            c.put("both", b"both-1")
        r.srvs[2].stop()
        r.set(primary=1, replicas=[1, 2, 4], put_set=[1, 2, 4], handoff=4)
        with r.client(cid=2) as c:
            c.put("new", b"new-1")
            c.put("both", b"both-2")
        h4 = r.codec(4)
        assert h4.record(key_bytes("new"), env=h4.henv).value == b"new-1"
        assert h4.record(key_bytes("new"), env=r.srvs[3].env) is None
        assert _get(s, r.addr(4), key_bytes("new"), req=1) == (1, b"new-1")
        port = s.getsockname()[1]
        s.sendto(C.pack(C.head(OP_GET, client=LOOP, rsv=port, req=2), key_bytes("old")),
                 r.addr(4))
        h, _, rest = _recv(s, OP_GET_REPLY)
        assert h.flags & C.F_FWD and rest == b"old-1" and h.ts == 1
        assert r.srvs[3].stats()["ni_fwd_gets"] == 1
        # node 3 back: phase 1 (in the put set, not serving gets), catch-up, phase 2
        time.sleep(0.4)
        r.srvs[2] = r._start(2)
        r.nodes[3] = list(r.srvs[2].offload_address("nice"))
        r.set(primary=1, replicas=[1, 2, 4], put_set=[1, 2, 3, 4], handoff=4)
        res = r.codec(3).catch_up(r.addr(4), db="handoff")
        assert res["ok"] and res["objects"] == 2 and res["applied"] == 2
        j = r.codec(3)
        assert j.record(key_bytes("new")).value == b"new-1"
        assert j.record(key_bytes("both")).value == b"both-2"
        assert j.record(key_bytes("old")).value == b"old-1"
        # phase 2: node 4 is no longer the handoff: its handoff store is emptied, its main
        # store never held the partition, and every replica answers the latest acked value
        r.set(primary=1, replicas=[1, 2, 3], put_set=[1, 2, 3])
        acked = {"old": (1, b"old-1"), "both": (2, b"both-2"), "new": (1, b"new-1")}
        assert _objects(h4.henv) == {}
        assert r.srvs[3].stats()["ni_handoff_cleared"] == 2
        assert _objects(r.srvs[3].env) == {}
        for n in (1, 2, 3):
            for i, (k, want) in enumerate(sorted(acked.items())):
                assert _get(s, r.addr(n), key_bytes(k), req=10 * n + i) == want, (n, k)
    finally:
        r.stop()


def test_catch_up_batches_objects(tmp_path):
    """Node 3 misses 150 puts (140 new objects, 10 newer values; 3 of them 3,000 bytes: too
    large for one reply fragment, fetched alone) and comes back on its stale database: the
    catch-up from node 1 copies them in batches: the datagrams the donor received and sent
    during it (its own counters) are far fewer than the objects copied, and node 3's store
    then equals nodes 1's and 2's (every key, timestamp and value)."""
    r = Rig(tmp_path)
    try:
        with r.client() as c:
            for i in range(20):
                c.put(f"o{i}", f"old-{i}".encode())
        r.srvs[2].stop()
        r.set(primary=1, replicas=[1, 2], put_set=[1, 2])
        with r.client(cid=2) as c:
            for i in range(10, 160):
                v = f"v{i}-".encode() * (3000 // 6 if i % 40 == 0 else 3)
                c.put(f"o{i}", v)
        time.sleep(0.4)
        r.srvs[2] = r._start(2)
        r.nodes[3] = list(r.srvs[2].offload_address("nice"))
        r.set(primary=1, replicas=[1, 2], put_set=[1, 2, 3])
        before = r.srvs[0].stats()
        res = r.codec(3).catch_up(r.addr(1), db="main")
        after = r.srvs[0].stats()
        msgs = (after["ni_received"] - before["ni_received"] +
                after["ni_replies"] - before["ni_replies"])
        print(res, "donor datagrams", msgs)
        assert res["ok"] and res["objects"] == 160
        assert res["fetched"] == res["applied"] == 150 and res["fetched_alone"] == 3
        # 3 SYNC exchanges (63 keys each), 3 FETCH_MANY (+ their fragments), 3 alone
        assert res["batches"] == 3 and res["fetch_requests"] == 3
        assert msgs < 150 // 3, msgs
        main = _objects(r.srvs[0].env)
        assert len(main) == 160
        assert _objects(r.srvs[2].env) == main == _objects(r.srvs[1].env)
    finally:
        r.stop()


def _objects(env):
    """``{key: (ts, value)}`` of an LMDB store's committed objects (read directly)."""
    out = {}
    with env.begin() as txn:
        for k, raw in txn.cursor():
            if k.startswith(b"no"):
                rec = C.Record.unpack(raw)
                out[k[2:]] = (rec.ts, rec.value)
    return out


def _keys_of(part, n_parts, count, prefix):
    """``count`` key names whose partition (the default subgroup map) is ``part``."""
    from netstor.offloads.nice.header import UNICAST, default_partition, subgroup
    out, i = [], 0
    while len(out) < count:
        name = f"{prefix}{i}"
        s = subgroup(key_bytes(name), UNICAST)
        if default_partition(s, UNICAST.n_subgroups, n_parts) == part:
            out.append(name)
        i += 1
    return out


def test_handoff_store_cleared_per_partition_after_rejoin(tmp_path):
    """Two partitions, both with node 3 as a member; node 3 fails and node 4 stands in for
    both (its handoff store takes the objects written meanwhile). Node 3's rejoin ends for
    partition 0 first: only partition 0's objects leave node 4's handoff store; partition
    1's stay (node 4 still serves them) until its rejoin ends too. At each step gets at every
    replica return the latest acked value of an independent record of the acked puts."""
    r = Rig(tmp_path, n=4)

    def view(p0, p1):
        parts = {0: p0, 1: p1}
        for n in range(1, 5):
            if r.srvs[n - 1].running:
                r.codec(n).configure({"node": n, "nodes": r.nodes, "n_partitions": 2,
                                      "fanout": True, "partitions": parts})
        return Placement(r.nodes, parts, 2)

    def part(primary, replicas, put_set=None, handoff=None):
        return {"primary": primary, "replicas": replicas, "put_set": put_set or replicas,
                "handoff": handoff}
    try:
        k0, k1 = _keys_of(0, 2, 3, "a"), _keys_of(1, 2, 3, "b")
        acked = {}

        def put(pl, cid, names, tag):
            with NiceClient(Direct(pl), client_id=cid, bind=(LOOP, 0), timeout=1.0) as c:
                for k in names:
                    v = f"{k}-{tag}".encode()
                    c.put(k, v)
                    acked[k] = v

        def check(pl, nodes):
            with NiceClient(Direct(pl), client_id=9, bind=(LOOP, 0), timeout=1.0) as c:
                for n in nodes:
                    c.fabric.get_node = n
                    for k, v in acked.items():
                        if n in pl.parts[pl.part_of(key_bytes(k))]["replicas"]:
                            assert c.get(k) == v, (n, k)
        pl = view(part(1, [1, 2, 3]), part(2, [2, 3, 1]))
        put(pl, 1, k0 + k1, "1")
        r.srvs[2].stop()
        pl = view(part(1, [1, 2, 4], handoff=4), part(2, [2, 4, 1], handoff=4))
        put(pl, 2, k0[:2] + k1[:2], "2")
        h4 = r.codec(4)
        assert len(_objects(h4.henv)) == 4
        time.sleep(0.4)
        r.srvs[2] = r._start(2)
        r.nodes[3] = list(r.srvs[2].offload_address("nice"))
        pl = view(part(1, [1, 2, 4], [1, 2, 3, 4], 4), part(2, [2, 4, 1], [2, 4, 1, 3], 4))
        for p in (0, 1):
            assert r.codec(3).catch_up(r.addr(4), db="handoff", partitions=[p])["ok"]
        pl = view(part(1, [1, 2, 3]), part(2, [2, 4, 1], [2, 4, 1, 3], 4))
        left = _objects(h4.henv)
        assert sorted(left) == sorted(key_bytes(k) for k in k1[:2])
        assert r.srvs[3].stats()["ni_handoff_cleared"] == 2
        check(pl, (1, 2, 3, 4))
        pl = view(part(1, [1, 2, 3]), part(2, [2, 3, 1]))
        assert _objects(h4.henv) == {} and _objects(r.srvs[3].env) == {}
        assert r.srvs[3].stats()["ni_handoff_cleared"] == 4
        check(pl, (1, 2, 3))
    finally:
        r.stop()


@needs_go
@pytest.mark.parametrize("scheme", ["nice", *MODES])
def test_concurrent_histories_are_linearizable(rig, scheme):
    """Four client threads, 3 keys, 40 % puts of 3,000-byte objects (3 fragments), gets at
    random replicas (NICE, NOOB 2PC) or the primary (NOOB primary-backup): porcupine finds
    0 violations, and no acknowledged put is lost."""
    pl = rig.placement()

    def make(cid, rec):
        if scheme == "nice":
            return NiceClient(Direct(pl), client_id=cid, recorder=rec, seed=cid,
                              bind=(LOOP, 0), timeout=1.0)
        _, access, cons = scheme.split("-")
        return NoobClient(pl, access, cons, [rig.addr(2)], client_id=cid, recorder=rec,
                          seed=cid, bind=(LOOP, 0), timeout=1.0)
    res = run_workload(make, clients=4, ops=40, keys=3, write_ratio=0.4, size=3000)
    assert res["errors"] == []
    rep = lincheck.check(res["history"])
    lost = lincheck.acked_writes_lost(res["history"])
    assert rep["ok"] and rep["violations"] == 0, rep
    assert lost["lost"] == 0 and lost["acked_writes"] > 20, lost


@needs_go
def test_the_checker_rejects_a_replica_that_skips_the_lock(rig):
    """Negative control: node 3 answers gets without waiting for locks (its pending map is
    hidden from the get path), and its commits are delayed: porcupine must find the stale
    reads."""
    c3 = rig.codec(3)
    orig_ts = c3._ts

    def late_ts(h, key, data, addr):           # commits 50 ms late, gets go on meanwhile
        threading.Timer(0.05, orig_ts, (h, key, data, addr)).start()

    def eager_get(h, key, data, addr, env=None):
        c3._answer_get(h, key, c3._reply_to(h, addr), env)
    c3._ts = late_ts               # the handlers table takes the instance's methods
    c3._get = eager_get
    pl = rig.placement()
    res = run_workload(lambda cid, rec: NiceClient(Direct(pl), client_id=cid, recorder=rec,
                                                   seed=cid, bind=(LOOP, 0), timeout=1.0),
                       clients=4, ops=60, keys=2, write_ratio=0.5, size=10)
    rep = lincheck.check(res["history"])
    assert not rep["ok"] and rep["violations"] > 0


def test_config_over_the_socket_and_bad_datagrams(rig):
    """T_CONFIG is acknowledged and applied; short or unknown datagrams are dropped and
    counted."""
    s = _sock()
    cfg = rig.cfg(2, primary=2, replicas=[2, 3], put_set=[2, 3], handoff=None)
    s.sendto(C.pack(C.head(C.T_CONFIG, req=5), b"", json.dumps(cfg).encode()), rig.addr(2))
    h, _, _ = _recv(s)
    assert h.op == C.T_CONFIG_ACK and h.req == 5
    assert rig.codec(2).cfg.parts[0]["primary"] == 2
    s.sendto(b"\x02" * 10, rig.addr(1))
    s.sendto(C.pack(C.head(99), b"k"), rig.addr(1))
    time.sleep(0.1)
    assert rig.srvs[0].stats()["ni_dropped"] == 2


def test_pending_log_survives_a_restart(tmp_path):
    """A locked put's log record is in LMDB: a node restarted on its database holds the put
    pending again (the catch-up resolves it with the primary)."""
    r = Rig(tmp_path)
    try:
        s = _sock()
        key = key_bytes("logged")
        _frags(s, key, b"zzzz", 21, [r.addr(2)])
        time.sleep(0.1)
        r.srvs[1].stop()
        env = lmdb.open(str(tmp_path / "db1"), readonly=True, lock=False, subdir=True)
        with env.begin() as txn:
            assert sum(1 for k, _ in txn.cursor() if k.startswith(b"np" + key)) == 1
        env.close()
        time.sleep(0.4)
        r.srvs[1] = r._start(1)
        assert list(r.codec(2).pending) == [key]
    finally:
        r.stop()


def test_threads_sharing_a_socket_are_different_clients(rig):
    """Two client threads on one socket (one address and port) with ids 3 and 2: thread 2's
    put after thread 3's is a new put, not a retry (the test bed's checker found puts of
    thread 2 answered as retries and never applied when the last-req map ignored the id)."""
    from netstor.offloads.nice.schemes import Endpoint
    ep = Endpoint((LOOP, 0))
    try:
        pl = rig.placement()
        c3 = NiceClient(Direct(pl), client_id=3, endpoint=ep, timeout=1.0)
        c2 = NiceClient(Direct(pl), client_id=2, endpoint=ep, timeout=1.0)
        c3.put("shared", b"three")
        c2.put("shared", b"two")
        for n in (1, 2, 3):
            c2.fabric.get_node = n
            assert c2.get("shared") == b"two"
        rec = rig.codec(1).record(key_bytes("shared"))
        cid = (C.ip_int(LOOP) << 16) | ep.addr[1]
        assert rec.last == {C.who(cid, 3 << 24 | 1): 3 << 24 | 1,
                            C.who(cid, 2 << 24 | 1): 2 << 24 | 1}
    finally:
        ep.close()
