"""NetRS in the storage agents on loopback: the server's NetRS socket (response header
against hand-computed values: rid/rv echoed, f^-1 of the magic, queue length, service time in
ns), bad headers counted and dropped; the client schemes netrs and c3."""
import socket
import time

import pytest

from netstor.agent.server import Server, build_parser
from netstor.offloads.netrs import header as H
from netstor.proto import Header, Op, Status

LOOP = "127.0.0.1"


def test_constants_agree_with_the_data_plane_program():
    from netstor.offloads.netrs import program as P
    assert H.NETRS_UDP_PORT == P.NETRS_UDP_PORT == 7432
    assert [n for n, _ in H.RESP_FIELDS][:3] == [n for n, _ in P.HEADER][:3]
    # the request's group/avail are the program's x[16:32] / x[8:16]; the response's SS
    # fields sit where the program reads them
    assert H.RESP_LEN * 8 == sum(w for _, w in P.HEADER)
    assert H.RESP_FIELDS[4:] == P.HEADER[4:] and H.RESP_FIELDS[3] == ("sm", 32)
    assert (H.REQ_LEN, H.RESP_LEN, H.SSL) == (15, 26, 8) and H.f(H.f(H.M_RESP)) == H.M_RESP
    assert dict(H.RESP_FIELDS)["rv"] == dict(H.RESP_FIELDS)["ss_t"] == 32


