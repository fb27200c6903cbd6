"""Python reference of the NetRS ranking core (``hls/ranking.x``), bit for bit.

Pure Python integers, the same fixed-point arithmetic as the DSLX (see ``hls/README.md``):

* ``q``, ``T``, ``R`` (and ``q_hat``, the C3 score): unsigned fixed point with 4 fractional
  bits (UQ12.4 inputs, 16 bits; raw integer = value * 16);
* ``os`` (outstanding requests): 8-bit integer;
* ``n`` (the C3 ``os`` multiplier, the number of independent selectors): an 8-bit code
  (:func:`n_code` / :func:`n_value`): codes 0..127 are the value itself, ``1eeemmmm`` is
  ``(16 + m) << (e + 3)`` (128..31744, 16 values per octave: within 3.1 % of any n after
  rounding to the nearest code);
* C3 score = R + q_hat^3 * T (the NetRS authors' form), q_hat = 1 + q + n*os saturated at 0xffff (4095.9375),
  each product floored to 4 fractional bits; 53-bit result (UQ49.4), never overflows.

``rank(algo, avail, replicas, n=1, rr=0, rnd=0) -> (found, index, score)`` (``n``: the
code); :func:`pack_inputs`
and :func:`unpack_result` give the flat bit layout of the generated core's ports.
:func:`c3_float` is the real-valued C3 score (documentation of the precision; see
:func:`c3_error_bound`).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

NR = 8                      # replicas per group
FRAC = 4                    # fractional bits of q, T, R, q_hat and the C3 score
ONE = 1 << FRAC
QHAT_MAX = 0xFFFF
SCORE_W = 53
KEY_W = SCORE_W + 3
OUT_W = 1 + 3 + SCORE_W

C3, LOR, P2C, RR = 0, 1, 2, 3
ALGOS = {"c3": C3, "lor": LOR, "p2c": P2C, "rr": RR}

#: input ports of the generated core: name -> width (in the order of the DSLX parameters)
INPUTS = {"algo": 2, "avail": 8, "n": 8, "rr": 3, "rnd": 16, "q": 16 * NR, "os": 8 * NR,
          "t": 16 * NR, "r": 16 * NR}


@dataclass(frozen=True)
class Replica:
    """Per-replica state, raw fixed-point integers (q, t, r: UQ12.4; os: integer)."""
    q: int = 0
    os: int = 0
    t: int = 0
    r: int = 0


N_MAX = (16 + 15) << (7 + 3)    # 31744, the largest n a code holds


def n_value(code):
    """C3's multiplier n of an 8-bit code (see the module doc)."""
    code &= 0xFF
    if code < 128:
        return code
    return (16 + (code & 15)) << (((code >> 4) & 7) + 3)


#: every representable n, ascending (code order is value order)
N_VALUES = tuple(n_value(c) for c in range(256))


def n_code(n):
    """The code of the representable value nearest to ``n`` (ties: the smaller; n above
    :data:`N_MAX` -> N_MAX's code). Raises ValueError for a negative or non-integer n."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"C3's n must be a non-negative integer, got {n!r}")
    if n >= N_MAX:
        return 255
    hi = bisect.bisect_left(N_VALUES, n)
    if N_VALUES[hi] == n:
        return hi
    lo = hi - 1
    return lo if n - N_VALUES[lo] <= N_VALUES[hi] - n else hi


def qhat(q, os, n):
    """q_hat = 1 + q + n*os in UQ12.4 (``n``: the code), saturated at QHAT_MAX."""
    full = ONE + q + ((n_value(n) * os) << FRAC)
    return min(full, QHAT_MAX)


def c3_score(q, os, t, r, n):
    """C3 in the NetRS authors' form: R + q_hat^3 * T (T = 1/mu)."""
    qh = qhat(q, os, n)
    sq = (qh * qh) >> FRAC
    cube = (sq * qh) >> FRAC
    prod = (cube * t) >> FRAC
    return prod + r


