"""XORInc in the golden model and the compiled model: frames in, frames out, byte-exact
against ``galois`` (pinned; an independent GF(2^8) implementation: its field and matrix
inverse, not our tables).

Reference: the stripe's parity is ``C . data`` with ``C[i][j] = 1 / ((k + i) XOR j)`` in
``galois.GF(2**8, irreducible_poly=0x11D)`` (ISA-L's cauchy1 layout, the documented
generator); a lost chunk is ``G[lost] . inv(G[helpers]) . chunks[helpers]`` computed with
galois' ``np.linalg.inv``. The switch computes it from the coefficients the controller wrote
(:mod:`..config`, from ``netstor.model.gf``)."""
from __future__ import annotations

import random

import galois
import numpy as np
import pytest

from netstor.driver.tables import TableWriter, apply_writes
from netstor.elements.gf import ST_ABSORBED, ST_DONE, GFAccumulate
from netstor.model import gf
from netstor.model.compiled import CompiledModel
from netstor.model.dataplane import DataplaneModel, ipv4_header_checksum
from netstor.programs import default_pipeline

from .config import helpers, model_writes
from .header import (BEAT, DATA_OFFSET, HEADER, MAX_DATA, T_DELTA, T_PART, T_REPAIRED,
                     T_UPD_NEW, T_UPD_OLD, XORINC_UDP_PORT, XiHeader, frame_payload)

GF = galois.GF(2 ** 8, irreducible_poly=0x11D)
SW_MAC = 0x0200000000FF
CLIENT = (0x0A000064, 0x020000000064, 0)          # ip, mac, port
NODE_BASE = 0x0A000001


def ref_parity(data, r):
    """Parity chunks of ``data`` (k x L uint8) by galois (independent reference)."""
    k = data.shape[0]
    C = GF([[GF(1) / GF((k + i) ^ j) for j in range(k)] for i in range(r)])
    return np.asarray(C @ GF(data), dtype=np.uint8)


def ref_repair(stripe, k, r, lost, hs):
    """Chunk ``lost`` from the chunks ``hs`` by galois' matrix inverse."""
    C = GF([[GF(1) / GF((k + i) ^ j) for j in range(k)] for i in range(r)])
    G = np.vstack([GF.Identity(k), C]).view(GF)
    rows = G[hs, :]
    coeffs = G[[lost], :] @ np.linalg.inv(rows)
    return np.asarray(coeffs @ GF(stripe[hs]), dtype=np.uint8)[0]


def section(k, r, code=1):
    n = k + r
    nodes = {f"n{j}": {"ip": NODE_BASE + j, "mac": 0x020000000001 + j, "port": 1}
             for j in range(n)}
    return {"smac": SW_MAC, "nodes": nodes,
            "codes": {code: {"k": k, "r": r, "nodes": [f"n{j}" for j in range(n)]}},
            "clients": {"c0": [0, 63]}, "requesters": [f"{CLIENT[0] >> 24}."
                                                         f"{CLIENT[0] >> 16 & 255}."
                                                         f"{CLIENT[0] >> 8 & 255}."
                                                         f"{CLIENT[0] & 255}/32"]}


_PIPE = {}


def pipeline():
    if "p" not in _PIPE:
        _PIPE["p"] = default_pipeline()
    return _PIPE["p"]


def switch(k, r, kind="interp", timeout=0):
    pl = pipeline()
    m = (CompiledModel if kind == "compiled" else DataplaneModel)(pl, groups="list")
    w = TableWriter(pl)
    writes = []
    for ip, mac, port in [CLIENT] + [(NODE_BASE + j, 0x020000000001 + j, 1)
                                     for j in range(k + r)]:
        writes += w.lpm_add("l3.routes", ip, 32, "route",
                            {"port": port, "dmac": mac, "smac": SW_MAC})
    sec = section(k, r)
    sec["timeout"] = timeout
    plan, cw = model_writes(pl, sec, writer=w)
    apply_writes(m, writes + cw)
    return m, plan


