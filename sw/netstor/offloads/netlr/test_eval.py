"""NetLR in the cluster simulator: the switch running NetLR's program (the data-plane model)
decides every frame as the reference rules do; the write path's counts (copies, acks,
commits) and the round-robin reads are what the protocol says; a failed replica stops every
commit until the controller removes it; histories with a replica killed mid-run pass
porcupine (retries applied once, as netstor-server does; with the plain rule a retried write
can take effect twice, and the checker sees it); saturation throughput equals each scheme's analytic
bound; the evaluation hook writes the issue's summary keys."""
from __future__ import annotations

import json

import numpy as np
import pytest

from netstor.offloads.netlr import eval as lreval
from netstor.offloads.netlr.sim import LrRun


def _checker():
    from netstor import lincheck
    try:
        lincheck.go_binary()
    except lincheck.LincheckUnavailable as e:
        pytest.skip(str(e))
    return lincheck


def test_program_model_decides_like_the_reference_rules():
    c = lreval.check_model(requests=400, seed=3)
    assert c["available"] and c["frames"] > 800
    assert c["mismatches"] == 0, c["first"]
    # collisions (16 slots), superseded acks and a replica's removal all happened
    cnt = c["counters"]
    assert cnt["collide"][0] > 0 and cnt["stale"][0] > 0 and cnt["commits"][0] > 50
    assert all(m == r for m, r in cnt.values())


@pytest.mark.parametrize("switch", ["model", "ref"])
def test_write_path_counts_and_round_robin_reads(switch):
    run = LrRun("netlr", rate_rps=100_000, requests=2_000, seed=5, switch=switch)
    res = run.run()
    writes = sum(sum(c.is_write) for c in run.clients)
    reads = 2_000 - writes
    assert res["timeouts"] == 0 and res["retries"] == 0 and res["acked_writes"] == writes
    c = res["switch_counters"]
    assert c["nl.commits"] == writes and c["nl.absorbed"] == 3 * writes
    assert "nl.stale" not in c and "nl.collide" not in c
    copies = c["nl.copies.hit"] if switch == "model" else c["nl.copies"]
    assert copies == 4 * writes
    handled = [r["handled"] for r in res["replicas"]]
    assert [h["write"] for h in handled] == [writes] * 4 + [0, 0]
    # 10^6 keys: no read meets a listed object, so the rotation alone spreads them
    per = [h["read"] for h in handled[:4]]
    assert sum(per) == reads and max(per) - min(per) <= 1
    # every frame through the switch: a read 2 passes, a write 1 + 4 acks
    assert run.switch.frames_in == 2 * reads + 5 * writes


def test_a_failed_replica_blocks_commits_until_the_controller_removes_it():
    fail_us, detect_us = 10_000.0, 8_000.0
    run = LrRun("netlr", rate_rps=100_000, requests=4_000, seed=2, switch="model",
                write_ratio=0.2, retry_us=1_000.0, timeout_us=30_000.0,
                fail=(2, fail_us), detect_us=detect_us)
    res = run.run()
    t_fail, t_rm = fail_us * 1e3, (fail_us + detect_us) * 1e3
    assert [c["t_us"] for c in res["controller"]] == [fail_us + detect_us]
    done_w = np.concatenate([c.done_at[np.asarray(c.is_write, bool) & (c.done_at >= 0)]
                             for c in run.clients])
    # no write commits between (the failure + the last pre-failure write's way) and removal
    assert not ((done_w > t_fail + 500_000) & (done_w < t_rm)).any()
    assert ((done_w > t_rm) & (done_w < t_rm + 2_000_000)).sum() > 20
    # after the removal every write goes to the 3 live replicas: the dead one got none
    dead = res["replicas"][2]
    assert not dead["alive"]
    alive_w = [r["handled"]["write"] for r in res["replicas"][:4] if r["alive"]]
    assert min(alive_w) > dead["handled"]["write"]
    assert res["retries"] > 0 and res["timeouts"] == 0
    assert res["acked_writes_lost"] == 0


@pytest.mark.parametrize("scheme", ["cr", "hermes"])
def test_baselines_stop_committing_until_the_failed_replica_is_removed(scheme):
    """CR (the chain's second server dies: no write reaches the tail) and Hermes-like (no
    coordinator gets the dead replica's ACK) commit no write between the failure and the
    removal; at the removal CR's predecessor re-sends what its new successor lacks and
    Hermes' coordinators commit the writes that waited only for the dead member; afterwards
    writes commit on 3 replicas, nothing acknowledged is lost and the live stores agree."""
    fail_us, detect_us = 10_000.0, 8_000.0
    run = LrRun(scheme, rate_rps=100_000, requests=4_000, seed=2, write_ratio=0.2,
                retry_us=1_000.0, timeout_us=30_000.0, fail=(1, fail_us), detect_us=detect_us)
    res = run.run()
    run.quiesce()
    t_fail, t_rm = fail_us * 1e3, (fail_us + detect_us) * 1e3
    (ctl,) = res["controller"]
    assert ctl["t_us"] == fail_us + detect_us and ctl["removed_rid"] == 2
    if scheme == "cr":
        assert ctl["from_rid"] == 1 and ctl["to_rid"] == 3 and ctl["resent"] > 0
    else:
        assert ctl["committed"] > 0
    assert run.members == [0, 2, 3]
    done_w = np.concatenate([c.done_at[np.asarray(c.is_write, bool) & (c.done_at >= 0)]
                             for c in run.clients])
    assert not ((done_w > t_fail + 500_000) & (done_w < t_rm)).any()
    assert ((done_w >= t_rm) & (done_w < t_rm + 2_000_000)).sum() > 20
    assert res["timeouts"] == 0 and res["retries"] > 0 and res["acked_writes_lost"] == 0
    live = [r for r in run.replicas[:4] if r.alive]
    assert len(live) == 3 and all(r.store == live[0].store for r in live)


