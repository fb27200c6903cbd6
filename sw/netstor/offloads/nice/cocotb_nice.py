"""NICE on the whole core of the default bitstream in Verilator against the golden model, with
back-pressure on every output. Run by ``sim/test_core.py`` on the shared core build (the
offload's ``cocotb`` hook): NICE's tables at the default program's sizes (hashed LPMs for the
rings and the divisions, 4-way exact tables for the nodes and the copies)."""
from __future__ import annotations

import os
import random

import cocotb
from cocotb.triggers import ClockCycles

from netstor.sim.core_env import CoreEnv, ip, pause_generator
from netstor.sim.frames import udp_frame

from .config import model_apply
from .header import NICE_UDP_PORT, OP_GET, OP_GET_REPLY, OP_PUT, OP_TS, NiceHeader
from .metadata import Metadata

SEED = int(os.environ.get("NETSTOR_SEED", "1"))
SMAC = 0x02000000FF01
NODES = {1: "10.77.1.1", 2: "10.77.1.2", 3: "10.77.1.3", 4: "10.77.1.4"}
CLIENTS = ("10.77.0.1", "10.77.0.130", "10.77.0.200", "10.77.3.9")


def section():
    return {"smac": SMAC, "mcast_base": 500, "subgroup": 20,
            "nodes": {n: {"ip": a, "mac": 0x020000000100 + n, "port": 1,
                          "udp": NICE_UDP_PORT + (n == 2)} for n, a in NODES.items()},
            "partitions": {0: [1, 2, 3], 1: [2, 3, 4], 2: [3, 4, 1]},
            "subgroups": {s: s % 3 for s in range(16) if s != 11},      # 11: unmapped
            "clients": ["10.77.0.0/24"]}


def nice_frame(rng, hdr, *, src, dst, sport=40000, dport=NICE_UDP_PORT):
    payload = hdr.pack() + bytes(rng.randrange(256) for _ in range(rng.choice([16, 40, 400])))
    return udp_frame(rng, 64 + len(payload), src=src, dst=dst, sport=sport, dport=dport,
                     payload=payload)


#: the metadata service's steps after NICE packet i (its diffed writes)
STEPS = {40: ("fail", 3), 80: ("rejoin", 3), 110: ("caught_up", 3), 140: ("fail", 1)}


def traffic(rng, writer, n=180):
    """The stimulus, independent of the simulator: ``("send", frame, input)``, ``("config",
    writes)`` (the metadata service's writes after a membership step) and ``("wait",
    cycles)``."""
    clock = [0.0]
    pending = []
    md = Metadata(section(), clock=lambda: clock[0],
                  sink=lambda ops: pending.append(model_apply(writer, ops)))
    yield "config", [w for ws in pending for w in ws]
    pending.clear()
    for i in range(n):
        if i in STEPS:
            what, node = STEPS[i]
            getattr(md, what)(node)
            yield "config", [w for ws in pending for w in ws]
            pending.clear()
        s = rng.randrange(16)
        host = rng.randrange(4096)
        c = rng.choice(CLIENTS)
        k = rng.random()
        h = NiceHeader(op=OP_GET, client=ip(c), req=rng.getrandbits(32), size=rng.randrange(9))
        if k < 0.4:                                    # a get to the unicast vring
            yield "send", nice_frame(rng, h, src=c, dst=f"10.10.{s * 16 + host // 256}."
                                                        f"{host % 256}"), 0
        elif k < 0.75:                                 # a put fragment / TS to the mcast ring
            h = h._replace(op=rng.choice([OP_PUT, OP_PUT, OP_TS]), frag=rng.randrange(2),
                           nfrag=2)
            yield "send", nice_frame(rng, h, src=c, dst=f"10.11.{s * 16 + host // 256}."
                                                        f"{host % 256}"), 0
        elif k < 0.9:                                  # a reply: plain L3
            r = rng.choice(list(NODES))
            h = h._replace(op=OP_GET_REPLY, part=rng.randrange(3))
            yield "send", nice_frame(rng, h, src=NODES[r], dst=c, sport=NICE_UDP_PORT,
                                     dport=rng.choice([40000, NICE_UDP_PORT])), 0
        else:                                          # next to the rings
            yield "send", nice_frame(rng, h, src=c, dst=rng.choice(["10.12.0.1",
                                                                     "10.9.255.255"])), 0
        if rng.random() < 0.4:   # stateless routed traffic on the other port meanwhile
            yield "send", udp_frame(rng, rng.choice([64, 300]), src="10.77.2.9",
                                    dst="10.77.0.9"), 1
        yield "wait", rng.choice([8, 30, 60])


@cocotb.test()
async def test_nice(dut):
    """Gets to divisions and primaries, put fragments and timestamps through copy lists
    (several copies on one port, each rewritten from its rid), an unmapped subgroup, replies
    routed by L3; the metadata service fails a secondary, re-admits it in two phases and
    fails a primary (promotion) between packets; every output paused 30% of the cycles. Every
    NICE packet enters on wire port 0 (the hardware sees them in the model's order); routed
    traffic loads port 1 meanwhile."""
    env = CoreEnv(dut, seed=SEED + 15)
    assert env.mcast_mode == "list"
    await env.reset()
    for q, sink in env.sink.items():
        sink.set_pause_generator(pause_generator(env.rng, 0.3))
    w = env.writer
    for prefix, port, dmac in (("10.77.0.0", 0, 0x020000000001), ("10.77.1.0", 1, 0x020000000002),
                               ("10.77.3.0", 0, 0x020000000004), ("10.77.2.0", 1, 0x020000000003)):
        await env.apply(w.lpm_add("l3.routes", ip(prefix), 24, "route",
                                  {"port": port, "dmac": dmac, "smac": SMAC}))
    for item in traffic(random.Random(SEED + 15), w):
        if item[0] == "config":
            # the hardware must have taken every packet the model already ran before the
            # tables change under them
            while not all(s.idle() for s in env.src.values()):
                await ClockCycles(dut.clk, 50)
            await ClockCycles(dut.clk, 400)
            await env.apply(item[1])
        elif item[0] == "send":
            await env.send(item[1], item[2])
        else:
            await ClockCycles(dut.clk, item[1])
    await env.drain(timeout_cycles=60000)
    env.check_outputs()
    await env.check_counters()
    c = env.model.counters()
    for k in ("nice.unicast.hit", "nice.unicast.miss", "nice.multicast.hit",
              "nice.divisions.hit", "nice.divisions.miss", "nice.copies.hit", "nice.rings.miss"):
        assert c[k] > 0, k
