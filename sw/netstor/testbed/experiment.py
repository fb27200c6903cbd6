"""What every test-bed comparison shares: the rack session, the model switch started with a
configuration, ``netstor-server`` on every server host (each offload's socket on or off),
``netstor-load`` on every client at once, the run torn down, the servers' own final counters,
the latency part of a result row (exact nearest-rank percentiles over all clients), table
cells, and the command-line frame (prerequisites checked, the rack torn down on Ctrl-C, the
table printed, the JSON written).

An offload's ``compare.py`` keeps only what is its own: its schemes, its configuration, its
load-generator flags and the rest of its rows."""
from __future__ import annotations

import contextlib
import json
import math
import re
import sys
import tempfile
from pathlib import Path

from netstor.testbed import netns
from netstor.testbed.framecost import measure
from netstor.testbed.rack import Rack

__all__ = ["pct", "fmt", "rack_session", "start_switch", "start_servers", "load_argv",
           "run_clients", "stop_run", "latency_row", "server_stats", "write_result",
           "run_main"]

#: the storage servers' plain storage port in the test bed
STORAGE_PORT = 7430

#: the line ``netstor-server`` logs when it stops: its counters as JSON
STATS_LINE = re.compile(r"netstor-server stats (\{.*\})\s*$")


def pct(sorted_vals, p):
    """Nearest-rank percentile of a sorted list (None when empty)."""
    if not sorted_vals:
        return None
    return sorted_vals[max(0, math.ceil(p / 100 * len(sorted_vals)) - 1)]


def fmt(v, spec=".0f"):
    """A table cell: ``-`` for a missing value."""
    return "-" if v is None else format(v, spec)


@contextlib.contextmanager
def rack_session(result, clients, servers, *, tag):
    """A fresh rack for one comparison: stale racks of earlier runs cleaned up, what each
    kind of frame costs the model switch on its own recorded in
    ``result["model_us_per_frame"]`` (the floor of the switch's share of every request;
    under load see each run's switch timing), then ``(rack, workdir)`` in a temporary folder,
    torn down at the end."""
    netns.cleanup_stale()
    result["model_us_per_frame"] = measure(200)
    with tempfile.TemporaryDirectory(prefix=f"netstor-{tag}-") as tmp, \
            Rack(clients, servers, workdir=tmp) as rack:
        yield rack, tmp


def start_switch(rack, config, workdir, *, stats_json=None, control=None, log=None,
                 ready_timeout=60.0, name="switch"):
    """Start the rack's model switch with table configuration ``config`` (a dict; written to
    ``workdir``); ``control``: serve its control window at this Unix socket path. Returns the
    process (also ``rack.switch``, so ``rack.stop_switch()`` stops it)."""
    path = Path(workdir) / f"{rack.prefix}{name}-config.json"
    path.write_text(json.dumps(config, indent=1))
    argv = [sys.executable, "-m", "netstor.testbed.switch", "--port0", "p0", "--port1", "p1",
            "--dataplane", "model", "--config", str(path)]
    if stats_json:
        argv += ["--stats-json", str(stats_json)]
    if control:
        argv += ["--control", str(control)]
    rack.switch = rack.spawn("switch", argv, name=name, log=log)
    rack.switch.wait_line(r"^netstor-switch ready", timeout=ready_timeout)
    return rack.switch


def start_servers(rack, workdir, service_model, *, offload_ports=None, server_ids=None,
                  workers=1, seed=0, tag="", log_level="INFO"):
    """``netstor-server`` on every server host (storage port :data:`STORAGE_PORT`; server id
    ``server_ids[k]``, default ``k + 1``; seed ``seed + k``; database ``workdir/db<tag><k>``);
    ``offload_ports``: ``{offload name: port}`` (``--<name>-port``, 0 = off; offloads not
    named keep the server's default). Returns the processes once all are listening."""
    procs = []
    for k, h in enumerate(rack.servers):
        db = Path(workdir) / f"db{tag}{k}"
        db.mkdir(exist_ok=True)
        argv = [sys.executable, "-m", "netstor.agent.server", "--bind", h.ip,
                "--port", STORAGE_PORT]
        for name, port in (offload_ports or {}).items():
            argv += [f"--{name}-port", port]
        argv += ["--db", db, "--workers", workers,
                 "--server-id", k + 1 if server_ids is None else server_ids[k], "--no-sync",
                 "--service-model", service_model, "--seed", seed + k,
                 "--log-level", log_level]
        procs.append(rack.spawn(h, argv))
    for p in procs:
        p.wait_line(r"^netstor-server \d+ listening on", timeout=30)
    return procs


