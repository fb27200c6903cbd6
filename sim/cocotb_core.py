"""cocotb tests of the whole core (``netstor_core`` behind ``tb_core``) against the model.

Every test configures tables through the AXI-Lite window (mirrored into the golden model),
sends scapy-built frames with cocotbext-axi sources, and compares every output frame (bytes
and tuser), the TX completions, the counters and (where state changes) register banks with
the model.
"""
from __future__ import annotations

import logging
import os
import random

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamFrame

from netstor.sim.core_env import CoreEnv, ip, pause_generator, setup_prim, setup_routes
from netstor.sim.frames import (udp_frame, prim_frame, arp_frame, ipv6_frame, tcp_frame, bad_frames,
                    ROUTER_MAC)
from netstor.gateware.core import APP_ID
from netstor.driver.tables import TableWriter, apply_writes
from netstor.model.dataplane import DataplaneModel
from netstor.programs.primitives import (OP_FORWARD, OP_CAS, OP_MAX, OP_MCAST, OP_RECIRC,
                                         OP_CLONE)

SEED = int(os.environ.get("NETSTOR_SEED", "1"))


@cocotb.test()
async def test_identity(dut):
    """ID, version and schema hash match; scratch works."""
    env = CoreEnv(dut, seed=SEED)
    await env.reset()
    info = await env.csr.check_id(APP_ID)
    assert info["app_id"] == APP_ID


@cocotb.test()
async def test_l3_mixed_traffic(dut):
    """L3 forwarding and the default NIC paths with a realistic mix on every input."""
    env = CoreEnv(dut, seed=SEED)
    await env.reset()
    await setup_routes(env)
    rng = env.rng
    dsts = ["10.1.0.5", "10.1.2.7", "10.2.3.4", "10.9.9.9", "10.3.1.1", "192.168.0.1"]
    for i in range(60):
        kind = rng.randrange(7)
        port = rng.randrange(4)
        size = rng.choice([60, 64, 65, 72, 128, 200, 512, 1024, 1518])
        if kind <= 2:
            f = udp_frame(rng, size, dst=rng.choice(dsts), ttl=rng.choice([64, 2, 1]),
                          udp_csum=rng.random() < 0.8)
        elif kind == 3:
            f = udp_frame(rng, size, dst=rng.choice(dsts), vlan=rng.randrange(4096))
        elif kind == 4:
            f = arp_frame(rng)
        elif kind == 5:
            f = ipv6_frame(rng, max(size, 80))
        else:
            f = tcp_frame(rng, max(size, 80), dst=rng.choice(dsts))
        await env.send(f, port)
    await env.drain()
    env.check_outputs()
    env.check_completions()
    await env.check_counters()


@cocotb.test()
async def test_primitives(dut):
    """Register RMW (counter, CAS, max), ternary ACL, exact ops, multicast with per-copy
    rewrite, recirculation, clone: outputs and register banks equal the model's."""
    env = CoreEnv(dut, seed=SEED)
    await env.reset()
    await setup_prim(env)
    rng = env.rng
    # back-to-back packets of one flow hit the same counter cell every cycle
    for _ in range(12):
        await env.send(prim_frame(rng, OP_FORWARD, 64, sport=1000), 0)
    for i in range(40):
        op = rng.choice([OP_FORWARD, OP_CAS, OP_MAX, OP_MCAST, OP_RECIRC, OP_CLONE])
        src = rng.choice(["10.0.0.1", "10.66.1.2", "10.5.5.5"])
        f = prim_frame(rng, op, rng.choice([64, 80, 128, 300]), src=src,
                       sport=rng.choice([666, 1000, 2000]), tag=rng.randrange(4),
                       value=rng.randrange(100), expect=rng.randrange(3))
        await env.send(f, 0)   # one input: the model's order is the hardware's order
    await env.drain()
    env.check_outputs()
    env.check_completions()
    await env.check_counters()
    await env.check_memories(["prim.cells"])
    flows = env.model.memories()["prim.flows"] if hasattr(env.model, "memories") else None
    for addr in range(1024):
        if env.model.mem_read("prim.flows", addr):
            assert await env.csr.mem_read("prim.flows", addr) == env.model.mem_read("prim.flows", addr)


