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
import ctypes
import errno
import json
import os
import select
import signal
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["PortSocket", "complete_checksum", "config_ops", "config_writes", "ModelDataplane",
           "SwitchStats", "run_model_switch", "run_rtl_switch", "main"]

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_AUXDATA = 8
TP_STATUS_CSUMNOTREADY = 8
PACKET_OUTGOING = 4
SO_TIMESTAMPNS = 35
_AUX = struct.Struct("=IIIHHHH")      # struct tpacket_auxdata
ROOT = Path(__file__).resolve().parents[3]


# ---- raw sockets ------------------------------------------------------------------------------
def _if_index(ifname):
    return socket.if_nametoindex(ifname)


class PortSocket:
    """One data-plane port on a Linux interface (AF_PACKET, ETH_P_ALL, non-blocking)."""

    def __init__(self, ifname, *, rcvbuf=4 << 20, timestamps=False):
        """``timestamps``: keep the kernel's receive time (ns, CLOCK_REALTIME) of every frame
        :meth:`recv_frames` returns in ``self.stamps`` (same order; 0 when missing)."""
        self.ifname = ifname
        self.timestamps = timestamps
        self.stamps = []
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, rcvbuf)
            s.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
            if timestamps:
                s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            s.bind((ifname, ETH_P_ALL))
            mreq = struct.pack("iHH8s", _if_index(ifname), PACKET_MR_PROMISC, 0, b"")
            s.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
            s.setblocking(False)
        except BaseException:
            s.close()
            raise
        self.sock = s

    def fileno(self):
        return self.sock.fileno()

    def recv_frames(self, max_frames=64):
        """Up to ``max_frames`` received frames (never our own transmissions), checksums
        completed; ``[]`` when nothing is pending."""
        out = []
        stamps = self.stamps = []
        anc_size = socket.CMSG_SPACE(_AUX.size) + (socket.CMSG_SPACE(16) if self.timestamps
                                                   else 0)
        for _ in range(max_frames):
            try:
                data, anc, _flags, addr = self.sock.recvmsg(65536, anc_size)
            except (BlockingIOError, InterruptedError):
                break
            if addr[2] == PACKET_OUTGOING:
                continue
            status = stamp = 0
            for level, typ, cdata in anc:
                if level == SOL_PACKET and typ == PACKET_AUXDATA and len(cdata) >= _AUX.size:
                    status = _AUX.unpack_from(cdata)[0]
                elif level == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS and len(cdata) >= 16:
                    sec, nsec = struct.unpack_from("=qq", cdata)
                    stamp = sec * 1_000_000_000 + nsec
            if self.timestamps:
                stamps.append(stamp)
            if status & TP_STATUS_CSUMNOTREADY:
                data = complete_checksum(data)
            out.append(data)
        return out

    def send(self, frame) -> bool:
        try:
            self.sock.send(frame)
            return True
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as e:
            if e.errno in (errno.ENOBUFS, errno.EMSGSIZE, errno.ENETDOWN, errno.ENXIO):
                return False
            raise

    def close(self):
        self.sock.close()


def _csum16(data: bytes, start=0) -> int:
    if len(data) & 1:
        data += b"\0"
    s = start + sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def complete_checksum(frame: bytes) -> bytes:
    """Fill in the full UDP/TCP checksum of an IPv4 frame whose checksum is partial (the
    kernel's ``CHECKSUM_PARTIAL``); other frames are returned unchanged."""
    l3 = 14
    et = struct.unpack_from("!H", frame, 12)[0] if len(frame) >= 14 else 0
    if et == 0x8100 and len(frame) >= 18:
        et = struct.unpack_from("!H", frame, 16)[0]
        l3 = 18
    if et != 0x0800 or len(frame) < l3 + 20:
        return frame
    ihl = (frame[l3] & 15) * 4
    total = struct.unpack_from("!H", frame, l3 + 2)[0]
    proto = frame[l3 + 9]
    frag = struct.unpack_from("!H", frame, l3 + 6)[0] & 0x3FFF
    l4 = l3 + ihl
    end = l3 + total
    if frag or end > len(frame) or ihl < 20:
        return frame
    off = {17: 6, 6: 16}.get(proto)
    if off is None or end < l4 + off + 2:
        return frame
    f = bytearray(frame)
    f[l4 + off:l4 + off + 2] = b"\0\0"
    pseudo = bytes(f[l3 + 12:l3 + 20]) + struct.pack("!BBH", 0, proto, end - l4)
    c = (~_csum16(bytes(f[l4:end]), _csum16(pseudo))) & 0xFFFF
    if c == 0 and proto == 17:
        c = 0xFFFF
    struct.pack_into("!H", f, l4 + off, c)
    return bytes(f)


