"""Smoke test of ``make demo-rtl``: ``python -m netstor.sim.demo`` with a few frames on the shared core
build (``core_build``) exits 0 and writes a sane ``report.json``."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.cocotb
@pytest.mark.xdist_group("core2")       # the same Verilator build as test_core.py
def test_demo_smoke(tmp_path):
    env = dict(os.environ, NETSTOR_DEMO_FRAMES="40", NETSTOR_SEED="3",
               NETSTOR_DEMO_OUT=str(tmp_path))
    run = subprocess.run([sys.executable, "-m", "netstor.sim.demo"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "hardware == golden model: 40 frames" in run.stdout
    r = json.loads((tmp_path / "report.json").read_text())
    assert r["status"] == "PASS" and not r["problems"]
    assert r["frames_sent"] == 40
    assert set(r["checks"].values()) == {"ok"}
    assert r["outputs_compared"] == r["outputs_expected"] > 0
    assert r["outputs_unmatched"] == 0
    # counters agree with what the testbench offered and received
    for name, d in r["inputs"].items():
        if "sent_frames" in d:
            drops = sum(d[k] for k in ("drop_runt", "drop_oversize", "drop_error", "drop_full"))
            assert d["pkts"] + drops == d["sent_frames"], name
    for name, d in r["outputs"].items():
        assert d["pkts"] == d["received_frames"] == d["expected_frames"], name
        assert d["drop_full"] == 0, name
    assert set(r["inputs"]) == {"wire_rx0", "wire_rx1", "host_tx0", "host_tx1", "recirc"}
    assert {"l3.routes", "prim.ops"} <= set(r["tables"])
    lat = r["classes"]["all"]["latency"]
    assert lat["n"] == r["outputs_compared"]
    assert 0 < lat["min"] <= lat["mean"] <= lat["p99"] <= lat["max"] < 20000
    assert lat["min_ns"] == lat["min"] * 4.0
