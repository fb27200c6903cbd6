"""The controller's API as a hostile neighbour and a careless operator meet it (issue 11, items
2 and 3), over real loopback sockets: who may write (token, Origin, Host, Content-Type), what
every bad request gets back (one JSON error, never a dropped connection or a traceback), the
limits (body, nesting, connections, threads, time, agents) and the daemon's arguments.
"""
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from netstor.api import Device
from netstor.apitoken import (TokenError, auth_header, load_or_create_token, read_token,
                              token_matches)
from netstor.controller import (Controller, HEARTBEAT_MAX_BODY, MAX_BODY, MAX_DEPTH,
                                client_main, main as controller_main, request)
from netstor.driver.tables import TableFullError
from netstor.model.dataplane import DataplaneModel
from netstor.programs import default_pipeline

TOKEN = "security-test-token-0123456789"
ADD = {"op": "add", "match": 5, "action": "forward", "params": {"port": 1}}


def make_ctl(listen=("127.0.0.1", 0), **start_kw):
    model = DataplaneModel(default_pipeline())
    dev = Device.open("model", model=model)
    ctl = Controller(dev, None, token=TOKEN, max_agents=start_kw.pop("max_agents", 256),
                     agent_timeout=start_kw.pop("agent_timeout", 3.0))
    ctl.start(listen, **start_kw)
    ctl._stop.set()                            # no periodic work: the tests drive it
    ctl.model = model
    host, port = ctl.address
    ctl.url = f"http://{host}:{port}"
    return ctl


@pytest.fixture
def ctl():
    c = make_ctl()
    yield c
    c.stop()


def raw(addr, data, *, half_close=True, timeout=10.0):
    """Send bytes, read until the server closes: ``(status, headers, body)`` or None when the
    server closed without answering."""
    s = socket.create_connection(addr, timeout=timeout)
    try:
        try:
            s.sendall(data)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except OSError:                        # the server closed first: read what it said
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
    finally:
        s.close()
    return parse_response(out)


def parse_response(out):
    if not out:
        return None
    head, _, body = out.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    version, status = lines[0].split(" ", 2)[:2]
    assert version == "HTTP/1.0", lines[0]
    headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    assert int(headers["content-length"]) == len(body), (headers, body[:100])
    return int(status), headers, body


def assert_json_error(resp, status, *words):
    assert resp is not None, "connection closed without an answer"
    st, headers, body = resp
    assert st == status, (st, body)
    assert headers["content-type"] == "application/json"
    err = json.loads(body)["error"]
    assert b"Traceback" not in body
    for w in words:
        assert w in err, (w, err)
    return err


def http(method, path, *, token=None, ctype="application/json", host=None, body=b"",
         extra=()):
    lines = [f"{method} /api/v1{path} HTTP/1.1"]
    if host is not None:
        lines.append(f"Host: {host}")
    if token:
        lines.append(f"Authorization: Bearer {token}")
    if ctype:
        lines.append(f"Content-Type: {ctype}")
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    lines += list(extra)
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


def prim_ops(ctl):
    return ctl.dev.table("prim.ops").dump()


# ---- the token ----------------------------------------------------------------------------------

