"""The evaluation runner: every executor gives the same results for the same tasks (the
results depend on the task's seed only), failures are reported with their task's key after
the other runs finished; the statistics against hand-computed values."""
from __future__ import annotations

import random

import pytest

from netstor.evaluation.runner import Task, make_executor, run_tasks
from netstor.evaluation.stats import mean_ci, paired_rel_diff, percentile


def work(seed, n):
    """A task: a seeded computation whose result a worker cannot change."""
    rng = random.Random(seed)
    return {"seed": seed, "sum": round(sum(rng.random() for _ in range(n)), 12)}


def fail(seed):
    raise ValueError(f"run {seed} broke")


TASKS = [Task(f"w{s}", "netstor.evaluation.test_runner:work", {"seed": s, "n": 1000},
              cost=s) for s in range(6)]
EXPECT = {f"w{s}": work(s, 1000) for s in range(6)}


@pytest.mark.parametrize("spec", ["serial", "local", "dask-local"])
def test_executors_agree(spec):
    ex = make_executor(spec, workers=2)
    try:
        results, seconds = run_tasks(TASKS, ex, progress=False)
    finally:
        ex.close()
    assert results == EXPECT
    assert set(seconds) == set(EXPECT) and all(s >= 0 for s in seconds.values())


def test_failures_name_their_task_after_the_rest_ran():
    tasks = TASKS[:3] + [Task("bad", "netstor.evaluation.test_runner:fail", {"seed": 7})]
    ex = make_executor("local", workers=2)
    try:
        with pytest.raises(RuntimeError, match=r"bad: ValueError: run 7 broke"):
            run_tasks(tasks, ex, progress=False)
    finally:
        ex.close()


def test_duplicate_keys_and_unknown_executor_rejected():
    with pytest.raises(ValueError, match="not unique"):
        run_tasks([TASKS[0], TASKS[0]], make_executor("serial"), progress=False)
    with pytest.raises(ValueError, match="executor 'ray'"):
        make_executor("ray")


def test_statistics_by_hand():
    # 1..5: mean 3, sample sd sqrt(2.5) = 1.5811; t(0.975, 4) = 2.7764 -> half 1.9632
    iv = mean_ci([1, 2, 3, 4, 5])
    assert iv.mean == 3 and iv.n == 5
    assert iv.half_width == pytest.approx(1.9632, abs=1e-4)
    one = mean_ci([7.5])
    assert (one.lo, one.hi, one.n) == (7.5, 7.5, 1)
    # paired: a = 90, 80 against b = 100, 100 -> -10 %, -20 %: mean -15, sd 7.071,
    # t(0.975, 1) = 12.706 -> half 12.706 * 7.071 / sqrt(2) = 63.53
    d = paired_rel_diff([90, 80], [100, 100])
    assert d.mean == pytest.approx(-15) and d.half_width == pytest.approx(63.53, abs=0.01)
    with pytest.raises(ValueError):
        paired_rel_diff([1], [1, 2])
    xs = list(range(1, 101))                 # nearest rank: p99 of 1..100 is 99, p50 is 50
    assert percentile(xs, 99) == 99 and percentile(xs, 50) == 50 and percentile(xs, 100) == 100
    assert percentile([4], 99) == 4
