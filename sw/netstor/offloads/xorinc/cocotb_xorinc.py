"""cocotb: XORInc on the whole core of the default bitstream (the GF engine in the frame path)
in Verilator, against the golden model and ``galois``; run by ``sim/test_core.py`` on the shared
core build (the offload's ``cocotb`` hook).

Every XORInc frame enters on one input (wire RX 1) so the engine sees the contributions in
the order the model does (the completing packet is the last one in); plain L3 traffic on wire
RX 0 interleaves with them in the arbiter. Outputs run under random back-pressure. Each test
compares every output frame byte for byte with the model (``CoreEnv.check_outputs``), the
counters with the model's, the engine's self-check counter (``gf.mismatch``) with 0, and the
repaired chunks / updated parity with ``galois`` (independent of our GF tables).
"""
from __future__ import annotations

import os
import random

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles

from netstor.model.dataplane import ipv4_header_checksum
from netstor.offloads.xorinc.config import helpers, model_writes
from netstor.offloads.xorinc.header import (BEAT, HEADER, MAX_DATA, T_DELTA, T_PART,
                                            T_REPAIRED, T_UPD_NEW, T_UPD_OLD, XiHeader)
from netstor.offloads.xorinc.test_model import (CLIENT, NODE_BASE, SW_MAC, frame, parse_out,
                                                ref_parity, ref_repair, section)
from netstor.offloads.xorinc.program import N_OPS
from netstor.sim.core_env import CoreEnv, pause_generator
from netstor.sim.frames import udp_frame

SEED = int(os.environ.get("NETSTOR_SEED", "1"))
XI_IN = 1            # every XORInc frame enters here (one input: the model's order)
K, R = 4, 2


class XiEnv(CoreEnv):
    """The core env with XORInc's stripe, routes and coefficients."""

    async def setup(self, k=K, r=R, timeout=0):
        w = self.writer
        writes = []
        for ipa, mac, port in [CLIENT] + [(NODE_BASE + j, 0x020000000001 + j, 1)
                                          for j in range(k + r)]:
            writes += w.lpm_add("l3.routes", ipa, 32, "route",
                                {"port": port, "dmac": mac, "smac": SW_MAC})
        # plain traffic's route (wire RX 0 -> wire TX 1)
        writes += w.lpm_add("l3.routes", 0x0A010000, 16, "route",
                            {"port": 1, "dmac": 0x0A0000000001, "smac": SW_MAC})
        # the engine's timeout is written like any memory (the core's xi.engine.timeout)
        _plan, cw = model_writes(self.pipeline, dict(section(k, r), timeout=timeout), writer=w)
        assert [x for x in cw if x[0] == "xi.engine.timeout"] == [("xi.engine.timeout", 0,
                                                                   timeout)]
        await self.apply(writes + cw)

    def pressure(self, busy):
        for q in range(2 * self.P):
            self.sink[q].set_pause_generator(pause_generator(self.rng, busy))

    async def finish(self):
        for q in range(2 * self.P):
            self.sink[q].clear_pause_generator()
            self.sink[q].pause = False
        await self.drain()
        self.check_outputs()
        await self.check_counters()
        assert await self.csr.counter_read("gf.mismatch") == 0


def background(env, n):
    """``n`` plain UDP frames (L3 traffic) on wire RX 0."""
    return [udp_frame(env.rng, env.rng.choice([64, 130, 300, 1100]), dst="10.1.2.3")
            for _ in range(n)]


async def send_mixed(env, xi_frames, plain):
    """The XORInc frames in order on XI_IN, the plain frames on wire RX 0 meanwhile."""
    for i, f in enumerate(xi_frames):
        await env.send(f, XI_IN)
        if plain and env.rng.random() < 0.5:
            await env.send(plain.pop(), 0)
    for f in plain:
        await env.send(f, 0)


def part_frames(stripe, lost, hs, opid, L, *, size=MAX_DATA):
    """The PART packets of one repair (``size`` data bytes per packet, helper-major)."""
    out = []
    for s in hs:
        for pos in range(0, L, size):
            d = bytes(stripe[s, pos:min(pos + size, L)])
            h = HEADER.pack(type=T_PART, opid=opid, stripe=7, chunk=lost, src=s, need=K,
                            code=1, off=pos // BEAT, len=len(d), seq=pos,
                            req_addr=CLIENT[0], req_port=40000)
            out.append(((opid, s, pos), frame(NODE_BASE + s, CLIENT[0], XiHeader.unpack(h), d)))
    return out


