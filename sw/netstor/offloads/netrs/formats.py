"""NetRS's number formats, in one place: the retaining value (RV), the time unit and the EWMA
weight of a replica group, the samples a response gives the per-server state, and the
saturation limits. The data plane (:mod:`.program`) computes these with its own expressions;
the client-side C3 (:mod:`.schemes`) and the configuration (:mod:`.config`) use the functions
here. Plain integers, no data-plane imports.

Clock and stamps. The device's clock is 250 MHz (``CYCLE_NS = 4``); ``meta.arrival`` is a
32-bit cycle count. A request's RV is stamped at selection with
``arrival >> STAMP_SHIFT`` (24 bits, 1.024 us per tick), so a response time is known modulo
2^32 cycles = 17.18 s (the device counter's own wrap) at 1.024 us resolution.

RV (32 bits, set by the RSNode, echoed by the server)::

    [23:0]  stamp   arrival[31:8] at the selection (1.024 us ticks)
    [27:24] unit    the group's time-unit code u (below)
    [30:28] ewma    the group's EWMA shift w (below)
    [31]    0       reserved

Time unit. A group's service and response times (the state's ``t`` and ``r``, the ranking
core's inputs) are UQ12.4 values (16 bits, raw = value * 16) in the group's unit
``1.024 us << u``, ``u`` = 0..12 (1.024 us .. 4.194 ms). They saturate at 0xFFFF
(4095.9375 units: 4.19 ms for u = 0, 268 ms for u = 6, 17.18 s for u = 12); nothing wraps
below the counter's 17.18 s. Codes 13..15 (only a server that corrupts RV sends them) act
as 12. All replicas of a group share its unit, so their scores (``R + q_hat^3 * T`` in that
unit) compare like for like; groups of different units are never compared with each other.
The state is per server, so the groups one device holds must agree on the unit and weight
of every server they share (the configuration checks it).

EWMA. ``new = old + floor((sample - old) / 2^w)`` = ``floor(((2^w - 1) * old + sample) / 2^w)``,
the sample's weight ``2^-w``, ``w`` = 0..7 (1 .. 1/128) per group; the same for q, t and r.
Truncation: a constant input is approached from above exactly and from below to within
``2^w - 1`` raw units (< 2^w / 16 time units).

Samples (per response, before the EWMA):

* ``q``: the reported queue length (integer) * 16, saturated at 0xFFFF (4096 requests);
* ``t``: the reported service time ``ss_t`` (32-bit nanoseconds) in UQ12.4 units:
  ``floor(ss_t * 16 / unit_ns)``, saturated at 0xFFFF;
* ``r``: the response time, ``(arrival[31:8] - stamp) mod 2^24`` ticks, in UQ12.4 units:
  ``floor(ticks * 16 / 2^u)``, saturated at 0xFFFF.

The data plane counts the responses it learns from by saturation pattern (bank
``rs.samples``: cell ``k``, bit 0 = q saturated, bit 1 = t, bit 2 = r), so the share of
saturated samples is measured, not guessed (:func:`saturation_shares`).
"""
from __future__ import annotations

from fractions import Fraction

__all__ = ["CYCLE_NS", "STAMP_SHIFT", "STAMP_BITS", "STAMP_NS", "UQ_MAX", "UNIT_MAX",
           "EWMA_MAX", "DEFAULT_UNIT", "DEFAULT_EWMA", "unit_ns", "unit_us", "saturation_us",
           "unit_code", "unit_for", "ewma_shift", "ewma_weight", "rv_pack", "rv_unpack",
           "q_sample", "t_sample", "r_sample", "ns_sample", "ewma", "saturation_shares",
           "SAT_Q", "SAT_T", "SAT_R"]

CYCLE_NS = 4                 # 250 MHz
STAMP_SHIFT = 8              # RV stamp = arrival >> 8
STAMP_BITS = 24              # arrival[31:8]
STAMP_NS = CYCLE_NS << STAMP_SHIFT          # 1024 ns per stamp tick
UQ_MAX = 0xFFFF              # UQ12.4 all ones = 4095.9375
UNIT_MAX = 12                # unit codes 0..12: 1.024 us .. 4.194 ms
EWMA_MAX = 7                 # EWMA shifts 0..7: weights 1 .. 1/128
#: default unit: 65.536 us (u = 6). The paper's service times (exponential, mean 4 ms) with
#: a 10x fluctuation (40 ms means) fit with 6.7x headroom: the state saturates at 268 ms (an
#: Exp(40 ms) service time exceeds it with probability e^-6.7 = 0.12 %); resolution
#: 4.1 us (0.1 % of 4 ms).
DEFAULT_UNIT = 6
#: default EWMA weight 1/8 (w = 3; C3's alpha = 0.9 rounded to a power of two)
DEFAULT_EWMA = 3
SAT_Q, SAT_T, SAT_R = 1, 2, 4  # bits of the rs.samples cell index


