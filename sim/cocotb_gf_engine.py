"""cocotb testbench for GFEngine (run by sim/test_gf_engine.py).

Every output beat is compared with the golden model (``netstor.model.gf.Engine``) fed the same
beats, at exactly ``LATENCY`` cycles after its input beat; repaired chunks and the multiplier
are compared with the independent library (``galois``, GF(2^8)/0x11D). The engine has no
back-pressure (it never stalls: one beat in and one out per clock), so input gaps are the only
timing freedom: runs mix full-rate stretches and random idle cycles.
"""

import os
import random

import cocotb
import galois
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge

from netstor.model import gf

GF = galois.GF(2**8, irreducible_poly=0x11D)
N_OPS = int(os.environ.get("GF_OPS", "8"))
CHUNK_BEATS = int(os.environ.get("GF_CHUNK_BEATS", "64"))
LATENCY = int(os.environ.get("GF_LATENCY", "3"))
FULL_KEEP = (1 << 64) - 1


def lib_generator(k, r):
    x, y = GF(np.arange(k, k + r)), GF(np.arange(k))
    c = (x[:, None] + y[None, :]) ** -1
    return GF(np.vstack([np.eye(k, dtype=np.uint8), np.asarray(c, dtype=np.uint8)]))


class Harness:
    """Drives one beat (or an idle cycle) per clock, checks every output against the model."""

    def __init__(self, dut):
        self.dut = dut
        self.model = gf.Engine(n_ops=N_OPS, chunk_beats=CHUNK_BEATS)
        self.cycle = 0
        self.expect = {}            # output cycle -> expected Out
        self.outs = []              # every Out seen (checked)
        self.timeouts = []          # (cycle, op)
        self.errors = []
        self.timeout = 0
        self.last_beat = {}         # op -> cycle its last beat was driven

    async def reset(self):
        d = self.dut
        d.rst.value = 1
        d.i_valid.value = 0
        d.timeout.value = 0
        for _ in range(3):
            await RisingEdge(d.clk)
        d.rst.value = 0
        await FallingEdge(d.clk)

    def _sample(self):
        d = self.dut
        if int(d.to_valid.value):
            # the engine freed an op: it must have had open slots and no beat for more than
            # the timeout; the model applies the same expiry here, in the same place of the
            # beat order (the engine fires only while no beat of the op is in flight)
            op = int(d.to_op.value)
            self.timeouts.append((self.cycle, op))
            if not self.model.open_slots(op):
                self.errors.append(f"cycle {self.cycle}: op {op} timed out with no open slot")
            if self.cycle - self.last_beat.get(op, 0) <= self.timeout:
                self.errors.append(f"cycle {self.cycle}: op {op} timed out "
                                   f"{self.cycle - self.last_beat[op]} cycles after its beat")
            self.model.expire(op)
        e = self.expect.pop(self.cycle, None)
        if not int(d.o_valid.value):
            if e is not None:
                self.errors.append(f"cycle {self.cycle}: no output, expected {e.op}/{e.off}")
            return
        if e is None:
            self.errors.append(f"cycle {self.cycle}: an output beat no input made")
            return
        got = (int(d.o_op.value), int(d.o_off.value), int(d.o_done.value),
               int(d.o_dup.value), int(d.o_bad.value), int(d.o_first.value),
               int(d.o_last.value))
        want = (e.op, e.off, e.done, e.dup, e.bad, e.first, e.last)
        data = int(d.o_data.value).to_bytes(64, "little")
        if got != want or data != e.data:
            if len(self.errors) < 10:
                self.errors.append(f"cycle {self.cycle}: got {got} want {want} "
                                   f"data equal {data == e.data}")
        self.outs.append((self.cycle, e))

    async def step(self, beat=None):
        """One clock: ``beat`` (a gf.Beat) or an idle cycle."""
        d = self.dut
        if beat is None:
            d.i_valid.value = 0
        else:
            d.i_valid.value = 1
            d.i_op.value, d.i_off.value = beat.op, beat.off
            d.i_coeff.value, d.i_src.value, d.i_need.value = beat.coeff, beat.src, beat.need
            d.i_keep.value = beat.keep
            d.i_data.value = int.from_bytes(beat.data, "little")
            d.i_first.value, d.i_last.value = beat.first, beat.last
            self.expect[self.cycle + LATENCY] = self.model.push(beat)
            self.last_beat[beat.op] = self.cycle
        await FallingEdge(d.clk)
        self.cycle += 1
        self._sample()

    async def run(self, beats, idle=0.0, rng=None):
        for b in beats:
            while rng is not None and rng.random() < idle:
                await self.step()
            await self.step(b)

    async def drain(self, n=LATENCY + 3):
        for _ in range(n):
            await self.step()

    def check(self):
        assert not self.expect, f"outputs never seen: {sorted(self.expect)[:5]}"
        assert not self.errors, "\n".join(self.errors)


