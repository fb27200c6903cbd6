"""Who ``netstor-server`` answers (issue 11 item 5), on real UDP sockets over loopback, with
clients on distinct loopback addresses (127.0.0.2, 127.0.0.3) as different hosts."""
import logging
import socket
import subprocess
import sys
import time

import pytest

from netstor.proto import HEADER_LEN, MAX_VALUE, Header, Op, REPLY, Status
from netstor.agent import server as server_mod
from netstor.agent.server import Server, build_parser, codecs

LOOP = "127.0.0.1"
FRIEND, STRANGER = "127.0.0.2", "127.0.0.3"


def _sock(src):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((src, 0))
    s.settimeout(0.3)
    return s


def _ask(src, dst, payload, wait=0.3):
    """Send ``payload`` from address ``src`` to ``dst``; the reply bytes, or None."""
    with _sock(src) as s:
        s.settimeout(wait)
        s.sendto(payload, dst)
        try:
            return s.recvfrom(65535)[0]
        except (socket.timeout, ConnectionRefusedError):
            return None


def _get(key, req_id=7):
    return Header(op=Op.GET, key=key, req_id=req_id).pack()


def _until(cond, timeout=3.0):
    end = time.monotonic() + timeout
    while not cond() and time.monotonic() < end:
        time.sleep(0.01)
    return cond()


def test_default_bind_is_loopback_only(tmp_path):
    assert build_parser().parse_args(["--db", "x"]).bind == LOOP
    assert build_parser().parse_args(["--db", "x"]).allow is None
    with Server(tmp_path / "db", port=0, sync=False) as srv:
        addr, port = srv.address
        assert addr == LOOP
        for c in srv.offload_socks.values():
            assert c.getsockname()[0] == LOOP
        # the same port on another address of this host reaches nothing
        assert _ask(FRIEND, (FRIEND, port), _get(1)) is None
        assert _ask(FRIEND, (LOOP, port), _get(1)) is not None
        assert _until(lambda: srv.stats()["received"] == 1)
        time.sleep(0.1)
        assert srv.stats()["received"] == 1


def test_allow_list_drops_and_counts_strangers(tmp_path):
    value = bytes(range(256)) * 5 + bytes(MAX_VALUE - 1280)           # 1,440 bytes
    assert len(value) == 1440
    offload = {f"{c.name}_port": 0 for c in codecs()}
    with Server(tmp_path / "db", bind=LOOP, port=0, sync=False, allow=[f"{FRIEND}/32"],
                **offload) as srv:
        dst = srv.address
        _put_from(FRIEND, dst, 5, value)
        request = _get(5)
        assert len(request) == HEADER_LEN == 32
        # the listed source gets the value: 1,472 bytes for a 32-byte request (documented)
        reply = _ask(FRIEND, dst, request, wait=2.0)
        assert reply is not None and len(reply) == HEADER_LEN + 1440
        h = Header.unpack(reply)
        assert h.op == Op.GET | REPLY and h.status == Status.OK and h.value == value
        # a stranger gets nothing at all: a GET, a malformed request with our magic, junk,
        # and datagrams on every offload socket
        bad_op = bytearray(request)
        bad_op[3] = 0x55                                    # an op that does not exist
        sent = [request, bytes(bad_op), b"junk"]
        got = [_ask(STRANGER, dst, p) for p in sent]
        for name in srv.offload_socks:
            got.append(_ask(STRANGER, srv.offload_address(name), b"x" * 40 + request))
        assert got == [None] * len(got)
        n = len(got)
        assert _until(lambda: srv.stats()["not_allowed"] == n)
        st = srv.stats()
        # counted as not allowed, not as bad requests or drops (nothing of them was parsed)
        assert (st["bad_request"], st["dropped"], st["served"]) == (0, 0, 2)
        assert st["received"] == 2 + n
        for c in codecs():
            assert st[f"{c.prefix}_received"] == 1 and st[f"{c.prefix}_dropped"] == 0
        assert srv.heartbeat_counters()["not_allowed"] == n
        assert srv.allowed(FRIEND) and not srv.allowed(STRANGER) and not srv.allowed("::1")


