"""The switch's own statistics (per-port frames and bytes, frames to the host, drops, data-plane
time and sojourn per frame), the same schema for the model and the RTL data plane; their JSON
file (rewritten atomically) and their text form."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

__all__ = ["SwitchStats", "write_json_atomic", "format_stats"]


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


def write_json_atomic(path, obj):
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True))
    os.replace(tmp, path)


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
