"""XORInc in the storage agents over real UDP sockets on loopback (no switch): n
``netstor-server``\\ s with their chunk stores, the client's stripe writes, reads, the
baselines' repairs and updates, and the nodes' side of NetRepair (PART) and NetUpdate
(UPD_OLD, DELTA apply + ACK), checked byte for byte against ``galois`` (an independent field
and linear algebra: the Cauchy generator, encoding and decoding built here from the field, not
from ``netstor.model.gf``) and against ``netstor.model.gf``. Transfers of chunk data counted
by the hosts' own counters (each datagram sent and received by a host is one host -> switch
and one switch -> host transfer on a rack's star)."""
import socket
import time

import galois
import numpy as np
import pytest

from netstor.agent.server import Server
from netstor.model import gf
from netstor.offloads.xorinc import header as H
from netstor.offloads.xorinc.codec import (ChunkStore, Route, XorIncCodec, chunk_key, ip_int,
                                           packets)
from netstor.offloads.xorinc.schemes import XorIncClient, XorIncError, tupdate_tree

LOOP = "127.0.0.1"
GF = galois.GF(2**8, irreducible_poly=0x11D)


def ref_generator(k, r):
    """Systematic [I; C], C[i][j] = 1 / ((k + i) + j) computed in galois' field."""
    c = GF([[(k + i) ^ j for j in range(k)] for i in range(r)]) ** -1
    return np.vstack([GF.Identity(k), c])


def ref_encode(data, r):
    k = data.shape[0]
    return np.asarray(ref_generator(k, r) @ GF(data), dtype=np.uint8)


def ref_repair(stripe, k, r, survivors, lost):
    g = ref_generator(k, r)
    a = g[[lost]] @ np.linalg.inv(g[survivors])
    return np.asarray(a @ GF(stripe[survivors]), dtype=np.uint8)[0]


@pytest.fixture
def rack(tmp_path):
    """RS(5, 3): 8 servers on loopback, one chunk each."""
    servers = [Server(tmp_path / f"db{i}", bind=LOOP, port=0, server_id=i, sync=False,
                      xorinc_port=0).start() for i in range(8)]
    yield servers
    for s in servers:
        s.stop()


def _nodes(servers):
    return [s.offload_address("xorinc") for s in servers]


def _data_counts(servers, client_res=()):
    tot = sum(s.stats()["xi_data_tx"] + s.stats()["xi_data_rx"] for s in servers)
    return tot + sum(r.tx + r.rx for r in client_res)


def _sock(timeout=2.0, addr=(LOOP, 0)):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(addr)
    s.settimeout(timeout)
    return s


# the requesters of the engine tests: contributions to the engine (PART, UPD_OLD) go to the
# requester's address at UDP port 7450 (where the switch's parser knows XORInc); one loopback
# address per test (tests run in parallel), none 127.0.0.1 (a server's default XORInc socket)
def _engine_sock(req):
    return _sock(addr=(req, H.XORINC_UDP_PORT))


def _recv_all(s, n):
    out = []
    for _ in range(n):
        raw, _ = s.recvfrom(65535)
        out.append(H.split(raw))
    return out


def test_packets_and_route_codec():
    assert packets(4096) == [(0, 0, 1024), (16, 1024, 2048), (32, 2048, 3072),
                             (48, 3072, 4096)]
    assert packets(100, 3) == [(3, 0, 100)] and packets(0) == [(0, 0, 0)]
    assert packets(1025)[-1] == (16, 1024, 1025)
    r = Route([(5, 1, 255, ip_int("10.0.0.1"), 7450), (6, 9, 0, ip_int("10.0.0.2"), 1),
               (7, 3, 0, ip_int("10.0.0.3"), 2)], 0)
    r2 = Route.unpack(r.pack() + b"junk")
    assert r2.entries == r.entries and r2.children() == [1, 2]
    assert r2.at(1).children() == [] and r2.at(2).me[:2] == (7, 3)
    with pytest.raises(ValueError):
        Route.unpack(r.pack()[:10])
    assert tupdate_tree(4) == [255, 0, 1, 1, 2] and tupdate_tree(1) == [255, 0]
    assert len(chunk_key(1, 2)) == 7