def frame(src_ip, dst_ip, hdr, data=b"", *, sport=XORINC_UDP_PORT, dport=XORINC_UDP_PORT,
          ihl=5, vlan=False, csum=0x1234):
    """An Ethernet/IPv4/UDP frame carrying ``hdr`` and ``data`` at byte 128."""
    payload = frame_payload(hdr, data)
    if ihl != 5:
        payload = payload[:len(payload)]
    udp_len = 8 + len(payload)
    opts = bytes(4 * (ihl - 5))
    ip = bytearray(b"\x45\x00" + (20 + len(opts) + udp_len).to_bytes(2, "big") + b"\0\0\0\0"
                   + b"\x40\x11\0\0" + src_ip.to_bytes(4, "big") + dst_ip.to_bytes(4, "big"))
    ip[0] = 0x40 | ihl
    ip += opts
    ip[10:12] = ipv4_header_checksum(bytes(ip)).to_bytes(2, "big")
    udp = (sport.to_bytes(2, "big") + dport.to_bytes(2, "big") + udp_len.to_bytes(2, "big")
           + csum.to_bytes(2, "big"))
    eth = (0x02000000FF01).to_bytes(6, "big") + (0x020000000099).to_bytes(6, "big")
    if vlan:
        eth += b"\x81\x00\x00\x05"
    return eth + b"\x08\x00" + bytes(ip) + udp + payload


def parse_out(data):
    """``(XiHeader, chunk data, udp dport, ip dst, udp csum)`` of an output frame (no VLAN,
    IHL 5)."""
    h = XiHeader.unpack(data[42:])
    return (h, bytes(data[DATA_OFFSET:DATA_OFFSET + h.len]), int.from_bytes(data[36:38], "big"),
            int.from_bytes(data[30:34], "big"), int.from_bytes(data[40:42], "big"))


def part_frames(stripe, k, lost, hs, opid, *, code=1, chunk_len=None, seq=0):
    """Every PART packet of a repair: ``[(helper, frame)]`` in helper-major order."""
    L = stripe.shape[1] if chunk_len is None else chunk_len
    out = []
    for s in hs:
        for pos in range(0, L, MAX_DATA):
            d = bytes(stripe[s, pos:pos + MAX_DATA])
            h = HEADER.pack(type=T_PART, opid=opid, stripe=7, chunk=lost, src=s, need=k,
                            code=code, off=pos // BEAT, len=len(d), seq=seq,
                            req_addr=CLIENT[0], req_port=40000)
            out.append((s, frame(NODE_BASE + s, CLIENT[0], XiHeader.unpack(h), d)))
    return out


def run_repair(m, frames):
    """Feed frames; the REPAIRED outputs ``{off: data}``."""
    got = {}
    for _s, f in frames:
        for o in m.process(f, 1):
            h, data, dport, dst, ucs = parse_out(o.frame)
            assert h.type == T_REPAIRED and dport == 40000 and dst == CLIENT[0]
            assert ucs == 0 and o.port == 0
            assert h.off not in got, "a slot completed twice"
            got[h.off] = data
    return got


def assemble(got, L):
    return b"".join(got[o] for o in sorted(got)) if got else b""


# ---- the whole (k, r, lost) space, sampled -----------------------------------------------------

def _cases():
    """Every k 3..12 and r 2..4 at least once, every lost position of every (k, r) covered
    across the two sweeps (each (k, r) pair: all its lost positions)."""
    return [(k, r) for k in range(3, 13) for r in range(2, 5)]


@pytest.mark.parametrize("k,r", _cases())
def test_repair_every_lost_chunk_against_galois(k, r):
    """Random stripe RS(k, r), every lost chunk position repaired through the model switch
    (frames in, REPAIRED frames out), byte-exact against galois. The helpers' packets arrive
    interleaved in random order; chunk length random (short last packet)."""
    rng = random.Random(k * 100 + r)
    L = rng.choice([64, 700, 1024, 1500, 4096])
    data = np.frombuffer(rng.randbytes(k * L), dtype=np.uint8).reshape(k, L)
    stripe = np.vstack([data, ref_parity(data, r)])
    # the library's parity agrees with the generator the controller uses
    assert np.array_equal(stripe, gf.encode(data, r))
    m, _ = switch(k, r)
    for lost in range(k + r):
        hs = helpers(k + r, k, lost)
        fr = part_frames(stripe, k, lost, hs, opid=lost)
        rng.shuffle(fr)
        got = run_repair(m, fr)
        assert assemble(got, L) == bytes(ref_repair(stripe, k, r, lost, hs)), (k, r, lost)
        assert assemble(got, L) == bytes(stripe[lost])
    n_pkts = (L + MAX_DATA - 1) // MAX_DATA
    assert m.counter("xi.engine.done") == (k + r) * n_pkts
    assert m.counter("xi.engine.absorbed") == (k + r) * n_pkts * (k - 1)
    assert m.counter("xi.engine.dup") == m.counter("xi.engine.bad") == 0


