"""A software switch around the netstor data plane, on real Linux interfaces.

``python -m netstor.testbed.switch --port0 IF0 --port1 IF1 [--dataplane model|rtl]
[--config FILE] [--stats-json FILE] [--host-pcap FILE]`` (also ``netstor switch ...``,
through :func:`main`).

Each interface is opened as an AF_PACKET raw socket (``ETH_P_ALL``, promiscuous) and is wire
port 0 / 1 of the data plane: every frame received on it is passed to the data plane as wire RX
of that port, every wire TX output is transmitted on the port's interface. Frames the switch
itself transmitted (``PACKET_OUTGOING``) are ignored, so nothing loops back.

Outputs to the host ports (``P..2P-1``: what the NIC would hand to the host, e.g. unrouted
traffic) are counted per port and, with ``--host-pcap``, written to a pcap file (one file; the
host port number is not recorded in it) -- no TAP device, so the switch never creates links.

Checksum offload: a frame a Linux host sends through a veth keeps a *partial* L4 checksum
(``CHECKSUM_PARTIAL``: the field holds only the pseudo-header sum). AF_PACKET reports that in
``PACKET_AUXDATA`` (``TP_STATUS_CSUMNOTREADY``); the switch completes the UDP/TCP checksum of
such frames before the data plane sees them, as a real NIC's peer would have put it on the
wire. The data plane then updates it incrementally (spec: RFC 1624), so receivers accept it.

Data planes: ``model`` (default) is the golden model :class:`netstor.model.DataplaneModel`
(about 10k frames/s in Python); ``rtl`` runs the whole core in Verilator with the cocotb
module ``sim/rtl_switch.py`` (the shared ``build/sim/core`` build), which opens the same two
sockets itself and programs the same table writes over AXI-Lite.

Table configuration: ``--config`` is a YAML/TOML/JSON file in the netstor config format
(:mod:`netstor.config`); :func:`config_ops` turns it into the writes both data planes get.
Without ``--config`` the tables keep their reset contents (``l3``: everything to the host).
With ``--control PATH`` (model only) the model's control window is served at that Unix socket,
so ``netstor --device unix:PATH ...`` and the controller can change tables while it forwards.

The switch prints ``netstor-switch ready port0=IF0 port1=IF1 dataplane=KIND`` when it
forwards, and on SIGTERM/SIGINT prints (and writes to ``--stats-json``) its final counters:
``ports`` (frames/bytes in and out per wire port), ``to_host`` (per host port), ``drops``
(frames that produced no output), ``tx_errors``, and ``dataplane`` (the data plane's own
counters, the names of ``docs/dataplane-spec.md``). ``--stats-json`` is also rewritten about
once a second while running. The model switch also reports ``timing`` per wire port it
received on: ``frames``, ``process_us`` (mean wall time of the data plane per input frame,
the model's cost) and ``sojourn_us`` (mean, p50/p99 bucket bounds, max: from the kernel's
receive timestamp of the frame to the end of its transmission by the switch, i.e. the
switch's own queueing plus processing).
"""
from __future__ import annotations

import argparse
import json
import select
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from netstor.compiler import config_ops
from netstor.testbed.dataplanes import ModelDataplane
from netstor.testbed.ports import PcapWriter, PortSocket
from netstor.testbed.stats import SwitchStats, format_stats, write_json_atomic

__all__ = ["run_model_switch", "run_rtl_switch", "main"]


# ---- the switch loops ---------------------------------------------------------------------------
class _Stop:
    def __init__(self):
        self.flag = False
        self.old = {}

    def install(self):
        for s in (signal.SIGTERM, signal.SIGINT):
            self.old[s] = signal.signal(s, self._handler)

    def _handler(self, signum, frame):
        self.flag = True

    def restore(self):
        for s, h in self.old.items():
            signal.signal(s, h)


def run_model_switch(ifaces, writes, regs=(), *, stats_json=None, host_pcap=None, stop=None,
                     duration=None, control=None, out=None, pipeline=None, groups=None,
                     dataplane=None):
    """Forward between ``ifaces`` through the golden model until ``stop.flag`` (or
    ``duration`` seconds); returns the final stats dict. ``pipeline``, ``groups``: the
    model's (:class:`ModelDataplane`; default the default pipeline). ``dataplane``: a
    :class:`ModelDataplane` the caller built (and may change at run time under its
    ``lock``); ``writes``, ``regs``, ``control``, ``pipeline``, ``groups`` are then unused."""
    out = out or sys.stdout
    socks = [PortSocket(i, timestamps=True) for i in ifaces]
    try:
        dp = dataplane or ModelDataplane(writes, regs, control=control, pipeline=pipeline,
                                         groups=groups)
    except BaseException:
        for s in socks:
            s.close()
        raise
    stats = SwitchStats(dp.P, "model")
    pcap = PcapWriter(host_pcap) if host_pcap else None
    stop = stop or _Stop()
    try:
        print(f"netstor-switch ready port0={ifaces[0]} port1={ifaces[1]} dataplane=model"
              + (f" control=unix:{control}" if control else ""), file=out, flush=True)
        t_end = time.monotonic() + duration if duration else None
        next_dump = time.monotonic() + 1.0
        while not stop.flag:
            now = time.monotonic()
            if t_end is not None and now >= t_end:
                break
            if stats_json and now >= next_dump:
                write_json_atomic(stats_json, stats.as_dict(dp.counters()))
                next_dump = now + 1.0
            try:
                ready, _, _ = select.select(socks, [], [], 0.2)
            except InterruptedError:
                continue
            for port, s in enumerate(socks):
                if s not in ready:
                    continue
                frames = s.recv_frames(64)
                for frame, stamp in zip(frames, s.stamps):
                    stats.rx(port, frame)
                    t = time.perf_counter_ns()
                    outs = dp.process(frame, port)
                    dt = time.perf_counter_ns() - t
                    stats.outputs(outs, socks, pcap)
                    stats.timed(port, dt, stamp)
        final = stats.as_dict(dp.counters())
    finally:
        dp.close()
        for s in socks:
            s.close()
        if pcap:
            pcap.close()
    if stats_json:
        write_json_atomic(stats_json, final)
    return final


