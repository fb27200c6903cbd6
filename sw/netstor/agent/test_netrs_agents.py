"""NetRS in the storage agents on loopback: the server's NetRS socket (response header
against hand-computed values: rid/rv echoed, f^-1 of the magic, queue length, service time in
UQ12.4 us), bad headers counted and dropped; the client schemes netrs and c3."""
import socket
import time

import pytest

from netstor.agent.server import Server, build_parser
from netstor.netrs import header as H
from netstor.proto import Header, Op, Status

LOOP = "127.0.0.1"


def test_constants_agree_with_the_data_plane_program():
    from netstor.programs import netrs as P
    assert H.NETRS_UDP_PORT == P.NETRS_UDP_PORT == 7432
    assert [n for n, _ in H.RESP_FIELDS][:3] == [n for n, _ in P.HEADER][:3]
    # the request's group/avail are the program's x[16:32] / x[8:16]; the response's SS
    # fields sit where the program reads them
    assert H.RESP_LEN * 8 == sum(w for _, w in P.HEADER)
    assert H.RESP_FIELDS[4:] == P.HEADER[4:] and H.RESP_FIELDS[3] == ("sm", 32)
    assert H.REQ_LEN == 13 and H.f(H.f(H.M_RESP)) == H.M_RESP


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
        c.sendto(_rs_request(req_id=1), srv.rs_address)
        c.sendto(_rs_request(req_id=2, mf=H.f(H.M_DRS), rid=H.DRS_RID, rv=7), srv.rs_address)
        c.sendto(_rs_request(req_id=3, rv=0xFFFF), srv.rs_address)
        got = [_recv_rs(c) for _ in range(3)]
        (r1, h1), (r2, h2), (r3, h3) = got
        assert [h.req_id for _, h in got] == [1, 2, 3]
        assert (r1.rid, r1.mf, r1.rv, r1.sm, r1.ssl, r1.ss_sid) == (9, H.M_RESP, 0x4321, 0, 6, 5)
        assert (r2.rid, r2.mf, r2.rv) == (H.DRS_RID, H.M_DRS, 7)
        assert r3.rv == 0xFFFF
        # queue: the requests a new one would wait behind once the reply is sent: 2, 1, 0
        assert [r.ss_q for r, _ in got] == [2, 1, 0]
        # service time: 20 ms plus the LMDB work, in UQ12.4 us saturated at 0xFFFF (4.1 ms)
        assert all(r.ss_t == 0xFFFF for r, _ in got)
        assert all(h.service_ns >= 20_000_000 and h.status == Status.NOT_FOUND
                   and h.server_id == 5 for _, h in got)
        st = srv.stats()
        assert (st["rs_received"], st["rs_replies"], st["rs_dropped"]) == (3, 3, 0)
        c.close()


def test_server_netrs_service_time_in_uq12_4(tmp_path):
    with Server(tmp_path / "db", bind=LOOP, port=0, server_id=1, sync=False, workers=2,
                service_model="const:1500", netrs_port=0) as srv:
        c = _sock()
        c.sendto(_rs_request(), srv.rs_address)
        r, h = _recv_rs(c)
        # the reported service time is the storage header's, in us * 16
        assert r.ss_t == min(0xFFFF, h.service_ns * 16 // 1000)
        assert 1500 * 16 <= r.ss_t < 3000 * 16 and r.ss_q == 0
        c.close()


def test_server_netrs_bad_headers_dropped_and_counted(tmp_path):
    with Server(tmp_path / "db", bind=LOOP, port=0, server_id=1, sync=False,
                netrs_port=0) as srv:
        c = _sock(0.3)
        bad = [b"\x00" * 12,                                  # shorter than the header
               _rs_request(mf=H.M_REQ),                       # never passed an RSNode/ToR
               _rs_request(mf=H.M_MON),                       # a response magic
               _rs_request(mf=0x123456789ABC)]                # nothing of NetRS
        for d in bad:
            c.sendto(d, srv.rs_address)
        with pytest.raises(socket.timeout):
            c.recvfrom(4096)
        # a good NetRS header with a malformed storage part: BAD_REQUEST behind the header
        req = _rs_request(req_id=8)
        c.settimeout(2.0)
        c.sendto(req[:H.REQ_LEN + 14] + b"\x00\x09" + req[H.REQ_LEN + 16:], srv.rs_address)
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
            assert srv.rs_address is None
        with pytest.raises(OSError):
            Server(tmp_path / "db2", bind=LOOP, port=0, netrs_port=port).start()
    finally:
        hog.close()
