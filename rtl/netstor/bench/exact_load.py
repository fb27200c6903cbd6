"""Exact tables: how full they get before the first insertion fails, under the per-way H3
hashes (:mod:`netstor.gateware.h3`) and under the CRC hash they replaced (CRC-32 of the way's
seed byte then the key, mod depth: the ways' hashes differ by a constant, so keys that collide
in one way collide in all).

For each table size (``ways`` ways, 32-bit keys) and seed: random distinct keys are inserted
with the driver's placement (:class:`netstor.driver.tables.ExactShadow`): ``first_free``
(0 moves: the first way whose slot is free) and ``cuckoo`` (at most
:data:`~netstor.driver.tables.EXACT_MOVES` moves, breadth first); the load factor is the
number of keys placed before the first failure over the table size. Also: ids 0 .. size-1
(in order and shuffled, cuckoo placement), and among random key pairs that collide in way 0,
the share that collides in every way.

``python -m netstor.bench.exact_load [--sizes 65536,64] [--seeds 10] [--ways 4] [--out F]``
prints JSON (mean, standard deviation, min, max over seeds) and writes it to ``--out``
(default ``build/bench/exact_load.json``)."""
from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import zlib
from pathlib import Path

from netstor.driver.tables import EXACT_MOVES, ExactShadow
from netstor.gateware.h3 import H3Slots

__all__ = ["load_factor", "bench", "summary_line"]

KEY_BITS = 32


def old_slots_fn(kw, depth, ways):
    """The CRC hash the exact tables had: way ``w``'s slot is CRC-32(byte w, key big-endian)
    mod depth (zlib's CRC-32, started from the seed byte's CRC)."""
    nbytes = (kw + 7) // 8
    starts = [(w * depth, zlib.crc32(bytes([w]))) for w in range(ways)]

    def slots(k):
        kb = k.to_bytes(nbytes, "big")
        return [base + zlib.crc32(kb, st) % depth for base, st in starts]
    return slots


def new_slots_fn(kw, depth, ways):
    """The H3 hashes: way ``w``'s slot is ``h3_slot(key, w, kw, log2 depth)``."""
    h3 = H3Slots(kw, (depth - 1).bit_length(), ways, low_identity=True)

    def slots(k):
        return [w * depth + s for w, s in enumerate(h3(k))]
    return slots


def load_factor(slots, size, moves, seed, kw=KEY_BITS):
    """Keys placed before the first failure, over ``size``; and the moves made."""
    rng = random.Random(seed)
    sh = ExactShadow()
    placed = moved = 0
    while True:
        k = rng.getrandbits(kw)
        if k in sh:
            continue
        w = sh.insert(slots, k, 1, moves)
        if w is None:
            return placed / size, moved
        placed += 1
        moved += len(w) - 1


def ids_fill(slots, size, moves):
    """Ids 0, 1, 2, ... inserted in order (and in a shuffled order): the load factor at the
    first failure (1.0: all ``size`` fit)."""
    out = []
    for order in ("in_order", "shuffled"):
        ids = list(range(size))
        if order == "shuffled":
            random.Random(7).shuffle(ids)
        sh, placed = ExactShadow(), 0
        for k in ids:
            if sh.insert(slots, k, 1, moves) is None:
                break
            placed += 1
        out.append((order, placed / size))
    return dict(out)


def all_way_collisions(slots, depth, seed, n, kw=KEY_BITS):
    """Among pairs of ``n`` random keys that share their way-0 slot: ``(pairs, pairs that
    share their slot in every way)``."""
    rng = random.Random(seed)
    by0 = {}
    for _ in range(n):
        k = rng.getrandbits(kw)
        by0.setdefault(slots(k)[0], set()).add(k)
    pairs = same = 0
    for ks in by0.values():
        ks = sorted(ks)
        for i in range(len(ks)):
            si = slots(ks[i])
            for j in range(i + 1, len(ks)):
                pairs += 1
                same += slots(ks[j]) == si
    return pairs, same


def _stats(xs):
    return {"mean": round(statistics.fmean(xs), 4),
            "stdev": round(statistics.stdev(xs), 4) if len(xs) > 1 else 0.0,
            "min": round(min(xs), 4), "max": round(max(xs), 4)}


def bench(sizes=(1 << 16, 64), seeds=10, ways=4, kw=KEY_BITS):
    out = {"key_bits": kw, "ways": ways, "seeds": seeds, "cuckoo_moves": EXACT_MOVES,
           "tables": {}}
    for size in sizes:
        depth = size // ways
        row = {"entries": size, "depth": depth}
        for hname, fn in (("crc_old", old_slots_fn), ("h3_new", new_slots_fn)):
            slots = fn(kw, depth, ways)
            for pname, moves in (("first_free", 0), ("cuckoo", EXACT_MOVES)):
                t0 = time.perf_counter()
                runs = [load_factor(slots, size, moves, s, kw) for s in range(seeds)]
                row[f"{hname}_{pname}"] = {
                    "load_factor": _stats([r[0] for r in runs]),
                    "moves_per_key": round(sum(r[1] for r in runs)
                                           / max(1, sum(r[0] * size for r in runs)), 3),
                    "seconds": round(time.perf_counter() - t0, 1)}
            row[f"{hname}_ids_0_to_size_cuckoo"] = ids_fill(slots, size, EXACT_MOVES)
            pairs, same = all_way_collisions(slots, depth, 1000, min(4 * depth, 20000), kw)
            row[f"{hname}_way0_pairs_colliding_in_every_way"] = [same, pairs]
        out["tables"][str(size)] = row
    return out


def _size_name(n):
    return f"{n >> 10}K" if n >= 1024 and n % 1024 == 0 else str(n)


def summary_line(res):
    """One line for people: per table size, the mean load factor at the first failed insert
    with H3 + cuckoo placement (+- stdev), H3 first free, and the old CRC hash."""
    parts = []
    for size, row in sorted(res["tables"].items(), key=lambda kv: -int(kv[0])):
        cu, ff, old = (row[k]["load_factor"] for k in ("h3_new_cuckoo", "h3_new_first_free",
                                                       "crc_old_first_free"))
        parts.append(f"{_size_name(int(size))} {cu['mean']:.4f} +- {cu['stdev']:.4f} "
                     f"(first free {ff['mean']:.3f}, old CRC {old['mean']:.3f})")
    return (f"exact tables, load at the first failed insert ({res['ways']} ways, "
            f"{res['key_bits']}-bit random keys, {res['seeds']} seeds, H3 + cuckoo <= "
            f"{res['cuckoo_moves']} moves): " + "; ".join(parts))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="65536,64")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--ways", type=int, default=4)
    ap.add_argument("--out", default="build/bench/exact_load.json")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    res = bench([int(x) for x in a.sizes.split(",")], a.seeds, a.ways)
    res["seconds"] = round(time.perf_counter() - t0, 1)
    text = json.dumps(res, indent=1)
    print(text)
    print(summary_line(res) + f" [{res['seconds']} s]")
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
