"""``netstor-load``: a load generator for netstor storage servers.

``python -m netstor.agent.load --target HOST:PORT[,HOST:PORT...] [options]`` (or
``netstor-load``). Open loop (``--mode open``): Poisson arrivals at ``--rate`` requests/s;
closed loop (``--mode closed``): ``--concurrency`` requests always outstanding. The run is
bounded by ``--duration`` and/or ``--requests`` (whichever comes first; 5 s if neither), then
outstanding requests are drained (each at most ``--timeout``). Keys are ``0..N-1`` drawn from
an exact Zipf distribution (key 0 the most popular; ``--zipf 0`` = uniform).

The result (``run_load()`` returns it; ``--out FILE.json`` writes it) is a dict with ``mode,
target, sent, replies, timeouts, errors, statuses, duration_s, rps, offered_rps, latency_us,
histogram, by_op`` plus details (``config``, ``by_server``, ``engine``, ``skipped``,
``send_lag_us``, ``preload``). ``replies`` counts every reply whatever its status;
``errors`` the non-OK statuses other than NOT_FOUND (BAD_REQUEST, BUSY, ERROR); ``statuses``
every status. ``latency_us`` (exact percentiles, nearest rank) and ``histogram`` cover the
replies with status OK or NOT_FOUND, timed from the actual send to the reply's arrival.

Schemes (``--scheme``; the arrival process and the latency accounting are the same for all):

* ``direct`` (default): one request to one of the targets, chosen by ``--pick``.
* ``single``: no cloning: the request goes to one server of a random group, chosen at random
  (groups are pairs of targets, ``--pairs I:J,...``, default every ordered pair).
* ``clone``: client-side cloning: the request goes to both servers of a random group, the
  first reply counts, the second is ignored (counted in ``engine.duplicates``).
* ``netclone``: the request goes as a NetClone request (group drawn uniformly from
  ``--groups``, e.g. ``0-11``) to the service address ``--target VIP[:7431]``; the engine binds
  ``--nc-bind-port`` (default 7431: the servers answer to the request's source port). The
  switch clones and filters; a duplicate that gets through is counted and ignored. The result
  gets ``netclone``: replies whose request was cloned (``cloned_replies``: the NetClone
  header's clone field is not 0) and the per-server share.
* ``netrs`` and ``c3``: replica selection. Replica groups are sets of target indexes
  (``--replica-groups "0,1,2;1,2,3;..."``, default: ``n`` groups of 3 consecutive targets on
  a ring, ``g -> (g, g+1, g+2) mod n``, the replication factor 3 of consistent hashing); a
  request for key ``k`` belongs to group ``k mod (number of groups)``.

  ``netrs``: the request goes as a NetRS request (``M_REQ``, RGID = the group, every slot
  available) to the NetRS port (7432) of the group's *backup replica*: one replica of each
  group drawn per client at start (seeded), where a DRS request ends up. The engine binds
  ``--rs-bind-port`` (default 7432: NetRS is recognised by that port both ways). The switch
  selects; the result gets ``netrs``: replies selected by the switch (``selected``: response
  relabelled ``M_MON`` and RID not the DRS one), DRS replies, replies with no NetRS header,
  replies from a server other than the backup (``redirected``).

  ``c3``: client-side C3 (the NetRS paper's CliRS baseline): the client ranks the group's
  replicas with the C3 reference (:func:`netstor.offloads.netrs.ranking.rank`, the switch's ranking
  bit for bit) on its own state, and sends a plain storage request to the winner. Its state
  per server, in the switch's units and EWMA (weight 1/8): queue length from the replies'
  ``queue_len`` turned into the switch's measure (requests a new one would wait behind:
  ``queue_len - c3_workers``, at least 0; ``--c3-workers`` = the servers' workers), service
  time from ``service_ns`` (UQ12.4 us, saturated at 4.1 ms), response time as measured here
  (send to reply), and its own outstanding requests (C3's ``os``, multiplied by ``--c3-n``,
  the number of independent selectors = clients). The result gets ``c3``: selections per
  target. ``--c3-selectors K`` (default 1) runs K independent C3 selectors in this one
  process, as K clients on one host would: each request goes to one of them drawn uniformly
  (each a Poisson source at ``rate / K``), and each keeps its own state and learns only from
  the replies to its own requests (the test bed's way to many selectors on few CPUs).
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import random
import sys
import time

from netstor.proto import MAX_VALUE, Op, Status
from netstor.agent.client import Engine, parse_targets
from netstor.agent.zipf import Zipf
from netstor.offloads.netrs.ranking import C3, Replica, rank
from netstor.offloads.netclone.header import NETCLONE_UDP_PORT
from netstor.offloads.netrs.header import DRS_RID, M_MON, NETRS_UDP_PORT

__all__ = ["run_load", "latency_summary", "log_histogram", "main"]

PICKS = ("random", "round-robin", "key")
SCHEMES = ("direct", "single", "clone", "netclone", "netrs", "c3")
RS_MAX_REPLICAS = 8


def parse_replica_groups(spec, n_targets):
    """``"0,1,2;1,2,3"`` or ``[[0, 1, 2], ...]`` (target indexes) -> list of tuples; None =
    ``n_targets`` groups of 3 consecutive targets on a ring (fewer when there are fewer
    targets)."""
    if spec is None:
        k = min(3, n_targets)
        groups = [tuple((g + i) % n_targets for i in range(k)) for g in range(n_targets)]
    elif isinstance(spec, str):
        try:
            groups = [tuple(int(x) for x in part.split(",") if x.strip())
                      for part in spec.split(";") if part.strip()]
        except ValueError:
            raise ValueError(f"bad replica groups {spec!r}") from None
    else:
        groups = [tuple(int(x) for x in g) for g in spec]
    if not groups or any(not 1 <= len(g) <= RS_MAX_REPLICAS or len(set(g)) != len(g)
                         or not all(0 <= x < n_targets for x in g) for g in groups):
        raise ValueError(f"bad replica groups {spec!r} for {n_targets} target(s) (1..8 "
                         "distinct target indexes each)")
    if len(groups) > 0x10000:
        raise ValueError("more than 65536 replica groups")
    return groups


def _ewma(old, sample):
    """The switch's EWMA (weight 1/8) on UQ12.4 values."""
    return (7 * old + sample) >> 3


