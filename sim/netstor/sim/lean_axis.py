"""Lean AXI-Stream driver and monitor for long cocotb runs (throughput benchmarks).

The cocotbext-axi models are the protocol reference but cost ~1 ms per 512-bit beat; this
module assigns and samples the bus as plain Python ints from **one** coroutine per clock
(:class:`LeanEngine`), so a cycle costs a few signal accesses per agent. It is checked against
the cocotbext-axi models in ``sim/test_lean_axis.py`` (same frames both ways, with idle cycles
and back-pressure, and the measured latency of a one-register stage).

Timing convention (the same as cocotbext-axi's): after each rising edge the engine increments
``cycle`` and calls every agent's ``step(cycle)``. An agent first samples the handshake that
happened *at* that edge (``tvalid & tready`` as they were before it), then drives the values
for the next edge. A beat is therefore "accepted at edge ``cycle``"; a register stage between a
source and a sink shows up as exactly one cycle between the two records.

Records (all in edge numbers of the engine):

* :class:`LeanSource`: ``starts[i]`` edge at which frame ``i``'s first beat was accepted,
  ``ends[i]`` its last beat; ``beats`` accepted in total; ``busy_edges`` edges with tvalid high.
* :class:`LeanSink`: ``starts``/``ends`` the same for received frames, ``frames`` the captured
  frames (``capture="all"``: bytes and first-beat tuser; ``"first"``: the first beat's data as an
  int and the byte length; ``"none"``: the byte length only), ``beats``.
"""
from __future__ import annotations

from collections import deque

import cocotb
from cocotb.triggers import RisingEdge

__all__ = ["LeanEngine", "LeanSource", "LeanSink", "frame_beats"]


def frame_beats(frame: bytes, width_bytes: int = 64):
    """``[(data_int, keep_int, last)]`` of one frame (little-endian byte lanes, AXI-Stream)."""
    n = len(frame)
    beats = []
    for off in range(0, max(n, 1), width_bytes):
        chunk = frame[off:off + width_bytes]
        beats.append((int.from_bytes(chunk, "little"), (1 << len(chunk)) - 1,
                      off + width_bytes >= n))
    return beats


def _sig(dut, name, required=True):
    try:
        return getattr(dut, name)
    except AttributeError:
        if required:
            raise
        return None



def _attach(port, dut, prefix, width_bytes):
    """The AXI-Stream signals ``<prefix>_t*`` of ``dut`` as attributes of ``port``."""
    port.prefix = prefix
    port.wb = width_bytes
    port.tdata = _sig(dut, f"{prefix}_tdata")
    port.tkeep = _sig(dut, f"{prefix}_tkeep", False)
    port.tvalid = _sig(dut, f"{prefix}_tvalid")
    port.tlast = _sig(dut, f"{prefix}_tlast", False)
    port.tuser = _sig(dut, f"{prefix}_tuser", False)
    port.tready = _sig(dut, f"{prefix}_tready", False)

class LeanSource:
    """Drives ``<prefix>_{tdata,tkeep,tvalid,tlast,tuser}``; honours ``<prefix>_tready`` when the
    DUT has one. ``idle`` is an optional iterator of booleans: a True inserts one idle cycle
    before the next beat is offered (only between beats: a beat once offered is held)."""

    def __init__(self, dut, prefix, *, width_bytes=64, idle=None):
        _attach(self, dut, prefix, width_bytes)
        self.idle = idle
        self.queue = deque()          # (beats, user)
        self._cur = None              # beats of the frame being sent
        self._idx = 0
        self._offered = False         # a beat is on the bus (tvalid driven high)
        self._drv = {}                # last value driven per handle name (skip repeats)
        self.starts, self.ends = [], []
        self.beats = 0
        self.frames_sent = 0
        self.busy_edges = 0
        self.tvalid.value = 0
        self._drv["tvalid"] = 0

    def _put(self, name, handle, value):
        # a signal access costs ~10 us under cocotb; write only what changes
        if self._drv.get(name) != value:
            handle.value = value
            self._drv[name] = value

    def send(self, frame: bytes, user: int = 0):
        self.queue.append((frame_beats(bytes(frame), self.wb), user))

    def send_beats(self, beats, user: int = 0):
        """Queue precomputed ``frame_beats`` (lets a benchmark reuse one frame's beats)."""
        self.queue.append((beats, user))

    def idle_now(self):
        return self._cur is None and not self.queue and not self._offered

    def step(self, cycle):
        if self._offered:
            self.busy_edges += 1
            if self.tready is None or self.tready.value:
                self.beats += 1
                if self._idx == 0:
                    self.starts.append(cycle)
                self._idx += 1
                if self._idx == len(self._cur):
                    self.ends.append(cycle)
                    self.frames_sent += 1
                    self._cur = None
                self._offered = False
            else:
                return                      # held: nothing changes on the bus
        # offer the next beat
        if self._cur is None:
            if not self.queue:
                self._put("tvalid", self.tvalid, 0)
                return
            self._cur, user = self.queue.popleft()
            self._idx = 0
            if self.tuser is not None:
                self._put("tuser", self.tuser, user)
        if self.idle is not None and next(self.idle):
            self._put("tvalid", self.tvalid, 0)
            return
        data, keep, last = self._cur[self._idx]
        self._put("tdata", self.tdata, data)
        if self.tkeep is not None:
            self._put("tkeep", self.tkeep, keep)
        if self.tlast is not None:
            self._put("tlast", self.tlast, 1 if last else 0)
        self._put("tvalid", self.tvalid, 1)
        self._offered = True