# ---- configuration ---------------------------------------------------------------------------
def config_ops(cfg, schema=None):
    """The control-plane operations that the configuration ``cfg`` (dict or YAML/TOML/JSON path,
    :mod:`netstor.config` format) performs on a fresh data plane: ``(writes, regs)`` with
    ``writes = [(memory, address, word)]`` and ``regs = [(register, value)]``, in order.

    They are recorded while :meth:`netstor.api.Device.apply` configures a scratch golden model,
    so the model switch and the RTL switch (which replays them over AXI-Lite) get exactly the
    same writes, validated by the one config loader."""
    from netstor.api import Device
    from netstor.model.dataplane import DataplaneModel
    from netstor.programs import default_pipeline
    dev = Device.open("model", schema=schema, model=DataplaneModel(default_pipeline()))
    writes, regs = [], []
    client = dev.client
    mem_write, reg_write = client.mem_write, client.reg_write

    def rec_mem(name, addr, word):
        writes.append((name, addr, word))
        mem_write(name, addr, word)

    def rec_reg(name, value):
        regs.append((name, value))
        reg_write(name, value)
    client.mem_write, client.reg_write = rec_mem, rec_reg
    dev.apply(cfg)
    return writes, regs


def config_writes(pipeline, cfg):
    """The memory writes of :func:`config_ops` (``pipeline`` must be the default one, which
    the schema describes; kept for callers that only program tables)."""
    return config_ops(cfg)[0]


# ---- data planes ------------------------------------------------------------------------------
class ModelDataplane:
    """The golden model as the switch's data plane."""
    kind = "model"

    def __init__(self, writes=(), regs=(), *, control=None, schema=None):
        """``control``: serve the model's control window at this Unix socket path (device
        ``unix:PATH`` for ``netstor --device`` and the controller)."""
        import threading
        from netstor.programs import default_pipeline
        from netstor.model.dataplane import DataplaneModel
        from netstor.driver.tables import apply_writes
        self.pipeline = default_pipeline()
        self.P = self.pipeline.n_ports
        self.model = DataplaneModel(self.pipeline)
        apply_writes(self.model, writes)
        for name, value in regs:
            self.model.reg_write(name, value)
        self.lock = threading.Lock()
        self.server = None
        if control:
            from netstor.api import load_schema
            from netstor.driver.remote import WindowServer
            from netstor.driver.transports import ModelTransport
            self.server = WindowServer(ModelTransport(self.model, load_schema(schema)),
                                       control, self.lock).start()

    def process(self, frame, port):
        # the arrival timestamp a card would give: its 250 MHz core clock (32 bits); NetRS
        # times responses with it
        arrival = (time.monotonic_ns() >> 2) & 0xFFFF_FFFF
        with self.lock:
            return [(o.port, o.frame) for o in self.model.process(frame, port,
                                                                    arrival=arrival)]

    def counters(self):
        with self.lock:
            return self.model.counters()

    def close(self):
        if self.server:
            self.server.stop()
            self.server = None


