"""Golden model of the GF(2^8) payload engine (XORInc, issue 13): the field, the Cauchy
Reed-Solomon code, decoding coefficients and the engine's accumulate semantics (numpy).

Field
    GF(2^8) with the polynomial x^8 + x^4 + x^3 + x^2 + 1 (``0x11D``, as ISA-L, HDFS and
    Backblaze); 2 (x) is primitive. :func:`mul` / :func:`mul_vec` by log/exp tables built here
    from the polynomial.

Code
    RS(k, r): ``n = k + r`` chunks, chunks ``0..k-1`` the data, ``k..n-1`` the parity.
    :func:`generator` is the systematic ``n x k`` matrix ``[I_k; C]`` with the **Cauchy** block
    ``C[i][j] = 1 / (x_i + y_j)``, ``x_i = k + i`` (parity row index), ``y_j = j`` (data column),
    ``+`` being XOR: ISA-L's ``gf_gen_cauchy1_matrix``, so our parity equals ISA-L's. Why it is
    MDS for every ``k + r <= 256`` (all we offer: k 3..12, r 2..4): the ``x_i`` are distinct,
    the ``y_j`` distinct and no ``x_i`` equals a ``y_j`` (parity indexes are ``>= k``), so
    ``x_i + y_j != 0`` and every square submatrix of ``C`` is itself a Cauchy matrix, whose
    determinant ``prod_{i<i'}(x_i'-x_i)(y_j-y_j') / prod(x_i+y_j)`` is not zero. Any ``k`` rows
    of ``[I; C]`` (``a`` identity rows and ``k-a`` Cauchy rows) have, after expanding along the
    identity rows, the determinant of a ``(k-a) x (k-a)`` submatrix of ``C``: not zero. So any
    ``k`` of the ``n`` chunks determine the stripe (MDS).

Decoding
    :func:`decode_coefficients` ``(G, survivors, lost)``: the row ``a`` with
    ``chunk[lost] = XOR_s a_s * chunk[survivors[s]]`` = ``G[lost] . inv(G[survivors])``,
    inverted by Gauss-Jordan elimination here. These are the per-helper coefficients the
    controller gives the engine for NetRepair.

Engine semantics (:class:`Engine`; the gateware ``netstor.gateware.gf_engine.GFEngine``
implements them, its cocotb test compares every output beat)
    The engine sees 64-byte **beats** (chunk words; aligning a packet's payload to them is the
    frame path's job). Each beat carries ``op`` (operation id), ``off`` (beat offset in the
    chunk), ``coeff`` (GF(2^8) multiplier), ``src`` (the contributor's index in the stripe,
    0..15), ``need`` (contributions the result needs, 1..31) and ``keep`` (bytes in the chunk;
    bytes outside read as 0). The accumulation **slot** is ``(op, off)``.

    * A beat's product ``coeff * data`` (per byte) is XORed into its slot; the slot records
      ``src`` in a 16-bit ``seen`` set and counts contributions.
    * **Duplicates:** a beat whose ``src`` is already in its live slot's ``seen`` is not
      added and not counted (``dup``); so a contribution counts once however often it arrives.
    * **Order:** contributions arrive in any order (XOR is commutative); beats of different
      slots interleave freely; back-to-back beats on one slot each see the previous one.
    * **Completion:** the beat that brings the count to ``need`` leaves with ``done`` and the
      slot's result (XOR of all products); the slot is freed at once (count 0). A beat that does
      not complete its slot leaves with ``done = 0`` (its data then is the partial sum, which
      the frame path drops). So the result leaves framed like the packet that completed it.
    * **Late duplicates** (after completion) find a free slot and open a new accumulation that
      never completes; the op's timeout frees it.
    * **Timeout:** an op with open (partial) slots and no beat for ``timeout`` ticks is freed:
      every one of its slots becomes free at once (a generation number per op: a slot whose
      generation is not its op's current one reads as free), the event is reported
      (``timeouts`` and the op id, for the requester). Contributions after it start afresh.
      Limit: generations are ``gen_bits`` (8) wide, so a partial slot left by a timeout would
      read as live again after 256 further timeouts of its op with no write to that slot (the
      controller retires an op id long before: it is reused only for whole new operations).
    * ``need == 0`` beats are refused (``bad``): nothing written.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["POLY", "EXP", "LOG", "INV", "mul", "mul_vec", "mul_table", "inv", "generator",
           "cauchy", "encode", "decode_coefficients", "repair", "mat_inv", "Beat", "Out",
           "Engine", "SRC_MAX", "NEED_MAX"]

POLY = 0x11D


def _tables():
    exp = np.zeros(512, dtype=np.uint8)
    log = np.zeros(256, dtype=np.int32)
    x = 1
    for i in range(255):
        exp[i] = x
        log[x] = i
        x <<= 1
        if x & 0x100:
            x ^= POLY
    exp[255:510] = exp[:255]
    return exp, log


EXP, LOG = _tables()


def mul(a: int, b: int) -> int:
    """``a * b`` in GF(2^8)."""
    if a == 0 or b == 0:
        return 0
    return int(EXP[LOG[a] + LOG[b]])


def mul_vec(c: int, x) -> np.ndarray:
    """``c * x`` for every byte of ``x`` (a uint8 array)."""
    x = np.asarray(x, dtype=np.uint8)
    if c == 0:
        return np.zeros_like(x)
    r = EXP[(LOG[x] + LOG[c]) % 255]
    return np.where(x == 0, 0, r).astype(np.uint8)


def mul_table() -> np.ndarray:
    """The 256 x 256 product table ``T[a, b] = a * b``."""
    a = np.arange(256)
    t = EXP[(LOG[a][:, None] + LOG[a][None, :]) % 255]
    t[0, :] = 0
    t[:, 0] = 0
    return t.astype(np.uint8)


def inv(a: int) -> int:
    if a == 0:
        raise ZeroDivisionError("0 has no inverse in GF(2^8)")
    return int(EXP[255 - LOG[a]])


INV = np.array([0] + [inv(a) for a in range(1, 256)], dtype=np.uint8)


def cauchy(k: int, r: int) -> np.ndarray:
    """The ``r x k`` Cauchy block: ``C[i][j] = 1 / ((k + i) XOR j)`` (module docstring)."""
    if not (1 <= k and 1 <= r and k + r <= 256):
        raise ValueError(f"RS({k}, {r}): need k, r >= 1 and k + r <= 256")
    return np.array([[inv((k + i) ^ j) for j in range(k)] for i in range(r)], dtype=np.uint8)


def generator(k: int, r: int) -> np.ndarray:
    """The systematic ``(k + r) x k`` generator ``[I_k; C]``."""
    return np.vstack([np.eye(k, dtype=np.uint8), cauchy(k, r)])


def _matvec(m, chunks):
    """``m (rows x k) . chunks (k x L)`` over GF(2^8)."""
    out = np.zeros((m.shape[0], chunks.shape[1]), dtype=np.uint8)
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            out[i] ^= mul_vec(int(m[i, j]), chunks[j])
    return out


def encode(data, r: int) -> np.ndarray:
    """The stripe (``k + r`` chunks) of the data chunks ``data`` (``k x L`` uint8)."""
    data = np.asarray(data, dtype=np.uint8)
    return np.vstack([data, _matvec(cauchy(data.shape[0], r), data)])


def mat_inv(a) -> np.ndarray:
    """The inverse of the square matrix ``a`` over GF(2^8) (Gauss-Jordan); ``ValueError`` when
    it is singular."""
    a = np.array(a, dtype=np.uint8)
    n = a.shape[0]
    m = np.hstack([a, np.eye(n, dtype=np.uint8)])
    for col in range(n):
        piv = next((row for row in range(col, n) if m[row, col]), None)
        if piv is None:
            raise ValueError("singular matrix")
        m[[col, piv]] = m[[piv, col]]
        m[col] = mul_vec(inv(int(m[col, col])), m[col])
        for row in range(n):
            if row != col and m[row, col]:
                m[row] ^= mul_vec(int(m[row, col]), m[col])
    return m[:, n:]


def decode_coefficients(g, survivors, lost) -> np.ndarray:
    """Coefficients ``a`` (one per survivor, in the order given) with
    ``chunk[lost] = XOR_s a[s] * chunk[survivors[s]]``: ``G[lost] . inv(G[survivors])``."""
    g = np.asarray(g, dtype=np.uint8)
    survivors = list(survivors)
    if len(survivors) != g.shape[1] or len(set(survivors)) != len(survivors):
        raise ValueError(f"need {g.shape[1]} distinct survivors, got {survivors}")
    return _matvec(g[[lost]], mat_inv(g[survivors]))[0]


def repair(g, chunks, survivors, lost) -> np.ndarray:
    """Chunk ``lost`` from the survivors' chunks (``chunks[i]`` of every index in
    ``survivors``): what NetRepair's engine computes."""
    a = decode_coefficients(g, survivors, lost)
    out = np.zeros_like(np.asarray(chunks[survivors[0]], dtype=np.uint8))
    for s, c in zip(survivors, a):
        out ^= mul_vec(int(c), chunks[s])
    return out