def popcount8(x):
    return bin(x & 0xFF).count("1")


def p2c_ranks(p, rnd):
    """The two P2C ranks among the available replicas (k1, k2), k2 != k1 when p >= 2."""
    r1, r2 = rnd & 0xFF, (rnd >> 8) & 0xFF
    k1 = (r1 * p) >> 8
    k2r = (r2 * max(p - 1, 0)) >> 8
    if p <= 1:
        k2 = k1
    else:
        k2 = k2r + 1 if k2r >= k1 else k2r
    return k1 & 7, k2 & 7


def candidates(algo, avail, replicas, n=1, rr=0, rnd=0):
    """``[(valid, key, index)]`` per replica, as in the DSLX (key = score << 3 | tie)."""
    replicas = list(replicas) + [Replica()] * (NR - len(replicas))
    p = popcount8(avail)
    k1, k2 = p2c_ranks(p, rnd)
    out = []
    for i, rep in enumerate(replicas[:NR]):
        av = bool((avail >> i) & 1)
        below = popcount8(avail & ((1 << i) - 1)) & 7
        first = av and below == k1
        second = av and below == k2 and k2 != k1
        dist = (i - rr) & 7
        if algo == C3:
            valid, score, tie = av, c3_score(rep.q, rep.os, rep.t, rep.r, n), dist
        elif algo == LOR:
            valid, score, tie = av, rep.os, dist
        elif algo == P2C:
            valid, score, tie = first or second, rep.os, 1 if second else 0
        else:
            valid, score, tie = av, 0, dist
        out.append((valid, (score << 3) | tie, i))
    return out


def rank(algo, avail, replicas, n=1, rr=0, rnd=0):
    """One selection: ``(found, index, score)``; no replica available -> ``(0, 0, 0)``.

    ``algo``: 0 C3, 1 LOR, 2 P2C, 3 RR (or a name from ``ALGOS``); ``avail``: bit i =
    replica i may be chosen; ``replicas``: up to 8 :class:`Replica` (missing ones are zero);
    ``n``: C3's multiplier of os as its 8-bit code (:func:`n_code`; below 128 the value);
    ``rr``: 3-bit round-robin / tie-break start;
    ``rnd``: 16 random bits for P2C (r1 = low byte, r2 = high byte).
    """
    if isinstance(algo, str):
        algo = ALGOS[algo]
    valid = [c for c in candidates(algo, avail, replicas, n, rr, rnd) if c[0]]
    if not valid:
        return 0, 0, 0
    _, key, idx = min(valid, key=lambda c: (c[1], c[2]))
    return 1, idx, key >> 3


# ------------------------------------------------------------------------------ bit layout

def pack_inputs(algo, avail, replicas, n=1, rr=0, rnd=0):
    """Port values of the generated core: ``{port: int}`` (replica i at bits [W*i +: W])."""
    if isinstance(algo, str):
        algo = ALGOS[algo]
    replicas = list(replicas) + [Replica()] * (NR - len(replicas))
    ports = {"algo": algo & 3, "avail": avail & 0xFF, "n": n & 0xFF, "rr": rr & 7,
             "rnd": rnd & 0xFFFF, "q": 0, "os": 0, "t": 0, "r": 0}
    for i, rep in enumerate(replicas[:NR]):
        ports["q"] |= (rep.q & 0xFFFF) << (16 * i)
        ports["os"] |= (rep.os & 0xFF) << (8 * i)
        ports["t"] |= (rep.t & 0xFFFF) << (16 * i)
        ports["r"] |= (rep.r & 0xFFFF) << (16 * i)
    return ports


def pack_result(found, index, score):
    return (found << (SCORE_W + 3)) | (index << SCORE_W) | score


def unpack_result(word):
    """57-bit result -> ``(found, index, score)``."""
    return (word >> (SCORE_W + 3)) & 1, (word >> SCORE_W) & 7, word & ((1 << SCORE_W) - 1)


