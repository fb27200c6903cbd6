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

Schemes (``--scheme``; the arrival process and the latency accounting are the same for all;
:mod:`netstor.agent.schemes`): ``direct`` (default) sends one request to one of the targets,
chosen by ``--pick``; every registered offload adds its own (``netstor-load --help`` lists
them, their flags and, in their modules, what their result section holds).
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import random
import sys
import time

from netstor.proto import MAX_VALUE, Op, Status
from netstor.agent.client import Engine, parse_targets
from netstor.agent.schemes import PICKS, all_schemes
from netstor.agent.zipf import Zipf

__all__ = ["run_load", "latency_summary", "log_histogram", "main"]



_GOOD = (Status.OK, Status.NOT_FOUND)
_BURST = 64
# the exact Zipf sampler keeps a CDF of one float per key: bound it (256 MiB)
ZIPF_MAX_KEYS = 1 << 25


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
             seed=None, progress=False, max_outstanding=65536, scheme="direct", samples=False,
             **scheme_options):
    """Run one load test and return the result dict (see the module doc). ``scheme``: one of
    :func:`netstor.agent.schemes.all_schemes` (``direct`` or an offload's); the remaining
    keyword arguments are scheme options (``pick`` for ``direct``; each scheme declares its
    own; options of other schemes are ignored, unknown ones are an error)."""
    if mode not in ("open", "closed"):
        raise ValueError(f"mode must be 'open' or 'closed', got {mode!r}")
    if mode == "open" and not (rate is not None and rate > 0):
        raise ValueError(f"open loop needs a rate > 0 (requests per second), got {rate!r}")
    if mode == "closed" and not (isinstance(concurrency, int) and concurrency >= 1):
        raise ValueError(f"concurrency must be an integer >= 1, got {concurrency!r}")
    if duration is None and requests is None:
        duration = 5.0
    if duration is not None and not 0 < duration < 1e9:
        raise ValueError(f"duration must be > 0 s (and below 10^9 s), got {duration!r}")
    if mode == "open" and not rate < float("inf"):
        raise ValueError(f"rate must be finite, got {rate!r}")
    if not (isinstance(max_outstanding, int) and max_outstanding >= 1):
        raise ValueError(f"max outstanding must be an integer >= 1, got {max_outstanding!r}")
    if requests is not None and not (isinstance(requests, int) and requests >= 1):
        raise ValueError(f"requests must be an integer >= 1, got {requests!r}")
    if not isinstance(keys, int) or not 1 <= keys <= 1 << 64:
        raise ValueError(f"keys must be an integer in 1..2^64, got {keys!r}")
    if not 0 <= zipf < float("inf"):
        raise ValueError(f"zipf theta must be a number >= 0, got {zipf!r}")
    if zipf > 0 and keys > ZIPF_MAX_KEYS:
        raise ValueError(f"keys {keys} with --zipf {zipf}: the exact Zipf sampler holds one "
                         f"float per key, at most {ZIPF_MAX_KEYS} keys (use --zipf 0 for "
                         "uniform keys over a larger space)")
    if not 0.0 <= write_ratio <= 1.0:
        raise ValueError(f"write ratio must be in [0, 1], got {write_ratio!r}")
    schemes = all_schemes()
    if scheme not in schemes:
        raise ValueError(f"scheme must be one of {', '.join(schemes)}, got {scheme!r}")
    top = schemes[scheme].max_value
    if not 0 <= value_size <= top:
        raise ValueError(f"value size must be in [0, {top}]"
                         + ("" if top == MAX_VALUE else f" with scheme {scheme}")
                         + f", got {value_size!r}")
    known = {o for cls in schemes.values() for o in cls.options}
    unknown = set(scheme_options) - known
    if unknown:
        raise TypeError(f"run_load: unknown argument(s) {sorted(unknown)}")
    cls = schemes[scheme]
    if preload and not cls.preload:
        raise ValueError(f"preload is not available with scheme {scheme}")

    rng = random.Random(seed)
    zrng = random.Random(None if seed is None else seed + 1)
    sampler = Zipf(keys, zipf, rng=zrng)
    value = bytes(random.Random(seed).getrandbits(8) for _ in range(value_size))
    targets = parse_targets(target, cls.port)
    sch = cls(len(targets), rng, seed,
              **{k: v for k, v in scheme_options.items() if k in cls.options})
    eng = Engine(targets, timeout=timeout, seed=seed, bind=("0.0.0.0", sch.bind_port),
                 codec=cls.codec)
    targets = eng.targets
    try:
        preload_res = None
        if preload:
            preload_res = _preload(eng, keys, value,
                                   deadline_s=max(30.0, 10 * timeout + keys * len(targets) * 1e-3))
        eng.sent = eng.replies = eng.timeouts = 0

        total = _Tally()
        per_op = {}
        by_server = {}
        lag_sum = lag_max = 0
        skipped = 0
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
            key = sampler.sample()
            op = Op.PUT if write_ratio and rng.random() < write_ratio else Op.GET
            sch.send(eng, op, key, value if op == Op.PUT else b"", now_ns)
            total.sent += 1
            tal = per_op.get(op)
            if tal is None:
                tal = per_op[op] = _Tally()
            tal.sent += 1

        def record(done):
            for c in done:
                tal = per_op[c.op]
                r = c.reply
                sch.record(c)
                if r is None:
                    total.timeouts += 1
                    tal.timeouts += 1
                    continue
                total.replies += 1
                tal.replies += 1
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
        "preload": preload_res,
        "samples_us": [round(x, 1) for x in total.lat_us] if samples else None,
        "config": {"keys": keys, "zipf": zipf, "write_ratio": write_ratio,
                   "value_size": value_size, "rate": rate,
                   "concurrency": concurrency if mode == "closed" else None,
                   "duration": duration, "requests": requests, "timeout": timeout,
                   "seed": seed, "scheme": scheme, **sch.config()},
    }
    for name in schemes:         # each scheme's own section (None for the others)
        if name != "direct":
            out.setdefault(name, None)
    own = sch.result(res["replies"], targets)
    if own is not None:
        out[scheme] = own
    return out


