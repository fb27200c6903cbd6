import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from netstor.proto import Header, HEADER_LEN, MAX_VALUE, Op, REPLY, Status, VERSION
from netstor.agent import servicetime
from netstor.agent.server import Server, build_parser
from netstor.agent.client import (BadRequest, Client, Engine, RequestTimeout, ServerBusy)

LOOP = "127.0.0.1"
SW = str(Path(__file__).resolve().parents[2])


@pytest.fixture
def server(tmp_path):
    srv = Server(tmp_path / "db", bind=LOOP, port=0, server_id=42, sync=False)
    srv.start()
    yield srv
    srv.stop()


def _burst(srv, n, op=Op.GET, key=1, timeout=5.0):
    """Send n requests at once on one engine; return the completions."""
    with Engine(getattr(srv, "address", srv), timeout=timeout) as eng:
        for i in range(n):
            eng.send(op, key + i)
        done = []
        end = time.monotonic() + timeout + 2
        while len(done) < n and time.monotonic() < end:
            done += eng.poll(0.2)
    assert len(done) == n
    return done


def test_get_put_del_semantics(server):
    c = Client(server.address, timeout=1.0)
    assert c.get(1) is None
    assert c.last_reply.status == Status.NOT_FOUND and c.last_reply.server_id == 42
    c.put(1, b"one")
    assert c.get(1) == b"one"
    r = c.last_reply
    assert r.op == Op.GET | REPLY and r.key == 1 and r.queue_len >= 1 and r.service_ns > 0
    c.put(1, b"uno")                    # overwrite
    assert c.get(1) == b"uno"
    c.put(2, b"")                       # empty value is a value
    assert c.get(2) == b""
    big = bytes(range(256)) * 5 + bytes(MAX_VALUE - 1280)
    c.put(2**64 - 1, big)               # largest key and value
    assert c.get(2**64 - 1) == big
    assert c.delete(1) is True
    assert c.delete(1) is False
    assert c.get(1) is None
    s = server.stats()
    assert s["by_op"] == {"GET": 6, "PUT": 4, "DEL": 2}
    assert s["served"] == 12 and s["not_found"] == 3 and s["errors"] == 0
    with pytest.raises(ValueError):
        c.put(-1, b"x")
    with pytest.raises(ValueError):
        c.put(3, bytes(MAX_VALUE + 1))
    c.close()


def test_malformed_answered_or_dropped(server):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1.0)
    addr = server.address
    # a reply op sent to the server
    s.sendto(Header(op=Op.GET | REPLY, key=9, req_id=77).pack(), addr)
    r = Header.unpack(s.recv(2048))
    assert (r.status, r.req_id, r.op, r.server_id) == (Status.BAD_REQUEST, 77, Op.GET | REPLY, 42)
    # unknown op
    s.sendto(Header(op=9, key=9, req_id=78).pack(), addr)
    r = Header.unpack(s.recv(2048))
    assert (r.status, r.req_id, r.op) == (Status.BAD_REQUEST, 78, 9 | REPLY)
    # value_len disagreeing with the length: header parses far enough -> BAD_REQUEST
    bad = bytearray(Header(op=Op.PUT, key=5, req_id=79, value=b"abcd").pack())
    s.sendto(bytes(bad[:-1]), addr)
    r = Header.unpack(s.recv(2048))
    assert (r.status, r.req_id, r.key, r.op) == (Status.BAD_REQUEST, 79, 5, Op.PUT | REPLY)
    # a PUT value larger than MAX_VALUE (fits in a datagram, not in a reply)
    hdr = bytearray(Header(op=Op.PUT, key=5, req_id=80).pack())
    hdr[14:16] = (MAX_VALUE + 1).to_bytes(2, "big")        # value_len
    s.sendto(bytes(hdr) + bytes(MAX_VALUE + 1), addr)
    r = Header.unpack(s.recv(2048))
    assert (r.status, r.req_id) == (Status.BAD_REQUEST, 80)
    # bad magic, bad version, too short: dropped
    good = Header(op=Op.GET, key=5, req_id=81).pack()
    for d in (b"XX" + good[2:], good[:2] + bytes([VERSION + 1]) + good[3:], good[:HEADER_LEN - 1],
              b""):
        s.sendto(d, addr)
    with pytest.raises(socket.timeout):
        s.settimeout(0.3)
        s.recv(2048)
    st = server.stats()
    assert st["bad_request"] == 4 and st["dropped"] == 4 and st["errors"] == 8
    assert st["received"] == 8 and st["served"] == 0
    s.close()
    with pytest.raises(BadRequest):     # the client's exception for BAD_REQUEST
        Client(server.address)._ok(9, 1)