def _uq(us):
    return max(0, min(0xFFFF, int(us * 16)))


def parse_groups(spec):
    """``"0-11"``, ``"3,5,7"`` or a list of ints -> list of group ids."""
    if isinstance(spec, (list, tuple)):
        out = [int(g) for g in spec]
    else:
        out = []
        for part in str(spec).split(","):
            part = part.strip()
            if not part:
                continue
            lo, sep, hi = part.partition("-")
            out.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    if not out or any(not 0 <= g <= 0xFFFF for g in out):
        raise ValueError(f"bad NetClone group list {spec!r}")
    return out


def parse_pairs(spec, n_targets):
    """``"0:1,1:0"`` or ``[(0, 1), ...]`` (target indexes) -> list of pairs; None = every
    ordered pair of distinct targets."""
    if spec is None:
        pairs = [(i, j) for i in range(n_targets) for j in range(n_targets) if i != j]
    elif isinstance(spec, str):
        pairs = [tuple(int(x) for x in p.split(":")) for p in spec.split(",") if p.strip()]
    else:
        pairs = [tuple(p) for p in spec]
    if not pairs or any(len(p) != 2 or not all(0 <= x < n_targets for x in p) or p[0] == p[1]
                        for p in pairs):
        raise ValueError(f"bad server pairs {spec!r} for {n_targets} target(s)")
    return pairs
_GOOD = (Status.OK, Status.NOT_FOUND)
_BURST = 64