_HARNESS = []


async def harness(dut):
    """The run's one harness: the tests share the engine's state (its slot RAM is not reset)
    and so share one model, which mirrors the RTL from the first reset on."""
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    if not _HARNESS:
        _HARNESS.append(Harness(dut))
        await _HARNESS[0].reset()
    else:
        await FallingEdge(dut.clk)
        _HARNESS[0]._sample()
    return _HARNESS[0]


def chunk_beats(op, src, coeff, need, chunk, rng):
    """A contributor's chunk as beats (the tail beat's unused bytes random, ``keep`` off)."""
    nb = (len(chunk) + 63) // 64
    out = []
    for off in range(nb):
        part = bytes(chunk[64 * off:64 * off + 64])
        data = part + bytes(rng.randrange(256) for _ in range(64 - len(part)))
        out.append(gf.Beat(op, off, coeff, src, need, data, (1 << len(part)) - 1,
                           int(off == 0), int(off == nb - 1)))
    return out


@cocotb.test()
async def multiplier_exhaustive(dut):
    """All 65,536 products through the engine: 256 coefficients x the 256 byte values (4 beats
    each) with need = 1, so every beat completes at once with its product as the result;
    compared with the library's product table."""
    h = await harness(dut)
    table = np.asarray(GF(np.arange(256))[:, None] * GF(np.arange(256))[None, :],
                       dtype=np.uint8)
    x = bytes(range(256))
    beats = [gf.Beat(c % N_OPS, q, c, 0, 1, x[64 * q:64 * q + 64])
             for c in range(256) for q in range(4)]
    start = len(h.outs)
    await h.run(beats)
    await h.drain()
    h.check()
    outs = h.outs[start:]
    assert len(outs) == 1024 and all(e.done for _, e in outs)
    # the model's outputs were checked equal to the RTL's; the RTL's (= model's) products
    # against the library
    got = {}
    for b, (_, e) in zip(beats, outs):
        got.setdefault(b.coeff, [b""] * 4)[b.off] = e.data
    for c in range(256):
        assert b"".join(got[c]) == table[c].tobytes(), c