@cocotb.test()
async def test_trust(dut):
    """Issue 11's reproducer on the RTL: on the unconfigured bitstream two packets to the
    primitives' port (a CAS and a MAX on cell 1) wrote ``prim.cells``. Now they are dropped
    and counted (``prim.trust.miss``) and no cell changes; once port 1 is trusted the same
    packets act from port 1 and are still dropped from port 0 and from the host queues.
    Outputs, counters and banks equal the model's."""
    env = CoreEnv(dut, seed=SEED + 3)
    await env.reset()
    rng = env.rng
    cas = prim_frame(rng, OP_CAS, 80, tag=1, value=0xBAD, expect=0)
    mx = prim_frame(rng, OP_MAX, 80, tag=1, value=0xFFFF)
    for port in (0, 1, 2, 3):
        await env.send(cas, port)
        await env.send(mx, port)
        await env.drain()
    assert env.model.counter("prim.trust.miss") == 8
    assert await env.csr.counter_read("prim.trust.miss") == 8
    assert await env.csr.mem_read("prim.cells", 1) == 0
    await env.check_memories(["prim.cells"])
    # the flow cells these packets count in when trusted (a scratch model that trusts every
    # packet says which), read back on the RTL: still 0 (reading all 1,024 cells costs ~36k
    # simulated cycles, a quarter of an hour of CI)
    scratch = DataplaneModel(env.pipeline)
    apply_writes(scratch, TableWriter(env.pipeline).ternary_add(
        "prim.trust", [0, 0, 0], [0, 0, 0], "trusted", {}, 0))
    for port in (0, 1, 2, 3):
        scratch.process(cas, port)
        scratch.process(mx, port)
    hit = [a for a in range(1024) if scratch.mem_read("prim.flows", a)]
    assert hit and sum(scratch.mem_read("prim.flows", a) for a in hit) == 8
    for addr in hit:
        assert await env.csr.mem_read("prim.flows", addr) == 0
    # configured: reports from wire port 1 only
    w = env.writer
    await env.apply(w.ternary_add("prim.trust", [1, 1, 0], [1, 0xF, 0], "trusted", priority=0))
    await env.apply(w.exact_add("prim.ops", [OP_CAS], "forward", {"port": 0}))
    await env.apply(w.exact_add("prim.ops", [OP_MAX], "forward", {"port": 0}))
    for port, frame in ((0, cas), (1, cas), (3, mx), (1, mx)):
        await env.send(frame, port)
        await env.drain()
    env.check_outputs()
    await env.check_counters()
    await env.check_memories(["prim.cells"])
    assert env.model.mem_read("prim.cells", 1) == 0xFFFF          # the CAS, then the MAX
    assert await env.csr.counter_read("prim.trust.miss") == 10


@cocotb.test()
async def test_bad_input(dut):
    """Malformed frames: documented path, counters, no hang, no table/register change."""
    env = CoreEnv(dut, seed=SEED)
    await env.reset()
    await setup_routes(env)
    await setup_prim(env)
    rng = env.rng
    for _ in range(3):
        for name, f in bad_frames(rng).items():
            await env.send(f, rng.choice([0, 1, 2, 3]))
        for _ in range(5):
            f = bytearray(prim_frame(rng, OP_FORWARD, 96))
            f[42:] = bytes(rng.getrandbits(8) for _ in range(len(f) - 42))
            await env.send(bytes(f), 0)
    # a good frame afterwards still goes through: the pipeline did not hang
    await env.send(udp_frame(rng, 100, dst="10.1.0.5"), 0)
    await env.drain()
    env.check_outputs()
    env.check_completions()
    await env.check_counters()
    await env.check_memories(["prim.cells", "l3.routes", "prim.acl", "prim.ops"])


@cocotb.test()
async def test_sizes_backpressure_updates(dut):
    """Every size 64..9000 with random idle gaps on inputs, random back-pressure on outputs,
    and table updates (of entries the traffic does not use) while traffic flows."""
    env = CoreEnv(dut, seed=SEED)
    await env.reset()
    await setup_routes(env)
    rng = env.rng
    for s in env.src.values():
        s.set_pause_generator(pause_generator(random.Random(rng.random()), 0.2))
    for s in env.sink.values():
        s.set_pause_generator(pause_generator(random.Random(rng.random()), 0.3))
    sizes = [64, 65, 72, 76, 128, 256, 512, 1024, 1518, 9000] + \
        [rng.randrange(60, 9001) for _ in range(10)]

    async def updates():
        for k in range(20):
            await env.apply(env.writer.lpm_add("l3.routes", ip(f"10.200.{k}.0"), 24, "route",
                                               {"port": 1, "dmac": k, "smac": k}))
    upd = cocotb.start_soon(updates())
    for size in sizes:
        await env.send(udp_frame(rng, size, dst=rng.choice(["10.1.0.5", "10.2.0.1"])),
                       rng.randrange(4))
    await upd
    await env.drain(timeout_cycles=60000)
    env.check_outputs()
    env.check_completions()
    await env.check_counters()


