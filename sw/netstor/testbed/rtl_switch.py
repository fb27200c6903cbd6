"""RTL in the loop: the whole core (Verilator, shared ``build/sim/core``) as a switch on real
Linux interfaces.

Run by ``netstor.testbed.switch --dataplane rtl`` through ``core_build.run_core("rtl_switch",
"rtl_switch", extra_env=...)``; the simulator process inherits the caller's network namespace.
Environment:

* ``NETSTOR_RTL_IF0`` / ``NETSTOR_RTL_IF1``: the interfaces of wire ports 0 and 1 (AF_PACKET,
  :class:`netstor.testbed.ports.PortSocket`: own transmissions ignored, partial checksums
  completed);
* ``NETSTOR_RTL_WRITES``: JSON ``{"writes": [[memory, address, word]...], "regs": [[name,
  value]...]}``, the configuration's control-plane operations
  (:func:`netstor.compiler.config_ops`), applied over AXI-Lite through the project's
  ``AsyncCsrClient`` and mirrored into the golden model (``CoreEnv.apply``);
* ``NETSTOR_RTL_READY``: a file touched once the tables are programmed and the sockets open;
* ``NETSTOR_RTL_STOP``: the run ends when this file appears; also after
  ``NETSTOR_RTL_DURATION`` seconds (wall clock) or ``NETSTOR_RTL_MAX_FRAMES`` input frames;
* ``NETSTOR_RTL_STATS``: JSON statistics (the switch's schema, ``dataplane`` = the hardware
  counters read over AXI-Lite at the end, plus ``model_counters``, ``counter_mismatches``,
  ``output_problems``, ``cycles``, ``sim_khz``), rewritten about once a second while running;
* ``NETSTOR_RTL_POLL_CYCLES``: clock cycles between two socket polls (default 16).

Every frame received is sent into the core's wire RX port (cocotbext-axi source of
``CoreEnv``) and run through the golden model too; every frame the core emits on wire TX is
transmitted on that port's interface, host RX outputs are counted. At the end the outputs
(as multisets per port) and the counters are compared with the model; a mismatch fails the
test after the statistics are written.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import cocotb
from cocotb.triggers import ClockCycles

from netstor.sim.core_env import CoreEnv
from netstor.testbed.ports import PortSocket
from netstor.testbed.stats import SwitchStats, write_json_atomic


def _env(name, default=None):
    v = os.environ.get(name)
    return default if v in (None, "") else v


@cocotb.test()
async def rtl_switch(dut):
    env = CoreEnv(dut)
    await env.reset()
    P = env.P
    ops = json.loads(_env("NETSTOR_RTL_WRITES", '{"writes": [], "regs": []}'))
    if isinstance(ops, list):
        ops = {"writes": ops, "regs": []}
    for mem, addr, word in ops.get("writes", []):
        await env.apply([(mem, addr, word)])
    for name, value in ops.get("regs", []):
        await env.reg_write(name, value)
    ifaces = [_env("NETSTOR_RTL_IF0"), _env("NETSTOR_RTL_IF1")]
    socks = [PortSocket(i) for i in ifaces]
    stop_file = Path(_env("NETSTOR_RTL_STOP", "/nonexistent/stop"))
    stats_file = _env("NETSTOR_RTL_STATS")
    duration = float(_env("NETSTOR_RTL_DURATION", "60"))
    max_frames = int(_env("NETSTOR_RTL_MAX_FRAMES", "0")) or None
    poll = int(_env("NETSTOR_RTL_POLL_CYCLES", "16"))
    stats = SwitchStats(P, "rtl")
    ready = _env("NETSTOR_RTL_READY")
    if ready:
        Path(ready).touch()
    dut._log.info(f"rtl switch: ports {ifaces}, {len(ops.get('writes', []))} table writes")

    t0 = time.monotonic()
    cycles = 0
    frames_in = 0
    next_dump = t0 + 1.0

    def expected_total():
        return sum(len(v) for v in env.expected.values())

    def drain_outputs():
        for q, sink in env.sink.items():
            while not sink.empty():
                f = sink.recv_nowait()
                data = bytes(f.tdata)
                u = f.tuser if isinstance(f.tuser, int) else (f.tuser[0] if f.tuser else 0)
                env.received[q].append((data, int(u)))
                stats.outputs([(q, data)], socks)

    def snapshot(extra=None):
        d = stats.as_dict({})
        d.update({"cycles": cycles, "frames_in": frames_in,
                  "sim_khz": round(cycles / max(time.monotonic() - t0, 1e-9) / 1e3, 2)})
        d.update(extra or {})
        return d

    try:
        while True:
            await ClockCycles(dut.clk, poll)
            cycles += poll
            for p, s in enumerate(socks):
                for frame in s.recv_frames(16):
                    stats.rx(p, frame)
                    before = expected_total()
                    await env.send(frame, p)
                    if expected_total() == before:
                        stats.drops += 1
                    frames_in += 1
            drain_outputs()
            now = time.monotonic()
            if stats_file and now >= next_dump:
                write_json_atomic(stats_file, snapshot())
                next_dump = now + 1.0
            if stop_file.exists() or now - t0 > duration or (
                    max_frames is not None and frames_in >= max_frames):
                break
        # let what is inside the core come out, still forwarding it
        for _ in range(50):
            await ClockCycles(dut.clk, 100)
            cycles += 100
            drain_outputs()
            if all(s.idle() for s in env.src.values()) and all(
                    len(env.received[q]) >= len(v) for q, v in env.expected.items()):
                break
        await ClockCycles(dut.clk, 200)
        cycles += 200
        drain_outputs()
    finally:
        for s in socks:
            s.close()

    # compare with the golden model: outputs (multisets per port), then every counter
    problems = []
    try:
        env.check_outputs()
    except AssertionError as e:
        problems.append(str(e))
    model = env.model.counters()
    schema_counters = {c["name"] for c in env.schema["counters"]}
    hw = {}
    for name in sorted(schema_counters):
        hw[name] = await env.csr.counter_read(name)
    mismatches = {n: {"hw": hw[n], "model": model[n]} for n in sorted(model)
                  if n in hw and hw[n] != model[n]}
    final = snapshot({"dataplane": hw, "model_counters": model,
                      "counter_mismatches": mismatches, "output_problems": problems,
                      "elapsed_s": round(time.monotonic() - t0, 3)})
    if stats_file:
        write_json_atomic(stats_file, final)
    dut._log.info(f"rtl switch: {frames_in} frames in, {cycles} cycles, "
                  f"{final['sim_khz']} kHz simulated")
    assert not problems and not mismatches, (
        f"RTL disagrees with the model: {problems} {mismatches}")
