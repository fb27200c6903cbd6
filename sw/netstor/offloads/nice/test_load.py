"""``netstor-load --scheme nice`` end to end in the real-socket test bed (root): three
``netstor-server`` storage nodes (partition 0 on nodes 0, 1, 2) behind the model switch with
NICE's program (vrings, divisions over the client hosts, copy lists), the metadata service's
view pushed to them, and the load generator's CLI in a client host's namespace sending
open-loop gets and puts to the vnodes (:func:`.demo.run_load`).

Checked against what the run itself recorded (``--nice-ops``: every finished request) and
what the nodes hold after it, independently of the scheme's own accounting:

* counts add up: every request answered (no timeouts, no errors), GETs + PUTs = sent, one
  listed request per send; the switch saw one unicast-vring packet per GET and, per PUT,
  its fragments plus the primary's TS on the multicast vring;
* every acked PUT has its own timestamp per key; every GET's value is exactly the value of
  the acked PUT with the timestamp it reports (values are unique: each put's first 4 bytes
  are its NICE req), never older than a PUT acknowledged before the GET was sent, and
  NOT_FOUND only before any PUT of its key was acknowledged;
* after the run every node of the partition holds, per key, the newest acked PUT (timestamp
  and value byte for byte).

Sizes: 64 B (one fragment), 1,440 B (two), 64 KiB (47 fragments: a get's value comes back
beside the storage reply, which holds 1,440 bytes). Without namespaces: the translator's
retry rule (a try whose answer is lost is retried, a put with its ``req``, a get with a new
one; the engine sees one answered request, no time-out) and the ``--value-size`` bound.
"""
import collections
import os
import socket
import tempfile
import time

import pytest

from netstor.offloads.nice import demo
from netstor.offloads.nice.codec import frags_of, head, pack, unpack
from netstor.offloads.nice.header import (F_RETRY, FRAG_DATA, MAX_OBJECT, OP_GET,
                                          OP_GET_REPLY, OP_PUT, OP_PUT_REPLY, n_frags)
from netstor.offloads.nice.schemes import NiceLoad, load_key
from netstor.proto import MAX_VALUE, Header, Op, Status
from netstor.testbed.rack import Rack

needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="the test bed needs root (network namespaces)")

CASES = {  # size, keys, write ratio, rate (/s), timeout (s)
    "64B": (64, 12, 0.4, 150.0, 1.0),
    "1440B-2frags": (1440, 12, 0.4, 150.0, 1.0),
    # two keys, mostly puts: puts of one key overlap (each in a req slot of its own)
    "hot-keys": (64, 2, 0.7, 250.0, 1.0),
    # 47 fragments per put and per get answer, through the Python model switch
    "64KiB-47frags": (64 * 1024, 8, 0.4, 60.0, 3.0),
}


