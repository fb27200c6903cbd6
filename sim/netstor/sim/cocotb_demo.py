"""The demo's simulation (``make demo``): a realistic traffic mix through the whole core.

Run by ``netstor.sim.demo`` on the shared core build (``core_build``). One cocotb test, ``demo``:

1. configures L3 routes and the ``prim`` program through the AXI-Lite window (every write is
   mirrored into the golden model, as in the core tests);
2. offers a mix of traffic classes on all four inputs (wire RX 0/1, host TX 0/1), paced in
   bursts so the wire RX buffers (which cannot back-pressure) never overflow;
3. timestamps, with a cycle-counter coroutine, the first beat of every frame accepted at an
   input and of every frame leaving an output, and pairs each output with the input frame the
   model says produced it (first beat in -> first beat out, in cycles);
4. compares every output (bytes and tuser), the TX completions, all counters the model keeps
   and the register banks the traffic touched with the golden model;
5. reads every hardware counter over AXI-Lite and writes the figures to
   ``$NETSTOR_DEMO_OUT/report.json`` (also when a check failed, with the problems listed),
   then fails the test if the hardware disagreed with the model.

The stateful parts of ``prim`` (the per-flow counters and the CAS/max cells) are partitioned by
input: each input uses its own flows (checked to hash to distinct counter cells) and its own
cell indices. Arbitration keeps the order within one input, so the model (which sees frames in
the order the testbench sends them) and the hardware agree regardless of how the inputs
interleave.
"""
from __future__ import annotations

import json
import logging
import math
import os
import random
import time
from collections import defaultdict, deque
from pathlib import Path

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamFrame

from netstor.sim.core_env import CoreEnv, setup_prim, setup_routes
from netstor.sim.frames import (udp_frame, prim_frame, arp_frame, ipv6_frame, tcp_frame, bad_frames)
from netstor.gateware.core import APP_ID
from netstor.model.dataplane import DataplaneModel
from netstor.driver.tables import TableWriter, apply_writes
from netstor.programs.primitives import (OP_FORWARD, OP_CAS, OP_MAX, OP_MCAST, OP_RECIRC,
                                         OP_CLONE)

SEED = int(os.environ.get("NETSTOR_SEED", "1"))
FRAMES = int(os.environ.get("NETSTOR_DEMO_FRAMES", "400"))
OUT = Path(os.environ.get("NETSTOR_DEMO_OUT", Path(__file__).resolve().parent.parent
                          / "build" / "demo"))
CLOCK_NS = 4.0                      # 250 MHz

IN_NAMES = ["wire_rx0", "wire_rx1", "host_tx0", "host_tx1"]
OUT_NAMES = ["wire_tx0", "wire_tx1", "host_rx0", "host_rx1"]
OP_BAD_PORT, OP_NO_GROUP = 7, 8     # extra ops: forward to a port that does not exist,
                                    # multicast to a group with no ports (TM drops)

# traffic class -> (weight, what it is)
CLASSES = {
    "l3_udp":      (16, "UDP routed by l3.routes (wire RX -> wire TX)"),
    "l3_tcp":      (8, "TCP routed by l3.routes"),
    "l3_vlan":     (5, "802.1Q-tagged IPv4 routed"),
    "l3_drop":     (3, "to a drop route (10.3.0.0/16)"),
    "to_host":     (8, "wire RX to the host: no route, TTL<=1, route to host RX"),
    "nic_tx":      (12, "host TX -> wire TX (plain NIC path)"),
    "jumbo":       (4, "2-9 KB frames (routed or NIC TX)"),
    "arp":         (4, "ARP (default path)"),
    "ipv6":        (4, "IPv6 (default path)"),
    "prim_count":  (6, "prim forward + per-flow counter"),
    "prim_cas":    (5, "prim compare-and-swap / max on a register cell"),
    "prim_mcast":  (4, "prim multicast to 3 outputs, per-copy tag rewrite"),
    "prim_recirc": (4, "prim recirculation (second pass)"),
    "prim_clone":  (4, "prim forward + clone via recirculation"),
    "prim_acl":    (2, "prim denied by the ternary ACL"),
    "prim_tmdrop": (2, "prim to a missing port / empty multicast group"),
    "malformed":   (9, "bad checksums, truncated, runts, oversize, MAC error"),
}
SIZES = [60, 64, 64, 65, 72, 96, 128, 128, 200, 256, 512, 576, 1024, 1280, 1500, 1518]
JUMBO = [2048, 4000, 8192, 9000, 9000, 9216]
SIZE_BUCKETS = [("<=64", 64), ("65-255", 255), ("256-1023", 1023), ("1024-1518", 1518),
                ("jumbo", 1 << 20)]