@cocotb.test()
async def test_netrepair(dut):
    """Three repairs interleaved in random order (chunks of 2,148 bytes in 1,024-byte packets:
    16-beat packets and a short last one; one of 1,000 bytes in 192-byte packets), with
    duplicates (some after completion): every REPAIRED frame equals the model's and the
    chunk galois repairs."""
    env = XiEnv(dut, seed=SEED)
    await env.reset()
    await env.setup()
    rng = random.Random(SEED)
    ops = [(3, 0, 2148, MAX_DATA), (4, 5, 2148, MAX_DATA), (9, 2, 1000, 192)]
    Lmax = max(o[2] for o in ops)
    data = np.frombuffer(rng.randbytes(K * Lmax), dtype=np.uint8).reshape(K, Lmax)
    stripe = np.vstack([data, ref_parity(data, R)])
    frames = []
    for opid, lost, L, size in ops:
        frames += part_frames(stripe, lost, helpers(K + R, K, lost), opid, L, size=size)
    frames += rng.sample(frames, 6)                      # duplicates
    # a forged contribution: a PART of op 3 from an address that is no configured node (the
    # trust guard drops it before the engine; counted in xi.trust.miss, checked below)
    _k, f0 = part_frames(stripe[::-1].copy(), 0, helpers(K + R, K, 0), 3, MAX_DATA)[0]
    forged = bytearray(f0)
    forged[26:30] = (NODE_BASE + 200).to_bytes(4, "big")
    forged[24:26] = b"\0\0"
    forged[24:26] = ipv4_header_checksum(bytes(forged[14:34])).to_bytes(2, "big")
    frames.append(((3, 99, 0), bytes(forged)))
    rng.shuffle(frames)
    env.pressure(0.3)
    await send_mixed(env, [f for _k, f in frames], background(env, 12))
    await env.finish()
    # galois: each op's repaired chunk, assembled from the REPAIRED frames
    got = {}
    for f, _u in env.received[0]:
        h, d, dport, dst, ucs = parse_out(f)
        if h.type != T_REPAIRED:
            continue
        assert dport == 40000 and dst == CLIENT[0] and ucs == 0
        assert (h.opid, h.off) not in got, "a slot completed twice"
        got[(h.opid, h.off)] = d
    for opid, lost, L, size in ops:
        chunk = b"".join(got[(opid, off)] for off in range(0, L // BEAT + 1, size // BEAT)
                         if (opid, off) in got)
        ref = ref_repair(stripe[:, :L], K, R, lost, helpers(K + R, K, lost))
        assert chunk == bytes(ref), f"op {opid}: repaired chunk differs from galois"
    c = env.model.counters()
    assert c["xi.engine.dup"] > 0 and c["xi.engine.done"] == len(got)
    assert c["xi.trust.miss"] == 1          # the hardware's equals it (env.finish)


@cocotb.test()
async def test_netupdate(dut):
    """Two updates interleaved (chunk 1: 1,100 bytes in two packets; chunk 3: 64 bytes),
    UPD_NEW then UPD_OLD (a duplicate UPD_NEW between): the header-only cue to the data
    node, the DELTA copies scaled per parity node (the egress scale); the nodes' XOR of the
    deltas gives the parity galois computes for the new data."""
    env = XiEnv(dut, seed=SEED + 1)
    await env.reset()
    await env.setup()
    rng = random.Random(SEED + 1)
    L = 1100
    data = np.frombuffer(rng.randbytes(K * L), dtype=np.uint8).reshape(K, L)
    stripe = np.vstack([data, ref_parity(data, R)])
    new = {1: np.frombuffer(rng.randbytes(L), dtype=np.uint8),
           3: np.frombuffer(rng.randbytes(64), dtype=np.uint8)}
    seqs = []
    for j, nd in new.items():
        for pos in range(0, len(nd), MAX_DATA):
            n_ = bytes(nd[pos:pos + MAX_DATA])
            o_ = bytes(stripe[j, pos:pos + len(n_)])
            base = dict(opid=20 + j, stripe=3, chunk=j, code=1, off=pos // BEAT, len=len(n_),
                        req_addr=CLIENT[0], req_port=40001)
            hn = XiHeader.unpack(HEADER.pack(type=T_UPD_NEW, src=j, **base))
            ho = XiHeader.unpack(HEADER.pack(type=T_UPD_OLD, src=j, **base))
            seqs.append([frame(CLIENT[0], NODE_BASE + j, hn, n_),
                         frame(CLIENT[0], NODE_BASE + j, hn, n_),      # a duplicate
                         frame(NODE_BASE + j, CLIENT[0], ho, o_)])
    # interleave the sequences, each in its own order
    order = []
    while any(seqs):
        s = rng.choice([s for s in seqs if s])
        order.append(s.pop(0))
    env.pressure(0.3)
    await send_mixed(env, order, background(env, 6))
    await env.finish()
    st = stripe.copy()
    n_delta = 0
    for q in (0, 1):
        for f, _u in env.received[q]:
            if len(f) < 128:
                continue
            h, d, _dport, dst, ucs = parse_out(f)
            if h.type != T_DELTA:
                continue
            n_delta += 1
            assert dst == NODE_BASE + h.src and ucs == 0
            assert int.from_bytes(f[26:30], "big") == CLIENT[0]     # source: the requester
            pos = h.off * BEAT
            st[h.src, pos:pos + len(d)] ^= np.frombuffer(d, dtype=np.uint8)
    assert n_delta == (R + 1) * 3
    want = data.copy()
    want[1] = new[1]
    want[3, :64] = new[3]
    assert np.array_equal(st[:K], want)
    assert np.array_equal(st[K:], ref_parity(want, R))


async def expired(env):
    """The core's per-op expired counts (memory ``xi.engine.expired``, read through the
    control window like any element memory)."""
    return [await env.csr.mem_read("xi.engine.expired", op) for op in range(N_OPS)]


@cocotb.test()
async def test_timeout(dut):
    """A nonzero timeout (the ``xorinc:`` section's, written to the core's
    ``xi.engine.timeout`` as to the model's): repairs whose contributions never all arrive
    (op 12: two helpers' PARTs carrying other data; op 14: one helper's) are freed by the
    core's scanner after the timeout and counted (``xi.engine.timeouts`` 2 before any later
    packet, and per op in memory ``xi.engine.expired``: 1 for ops 12 and 14, 0 elsewhere; a
    repair that completed meanwhile is not counted); the same repair sent again later on op
    12 starts from free slots: its REPAIRED chunk equals the model's frame and galois' repair
    (with the stale partial sums still live the two helpers would be duplicates and the sum
    wrong). After the model has run the same packets (it frees an op at a later packet), the
    core's ``xi.engine.expired`` equals the model's word for word."""
    T = 1500
    env = XiEnv(dut, seed=SEED + 2)
    await env.reset()
    await env.setup(timeout=T)
    rng = random.Random(SEED + 2)
    L, lost, opid, opid_ok, opid_one = 1000, 1, 12, 13, 14
    hs = helpers(K + R, K, lost)
    data = np.frombuffer(rng.randbytes(K * L), dtype=np.uint8).reshape(K, L)
    stripe = np.vstack([data, ref_parity(data, R)])
    junk = np.frombuffer(rng.randbytes((K + R) * L), dtype=np.uint8).reshape(K + R, L)
    stale = [f for _k, f in part_frames(junk, lost, hs[:2], opid, L, size=512)]
    stale += [f for _k, f in part_frames(junk, lost, hs[:1], opid_one, L, size=512)]
    whole = [f for _k, f in part_frames(stripe, lost, hs, opid_ok, L, size=512)]
    for f in stale + whole:
        await env.send(f, XI_IN, arrival=env.cycle)
    await ClockCycles(dut.clk, 3 * T)
    assert await env.csr.counter_read("xi.engine.timeouts") == 2
    want = [0] * N_OPS
    want[opid] = want[opid_one] = 1
    assert await expired(env) == want, "expired per op before any later packet"
    again = [f for _k, f in part_frames(stripe, lost, hs, opid, L, size=512)]
    rng.shuffle(again)
    for f in again:
        await env.send(f, XI_IN, arrival=env.cycle)
    await env.finish()
    assert env.model.counters()["xi.engine.timeouts"] == 2
    assert await expired(env) == env.model.memory("xi.engine.expired").words == want
    got = {}
    for f, _u in env.received[0]:
        h, d, _dport, _dst, ucs = parse_out(f)
        if h.type == T_REPAIRED:
            got.setdefault(h.opid, {})[h.off] = d
    ref = bytes(ref_repair(stripe[:, :L], K, R, lost, hs))
    for op in (opid, opid_ok):
        chunk = b"".join(got[op][off] for off in sorted(got[op]))
        assert chunk == ref, f"op {op}: repaired chunk differs from galois"