@cocotb.test()
async def test_ethernet_mac_ports(dut):
    """cocotbext-eth Ethernet MAC models at 100 Gb/s on both wire ports: PTP timestamps from
    the MAC reach the host in RX tuser, TX completions come from the MAC with its timestamps,
    and routed, host-bound and host-sent traffic all match the model."""
    env = CoreEnv(dut, seed=SEED, eth_mac=True)
    await env.reset()
    await setup_routes(env)
    rng = env.rng
    for i in range(40):
        port = rng.randrange(4)
        size = rng.choice([64, 65, 128, 256, 1518])
        f = udp_frame(rng, size, dst=rng.choice(["10.1.0.5", "10.2.3.4", "192.168.0.1"]))
        await env.send(f, port)
    await env.drain()
    # host-bound frames carry a non-zero PTP timestamp from the MAC model
    stamps = [u for q in (2, 3) for _, u in env.received.get(q, []) if u]
    assert stamps, "no PTP timestamp reached the host"
    env.check_outputs()
    env.check_completions()
    await env.check_counters()


@cocotb.test()
async def test_fuzz(dut):
    """Mutated and random frames (bit flips in the first 128 bytes, truncations, random
    lengths and bytes) through every program: outputs, counters and state equal the model's,
    and the pipeline keeps forwarding afterwards. One input at a time, so the model's order of
    stateful updates is the hardware's."""
    env = CoreEnv(dut, seed=SEED + 100)
    await env.reset()
    await setup_routes(env)
    await setup_prim(env)
    rng = env.rng
    seeds = [lambda: udp_frame(rng, rng.randrange(60, 300), dst=rng.choice(["10.1.0.5", "10.2.0.9"])),
             lambda: udp_frame(rng, rng.randrange(60, 200), vlan=5, dst="10.1.2.3"),
             lambda: prim_frame(rng, rng.randrange(1, 8), rng.randrange(80, 200),
                                tag=rng.randrange(4), value=rng.randrange(50)),
             lambda: tcp_frame(rng, 100)]
    for port in (0, 2):
        for _ in range(60):
            f = bytearray(rng.choice(seeds)())
            for _ in range(rng.randrange(1, 6)):
                i = rng.randrange(min(len(f), 128))
                f[i] ^= 1 << rng.randrange(8)
            if rng.random() < 0.2:
                f = f[:rng.randrange(1, len(f))]
            if rng.random() < 0.1:
                f = bytearray(rng.getrandbits(8) for _ in range(rng.randrange(1, 400)))
            await env.send(bytes(f), port)
        await env.drain()
    await env.send(udp_frame(rng, 100, dst="10.1.0.5"), 0)
    await env.drain()
    env.check_outputs()
    env.check_completions()
    await env.check_counters()
    await env.check_memories(["prim.cells"])


HOST_CONFIG = {
    "registers": {"parser.udp_port.prim": 0x5EED},
    "tables": {
        "l3.routes": {"default": {"action": "to_host"}, "entries": [
            {"prefix": "10.1.0.0/16", "action": "route",
             "params": {"port": 1, "dmac": "0a:00:00:00:00:01", "smac": "02:00:00:00:00:99"}},
            {"prefix": "10.1.2.0/24", "action": "route",
             "params": {"port": 0, "dmac": "0a:00:00:00:00:02", "smac": "02:00:00:00:00:99"}},
            {"prefix": "10.3.0.0/16", "action": "drop"}]},
        "prim.ops": {"entries": [{"key": OP_FORWARD, "action": "forward", "params": {"port": 1}},
                                 {"key": OP_MCAST, "action": "multicast",
                                  "params": {"group": 2}}]},
        "prim.acl": {"entries": [{"priority": 1, "value": ["10.66.0.0", 666],
                                  "mask": ["255.255.0.0", 0xFFFF], "action": "deny"}]},
    },
    "banks": {"prim.cells": {3: 77}},
    "mcast": {2: [[0, 1], [1, 2]]},
    "programs": {"prim": {"trusted_ports": [0, 1]}},
}


