"""Fuzz of the controller's HTTP API over loopback sockets (issue 11): random bytes, mutated
requests and random JSON on every route. Every request that sends a byte gets one HTTP/1.0
answer with a JSON body (an ``{"error": ...}`` object for 4xx), never a 500, a dropped
connection or a hang; requests without the token change nothing on the device; the server
keeps its thread and connection bounds and still serves afterwards. Seeded: the same cases
every run (a few seconds)."""
import json
import random
import socket
import threading
import time

import pytest

from netstor.api import Device
from netstor.controller import Controller
from netstor.model.dataplane import DataplaneModel
from netstor.programs import default_pipeline

TOKEN = "fuzz-token-0123456789abcdefghij"
WORKERS = 4
ROUTES = [("GET", "/status"), ("GET", "/counters?prefix=in"), ("GET", "/ports"),
          ("GET", "/agents"), ("POST", "/heartbeat"), ("GET", "/tables"),
          ("GET", "/tables/prim.ops"), ("POST", "/tables/prim.ops"),
          ("POST", "/tables/l3.routes"), ("POST", "/tables/prim.acl"),
          ("POST", "/tables/nc.servers"), ("GET", "/registers"),
          ("PUT", "/registers/parser.udp_port.prim"), ("PUT", "/registers/nope"),
          ("POST", "/config"), ("POST", "/config?dry_run=1"), ("GET", "/events?since=0"),
          ("GET", "/events?since=x"), ("DELETE", "/tables/prim.ops"), ("GET", "/nothing")]


def rand_text(rng):
    pick = rng.random()
    if pick < 0.3:
        return rng.choice(["10.0.0.1", "10.1.0.0/16", "02:00:00:00:01:01", "0x10", "1,2",
                           "255.255.255.255", "-1", "", "route", "drop", "forward", "port",
                           "none", "10.0.0.0/40", "::1", "1e9"])
    return "".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0, 0x3000)]))
                   for _ in range(rng.randrange(0, 12)))


def rand_json(rng, depth=0):
    pick = rng.random()
    if depth > 3 or pick < 0.45:
        return rng.choice([
            lambda: rng.randrange(-5, 70000), lambda: rng.getrandbits(rng.choice([8, 64, 200])),
            lambda: -rng.getrandbits(70), lambda: rng.random() * 1e6, lambda: rand_text(rng),
            lambda: None, lambda: True, lambda: False])()
    if pick < 0.7:
        return [rand_json(rng, depth + 1) for _ in range(rng.randrange(0, 5))]
    return {rand_text(rng): rand_json(rng, depth + 1) for _ in range(rng.randrange(0, 5))}


def rand_body(rng, method, path):
    """A body shaped like the route's (mostly) with random values."""
    if rng.random() < 0.25:
        return rand_json(rng)
    if path.startswith("/tables/"):
        b = {"op": rng.choice(["add", "modify", "delete", "frob", None, 1]),
             "match": rng.choice([rand_json(rng), rng.randrange(300), "10.0.0.0/8",
                                  ["10.0.0.9", 0]]),
             "action": rng.choice(["forward", "route", "deny", "server", "drop",
                                   rand_text(rng), None, 3]),
             "params": rng.choice([{}, {"port": rand_json(rng)},
                                   {"port": rng.randrange(20), "dmac": rand_text(rng),
                                    "smac": "02:00:00:00:ff:01"}, rand_json(rng)])}
        for k in ("mask", "priority"):
            if rng.random() < 0.3:
                b[k] = rand_json(rng)
        return b
    if path.startswith("/registers/"):
        return {"value": rand_json(rng)} if rng.random() < 0.8 else rand_json(rng)
    if path.startswith("/heartbeat"):
        b = {"server_id": rng.choice([rng.randrange(70000), rand_json(rng)])}
        for k in ("addr", "port", "queue_len", "served", "errors", "uptime_s", "counters",
                  "junk"):
            if rng.random() < 0.3:
                b[k] = rand_json(rng)
        return b
    if path.startswith("/config"):
        return rng.choice([
            {"tables": {rng.choice(["prim.ops", "l3.routes", "nope"]): {
                "entries": [rand_json(rng) for _ in range(rng.randrange(3))]}}},
            {"registers": {rand_text(rng): rand_json(rng)}},
            {"banks": rand_json(rng)}, {"mcast": rand_json(rng)}, rand_json(rng)])
    return rand_json(rng)


def build(method, path, *, token, body, ctype="application/json", extra=()):
    data = b"" if body is None else json.dumps(body).encode()
    lines = [f"{method} /api/v1{path} HTTP/1.1", "Host: 127.0.0.1"]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    if body is not None:
        lines += [f"Content-Type: {ctype}", f"Content-Length: {len(data)}"]
    lines += list(extra)
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