def unit_ns(u):
    """The length of time-unit code ``u`` in nanoseconds (``1024 << u``)."""
    return STAMP_NS << min(u, UNIT_MAX)


def unit_us(u):
    return unit_ns(u) / 1000.0


def saturation_us(u):
    """The largest time a UQ12.4 value in unit ``u`` holds (0xFFFF / 16 units), in us."""
    return UQ_MAX * unit_ns(u) / 16 / 1000.0


def unit_code(time_unit_us):
    """The code of a time unit given in microseconds: ``1.024 * 2^u`` us, u = 0..12 (to a
    relative 1e-9; raises ValueError naming the allowed values otherwise)."""
    try:
        if isinstance(time_unit_us, bool):
            raise TypeError
        x = float(Fraction(time_unit_us)) if isinstance(time_unit_us, str) \
            else float(time_unit_us)
    except (TypeError, ValueError, ZeroDivisionError):
        raise ValueError(f"{time_unit_us!r} is not a number of microseconds") from None
    for u in range(UNIT_MAX + 1):
        if abs(x - unit_us(u)) <= 1e-9 * unit_us(u):
            return u
    allowed = ", ".join(f"{unit_us(u):g}" for u in range(UNIT_MAX + 1))
    raise ValueError(f"{time_unit_us!r} us is not a time unit the data plane has (1.024 us "
                     f"= 256 clock cycles, times a power of two): {allowed}")


def unit_for(max_us):
    """The finest unit whose saturation limit is at least ``max_us`` (None if none is)."""
    for u in range(UNIT_MAX + 1):
        if saturation_us(u) >= max_us:
            return u
    return None


def ewma_shift(weight):
    """The shift ``w`` of an EWMA weight ``2^-w`` given as a number (0.125) or a string
    ("1/8", "0.125"); w = 0..7 (raises ValueError otherwise)."""
    try:
        if isinstance(weight, bool):
            raise TypeError
        x = Fraction(weight) if isinstance(weight, (int, str)) else Fraction(str(weight))
    except (TypeError, ValueError, ZeroDivisionError):
        raise ValueError(f"{weight!r} is not a number") from None
    for w in range(EWMA_MAX + 1):
        if x == Fraction(1, 1 << w):
            return w
    raise ValueError(f"{weight!r} is not an EWMA weight the data plane has (a power of two: "
                     "1, 1/2, 1/4, 1/8, 1/16, 1/32, 1/64, 1/128)")


def ewma_weight(w):
    return 1.0 / (1 << w)


def rv_pack(arrival, unit=DEFAULT_UNIT, ewma=DEFAULT_EWMA):
    """The RV a request leaves the RSNode with (``arrival``: the 32-bit cycle count)."""
    return ((arrival >> STAMP_SHIFT) & ((1 << STAMP_BITS) - 1)) | (unit & 15) << 24 \
        | (ewma & 7) << 28


def rv_unpack(rv):
    """``(stamp, unit, ewma)`` of an RV."""
    return rv & ((1 << STAMP_BITS) - 1), (rv >> 24) & 15, (rv >> 28) & 7


def q_sample(q):
    """``(sample, saturated)``: a queue length as UQ12.4."""
    return (UQ_MAX, True) if q * 16 > UQ_MAX else (q * 16, False)


def ns_sample(ns, u):
    """``(sample, saturated)``: a time in nanoseconds as UQ12.4 in unit ``u``."""
    v = int(ns) * 16 // unit_ns(u)
    return (UQ_MAX, True) if v > UQ_MAX else (v, False)


def t_sample(ss_t, u):
    """The service-time sample of a response (``ss_t`` in ns)."""
    return ns_sample(ss_t, u)


def r_sample(now_arrival, rv):
    """The response-time sample of a response that arrives at cycle ``now_arrival`` with
    ``rv`` (its unit from the RV)."""
    stamp, u, _ = rv_unpack(rv)
    ticks = ((now_arrival >> STAMP_SHIFT) - stamp) % (1 << STAMP_BITS)
    v = (ticks * 16) >> min(u, UNIT_MAX)
    return (UQ_MAX, True) if v > UQ_MAX else (v, False)


def ewma(old, sample, w):
    """The data plane's EWMA (weight ``2^-w``) on UQ12.4 values."""
    return (((1 << w) - 1) * old + sample) >> w


def saturation_shares(cells):
    """Shares of saturated samples from the 8 cells of bank ``rs.samples`` (or their sums
    over devices): ``{"samples": N, "q": x, "t": x, "r": x, "any": x}`` (x = share of the
    N responses whose sample saturated; None when N = 0)."""
    cells = list(cells) + [0] * (8 - len(cells))
    n = sum(cells)

    def share(mask):
        return None if n == 0 else sum(c for k, c in enumerate(cells) if k & mask) / n
    return {"samples": n, "q": share(SAT_Q), "t": share(SAT_T), "r": share(SAT_R),
            "any": share(SAT_Q | SAT_T | SAT_R)}