@needs_root
@pytest.mark.parametrize("case", list(CASES))
def test_load_scheme_through_the_model_switch(case):
    size, keys, write_ratio, rate, timeout = CASES[case]
    duration = 2.0
    with tempfile.TemporaryDirectory(prefix="netstor-nice-load-") as tmp, \
            Rack(2, 3, workdir=tmp) as rack:
        out = demo.run_load(rack, tmp, rate=rate, duration=duration, write_ratio=write_ratio,
                            value_size=size, keys=keys, zipf=0.99, seed=3, timeout=timeout)
    r, sw, stores = out["load"], out["switch"], out["stores"]
    ops = r["nice"]["ops"]
    gets = [o for o in ops if o["op"] == "GET"]
    puts = [o for o in ops if o["op"] == "PUT"]
    print({k: r[k] for k in ("sent", "replies", "timeouts", "errors", "rps", "latency_us")},
          r["nice"]["by_node"], {k: v for k, v in r["nice"].items()
                                 if k not in ("ops", "by_node")}, sw)
    # counts
    assert r["sent"] > 0.6 * rate * duration, r["sent"]
    assert r["timeouts"] == 0 and r["errors"] == {} and r["skipped"] == 0, r
    assert r["replies"] == r["sent"] == len(ops) == len(gets) + len(puts)
    assert r["by_op"]["GET"]["sent"] == len(gets) and r["by_op"]["PUT"]["sent"] == len(puts)
    assert abs(len(puts) - write_ratio * len(ops)) < 0.15 * len(ops)
    assert r["statuses"].get("OK", 0) + r["statuses"].get("NOT_FOUND", 0) == r["sent"]
    assert r["latency_us"]["p50"] is not None
    retries = r["nice"]["retries"]
    assert r["nice"]["aborts"] == r["nice"]["foreign"] == r["nice"]["bad_size"] == 0
    assert r["nice"]["late"] == 0 or retries > 0       # a retried try's answer comes late
    frags = n_frags(size)
    assert frags == -(-size // FRAG_DATA) and (frags == 47) == (size == 64 * 1024)
    # per get one unicast GET, per put its fragments and the primary's TS (NACKed fragments
    # go unicast to the NACK's source, not here); a retried try adds its own
    if retries == 0:
        assert sw["nice.unicast.hit"] == len(gets)
        assert sw["nice.multicast.hit"] == len(puts) * (frags + 1)
    else:
        assert sw["nice.unicast.hit"] >= len(gets)
        assert sw["nice.multicast.hit"] >= len(puts) * (frags + 1)
    assert sw["nice.unicast.miss"] == sw["nice.multicast.miss"] == 0
    assert r["nice"]["resent"] == 0 or r["nice"]["nacks"] > 0
    # every reply matches what was stored
    acked = {}                             # (key, ts) -> the put
    by_key = {}
    for o in puts:
        assert o["status"] == "OK" and o["ts"] > 0, o
        assert (o["key"], o["ts"]) not in acked, ("two puts with one version", o)
        acked[(o["key"], o["ts"])] = o
        by_key.setdefault(o["key"], []).append(o)
    values = {}
    for o in gets:
        if o["status"] == "OK":
            values.setdefault((o["key"], o["ts"]), set()).add(o["value"])
    for o in gets:
        before = [p["ts"] for p in by_key.get(o["key"], []) if p["done_ns"] < o["sent_ns"]]
        if o["status"] == "NOT_FOUND":
            assert o["ts"] == 0 and not before, o
            continue
        put = acked.get((o["key"], o["ts"]))
        assert put is not None, ("a get returned a version no acked put wrote", o)
        v = bytes.fromhex(o["value"])
        assert len(v) == size and v[:4] == put["req"].to_bytes(4, "big"), (o, put)
        assert o["ts"] >= max(before, default=0), ("stale get", o)
    # one version, one value; and every value is the run's value with its put's stamp
    assert all(len(vs) == 1 for vs in values.values())
    tails = {bytes.fromhex(next(iter(vs)))[4:] for vs in values.values()}
    assert len(tails) <= 1
    # the nodes' stores hold the newest acked put of every key
    newest = {key: max(ps, key=lambda p: p["ts"]) for key, ps in by_key.items()}
    for node in (0, 1, 2):
        st = stores[node]
        assert set(st) == {load_key(k) for k in newest}, node
        for key, p in newest.items():
            ts, v = st[load_key(key)]
            assert ts == p["ts"] and v[:4] == p["req"].to_bytes(4, "big") and len(v) == size
            if tails:
                assert v[4:] == next(iter(tails))
    assert stores[0] == stores[1] == stores[2]
    # the client host's division: its gets went to one replica of the partition
    assert len(r["nice"]["by_node"]) == 1 and sum(r["nice"]["by_node"].values()) == len(gets)
    if case == "hot-keys":                  # overlapping puts of one key took other slots
        assert max(p["req"] >> 24 for p in puts) >= 1
    if size > MAX_VALUE:                    # large values were checked above, not empty
        assert any(o["status"] == "OK" for o in gets)


class _LoseFirstAnswer:
    """The translator's socket with a one-node NICE put set behind it instead of the switch:
    whole puts are applied once per ``req`` (a try of a committed put is answered with its
    ts, as the agents do) and gets answered in GET_REPLY fragments, but the first answer to
    a PUT and the first to a GET are lost."""

    def __init__(self):
        self.real = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # fileno for select
        self.inbox = collections.deque()
        self.sent, self.parts, self.done, self.store = [], {}, {}, {}
        self.lost = set()
        self.applied = 0

    def fileno(self):
        return self.real.fileno()

    def getsockname(self):
        return ("127.0.0.1", 40000)

    def close(self):
        self.real.close()

    def sendto(self, data, to):
        h, key, rest = unpack(data)
        self.sent.append(h)
        answer = []
        if h.op == OP_PUT:
            got = self.parts.setdefault(h.req, {})
            got[h.frag] = bytes(rest)
            if len(got) == h.nfrag:
                if h.req not in self.done:          # applied once per req
                    ts = self.store.get(key, (0, b""))[0] + 1
                    self.store[key] = (ts, b"".join(got[i] for i in range(h.nfrag)))
                    self.done[h.req] = ts
                    self.applied += 1
                del self.parts[h.req]
                answer = [pack(head(OP_PUT_REPLY, req=h.req, ts=self.done[h.req]), key)]
        elif h.op == OP_GET:
            ts, value = self.store.get(key, (0, b""))
            parts = frags_of(value)
            answer = [pack(head(OP_GET_REPLY, req=h.req, ts=ts, frag=i, nfrag=len(parts),
                                size=len(value)), key, c) for i, c in enumerate(parts)]
        if answer and h.op not in self.lost:
            self.lost.add(h.op)                     # this answer never arrives
        else:
            self.inbox.extend((a, ("10.0.0.1", 7470)) for a in answer)
        return len(data)

    def recvfrom(self, bufsize):
        if not self.inbox:
            raise BlockingIOError
        return self.inbox.popleft()


def _engine_on_fake(sch, timeout):
    """The load engine with ``sch`` installed, its socket replaced by a fresh
    :class:`_LoseFirstAnswer`: ``(engine, fake)``."""
    from netstor.agent.client import Engine
    eng = Engine([("10.10.0.0", 7470)], timeout=timeout, codec=sch.codec)
    fake = _LoseFirstAnswer()
    sch._install(eng)
    eng.sock.sock.close()
    eng.sock.sock = fake
    return eng, fake


@pytest.mark.parametrize("size", [64 * 1024, MAX_OBJECT])
def test_a_lost_answer_is_retried_with_the_same_req(size):
    """No namespaces: the engine and ``NiceLoad`` with the translator's socket over a fake put
    set that loses the first answer to a put and to a get (64 KiB: 47 fragments each way;
    1 MB: 749).
    Both requests finish OK in the engine (no time-out) on their second try, counted as
    retries: the put's second try re-sends every fragment with the same NICE ``req`` and
    ``F_RETRY`` (applied once), the get's carries a new ``req`` and ``F_RETRY``; the GET's
    value, larger than a storage reply holds, is exactly the put's (its first 4 bytes the
    put's req)."""
    import random

    value = random.Random(5).randbytes(size)
    sch = NiceLoad(1, random.Random(1), 1, nice_ops=True, nice_retries=2,
                   nice_try_timeout=0.1)
    eng, fake = _engine_on_fake(sch, 2.0)
    try:
        done = []
        for op in (Op.PUT, Op.GET):
            t0 = time.monotonic()
            sch.send(eng, op, 7, value if op == Op.PUT else b"", None)
            c = None
            while c is None and time.monotonic() - t0 < 3:
                for c in eng.poll(0.02):
                    sch.record(c)
            done.append((c, time.monotonic() - t0))
    finally:
        eng.close()
    (put, put_s), (get, get_s) = done
    assert eng.timeouts == 0 and put.reply is not None and get.reply is not None
    assert put.reply.status == get.reply.status == Status.OK
    assert sch.stats["retries"] == 2 and sch.stats["late"] == 0
    assert 0.1 <= put_s < 1.0 and 0.1 <= get_s < 1.0      # one try's time-out, not 2 s
    puts = [h for h in fake.sent if h.op == OP_PUT]
    gets = [h for h in fake.sent if h.op == OP_GET]
    frags = n_frags(size)
    assert frags == {64 * 1024: 47, MAX_OBJECT: 749}[size] and len(puts) == 2 * frags
    assert {h.req for h in puts} == {put.head.req}         # the same req in both tries
    assert [h.flags & F_RETRY for h in puts] == [0] * frags + [F_RETRY] * frags
    assert fake.applied == 1 and fake.store[load_key(7)][0] == put.head.ts == 1
    assert len(gets) == 2 and gets[0].req != gets[1].req
    assert [h.flags & F_RETRY for h in gets] == [0, F_RETRY] and get.head.req == gets[1].req
    stored = fake.store[load_key(7)][1]
    assert len(stored) == size and stored[:4] == put.head.req.to_bytes(4, "big")
    assert stored[4:] == value[4:]
    op = sch.ops[1]
    assert op["op"] == "GET" and op["status"] == "OK" and op["ts"] == 1
    assert bytes.fromhex(op["value"]) == stored and get.reply.value == b""   # beside it
    assert sch._sock.values == {}


def test_without_retries_a_lost_answer_is_a_timeout():
    """``--nice-retries 0``: the lost answer is the engine's time-out, the request not
    re-sent."""
    import random

    sch = NiceLoad(1, random.Random(1), 1, nice_retries=0)
    eng, fake = _engine_on_fake(sch, 0.3)
    try:
        sch.send(eng, Op.PUT, 3, b"x" * 3000, None)
        t0, got = time.monotonic(), []
        while not got and time.monotonic() - t0 < 2:
            got = eng.poll(0.02)
    finally:
        eng.close()
    assert len(got) == 1 and got[0].reply is None and eng.timeouts == 1
    assert sch.stats["retries"] == 0 and len(fake.sent) == n_frags(3000) == 3


@pytest.mark.parametrize("size", [MAX_OBJECT + 1, -1])
def test_value_size_bound(size):
    """--value-size: NICE takes objects up to 1 MB (not a storage reply's 1,440 bytes: the
    64 KiB run above); beyond it run_load refuses before sending anything."""
    from netstor.agent import load
    assert NiceLoad.max_value == MAX_OBJECT == 1 << 20 and MAX_VALUE == 1440
    with pytest.raises(ValueError, match=f"value size must be in \\[0, {MAX_OBJECT}\\] "
                                         "with scheme nice"):
        load.run_load("10.10.0.0", scheme="nice", value_size=size, requests=1)


def test_value_size_beyond_1mb_is_a_clear_error(capsys):
    """netstor-load exits 2 naming the bound."""
    from netstor.agent import load
    with pytest.raises(SystemExit) as e:
        load.main(["--scheme", "nice", "--target", "10.10.0.0", "--requests", "1",
                   "--value-size", str(MAX_OBJECT + 1), "--quiet"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"value size must be in [0, {MAX_OBJECT}] with scheme nice" in err
    assert str(MAX_OBJECT + 1) in err


@pytest.mark.parametrize("argv, needle", [
    (["--target", "10.10.0.7"], "not aligned to /16"),                  # not a ring base
    (["--target", "10.11.0.0"], "the same"),                            # = multicast ring
    (["--target", "10.10.0.0", "--nice-multicast", "10.11.0.x"], "10.11.0.x"),
    (["--target", "10.10.0.0,10.12.0.0"], "one --target"),
    (["--target", "10.10.0.0", "--nice-prefix", "40"], "40"),
])
def test_bad_rings_are_clear_errors(argv, needle, capsys):
    """A target that is not a ring base, rings that coincide, a bad multicast base or prefix:
    netstor-load exits 2 naming the problem (before any datagram reaches a node)."""
    from netstor.agent import load
    with pytest.raises(SystemExit) as e:
        load.main(["--scheme", "nice", "--requests", "1", "--timeout", "0.2", "--quiet",
                   *argv])
    assert e.value.code == 2
    assert needle in capsys.readouterr().err