def test_fuzz_random_datagrams(server):
    rng = random.Random(2024)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    addr = server.address
    good = Header(op=Op.PUT, key=3, req_id=5, value=b"hello").pack()
    n = 3000
    for i in range(n):
        kind = i % 3
        if kind == 0:       # pure noise, any length
            d = rng.randbytes(rng.choice([0, 1, 5, 31, 32, 33, 64, rng.randrange(1500)]))
        elif kind == 1:     # right magic and version, random rest
            d = bytes([0x4E, 0x53, VERSION]) + rng.randbytes(rng.randrange(0, 100))
        else:               # a valid PUT with a few bytes flipped / truncated / extended
            b = bytearray(good)
            for _ in range(rng.randrange(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            d = bytes(b[:rng.randrange(len(b) + 1)]) if rng.random() < 0.3 else bytes(b)
        s.sendto(d, addr)
        if i % 100 == 99:           # let the server catch up: stay below the socket buffers
            end = time.monotonic() + 3
            while server.stats()["received"] < i + 1 and time.monotonic() < end:
                time.sleep(0.002)
    # the server keeps serving
    c = Client(addr, timeout=1.0)
    c.put(123456, b"still alive")
    assert c.get(123456) == b"still alive"
    end = time.monotonic() + 5
    while time.monotonic() < end:
        st = server.stats()
        if st["received"] >= n + 2 and st["queue_len"] == 0:
            break
        time.sleep(0.05)
    st = server.stats()
    assert st["received"] == n + 2
    # every datagram was served, answered BAD_REQUEST / BUSY, or dropped
    assert st["served"] + st["bad_request"] + st["dropped"] + st["busy"] == n + 2
    assert st["dropped"] > 0 and st["bad_request"] > 0
    assert all(t.is_alive() for t in server._threads)
    c.close()
    s.close()


def test_queue_len_grows_when_workers_busy(tmp_path):
    with Server(tmp_path / "db", bind=LOOP, port=0, workers=2, sync=False,
                service_model="const:20000") as srv:
        done = _burst(srv, 10)
    assert all(c.reply.status == Status.NOT_FOUND for c in done)
    qls = [c.reply.queue_len for c in sorted(done, key=lambda c: c.done_ns)]
    assert max(qls) >= 8            # the first replies see the whole burst queued
    assert qls[-1] <= 2             # the last ones see an empty queue
    assert all(c.reply.service_ns >= 20_000_000 for c in done)


def test_busy_past_queue_limit(tmp_path):
    with Server(tmp_path / "db", bind=LOOP, port=0, workers=1, queue_limit=3, sync=False,
                service_model="const:30000") as srv:
        done = _burst(srv, 20)
        st = srv.stats()
    statuses = [c.reply.status for c in done]
    busy = statuses.count(Status.BUSY)
    assert busy >= 12 and statuses.count(Status.NOT_FOUND) >= 3
    assert busy + statuses.count(Status.NOT_FOUND) == 20
    assert st["busy"] == busy
    for c in done:
        if c.reply.status == Status.BUSY:
            assert c.reply.queue_len >= 3 and c.reply.service_ns == 0
    # the synchronous client raises ServerBusy
    with Server(tmp_path / "db2", bind=LOOP, port=0, workers=1, queue_limit=0, sync=False) as srv:
        with pytest.raises(ServerBusy):
            Client(srv.address).get(1)


def test_service_ns_reflects_exp_model(tmp_path):
    # a server process of its own, so the test client does not compete for its GIL
    model = "exp:2000"
    p, addr = _spawn(tmp_path / "db", "--workers", "8", "--no-sync", "--service-model", model,
                     "--seed", "11")
    try:
        done = _burst(addr, 800, timeout=10.0)
    finally:
        _finish(p, signal.SIGTERM)
    m = servicetime.parse(model, seed=11)
    draws = sorted(m.sample_ns() / 1000 for _ in range(800))        # the same draws
    drawn = sum(draws) / len(draws)
    got = sorted(c.reply.service_ns / 1000 for c in done)
    mean = sum(got) / len(got)
    # measured = draw + LMDB work + sleep overshoot and thread scheduling (tens to hundreds
    # of us, more on a loaded machine); never less than the draw, so the sorted measurements
    # dominate the sorted draws element by element
    assert all(g >= d for g, d in zip(got, draws))
    assert drawn == pytest.approx(2000, rel=0.12)                   # exp: sd/mean = 1/sqrt(800)
    assert drawn <= mean <= 1.5 * drawn + 500, (drawn, mean)
    assert got[400] <= draws[400] + 1000                            # medians (ln 2 * mean)


def test_service_ns_bimodal_fractions(tmp_path):
    # well separated modes: service_ns is measured wall time, so a fast request can show a
    # few ms of thread scheduling on a loaded machine
    p, addr = _spawn(tmp_path / "db", "--workers", "8", "--no-sync", "--service-model",
                     "bimodal:0.25:50:20000", "--seed", "5")
    try:
        done = _burst(addr, 600, timeout=10.0)
    finally:
        _finish(p, signal.SIGTERM)
    got = [c.reply.service_ns / 1000 for c in done]
    slow = sorted(g for g in got if g >= 20000)     # a worker sleeps at least the delay
    fast = sorted(g for g in got if g < 20000)
    assert len(slow) / len(got) == pytest.approx(0.25, abs=0.06)
    # fast ones stay well below, bar a few delayed by thread scheduling on a busy machine
    assert sum(g > 10000 for g in fast) <= 0.03 * len(got)
    assert slow[len(slow) // 2] < 23000 and fast[len(fast) // 2] < 1000


def test_client_timeout_and_retries():
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)   # never answers
    sink.bind((LOOP, 0))
    c = Client(sink.getsockname(), timeout=0.1, retries=2)
    t = time.monotonic()
    with pytest.raises(RequestTimeout, match="3 attempt"):
        c.get(1)
    assert 0.25 < time.monotonic() - t < 1.5
    got = 0
    sink.settimeout(0.5)
    for _ in range(3):
        Header.unpack(sink.recv(2048))
        got += 1
    assert got == 3
    c.close()
    sink.close()


def test_client_two_servers_key_pick(tmp_path):
    with Server(tmp_path / "a", bind=LOOP, port=0, server_id=1, sync=False) as a, \
            Server(tmp_path / "b", bind=LOOP, port=0, server_id=2, sync=False) as b:
        c = Client([a.address, b.address])
        for k in range(6):
            c.put(k, b"v%d" % k)
            assert c.last_reply.server_id == 1 + k % 2
        assert [c.get(k) for k in range(6)] == [b"v%d" % k for k in range(6)]
        assert a.stats()["by_op"]["PUT"] == 3 == b.stats()["by_op"]["PUT"]


# -- heartbeat ------------------------------------------------------------------------------
class _Collector(BaseHTTPRequestHandler):
    posts = None

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.posts.append((self.path, json.loads(body)))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *a):
        pass


def test_heartbeat_posts(tmp_path):
    posts = []
    handler = type("H", (_Collector,), {"posts": posts})
    http = HTTPServer((LOOP, 0), handler)
    th = threading.Thread(target=http.serve_forever, kwargs={"poll_interval": 0.05},
                          daemon=True)
    th.start()
    try:
        url = f"http://{LOOP}:{http.server_address[1]}/"
        with Server(tmp_path / "db", bind=LOOP, port=0, server_id=9, sync=False,
                    controller=url, heartbeat_interval=0.1) as srv:
            Client(srv.address).put(1, b"x")
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as junk:
                junk.sendto(b"junk", srv.address)          # not our magic: dropped
            end = time.monotonic() + 5
            while (len(posts) < 3 or posts[-1][1]["counters"]["dropped"] < 1) and \
                    time.monotonic() < end:
                time.sleep(0.05)
            port = srv.address[1]
    finally:
        http.shutdown()
        http.server_close()
    assert len(posts) >= 3
    path, hb = posts[-1]
    assert path == "/api/v1/heartbeat"
    assert set(hb) == {"server_id", "addr", "port", "queue_len", "served", "errors",
                       "uptime_s", "counters"}
    assert (hb["server_id"], hb["addr"], hb["port"]) == (9, LOOP, port)
    assert hb["served"] == 1 and hb["errors"] == 1 and hb["uptime_s"] > 0
    c = hb["counters"]
    assert (c["received"], c["served"], c["ok"], c["dropped"], c["bad_request"],
            c["not_allowed"]) == (2, 1, 1, 1, 0, 0)
    assert len(c) <= 32 and all(type(v) is int for v in c.values())


def test_heartbeat_unreachable_controller_is_not_fatal(tmp_path, caplog):
    s = socket.socket()
    s.bind((LOOP, 0))           # a port nobody listens on
    dead = s.getsockname()[1]
    s.close()
    with Server(tmp_path / "db", bind=LOOP, port=0, sync=False,
                controller=f"http://{LOOP}:{dead}", heartbeat_interval=0.05) as srv:
        time.sleep(0.4)
        c = Client(srv.address)
        c.put(1, b"ok")
        assert c.get(1) == b"ok"
        st = srv.stats()
    assert st["heartbeat_failures"] >= 3
    warnings = [r for r in caplog.records if "heartbeat" in r.getMessage()]
    assert len(warnings) == 1           # logged once per minute


def test_server_validation(tmp_path):
    with pytest.raises(ValueError):
        Server(tmp_path, server_id=70000)
    with pytest.raises(ValueError, match="unknown service model"):
        Server(tmp_path, service_model="foo:1")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--db", "x", "--service-model", "exp:zz"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--server-id", "65536", "--db", "x"])


