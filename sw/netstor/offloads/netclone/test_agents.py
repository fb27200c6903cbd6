"""NetClone in the storage agents on loopback: server replies (header echoed, load reported,
a clone copy dropped when busy), the client schemes (single, clone, netclone) and duplicate
handling."""
import socket
import time

import pytest

from netstor.agent.client import Engine
from netstor.agent.load import run_load
from netstor.offloads.netclone.codec import NetCloneCodec
from netstor.offloads.netclone.schemes import parse_groups, parse_pairs
from netstor.agent.server import Server, build_parser
from netstor.offloads.netclone import header as H
from netstor.proto import Header, Op, Status

LOOP = "127.0.0.1"


def test_constants_agree_with_the_data_plane_program():
    from netstor.offloads.netclone import program as P
    assert (H.NETCLONE_UDP_PORT, H.OP_REQ, H.OP_REPLY) == (P.NETCLONE_UDP_PORT, P.OP_REQ,
                                                           P.OP_REPLY)
    assert (H.CLONE_NONE, H.CLONE_ORIGINAL, H.CLONE_COPY) == (P.CLONE_NONE, P.CLONE_ORIGINAL,
                                                              P.CLONE_COPY)
    assert (H.POLICY_RANDOM, H.POLICY_LEAST_LOADED) == (P.POLICY_RANDOM,
                                                        P.POLICY_LEAST_LOADED)
    assert H.NC_LEN * 8 == sum(w for _, w in P.HEADER.fields) and H.SERVERS == P.SERVERS
    assert P.make_netclone().header_fields == list(H.HEADER.fields)


