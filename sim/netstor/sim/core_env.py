"""Test environment for the whole core (used by the cocotb modules and the demo/bench).

``CoreEnv(dut)`` attaches cocotbext-axi models to every port of ``tb_core``:

* ``AxiStreamSource`` on wire RX (``wire_rx<p>``) and host TX (``host_tx<p>``);
* ``AxiStreamSink`` on wire TX (``wire_tx<p>``) and host RX (``host_rx<p>``);
* a MAC model that answers every frame leaving on wire TX with a TX completion
  (``mac_cpl<p>``: tag = the frame's ``tuser[16:1]``, timestamp = a running count), and a sink
  for the completions the host sees (``host_cpl<p>``);
* ``AxiLiteMaster`` on the control window, wrapped in the project's ``AsyncCsrClient``;
* the golden model (``DataplaneModel``) as the scoreboard, with every table write applied to
  both through one ``TableWriter``.
"""
from __future__ import annotations

import json
import os
import random
from collections import defaultdict
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge, Timer, ClockCycles
from cocotbext.axi import (AxiStreamBus, AxiStreamSource, AxiStreamSink, AxiStreamFrame,
                           AxiLiteBus, AxiLiteMaster)
from cocotbext.eth import EthMacRx, EthMacTx, EthMacFrame, PtpClockSimTime
from netstor.sim.axil_transport import AxilTransport

from netstor.programs import default_pipeline
from netstor.programs.primitives import OP_CAS, OP_CLONE, OP_FORWARD, OP_MAX, OP_MCAST, OP_RECIRC
from netstor.model.dataplane import DataplaneModel
from netstor.driver.regs import AsyncCsrClient
from netstor.driver.tables import TableWriter



def pause_generator(rng, busy):
    """Random back-pressure / idle pattern: each cycle paused with probability ``busy``."""
    while True:
        yield rng.random() < busy


