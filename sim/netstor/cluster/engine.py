"""The event loop: an integer-nanosecond virtual clock and a heap of pending events.

Events are ``(time_ns, sequence number, callback, args)``; the sequence number (the order in
which events were scheduled) breaks ties, so two events at the same nanosecond always run in
the order they were scheduled and a run is a pure function of its inputs. Nothing here reads
the wall clock except :attr:`Sim.wall_s` and :attr:`Sim.cpu_s` (for the speed figures).
"""
from __future__ import annotations

import heapq
import time

__all__ = ["Sim", "US", "MS", "S"]

US = 1_000
MS = 1_000_000
S = 1_000_000_000


class Sim:
    """``at(t, fn, *args)`` schedules ``fn(*args)`` at absolute time ``t`` (ns, int);
    ``after(dt, fn, *args)`` at ``now + dt``; :meth:`run` executes events in time order."""

    __slots__ = ("now", "_q", "_seq", "events", "wall_s", "cpu_s")

    def __init__(self):
        self.now = 0
        self._q = []
        self._seq = 0
        self.events = 0          # events executed so far
        self.wall_s = 0.0        # wall time spent in run()
        self.cpu_s = 0.0         # this process's CPU time spent in run()

    def at(self, t, fn, *args):
        if t < self.now:
            raise ValueError(f"event at {t} ns is in the past (now {self.now} ns)")
        self._seq += 1
        heapq.heappush(self._q, (t, self._seq, fn, args))

    def after(self, dt, fn, *args):
        self._seq += 1
        heapq.heappush(self._q, (self.now + dt, self._seq, fn, args))

    @property
    def pending(self):
        return len(self._q)

    def next_time(self):
        """Time of the next event (None when there is none)."""
        return self._q[0][0] if self._q else None

    def run(self, until=None):
        """Run events until the heap is empty, or until the next one lies after ``until``
        (then ``now`` is set to ``until``). Returns the number of events run."""
        q, pop = self._q, heapq.heappop
        n = 0
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            if until is None:
                while q:
                    t, _, fn, args = pop(q)
                    self.now = t
                    fn(*args)
                    n += 1
            else:
                while q and q[0][0] <= until:
                    t, _, fn, args = pop(q)
                    self.now = t
                    fn(*args)
                    n += 1
                if self.now < until:
                    self.now = until
        finally:
            self.events += n
            self.wall_s += time.perf_counter() - t0
            self.cpu_s += time.process_time() - c0
        return n

    @property
    def events_per_s(self):
        return self.events / self.wall_s if self.wall_s > 0 else 0.0