def latency_summary(samples_us):
    """Exact nearest-rank percentiles of a list of latencies (us)."""
    if not samples_us:
        return {k: None for k in ("mean", "p50", "p90", "p99", "p999", "max", "min")}
    s = sorted(samples_us)
    n = len(s)

    def pct(permille):      # nearest rank: the ceil(q * n)-th smallest, in exact integers
        return round(s[max(0, -(-permille * n // 1000) - 1)], 3)

    return {"mean": round(sum(s) / n, 3), "p50": pct(500), "p90": pct(900), "p99": pct(990),
            "p999": pct(999), "max": round(s[-1], 3), "min": round(s[0], 3)}


def _bound(i):
    return float(f"{10 ** (i / 10):.3g}")     # 10 buckets per decade, from 1 us


def log_histogram(samples_us):
    """Log-spaced histogram: ``[[upper_bound_us, count], ...]``; a bucket counts the samples
    in ``(previous bound, bound]`` (the first one everything up to its bound), from the bucket
    holding the smallest sample to the one holding the largest."""
    if not samples_us:
        return {"unit": "us", "buckets": []}
    top = max(samples_us)
    nb = max(1, math.ceil(10 * math.log10(max(top, 1.0))) + 1)
    while _bound(nb - 1) < top:
        nb += 1
    bounds = [_bound(i) for i in range(nb)]
    counts = [0] * nb
    for x in samples_us:
        counts[min(bisect.bisect_left(bounds, x), nb - 1)] += 1
    lo = next(i for i, c in enumerate(counts) if c)
    hi = max(i for i, c in enumerate(counts) if c)
    return {"unit": "us", "buckets": [[bounds[i], counts[i]] for i in range(lo, hi + 1)]}


class _Tally:
    def __init__(self):
        self.sent = 0
        self.replies = 0
        self.timeouts = 0
        self.statuses = {}
        self.lat_us = []

    def result(self):
        errors = {k: v for k, v in self.statuses.items() if k not in ("OK", "NOT_FOUND")}
        return {"sent": self.sent, "replies": self.replies, "timeouts": self.timeouts,
                "errors": errors, "statuses": dict(self.statuses),
                "latency_us": latency_summary(self.lat_us)}


def _preload(eng, keys, value, window=64, deadline_s=None):
    """PUT every key on every target; returns {"sent", "ok", "failed"}."""
    n_t = len(eng.targets)
    todo = ((k, t) for k in range(keys) for t in range(n_t))
    sent = ok = failed = 0
    exhausted = False
    limit = None if deadline_s is None else time.monotonic() + deadline_s
    while True:
        while not exhausted and eng.outstanding < window:
            nxt = next(todo, None)
            if nxt is None:
                exhausted = True
                break
            eng.send(Op.PUT, nxt[0], value, target=nxt[1])
            sent += 1
        if exhausted and eng.outstanding == 0:
            break
        if limit is not None and time.monotonic() > limit:
            raise RuntimeError(f"preload did not finish within {deadline_s} s")
        for c in eng.poll(0.1):
            if c.reply is not None and c.reply.status == Status.OK:
                ok += 1
            else:
                failed += 1
    return {"sent": sent, "ok": ok, "failed": failed}


def run_load(target, mode="closed", rate=None, concurrency=1, duration=None, requests=None,
             keys=1000, zipf=0.99, write_ratio=0.0, value_size=64, preload=False, timeout=1.0,
             seed=None, pick="random", progress=False, max_outstanding=65536, scheme="direct",
             pairs=None, groups=None, nc_bind_port=NETCLONE_UDP_PORT, samples=False,
             replica_groups=None, rs_bind_port=NETRS_UDP_PORT, c3_n=1, c3_workers=1,
             c3_selectors=1):
    """Run one load test and return the result dict (see the module doc)."""
    if mode not in ("open", "closed"):
        raise ValueError(f"mode must be 'open' or 'closed', got {mode!r}")
    if mode == "open" and not (rate is not None and rate > 0):
        raise ValueError("open loop needs a rate > 0 (requests per second)")
    if mode == "closed" and not (isinstance(concurrency, int) and concurrency >= 1):
        raise ValueError(f"concurrency must be an integer >= 1, got {concurrency!r}")
    if duration is None and requests is None:
        duration = 5.0
    if duration is not None and not duration > 0:
        raise ValueError(f"duration must be > 0, got {duration!r}")
    if requests is not None and not (isinstance(requests, int) and requests >= 1):
        raise ValueError(f"requests must be an integer >= 1, got {requests!r}")
    if not isinstance(keys, int) or keys < 1:
        raise ValueError(f"keys must be an integer >= 1, got {keys!r}")
    if not 0.0 <= write_ratio <= 1.0:
        raise ValueError(f"write ratio must be in [0, 1], got {write_ratio!r}")
    if not 0 <= value_size <= MAX_VALUE:
        raise ValueError(f"value size must be in [0, {MAX_VALUE}], got {value_size!r}")
    if pick not in PICKS:
        raise ValueError(f"pick must be one of {', '.join(PICKS)}, got {pick!r}")
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    if scheme == "netclone":
        if groups is None:
            raise ValueError("scheme netclone needs the group ids (groups)")
        groups = parse_groups(groups)
        if preload:
            raise ValueError("preload is not available with scheme netclone")

    if scheme in ("netrs", "c3"):
        if preload:
            raise ValueError(f"preload is not available with scheme {scheme}")
        if not (isinstance(c3_n, int) and 0 <= c3_n <= 255):
            raise ValueError(f"c3_n must be an integer in 0..255, got {c3_n!r}")
        if not (isinstance(c3_workers, int) and c3_workers >= 1):
            raise ValueError(f"c3_workers must be an integer >= 1, got {c3_workers!r}")
        if not (isinstance(c3_selectors, int) and c3_selectors >= 1):
            raise ValueError(f"c3_selectors must be an integer >= 1, got {c3_selectors!r}")

    rng = random.Random(seed)
    zrng = random.Random(None if seed is None else seed + 1)
    sampler = Zipf(keys, zipf, rng=zrng)
    value = bytes(random.Random(seed).getrandbits(8) for _ in range(value_size))
    if scheme == "netclone":
        eng = Engine(parse_targets(target, NETCLONE_UDP_PORT), timeout=timeout, seed=seed,
                     bind=("0.0.0.0", nc_bind_port))
    elif scheme == "netrs":
        eng = Engine(parse_targets(target, NETRS_UDP_PORT), timeout=timeout, seed=seed,
                     bind=("0.0.0.0", rs_bind_port))
    else:
        eng = Engine(target, timeout=timeout, seed=seed)
    targets = eng.targets
    n_t = len(targets)
    rgroups = backup = None
    rs_count = {"selected": 0, "drs": 0, "plain": 0, "other": 0, "redirected": 0}
    c3_sel = [0] * n_t
    # per selector, per target: q, os, t, r
    c3_state = [[[0, 0, 0, 0] for _ in range(n_t)] for _ in range(c3_selectors)]
    if scheme in ("netrs", "c3"):
        try:
            rgroups = parse_replica_groups(replica_groups, n_t)
        except ValueError:
            eng.close()
            raise
        brng = random.Random(None if seed is None else seed + 2)
        backup = [brng.choice(g) for g in rgroups]
    if scheme in ("single", "clone"):
        try:
            pairs = parse_pairs(pairs, n_t)
        except ValueError:
            eng.close()
            raise
    nc_cloned = 0
    try:
        preload_res = None
        if preload:
            preload_res = _preload(eng, keys, value,
                                   deadline_s=max(30.0, 10 * timeout + keys * n_t * 1e-3))
        eng.sent = eng.replies = eng.timeouts = 0

        total = _Tally()
        per_op = {}
        by_server = {}
        lag_sum = lag_max = 0
        skipped = 0
        rr = 0
        expo = rng.expovariate
        bar = None
        if progress:
            try:
                from tqdm import tqdm
                fmt = None if requests is not None else \
                    "{l_bar}{bar}| {n:.1f}/{total:.1f} s [{elapsed}<{remaining}{postfix}]"
                bar = tqdm(total=requests if requests is not None else round(duration, 1),
                           unit="req" if requests is not None else "s", delay=2.0,
                           file=sys.stderr, leave=False, dynamic_ncols=True, bar_format=fmt)
            except Exception:
                bar = None

        def send_one(now_ns=None):
            nonlocal rr
            key = sampler.sample()
            op = Op.PUT if write_ratio and rng.random() < write_ratio else Op.GET
            val = value if op == Op.PUT else b""
            if scheme == "netclone":
                eng.send(op, key, val, target=0, now_ns=now_ns, nc_group=rng.choice(groups))
            elif scheme == "netrs":
                g = key % len(rgroups)
                eng.send(op, key, val, target=backup[g], now_ns=now_ns, rs_group=g,
                         rs_avail=(1 << len(rgroups[g])) - 1, tag=backup[g])
            elif scheme == "c3":
                g = rgroups[key % len(rgroups)]
                sel = rng.randrange(c3_selectors) if c3_selectors > 1 else 0
                state = c3_state[sel]
                reps = [Replica(q=state[t][0], os=min(255, state[t][1]),
                                t=state[t][2], r=state[t][3]) for t in g]
                _found, idx, _score = rank(C3, (1 << len(g)) - 1, reps, n=c3_n)
                t = g[idx]
                c3_sel[t] += 1
                state[t][1] += 1
                eng.send(op, key, val, target=t, now_ns=now_ns, tag=(sel, t))
            elif scheme == "single":
                eng.send(op, key, val, target=rng.choice(pairs)[rng.getrandbits(1)],
                         now_ns=now_ns)
            elif scheme == "clone":
                a, b = rng.choice(pairs)
                eng.send(op, key, val, target=a, copies=(b,), now_ns=now_ns)
            else:
                if pick == "random":
                    t = rng.randrange(n_t) if n_t > 1 else 0
                elif pick == "round-robin":
                    t, rr = rr, (rr + 1) % n_t
                else:
                    t = key % n_t
                eng.send(op, key, val, target=t, now_ns=now_ns)
            total.sent += 1
            tal = per_op.get(op)
            if tal is None:
                tal = per_op[op] = _Tally()
            tal.sent += 1

        def record(done):
            nonlocal nc_cloned
            for c in done:
                tal = per_op[c.op]
                r = c.reply
                if scheme == "c3":
                    st = c3_state[c.tag[0]][c.tag[1]]
                    st[1] = max(0, st[1] - 1)
                    if r is not None:
                        st[0] = _ewma(st[0], _uq(max(0, r.queue_len - c3_workers)))
                        st[2] = _ewma(st[2], _uq(r.service_ns / 1000.0))
                        st[3] = _ewma(st[3], _uq((c.done_ns - c.sent_ns) / 1000.0))
                elif scheme == "netrs" and r is not None:
                    h = c.rs
                    if h is None:
                        rs_count["plain"] += 1
                    elif h.rid == DRS_RID:
                        rs_count["drs"] += 1
                    elif h.mf == M_MON:
                        rs_count["selected"] += 1
                    else:
                        rs_count["other"] += 1
                    if c.src is not None and tuple(c.src[:2]) != tuple(targets[c.tag]):
                        rs_count["redirected"] += 1
                if r is None:
                    total.timeouts += 1
                    tal.timeouts += 1
                    continue
                total.replies += 1
                tal.replies += 1
                if c.nc is not None and c.nc.clone:
                    nc_cloned += 1
                name = Status.NAMES.get(r.status, f"status{r.status}")
                total.statuses[name] = total.statuses.get(name, 0) + 1
                tal.statuses[name] = tal.statuses.get(name, 0) + 1
                if r.status in _GOOD:
                    us = (c.done_ns - c.sent_ns) / 1000.0
                    total.lat_us.append(us)
                    tal.lat_us.append(us)
                bs = by_server.get(r.server_id)
                if bs is None:
                    bs = by_server[r.server_id] = [0, 0, 0]
                bs[0] += 1
                bs[1] += r.service_ns
                bs[2] += r.queue_len

        start = time.monotonic_ns()
        end = None if duration is None else start + int(duration * 1e9)
        attempts = 0

        def may_send(at_ns):
            return (requests is None or attempts < requests) and (end is None or at_ns < end)

        sending = True
        by_time = False         # sending stopped by --duration (not --requests)
        last_bar = start
        bar_done = 0
        if mode == "closed":
            while sending and eng.outstanding < concurrency:
                if not may_send(time.monotonic_ns()):
                    sending = False
                    break
                send_one()
                attempts += 1
        else:
            next_ns = start + int(expo(rate) * 1e9)
        while True:
            now = time.monotonic_ns()
            if mode == "open" and sending:
                burst = 0
                while next_ns <= now and burst < _BURST:
                    if not may_send(next_ns):
                        sending = False
                        break
                    if eng.outstanding >= max_outstanding:
                        skipped += 1
                    else:
                        lag = now - next_ns
                        lag_sum += lag
                        lag_max = max(lag_max, lag)
                        send_one(now)
                    attempts += 1
                    burst += 1
                    next_ns += max(1, int(expo(rate) * 1e9))
                if sending and not may_send(next_ns):
                    sending = False
                    by_time = end is not None and next_ns >= end
            if sending and end is not None and now >= end:
                sending = False
                by_time = True
            if not sending and eng.outstanding == 0:
                break
            if mode == "open" and sending:
                wait = max(0, next_ns - time.monotonic_ns()) / 1e9
            else:
                wait = 0.05
            done = eng.poll(min(wait, 0.05))
            record(done)
            if mode == "closed" and sending:
                for _ in range(len(done)):
                    if eng.outstanding >= concurrency:
                        break
                    t = time.monotonic_ns()
                    if not may_send(t):
                        sending = False
                        by_time = end is not None and t >= end
                        break
                    send_one()
                    attempts += 1
            if bar is not None and now - last_bar > 200_000_000:
                last_bar = now
                cur = total.replies + total.timeouts if requests is not None else \
                    min(round((now - start) / 1e9, 1), bar.total)
                bar.update(cur - bar_done)
                bar_done = cur
                bar.set_postfix_str(f"{total.replies / max(1e-9, (now - start) / 1e9):.0f} "
                                    f"replies/s, {total.timeouts} timeouts", refresh=False)
        stop = time.monotonic_ns()
        if by_time:             # the measurement window is at least the requested duration
            stop = max(stop, end)
        if bar is not None:
            bar.close()
    finally:
        eng.close()

    dur = max(1e-9, (stop - start) / 1e9)
    res = total.result()
    n_sent = total.sent
    out = {
        "mode": mode,
        "target": ",".join(f"{a}:{p}" for a, p in targets),
        "sent": n_sent,
        "replies": res["replies"],
        "timeouts": res["timeouts"],
        "errors": res["errors"],
        "statuses": res["statuses"],
        "duration_s": round(dur, 6),
        "rps": round(res["replies"] / dur, 3),
        "offered_rps": float(rate) if mode == "open" else round(n_sent / dur, 3),
        "latency_us": res["latency_us"],
        "histogram": log_histogram(total.lat_us),
        "by_op": {Op.NAMES[op]: t.result() for op, t in sorted(per_op.items())},
        "by_server": {str(sid): {"replies": v[0],
                                 "service_us_mean": round(v[1] / v[0] / 1000.0, 3),
                                 "queue_len_mean": round(v[2] / v[0], 3)}
                      for sid, v in sorted(by_server.items())},
        "skipped": skipped,
        "send_lag_us": {"mean": round(lag_sum / max(1, n_sent) / 1000.0, 3),
                        "max": round(lag_max / 1000.0, 3)} if mode == "open" else None,
        "engine": {"unmatched": eng.unmatched, "duplicates": eng.duplicates,
                   "malformed": eng.malformed, "send_errors": eng.send_errors},
        "scheme": scheme,
        "netclone": {"cloned_replies": nc_cloned,
                     "cloned_fraction": round(nc_cloned / max(1, res["replies"]), 4)}
        if scheme == "netclone" else None,
        "netrs": dict(rs_count, selected_fraction=round(rs_count["selected"]
                                                        / max(1, res["replies"]), 4),
                      backup=[f"{targets[b][0]}:{targets[b][1]}" for b in backup])
        if scheme == "netrs" else None,
        "c3": {"selections": {f"{a}:{p}": n for (a, p), n in zip(targets, c3_sel)},
               "n": c3_n, "workers": c3_workers, "selectors": c3_selectors}
        if scheme == "c3" else None,
        "preload": preload_res,
        "samples_us": [round(x, 1) for x in total.lat_us] if samples else None,
        "config": {"keys": keys, "zipf": zipf, "write_ratio": write_ratio,
                   "value_size": value_size, "rate": rate,
                   "concurrency": concurrency if mode == "closed" else None,
                   "duration": duration, "requests": requests, "timeout": timeout,
                   "seed": seed, "pick": pick, "scheme": scheme,
                   "pairs": pairs if scheme in ("single", "clone") else None,
                   "groups": groups if scheme == "netclone" else None,
                   "replica_groups": [list(g) for g in rgroups] if rgroups else None},
    }
    return out


def _scheme_note(r):
    sc = r.get("scheme", "direct")
    if sc == "direct":
        return ""
    note = f", scheme {sc}"
    if sc == "netclone" and r.get("netclone"):
        note += f" ({r['netclone']['cloned_fraction']:.0%} cloned"
        note += f", {r['engine']['duplicates']} duplicates)"
    elif sc == "clone":
        note += f" ({r['engine']['duplicates']} second replies ignored)"
    elif sc == "netrs" and r.get("netrs"):
        note += f" ({r['netrs']['selected_fraction']:.0%} selected by the switch)"
    return note


def format_table(r):
    lines = [f"netstor-load {r['mode']} loop{_scheme_note(r)} -> {r['target']}: sent {r['sent']}, replies "
             f"{r['replies']}, timeouts {r['timeouts']}, in {r['duration_s']:.3f} s = "
             f"{r['rps']:.1f} replies/s (offered {r['offered_rps']:.1f}/s)"]
    if r["errors"]:
        lines.append("errors: " + ", ".join(f"{k} {v}" for k, v in sorted(r["errors"].items())))
    cols = ("mean", "p50", "p90", "p99", "p999", "max")
    lines.append(f"{'latency us':<12}{'count':>9}" + "".join(f"{c:>10}" for c in cols))

    def row(name, sent, lat):
        cells = "".join(f"{'-' if lat[c] is None else format(lat[c], '.1f'):>10}"
                        for c in cols)
        return f"{name:<12}{sent:>9}{cells}"

    lines.append(row("all", r["replies"], r["latency_us"]))
    for op, t in r["by_op"].items():
        lines.append(row(op, t["replies"], t["latency_us"]))
    return "\n".join(lines)


def build_parser():
    p = argparse.ArgumentParser(prog="netstor-load", description="netstor load generator")
    p.add_argument("--target", required=True, metavar="HOST:PORT[,HOST:PORT...]",
                   help="storage server(s); requests spread uniformly unless --pick")
    p.add_argument("--pick", choices=PICKS, default="random",
                   help="how a request's target is chosen (default random = uniform)")
    p.add_argument("--scheme", choices=SCHEMES, default="direct",
                   help="direct (default), single (one server of a random pair), clone "
                        "(client-side cloning to both of a pair), netclone (NetClone "
                        "requests to the service address --target), netrs (NetRS requests "
                        "to a backup replica; the switch selects), c3 (client-side C3 "
                        "replica selection)")
    p.add_argument("--pairs", default=None, metavar="I:J[,I:J...]",
                   help="single/clone: server pairs as target indexes (default: every "
                        "ordered pair)")
    p.add_argument("--groups", default=None, metavar="G[-H][,...]",
                   help="netclone: the group ids to draw from, e.g. 0-11")
    p.add_argument("--nc-bind-port", type=int, default=NETCLONE_UDP_PORT, metavar="PORT",
                   help=f"netclone: local UDP port (default {NETCLONE_UDP_PORT}; servers "
                        "answer to it)")
    p.add_argument("--replica-groups", default=None, metavar="I,J,K[;...]",
                   help="netrs/c3: replica groups as target indexes (default: n groups of 3 "
                        "consecutive targets on a ring); key k belongs to group k mod #groups")
    p.add_argument("--rs-bind-port", type=int, default=NETRS_UDP_PORT, metavar="PORT",
                   help=f"netrs: local UDP port (default {NETRS_UDP_PORT}: NetRS is "
                        "recognised by it both ways)")
    p.add_argument("--c3-n", type=int, default=1, metavar="N",
                   help="c3: C3's multiplier of the outstanding requests (the number of "
                        "independent selectors, i.e. clients; default 1)")
    p.add_argument("--c3-workers", type=int, default=1, metavar="W",
                   help="c3: the servers' workers (queue_len - W = the queue a new request "
                        "waits in, the switch's measure; default 1)")
    p.add_argument("--c3-selectors", type=int, default=1, metavar="K",
                   help="c3: independent C3 selectors in this process (clients sharing the "
                        "host; each request drawn to one uniformly; default 1)")
    p.add_argument("--mode", choices=("open", "closed"), default="closed")
    p.add_argument("--rate", type=float, default=None,
                   help="open loop: Poisson arrival rate, requests/s")
    p.add_argument("--concurrency", type=int, default=1, metavar="C",
                   help="closed loop: requests outstanding (default 1)")
    p.add_argument("--duration", type=float, default=None, metavar="S",
                   help="stop sending after S seconds (default 5 if no --requests)")
    p.add_argument("--requests", type=int, default=None, metavar="N",
                   help="stop after N requests")
    p.add_argument("--keys", type=int, default=1000, metavar="N", help="key space 0..N-1")
    p.add_argument("--zipf", type=float, default=0.99, metavar="THETA",
                   help="Zipf skew (default 0.99; 0 = uniform)")
    p.add_argument("--write-ratio", type=float, default=0.0, metavar="W",
                   help="fraction of PUTs (default 0)")
    p.add_argument("--value-size", type=int, default=64, metavar="B",
                   help="PUT value size in bytes (default 64)")
    p.add_argument("--preload", action="store_true", help="PUT every key on every target first")
    p.add_argument("--timeout", type=float, default=1.0, metavar="S",
                   help="per-request timeout (default 1.0 s)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--max-outstanding", type=int, default=65536,
                   help="open loop: arrivals beyond this many outstanding are skipped")
    p.add_argument("--out", default=None, metavar="FILE.json",
                   help="write the JSON result here ('-' = stdout)")
    p.add_argument("--samples", action="store_true",
                   help="also write every latency sample (samples_us) into the JSON result")
    p.add_argument("--quiet", action="store_true", help="no progress bar, no table")
    return p


def main(argv=None):
    p = build_parser()
    a = p.parse_args(argv)
    if a.mode == "open" and a.rate is None:
        p.error("--mode open needs --rate")
    try:
        r = run_load(a.target, mode=a.mode, rate=a.rate, concurrency=a.concurrency,
                     duration=a.duration, requests=a.requests, keys=a.keys, zipf=a.zipf,
                     write_ratio=a.write_ratio, value_size=a.value_size, preload=a.preload,
                     timeout=a.timeout, seed=a.seed, pick=a.pick,
                     progress=not a.quiet and sys.stderr.isatty(),
                     max_outstanding=a.max_outstanding, scheme=a.scheme, pairs=a.pairs,
                     groups=a.groups, nc_bind_port=a.nc_bind_port, samples=a.samples,
                     replica_groups=a.replica_groups, rs_bind_port=a.rs_bind_port,
                     c3_n=a.c3_n, c3_workers=a.c3_workers, c3_selectors=a.c3_selectors)
    except ValueError as e:
        p.error(str(e))
    except RuntimeError as e:
        print(f"netstor-load: {e}", file=sys.stderr)
        return 1
    text = json.dumps(r, indent=2)
    if a.out and a.out != "-":
        with open(a.out, "w") as f:
            f.write(text + "\n")
    try:
        if a.out == "-":
            print(text, flush=True)
        elif not a.quiet:
            print(format_table(r), flush=True)
    except BrokenPipeError:         # e.g. piped into head
        sys.stdout = None
    return 0


if __name__ == "__main__":
    sys.exit(main())