def test_chunk_store_put_xor_extend(tmp_path):
    import lmdb
    env = lmdb.open(str(tmp_path / "db"), map_size=1 << 24)
    st = ChunkStore(env)
    assert st.get(1, 0) is None
    st.put(1, 0, b"\x01\x02\x03")
    st.put(1, 0, b"\xff", 5)                          # past the end: zero-extended
    assert st.get(1, 0) == b"\x01\x02\x03\x00\x00\xff"
    assert st.xor(1, 0, b"\x03\x03", 1) == b"\x02\x03"
    assert st.get(1, 0) == b"\x01\x01\x00\x00\x00\xff"
    assert st.xor(2, 4, b"\x07", 2) == b"\x00" and st.get(2, 4) == b"\x00\x00\x07"
    env.close()


@pytest.mark.parametrize("length", [4096, 3000])
def test_write_read_and_baseline_repairs_byte_exact(rack, length):
    k, r = 5, 3
    rng = np.random.default_rng(length)
    data = rng.integers(0, 256, (k, length), dtype=np.uint8)
    ref = ref_encode(data, r)
    assert np.array_equal(ref, gf.encode(data, r))          # the model agrees with galois
    npk = len(packets(length))
    with XorIncClient(_nodes(rack), k, r) as c:
        w = c.write_stripe(11, data)
        assert w.tx == (k + r) * npk                            # n chunks written
        for i in range(k + r):
            rd = c.read(11, i)
            assert rd.data == ref[i].tobytes() and rd.rx == npk
        for lost in range(k + r):
            helpers = c.survivors(lost)
            assert helpers == [i for i in range(k + r) if i != lost][:k]
            want = ref_repair(ref, k, r, helpers, lost)
            assert np.array_equal(want, ref[lost])
            for how in (c.repair_conventional, c.repair_pipeline):
                before = _data_counts(rack)
                res = how(11, lost)
                assert res.data == ref[lost].tobytes(), (how.__name__, lost)
                assert res.data == gf.repair(gf.generator(k, r), ref, helpers, lost).tobytes()
                # 2k transfers of the chunk (star: k chunks in at the client; chain: k hops)
                moved = _data_counts(rack, [res]) - before
                assert moved == 2 * k * npk, (how.__name__, moved)
        # a failed node besides the lost chunk: the next survivor helps
        res = c.repair_pipeline(11, 0, failed=(1,))
        assert res.extra["helpers"] == [2, 3, 4, 5, 6] and res.data == ref[0].tobytes()


def test_baseline_updates_keep_the_stripe_consistent(rack):
    k, r, length = 5, 3, 2500
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, (k, length), dtype=np.uint8)
    npk = len(packets(length))
    counts = {}
    with XorIncClient(_nodes(rack), k, r) as c:
        c.write_stripe(3, data)
        for j, name in enumerate(["update_conventional", "update_tupdate", "update_client",
                                  "update_tupdate"]):
            new = rng.integers(0, 256, length, dtype=np.uint8)
            before = _data_counts(rack)
            res = getattr(c, name)(3, (2 * j + 1) % k, new.tobytes())
            counts[name] = (_data_counts(rack, [res]) - before) // npk
            data[(2 * j + 1) % k] = new
            ref = ref_encode(data, r)
            for i in range(k + r):
                assert c.read(3, i).data == ref[i].tobytes(), (name, i)
    # chunk transfers: star / tree from the data node 2r + 2; at the client + the read 2r + 4
    assert counts == {"update_conventional": 2 * r + 2, "update_tupdate": 2 * r + 2,
                      "update_client": 2 * r + 4}