class SwitchStats:
    """Per-port frame/byte counts of the switch process (same schema for model and RTL)."""

    def __init__(self, P=2, kind="model"):
        self.P, self.kind = P, kind
        self.ports = {p: {"rx_frames": 0, "rx_bytes": 0, "tx_frames": 0, "tx_bytes": 0}
                      for p in range(P)}
        self.to_host = {q: 0 for q in range(P, 2 * P)}
        self.drops = 0
        self.tx_errors = 0
        self.t0 = time.monotonic()
        # per input port: data-plane wall time and sojourn (kernel RX stamp to sent), ns
        self.timing = {p: {"frames": 0, "process_ns": 0, "sojourn_n": 0, "sojourn_ns": 0,
                           "sojourn_max_ns": 0, "sojourn_hist": [0] * 24} for p in range(P)}

    def timed(self, port, process_ns, stamp_ns=0):
        """Account one input frame's data-plane time and, with its kernel receive stamp
        (CLOCK_REALTIME ns), its sojourn in the switch up to now."""
        t = self.timing[port]
        t["frames"] += 1
        t["process_ns"] += process_ns
        if stamp_ns:
            d = max(0, time.time_ns() - stamp_ns)
            t["sojourn_n"] += 1
            t["sojourn_ns"] += d
            t["sojourn_max_ns"] = max(t["sojourn_max_ns"], d)
            # buckets of a factor 2 from 1 us: bucket b holds [2^(b-1), 2^b) us
            t["sojourn_hist"][min(23, (d // 1000).bit_length())] += 1

    def timing_dict(self):
        def bound(hist, n, p):
            acc = 0
            for b, c in enumerate(hist):
                acc += c
                if acc >= p / 100 * n:
                    return 1 << b
            return None
        out = {}
        for p, t in self.timing.items():
            if not t["frames"]:
                continue
            n = t["sojourn_n"]
            out[str(p)] = {
                "frames": t["frames"],
                "process_us": round(t["process_ns"] / t["frames"] / 1e3, 1),
                "sojourn_us": ({"mean": round(t["sojourn_ns"] / n / 1e3, 1),
                                "p50_le": bound(t["sojourn_hist"], n, 50),
                                "p99_le": bound(t["sojourn_hist"], n, 99),
                                "max": round(t["sojourn_max_ns"] / 1e3, 1)} if n else None)}
        return out

    def rx(self, port, frame):
        self.ports[port]["rx_frames"] += 1
        self.ports[port]["rx_bytes"] += len(frame)

    def outputs(self, outs, socks, pcap=None):
        """Account (and transmit) the data plane's outputs ``[(port, frame)]`` of one frame."""
        if not outs:
            self.drops += 1
        for q, f in outs:
            if q < self.P:
                if socks[q].send(f):
                    self.ports[q]["tx_frames"] += 1
                    self.ports[q]["tx_bytes"] += len(f)
                else:
                    self.tx_errors += 1
            else:
                self.to_host[q] = self.to_host.get(q, 0) + 1
                if pcap is not None:
                    pcap.write(f)

    def as_dict(self, dataplane_counters=None):
        return {"dataplane_kind": self.kind, "elapsed_s": round(time.monotonic() - self.t0, 3),
                "ports": {str(p): dict(v) for p, v in self.ports.items()},
                "to_host": {str(q): n for q, n in self.to_host.items()},
                "to_host_total": sum(self.to_host.values()),
                "drops": self.drops, "tx_errors": self.tx_errors,
                "timing": self.timing_dict(),
                "dataplane": dict(dataplane_counters or {})}


class PcapWriter:
    def __init__(self, path):
        self.f = open(path, "wb")
        self.f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))

    def write(self, frame):
        t = time.time()
        self.f.write(struct.pack("<IIII", int(t), int((t % 1) * 1e6), len(frame), len(frame)))
        self.f.write(frame)

    def close(self):
        self.f.close()


def write_json_atomic(path, obj):
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True))
    os.replace(tmp, path)


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
                     duration=None, control=None, out=None):
    """Forward between ``ifaces`` through the golden model until ``stop.flag`` (or
    ``duration`` seconds); returns the final stats dict."""
    out = out or sys.stdout
    socks = [PortSocket(i, timestamps=True) for i in ifaces]
    try:
        dp = ModelDataplane(writes, regs, control=control)
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
    if str(ROOT / "sim") not in sys.path:
        sys.path.insert(0, str(ROOT / "sim"))
    from core_build import run_core
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
    import threading
    result = {}

    def runner():
        try:
            run_core("rtl_switch", "rtl_switch", extra_env=env)
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


def format_stats(st):
    lines = [f"netstor-switch final counters ({st.get('dataplane_kind')}, "
             f"{st.get('elapsed_s', 0)} s):"]
    for p, v in sorted((st.get("ports") or {}).items()):
        lines.append(f"  port {p}: in {v['rx_frames']} frames / {v['rx_bytes']} B, "
                     f"out {v['tx_frames']} frames / {v['tx_bytes']} B")
    lines.append(f"  to host: {st.get('to_host_total', 0)} {st.get('to_host', {})}, "
                 f"drops: {st.get('drops', 0)}, tx errors: {st.get('tx_errors', 0)}")
    for p, t in sorted((st.get("timing") or {}).items()):
        so = t.get("sojourn_us") or {}
        lines.append(f"  port {p} timing: {t['frames']} frames, data plane {t['process_us']} us"
                     f"/frame, sojourn mean {so.get('mean')} us, p99 <= {so.get('p99_le')} us,"
                     f" max {so.get('max')} us")
    dpc = {k: v for k, v in (st.get("dataplane") or {}).items() if v}
    lines.append("  data plane: " + ", ".join(f"{k}={v}" for k, v in sorted(dpc.items())))
    if st.get("counter_mismatches"):
        lines.append(f"  RTL vs model counter mismatches: {st['counter_mismatches']}")
    if st.get("error"):
        lines.append(f"  ERROR: {st['error']}")
    return "\n".join(lines)


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
    writes, regs = config_ops(args.config) if args.config else ([], [])
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