def beats(n):
    return max(1, -(-n // 64))


class FirstBeatMonitor:
    """One coroutine for the whole testbench: a cycle counter, and the cycle at which the
    first beat of each frame was accepted (tvalid & tready) on every input and output."""

    def __init__(self, dut):
        self.dut = dut
        self.cycle = 0
        self.chans = []
        for pre in IN_NAMES + OUT_NAMES:
            self.chans.append((getattr(dut, f"{pre}_tvalid"), getattr(dut, f"{pre}_tready"),
                               getattr(dut, f"{pre}_tlast"), []))
        self.inputs = [c[3] for c in self.chans[:4]]     # input port -> [cycle]
        self.outputs = [c[3] for c in self.chans[4:]]    # output -> [cycle]

    async def run(self):
        edge = RisingEdge(self.dut.clk)
        inside = [False] * len(self.chans)
        while True:
            await edge
            self.cycle += 1
            for i, (v, r, last, stamps) in enumerate(self.chans):
                if v.value and r.value:
                    if not inside[i]:
                        stamps.append(self.cycle)
                    inside[i] = not last.value


class Traffic:
    """Builds the frames: ``items`` of dicts (idx, cls, port, frame, user)."""

    def __init__(self, env, rng, n):
        self.env, self.rng, self.n = env, rng, n
        self.flows = self._pick_flows()
        self.items = []
        self._ts = 1_000_000       # wire RX PTP timestamps (ns << 16), increasing

    def _pick_flows(self):
        """Per input port: prim flows (src, sport) whose flow counter cells differ from every
        other port's, so per-flow state is only ever touched from one input."""
        scratch = DataplaneModel(self.env.pipeline)
        trust_all = TableWriter(self.env.pipeline).ternary_add(
            "prim.trust", [0, 0, 0], [0, 0, 0], "trusted", {}, 0)   # scratch: count every flow
        rng = random.Random(99)
        taken = {}
        flows = {}
        for p in range(4):
            mine = []
            cands = [(f"10.0.{p}.1", 1000 + 100 * p + k) for k in range(12)]
            acl = [(f"10.66.{p}.{2 + k}", 666) for k in range(12)]
            for want, pool in ((4, cands), (1, acl)):
                got = 0
                for src, sport in pool:
                    if got == want:
                        break
                    scratch.reset()
                    apply_writes(scratch, trust_all)
                    scratch.process(prim_frame(rng, OP_FORWARD, 80, src=src, sport=sport), 0)
                    cell = next(a for a in range(1024) if scratch.mem_read("prim.flows", a))
                    if taken.get(cell, p) != p:
                        continue
                    taken[cell] = p
                    mine.append((src, sport))
                    got += 1
                assert got == want, f"port {p}: no free flow cells"
            flows[p] = mine
        self.flow_cells = taken
        return flows

    def wire_user(self, err=False):
        self._ts += self.rng.randrange(200, 5000)
        return (self._ts << 17) | int(err)

    def build(self):
        rng = self.rng
        names = list(CLASSES)
        weights = [CLASSES[c][0] for c in names]
        for idx in range(self.n):
            cls = rng.choices(names, weights)[0]
            port, frame, user = getattr(self, "_" + cls)(rng)
            if user is None and port < 2:
                user = self.wire_user()
            self.items.append({"idx": idx, "cls": cls, "port": port, "frame": bytes(frame),
                               "user": user})
        return self.items

    # ---- one generator per class: (port, frame, user or None) -------------------------------
    @staticmethod
    def _size(rng):
        return rng.choice(SIZES)

    def _l3_udp(self, rng):
        dst = rng.choice(["10.1.0.5", "10.1.7.9", "10.1.2.7", "10.2.3.4", "10.2.200.1"])
        return rng.randrange(2), udp_frame(rng, self._size(rng), src="172.16.0.9", dst=dst,
                                           udp_csum=rng.random() < 0.85), None

    def _l3_tcp(self, rng):
        dst = rng.choice(["10.1.0.7", "10.1.2.8", "10.2.9.9"])
        return rng.randrange(2), tcp_frame(rng, max(self._size(rng), 60), dst=dst), None

    def _l3_vlan(self, rng):
        dst = rng.choice(["10.1.0.5", "10.2.3.4", "10.1.2.3"])
        return rng.randrange(2), udp_frame(rng, max(self._size(rng), 64), dst=dst,
                                           vlan=rng.choice([10, 20, 4000])), None

    def _l3_drop(self, rng):
        return rng.randrange(2), udp_frame(rng, self._size(rng), dst="10.3.4.5"), None

    def _to_host(self, rng):
        k = rng.randrange(3)
        if k == 0:      # no route: default action to_host
            f = udp_frame(rng, self._size(rng), dst=rng.choice(["192.168.0.1", "8.8.8.8"]))
        elif k == 1:    # TTL 1: punted, not routed
            f = udp_frame(rng, self._size(rng), dst="10.1.0.5", ttl=1)
        else:           # /32 route whose port is host RX 0
            f = tcp_frame(rng, max(self._size(rng), 60), dst="10.9.9.9")
        return rng.randrange(2), f, None

    def _nic_tx(self, rng):
        dst = rng.choice(["10.1.0.5", "192.168.1.1", "10.3.0.1"])   # no routing on host TX
        if rng.random() < 0.6:
            f = udp_frame(rng, self._size(rng), dst=dst)
        else:
            f = tcp_frame(rng, max(self._size(rng), 60), dst=dst)
        return 2 + rng.randrange(2), f, None

    def _jumbo(self, rng):
        port = rng.randrange(4)
        return port, udp_frame(rng, rng.choice(JUMBO), dst="10.1.0.5"), None

    def _arp(self, rng):
        return rng.randrange(4), arp_frame(rng, rng.choice([60, 60, 64])), None

    def _ipv6(self, rng):
        return rng.randrange(4), ipv6_frame(rng, max(self._size(rng), 80)), None

    def _prim(self, rng, op, size=None, acl=False, **hdr):
        port = rng.randrange(4)
        fl = self.flows[port]
        src, sport = fl[-1] if acl else rng.choice(fl[:-1])
        hdr.setdefault("tag", 8 * port + rng.randrange(8))   # CAS cells of this input only
        return port, prim_frame(rng, op, size or rng.choice([66, 80, 128, 300, 1024]),
                                src=src, sport=sport, **hdr), None

    def _prim_count(self, rng):
        return self._prim(rng, OP_FORWARD)

    def _prim_cas(self, rng):
        return self._prim(rng, rng.choice([OP_CAS, OP_CAS, OP_MAX]), value=rng.randrange(16),
                          expect=rng.randrange(4))

    def _prim_mcast(self, rng):
        return self._prim(rng, OP_MCAST)

    def _prim_recirc(self, rng):
        return self._prim(rng, OP_RECIRC)

    def _prim_clone(self, rng):
        return self._prim(rng, OP_CLONE)

    def _prim_acl(self, rng):
        return self._prim(rng, OP_FORWARD, acl=True)

    def _prim_tmdrop(self, rng):
        return self._prim(rng, rng.choice([OP_BAD_PORT, OP_NO_GROUP]))

    def _malformed(self, rng):
        kinds = ["ipv4_checksum", "ipv4_checksum", "ipv4_length", "runt", "runt", "short_eth",
                 "ipv4_version", "ipv4_ihl", "ipv4_length_big", "udp_length", "ipv4_fragment",
                 "random", "oversize", "bad_udp_csum", "mac_error"]
        kind = rng.choice(kinds)
        port = rng.randrange(4)
        if kind == "bad_udp_csum":   # routed; the incremental update keeps it wrong
            f = bytearray(udp_frame(rng, self._size(rng), dst="10.1.0.5"))
            f[40] ^= 0x5A
            return rng.randrange(2), bytes(f), None
        if kind == "mac_error":      # the MAC's bad-frame flag (wire RX only)
            return rng.randrange(2), udp_frame(rng, self._size(rng), dst="10.1.0.5"), \
                self.wire_user(err=True)
        return port, bad_frames(rng)[kind], None


def bursts(rng, items):
    """Split one port's items into bursts of 1..8 back-to-back frames."""
    out, i = [], 0
    while i < len(items):
        k = rng.randrange(1, 9)
        out.append(items[i:i + k])
        i += k
    return out


def pct(sorted_vals, q):
    """Nearest-rank percentile."""
    k = max(0, math.ceil(q / 100 * len(sorted_vals)) - 1)
    return sorted_vals[k]


def lat_stats(vals):
    if not vals:
        return {"n": 0}
    v = sorted(vals)
    st = {"n": len(v), "min": v[0], "mean": round(sum(v) / len(v), 1), "p99": pct(v, 99),
          "max": v[-1]}
    for k in ("min", "mean", "p99", "max"):
        st[k + "_ns"] = round(st[k] * CLOCK_NS, 1)
    return st


@cocotb.test()
async def demo(dut):
    """The demo: a realistic mix on all inputs, every output checked against the model."""
    wall0 = time.monotonic()
    env = CoreEnv(dut, seed=SEED)
    rng = env.rng
    # the bus models log every frame / transaction at INFO: hundreds of frames (jumbo ones
    # included) would cost more time than the simulation itself
    logging.getLogger(f"cocotb.{dut._name}").setLevel(logging.WARNING)
    wall = {}
    mon = FirstBeatMonitor(dut)
    await env.reset()
    cocotb.start_soon(mon.run())
    info = await env.csr.check_id(APP_ID)

    # ---- control plane: routes and the prim program, mirrored into the model ---------------
    await setup_routes(env)
    await setup_prim(env)
    w = env.writer
    await env.apply(w.exact_add("prim.ops", [OP_BAD_PORT], "forward", {"port": 9}))
    await env.apply(w.exact_add("prim.ops", [OP_NO_GROUP], "multicast", {"group": 5}))
    cfg_cycles = mon.cycle
    wall["config"] = time.monotonic() - wall0

    # ---- traffic ----------------------------------------------------------------------------
    traffic = Traffic(env, rng, FRAMES)
    items = traffic.build()
    per_port = defaultdict(list)
    for it in items:
        per_port[it["port"]].append(it)
    sent_order = defaultdict(list)          # input port -> [item idx] in send order

    async def feed(port, plan):
        src = env.src[port]
        for burst in plan:
            nb = 0
            for it in burst:
                user = it["user"]
                if port >= env.P and user is None:
                    user = env.new_tag() << 1
                it["user"] = user
                outs = env.model.process(it["frame"], port, user=user)
                it["expected"] = [(o.port, bytes(o.frame), o.user) for o in outs]
                for q, data, u in it["expected"]:
                    env.expected[q].append((data, u))
                if port >= env.P:     # every host packet is completed, even a dropped one
                    env.sent_host_tags[port - env.P].append((user >> 1) & 0xFFFF)
                sent_order[port].append(it["idx"])
                await src.send(AxiStreamFrame(it["frame"], tuser=user))
                nb += beats(len(it["frame"]))
            await src.wait()
            # ~20 % load per input (4 inputs + recirculation stay below one beat per cycle)
            await ClockCycles(dut.clk, 4 * nb + rng.randrange(0, 40))

    t0 = mon.cycle
    feeders = [cocotb.start_soon(feed(p, bursts(random.Random(rng.random()), per_port[p])))
               for p in range(4)]
    for f in feeders:
        await f
    t_sent = mon.cycle
    await env.drain(timeout_cycles=50000)
    t_done = mon.cycle
    wall["traffic"] = time.monotonic() - wall0 - sum(wall.values())

    # ---- compare with the golden model --------------------------------------------------------
    problems = []
    checks = {}

    def check(name, fn):
        try:
            fn()
            checks[name] = "ok"
        except AssertionError as e:
            checks[name] = "FAIL"
            # drop the assertion-rewrite echo ("assert not [...]") cocotb appends
            problems.append(f"{name}: " + str(e).split("\nassert ")[0])

    check("outputs", env.check_outputs)
    check("completions", env.check_completions)
    try:
        await env.check_counters()
        checks["counters"] = "ok"
    except AssertionError as e:
        checks["counters"] = "FAIL"
        problems.append("counters: " + str(e).split("\nassert ")[0])
    # register banks: every CAS/max cell, every flow counter cell the model or traffic touched
    bad_mem = []
    cells = sorted({a for a in range(256) if env.model.mem_read("prim.cells", a)}
                   | set(range(32)))
    flows = sorted({a for a in range(1024) if env.model.mem_read("prim.flows", a)}
                   | set(traffic.flow_cells))
    for mem, addrs in (("prim.cells", cells), ("prim.flows", flows)):
        for a in addrs:
            hw, mo = await env.csr.mem_read(mem, a), env.model.mem_read(mem, a)
            if hw != mo:
                bad_mem.append(f"{mem}[{a}]: hw {hw:#x} model {mo:#x}")
    checks["registers"] = "FAIL" if bad_mem else "ok"
    if bad_mem:
        problems.append("register banks differ: " + "; ".join(bad_mem[:20]))

    # ---- latency: pair every output with its input frame ---------------------------------------
    by_key = defaultdict(deque)
    for it in items:
        for q, data, u in it.get("expected", []):
            by_key[(q, data, u)].append(it["idx"])
    in_cycle = {}
    for p in range(4):
        stamps = mon.inputs[p]
        if len(stamps) != len(sent_order[p]):
            problems.append(f"input {IN_NAMES[p]}: {len(stamps)} first beats seen, "
                            f"{len(sent_order[p])} frames sent")
        for idx, c in zip(sent_order[p], stamps):
            in_cycle[idx] = c
    lat = defaultdict(list)        # class -> [cycles]
    lat_size = defaultdict(list)   # input frame size bucket -> [cycles]

    def record_latency(it, out_cycle):
        cyc = out_cycle - in_cycle[it["idx"]]
        lat[it["cls"]].append(cyc)
        lat_size[next(b for b, hi in SIZE_BUCKETS if len(it["frame"]) <= hi)].append(cyc)
        lat["all"].append(cyc)

    unmatched = []                 # (q, data, tuser, cycle) the model did not predict
    for q in range(4):
        stamps = mon.outputs[q]
        if len(stamps) != len(env.received[q]):
            problems.append(f"output {OUT_NAMES[q]}: {len(stamps)} first beats seen, "
                            f"{len(env.received[q])} frames received")
        for (data, u), c in zip(env.received[q], stamps):
            d = by_key.get((q, data, u))
            if not d:
                unmatched.append((q, data, u, c))
                continue
            record_latency(items[d.popleft()], c)
    # diagnosis of mismatches: an unexpected output whose bytes equal a still-unpaired expected
    # output of the same port differs only in tuser; say which traffic it was
    tuser_only = defaultdict(list)
    for q, data, u, c in unmatched:
        key = next((k for k, v in by_key.items() if v and k[0] == q and k[1] == data), None)
        if key is None:
            continue
        it = items[by_key[key].popleft()]
        record_latency(it, c)
        tuser_only[(it["cls"], IN_NAMES[it["port"]], OUT_NAMES[q])].append((u, key[2]))
    if tuser_only:
        n = sum(len(v) for v in tuser_only.values())
        problems.append(f"diagnosis: {n} output(s) equal the model's byte for byte but differ "
                        "in tuser (class, input -> output: count, hw/model tuser): " + "; ".join(
                            f"{c} {i}->{o}: {len(v)}, hw {v[0][0]:#x} model {v[0][1]:#x}"
                            for (c, i, o), v in sorted(tuser_only.items())))

    # ---- hardware counters over AXI-Lite --------------------------------------------------------
    hw = {}
    for c in env.schema["counters"]:
        hw[c["name"]] = await env.csr.counter_read(c["name"])
    wall["check+read"] = time.monotonic() - wall0 - sum(wall.values())

    classes = {}
    for cls in list(CLASSES) + ["all"]:
        its = [it for it in items if cls in (it["cls"], "all")]
        classes[cls] = {
            "desc": CLASSES[cls][1] if cls in CLASSES else "every output copy",
            "frames": len(its), "bytes": sum(len(it["frame"]) for it in its),
            "outputs": sum(len(it.get("expected", [])) for it in its),
            "no_output": sum(1 for it in its if not it.get("expected")),
            "latency": lat_stats(lat[cls]),
        }
    inputs = {}
    for k, name in enumerate(env.schema["ports"]["inputs"]):
        d = {f: hw.get(f"in{k}.{f}", 0) for f in ("pkts", "bytes", "drop_runt",
                                                  "drop_oversize", "drop_error", "drop_full")}
        if k < 4:
            d["sent_frames"] = len(per_port[k])
            d["sent_bytes"] = sum(len(it["frame"]) for it in per_port[k])
        inputs[name] = d
    outputs = {}
    for q, name in enumerate(env.schema["ports"]["outputs"]):
        outputs[name] = {"pkts": hw[f"out{q}.pkts"], "bytes": hw[f"out{q}.bytes"],
                         "drop_full": hw[f"out{q}.drop_full"],
                         "received_frames": len(env.received[q]),
                         "received_bytes": sum(len(f) for f, _ in env.received[q]),
                         "expected_frames": len(env.expected.get(q, []))}
    tables = {t: {"hit": hw[f"{t}.hit"], "miss": hw[f"{t}.miss"]}
              for t in sorted({n[:-4] for n in hw if n.endswith(".hit")})}
    report = {
        "status": "PASS" if not problems else "FAIL",
        "problems": problems,
        "checks": checks,
        "app_id": info.get("app_id"),
        "seed": SEED,
        "clock_mhz": 1000 / CLOCK_NS,
        "frames_sent": len(items),
        "bytes_sent": sum(len(it["frame"]) for it in items),
        "outputs_expected": sum(len(v) for v in env.expected.values()),
        "outputs_compared": sum(len(v) for v in env.received.values()),
        "outputs_unmatched": len(unmatched),
        "completions": sum(len(v) for v in env.host_cpl.values()),
        "counters_compared": len([n for n in env.model.counters() if n in hw]),
        "register_cells_compared": len(cells) + len(flows),
        "cycles": {"config": cfg_cycles, "traffic": t_sent - t0, "drain": t_done - t_sent,
                   "total": mon.cycle},
        "sim_wall_s": round(time.monotonic() - wall0, 1),
        "sim_wall_phases_s": {k: round(v, 1) for k, v in wall.items()},
        "inputs": inputs,
        "outputs": outputs,
        "tables": tables,
        "register_ops": {n: v for n, v in hw.items() if n.endswith(".index_oob")},
        "parser_errors": {n.split(".", 2)[2]: v for n, v in hw.items()
                          if n.startswith("parser.err.")},
        "tm": {n.split(".", 1)[1]: v for n, v in hw.items() if n.startswith("tm.")},
        "tx_completions": {f"cpl{p}": {n.split(".", 1)[1]: v for n, v in hw.items()
                                       if n.startswith(f"cpl{p}.")} for p in range(2)},
        "classes": classes,
        "latency_by_size": {b: lat_stats(lat_size[b]) for b, _ in SIZE_BUCKETS},
        "counters": hw,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "report.json").write_text(json.dumps(report, indent=1))
    assert not problems, ("hardware != golden model:\n" + "\n".join(problems))