def _scheme_note(r):
    sc = r.get("scheme", "direct")
    if sc == "direct":
        return ""
    cls = all_schemes().get(sc)
    extra = cls.note(r) if cls is not None else ""
    return f", scheme {sc}" + (f" ({extra})" if extra else "")


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


def _positive_int(text):
    try:
        v = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text} must be >= 1")
    return v


def _number(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return v


def _check_out(path):
    """Where ``--out`` will write, checked before the run (a run's results must not be lost
    to a missing folder): None when fine, else the reason."""
    if path is None or path == "-":
        return None
    if os.path.isdir(path):
        return f"--out {path}: is a directory"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"--out {path}: folder {folder} does not exist"
    if not os.access(folder, os.W_OK | os.X_OK) or \
            (os.path.exists(path) and not os.access(path, os.W_OK)):
        return f"--out {path}: not writable"
    return None


def build_parser():
    p = argparse.ArgumentParser(prog="netstor-load", description="netstor load generator")
    p.add_argument("--target", required=True, metavar="HOST:PORT[,HOST:PORT...]",
                   help="storage server(s); requests spread uniformly unless --pick")
    p.add_argument("--pick", choices=PICKS, default="random",
                   help="how a request's target is chosen (default random = uniform)")
    schemes = all_schemes()
    p.add_argument("--scheme", choices=list(schemes), default="direct",
                   help="; ".join(f"{n}: {c.help}" for n, c in schemes.items())
                   + " (default direct)")
    for cls in schemes.values():
        cls.add_arguments(p)
    p.add_argument("--mode", choices=("open", "closed"), default="closed")
    p.add_argument("--rate", type=_number, default=None,
                   help="open loop: Poisson arrival rate, requests/s")
    p.add_argument("--concurrency", type=_positive_int, default=1, metavar="C",
                   help="closed loop: requests outstanding (default 1)")
    p.add_argument("--duration", type=_number, default=None, metavar="S",
                   help="stop sending after S seconds (default 5 if no --requests)")
    p.add_argument("--requests", type=_positive_int, default=None, metavar="N",
                   help="stop after N requests")
    p.add_argument("--keys", type=_positive_int, default=1000, metavar="N",
                   help="key space 0..N-1")
    p.add_argument("--zipf", type=_number, default=0.99, metavar="THETA",
                   help="Zipf skew (default 0.99; 0 = uniform)")
    p.add_argument("--write-ratio", type=_number, default=0.0, metavar="W",
                   help="fraction of PUTs (default 0)")
    p.add_argument("--value-size", type=int, default=64, metavar="B",
                   help=f"PUT value size in bytes (default 64; at most {MAX_VALUE}, or "
                        "the scheme's own limit for a scheme that fragments its objects)")
    p.add_argument("--preload", action="store_true", help="PUT every key on every target first")
    p.add_argument("--timeout", type=_number, default=1.0, metavar="S",
                   help="per-request timeout (default 1.0 s)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--max-outstanding", type=_positive_int, default=65536,
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
    bad_out = _check_out(a.out)
    if bad_out:
        p.error(bad_out)
    try:
        r = run_load(a.target, mode=a.mode, rate=a.rate, concurrency=a.concurrency,
                     duration=a.duration, requests=a.requests, keys=a.keys, zipf=a.zipf,
                     write_ratio=a.write_ratio, value_size=a.value_size, preload=a.preload,
                     timeout=a.timeout, seed=a.seed,
                     progress=not a.quiet and sys.stderr.isatty(),
                     max_outstanding=a.max_outstanding, scheme=a.scheme, samples=a.samples,
                     **{o: getattr(a, o) for o in all_schemes()[a.scheme].options})
    except ValueError as e:
        p.error(str(e))
    except (RuntimeError, OSError) as e:
        print(f"netstor-load: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    text = json.dumps(r, indent=2)
    if a.out and a.out != "-":
        try:
            with open(a.out, "w") as f:
                f.write(text + "\n")
        except OSError as e:            # checked before the run, so rare: keep the results
            print(text, flush=True)
            print(f"netstor-load: cannot write --out {a.out}: {e.strerror or e}; the result "
                  "is on stdout", file=sys.stderr)
            return 1
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