@cocotb.test()
async def repairs_interleaved(dut):
    """Waves of N_OPS repairs of random RS(k, r) stripes (k 3..12, r 2..4, lost chunk cycling
    through every position, chunks of 1 byte to 4 KiB), each helper's chunk times the library's
    decoding coefficient; all beats of a wave in random order with duplicates (before the
    slot completes) and random idle cycles; every output checked against the model, every
    repaired chunk against the stripe the library encoded."""
    rng = random.Random(int(os.environ.get("GF_SEED", "1")))
    nrng = np.random.default_rng(1)
    h = await harness(dut)
    dup0 = h.model.counters["dup"]
    stripes = dups = 0
    lengths = [1, 37, 64, 65, 200, 700, 64 * CHUNK_BEATS, rng.randrange(1, 64 * CHUNK_BEATS)]
    for wave in range(3):
        jobs, beats = {}, []
        for op in range(N_OPS):
            k = 3 + (wave * N_OPS + op) % 10
            r = rng.randrange(2, 5)
            n = k + r
            length = lengths[(wave * N_OPS + op) % len(lengths)]
            g = lib_generator(k, r)
            data = GF(nrng.integers(0, 256, size=(k, length), dtype=np.uint8))
            stripe = np.asarray(g @ data, dtype=np.uint8)
            lost = (wave * N_OPS + op) % n
            surv = rng.sample([i for i in range(n) if i != lost], k)
            a = np.asarray(g[[lost]] @ np.linalg.inv(g[surv]), dtype=np.uint8)[0]
            jobs[op] = (stripe[lost].tobytes(), (length + 63) // 64)
            for s, c in zip(surv, a):
                beats += chunk_beats(op, s, int(c), k, stripe[s], rng)
            stripes += 1
        rng.shuffle(beats)
        # duplicates: a copy of a beat placed after it and before its slot's last contribution
        last_pos = {}
        for i, b in enumerate(beats):
            last_pos[(b.op, b.off)] = i
        inserts = []
        for i, b in enumerate(beats):
            lp = last_pos[(b.op, b.off)]
            if i < lp and rng.random() < 0.1:
                inserts.append((rng.randrange(i + 1, lp + 1), b))
        for pos, b in sorted(inserts, key=lambda t: -t[0]):
            beats.insert(pos, b)
        dups += len(inserts)
        start = len(h.outs)
        await h.run(beats, idle=rng.choice([0.0, 0.3]), rng=rng)
        await h.drain()
        h.check()
        res = {op: {} for op in jobs}
        for _, e in h.outs[start:]:
            if e.done:
                assert e.off not in res[e.op], "a slot completed twice"
                res[e.op][e.off] = e.data
        for op, (want, nb) in jobs.items():
            assert sorted(res[op]) == list(range(nb)), op
            assert b"".join(res[op][i] for i in range(nb))[:len(want)] == want, op
    assert h.model.counters["dup"] - dup0 == dups > 0
    dut._log.info("%d stripes repaired byte-exact, %d duplicates refused", stripes, dups)


@cocotb.test()
async def back_to_back_one_slot(dut):
    """Full-rate streams on 1-3 hot slots (each beat's slot written 1, 2 or 3 clocks before:
    every forwarding path), random coefficients, contributors (duplicates) and needs (some 0),
    compared beat by beat with the model."""
    rng = random.Random(5)
    h = await harness(dut)
    c0 = dict(h.model.counters)
    for hot in (1, 2, 3):
        slots = [(rng.randrange(N_OPS), rng.randrange(CHUNK_BEATS)) for _ in range(hot)]
        beats = []
        for i in range(600):
            op, off = slots[i % hot] if rng.random() < 0.8 else rng.choice(slots)
            beats.append(gf.Beat(op, off, rng.randrange(256), rng.randrange(16),
                                 rng.choice([1, 2, 3, 5, 8, 16, 31, 0 if rng.random() < 0.05
                                             else 4]),
                                 bytes(rng.randrange(256) for _ in range(64)),
                                 rng.choice([FULL_KEEP, rng.getrandbits(64)])))
        await h.run(beats)
        await h.drain()
    h.check()
    c = {k: v - c0[k] for k, v in h.model.counters.items()}
    assert c["done"] > 100 and c["dup"] > 50 and c["bad"] > 0, c


@cocotb.test()
async def timeout_frees_slots(dut):
    """Partial contributions on some ops, then silence: every op with open slots (by the
    model, which has seen the earlier tests' beats too) times out once, none other and none
    early (checked at each ``to_valid``, where the model applies the same expiry);
    contributions after it start afresh (checked by the model and by a result equal to the new
    contribution alone). A late
    duplicate after completion reopens a slot, and the timeout frees it too."""
    rng = random.Random(9)
    h = await harness(dut)
    dut.timeout.value = h.timeout = 40
    first = len(h.timeouts)
    x = bytes(rng.randrange(256) for _ in range(64))
    partial = [gf.Beat(op, off, 3, 1, 2, x) for op in (1, 2, 5) for off in (0, 7)]
    complete = [gf.Beat(6, 4, 1, 0, 2, x), gf.Beat(6, 4, 1, 1, 2, x)]   # done: 0
    late = [gf.Beat(3, 0, 7, 2, 1, x), gf.Beat(3, 0, 7, 2, 1, x)]       # need 1, then again
    late[1].need = 2                                     # a later beat on a freed slot: opens
    await h.run(partial + complete + late)
    start = h.cycle
    while h.cycle < start + 400:
        await h.step()
    h.check()
    ops = [op for _, op in h.timeouts[first:]]
    assert len(ops) == len(set(ops)) and {1, 2, 3, 5} <= set(ops), h.timeouts
    assert not any(h.model.open_slots(op) for op in range(N_OPS))
    # afresh: one contribution with need 1 on a slot that was partial returns just its product
    y = bytes(rng.randrange(256) for _ in range(64))
    await h.run([gf.Beat(1, 0, 2, 1, 1, y), gf.Beat(5, 7, 1, 1, 2, y),
                 gf.Beat(5, 7, 1, 2, 2, y)])
    await h.drain()
    h.check()
    o = [e for _, e in h.outs[-3:]]
    assert o[0].done and o[0].data == gf.mul_vec(2, np.frombuffer(y, np.uint8)).tobytes()
    assert not o[1].done and o[2].done and o[2].data == bytes(64)