class CoreEnv:
    P = 2

    def __init__(self, dut, *, seed=1, eth_mac=False):
        """``eth_mac``: the wire ports are driven by cocotbext-eth's Ethernet MAC models at
        100 Gb/s (PTP timestamps in RX tuser, TX completions with timestamps from the MAC)
        instead of plain AXI-Stream models plus a completion model of our own."""
        self.dut = dut
        self.rng = random.Random(seed)
        self.pipeline = default_pipeline(self.P)
        self.schema = json.loads(Path(os.environ["NETSTOR_SCHEMA"]).read_text())
        #: the core's multicast: copy lists (``tm.groups``, the copy lane) or bitmaps
        self.mcast_mode = ("list" if any(mm["name"] == "tm.groups"
                                         for mm in self.schema["memories"]) else "bitmap")
        self.model = DataplaneModel(self.pipeline, groups=self.mcast_mode)
        self.writer = TableWriter(self.pipeline)
        cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
        self.eth_mac = eth_mac
        self.src = {}
        self.sink = {}
        if eth_mac:
            self.ptp = PtpClockSimTime(ts_tod=dut.ptp_ts_96, clock=dut.clk)
        else:
            dut.ptp_ts_96.value = 0
        for p in range(self.P):
            if eth_mac:
                self.src[p] = EthMacRx(AxiStreamBus.from_prefix(dut, f"wire_rx{p}"), dut.clk,
                                       dut.rst, ptp_time=dut.ptp_ts_96, speed=100e9)
                self.sink[p] = EthMacTx(AxiStreamBus.from_prefix(dut, f"wire_tx{p}"), dut.clk,
                                        dut.rst, ptp_time=dut.ptp_ts_96,
                                        ptp_ts=getattr(dut, f"mac_cpl{p}_ts"),
                                        ptp_ts_tag=getattr(dut, f"mac_cpl{p}_tag"),
                                        ptp_ts_valid=getattr(dut, f"mac_cpl{p}_valid"),
                                        speed=100e9)
            else:
                self.src[p] = AxiStreamSource(AxiStreamBus.from_prefix(dut, f"wire_rx{p}"),
                                              dut.clk, dut.rst)
                self.sink[p] = AxiStreamSink(AxiStreamBus.from_prefix(dut, f"wire_tx{p}"),
                                             dut.clk, dut.rst)
            self.src[self.P + p] = AxiStreamSource(AxiStreamBus.from_prefix(dut, f"host_tx{p}"),
                                                   dut.clk, dut.rst)
            self.sink[self.P + p] = AxiStreamSink(AxiStreamBus.from_prefix(dut, f"host_rx{p}"),
                                                  dut.clk, dut.rst)
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
        self.csr = AsyncCsrClient(self.schema, AxilTransport(self.axil), max_polls=200)
        self.host_cpl = defaultdict(list)     # port -> [tag]
        self.mac_queue = defaultdict(list)    # port -> [tag] completions the MAC owes
        self.sent_host_tags = defaultdict(list)
        self.expected = defaultdict(list)     # output -> [(frame, user)]
        self.received = defaultdict(list)
        self._tag = 0

    async def reset(self):
        dut = self.dut
        for p in range(self.P):
            if not self.eth_mac:
                getattr(dut, f"mac_cpl{p}_valid").value = 0
                getattr(dut, f"mac_cpl{p}_ts").value = 0
                getattr(dut, f"mac_cpl{p}_tag").value = 0
            getattr(dut, f"host_cpl{p}_ready").value = 1
        dut.rst.value = 1
        await ClockCycles(dut.clk, 8)
        dut.rst.value = 0
        # cycles since reset: the parser's arrival counter (meta.arrival) give or take the
        # input path's few cycles
        self.cycle = 0
        cocotb.start_soon(self._count_cycles())
        await ClockCycles(dut.clk, 4)
        for p in range(self.P):
            if not self.eth_mac:
                cocotb.start_soon(self._mac(p))
            cocotb.start_soon(self._host_cpl(p))

    # ---- MAC completion model ---------------------------------------------------------------
    async def _mac(self, p):
        """Every frame that leaves on wire TX p is completed by the MAC, in order."""
        dut = self.dut
        valid = getattr(dut, f"mac_cpl{p}_valid")
        ready = getattr(dut, f"mac_cpl{p}_ready")
        tlast = getattr(dut, f"wire_tx{p}_tlast")
        tvalid = getattr(dut, f"wire_tx{p}_tvalid")
        tready = getattr(dut, f"wire_tx{p}_tready")
        tuser = getattr(dut, f"wire_tx{p}_tuser")
        ts = 0
        pending = []
        while True:
            await RisingEdge(dut.clk)
            if valid.value and ready.value:
                pending.pop(0)
            if tvalid.value and tready.value and tlast.value:
                pending.append((int(tuser.value) >> 1) & 0xFFFF)
            if pending:
                ts += 1
                valid.value = 1
                getattr(dut, f"mac_cpl{p}_tag").value = pending[0]
                getattr(dut, f"mac_cpl{p}_ts").value = ts
            else:
                valid.value = 0

    async def _host_cpl(self, p):
        dut = self.dut
        valid = getattr(dut, f"host_cpl{p}_valid")
        ready = getattr(dut, f"host_cpl{p}_ready")
        tag = getattr(dut, f"host_cpl{p}_tag")
        while True:
            await RisingEdge(dut.clk)
            if valid.value and ready.value:
                self.host_cpl[p].append(int(tag.value))

    # ---- control plane: one write path for hardware and model ----------------------------
    def mcast_set(self, group, copies):
        """The table writes of multicast group ``group`` in the core's format."""
        if self.mcast_mode == "list":
            return self.writer.mcast_list_set(group, copies)
        return self.writer.mcast_set(group, copies)

    async def apply(self, writes):
        for mem, addr, word in writes:
            await self.csr.mem_write(mem, addr, word)
            self.model.mem_write(mem, addr, word)

    async def reg_write(self, name, value):
        await self.csr.reg_write(name, value)
        self.model.reg_write(name, value)

    # ---- traffic ---------------------------------------------------------------------------------
    def new_tag(self):
        self._tag = (self._tag + 1) & 0xFFFF
        return self._tag

    def expect(self, frame, port, user=None, arrival=0):
        """Run ``frame`` through the model and record the expected outputs."""
        if user is None:
            user = (self.new_tag() << 1) if port >= self.P else 0
        for o in self.model.process(bytes(frame), port, user=user, arrival=arrival):
            self.expected[o.port].append((bytes(o.frame), o.user))
        return user

    def expect_deferred(self):
        """Record the model's outputs of the recirculated passes it held back
        (``model.deferred``, see ``DataplaneModel.run_deferred``)."""
        for o in self.model.run_deferred():
            self.expected[o.port].append((bytes(o.frame), o.user))

    async def _count_cycles(self):
        while True:
            await RisingEdge(self.dut.clk)
            self.cycle += 1

    async def send(self, frame, port, user=None, *, model=True, arrival=0):
        """Queue ``frame`` on input ``port``; the model runs on it now (``arrival``: the
        ``meta.arrival`` the model uses; see :attr:`cycle`)."""
        if self.eth_mac and port < self.P:
            # the MAC stamps the frame (RX tuser = PTP time << 1) when it starts sending it:
            # the model runs on the frame then, with the tuser the hardware saw
            def stamped(f, port=port):
                self.expect(f.data, port, (f.ptp_timestamp or 0) << 1)
            await self.src[port].send(EthMacFrame(bytes(frame), tx_complete=stamped))
            return None
        user = self.expect(frame, port, user, arrival) if model else (user or 0)
        if port >= self.P:   # every host packet is completed, even one the block drops
            self.sent_host_tags[port - self.P].append((user >> 1) & 0xFFFF)
        await self.src[port].send(AxiStreamFrame(bytes(frame), tuser=user))
        return user

    async def drain(self, timeout_cycles=20000):
        """Wait until every expected frame arrived (or the time runs out) and the sources
        are idle, then collect everything the sinks received."""
        for _ in range(10):
            await ClockCycles(self.dut.clk, 200)
            if all(s.idle() for s in self.src.values()):
                break
        want = {q: len(v) for q, v in self.expected.items()}
        waited = 0
        while waited < timeout_cycles:
            done = all(len(self.received[q]) + self.sink[q].count() >= n
                       for q, n in want.items())
            if done:
                break
            await ClockCycles(self.dut.clk, 100)
            waited += 100
        await ClockCycles(self.dut.clk, 300)    # anything unexpected still in flight
        for q, s in self.sink.items():
            while not s.empty():
                f = s.recv_nowait()
                if isinstance(f, EthMacFrame):     # the MAC model reports the TX tag it saw
                    self.received[q].append((bytes(f.data), (f.ptp_tag or 0) << 1))
                    continue
                u = f.tuser if isinstance(f.tuser, int) else (f.tuser[0] if f.tuser else 0)
                self.received[q].append((bytes(f.tdata), int(u)))

    def check_outputs(self):
        """Every output got exactly the model's frames (as multisets; order across inputs
        depends on arbitration), byte for byte, with the right tuser."""
        problems = []
        for q in sorted(set(self.expected) | set(self.received)):
            exp = sorted(self.expected.get(q, []))
            got = sorted(self.received.get(q, []))
            if exp != got:
                missing = [e for e in exp if e not in got]
                extra = [g for g in got if g not in exp]
                detail = ""
                if missing and extra:
                    (a, ua), (b, ub) = missing[0], extra[0]
                    diff = [i for i in range(min(len(a), len(b))) if a[i] != b[i]]
                    detail = (f"; first missing/extra pair: lengths {len(a)}/{len(b)}, tuser "
                              f"{ua:#x}/{ub:#x}, differing bytes {diff[:16]}; missing "
                              f"{a[:96].hex()}; extra {b[:96].hex()}")
                problems.append(f"output {q}: expected {len(exp)} got {len(got)}; "
                                f"{len(missing)} missing, {len(extra)} unexpected{detail}")
        assert not problems, "\n".join(problems)

    def check_completions(self):
        """Each host TX packet got exactly one completion with its tag (Corundum's TX engine
        matches completions to descriptors by tag; synthesised completions of packets the
        block consumed may overtake MAC completions of earlier packets)."""
        for p in range(self.P):
            assert sorted(self.host_cpl[p]) == sorted(self.sent_host_tags[p]), (
                f"port {p}: completions {self.host_cpl[p][:20]} != sent {self.sent_host_tags[p][:20]}")

    async def check_counters(self, names=None):
        """Hardware counters equal the model's (for the counters the model keeps)."""
        model = self.model.counters()
        bad = []
        for name in sorted(names or model):
            if name not in {c["name"] for c in self.schema["counters"]}:
                continue
            hw = await self.csr.counter_read(name)
            if hw != model.get(name, 0):
                bad.append(f"{name}: hw {hw} model {model.get(name, 0)}")
        assert not bad, "counter mismatch:\n" + "\n".join(bad)

    async def check_memories(self, names):
        """Register banks / tables read back equal to the model's."""
        for name in names:
            depth = next(m["depth"] for m in self.schema["memories"] if m["name"] == name)
            for addr in range(depth):
                hw = await self.csr.mem_read(name, addr)
                mo = self.model.mem_read(name, addr)
                assert hw == mo, f"{name}[{addr}]: hw {hw:#x} model {mo:#x}"