#: programs whose tables test_host_api reads back whole (the configured ones: NetRS's
#: 1,024-entry tables would cost ~100k simulated cycles of AXI-Lite reads)
DUMPED = ("l3", "prim")


#: the multicast groups test_host_api reads back
GROUPS_READ = [1, 2, 3, 4095]


@cocotb.test()
async def test_host_api(dut):
    """The synchronous host API (netstor.api.Device, the code the CLI and the controller run)
    drives the simulated RTL through a bridge thread: the same configuration applied to the
    RTL and to the model gives the same tables, read-backs, outputs and counters."""
    from cocotb.task import bridge
    from netstor.sim.axil_transport import AxilTransport
    from netstor.api import Device
    env = CoreEnv(dut, seed=SEED)
    await env.reset()
    model_dev = Device.open("model", schema=env.schema, model=env.model)
    model_dev.apply(HOST_CONFIG)

    def host_code():
        dev = Device.open("sim", schema=env.schema, transport=AxilTransport(env.axil))
        dev.apply(HOST_CONFIG)
        routes = dev.table("l3.routes")
        routes.add("10.2.0.0/16", "route", port=0, dmac=3, smac=4)
        routes.delete("10.3.0.0/16")
        dumps = {t: dev.table(t).dump() for t in dev.table_names if t.split(".")[0] in DUMPED}
        # the groups the configuration wrote and its neighbours, and the last one: a dump of
        # all 4,095 copy-list groups is 4,095 indirect reads (tens of minutes here)
        return (dumps, dev.mcast_dump(groups=GROUPS_READ), dev.bank("prim.cells").read(3),
                dev.registers())

    dumps, groups, cell, regs = await bridge(host_code)()
    routes = model_dev.table("l3.routes")
    routes.add("10.2.0.0/16", "route", port=0, dmac=3, smac=4)
    routes.delete("10.3.0.0/16")
    assert dumps == {t: model_dev.table(t).dump() for t in model_dev.table_names
                     if t.split(".")[0] in DUMPED}
    assert "l3.routes" in dumps and "prim.trust" in dumps
    assert groups == model_dev.mcast_dump(groups=GROUPS_READ) == {2: [(0, 1), (1, 2)]}
    assert cell == 77 and regs == model_dev.registers()
    rng = env.rng
    for i in range(24):
        dst = rng.choice(["10.1.0.5", "10.1.2.7", "10.2.3.4", "10.3.1.1", "192.168.0.1"])
        await env.send(udp_frame(rng, rng.choice([64, 128, 300]), dst=dst), rng.randrange(2))
        await env.send(prim_frame(rng, OP_MCAST if i % 3 == 0 else OP_FORWARD), 0)
    await env.drain()
    env.check_outputs()
    await env.check_counters()