def test_hermes_replays_the_writes_a_removed_coordinator_left_invalid():
    """No client retries: a write whose coordinator died after its INVs went out is finished
    by a surviving replica (same timestamp) at the membership change; no key stays Invalid."""
    replayed = 0
    for seed in (1, 2, 3):
        run = LrRun("hermes", rate_rps=100_000, requests=3_000, seed=seed, n_keys=2_000,
                    write_ratio=0.3, retry_us=50_000.0, timeout_us=50_000.0,
                    fail=(0, 8_000.0), detect_us=3_000.0)
        res = run.run()
        run.quiesce()
        replayed += res["controller"][0]["replayed"]
        live = [r for r in run.replicas[:4] if r.alive]
        assert not any(v is False for r in live for v in r.valid.values())
        assert all(r.store == live[0].store for r in live)
    assert replayed > 0


def test_histories_with_a_failure_are_linearizable():
    lc = _checker()
    for scheme, kw in (("netlr", {"dedup": True, "fail": (1, 8_000.0), "detect_us": 2_000.0,
                                  "switch": "model"}),
                       ("cr", {"fail": (1, 8_000.0), "detect_us": 2_000.0}),
                       ("hermes", {"fail": (0, 8_000.0), "detect_us": 2_000.0})):
        run = LrRun(scheme, rate_rps=100_000, requests=2_000, seed=4, n_keys=32,
                    write_ratio=0.3, retry_us=1_000.0, **kw)
        run.run()
        run.quiesce()
        h = run.history() + run.final_reads()
        # quiet: every live replica holds the same state
        live = [r for r in run.replicas[:4] if r.alive]
        assert all(r.store == live[0].store for r in live), scheme
        res = lc.check(h)
        assert res["ok"] and res["violations"] == 0 and res["operations"] > 2_000, scheme
        lost = lc.acked_writes_lost(h)
        assert lost["acked_writes"] > 300 and lost["lost"] == 0, scheme


def test_retry_without_dedup_can_apply_a_write_twice():
    """The plain rule (replicas apply any newer seq): a write superseded by a later write of
    the same object never commits, its retry gets a new seq and the value comes back after
    the later one. The checker sees it; the same traffic with netstor-server's rule (a retry
    of an operation overwritten since is not applied again) is linearizable."""
    lc = _checker()
    out = {}
    for dedup in (False, True):
        run = LrRun("netlr", rate_rps=100_000, requests=3_000, seed=1, n_keys=16,
                    write_ratio=0.5, retry_us=1_000.0, dedup=dedup)
        res = run.run()
        assert res["retries"] > 0
        out[dedup] = lc.check(run.history())["violations"]
    assert out[False] > 0 and out[True] == 0


def test_saturation_throughput_equals_the_analytic_bounds():
    got = {}
    for s in ("netlr", "cr", "hermes"):
        r = lreval._lrrun(s, rate=1e5, requests=6_000, seed=1, switch="model",
                          outstanding=lreval.OUTSTANDING).run()
        got[s] = r["throughput_rps"] / lreval.capacity_rps(s)
        assert r["timeouts"] == 0
    # the busiest server decides: CR's tail, every replica for NetLR and Hermes
    assert 0.95 < got["cr"] < 1.04
    assert 0.93 < got["netlr"] < 1.03 and 0.93 < got["hermes"] < 1.03


def test_evaluation_hook_writes_the_issue_keys(tmp_path):
    _checker()                          # the smoke scale checks two histories
    from netstor.evaluation.runner import make_executor, run_tasks
    from netstor.offloads import get
    ev = get("netlr").hook("evaluation")
    ts = ev.tasks("smoke", 1)
    assert len({t.key for t in ts}) == len(ts)
    results, _ = run_tasks(ts, make_executor("serial"), progress=False)
    sec = ev.summarise(results, tmp_path, scale="smoke")
    s = sec.summary
    assert {"throughput_vs_cr", "throughput_vs_hermes", "histories_checked",
            "operations_checked", "linearizability_violations",
            "acked_writes_lost"} <= set(s)
    assert 2.5 < s["throughput_vs_cr"] < 4.5 and 1.0 < s["throughput_vs_hermes"] < 1.6
    assert s["operations_checked"] > 1_000
    assert s["acked_writes_lost"] == 0 and s["linearizability_violations"] == 0
    assert s["histories_checked"] == 1 and s["linearizability_violations_plain_retry"] > 0
    res = json.loads((tmp_path / "netlr.json").read_text())
    assert res["model_check"][0]["mismatches"] == 0
    assert [f["scheme"] for f in res["fail"]] == ["netlr", "cr", "hermes"]
    for f in res["fail"]:
        assert f["removed_us"] == pytest.approx(f["fail_us"] + f["detect_us"])
        # no write commits while the dead replica is in the group; they do after its removal
        assert f["during_writes_rps"] == 0 and f["after_writes_rps"] > 0, f["scheme"]
    # dataset size: 100 objects and the 10^6 of the scalability runs, every scheme
    assert res["size"]["n_keys"] == [100, 1_000_000]
    for s, e in res["size"]["schemes"].items():
        assert e["vs_1m_objects"][1]["mean"] == 1.0 and e["throughput_rps"][0]["mean"] > 0
    assert "| objects |" in sec.markdown
    assert (tmp_path / "netlr.png").stat().st_size > 10_000
    assert "| NetLR / CR saturation throughput |" in sec.markdown
