"""NetLR end to end in the real-socket test bed (root): three ``netstor-server``\\ s (one
replica group) in server namespaces, NetLR clients (``python -m netstor.offloads.netlr.schemes``)
on two client hosts (two threads each, sharing UDP port 7460), the golden-model switch with
NetLR's program between them (``python -m netstor.offloads.netlr.demo switch``:
``default_pipeline()``, copy-list groups), a third client host as the
controller's hand. Mid-run one replica is killed (SIGKILL), the controller takes it out of the
group (the ``netlr:`` section again, ``down``), one more client writes keys the dead replica
never sees, the replica is restarted on its stale database and rejoins (phase 1, catch-up
from a live replica, phase 2) while the clients go on; then every key is read once more.

The evidence: the merged history (every client's calls and returns on the host's monotonic
clock) checked by porcupine (:mod:`netstor.lincheck`: 0 violations), 0 acknowledged writes lost
(each acked write read back or superseded by a later write that was read), the catch-up
applying exactly the objects the replica missed, and the stopped servers' stores equal. The
same run with the catch-up skipped must be rejected by the same checks (a negative control:
the checks can fail on this test bed)."""
import os
import tempfile

import pytest

from netstor.offloads.netlr import demo
from netstor.lincheck import LincheckUnavailable, go_binary
from netstor.testbed.rack import Rack

needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="the test bed needs root (network namespaces)")


def _go():
    try:
        go_binary()
        return True
    except LincheckUnavailable:
        return False


needs_go = pytest.mark.skipif(not _go(), reason="no Go toolchain (`go` absent): no checker")

KEYS, COLD = 8, 8


def run(**kw):
    with tempfile.TemporaryDirectory(prefix="netstor-lr-test-") as tmp, \
            Rack(3, 3, workdir=tmp) as rack:
        return demo.run_failover(rack, tmp, duration=5.0, kill_at=1.5, rejoin_at=3.0,
                                 keys=KEYS, cold_keys=COLD, **kw)


@needs_root
@needs_go
@pytest.mark.parametrize("victim", [2, 0], ids=["s2", "s0-first-replica"])
def test_failover_and_rejoin_histories_are_linearizable(victim):
    """Killed: the last replica, or the first (fresh slots steer their reads to it, so
    reads of objects being written are lost with it until their write commits)."""
    out = run(victim=victim)
    summary = {k: out[k] for k in ("operations", "violations", "acked_writes",
                                   "acked_writes_lost", "retries", "errors", "catch_up",
                                   "replica_objects", "replicas_agree")}
    print(summary)
    assert out["errors"] == [], summary
    assert out["linearizable"] and out["violations"] == 0, (out["bad_key"], summary)
    assert out["acked_writes_lost"] == 0, summary
    assert out["keys"] == KEYS + COLD and out["pending_writes"] == 0, summary
    # a real run (thousands of operations on an idle machine; bounds kept low for a loaded
    # one: the model switch is Python)
    assert out["operations"] > 300 and out["acked_writes"] > 60, summary
    # the catch-up brought exactly the cold objects the dead replica missed (the hot keys
    # reached it through the switch during phase 1), and every store ends equal
    assert out["catch_up"]["ok"] and out["catch_up"]["objects"] == KEYS + COLD, summary
    assert out["catch_up"]["applied"] >= COLD, summary
    assert out["replica_objects"] == [KEYS + COLD] * 3 and out["replicas_agree"], summary
    events = [e for _, e in sorted(out["events"])]
    v = f"s{victim}"
    assert [e.split(":")[0] for e in events if not e.startswith(("caught", "rejoined"))] == \
        [f"killed {v}", f"down {v}", f"joining {v}", f"live {v}"], events


@needs_root
@needs_go
def test_rejoin_without_catch_up_is_caught():
    """Negative control: the restarted replica becomes live on its stale database (no
    catch-up): some final reads land on it and return values older than acknowledged writes
    (or nothing), which the checks must report."""
    out = run(catch_up=False)
    print({k: out[k] for k in ("operations", "violations", "acked_writes_lost",
                               "replicas_agree")})
    assert not out["replicas_agree"]
    assert out["violations"] > 0 or out["acked_writes_lost"] > 0, out["violations"]


@needs_root
@needs_go
def test_demo_step_on_running_servers():
    """``make demo``'s step on servers started as the demo starts them (no NetLR flag: the
    default port): NetLR, CR and Hermes-like through NetLR's switch, every history
    linearizable."""
    import sys
    from pathlib import Path
    with tempfile.TemporaryDirectory(prefix="netstor-lr-demo-") as tmp, \
            Rack(2, 3, workdir=tmp) as rack:
        procs = []
        for i, h in enumerate(rack.servers):
            (Path(tmp) / f"db{i}").mkdir()
            procs.append(rack.spawn(h, [sys.executable, "-m", "netstor.agent.server", "--bind",
                                        h.ip, "--db", str(Path(tmp) / f"db{i}"), "--no-sync"]))
        for p in procs:
            p.wait_line(r"^netstor-server \d+ listening on", timeout=30)
        res, line = demo.demo_step(rack, tmp, rate=100, duration=1.5)
    print(line)
    rows = res["schemes"]
    assert set(rows) == {"netlr", "cr", "hermes"}
    for name, r in rows.items():
        assert r["linearizable"] and r["violations"] == 0, (name, r)
        assert r["acked_writes_lost"] == 0 and r["errors"] == [], (name, r)
        assert r["writes"] > 20 and r["reads"] > 20, (name, r)
    # NetLR's writes went through the switch's aggregation; the baselines' did not
    assert res["switch"]["nl.copies.hit"] >= 3 * rows["netlr"]["writes"]
    assert "0 violations, 0 acked writes lost" in line
