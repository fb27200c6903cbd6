"""What every test-bed comparison shares: the model switch started with a configuration, the
servers' own final counters, nearest-rank percentiles, table cells, and the command-line frame
(prerequisites checked, the rack torn down on Ctrl-C, the table printed, the JSON written).

An offload's ``compare.py`` keeps only what is its own: its schemes, its configuration and
its rows."""
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

__all__ = ["pct", "fmt", "rack_session", "start_switch", "server_stats", "write_result",
           "run_main"]

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