def test_helpers_send_parts_for_netrepair(rack):
    """The helpers' side of NetRepair with no switch on the path: each helper's PART packets
    carry its chunk (src = its index, the request's fields echoed) to the requester; combined
    with the decoding coefficients they give the lost chunk (what the engine computes)."""
    k, r, length = 5, 3, 4096
    rng = np.random.default_rng(3)
    data = rng.integers(0, 256, (k, length), dtype=np.uint8)
    ref = ref_encode(data, r)
    nodes = _nodes(rack)
    with XorIncClient(nodes, k, r) as c:
        c.write_stripe(9, data)
    req = "127.0.0.2"
    s = _engine_sock(req)
    lost, helpers = 2, [0, 1, 3, 4, 5]
    for h in helpers:
        s.sendto(H.frame_payload(H.XiHeader(type=H.T_REPAIR, opid=17, stripe=9, chunk=lost,
                                            src=h, need=k, code=4, seq=5,
                                            req_addr=ip_int(req), req_port=40000)), nodes[h])
    got = _recv_all(s, k * 4)
    acc = np.zeros(length, np.uint8)
    coeff = dict(zip(helpers, gf.decode_coefficients(gf.generator(k, r), helpers, lost)))
    seen = set()
    for h, d in got:
        assert (h.type, h.opid, h.stripe, h.chunk, h.need, h.code, h.len) == \
            (H.T_PART, 17, 9, lost, k, 4, 1024)
        assert d == ref[h.src][h.off * 64:h.off * 64 + 1024].tobytes()
        seen.add((h.src, h.off))
        acc[h.off * 64:h.off * 64 + 1024] ^= gf.mul_vec(int(coeff[h.src]),
                                                       np.frombuffer(d, np.uint8))
    assert seen == {(hh, o) for hh in helpers for o in (0, 16, 32, 48)}
    assert np.array_equal(acc, ref[lost])
    # a helper without the chunk answers F_ERROR to the requester, counted
    s2 = _sock()
    s2.sendto(H.frame_payload(H.XiHeader(type=H.T_REPAIR, stripe=99, chunk=0, src=1, need=k)),
              nodes[1])
    h, _ = H.split(s2.recvfrom(4096)[0])
    s2.close()
    assert h.type == H.T_PART and h.flags & H.F_ERROR and h.len == 0
    assert rack[1].stats()["xi_missing"] == 1
    s.close()


def test_nodes_side_of_netupdate(rack):
    """UPD_NEW at the data node (header-only, as the switch passes it on) brings its old
    data back as UPD_OLD (to the requester's address, port 7450); the DELTA copies the
    switch would send (computed here with galois: delta = old XOR new, parity i's copy scaled
    by C[i][j]) are applied and ACKed; the stripe then equals galois' encoding of the new
    data."""
    k, r, length, j = 5, 3, 2048, 3
    rng = np.random.default_rng(5)
    data = rng.integers(0, 256, (k, length), dtype=np.uint8)
    nodes = _nodes(rack)
    with XorIncClient(nodes, k, r) as c:
        c.write_stripe(4, data)
    req = "127.0.0.3"
    s = _engine_sock(req)
    me = dict(req_addr=ip_int(req), req_port=H.XORINC_UDP_PORT)
    new = rng.integers(0, 256, length, dtype=np.uint8)
    for off, a, b in packets(length):
        s.sendto(H.XiHeader(type=H.T_UPD_NEW, opid=3, stripe=4, chunk=j, src=j, need=2,
                            off=off, len=b - a, **me).pack(), nodes[j])     # header only
    old = np.zeros(length, np.uint8)
    for h, d in _recv_all(s, 2):
        assert (h.type, h.opid, h.stripe, h.chunk, h.src, h.need) == (H.T_UPD_OLD, 3, 4, j, j, 2)
        old[h.off * 64:h.off * 64 + h.len] = np.frombuffer(d, np.uint8)
    assert np.array_equal(old, data[j])
    delta = GF(old) + GF(new)
    g = ref_generator(k, r)
    copies = [(j, delta)] + [(k + i, g[k + i, j] * delta) for i in range(r)]
    for target, d in copies:
        d = np.asarray(d, dtype=np.uint8)
        for off, a, b in packets(length):
            s.sendto(H.frame_payload(H.XiHeader(type=H.T_DELTA, opid=3, stripe=4, chunk=j,
                                                src=target, off=off, len=b - a, **me),
                                     d[a:b].tobytes()), nodes[target])
    acks = {(h.src, h.off) for h, _ in _recv_all(s, (r + 1) * 2) if h.type == H.T_ACK}
    assert acks == {(t, o) for t in [j, 5, 6, 7] for o in (0, 16)}
    data[j] = new
    ref = ref_encode(data, r)
    with XorIncClient(nodes, k, r) as c:
        for i in range(k + r):
            assert c.read(4, i).data == ref[i].tobytes()
    s.close()