def rank_packed(ports):
    """:func:`rank` on port values (as from :func:`pack_inputs`) -> 57-bit result word."""
    reps = [Replica(q=(ports["q"] >> (16 * i)) & 0xFFFF, os=(ports["os"] >> (8 * i)) & 0xFF,
                    t=(ports["t"] >> (16 * i)) & 0xFFFF, r=(ports["r"] >> (16 * i)) & 0xFFFF)
            for i in range(NR)]
    return pack_result(*rank(ports["algo"], ports["avail"], reps, ports["n"], ports["rr"],
                             ports["rnd"]))


# ------------------------------------------------------------------------------ precision

def c3_float(q, os, t, r, n):
    """Real-valued C3 score of the same raw inputs (no truncation, no saturation), in units
    of the input time unit (the fixed-point score divided by 16 approximates it); ``n`` is
    the code, as for :func:`rank`."""
    qh = 1 + q / ONE + n_value(n) * os
    return r / ONE + qh ** 3 * (t / ONE)


def c3_error_bound(q, os, t, r, n):
    """Upper bound of c3_float - c3_score/16 while q_hat is not saturated: the two floors of
    q_hat^2 and q_hat^3 lose < 1/16 each, the first is multiplied by q_hat, both by T, and
    the last floor loses < 1/16: err < ((q_hat + 1) * T + 1) / 16. The fixed-point score never
    exceeds the real one."""
    qh = 1 + q / ONE + n_value(n) * os
    return ((qh + 1) * (t / ONE) + 1) / ONE


def c3_saturated(q, os, n):
    return ONE + q + ((n_value(n) * os) << FRAC) > QHAT_MAX


def rank_c3_float(avail, replicas, n=1):
    """Index of the replica with the least real C3 score (lowest index on exact ties), or
    None when nothing is available."""
    best = None
    for i, rep in enumerate(replicas[:NR]):
        if (avail >> i) & 1:
            s = c3_float(rep.q, rep.os, rep.t, rep.r, n)
            if best is None or s < best[0]:
                best = (s, i)
    return None if best is None else best[1]


# ------------------------------------------------------------------------------ test vectors

def random_replica(rng, *, big=False):
    """Random replica state with a spread of magnitudes (small, typical, at the maximum)."""
    def f(bits):
        k = rng.random()
        if big or k < 0.05:
            return (1 << bits) - 1 - (rng.getrandbits(2) if rng.random() < 0.5 else 0)
        if k < 0.15:
            return 0
        return rng.getrandbits(bits) >> rng.randrange(bits)
    return Replica(q=f(16), os=f(8), t=f(16), r=f(16))


def random_inputs(rng):
    """One random selection as port values, biased towards the edge cases: few replicas
    (group of 1..8, low bits), holes in the availability, no replica, all-equal states
    (ties), saturated q_hat, all-maximum inputs."""
    algo = rng.randrange(4)
    kind = rng.random()
    n_grp = rng.randint(1, NR)
    avail = (1 << n_grp) - 1
    if rng.random() < 0.4:
        avail &= rng.getrandbits(8)                  # some replicas down
    if rng.random() < 0.03:
        avail = 0
    if rng.random() < 0.1:
        avail = rng.getrandbits(8)
    if kind < 0.15:                                  # all replicas equal: the tie rule
        rep = random_replica(rng)
        reps = [rep] * NR
    elif kind < 0.25:                                # everything at the maximum
        reps = [random_replica(rng, big=True) for _ in range(NR)]
    elif kind < 0.35:                                # only os differs (LOR / P2C ties)
        base = random_replica(rng)
        reps = [Replica(base.q, rng.randrange(4), base.t, base.r) for _ in range(NR)]
    else:
        reps = [random_replica(rng) for _ in range(NR)]
    n = rng.choice([0, 1, 1, 2, 3, 4, 8, 16, 100, 0x9F, 0xC8, 255, rng.getrandbits(8)])
    return pack_inputs(algo, avail, reps, n=n, rr=rng.randrange(8), rnd=rng.getrandbits(16))