@cocotb.test()
async def test_copy_lists(dut):
    """The default core's copy lists (``tm.groups``): a group of 16 copies, one
    port listed 7 times with different rids and the same (port, rid) three times, so the
    egress element rewrites each copy from its rid. Phase 1: multicast and unicast packets
    back to back from wire RX 0 and then host TX 0 (the lane replays every copy, one beat per
    clock): every output gets the model's frames in the model's order (one input, one
    stream). Phase 2: clone and recirculation mixed in from both, as multisets. Completions
    and counters equal the model's, and no copy went stale."""
    env = CoreEnv(dut, seed=SEED)
    await env.reset()
    assert env.mcast_mode == "list", "a copy-list core (build variant 'lane')"
    await setup_prim(env)
    copies = [(1, 7), (1, 8), (0, 9), (1, 9), (3, 7), (1, 7), (2, 8), (1, 8),
              (0, 7), (1, 3), (3, 9), (1, 7), (2, 2), (0, 8), (3, 3), (1, 9)]
    await env.apply(env.mcast_set(3, copies))
    rng = env.rng

    def burst(port, ops, n):
        return [(prim_frame(rng, rng.choice(ops), rng.choice([64, 65, 128, 300, 1000]),
                            src="10.0.0.1", sport=1000, tag=rng.randrange(4),
                            value=rng.randrange(100)), port) for _ in range(n)]

    for port in (0, 2):                # wire RX 0, then host TX 0
        for f, p in burst(port, [OP_MCAST, OP_MCAST, OP_FORWARD], 20):
            await env.send(f, p)
        await env.drain()
        # the wire packets' copies: ~13 multicast packets x 7 copies on wire port 1 alone
        assert len(env.expected.get(1, [])) >= 60
        for q in range(2 * env.P):
            exp, got = env.expected.get(q, []), env.received.get(q, [])
            assert got == exp, (f"output {q}: {len(got)} frames, {len(exp)} expected "
                                "(in the model's order)")
    for f, p in burst(0, [OP_MCAST, OP_CLONE, OP_RECIRC], 12) + burst(2, [OP_CLONE], 6):
        await env.send(f, p)
    await env.drain()
    env.check_outputs()
    env.check_completions()
    await env.check_counters()
    for q in range(2 * env.P):
        assert await env.csr.counter_read(f"out{q}.drop_stale") == 0


@cocotb.test()
async def test_copy_lane_stale(dut):
    """The copy lane falling behind: 14 multicast packets of
    1,500 bytes (24 beats) to a 16-copy group (384 lane cycles each) and then 180 unicast
    ones of the same size, back to back from wire RX 0: the 4,656 beats that enter overwrite
    the lane's store (4,096 beats) before the last multicast copies and the first unicast
    ones get their turn. Those copies are not sent and counted ``out<q>.drop_stale``; the
    drop-aware scoreboard (netstor.sim.scoreboard) finds every output equal to the model's
    frames in order less exactly the counted drops; no packet refused, no queue drop, and
    the other counters equal the model's."""
    from netstor.sim.scoreboard import DropScoreboard
    env = CoreEnv(dut, seed=SEED)
    await env.reset()
    assert env.mcast_mode == "list", "a copy-list core (build variant 'lane')"
    await setup_prim(env)
    copies = [(q, rid) for rid in (7, 8, 9, 1) for q in range(2 * env.P)]      # 16 copies
    await env.apply(env.mcast_set(3, copies))
    rng = env.rng
    for k in range(14 + 180):
        await env.send(prim_frame(rng, OP_MCAST if k < 14 else OP_FORWARD, 1500,
                                  src="10.0.0.1", sport=1000, tag=rng.randrange(4)), 0)
    # the lane works ~9,700 cycles on these; the expected counts are never reached (stale)
    await env.drain(timeout_cycles=10000)
    sb = DropScoreboard(2 * env.P)
    for q in range(2 * env.P):
        for f, u in env.expected.get(q, []):
            sb.predict(q, (0, 0), f, u)
        for f, u in env.received.get(q, []):
            sb.receive(q, f, u)
    names = [c["name"] for c in env.schema["counters"]]
    hw = {n: await env.csr.counter_read(n) for n in names if n.startswith(("out", "tm."))}
    report = sb.check(hw, env.model.counters())
    stale = {q: hw[f"out{q}.drop_stale"] for q in range(2 * env.P)}
    dut._log.info(f"lane stale copies per output: {stale}")
    assert report["mismatches"] == [], report["mismatches"]
    assert sum(stale.values()) > 0 and hw["tm.overflow"] == 0 and hw["tm.recirc_stale"] == 0
    assert all(hw[f"out{q}.drop_full"] == 0 for q in range(2 * env.P))
    # a stale copy never reaches the egress elements: the egress table's hits + misses are
    # the model's less the stale copies; every other counter equals the model's
    eg = ("prim.copy_tag.hit", "prim.copy_tag.miss")
    model = env.model.counters()
    assert (sum(model[n] for n in eg) - sum([await env.csr.counter_read(n) for n in eg])
            == sum(stale.values()))
    await env.check_counters([n for n in model if not n.startswith("out") and n not in eg])


def _quiet(env):
    """No INFO line per frame from the stream models (thousands of one-beat frames: the
    logging costs more than the simulation)."""
    for m in list(env.src.values()) + list(env.sink.values()):
        m.log.setLevel(logging.WARNING)


