import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from netstor.agent.load import latency_summary, log_histogram, run_load
from netstor.agent.server import Server

LOOP = "127.0.0.1"
SW = str(Path(__file__).resolve().parents[2])
PCT = ("min", "p50", "p90", "p99", "p999", "max")


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = SW + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.fixture(scope="module")
def server_proc(tmp_path_factory):
    """A real server process (its own GIL) on loopback."""
    db = tmp_path_factory.mktemp("loaddb")
    p = subprocess.Popen([sys.executable, "-m", "netstor.agent.server", "--db", str(db),
                          "--bind", LOOP, "--port", "0", "--server-id", "3", "--no-sync"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         env=_env())
    line = p.stdout.readline()
    assert line.startswith("netstor-server 3 listening on 127.0.0.1:"), line
    yield f"{LOOP}:{int(line.rsplit(':', 1)[1])}"
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def _consistent(r):
    assert r["replies"] == r["sent"] - r["timeouts"]
    lat = r["latency_us"]
    vals = [lat[k] for k in PCT]
    assert vals == sorted(vals)
    assert lat["min"] <= lat["mean"] <= lat["max"]
    n_lat = r["statuses"].get("OK", 0) + r["statuses"].get("NOT_FOUND", 0)
    assert sum(c for _, c in r["histogram"]["buckets"]) == n_lat
    bounds = [b for b, _ in r["histogram"]["buckets"]]
    assert bounds == sorted(bounds) and bounds[-1] >= lat["max"]
    assert sum(o["sent"] for o in r["by_op"].values()) == r["sent"]
    assert sum(o["replies"] for o in r["by_op"].values()) == r["replies"]
    assert r["rps"] == pytest.approx(r["replies"] / r["duration_s"], rel=1e-3)
    json.dumps(r)       # JSON-serialisable


def test_latency_summary_exact():
    s = latency_summary([float(x) for x in range(1000, 0, -1)])
    assert s == {"mean": 500.5, "p50": 500.0, "p90": 900.0, "p99": 990.0, "p999": 999.0,
                 "max": 1000.0, "min": 1.0}
    assert latency_summary([7.0])["p999"] == 7.0
    assert latency_summary([])["p50"] is None


def test_log_histogram():
    h = log_histogram([0.5, 1.0, 1.1, 99.0, 100.0, 100.5, 5000.0])
    assert h["unit"] == "us"
    b = dict(h["buckets"])
    assert b[1.0] == 2 and b[1.26] == 1 and b[100.0] == 2 and b[126.0] == 1
    assert h["buckets"][-1] == [5010.0, 1]
    assert sum(b.values()) == 7
    assert log_histogram([])["buckets"] == []


def test_closed_loop(server_proc):
    r = run_load(server_proc, mode="closed", concurrency=8, requests=3000, keys=500,
                 zipf=0.99, write_ratio=0.2, value_size=100, preload=True, seed=1,
                 timeout=2.0)
    _consistent(r)
    assert r["mode"] == "closed" and r["target"] == server_proc
    assert r["sent"] == 3000 and r["timeouts"] == 0 and r["errors"] == {}
    assert r["statuses"] == {"OK": 3000}            # preloaded: every GET finds its key
    assert r["preload"] == {"sent": 500, "ok": 500, "failed": 0}
    assert r["by_op"]["PUT"]["sent"] == pytest.approx(600, abs=90)
    assert set(r["by_server"]) == {"3"}
    assert r["rps"] > 500


def test_open_loop_rate(server_proc):
    r = run_load(server_proc, mode="open", rate=400, duration=1.0, keys=100, seed=2,
                 timeout=1.0)
    _consistent(r)
    assert r["offered_rps"] == 400.0 and r["timeouts"] == 0
    assert r["sent"] == pytest.approx(400, rel=0.2)          # Poisson, sd ~ 5 %
    assert r["rps"] == pytest.approx(400, rel=0.25)
    assert 1.0 <= r["duration_s"] < 1.5
    assert r["send_lag_us"]["mean"] < 20000     # the generator keeps to its schedule


def test_open_loop_request_bound(server_proc):
    r = run_load(server_proc, mode="open", rate=2000, requests=250, seed=3)
    _consistent(r)
    assert r["sent"] == 250 and r["replies"] == 250


def test_timeouts_counted():
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)   # never answers
    sink.bind((LOOP, 0))
    try:
        r = run_load(sink.getsockname(), mode="closed", concurrency=4, requests=12,
                     timeout=0.1, seed=4)
    finally:
        sink.close()
    assert (r["sent"], r["replies"], r["timeouts"]) == (12, 0, 12)
    assert r["latency_us"]["p50"] is None and r["histogram"]["buckets"] == []
    assert r["by_op"]["GET"]["timeouts"] == 12


def test_two_targets_uniform(tmp_path):
    with Server(tmp_path / "a", bind=LOOP, port=0, server_id=1, sync=False) as a, \
            Server(tmp_path / "b", bind=LOOP, port=0, server_id=2, sync=False) as b:
        tgt = ",".join(f"{h}:{p}" for h, p in (a.address, b.address))
        r = run_load(tgt, mode="closed", concurrency=4, requests=1000, keys=50, seed=5,
                     preload=True)
        _consistent(r)
        assert r["preload"]["ok"] == 100              # every key on both servers
        n1, n2 = r["by_server"]["1"]["replies"], r["by_server"]["2"]["replies"]
        assert n1 + n2 == 1000 and abs(n1 - n2) < 150
        r = run_load(tgt, mode="closed", concurrency=2, requests=200, keys=50, seed=5,
                     pick="key")
        assert all(v["replies"] > 0 for v in r["by_server"].values())


def test_bad_arguments():
    with pytest.raises(ValueError, match="rate"):
        run_load("127.0.0.1:1", mode="open")
    with pytest.raises(ValueError, match="value size"):
        run_load("127.0.0.1:1", value_size=100000)
    with pytest.raises(ValueError, match="write ratio"):
        run_load("127.0.0.1:1", write_ratio=2)


def test_cli(server_proc, tmp_path):
    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "netstor.agent.load", "--target", server_proc, "--mode",
           "closed", "--concurrency", "4", "--requests", "400", "--keys", "64", "--seed", "9",
           "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=60)
    assert p.returncode == 0, p.stderr
    assert "closed loop" in p.stdout and "p99" in p.stdout
    assert p.stderr == ""                # not a TTY: no progress bar
    r = json.loads(out.read_text())
    _consistent(r)
    assert {"mode", "target", "sent", "replies", "timeouts", "errors", "duration_s", "rps",
            "offered_rps", "latency_us", "histogram", "by_op"} <= set(r)
    p = subprocess.run(cmd[:-2] + ["--quiet", "--out", "-"], capture_output=True, text=True,
                       env=_env(), timeout=60)
    assert json.loads(p.stdout)["sent"] == 400
    p = subprocess.run([sys.executable, "-m", "netstor.agent.load", "--target", server_proc,
                        "--mode", "open"], capture_output=True, text=True, env=_env(),
                       timeout=60)
    assert p.returncode == 2 and "--rate" in p.stderr