def mutate(rng, data):
    data = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        kind = rng.randrange(8)
        pos = rng.randrange(len(data) + 1)
        if kind == 0 and data:                                 # flip bytes
            for _ in range(rng.randrange(1, 6)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif kind == 1:                                        # cut
            data = data[:pos]
        elif kind == 2:                                        # insert junk
            data[pos:pos] = rng.randbytes(rng.randrange(1, 40))
        elif kind == 3:                                        # a header of any kind
            hdr = rng.choice([b"Content-Length: " + rng.choice([b"abc", b"-5", b"99999999999",
                                                                b"0", b"1 2", b"\xff"]),
                              b"Transfer-Encoding: chunked", b"Origin: null",
                              b"Host: evil.example", b"Content-Type: text/plain",
                              b"Expect: 100-continue", b"X: " + b"y" * 9000,
                              b"Authorization: Bearer " + rng.randbytes(8).hex().encode(),
                              b"Sec-Fetch-Site: cross-site", b": empty name", b"\x00\x01"])
            i = data.find(b"\r\n")
            data[i + 2:i + 2] = hdr + b"\r\n" if i >= 0 else hdr
        elif kind == 4:                                        # bare LF / CR
            data[pos:pos] = rng.choice([b"\n", b"\r", b"\r\n\r\n"])
        elif kind == 5:                                        # method
            sp = data.find(b" ")
            data[:max(sp, 0)] = rng.choice([b"GET", b"POST", b"PUT", b"DELETE", b"HEAD",
                                            b"PATCH", b"get", b"\x00", b"A" * 300])
        elif kind == 6:                                        # path
            data = data.replace(b"/api/v1", rng.choice([b"/api/v1/../v1", b"//api/v1",
                                                        b"/api/v1/%00", b"*", b"/api/v2",
                                                        b"http://x/api/v1"]), 1)
        else:                                                  # version
            data = data.replace(b"HTTP/1.1", rng.choice([b"HTTP/1.0", b"HTTP/2.0", b"HTTP/x",
                                                         b"", b"HTTP/1.1 x"]), 1)
    return bytes(data)


def exchange(addr, data):
    s = socket.create_connection(addr, timeout=10)
    try:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        out = b""
        while True:
            try:
                d = s.recv(65536)
            except ConnectionResetError:
                break
            if not d:
                break
            out += d
        return out
    finally:
        s.close()


def check(out, data):
    """One JSON answer; returns its status."""
    assert out, f"no answer to {data[:120]!r}"
    head, _, body = out.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    version, status = lines[0].split(" ", 2)[:2]
    assert version == "HTTP/1.0", (lines[0], data[:120])
    headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    assert headers.get("content-type") == "application/json", (lines, data[:120])
    assert int(headers["content-length"]) == len(body)
    obj = json.loads(body)
    status = int(status)
    assert 200 <= status < 600
    if status >= 400:
        assert isinstance(obj, dict) and isinstance(obj.get("error"), str), obj
    assert status != 500, (obj, data[:300])
    return status


def device_state(dev):
    return ({n: dev.table(n).dump() for n in dev.table_names}, dev.registers(),
            dev.mcast_dump())


@pytest.fixture(scope="module")
def ctl():
    c = Controller(Device.open("model", model=DataplaneModel(default_pipeline())), None,
                   token=TOKEN, max_agents=32)
    c.start(("127.0.0.1", 0), workers=WORKERS, max_connections=64, timeout=1.0)
    c._stop.set()
    yield c
    c.stop()


def test_fuzz_without_the_token_changes_nothing(ctl):
    rng = random.Random(11)
    before = device_state(ctl.dev)
    threads0 = threading.active_count()
    statuses = {}
    t0 = time.monotonic()
    for i in range(3000):
        pick = rng.random()
        if pick < 0.25:
            data = rng.randbytes(rng.randrange(1, 3000))
        else:
            method, path = rng.choice(ROUTES)
            body = rand_body(rng, method, path.split("?")[0]) if method != "GET" else None
            data = build(method, path, token=None, body=body,
                         ctype=rng.choice(["application/json", "text/plain"]))
            if pick < 0.7:
                data = mutate(rng, data)
        if not data:
            continue
        st = check(exchange(ctl.address, data), data)
        statuses[st] = statuses.get(st, 0) + 1
        if st < 300:                           # only reads succeed without the token
            assert data.split(b" ", 1)[0] == b"GET", data[:200]
    assert device_state(ctl.dev) == before and ctl.agents == {}
    assert threading.active_count() <= threads0 + WORKERS
    assert time.monotonic() - t0 < 40
    print("without the token:", sorted(statuses.items()))
    assert len(statuses) >= 6, statuses        # the cases reach many different answers


def test_fuzz_with_the_token_is_answered(ctl):
    rng = random.Random(12)
    statuses = {}
    for i in range(2500):
        method, path = rng.choice(ROUTES)
        body = rand_body(rng, method, path.split("?")[0]) if method != "GET" else None
        data = build(method, path, token=TOKEN, body=body)
        if rng.random() < 0.3:
            data = mutate(rng, data)
        if not data:
            continue
        st = check(exchange(ctl.address, data), data)
        statuses[st] = statuses.get(st, 0) + 1
    print("with the token:", sorted(statuses.items()))
    assert statuses.get(200, 0) > 200 and statuses.get(400, 0) > 200, statuses
    # whatever it wrote, the device reads back consistently and the API still works
    assert len(ctl.agents) <= 32
    out = exchange(ctl.address, build("GET", "/tables/prim.ops", token=None, body=None))
    assert check(out, b"") == 200
    assert ctl.httpd.conns == set() or all(c.busy for c in ctl.httpd.conns)