def _sock(timeout=2.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((LOOP, 0))
    s.settimeout(timeout)
    return s


def _rs_request(mf=None, rid=9, rv=0x4321, rgid=3, key=1, req_id=1):
    mf = H.f(H.M_RESP) if mf is None else mf
    return (H.RsRequest(rgid=rgid, avail=0x7, rid=rid, mf=mf, rv=rv).pack()
            + Header(op=Op.GET, key=key, req_id=req_id).pack())


def _recv_rs(s):
    data, _ = s.recvfrom(4096)
    assert len(data) >= H.RESP_LEN
    return H.RsResponse.unpack(data), Header.unpack(data[H.RESP_LEN:])


def test_server_netrs_response_header(tmp_path):
    # 1 worker, constant 20 ms of service: the service time is known, the queue is too
    with Server(tmp_path / "db", bind=LOOP, port=0, server_id=5, sync=False, workers=1,
                service_model="const:20000", netrs_port=0) as srv:
        c = _sock()
        c.sendto(_rs_request(req_id=1), srv.offload_address("netrs"))
        c.sendto(_rs_request(req_id=2, mf=H.f(H.M_DRS), rid=H.DRS_RID, rv=7), srv.offload_address("netrs"))
        c.sendto(_rs_request(req_id=3, rv=0xFFFFFFFF), srv.offload_address("netrs"))
        got = [_recv_rs(c) for _ in range(3)]
        (r1, h1), (r2, h2), (r3, h3) = got
        assert [h.req_id for _, h in got] == [1, 2, 3]
        assert (r1.rid, r1.mf, r1.rv, r1.sm, r1.ssl, r1.ss_sid) == (9, H.M_RESP, 0x4321, 0, 8, 5)
        assert (r2.rid, r2.mf, r2.rv) == (H.DRS_RID, H.M_DRS, 7)
        assert r3.rv == 0xFFFFFFFF
        # queue: the requests a new one would wait behind once the reply is sent: 2, 1, 0
        assert [r.ss_q for r, _ in got] == [2, 1, 0]
        # service time: 20 ms plus the LMDB work, in ns (not clipped at 4.1 ms any more)
        assert all(r.ss_t == h.service_ns for r, h in got)
        assert all(h.service_ns >= 20_000_000 and h.status == Status.NOT_FOUND
                   and h.server_id == 5 for _, h in got)
        st = srv.stats()
        assert (st["rs_received"], st["rs_replies"], st["rs_dropped"]) == (3, 3, 0)
        c.close()


def test_server_netrs_service_time_in_ns(tmp_path):
    with Server(tmp_path / "db", bind=LOOP, port=0, server_id=1, sync=False, workers=2,
                service_model="const:1500", netrs_port=0) as srv:
        c = _sock()
        c.sendto(_rs_request(), srv.offload_address("netrs"))
        r, h = _recv_rs(c)
        # the reported service time is the storage header's, in ns
        assert r.ss_t == h.service_ns and 1_500_000 <= r.ss_t < 3_000_000 and r.ss_q == 0
        c.close()
    # saturated, not wrapped, beyond 32 bits of ns (4.29 s)
    rq = H.RsRequest(rgid=1)
    assert rq.response(1, 0, 5_000_000_000).ss_t == 0xFFFFFFFF
    assert rq.response(1, 70_000, 70_000_000).ss_t == 70_000_000
    assert rq.response(1, 70_000, 70_000_000).ss_q == 0xFFFF


def test_server_netrs_bad_headers_dropped_and_counted(tmp_path):
    with Server(tmp_path / "db", bind=LOOP, port=0, server_id=1, sync=False,
                netrs_port=0) as srv:
        c = _sock(0.3)
        bad = [b"\x00" * 12,                                  # shorter than the header
               _rs_request(mf=H.M_REQ),                       # never passed an RSNode/ToR
               _rs_request(mf=H.M_MON),                       # a response magic
               _rs_request(mf=0x123456789ABC)]                # nothing of NetRS
        for d in bad:
            c.sendto(d, srv.offload_address("netrs"))
        with pytest.raises(socket.timeout):
            c.recvfrom(4096)
        # a good NetRS header with a malformed storage part: BAD_REQUEST behind the header
        req = _rs_request(req_id=8)
        c.settimeout(2.0)
        c.sendto(req[:H.REQ_LEN + 14] + b"\x00\x09" + req[H.REQ_LEN + 16:], srv.offload_address("netrs"))
        r, h = _recv_rs(c)
        assert (r.mf, h.status, h.req_id, r.ss_t) == (H.M_RESP, Status.BAD_REQUEST, 8, 0)
        st = srv.stats()
        assert (st["rs_received"], st["rs_dropped"], st["dropped"], st["bad_request"]) == \
            (5, 4, 4, 1)
        c.close()


def test_server_cli_netrs_port_option():
    a = build_parser().parse_args(["--db", "x"])
    assert a.netrs_port is None               # = 7432, optional if taken
    assert build_parser().parse_args(["--db", "x", "--netrs-port", "0"]).netrs_port == 0


def test_server_runs_without_netrs_when_the_default_port_is_taken(tmp_path):
    hog = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    hog.bind((LOOP, 0))
    port = hog.getsockname()[1]
    try:
        with Server(tmp_path / "db", bind=LOOP, port=0, netrs_port=port,
                    netrs_optional=True) as srv:
            assert srv.offload_address("netrs") is None
        with pytest.raises(OSError):
            Server(tmp_path / "db2", bind=LOOP, port=0, netrs_port=port).start()
    finally:
        hog.close()


# ---- client side ---------------------------------------------------------------------------
import threading                                                      # noqa: E402

from netstor.agent.load import run_load        # noqa: E402
from netstor.offloads.netrs.codec import NetRSCodec        # noqa: E402
from netstor.offloads.netrs.schemes import parse_replica_groups        # noqa: E402
from netstor.agent.client import Engine                              # noqa: E402


def test_replica_group_specs():
    assert parse_replica_groups(None, 4) == [(0, 1, 2), (1, 2, 3), (2, 3, 0), (3, 0, 1)]
    assert parse_replica_groups(None, 2) == [(0, 1), (1, 0)]
    assert parse_replica_groups("0,2;1", 3) == [(0, 2), (1,)]
    for bad in ("0,0", "0,5", "", "a,b", [list(range(9))]):
        with pytest.raises(ValueError):
            parse_replica_groups(bad, 9 if bad == [list(range(9))] else 3)


def test_c3_scheme_avoids_the_slow_replica(tmp_path):
    """Client-side C3 on its own state: with one request at a time (os = 0 at every
    selection) and all-zero state first, the tie goes to slot 0 (the slow server: 30 ms).
    One reply moves its EWMAs (weight 1/8, unit 65.536 us) of service and response time to
    ~7324/8 = 915 each (30 ms: score ~1830), far above what the fast servers' (1 ms: 244 per
    sample) converge to: it is chosen a handful of times at most out of 60 (uniform: 20).
    Nothing saturates in this unit (the limit is 268 ms)."""
    slow = Server(tmp_path / "s0", bind=LOOP, port=0, server_id=1, sync=False,
                  service_model="const:30000").start()
    fast = [Server(tmp_path / f"s{k}", bind=LOOP, port=0, server_id=k + 1, sync=False,
                   service_model="const:1000").start() for k in (1, 2)]
    try:
        targets = [f"{LOOP}:{s.address[1]}" for s in [slow] + fast]
        r = run_load(",".join(targets), mode="closed", concurrency=1, requests=60,
                     scheme="c3", replica_groups="0,1,2", seed=3, c3_n=1, c3_workers=4)
        sel = r["c3"]["selections"]
        assert r["replies"] == 60 and r["timeouts"] == 0
        assert 1 <= sel[targets[0]] <= 6
        # the two fast ones share the rest (their states are nearly equal: both are used)
        assert min(sel[targets[1]], sel[targets[2]]) >= 5
        assert r["by_server"]["1"]["replies"] == sel[targets[0]]
        assert (r["c3"]["time_unit_us"], r["c3"]["ewma"]) == (65.536, 0.125)
        assert r["c3"]["saturated"] == {"samples": 60, "q": 0, "t": 0, "r": 0, "any": 0}
    finally:
        for s in [slow] + fast:
            s.stop()


def test_c3_selectors_learn_on_their_own(tmp_path):
    """``c3_selectors``: independent selectors, each only learning from its own replies.
    With one request at a time every fresh selector ties to slot 0 (the slow server) once,
    so the slow server gets at least one request per selector that has sent anything,
    far more than the single selector of the test above gives it."""
    slow = Server(tmp_path / "s0", bind=LOOP, port=0, server_id=1, sync=False,
                  service_model="const:20000").start()
    fast = [Server(tmp_path / f"s{k}", bind=LOOP, port=0, server_id=k + 1, sync=False,
                   service_model="const:500").start() for k in (1, 2)]
    try:
        targets = [f"{LOOP}:{s.address[1]}" for s in [slow] + fast]
        r = run_load(",".join(targets), mode="closed", concurrency=1, requests=60,
                     scheme="c3", replica_groups="0,1,2", seed=3, c3_n=16, c3_workers=1,
                     c3_selectors=16, c3_time_unit_us=1.024, c3_ewma="1/4")
        assert r["replies"] == 60 and r["timeouts"] == 0
        assert r["c3"]["selectors"] == 16 and r["c3"]["ewma"] == 0.25
        slow_n = r["c3"]["selections"][targets[0]]
        assert slow_n >= 10
        # 1.024 us units end at 4.19 ms: every reply of the 20 ms server saturates t and r
        sat = r["c3"]["saturated"]
        assert sat["samples"] == 60 and sat["t"] >= slow_n / 60 and sat["r"] >= slow_n / 60
        for bad in ({"c3_selectors": 0}, {"c3_n": 31745}, {"c3_time_unit_us": 60},
                    {"c3_ewma": 0.3}):
            with pytest.raises(ValueError):
                run_load(",".join(targets), requests=1, scheme="c3", replica_groups="0,1,2",
                         **bad)
    finally:
        for s in [slow] + fast:
            s.stop()


def _fake_rsnode(front, servers, stop, rid=4):
    """A stand-in for the switch on loopback: takes NetRS requests on ``front``, selects the
    server ``servers[rgid % len]`` (rewrites mf = f(M_RESP), rid, rv = 77), relays the
    response back relabelled M_MON with a source marker (what the data plane does)."""
    back = {}
    relay = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    relay.bind((LOOP, 0))
    relay.settimeout(0.05)
    front.settimeout(0.05)
    while not stop.is_set():
        try:
            data, src = front.recvfrom(4096)
            req = H.RsRequest.unpack(data)
            assert (req.mf, req.rid, req.rv) == (H.M_REQ, 0, 0)
            sel = req._replace(mf=H.f(H.M_RESP), rid=rid, rv=77)
            storage = Header.unpack(data[H.REQ_LEN:])
            back[storage.req_id] = src
            relay.sendto(sel.pack() + data[H.REQ_LEN:], servers[req.rgid % len(servers)])
        except socket.timeout:
            pass
        try:
            data, _ = relay.recvfrom(4096)
            resp = H.RsResponse.unpack(data)
            assert (resp.mf, resp.rid, resp.rv) == (H.M_RESP, rid, 77)
            out = resp._replace(mf=H.M_MON, sm=0x10001).pack() + data[H.RESP_LEN:]
            front.sendto(out, back.pop(Header.unpack(data[H.RESP_LEN:]).req_id))
        except socket.timeout:
            pass
    relay.close()


def test_netrs_scheme_through_a_stand_in_rsnode(tmp_path):
    srv = [Server(tmp_path / f"s{k}", bind=LOOP, port=0, server_id=k + 1, sync=False,
                  netrs_port=0).start() for k in range(2)]
    front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    front.bind((LOOP, 0))
    stop = threading.Event()
    th = threading.Thread(target=_fake_rsnode,
                          args=(front, [s.offload_address("netrs") for s in srv], stop), daemon=True)
    th.start()
    try:
        # one target (the stand-in is every group's backup replica), two groups (keys
        # even/odd): the stand-in sends group g to server g
        tgt = f"{LOOP}:{front.getsockname()[1]}"
        r = run_load(tgt, mode="closed", concurrency=4, requests=80, scheme="netrs",
                     replica_groups="0;0", rs_bind_port=0, seed=5, zipf=0.0)
        assert r["replies"] == 80 and r["timeouts"] == 0
        assert r["netrs"]["selected"] == 80 and r["netrs"]["selected_fraction"] == 1.0
        assert r["netrs"]["drs"] == r["netrs"]["plain"] == 0
        assert set(r["by_server"]) == {"1", "2"}
        assert sum(v["replies"] for v in r["by_server"].values()) == 80
        assert srv[0].stats()["rs_replies"] + srv[1].stats()["rs_replies"] == 80
    finally:
        stop.set()
        th.join(2)
        front.close()
        for s in srv:
            s.stop()


def test_engine_unwraps_the_netrs_response():
    eng = Engine(f"{LOOP}:9", bind=(LOOP, 0), codec=NetRSCodec())
    peer = _sock()
    try:
        c = eng.send(Op.GET, 5, target=(LOOP, peer.getsockname()[1]),
                     head=H.RsRequest(rgid=0x0102, avail=0x05).pack())
        data, src = peer.recvfrom(4096)
        assert data[:H.REQ_LEN] == bytes.fromhex("0000 4e5253524551 00000000 0102 05")
        req = Header.unpack(data[H.REQ_LEN:])
        resp = H.RsResponse(rid=2, mf=H.M_MON, rv=3, sm=9, ss_sid=4, ss_q=1, ss_t=16)
        peer.sendto(resp.pack() + req.reply(Status.OK, value=b"v").pack(), src)
        eng.wait(c, timeout=2)
        assert c.head == resp and c.reply.value == b"v"
        assert c.src == peer.getsockname()
    finally:
        eng.close()
        peer.close()