def test_token_file_made_once_0600_and_unsafe_files_refused(tmp_path):
    path = tmp_path / "state" / "netstor" / "controller.token"
    token, created = load_or_create_token(path)
    st = os.stat(path)
    assert created and stat.S_IMODE(st.st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert len(token) >= 43 and path.read_text().strip() == token
    assert load_or_create_token(path) == (token, False)          # kept across starts
    assert read_token(path) == token
    assert auth_header(path) == {"Authorization": f"Bearer {token}"}
    assert read_token(tmp_path / "missing") is None and auth_header(tmp_path / "missing") == {}
    other = load_or_create_token(tmp_path / "other")[0]
    assert other != token                                        # random, not derived
    os.chmod(path, 0o640)
    with pytest.raises(TokenError, match="may be read by others"):
        read_token(path)
    with pytest.raises(TokenError, match="mode 0640"):
        load_or_create_token(path)
    os.chmod(path, 0o600)
    link = tmp_path / "link"
    link.symlink_to(path)
    with pytest.raises(TokenError, match="symbolic link"):
        read_token(link)
    short = tmp_path / "short"
    short.write_text("abc\n")
    os.chmod(short, 0o600)
    with pytest.raises(TokenError, match="holds no token"):
        read_token(short)
    assert token_matches(f"Bearer {token}", token) and token_matches(f"bearer  {token} ", token)
    for bad in (None, "", token, f"Basic {token}", f"Bearer {token}x", "Bearer "):
        assert not token_matches(bad, token)


def test_controller_refuses_a_token_file_others_can_read(tmp_path):
    path = tmp_path / "tok"
    path.write_text("x" * 40 + "\n")
    os.chmod(path, 0o644)
    r = subprocess.run([sys.executable, "-m", "netstor.cli", "controller", "--listen",
                        "127.0.0.1:0", "--token-file", str(path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "chmod 600" in r.stderr


# ---- who may write ------------------------------------------------------------------------------

def test_writes_need_the_token_reads_on_loopback_do_not(ctl):
    assert request(ctl.url, "GET", "/tables/prim.ops", token="")[0] == 200
    for token in ("", "wrong-token-of-the-same-kind-000", TOKEN[:-1]):
        st, body = request(ctl.url, "POST", "/tables/prim.ops", ADD, token=token)
        assert st == 401 and "token" in body["error"]
        st, _ = request(ctl.url, "PUT", "/registers/parser.udp_port.prim", {"value": 1},
                        token=token)
        assert st == 401
        assert request(ctl.url, "POST", "/config", {}, token=token)[0] == 401
        assert request(ctl.url, "POST", "/heartbeat", {"server_id": 1}, token=token)[0] == 401
    assert prim_ops(ctl) == [] and ctl.model.reg_read("parser.udp_port.prim") != 1
    assert ctl.agents == {}
    st, body = request(ctl.url, "POST", "/tables/prim.ops", ADD, token=TOKEN)
    assert (st, body) == (200, {"ok": True, "entries": 1})
    assert [e["key"] for e in prim_ops(ctl)] == [[5]]


def test_off_loopback_reads_need_the_token_too():
    c = make_ctl(listen=("0.0.0.0", 0))
    try:
        url = f"http://127.0.0.1:{c.address[1]}"
        assert c.httpd.wildcard and not c.httpd.reads_open
        st, body = request(url, "GET", "/status", token="")
        assert st == 401
        assert request(url, "GET", "/status", token=TOKEN)[0] == 200
    finally:
        c.stop()


def test_cross_origin_and_non_json_writes_refused(ctl):
    addr = ctl.address
    host = f"127.0.0.1:{addr[1]}"
    form = b'{"op": "add", "match": 5, "action": "forward", "params": {"port": 1}}'
    # what a web page in the operator's browser sends: a simple text/plain POST, no token
    page = http("POST", "/tables/prim.ops", ctype="text/plain", host=host, body=form,
                extra=["Origin: http://evil.example", "Sec-Fetch-Site: cross-site"])
    assert_json_error(raw(addr, page), 403)
    # even a page that somehow had the token: another origin is refused
    for origin in ("http://evil.example", "null", f"http://127.0.0.1:{addr[1] + 1}",
                   f"https://127.0.0.1:{addr[1]}", "garbage"):
        req = http("POST", "/tables/prim.ops", token=TOKEN, host=host, body=form,
                   extra=[f"Origin: {origin}"])
        assert_json_error(raw(addr, req), 403, "Origin")
    req = http("POST", "/tables/prim.ops", token=TOKEN, host=host, body=form,
               extra=["Sec-Fetch-Site: same-site"])
    assert_json_error(raw(addr, req), 403)
    # DNS rebinding: the page's own name in Host, even for reads
    for name in ("evil.example", f"evil.example:{addr[1]}", "localhost.evil.example"):
        assert_json_error(raw(addr, http("GET", "/tables", host=name, ctype=None, body=None)),
                          403, "Host")
    # not JSON: refused before the body is looked at
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
                  None, "application/json; charset=latin-1"):
        req = http("POST", "/tables/prim.ops", token=TOKEN, host=host, body=form, ctype=ctype)
        assert_json_error(raw(addr, req), 415, "application/json")
    assert prim_ops(ctl) == []
    # the same origin (the operator's own page on the API) and plain clients are fine
    for extra in ([f"Origin: http://{host}"], [f"Origin: http://localhost:{addr[1]}"], []):
        h = host if extra != [f"Origin: http://localhost:{addr[1]}"] else f"localhost:{addr[1]}"
        req = http("POST", "/tables/prim.ops", token=TOKEN, host=h, body=form,
                   ctype="application/json; charset=utf-8", extra=extra)
        st, _, body = raw(addr, req)
        assert st == 200, body
    assert [e["key"] for e in prim_ops(ctl)] == [[5]]


# ---- every request answered with JSON -----------------------------------------------------------

def test_full_table_is_a_json_409(ctl):
    t = ctl.dev.table("l3.routes")
    n = 0
    with pytest.raises(TableFullError):
        while True:                            # fill it through the host API
            t.add(f"10.{n // 256}.{n % 256}.0/24", "drop")
            n += 1
    assert n == t.desc.size
    before = t.dump()
    st, body = request(ctl.url, "POST", "/tables/l3.routes",
                       {"op": "add", "match": "10.200.0.0/16", "action": "drop"}, token=TOKEN)
    assert st == 409 and "full" in body["error"]
    cfg = {"tables": {"l3.routes": {"replace": False, "entries": [
        {"prefix": "10.201.0.0/16", "action": "drop"}]}}}
    st, body = request(ctl.url, "POST", "/config", cfg, token=TOKEN)
    assert st in (400, 409) and "full" in body["error"]
    assert t.dump() == before and request(ctl.url, "GET", "/status")[0] == 200


def test_deep_json_bad_lengths_and_missing_bodies(ctl):
    addr, host = ctl.address, f"127.0.0.1:{ctl.address[1]}"
    deep = b"[" * 100_000 + b"]" * 100_000
    for path in ("/config", "/tables/prim.ops", "/heartbeat"):
        resp = raw(addr, http("POST", path, token=TOKEN, host=host, body=deep))
        assert resp[0] in (400, 413)
    assert_json_error(raw(addr, http("POST", "/config", token=TOKEN, host=host, body=deep)),
                      400, "nested deeper than")
    # the limit itself: MAX_DEPTH levels parse, one more does not
    ok = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    err = assert_json_error(raw(addr, http("POST", "/config", token=TOKEN, host=host, body=ok)),
                            400)
    assert "nested" not in err and "configuration is a JSON object" in err
    over = b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)
    assert_json_error(raw(addr, http("POST", "/config", token=TOKEN, host=host, body=over)),
                      400, "nested deeper")
    base = f"POST /api/v1/tables/prim.ops HTTP/1.1\r\nHost: {host}\r\n" \
           f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
    for cl, words in (("abc", "'abc'"), ("-1", "'-1'"), ("1e3", "'1e3'"), ("0x10", "0x10"),
                      ("", "''"), ("99999999999999999999", "99999")):
        assert_json_error(raw(addr, f"{base}Content-Length: {cl}\r\n\r\n{{}}".encode()), 400,
                          "Content-Length", words)
    assert_json_error(raw(addr, f"{base}Content-Length: 2\r\nContent-Length: 2\r\n\r\n{{}}"
                          .encode()), 400, "more than one")
    assert_json_error(raw(addr, f"{base}\r\n".encode()), 411, "Content-Length")
    assert_json_error(raw(addr, f"{base}Content-Length: 0\r\n\r\n".encode()), 400, "body")
    assert_json_error(raw(addr, f"{base}Transfer-Encoding: chunked\r\n\r\n2\r\n{{}}\r\n0\r\n\r\n"
                          .encode()), 411, "Transfer-Encoding")
    assert_json_error(raw(addr, f"{base}Content-Length: 50\r\n\r\n{{\"op\"".encode()), 400,
                      "body ended after 5 of 50")
    for body, words in ((b"{nope", "not JSON"), (b"\xff\xfe{}", "UTF-8"), (b"NaN", "NaN"),
                        (b'{"a": Infinity}', "Infinity"), (b"1" * 5000, "JSON"),
                        (b'{"op": "add", "match": 1e999}', "")):
        resp = raw(addr, http("POST", "/tables/prim.ops", token=TOKEN, host=host, body=body))
        assert_json_error(resp, 400, words)
    assert_json_error(raw(addr, b"GET /api/v1/status HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"),
                      400, "takes no body")
    for junk in (b"garbage\r\n\r\n", b"\r\n", b"GET /\r\n", b"GET / HTTP/9.9\r\n\r\n",
                 b"GET / HTTP/1.1 extra\r\n\r\n", b"G" * 70_000 + b"\r\n",
                 b"GET /api/v1/status HTTP/1.1\r\n" + b"X: y\r\n" * 150 + b"\r\n",
                 b"DELETE /api/v1/tables/prim.ops HTTP/1.1\r\n\r\n",
                 b"OPTIONS /api/v1/tables HTTP/1.1\r\n\r\n", b"BREW /pot HTTP/1.1\r\n\r\n"):
        resp = raw(addr, junk)
        assert resp is not None and 400 <= resp[0] < 600, junk[:40]
        assert_json_error(resp, resp[0])
    assert prim_ops(ctl) == []


def test_oversized_body_refused_before_it_is_read():
    c = make_ctl()
    try:
        s = socket.create_connection(c.address, timeout=10)
        s.sendall(f"POST /api/v1/config HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\n"
                  f"Content-Type: application/json\r\nContent-Length: 100000000\r\n\r\n"
                  .encode())
        sent, chunk, t0 = 0, b" " * 65536, time.monotonic()
        try:
            while sent < 100_000_000 and time.monotonic() - t0 < 20:
                sent += s.send(chunk)
        except OSError:                        # the server stopped reading and closed
            pass
        # the answer came before the body; the server drained at most MAX_BODY after it
        # (plus what the kernels' socket buffers held)
        assert sent < 3 * MAX_BODY + (20 << 20), sent      # of 100 MB
        out = b""
        try:
            while True:
                d = s.recv(65536)
                if not d:
                    break
                out += d
        except OSError:
            pass
        s.close()
        if out:                                # a reset may eat it; if it arrived, it is 413
            assert_json_error(parse_response(out), 413, "over the limit")
        # with a client that waits for the answer (sends the headers only), it always arrives
        req = (f"POST /api/v1/config HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {MAX_BODY + 1}\r\n\r\n")
        assert_json_error(raw(c.address, req.encode()), 413, str(MAX_BODY))
        assert request(c.url, "GET", "/status")[0] == 200
    finally:
        c.stop()


def test_failing_plugin_and_device_errors_are_json_500(ctl, caplog):
    ctl.add_route("GET", "/boom", lambda body, q: 1 / 0)
    ctl.add_route("POST", "/boom", lambda body, q: {"bad": object()})
    st, body = request(ctl.url, "GET", "/boom")
    assert st == 500 and "ZeroDivisionError" in body["error"]
    st, body = request(ctl.url, "POST", "/boom", {}, token=TOKEN)
    assert st == 200 and body["bad"].startswith("<object")       # shown as text
    assert not any("Traceback" in r.getMessage() for r in caplog.records)


# ---- limits: connections, threads, time ---------------------------------------------------------

def test_idle_connections_hold_no_thread_and_time_out():
    c = make_ctl(workers=4, max_connections=300, timeout=3.0)
    socks = []
    try:
        base = threading.active_count()
        for _ in range(200):
            socks.append(socket.create_connection(c.address, timeout=5))
        time.sleep(0.3)
        st, _ = request(c.url, "GET", "/status")                # served beside them,
        assert st == 200
        for s in socks:                                           # which are still open
            s.setblocking(False)
            with pytest.raises(BlockingIOError):
                s.recv(1)
            s.setblocking(True)
        assert threading.active_count() <= base + 4
        slow = socket.create_connection(c.address, timeout=5)    # a byte now and then
        slow.sendall(b"GET /api/v1/sta")
        time.sleep(3.5)                        # past the time-out: every one answered, closed
        for s in socks:
            out = s.recv(4096)
            assert_json_error(parse_response(out), 408, "no request within")
        try:
            slow.sendall(b"tus HTTP/1.1\r\n")
        except OSError:
            pass
        out = b""
        try:
            while d := slow.recv(4096):
                out += d
        except OSError:
            pass
        resp = parse_response(out)
        assert resp is None or resp[0] == 408
        assert threading.active_count() <= base + 4
        assert c.httpd.conns == set()
        assert request(c.url, "GET", "/status")[0] == 200
    finally:
        for s in socks:
            s.close()
        c.stop()


def test_connection_cap_answers_503():
    c = make_ctl(workers=2, max_connections=5, timeout=5.0)
    socks = []
    try:
        for _ in range(5):
            socks.append(socket.create_connection(c.address, timeout=5))
        time.sleep(0.3)
        assert_json_error(raw(c.address, http("GET", "/status", ctype=None, body=None),
                              half_close=False), 503, "too many connections")
        for s in socks:
            s.close()
        socks = []
        time.sleep(0.3)
        assert request(c.url, "GET", "/status")[0] == 200
    finally:
        for s in socks:
            s.close()
        c.stop()


# ---- agents -------------------------------------------------------------------------------------

def test_spoofed_heartbeats_are_not_kept(ctl):
    junk = "x" * 20_000
    for i in range(1000):                      # no token: none kept
        body = {"server_id": i, "addr": "10.0.0.1", "port": 7430, "junk": junk}
        st, _ = request(ctl.url, "POST", "/heartbeat", body, token="")
        assert st == 401
    assert ctl.agents == {}
    for i in range(50):                        # with the token: too big, and junk anyway
        st, b = request(ctl.url, "POST", "/heartbeat", {"server_id": i, "junk": junk},
                        token=TOKEN)
        assert st == 413 and str(HEARTBEAT_MAX_BODY) in b["error"]
    for bad, words in (({"server_id": 1, "junk": 1}, "'junk'"),
                       ({"server_id": 1, "port": 70000}, "port"),
                       ({"server_id": 1, "addr": "a b"}, "addr"),
                       ({"server_id": 1, "addr": ["x"]}, "addr"),
                       ({"server_id": 1, "served": -1}, "served"),
                       ({"server_id": 1, "served": True}, "served"),
                       ({"server_id": 1, "uptime_s": -3}, "uptime_s"),
                       ({"server_id": 1, "counters": [1]}, "counters"),
                       ({"server_id": 1, "counters": {"bad name": 1}}, "counter name"),
                       ({"server_id": 1, "counters": {"a": 1.5}}, "64-bit"),
                       ({"server_id": 1, "counters": {"a": 1 << 64}}, "64-bit"),
                       ({"server_id": 1, "counters": {f"c{i}": 0 for i in range(65)}},
                        "at most 64"),
                       ([1, 2], "server_id"), ({"server_id": 65536}, "server_id")):
        st, b = request(ctl.url, "POST", "/heartbeat", bad, token=TOKEN)
        assert st == 400 and words in b["error"], (bad, b)
    assert ctl.agents == {}
    good = {"server_id": 7, "addr": "10.77.1.7", "port": 7430, "queue_len": 0, "served": 3,
            "errors": 0, "uptime_s": 1.5,
            "counters": {"bad_magic": 2, "short": 0, "bad_op": 1}}
    assert request(ctl.url, "POST", "/heartbeat", good, token=TOKEN) == (200, {"ok": True})
    agents = request(ctl.url, "GET", "/agents")[1]
    assert agents["7"]["counters"] == {"bad_magic": 2, "short": 0, "bad_op": 1}
    assert agents["7"]["alive"] and agents["7"]["addr"] == "10.77.1.7"


def test_agent_cap_forgets_dead_agents_first():
    c = make_ctl(max_agents=8, agent_timeout=0.5)
    try:
        for i in range(8):
            assert request(c.url, "POST", "/heartbeat", {"server_id": i}, token=TOKEN)[0] == 200
        st, b = request(c.url, "POST", "/heartbeat", {"server_id": 100}, token=TOKEN)
        assert st == 503 and "max-agents 8" in b["error"]
        assert sorted(c.agents) == list(range(8))
        time.sleep(0.6)
        request(c.url, "POST", "/heartbeat", {"server_id": 3}, token=TOKEN)   # 3 stays alive
        c.check_agents()
        for i in range(100, 107):              # 7 dead ones make room, the live one stays
            assert request(c.url, "POST", "/heartbeat", {"server_id": i}, token=TOKEN)[0] == 200
        assert sorted(c.agents) == [3] + list(range(100, 107))
        assert request(c.url, "POST", "/heartbeat", {"server_id": 200}, token=TOKEN)[0] == 503
        kinds = [e["kind"] for e in c.events]
        assert kinds.count("agent_forgotten") == 7
    finally:
        c.stop()


# ---- arguments, TLS, the client ----------------------------------------------------------------

@pytest.mark.parametrize("args, words", [
    (["--poll-interval", "0"], "'0'"), (["--poll-interval", "-1"], "'-1'"),
    (["--poll-interval", "nan"], "'nan'"), (["--poll-interval", "0.001"], ">= 0.01"),
    (["--agent-timeout", "0"], "--agent-timeout"), (["--port-timeout", "inf"], "'inf'"),
    (["--listen", "127.0.0.1:70000"], "70000"), (["--listen", "127.0.0.1:-1"], "'127.0.0.1:-1'"),
    (["--listen", "127.0.0.1:abc"], "'127.0.0.1:abc'"), (["--listen", "8470"], "'8470'"),
    (["--workers", "0"], "--workers"), (["--max-connections", "x"], "'x'"),
    (["--max-agents", "70000"], "70000"), (["--timeout", "0"], "--timeout"),
    (["--tls-cert", "c.pem"], "--tls-key"),
])
def test_bad_arguments_one_line(args, words, capsys):
    with pytest.raises(SystemExit) as e:
        controller_main(args)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and words in err, err
    assert err.startswith("netstor controller: error:")


def test_bad_arguments_through_the_cli_and_the_constructor():
    r = subprocess.run([sys.executable, "-m", "netstor.cli", "controller", "--poll-interval",
                        "0"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "'0'" in r.stderr
    dev = Device.open("model", model=DataplaneModel(default_pipeline()))
    for kw in ({"poll_interval": 0}, {"poll_interval": -1}, {"agent_timeout": float("nan")},
               {"max_agents": 0}):
        with pytest.raises(ValueError):
            Controller(dev, **kw)


def test_wildcard_bind_warns_loudly(tmp_path):
    env = {**os.environ, "NETSTOR_TOKEN_FILE": str(tmp_path / "tok")}
    p = subprocess.Popen([sys.executable, "-m", "netstor.cli", "controller", "--listen",
                          "0.0.0.0:0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    try:
        line = p.stdout.readline()
        assert "listening on http://0.0.0.0:" in line
        p.terminate()
        assert p.wait(timeout=10) == 0
        err = p.stderr.read()
        assert "made a new API token" in err and "WARNING" in err
        assert "EVERY interface" in err and "clear text" in err
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def _self_signed(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
                        "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(key), "-out", str(cert)], capture_output=True,
                       timeout=60)
    if r.returncode:
        pytest.skip(f"openssl cannot make a certificate: {r.stderr[-200:]!r}")
    return cert, key


def test_tls(tmp_path):
    import shutil
    import ssl
    if not shutil.which("openssl"):
        pytest.skip("no openssl command to make a test certificate")
    cert, key = _self_signed(tmp_path)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    c = make_ctl(ssl_context=ctx, timeout=2.0)
    try:
        url = f"https://127.0.0.1:{c.address[1]}"
        assert request(url, "GET", "/status", cafile=str(cert))[0] == 200
        st, body = request(url, "POST", "/tables/prim.ops", ADD, token=TOKEN, cafile=str(cert))
        assert (st, body["entries"]) == (200, 1)
        with pytest.raises(urllib.error.URLError):             # an unknown CA is refused
            request(url, "GET", "/status")
        # plain HTTP and junk to the TLS port: closed, the server goes on
        assert raw(c.address, b"GET /api/v1/status HTTP/1.1\r\n\r\n") is None
        assert raw(c.address, os.urandom(3000)) is None
        st, body = request(url, "POST", "/tables/prim.ops", ADD, token="", cafile=str(cert))
        assert st == 401
        assert request(url, "GET", "/status", cafile=str(cert))[0] == 200
    finally:
        c.stop()


def test_netstor_api_client(ctl, tmp_path, capsys):
    tok = tmp_path / "tok"
    tok.write_text(TOKEN + "\n")
    os.chmod(tok, 0o600)
    assert client_main(["--url", ctl.url + "/api/v1", "--token-file", str(tok), "post",
                        "/tables/prim.ops", json.dumps(ADD)]) == 0
    assert json.loads(capsys.readouterr().out) == {"ok": True, "entries": 1}
    body = tmp_path / "b.json"
    body.write_text(json.dumps({"op": "delete", "match": 5}))
    assert client_main(["--url", ctl.url, "--token-file", str(tok), "POST", "tables/prim.ops",
                        f"@{body}"]) == 0
    capsys.readouterr()
    # without a token file: the controller's refusal, in one line
    assert client_main(["--url", ctl.url, "--token-file", str(tmp_path / "none"), "POST",
                        "/tables/prim.ops", json.dumps(ADD)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "HTTP 401" in err
    assert client_main(["--url", ctl.url, "POST", "/tables/prim.ops", "{bad"]) == 1
    assert "not JSON" in capsys.readouterr().err
    assert client_main(["--url", "http://127.0.0.1:1", "GET", "/status"]) == 1
    assert capsys.readouterr().err.count("\n") == 1
    assert prim_ops(ctl) == []


def test_a_real_agents_heartbeat_is_accepted_with_the_token(ctl, tmp_path):
    """The storage agent's own heartbeat (netstor.agent.server, junk datagram counted) fits
    the controller's heartbeat checks; it is refused without the token the agent must send
    (netstor.apitoken.auth_header)."""
    from netstor.agent.server import Server
    with Server(tmp_path / "db", bind="127.0.0.1", port=0, server_id=9, sync=False) as srv:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as junk:
            junk.sendto(b"junk", srv.address)
        end = time.monotonic() + 5
        while srv.heartbeat_payload()["counters"].get("dropped", 0) < 1 and \
                time.monotonic() < end:
            time.sleep(0.02)
        hb = srv.heartbeat_payload()
    assert len(json.dumps(hb)) < HEARTBEAT_MAX_BODY
    assert request(ctl.url, "POST", "/heartbeat", hb, token="")[0] == 401
    tok = tmp_path / "tok"
    tok.write_text(TOKEN + "\n")
    os.chmod(tok, 0o600)
    st, body = request(ctl.url, "POST", "/heartbeat", hb, token_file=tok)
    assert (st, body) == (200, {"ok": True}), body
    seen = request(ctl.url, "GET", "/agents")[1]["9"]
    assert seen["counters"] == hb["counters"] and seen["counters"]["dropped"] >= 1
    assert seen["port"] == hb["port"] and seen["alive"]
