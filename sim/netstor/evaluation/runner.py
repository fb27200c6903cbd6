"""Where the simulation runs of an evaluation execute: one process (``serial``), a local
process pool (the default, one worker per core), or a Dask cluster.

Why Dask and not Ray: every task here is a plain Python function returning a small JSON-able
result, with no shared state between tasks; Dask's ``distributed`` is pure Python, installs from
PyPI with the rest of the pins (tens of MB, against Ray's several hundred plus its own runtime),
starts a local cluster in seconds for tests, and a real one is ``dask scheduler`` plus
``dask worker tcp://HOST:8786`` on each machine (with this package installed the same way).

A task is named by ``"module:function"`` and keyword arguments, so a worker needs nothing but
the installed package: no pickled closures, no code shipped from the client.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field

from tqdm import tqdm

from netstor.offload import resolve

__all__ = ["Task", "run_task", "make_executor", "run_tasks", "EXECUTORS"]

EXECUTORS = ("serial", "local", "dask-local", "tcp://HOST:PORT")


@dataclass(frozen=True)
class Task:
    """One simulation run: ``fn`` (``"module:function"``) called with ``kwargs``; ``key``
    names its result (unique within an evaluation); ``cost`` a relative size (longest first,
    so a pool ends together)."""
    key: str
    fn: str
    kwargs: dict = field(default_factory=dict)
    cost: float = 1.0


def run_task(fn, kwargs):
    """Run one task where it lands (a pool worker, a Dask worker): ``(result, wall seconds,
    None)``, or ``(None, seconds, error text)`` when it raised."""
    t0 = time.perf_counter()
    try:
        result = resolve(fn)(**kwargs)
    except Exception as e:             # reported with the task's key, the others go on
        return None, time.perf_counter() - t0, f"{type(e).__name__}: {e}"
    return result, time.perf_counter() - t0, None


class _Serial:
    name = "serial"

    def map(self, tasks):
        for t in tasks:
            yield t, run_task(t.fn, t.kwargs)

    def close(self):
        pass


class _Pool:
    def __init__(self, workers):
        self.workers = workers
        self.name = f"local process pool ({workers} workers)"
        self.pool = ProcessPoolExecutor(max_workers=workers)

    def map(self, tasks):
        futs = {self.pool.submit(run_task, t.fn, t.kwargs): t for t in tasks}
        for f in as_completed(futs):
            yield futs[f], f.result()

    def close(self):
        self.pool.shutdown()


class _Dask:
    def __init__(self, address, workers):
        from distributed import Client, LocalCluster   # only when asked for: ~1 s import
        self.cluster = None
        if address == "dask-local":
            self.cluster = LocalCluster(n_workers=workers, threads_per_worker=1,
                                        processes=True, dashboard_address=None)
            address = self.cluster.scheduler_address
        self.client = Client(address)
        self.name = f"Dask cluster at {address} ({len(self.client.scheduler_info()['workers'])} workers)"

    def map(self, tasks):
        from distributed import as_completed as dask_completed
        futs = {}
        for t in tasks:
            # pure=False: two tasks with equal arguments are still two runs
            futs[self.client.submit(run_task, t.fn, t.kwargs, key=f"netstor-{t.key}",
                                    pure=False)] = t
        for f in dask_completed(list(futs)):
            yield futs[f], f.result()

    def close(self):
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def make_executor(spec="local", workers=None):
    """``serial``, ``local`` (process pool, ``workers`` default the cores), ``dask-local`` (a
    Dask cluster of ``workers`` processes on this machine) or a Dask scheduler address
    (``tcp://host:8786``; ``dask://host:port`` is accepted too)."""
    workers = workers or os.cpu_count() or 1
    if spec == "serial":
        return _Serial()
    if spec == "local":
        return _Serial() if workers == 1 else _Pool(workers)
    if spec == "dask-local" or spec.startswith(("tcp://", "dask://", "tls://")):
        return _Dask(spec.replace("dask://", "tcp://"), workers)
    raise ValueError(f"executor {spec!r}: one of {', '.join(EXECUTORS)}")


def run_tasks(tasks, executor, *, progress=True, desc="eval"):
    """Run ``tasks`` on ``executor``; ``{key: result}`` plus ``{key: seconds}``. A failing task
    does not stop the others; once all ran, the failures are raised together, with their
    keys."""
    tasks = sorted(tasks, key=lambda t: -t.cost)
    keys = [t.key for t in tasks]
    if len(set(keys)) != len(keys):
        raise ValueError("task keys are not unique")
    results, seconds, errors = {}, {}, []
    bar = tqdm(total=len(tasks), desc=desc, unit="run", disable=not progress,
               dynamic_ncols=True)
    for t, (res, sec, err) in executor.map(tasks):
        bar.update(1)
        if err is not None:
            errors.append(f"{t.key}: {err}")
            continue
        results[t.key], seconds[t.key] = res, sec
        bar.set_postfix_str(t.key[-40:])
    bar.close()
    if errors:
        raise RuntimeError(f"{len(errors)} evaluation task(s) failed: " + "; ".join(errors[:5]))
    return results, seconds