class LeanSink:
    """Samples ``<prefix>_*``; drives ``<prefix>_tready`` (1, or from ``pause``: an iterator of
    booleans, True = not ready this cycle)."""

    def __init__(self, dut, prefix, *, width_bytes=64, pause=None, capture="all"):
        if capture not in ("all", "first", "none"):
            raise ValueError(capture)
        _attach(self, dut, prefix, width_bytes)
        self.pause = pause
        self.capture = capture
        self._ready = True
        self._in = False              # inside a frame
        self._buf = bytearray()
        self._len = 0
        self._first = 0
        self._user = 0
        self.starts, self.ends = [], []
        self.frames = []
        self.beats = 0
        if self.tready is not None:
            self.tready.value = 1

    def step(self, cycle):
        if self._ready and self.tvalid.value:
            self.beats += 1
            last = self.tlast is None or self.tlast.value
            if not self._in:
                self.starts.append(cycle)
                self._in = True
                self._len = 0
                if self.capture != "none":
                    self._first = self.tdata.value.to_unsigned()
                if self.tuser is not None and self.capture != "none":
                    self._user = self.tuser.value.to_unsigned()
            if last or self.capture == "all":
                nbytes = (self.tkeep.value.to_unsigned().bit_count()
                          if self.tkeep is not None else self.wb)
            else:
                nbytes = self.wb
            if self.capture == "all":
                self._buf += self.tdata.value.to_unsigned().to_bytes(self.wb, "little")[:nbytes]
            self._len += nbytes
            if last:
                self.ends.append(cycle)
                self._in = False
                if self.capture == "all":
                    self.frames.append((bytes(self._buf), self._user))
                    self._buf = bytearray()
                elif self.capture == "first":
                    self.frames.append((self._first, self._len, self._user))
                else:
                    self.frames.append(self._len)
        if self.pause is not None and self.tready is not None:
            r = not next(self.pause)
            if r != self._ready:
                self.tready.value = 1 if r else 0
                self._ready = r
        elif self.tready is None:
            self._ready = True


class LeanEngine:
    """One coroutine per clock: counts edges and steps every agent after each rising edge.
    ``hooks`` are extra callables ``f(cycle)`` run after the agents (e.g. a MAC model).
    ``agents`` and ``hooks`` may be replaced while the engine runs (the next edge uses the
    new lists)."""

    def __init__(self, clk):
        self.clk = clk
        self.cycle = 0
        self.agents = []
        self.hooks = []
        self._task = None
        self._stop = False

    def add(self, agent):
        self.agents.append(agent)
        return agent

    def start(self):
        self._stop = False
        self._task = cocotb.start_soon(self._run())
        return self._task

    def stop(self):
        self._stop = True

    async def _run(self):
        edge = RisingEdge(self.clk)
        while not self._stop:
            await edge
            self.cycle += 1
            c = self.cycle
            # read the lists every cycle: a benchmark swaps agents between measurements
            for a in self.agents:
                a.step(c)
            for h in self.hooks:
                h(c)

    async def run_until(self, done, *, timeout=None, poll=64):
        """Run (starting the engine if needed) until ``done()`` is true, checked every
        ``poll`` cycles; returns False on timeout (in cycles)."""
        if self._task is None or self._task.done():
            self.start()
        start = self.cycle
        edge = RisingEdge(self.clk)
        while not done():
            for _ in range(poll):
                await edge
            if timeout is not None and self.cycle - start > timeout:
                return False
        return True