# ---- the platform configuration the core tests and the demo share -------------------------------
def ip(s):
    a = [int(x) for x in s.split(".")]
    return (a[0] << 24) | (a[1] << 16) | (a[2] << 8) | a[3]


async def setup_routes(env):
    w = env.writer
    routes = [("10.1.0.0", 16, 1, 0x0A0000000001), ("10.1.2.0", 24, 0, 0x0A0000000002),
              ("10.2.0.0", 16, 0, 0x0A0000000003), ("10.9.9.9", 32, 2, 0)]
    for prefix, plen, port, dmac in routes:
        await env.apply(w.lpm_add("l3.routes", ip(prefix), plen, "route",
                                  {"port": port, "dmac": dmac, "smac": 0x020000000099}))
    await env.apply(w.lpm_add("l3.routes", ip("10.3.0.0"), 16, "drop"))


async def setup_prim(env):
    w = env.writer
    await env.apply(w.exact_add("prim.ops", [OP_FORWARD], "forward", {"port": 1}))
    await env.apply(w.exact_add("prim.ops", [OP_CAS], "forward", {"port": 2}))
    await env.apply(w.exact_add("prim.ops", [OP_MAX], "forward", {"port": 3}))
    await env.apply(w.exact_add("prim.ops", [OP_MCAST], "multicast", {"group": 3}))
    await env.apply(w.exact_add("prim.ops", [OP_RECIRC], "recirculate", {"port": 0}))
    await env.apply(w.exact_add("prim.ops", [OP_CLONE], "clone", {"port": 1}))
    await env.apply(env.mcast_set(3, [(0, 7), (1, 8), (3, 9)]))
    for rid, tag in ((7, 0x0707), (8, 0x0808), (9, 0x0909)):
        await env.apply(w.exact_add("prim.copy_tag", [rid], "tag_copy", {"tag": tag}))
    # trust: primitives packets write state only from wire ports 0 and 1 and sources
    # 10.0.0.0/16 and 10.66.0.0/16 (so 10.5.5.5 and the host queues are dropped and counted)
    prio = 0
    for port in (0, 1):
        for prefix in ("10.0.0.0", "10.66.0.0"):
            await env.apply(w.ternary_add("prim.trust", [1, port, ip(prefix)],
                                          [1, 0xF, 0xFFFF0000], "trusted", priority=prio))
            prio += 1
    # deny source 10.66.0.0/16 with source port 666 exactly
    await env.apply(w.ternary_add("prim.acl", [ip("10.66.0.0"), 666],
                                  [0xFFFF0000, 0xFFFF], "deny", priority=0))