def run_rtl_switch(ifaces, writes, regs=(), *, stats_json=None, stop=None, duration=None,
                   max_frames=None, poll_cycles=None, out=None):
    """Forward between ``ifaces`` through the RTL in Verilator (``sim/rtl_switch.py`` on the
    shared core build) until ``stop.flag`` (or ``duration``/``max_frames``); returns the final
    stats (``dataplane``: hardware counters read over AXI-Lite; ``model_counters``: the golden
    model's for the same frames; ``counter_mismatches``)."""
    from netstor.sim.core_build import run_core     # Verilator and cocotb: only for this job
    out = out or sys.stdout
    stop = stop or _Stop()
    work = Path(tempfile.mkdtemp(prefix="netstor-rtl-switch-"))
    env = {"NETSTOR_RTL_IF0": ifaces[0], "NETSTOR_RTL_IF1": ifaces[1],
           "NETSTOR_RTL_WRITES": json.dumps({"writes": [[m, a, w] for m, a, w in writes],
                                             "regs": [[n, v] for n, v in regs]}),
           "NETSTOR_RTL_STOP": str(work / "stop"), "NETSTOR_RTL_READY": str(work / "ready"),
           "NETSTOR_RTL_STATS": str(work / "stats.json"),
           "NETSTOR_RTL_DURATION": str(duration or 3600)}
    if max_frames:
        env["NETSTOR_RTL_MAX_FRAMES"] = str(max_frames)
    if poll_cycles:
        env["NETSTOR_RTL_POLL_CYCLES"] = str(poll_cycles)
    result = {}

    def runner():
        try:
            run_core("netstor.testbed.rtl_switch", "rtl_switch", extra_env=env)
        except BaseException as e:    # reported after the join
            result["error"] = e
    th = threading.Thread(target=runner, daemon=True)
    th.start()
    announced = False
    t_end = time.monotonic() + (duration or 3600) + 600
    while th.is_alive() and time.monotonic() < t_end:
        if not announced and (work / "ready").exists():
            print(f"netstor-switch ready port0={ifaces[0]} port1={ifaces[1]} dataplane=rtl",
                  file=out, flush=True)
            announced = True
        if stop.flag:
            (work / "stop").touch()
        if stats_json and (work / "stats.json").exists():
            try:    # the simulation rewrites its statistics about once a second
                write_json_atomic(stats_json, json.loads((work / "stats.json").read_text()))
            except (OSError, ValueError):
                pass
        th.join(0.2)
    (work / "stop").touch()
    th.join(120)
    try:
        final = json.loads((work / "stats.json").read_text())
    except (OSError, ValueError):
        final = {"dataplane_kind": "rtl", "error": "the simulation wrote no statistics"}
    if "error" in result:
        final["error"] = f"{type(result['error']).__name__}: {result['error']}"
    if stats_json:
        write_json_atomic(stats_json, final)
    return final


def main(argv=None):
    ap = argparse.ArgumentParser(prog="netstor switch", description=__doc__.split("\n\n")[0])
    ap.add_argument("--port0", required=True, help="interface of wire port 0")
    ap.add_argument("--port1", required=True, help="interface of wire port 1")
    ap.add_argument("--dataplane", choices=["model", "rtl"], default="model")
    ap.add_argument("--config", help="table configuration (YAML/TOML/JSON)")
    ap.add_argument("--stats-json", help="write the counters here (final, and ~1/s)")
    ap.add_argument("--host-pcap", help="write frames sent to host ports to this pcap")
    ap.add_argument("--duration", type=float, help="stop after this many seconds")
    ap.add_argument("--max-frames", type=int, help="rtl: stop after this many input frames")
    ap.add_argument("--control", metavar="PATH",
                    help="model: serve the control window at this Unix socket "
                         "(device unix:PATH)")
    args = ap.parse_args(argv)
    if args.control and args.dataplane != "model":
        ap.error("--control is only available with --dataplane model")
    if args.duration is not None and not 0 < args.duration < float("inf"):
        ap.error(f"--duration {args.duration} must be a number of seconds > 0")
    if args.max_frames is not None and args.max_frames < 1:
        ap.error(f"--max-frames {args.max_frames} must be >= 1")
    for opt in ("port0", "port1"):
        try:
            socket.if_nametoindex(getattr(args, opt))
        except OSError:
            ap.error(f"--{opt} {getattr(args, opt)!r}: no such network interface")
    try:
        writes, regs = config_ops(args.config) if args.config else ([], [])
    except ValueError as e:         # ConfigError and the host API's value errors
        print(f"netstor switch: error: {e}", file=sys.stderr)
        return 1
    stop = _Stop()
    stop.install()
    try:
        if args.dataplane == "model":
            final = run_model_switch([args.port0, args.port1], writes, regs,
                                     stats_json=args.stats_json, host_pcap=args.host_pcap,
                                     stop=stop, duration=args.duration, control=args.control)
        else:
            final = run_rtl_switch([args.port0, args.port1], writes, regs,
                                   stats_json=args.stats_json, stop=stop,
                                   duration=args.duration, max_frames=args.max_frames)
    finally:
        stop.restore()
    print(format_stats(final), flush=True)
    return 1 if final.get("error") else 0


if __name__ == "__main__":
    sys.exit(main())