def _put_from(src, dst, key, value):
    reply = _ask(src, dst, Header(op=Op.PUT, key=key, req_id=3, value=value).pack(), wait=2.0)
    assert reply is not None and Header.unpack(reply).status == Status.OK


def test_prefixes_and_bad_prefixes():
    srv = Server("/nonexistent-not-started", allow=["10.0.0.0/8", "192.168.1.7"])
    assert srv.allowed("10.200.3.4") and srv.allowed("192.168.1.7")
    assert not srv.allowed("11.0.0.1") and not srv.allowed("192.168.1.8")
    with pytest.raises(ValueError, match="10.0.0.0/33"):
        Server("/x", allow=["10.0.0.0/33"])
    with pytest.raises(ValueError, match="70000"):
        Server("/x", port=70000)
    with pytest.raises(ValueError, match="map_size"):
        Server("/x", map_size=-1)
    assert Server("/x", allow=[]).allowed(LOOP) is False       # an empty list admits no one


def test_own_answers_are_never_longer_than_the_request(tmp_path):
    """BAD_REQUEST and BUSY answers carry no value: 32 bytes for a request of >= 32."""
    with Server(tmp_path / "db", bind=LOOP, port=0, sync=False, queue_limit=0) as srv:
        dst = srv.address
        busy = _ask(LOOP, dst, _get(1), wait=2.0)             # queue_limit 0: every one BUSY
        assert busy is not None and Header.unpack(busy).status == Status.BUSY
        assert len(busy) <= HEADER_LEN
        bad = bytearray(_get(1))
        bad[3] = 0x55
        answer = _ask(LOOP, dst, bytes(bad), wait=2.0)
        assert answer is not None and Header.unpack(answer).status == Status.BAD_REQUEST
        assert len(answer) <= len(bad)


def test_bad_datagrams_are_summarised_at_warning(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(server_mod, "_BAD_LOG_EVERY_S", 0.5)
    caplog.set_level(logging.WARNING, logger="netstor.agent.server")

    def warnings():
        return [r.getMessage() for r in caplog.records if "bad datagrams" in r.getMessage()]

    with Server(tmp_path / "db", bind=LOOP, port=0, sync=False) as srv:
        dst = srv.address
        with _sock(LOOP) as s:
            s.sendto(b"junk", dst)
            assert _until(lambda: len(warnings()) == 1)
            assert "dropped 1" in warnings()[0] and "127.0.0.1" in warnings()[0]
            for _ in range(3):
                s.sendto(b"junk", dst)
            bad = bytearray(_get(1))
            bad[3] = 0x55
            s.sendto(bytes(bad), dst)                          # answered BAD_REQUEST
            assert _until(lambda: srv.stats()["dropped"] == 4 and
                          srv.stats()["bad_request"] == 1)
            assert len(warnings()) == 1                        # at most one per interval
            time.sleep(0.55)
            s.sendto(b"junk", dst)
            assert _until(lambda: len(warnings()) == 2)
        assert "bad_request 1, dropped 4" in warnings()[1]


def test_command_line_bind_and_allow(tmp_path):
    p = subprocess.Popen([sys.executable, "-m", "netstor.agent.server", "--db",
                          str(tmp_path / "db"), "--port", "0", "--no-sync", "--allow",
                          f"{FRIEND}/32"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line.startswith(f"netstor-server 0 listening on {LOOP}:"), line
        dst = (LOOP, int(line.rsplit(":", 1)[1]))
        assert _ask(STRANGER, dst, _get(1)) is None
        r = _ask(FRIEND, dst, _get(1), wait=2.0)
        assert r is not None and Header.unpack(r).status == Status.NOT_FOUND
    finally:
        p.terminate()
        _, err = p.communicate(timeout=10)
    assert '"not_allowed": 1' in err and "no --allow" not in err


def test_wildcard_bind_without_allow_warns(tmp_path):
    p = subprocess.Popen([sys.executable, "-m", "netstor.agent.server", "--db",
                          str(tmp_path / "db"), "--bind", "0.0.0.0", "--port", "0",
                          "--no-sync"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "listening on 0.0.0.0:" in p.stdout.readline()
    finally:
        p.terminate()
        _, err = p.communicate(timeout=10)
    assert "WARNING bound to 0.0.0.0 with no --allow" in err