def test_both_models_agree_with_duplicates_and_interleaving():
    """The interpreter and the compiled model, same frames (three repairs interleaved, with
    duplicates, late duplicates after completion, a misaligned frame, a PART with no table
    entry): identical outputs and counters."""
    k, r = 4, 3
    rng = random.Random(5)
    L = 2048
    data = np.frombuffer(rng.randbytes(k * L), dtype=np.uint8).reshape(k, L)
    stripe = np.vstack([data, ref_parity(data, r)])
    frames = []
    for op, lost in ((3, 0), (4, 5), (9, 2)):
        frames += part_frames(stripe, k, lost, helpers(k + r, k, lost), opid=op)
    frames += rng.sample(frames, 6)                       # duplicates (some after completion)
    rng.shuffle(frames)
    bad = XiHeader.unpack(HEADER.pack(type=T_PART, opid=1, chunk=0, src=9, code=1, len=64,
                                      need=4))
    frames.append((9, frame(NODE_BASE, CLIENT[0], bad, bytes(64))))      # no coefficient
    frames.append((0, frame(NODE_BASE, CLIENT[0], XiHeader.unpack(HEADER.pack(
        type=T_PART, opid=1, chunk=1, src=0, code=1, len=64, need=4)), bytes(64), ihl=6)))
    outs = []
    for kind in ("interp", "compiled"):
        m, _ = switch(k, r, kind)
        o = [(x.port, x.frame) for _s, f in frames for x in m.process(f, 1)]
        outs.append((o, m.counters()))
    assert outs[0][0] == outs[1][0]
    assert outs[0][1] == outs[1][1]
    c = outs[0][1]
    assert c["xi.engine.dup"] > 0 and c["xi.engine.misaligned"] == 1
    assert c["xi.repair.miss"] == 1
    # every repaired part is right, each completed once (late duplicates never complete)
    done = [parse_out(f) for _p, f in outs[0][0]]
    assert len(done) == 3 * (L // MAX_DATA) == c["xi.engine.done"]
    for h, d, *_ in done:
        assert d == bytes(stripe[h.chunk, h.off * BEAT:h.off * BEAT + h.len])


def test_duplicate_is_not_counted_twice():
    """A helper's packet sent twice before the others: the duplicate is refused (counted),
    the result still needs the other helpers and equals the reference."""
    k, r = 3, 2
    rng = random.Random(1)
    data = np.frombuffer(rng.randbytes(k * 256), dtype=np.uint8).reshape(k, 256)
    stripe = np.vstack([data, ref_parity(data, r)])
    m, _ = switch(k, r)
    hs = helpers(k + r, k, 1)
    fr = part_frames(stripe, k, 1, hs, opid=2)
    assert m.process(fr[0][1], 1) == []
    assert m.process(fr[0][1], 1) == []                  # duplicate: not added
    assert m.counter("xi.engine.dup") == 1
    assert m.process(fr[1][1], 1) == []
    got = run_repair(m, fr[2:])
    assert assemble(got, 256) == bytes(stripe[1])


def test_timeout_frees_slots():
    """An op with a missing helper times out (arrival ticks): its slots are freed, counted
    once, the op's timeout count says so; contributions after it start afresh and the
    repair completes with all helpers' data."""
    k, r = 3, 2
    rng = random.Random(2)
    data = np.frombuffer(rng.randbytes(k * 128), dtype=np.uint8).reshape(k, 128)
    stripe = np.vstack([data, ref_parity(data, r)])
    m, _ = switch(k, r, timeout=100)
    hs = helpers(k + r, k, 4)
    fr = part_frames(stripe, k, 4, hs, opid=5)
    assert m.process(fr[0][1], 1, arrival=10) == []
    assert m.process(fr[1][1], 1, arrival=50) == []
    # 200 ticks later a packet of another op arrives: op 5 expires
    other = part_frames(stripe, k, 0, helpers(k + r, k, 0), opid=6)
    assert m.process(other[0][1], 1, arrival=250) == []
    assert m.counter("xi.engine.timeouts") == 1 and m.mem_read("xi.engine.expired", 5) == 1
    # the third helper alone no longer completes (the slots are free again)
    assert m.process(fr[2][1], 1, arrival=260) == []
    assert m.process(fr[0][1], 1, arrival=270) == []
    outs = m.process(fr[1][1], 1, arrival=280)
    assert len(outs) == 1 and parse_out(outs[0].frame)[1] == bytes(stripe[4])
    assert m.counter("xi.engine.timeouts") == 1


def test_untrusted_contributions_are_dropped():
    """The trust guard: a PART from an address that is not a configured node (a forged
    contribution to a live repair), and an UPD_NEW from one that is not a configured
    requester, are dropped before the engine, counted in ``xi.trust.miss``, and change
    nothing: the repair completes with the real helpers' data only, the forged source's
    data is not in it; the same PART from its node's address is taken (the guard, not the
    packet, made the difference). Without the section's trust entries nothing is trusted."""
    k, r = 3, 2
    rng = random.Random(5)
    data = np.frombuffer(rng.randbytes(k * 256), dtype=np.uint8).reshape(k, 256)
    stripe = np.vstack([data, ref_parity(data, r)])
    m, _ = switch(k, r)
    hs = helpers(k + r, k, 2)
    fr = part_frames(stripe, k, 2, hs, opid=9)
    junk = np.frombuffer(rng.randbytes((k + r) * 256), dtype=np.uint8).reshape(k + r, 256)
    forged = part_frames(junk, k, 2, hs, opid=9)
    stranger = NODE_BASE + 200
    h = XiHeader.unpack(forged[0][1][42:])
    bad = frame(stranger, CLIENT[0], h, bytes(junk[hs[0]]))
    assert m.process(bad, 1) == []
    assert m.counter("xi.trust.miss") == 1 and m.counter("xi.engine.absorbed") == 0
    # a forged UPD_NEW (new data for chunk 0) from a stranger: dropped, no cue to the node
    hn = XiHeader.unpack(HEADER.pack(type=T_UPD_NEW, opid=10, stripe=3, chunk=0, src=0,
                                     code=1, off=0, len=64, req_addr=stranger, req_port=1))
    assert m.process(frame(stranger, NODE_BASE, hn, bytes(64)), 1) == []
    assert m.counter("xi.trust.miss") == 2 and m.counter("xi.engine.absorbed") == 0
    got = run_repair(m, fr)
    assert assemble(got, 256) == bytes(stripe[2])
    assert m.counter("xi.engine.absorbed") == k - 1 and m.counter("xi.engine.done") == 1
    # the forged packet's bytes from the node's own address are a contribution
    m2, _ = switch(k, r)
    ok = frame(NODE_BASE + hs[0], CLIENT[0], h, bytes(junk[hs[0]]))
    assert m2.process(ok, 1) == [] and m2.counter("xi.engine.absorbed") == 1
    assert m2.counter("xi.trust.miss") == 0
    # unconfigured: nothing is trusted
    m3 = DataplaneModel(pipeline(), groups="list")
    assert m3.process(fr[0][1], 1) == [] and m3.counter("xi.trust.miss") == 1
    assert m3.counter("xi.engine.absorbed") == 0


def test_short_and_misaligned():
    """Short chunk (one partial beat); frames whose data is not at byte 128 (IPv4 options,
    VLAN tag, frame shorter than 128 + len) are dropped and counted."""
    k, r = 3, 3
    rng = random.Random(3)
    data = np.frombuffer(rng.randbytes(k * 5), dtype=np.uint8).reshape(k, 5)
    stripe = np.vstack([data, ref_parity(data, r)])
    m, _ = switch(k, r)
    hs = helpers(k + r, k, 5)
    got = run_repair(m, part_frames(stripe, k, 5, hs, opid=0))
    assert assemble(got, 5) == bytes(ref_repair(stripe, k, r, 5, hs))
    h = XiHeader.unpack(HEADER.pack(type=T_PART, opid=1, chunk=5, src=0, code=1, len=64,
                                    need=3))
    for f in (frame(NODE_BASE, CLIENT[0], h, bytes(64), ihl=6),
              frame(NODE_BASE, CLIENT[0], h, bytes(64), vlan=True),
              frame(NODE_BASE, CLIENT[0], h, bytes(30))):
        assert m.process(f, 1) == []
    assert m.counter("xi.engine.misaligned") == 3


def test_update_delta_copies_against_galois():
    """NetUpdate for every data chunk of RS(k, r) (every k 3..12 sampled with r 2..4): the
    new data's packet goes on header-only to the data node; the old data completes the
    delta; the copies reach the data node (coefficient 1) and every parity node (C[i][j]);
    applying them gives galois' parity of the new stripe. r + 1 data copies per packet."""
    rng = random.Random(9)
    for k in range(3, 13):
        r = 2 + k % 3
        L = 1024 + 100
        data = np.frombuffer(rng.randbytes(k * L), dtype=np.uint8).reshape(k, L)
        stripe = np.vstack([data, ref_parity(data, r)])
        for kind in ("interp", "compiled"):
            m, _ = switch(k, r, kind)
            st = stripe.copy()
            j = rng.randrange(k)
            new = np.frombuffer(rng.randbytes(L), dtype=np.uint8)
            for pos in range(0, L, MAX_DATA):
                nd = bytes(new[pos:pos + MAX_DATA])
                od = bytes(st[j, pos:pos + MAX_DATA])
                base = dict(opid=j, stripe=3, chunk=j, code=1, off=pos // BEAT, len=len(nd),
                            req_addr=CLIENT[0], req_port=40001)
                hn = XiHeader.unpack(HEADER.pack(type=T_UPD_NEW, src=j, **base))
                outs = m.process(frame(CLIENT[0], NODE_BASE + j, hn, nd), 0)
                # header-only trigger to the data node
                assert len(outs) == 1 and len(outs[0].frame) < DATA_OFFSET
                assert int.from_bytes(outs[0].frame[30:34], "big") == NODE_BASE + j
                ho = XiHeader.unpack(HEADER.pack(type=T_UPD_OLD, src=j, **base))
                outs = m.process(frame(NODE_BASE + j, CLIENT[0], ho, od), 1)
                assert len(outs) == r + 1
                targets = set()
                for o in outs:
                    h, d, _dport, dst, ucs = parse_out(o.frame)
                    assert h.type == T_DELTA and ucs == 0
                    assert dst == NODE_BASE + h.src        # the node holding chunk src
                    # every copy's source is the requester (the data node's own address
                    # would be a martian to it), and the IPv4 header checksum still holds
                    assert int.from_bytes(o.frame[26:30], "big") == CLIENT[0]
                    assert _ip_csum(o.frame[14:34]) == 0
                    targets.add(h.src)
                    # the node XORs the (scaled) delta into its chunk
                    seg = st[h.src, pos:pos + len(d)]
                    st[h.src, pos:pos + len(d)] = seg ^ np.frombuffer(d, dtype=np.uint8)
                assert targets == {j} | set(range(k, k + r))
            want = data.copy()
            want[j] = new
            assert np.array_equal(st[:k], want)
            assert np.array_equal(st[k:], ref_parity(want, r)), (k, r, j, kind)


def _ip_csum(hdr):
    """The ones'-complement sum of an IPv4 header (0 when its checksum is right)."""
    t = sum(int.from_bytes(hdr[i:i + 2], "big") for i in range(0, len(hdr), 2))
    while t >> 16:
        t = (t & 0xFFFF) + (t >> 16)
    return t ^ 0xFFFF


def test_engine_element_equals_gf_engine():
    """The element, beat by beat, against netstor.model.gf.Engine (the reference semantics
    the gateware is tested against): random beats of a few ops, duplicates included."""
    pl = pipeline()
    m = DataplaneModel(pl, groups="list")
    e = next(x for x in pl.elements if isinstance(x, GFAccumulate))
    eng = gf.Engine(n_ops=e.n_ops, chunk_beats=e.chunk_beats)
    rng = random.Random(4)
    state = e._state(lambda n: m.memory(n).words)
    for _ in range(400):
        op, off, src = rng.randrange(3), rng.randrange(2), rng.randrange(4)
        coeff, need = rng.randrange(256), rng.randrange(1, 4)
        d = rng.randbytes(BEAT)
        fr = bytes(DATA_OFFSET) + d
        out, status = e.run(state, m.count, fr, op, off, coeff, src, need, BEAT, 0, 0x45,
                            len(fr), 0)
        ref = eng.push(gf.Beat(op, off, coeff, src, need, d))
        want = ST_DONE if ref.done else 3 if ref.dup else ST_ABSORBED
        assert status == want
        if ref.done:
            assert out[DATA_OFFSET:] == ref.data


def test_in_the_default_bitstream():
    """The default pipeline (make rtl, the whole-core tests) carries the xi program with its
    payload elements (GFAccumulate in ingress, GFScale in egress) and is the pipeline these
    tests run; an unknown offload name is refused."""
    from netstor.elements.gf import GFAccumulate, GFScale
    base = default_pipeline()
    assert "xi" in [p.name for p in base.programs]
    assert [type(e) for e in base.elements if e.rewrites_payload] == [GFAccumulate]
    assert {type(e) for e in base.egress_elements if e.rewrites_payload} == {GFScale}
    assert [p.name for p in pipeline().programs] == [p.name for p in base.programs]
    with pytest.raises(KeyError, match="nope"):
        default_pipeline(extra=("nope",))