# ---- the engine -----------------------------------------------------------------------------

SRC_MAX = 16          #: contributor indexes 0..15 (k + r <= 16 for the offered codes)
NEED_MAX = 31         #: contributions a slot can wait for
BEAT = 64             #: bytes per beat


@dataclass
class Beat:
    op: int
    off: int
    coeff: int
    src: int
    need: int
    data: bytes                       # 64 bytes
    keep: int = (1 << BEAT) - 1       # bit i: byte i is in the chunk
    first: int = 0                    # packet framing, passed through
    last: int = 0


@dataclass
class Out:
    op: int
    off: int
    done: int
    dup: int
    bad: int
    data: bytes                       # the result when ``done``, else the partial sum
    first: int = 0
    last: int = 0


@dataclass
class _Slot:
    gen: int = 0
    count: int = 0
    seen: int = 0
    acc: np.ndarray = field(default_factory=lambda: np.zeros(BEAT, dtype=np.uint8))


class Engine:
    """The engine's accumulate semantics (module docstring), one beat at a time."""

    def __init__(self, n_ops: int = 64, chunk_beats: int = 64, gen_bits: int = 8):
        self.n_ops, self.chunk_beats, self.gen_mod = n_ops, chunk_beats, 1 << gen_bits
        self.gen = [0] * n_ops
        self.slots: dict = {}
        self.counters = {"beats": 0, "done": 0, "dup": 0, "bad": 0, "timeouts": 0}

    @staticmethod
    def product(b: Beat) -> np.ndarray:
        x = np.frombuffer(bytes(b.data), dtype=np.uint8).copy()
        mask = np.array([(b.keep >> i) & 1 for i in range(BEAT)], dtype=bool)
        x[~mask] = 0
        return mul_vec(b.coeff, x)

    def push(self, b: Beat) -> Out:
        if not (0 <= b.op < self.n_ops and 0 <= b.off < self.chunk_beats
                and 0 <= b.src < SRC_MAX and 0 <= b.need <= NEED_MAX):
            raise ValueError(f"beat out of range: {b}")
        self.counters["beats"] += 1
        s = self.slots.setdefault((b.op, b.off), _Slot())
        live = s.gen == self.gen[b.op] and s.count != 0
        acc = s.acc if live else np.zeros(BEAT, dtype=np.uint8)
        seen, count = (s.seen, s.count) if live else (0, 0)
        if b.need == 0:
            self.counters["bad"] += 1
            return Out(b.op, b.off, 0, 0, 1, bytes(acc), b.first, b.last)
        if seen >> b.src & 1:
            self.counters["dup"] += 1
            return Out(b.op, b.off, 0, 1, 0, bytes(acc), b.first, b.last)
        acc = acc ^ self.product(b)
        count += 1
        done = int(count >= b.need)
        s.gen, s.acc = self.gen[b.op], acc
        s.seen, s.count = (0, 0) if done else (seen | 1 << b.src, count)
        self.counters["done"] += done
        return Out(b.op, b.off, done, 0, 0, bytes(acc), b.first, b.last)

    def open_slots(self, op: int) -> int:
        return sum(1 for (o, _), s in self.slots.items()
                   if o == op and s.gen == self.gen[op] and s.count)

    def expire(self, op: int) -> None:
        """The op's timeout: every slot of ``op`` freed (its generation advanced)."""
        self.gen[op] = (self.gen[op] + 1) % self.gen_mod
        self.counters["timeouts"] += 1