async def _first_beats(env, port, starts):
    """Append the cycle (``env.cycle``) of every frame's first beat accepted on input
    ``port`` (wire RX ``port`` or host TX ``port - P``) to ``starts``."""
    dut = env.dut
    pre = f"wire_rx{port}" if port < env.P else f"host_tx{port - env.P}"
    valid, ready, last = (getattr(dut, f"{pre}_{s}") for s in ("tvalid", "tready", "tlast"))
    first = True
    while True:
        await RisingEdge(dut.clk)
        if valid.value and ready.value:
            if first:
                starts.append(env.cycle)
            first = bool(last.value)


@cocotb.test()
async def test_copy_lane_overflow(dut):
    """``tm.overflow`` on purpose: 360 multicast packets of 2 beats (66 bytes, the smallest
    primitives frame) back to back from wire RX 0 to a 4-copy group (one copy per output).
    The lane serves a packet in 8 clocks and one arrives every 2, so the engine's descriptor
    FIFO (``desc_fifo`` = 256) fills and packets are refused: none of their copies is made
    (docs/dataplane-spec.md). The
    reference (``scoreboard.engine_refusals``, the engine's FIFO, read/landing/prefetch credit
    and current list, run on the measured arrival cycles) says which packets are refused; the
    hardware refuses exactly those, counts them in ``tm.overflow``, sends every copy of every
    other packet in order (drop-aware scoreboard, packets named), drops nothing else (no
    ``drop_full``, ``drop_stale``, ``recirc_stale``), and every counter but the egress
    table's (which never sees the refused copies) equals the model's."""
    from netstor.sim.scoreboard import DropScoreboard, engine_refusals
    env = CoreEnv(dut, seed=SEED)
    await env.reset()
    _quiet(env)
    await setup_prim(env)
    copies = [(0, 7), (1, 8), (2, 9), (3, 1)]
    await env.apply(env.mcast_set(3, copies))
    rng, N = env.rng, 360
    sb = DropScoreboard(2 * env.P)
    frames = []
    for k in range(N):
        f = prim_frame(rng, OP_MCAST, 64, src="10.0.0.1", sport=1000, tag=rng.randrange(4),
                       value=k)
        for o in env.model.process(f, 0):
            sb.predict(o.port, (0, 0), o.frame, o.user, packet=k)
        frames.append(f)
    starts = []
    cocotb.start_soon(_first_beats(env, 0, starts))
    for f in frames:                   # queued at once: the source sends them back to back
        await env.src[0].send(AxiStreamFrame(f, tuser=0))
    while len(starts) < N:
        await ClockCycles(dut.clk, 50)
    beats = {-(-len(f) // 64) for f in frames}
    assert len(beats) == 1
    refused_ref = engine_refusals(starts, len(copies), beats=beats.pop())
    want = (N - len(refused_ref)) * len(copies)
    for _ in range(100):               # the lane sends ~4 copies per packet kept
        if sum(s.count() for s in env.sink.values()) >= want:
            break
        await ClockCycles(dut.clk, 100)
    await ClockCycles(dut.clk, 300)
    for q, s in env.sink.items():
        while not s.empty():
            fr = s.recv_nowait()
            u = fr.tuser if isinstance(fr.tuser, int) else (fr.tuser[0] if fr.tuser else 0)
            sb.receive(q, bytes(fr.tdata), int(u))
    names = [c["name"] for c in env.schema["counters"]]
    hw = {n: await env.csr.counter_read(n) for n in names if n.startswith(("out", "tm."))}
    report = sb.check(hw, env.model.counters())
    dut._log.info(f"overflow: {N} packets, arrivals over {starts[-1] - starts[0] + 1} cycles, "
                  f"tm.overflow {hw['tm.overflow']}, refused {report['refused_packets']}, "
                  f"reference {refused_ref}")
    assert report["mismatches"] == [], report["mismatches"]
    assert hw["tm.overflow"] > 0 and report["refused_packets"] == refused_ref
    assert hw["tm.recirc_stale"] == 0
    assert all(hw[f"out{q}.drop_full"] == 0 == hw[f"out{q}.drop_stale"]
               for q in range(2 * env.P))
    # the egress table sees only the copies made: the model's less the refused packets'
    model = env.model.counters()
    n_ref = len(refused_ref)
    assert model["prim.copy_tag.hit"] - await env.csr.counter_read("prim.copy_tag.hit") == 3 * n_ref
    assert model["prim.copy_tag.miss"] - await env.csr.counter_read("prim.copy_tag.miss") == n_ref
    await env.check_counters([n for n in model if not n.startswith(("out", "prim.copy_tag"))
                              and n != "tm.overflow"])


@cocotb.test()
async def test_copy_list_own_port_twice(dut):
    """A copy list that names a host's own wire port twice (``tm.groups``: [(0, 7), (2, 8),
    (0, 9)] for host TX 0, whose own port is wire TX 0): both own copies are sent (each
    rewritten by its rid), each is completed by the MAC and each completion reaches the host,
    so the host gets two completions for the packet's one tag (docs/dataplane-spec.md, TX
    completions). Host TX 1's packets of the same group (no copy to wire TX 1) and host TX
    0's unicast ones to wire TX 1 get one synthesised completion each. Outputs, completions
    (as multisets: two per own-twice packet) and counters equal the model's."""
    env = CoreEnv(dut, seed=SEED + 5)
    await env.reset()
    _quiet(env)
    await setup_prim(env)
    w = env.writer
    for prio, port in ((4, 2), (5, 3)):          # trust the host queues' 10.0.0.0/16
        await env.apply(w.ternary_add("prim.trust", [1, port, ip("10.0.0.0")],
                                      [1, 0xF, 0xFFFF0000], "trusted", priority=prio))
    await env.apply(env.mcast_set(3, [(0, 7), (2, 8), (0, 9)]))
    rng = env.rng
    twice, once, n_mcast = [], {0: [], 1: []}, 0
    # one input at a time: the packets count in one flow cell, in the model's order
    for port, n in ((3, 4), (2, 8)):
        for k in range(n):
            op = OP_FORWARD if k % 4 == 1 else OP_MCAST
            user = await env.send(prim_frame(rng, op, rng.choice([64, 128, 300]),
                                             src="10.0.0.1", sport=1000, tag=rng.randrange(4)),
                                  port)
            tag = (user >> 1) & 0xFFFF
            n_mcast += op == OP_MCAST
            (twice.append(tag) if port == 2 and op == OP_MCAST else once[port - 2].append(tag))
        await env.drain()
    env.check_outputs()
    assert len(env.received[0]) == 2 * n_mcast and twice     # two copies on wire TX 0 each
    assert sorted(env.host_cpl[0]) == sorted(twice * 2 + once[0])
    assert sorted(env.host_cpl[1]) == sorted(once[1]) and once[1]
    await env.check_counters()


#: NetClone's request path (sequence numbers from bank ``nc.seq``) to one server behind wire TX 1
HOST_ACCESS_CONFIG = {
    "programs": {"nc": {"trusted_ports": [0]}},
    "tables": {
        "nc.groups": {"entries": [{"key": 10, "action": "candidates",
                                   "params": {"s1": 1, "s2": 1, "policy": 1}}]},
        "nc.servers": {"entries": [{"key": 1, "action": "server", "params": {
            "ip": "10.77.1.1", "mac": "02:00:00:00:01:01", "smac": "02:00:00:00:ff:01",
            "port": 1}}]}},
}


@cocotb.test()
async def test_host_access_under_updates(dut):
    """A host access of a register bank while packets update that bank every clock. The
    platform's own programs have no one-beat packet that writes a bank (a primitives frame is
    66 bytes, 2 beats, so a bank sees one every other clock), so the packets are NetClone
    requests (60 bytes, one beat): 1,000 back to back from wire RX 0 each take a sequence
    number from bank ``nc.seq`` (one cell, ``seq += 1``: port A reads and port B writes every
    clock) and carry it out on wire TX 1. Meanwhile the host reads the cell, writes it
    (0x40000000) and reads it again through the AXI-Lite window (``AsyncCsrClient``).

    * Slot: the bank's host port (req to ack, probed in the core) answers each access within
      the documented bound (register.py: HOST_PATIENCE + D + 2 <= 75 cycles), and each waited
      past HOST_PATIENCE (the bank was busy every clock: the slot came from an ingress bubble).
    * No update lost: the sequence numbers out are 1..m and then 0x40000001.. with no gap or
      repeat, so the host write was ordered between packet m and m+1; the model, given the
      write at that point, gives the same frames (bytes, order), and the final cell
      (0x40000000 + 1000 - m) is the model's.
    * The reads return model states consistent with that order: the first k <= m packets'
      count, the second 0x40000000 plus at most 1000 - m.
    """
    from netstor.compiler import config_ops
    from netstor.elements.register import RegisterOp
    from netstor.offloads.netclone.header import NcHeader, NETCLONE_UDP_PORT
    from netstor.offloads.netclone.program import OP_REQ
    env = CoreEnv(dut, seed=SEED)
    await env.reset()
    _quiet(env)
    writes, regs = config_ops(HOST_ACCESS_CONFIG, schema=env.schema)
    for name, value in regs:
        await env.reg_write(name, value)
    await env.apply(writes)
    rng, N, W = env.rng, 1000, 0x40000000
    frames = [udp_frame(rng, 60, src="10.77.0.1", dst="10.77.2.1", sport=NETCLONE_UDP_PORT,
                        dport=NETCLONE_UDP_PORT,
                        payload=NcHeader(OP_REQ, 0, 10, 0, 0, 0, 0, 0).pack())
              for _ in range(N)]
    assert all(len(f) <= 64 for f in frames)
    bank = dut.app.core.datapath.stage1
    req, ack = bank.nc__seq_req, bank.nc__seq_ack
    slots = []                         # (req cycle, ack cycle) at the bank's host port

    async def probe():
        t = None
        while True:
            await RisingEdge(dut.clk)
            if req.value and t is None:
                t = env.cycle
            if ack.value and t is not None:
                slots.append((t, env.cycle))
                t = None
    cocotb.start_soon(probe())
    starts = []
    cocotb.start_soon(_first_beats(env, 0, starts))
    for f in frames:                   # queued at once: sent back to back, one per clock
        await env.src[0].send(AxiStreamFrame(f, tuser=0))
    while len(starts) < 100:           # the stream runs and has reached the bank (stage 1)
        await ClockCycles(dut.clk, 10)
    access = []                        # (what, AXI-Lite cycles)
    t = env.cycle
    v1 = await env.csr.mem_read("nc.seq", 0)
    access.append(("read", env.cycle - t))
    t = env.cycle
    await env.csr.mem_write("nc.seq", 0, W)
    access.append(("write", env.cycle - t))
    t = env.cycle
    v2 = await env.csr.mem_read("nc.seq", 0)
    access.append(("read", env.cycle - t))
    done_at, last_in = env.cycle, None
    while env.sink[1].count() < N:
        await ClockCycles(dut.clk, 100)
    last_in = starts[-1]
    await ClockCycles(dut.clk, 200)
    got = []
    while not env.sink[1].empty():
        fr = env.sink[1].recv_nowait()
        got.append(bytes(fr.tdata))
    seqs = [int.from_bytes(g[46:50], "big") for g in got]
    waits = [b - a for a, b in slots]
    dut._log.info(f"host accesses (AXI-Lite cycles): {access}; bank port req->ack: {waits}; "
                  f"reads {v1:#x}, {v2:#x}; input span {starts[-1] - starts[0] + 1} cycles for "
                  f"{len(starts)} packets, accesses done at {done_at}, last packet in at {last_in}")
    assert starts[-1] - starts[0] == N - 1, "the requests did not arrive one per clock"
    assert done_at < last_in, "the host accesses ended after the stream"
    assert len(slots) == 3
    bound = RegisterOp.HOST_PATIENCE + 65 + 2
    assert all(RegisterOp.HOST_PATIENCE < w_ <= bound for w_ in waits), waits
    # every packet's update applied, in order, the host write between packets m and m+1
    assert len(seqs) == N
    m = next(k for k, s_ in enumerate(seqs) if s_ > N)
    assert seqs == list(range(1, m + 1)) + list(range(W + 1, W + N - m + 1)), seqs[:8]
    assert 0 < v1 <= m and W <= v2 <= W + N - m, (v1, v2, m)
    for k, f in enumerate(frames):
        if k == m:
            env.model.mem_write("nc.seq", 0, W)
        env.expect(f, 0)
    env.received[1] = [(g, 0) for g in got]
    env.check_outputs()
    assert await env.csr.mem_read("nc.seq", 0) == env.model.mem_read("nc.seq", 0) == W + N - m
    await env.check_counters()