def test_bad_datagrams_and_missing_chunks(rack):
    nodes = _nodes(rack)
    s = _sock(0.5)
    s.sendto(b"\x01\x02", nodes[0])                                   # too short
    s.sendto(H.frame_payload(H.XiHeader(type=H.T_ACK)), nodes[0])     # not served by a node
    s.sendto(H.frame_payload(H.XiHeader(type=H.T_REPAIRED, len=64)), nodes[0])  # truncated
    time.sleep(0.2)
    st = rack[0].stats()
    assert (st["xi_received"], st["xi_dropped"], st["xi_replies"]) == (3, 3, 0)
    with XorIncClient(nodes, 5, 3, timeout=0.5, opids=range(4, 6)) as c:
        with pytest.raises(XorIncError, match="F_ERROR"):
            c.read(1234, 2)
        with pytest.raises(XorIncError, match="timed out"):
            c.repair_net(1234, 0)           # no switch engine on the path: no REPAIRED
        # its op id may have partial sums in the engine: retired, the next one is used
        assert (c.retired, c.opids) == ([4], [5])
        with pytest.raises(XorIncError, match="F_ERROR"):
            c.update_net(1234, 1, b"x" * 100)     # the data node has no such chunk
        with pytest.raises(XorIncError, match="no op id left"):
            c.repair_net(1234, 0)
    s.close()


def test_codec_registered():
    from netstor.agent.server import codecs
    assert any(isinstance(c, XorIncCodec) for c in codecs())


@pytest.mark.parametrize("k,r", [(3, 2), (8, 3), (12, 4)])
def test_codes_every_lost_position_and_every_update(tmp_path, k, r):
    """RS(k, r) across the offered range (n up to 16 servers): both host repairs of every
    lost position byte-exact against galois, every update scheme on a different data chunk
    leaves the stripe equal to galois' encoding."""
    servers = [Server(tmp_path / f"db{i}", bind=LOOP, port=0, server_id=i, sync=False,
                      workers=1, xorinc_port=0).start() for i in range(k + r)]
    try:
        rng = np.random.default_rng(k * 100 + r)
        length = 1500
        data = rng.integers(0, 256, (k, length), dtype=np.uint8)
        with XorIncClient(_nodes(servers), k, r) as c:
            c.write_stripe(1, data)
            ref = ref_encode(data, r)
            for lost in range(k + r):
                helpers = c.survivors(lost)
                assert np.array_equal(ref_repair(ref, k, r, helpers, lost), ref[lost])
                assert c.repair_conventional(1, lost).data == ref[lost].tobytes()
                assert c.repair_pipeline(1, lost).data == ref[lost].tobytes()
            for j, how in enumerate((c.update_conventional, c.update_tupdate, c.update_client)):
                new = rng.integers(0, 256, length, dtype=np.uint8)
                how(1, (j * 5) % k, new.tobytes())
                data[(j * 5) % k] = new
            ref = ref_encode(data, r)
            for i in range(k + r):
                assert c.read(1, i).data == ref[i].tobytes(), i
    finally:
        for s in servers:
            s.stop()


def test_allow_list_covers_the_named_requester(tmp_path):
    """With --allow, a request from an allowed source naming a requester outside the
    prefixes is dropped (its answers would go there), counted as not allowed."""
    with Server(tmp_path / "db", bind=LOOP, port=0, sync=False, allow=["127.0.0.0/30"],
                xorinc_port=0) as srv:
        node = srv.offload_address("xorinc")
        with XorIncClient([node, node], 1, 1, timeout=0.5) as c:
            c.write_stripe(1, [b"abc" * 50])
            assert c.read(1, 1).data == b"abc" * 50          # parity of RS(1, 1): a copy
        s = _sock()
        s.sendto(H.frame_payload(H.XiHeader(type=H.T_READ, stripe=1, chunk=0,
                                            req_addr=ip_int("10.9.9.9"), req_port=9)), node)
        s.sendto(H.frame_payload(H.XiHeader(type=H.T_READ, stripe=1, chunk=0,
                                            req_addr=ip_int("127.0.0.2"),
                                            req_port=s.getsockname()[1])), node)
        time.sleep(0.3)
        st = srv.stats()
        assert (st["not_allowed"], st["xi_reads"]) == (1, 2)     # the client's and 127.0.0.2's
        s.close()