def _sock(timeout=2.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((LOOP, 0))
    s.settimeout(timeout)
    return s


def _nc_request(group=5, seq=77, fidx=123, clone=H.CLONE_NONE, key=1, rid=1, server_id=3):
    return (H.NcHeader(H.OP_REQ, clone=clone, group=group, seq=seq, server_id=server_id,
                       fidx=fidx).pack() + Header(op=Op.GET, key=key, req_id=rid).pack())


def _recv_nc(s):
    data, _ = s.recvfrom(4096)
    nc, rest = H.split(data)
    return nc, Header.unpack(rest)


def test_server_netclone_reply_echoes_the_header(tmp_path):
    with Server(tmp_path / "db", bind=LOOP, port=0, server_id=7, sync=False,
                netclone_port=0) as srv:
        c = _sock()
        c.sendto(_nc_request(clone=H.CLONE_ORIGINAL), srv.offload_address("netclone"))
        nc, h = _recv_nc(c)
        assert nc == H.NcHeader(H.OP_REPLY, clone=H.CLONE_ORIGINAL, group=5, seq=77,
                                server_id=7, load=0, fidx=123)
        assert (h.is_reply, h.req_id, h.status, h.server_id) == (True, 1, Status.NOT_FOUND, 7)
        # the plain storage port still speaks plain storage
        c.sendto(Header(op=Op.GET, key=1, req_id=2).pack(), srv.address)
        assert Header.unpack(c.recvfrom(4096)[0]).req_id == 2
        # a datagram that is no NetClone request: dropped, counted
        c.sendto(b"\x02" + bytes(40), srv.offload_address("netclone"))
        c.sendto(_nc_request(rid=3)[:16] + b"garbage", srv.offload_address("netclone"))    # bad storage part
        time.sleep(0.2)
        st = srv.stats()
        assert (st["nc_dropped"], st["dropped"], st["nc_received"], st["nc_replies"]) == \
            (1, 2, 3, 1)
        c.close()


def test_server_reports_load_and_drops_a_clone_when_busy(tmp_path):
    with Server(tmp_path / "db", bind=LOOP, port=0, server_id=2, sync=False, workers=1,
                service_model="const:150000", netclone_port=0) as srv:
        c = _sock(3.0)
        for rid in (1, 2, 3):
            c.sendto(_nc_request(rid=rid), srv.offload_address("netclone"))
        time.sleep(0.05)
        # busy: a clone copy is dropped, an original is not
        c.sendto(_nc_request(rid=4, clone=H.CLONE_COPY), srv.offload_address("netclone"))
        got = [_recv_nc(c) for _ in range(3)]
        # load = requests still queued or in service once the reply went: 2, 1, 0
        assert [(h.req_id, nc.load) for nc, h in got] == [(1, 2), (2, 1), (3, 0)]
        with pytest.raises(socket.timeout):
            c.settimeout(0.3)
            c.recvfrom(4096)
        assert srv.stats()["clones_dropped"] == 1
        # idle again: a clone copy is served
        c.settimeout(2.0)
        c.sendto(_nc_request(rid=5, clone=H.CLONE_COPY), srv.offload_address("netclone"))
        nc, h = _recv_nc(c)
        assert (h.req_id, nc.clone, nc.load) == (5, H.CLONE_COPY, 0)
        c.close()


def test_server_cli_netclone_port_option():
    a = build_parser().parse_args(["--db", "x"])
    assert a.netclone_port is None            # = 7431, optional if taken
    assert build_parser().parse_args(["--db", "x", "--netclone-port", "0"]).netclone_port == 0


def test_group_and_pair_specs():
    assert parse_groups("0-3,7") == [0, 1, 2, 3, 7]
    assert parse_pairs(None, 3) == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    assert parse_pairs("0:1,1:0", 2) == [(0, 1), (1, 0)]
    for bad in ("0:0", "0:5", "1"):
        with pytest.raises(ValueError):
            parse_pairs(bad, 2)
    with pytest.raises(ValueError):
        parse_groups("70000")
    with pytest.raises(ValueError):
        run_load(f"{LOOP}:9", scheme="netclone", requests=1)           # no groups


def test_client_clone_first_reply_wins_duplicate_ignored(tmp_path):
    with Server(tmp_path / "a", bind=LOOP, port=0, server_id=1, sync=False) as fast, \
            Server(tmp_path / "b", bind=LOOP, port=0, server_id=2, sync=False,
                   service_model="const:100000") as slow:
        with Engine([fast.address, slow.address], timeout=2.0) as eng:
            c = eng.send(Op.GET, 9, target=1, copies=(0,))
            eng.wait(c)
            assert c.reply.server_id == 1 and c.latency_ns < 90e6
            time.sleep(0.25)
            assert eng.poll(0.1) == []
            assert (eng.replies, eng.duplicates, eng.unmatched, eng.outstanding) == (1, 1, 1, 0)
        # the load generator's clone scheme: every request to both of a pair
        r = run_load([fast.address, slow.address], scheme="clone", mode="open", rate=200,
                     requests=40, seed=3)
        assert r["replies"] == r["sent"] == 40 and r["timeouts"] == 0
        assert set(r["by_server"]) == {"1"}           # the fast one always wins
        assert r["engine"]["duplicates"] <= 40
        assert slow.stats()["received"] == 41         # the slow one got every request too
        # single: one server of a random pair
        r = run_load([fast.address, slow.address], scheme="single", mode="open", rate=200,
                     requests=60, seed=4, pairs="0:1", timeout=5.0)
        assert r["replies"] == 60 and set(r["by_server"]) == {"1", "2"}
        assert r["engine"]["duplicates"] == 0


def test_client_netclone_scheme_and_duplicates(tmp_path):
    # straight to one server's NetClone port (no switch): one reply each, never cloned
    with Server(tmp_path / "db", bind=LOOP, port=0, server_id=4, sync=False,
                netclone_port=0) as srv:
        r = run_load(f"{LOOP}:{srv.offload_address('netclone')[1]}", scheme="netclone", groups="0-3",
                     mode="open", rate=300, requests=50, seed=1, nc_bind_port=0)
        assert r["replies"] == r["sent"] == 50 and r["timeouts"] == 0
        assert r["netclone"] == {"cloned_replies": 0, "cloned_fraction": 0.0}
        assert r["by_server"]["4"]["replies"] == 50 and srv.stats()["nc_replies"] == 50
    # a fake switch+servers that lets both replies of a clone through: one counts
    fake = _sock()
    with Engine(fake.getsockname(), timeout=2.0, codec=NetCloneCodec()) as eng:
        c = eng.send(Op.GET, 5, head=H.NcHeader(H.OP_REQ, group=9).pack())
        data, peer = fake.recvfrom(4096)
        nc, req = H.split(data)
        assert (nc.op, nc.group, nc.clone) == (H.OP_REQ, 9, H.CLONE_NONE)
        req = Header.unpack(req)
        for sid, clone in ((1, H.CLONE_ORIGINAL), (2, H.CLONE_COPY)):
            rep = H.NcHeader(H.OP_REQ, clone=clone, group=9, seq=1).reply(sid, 0)
            fake.sendto(rep.pack() + req.reply(Status.OK, value=b"v", server_id=sid).pack(),
                        peer)
        eng.wait(c)
        time.sleep(0.1)
        assert eng.poll(0.1) == []
        assert c.reply.value == b"v" and c.head.clone == H.CLONE_ORIGINAL and c.head.server_id == 1
        assert (eng.replies, eng.duplicates) == (1, 1)
    fake.close()
