"""The GF(2^8) engine's golden model (netstor.model.gf) against an independent library:
``galois`` (its own field arithmetic and linear algebra over GF(2^8) with the same polynomial
0x11D). Byte-exact: the multiplier on all 65,536 pairs, the Cauchy generator, encoding, the
decoding coefficients and repaired chunks of random RS(k, r) stripes (k 3..12, r 2..4, every
lost-chunk position), and the accumulate semantics (random order, interleaved operations,
duplicates, timeouts) against repairs computed by the library."""

import random

import galois
import numpy as np
import pytest

from netstor.model import gf

GF = galois.GF(2**8, irreducible_poly=0x11D)


def test_field_is_the_isa_l_one():
    assert GF.irreducible_poly == galois.Poly.Int(0x11D)
    assert gf.POLY == 0x11D


def test_multiplier_exhaustive():
    a = np.arange(256, dtype=np.uint8)
    want = np.asarray(GF(a)[:, None] * GF(a)[None, :], dtype=np.uint8)
    assert np.array_equal(gf.mul_table(), want)
    for c in range(256):                       # the vector form the engine uses
        assert np.array_equal(gf.mul_vec(c, a), want[c]), c
    assert all(gf.mul(x, y) == want[x, y] for x, y in [(0, 0), (1, 255), (0x53, 0xCA)])
    assert np.array_equal(gf.INV[1:], np.asarray(GF(a[1:]) ** -1, dtype=np.uint8))


def lib_generator(k, r):
    """[I; C] with C[i][j] = 1/(x_i + y_j), x_i = k + i, y_j = j, in the library's arithmetic."""
    x = GF(np.arange(k, k + r))
    y = GF(np.arange(k))
    c = (x[:, None] + y[None, :]) ** -1
    return np.vstack([np.eye(k, dtype=np.uint8), np.asarray(c, dtype=np.uint8)])


@pytest.mark.parametrize("k", range(3, 13))
def test_generator_and_mds(k):
    rng = random.Random(k)
    for r in range(2, 5):
        g = gf.generator(k, r)
        assert np.array_equal(g, lib_generator(k, r))
        # MDS: random k-row subsets are invertible in the library; the model's inverse equals it
        for _ in range(20):
            rows = sorted(rng.sample(range(k + r), k))
            want = np.linalg.inv(GF(g[rows]))
            assert np.array_equal(gf.mat_inv(g[rows]), np.asarray(want, dtype=np.uint8))


def test_singular_refused():
    with pytest.raises(ValueError):
        gf.mat_inv(np.array([[1, 2], [2, 4]], dtype=np.uint8))   # row 2 = 2 * row 1


def test_cauchy_singleton_check():
    """Every square submatrix of C is nonsingular (the MDS argument), all sizes, k=5 r=3."""
    import itertools
    c = GF(gf.cauchy(5, 3))
    for size in (1, 2, 3):
        for rows in itertools.combinations(range(3), size):
            for cols in itertools.combinations(range(5), size):
                assert np.linalg.det(c[np.ix_(rows, cols)]) != 0


@pytest.mark.parametrize("k", range(3, 13))
def test_random_stripes_every_lost_chunk(k):
    rng = random.Random(100 + k)
    nrng = np.random.default_rng(k)
    for r in range(2, 5):
        n = k + r
        length = rng.choice([1, 63, 64, 200, 4096])
        data = nrng.integers(0, 256, size=(k, length), dtype=np.uint8)
        stripe = gf.encode(data, r)
        want = np.asarray(GF(lib_generator(k, r)) @ GF(data), dtype=np.uint8)
        assert np.array_equal(stripe, want)
        g = gf.generator(k, r)
        for lost in range(n):
            surv = rng.sample([i for i in range(n) if i != lost], k)
            a = gf.decode_coefficients(g, surv, lost)
            # the library's coefficients: G[lost] . inv(G[survivors])
            lib_a = GF(g[[lost]]) @ np.linalg.inv(GF(g[surv]))
            assert np.array_equal(a, np.asarray(lib_a, dtype=np.uint8)[0])
            assert np.array_equal(gf.repair(g, stripe, surv, lost), stripe[lost])
            lib_rep = np.asarray(lib_a @ GF(stripe[surv]), dtype=np.uint8)[0]
            assert np.array_equal(lib_rep, stripe[lost])


def beats_of(op, src, coeff, need, chunk, rng=None):
    out = []
    nb = (len(chunk) + 63) // 64
    for off in range(nb):
        part = bytes(chunk[64 * off:64 * off + 64])
        keep = (1 << len(part)) - 1
        data = part + bytes(rng.randrange(256) for _ in range(64 - len(part))) if rng \
            else part.ljust(64, b"\0")
        out.append(gf.Beat(op, off, coeff, src, need, data, keep, int(off == 0),
                           int(off == nb - 1)))
    return out


def test_engine_semantics_against_library():
    """Interleaved repairs of random RS(k, r) stripes, contributions in random order with
    duplicates: each slot completes once, with the library's repaired bytes, and the model's
    counters say what happened; a timeout frees an op's partial slots."""
    rng = random.Random(7)
    nrng = np.random.default_rng(7)
    eng = gf.Engine(n_ops=8, chunk_beats=64)
    jobs = {}
    beats = []
    for op in range(8):
        k, r = rng.randrange(3, 13), rng.randrange(2, 5)
        length = rng.choice([1, 64, 100, 1000, 4096])
        data = nrng.integers(0, 256, size=(k, length), dtype=np.uint8)
        stripe = np.asarray(GF(lib_generator(k, r)) @ GF(data), dtype=np.uint8)
        lost = rng.randrange(k + r)
        surv = rng.sample([i for i in range(k + r) if i != lost], k)
        lib_a = np.asarray(GF(lib_generator(k, r)[[lost]])
                           @ np.linalg.inv(GF(lib_generator(k, r)[surv])), dtype=np.uint8)[0]
        jobs[op] = stripe[lost]
        for s, c in zip(surv, lib_a):
            bs = beats_of(op, s, int(c), k, stripe[s], rng)
            beats += bs
            if rng.random() < 0.3:              # a duplicate of some of a helper's beats
                beats += rng.sample(bs, max(1, len(bs) // 2))
    rng.shuffle(beats)
    results = {op: {} for op in jobs}
    dups = 0
    for b in beats:
        o = eng.push(b)
        dups += o.dup
        if o.done:
            assert o.off not in results[o.op], "a slot completed twice"
            results[o.op][o.off] = o.data
    # late duplicates may reopen completed slots (never completing); every slot done once
    for op, want in jobs.items():
        nb = (len(want) + 63) // 64
        assert sorted(results[op]) == list(range(nb))
        got = b"".join(results[op][i] for i in range(nb))[:len(want)]
        assert got == bytes(want), op
    assert eng.counters["dup"] == dups > 0
    # timeout: a partial slot is freed, the next contribution starts afresh
    eng.expire(0)                               # (late duplicates may have reopened slots)
    assert eng.open_slots(0) == 0
    b = gf.Beat(0, 3, 1, 0, 2, bytes(range(64)))
    assert not eng.push(b).done and eng.open_slots(0) >= 1
    eng.expire(0)
    assert eng.open_slots(0) == 0
    o = eng.push(gf.Beat(0, 3, 2, 1, 1, bytes([1] * 64)))
    assert o.done and o.data == bytes([2] * 64)
    # need 0 refused, nothing written
    o = eng.push(gf.Beat(1, 0, 1, 0, 0, bytes(64)))
    assert o.bad and not o.done and eng.counters["bad"] == 1