# -- the real process: ready line, SIGTERM, durability -------------------------------------
def _spawn(db, *extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = SW + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.Popen([sys.executable, "-m", "netstor.agent.server", "--db", str(db),
                          "--bind", LOOP, "--port", "0", "--server-id", "5", *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = p.stdout.readline()          # blocks until the ready line (or exit)
    assert line.startswith("netstor-server 5 listening on 127.0.0.1:"), \
        (line, p.stderr.read() if p.poll() is not None else "")
    return p, (LOOP, int(line.rsplit(":", 1)[1]))


def _finish(p, sig):
    p.send_signal(sig)
    try:
        rc = p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return rc, p.stdout.read()


def test_durable_across_restart(tmp_path):
    db = tmp_path / "db"
    p, addr = _spawn(db)
    try:
        c = Client(addr, timeout=2.0)
        c.put(7, b"survives")
        c.put(8, b"deleted")
        assert c.delete(8)
        c.close()
    finally:
        rc, rest = _finish(p, signal.SIGTERM)
    assert rc == 0 and rest == ""           # exactly one line on stdout
    p, addr = _spawn(db)
    try:
        c = Client(addr, timeout=2.0)
        assert c.get(7) == b"survives"
        assert c.get(8) is None
        c.put(9, b"after sigkill too")
        c.close()
    finally:
        _finish(p, signal.SIGKILL)
    p, addr = _spawn(db)
    try:
        c = Client(addr, timeout=2.0)
        assert c.get(9) == b"after sigkill too"
        c.close()
    finally:
        rc, _ = _finish(p, signal.SIGINT)
    assert rc == 0


def test_stop_still_answers_queued_requests(tmp_path):
    srv = Server(tmp_path / "db", bind=LOOP, port=0, workers=1, sync=False,
                 service_model="const:30000").start()
    with Engine(srv.address, timeout=3.0) as eng:
        for k in range(4):
            eng.send(Op.GET, k)
        time.sleep(0.05)                # all four received, one in service
        srv.stop()
        done = []
        end = time.monotonic() + 5
        while len(done) < 4 and time.monotonic() < end:
            done += eng.poll(0.2)
    assert sorted(c.reply.status for c in done) == [Status.NOT_FOUND] * 4
    assert not any(t.is_alive() for t in srv._threads)
    srv.stop()                          # idempotent


def test_engine_matches_out_of_order_and_ignores_strays():
    fake = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    fake.bind((LOOP, 0))
    fake.settimeout(2.0)
    with Engine(fake.getsockname(), timeout=2.0) as eng:
        sent = [eng.send(Op.GET, k) for k in range(3)]
        reqs = []
        for _ in range(3):
            data, peer = fake.recvfrom(2048)
            reqs.append(Header.unpack(data))
        for h in reversed(reqs):        # out of order
            fake.sendto(h.reply(Status.OK, value=b"k%d" % h.key, server_id=4).pack(), peer)
        fake.sendto(reqs[0].reply(Status.OK).pack(), peer)                  # duplicate
        fake.sendto(b"garbage", peer)                                       # not a reply
        fake.sendto(Header(op=Op.GET, key=1, req_id=reqs[1].req_id).pack(), peer)  # a request
        done = []
        end = time.monotonic() + 3
        while len(done) < 3 and time.monotonic() < end:
            done += eng.poll(0.2)
        time.sleep(0.1)
        assert eng.poll(0.1) == []
        assert sorted(c.key for c in done) == [0, 1, 2]
        assert all(c.reply.value == b"k%d" % c.key and c.latency_ns > 0 for c in done)
        assert [c.reply for c in sent] == [c.reply for c in sent if c.reply is not None]
        assert (eng.replies, eng.unmatched, eng.malformed, eng.outstanding) == (3, 1, 2, 0)
    fake.close()