def load_argv(scheme, targets, *, rate, duration, seed, out, timeout=1.0, keys=1000,
              zipf=0.99, samples=True, extra=()):
    """One client's open-loop ``netstor-load`` command: ``scheme`` to ``targets`` (a list of
    ``"host:port"``), Poisson at ``rate``/s for ``duration`` s, result JSON to ``out``;
    ``extra``: the scheme's own flags."""
    argv = [sys.executable, "-m", "netstor.agent.load", "--mode", "open", "--rate", rate,
            "--duration", duration, "--keys", keys, "--zipf", zipf, "--seed", seed,
            "--timeout", timeout, "--out", out, "--quiet", "--scheme", scheme,
            "--target", ",".join(targets), *extra]
    if samples:
        argv.append("--samples")
    return argv


def run_clients(rack, workdir, scheme, argv_for, *, duration, tag=""):
    """``argv_for(i, host, out)`` on every client at once (:meth:`Rack.run_on_clients`);
    returns ``{client: result}``."""
    return rack.run_on_clients(argv_for, workdir, timeout=duration + 60,
                               tag=f"{tag}{scheme}-", what=f"netstor-load {scheme}")


def stop_run(rack, procs):
    """Stop one run's servers ``procs`` and the switch, and forget them (the rack's clients
    stay for the next run)."""
    for p in procs:
        p.stop()
        if p in rack.procs:
            rack.procs.remove(p)
    rack.stop_switch()
    if rack.switch in rack.procs:
        rack.procs.remove(rack.switch)


def latency_row(scheme, results, offered_rps):
    """The part of a result row every comparison has, from the clients' ``netstor-load``
    results (run with ``--samples``): counts, achieved rate, exact percentiles over all
    clients' samples."""
    lat = sorted(x for r in results.values() for x in (r.get("samples_us") or []))
    return {
        "scheme": scheme,
        "offered_rps": offered_rps,
        "sent": sum(r["sent"] for r in results.values()),
        "replies": sum(r["replies"] for r in results.values()),
        "timeouts": sum(r["timeouts"] for r in results.values()),
        "achieved_rps": round(sum(r["rps"] for r in results.values()), 1),
        "p50_us": pct(lat, 50), "p99_us": pct(lat, 99), "p999_us": pct(lat, 99.9),
        "mean_us": round(sum(lat) / len(lat), 1) if lat else None,
    }, lat


def server_stats(procs, keys):
    """``{"1": {key: value}, ...}``: each stopped ``netstor-server`` process's final counters
    (the JSON line it logs on stop), restricted to ``keys`` (0 when a server logged none)."""
    out = {}
    for k, p in enumerate(procs):
        stats = {}
        for line in p.output().splitlines():
            m = STATS_LINE.search(line)
            if m:
                stats = json.loads(m[1])
        out[str(k + 1)] = {key: stats.get(key, 0) for key in keys}
    return out


def write_result(out, result):
    """Write ``result`` as JSON to ``out`` (folders made)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))


def run_main(name, run, format_table, out):
    """The comparison's command-line frame: ``run()`` on a rack (root and ``ip netns``
    checked first), its table printed; 2 without the prerequisites, 130 on Ctrl-C."""
    try:
        netns.check_prereqs()
    except netns.NetnsError as e:
        print(f"{name}: {e}", file=sys.stderr)
        return 2
    try:
        res = run()
    except KeyboardInterrupt:
        print(f"{name}: interrupted; rack torn down", file=sys.stderr)
        return 130
    print(format_table(res))
    print(f"written {out} ({res['wall_s']} s)")
    return 0
