"""NetLR on the whole core in Verilator against the golden model, with back-pressure on every
output (run by ``sim/test_core.py`` on the shared core build of the default bitstream, listed in
the offload's ``cocotb`` hook): the default core's programs, NetLR with its default
:data:`SLOTS` slots."""
from __future__ import annotations

import os
import random

import cocotb
from cocotb.triggers import ClockCycles

from netstor.sim.core_env import CoreEnv, ip, pause_generator
from netstor.sim.frames import udp_frame

from .config import model_writes
from .header import NETLR_UDP_PORT, OP_READ, OP_READ_REPLY, OP_WRITE, OP_WRITE_REPLY, LrHeader
from .program import SLOTS

SEED = int(os.environ.get("NETSTOR_SEED", "1"))
SMAC = 0x02000000FF01
CLIENT = "10.77.0.1"
REPLICAS = {1: "10.77.1.1", 2: "10.77.1.2", 3: "10.77.1.3", 4: "10.77.1.4"}
FPS = [0x1111, 0x2222, 0x3333, 0x4444]


def section(down=(), joining=()):
    return {"smac": SMAC, "mcast_base": 500,
            "replicas": {r: {"ip": a, "mac": 0x020000000100 + r, "port": 1,
                             "udp": NETLR_UDP_PORT + r} for r, a in REPLICAS.items()},
            "groups": {0: [1, 2, 3], 1: [4, 2]}, "down": list(down), "joining": list(joining)}


def nl_frame(rng, hdr, *, src=CLIENT, dst="10.77.2.1", sport=NETLR_UDP_PORT):
    payload = hdr.pack() + bytes(rng.randrange(256) for _ in range(rng.choice([16, 40, 120])))
    return udp_frame(rng, 64 + len(payload), src=src, dst=dst, sport=sport,
                     dport=NETLR_UDP_PORT, payload=payload)


#: membership after NetLR packet i: a replica fails mid-run, rejoins (phase 1), goes live
MEMBERSHIP = {50: ((3,), ()), 90: ((), (3,)), 130: ((), ())}
WRITE_SETS = {0: (1, 2, 3), 1: (4, 2)}


def traffic(rng, model, writer, n=160):
    """The test's stimulus, independent of the simulator: yields ``("send", frame, input)``,
    ``("config", writes)`` (a membership change: the section applied again) and ``("wait",
    cycles)``. The consumer runs the golden model on every frame it sends before asking for
    the next item (the acks owed to a write carry the seq the model gave it)."""
    acks = []                 # (header, rid) the replicas owe
    for i in range(n):
        if i in MEMBERSHIP:
            down, joining = MEMBERSHIP[i]
            yield "config", model_writes(model.pipeline, section(down, joining),
                                         writer=writer)[1]
        kind = rng.random()
        if acks and kind < 0.5:                        # an owed ack, in random order
            h, rid = acks.pop(rng.randrange(len(acks)))
            if rng.random() < 0.1:
                acks.append((h, rid))                  # duplicated later
            if rng.random() < 0.05:
                h = h._replace(seq=max(1, h.seq - 1))  # stale
            a = h._replace(op=OP_WRITE_REPLY, rid=rid)
            forged = rng.random() < 0.08               # from the untrusted port
            yield "send", nl_frame(rng, a, src=REPLICAS[rid], dst=CLIENT,
                                   sport=NETLR_UDP_PORT + rid), 1 if forged else 0
        elif kind < 0.72:                              # a write
            group = rng.choice([0, 0, 0, 1, 7])
            k = rng.randrange(len(FPS))                # objects 0 and 3 share slot 1
            fp = 0 if rng.random() < 0.04 else FPS[k]   # fp 0: refused
            h = LrHeader(op=OP_WRITE, group=group, slot=k % 3 + 1 + rng.choice([0, SLOTS]),
                         fp=fp, req=rng.getrandbits(32))
            seq0 = model.mem_read("nl.seq", 0)
            yield "send", nl_frame(rng, h), 0
            seq = model.mem_read("nl.seq", 0)
            if seq != seq0:                            # admitted: every copy is answered
                for r in WRITE_SETS[group] + ((4,) if rng.random() < 0.1 else ()):
                    acks.append((h._replace(seq=seq), r))
        elif kind < 0.95:                              # a read
            k = rng.randrange(len(FPS))
            h = LrHeader(op=OP_READ, group=rng.choice([0, 0, 1]), slot=k % 3 + 1, fp=FPS[k],
                         req=rng.getrandbits(32))
            yield "send", nl_frame(rng, h), 0
        else:                                          # a read reply, a host-to-host op
            r = rng.choice(list(REPLICAS))
            h = LrHeader(op=rng.choice([OP_READ_REPLY, 17]), group=0, slot=1, fp=FPS[0], seq=3,
                         rid=r, req=rng.getrandbits(32))
            yield "send", nl_frame(rng, h, src=REPLICAS[r], dst=CLIENT), 0
        if rng.random() < 0.4:   # stateless routed traffic on the other port meanwhile
            yield "send", udp_frame(rng, rng.choice([64, 300]), src="10.77.2.9",
                                    dst="10.77.0.9"), 1
        yield "wait", rng.choice([8, 30, 60])


@cocotb.test()
async def test_netlr(dut):
    """Writes (three copies on one port, rewritten per rid), acks in random order with
    duplicates, stale acks and forged ones from the untrusted port, slot collisions, reads
    during writes and round robin, a replica failing mid-write and rejoining in two phases
    (the section applied again through the control window), unknown groups; every output
    paused 30% of the cycles. Every NetLR packet enters on wire port 0 (so the hardware sees
    them in the model's order; replies are trusted from port 0 only); routed traffic loads
    port 1 meanwhile."""
    env = CoreEnv(dut, seed=SEED + 14)
    assert env.mcast_mode == "list"
    assert "nl" in [p.name for p in env.pipeline.programs]
    await env.reset()
    for q, sink in env.sink.items():
        sink.set_pause_generator(pause_generator(env.rng, 0.3))
    w = env.writer
    for prefix, port, dmac in (("10.77.0.0", 0, 0x020000000001), ("10.77.1.0", 1, 0x020000000002),
                               ("10.77.2.0", 1, 0x020000000003)):
        await env.apply(w.lpm_add("l3.routes", ip(prefix), 24, "route",
                                  {"port": port, "dmac": dmac, "smac": SMAC}))
    _p, writes = model_writes(env.pipeline, section(), writer=w, trusted_ports=[0])
    await env.apply(writes)

    # the stimulus has its own generator (the pause generators draw from env.rng every cycle)
    for item in traffic(random.Random(SEED + 14), env.model, w):
        if item[0] == "config":
            # the hardware must have taken every packet the model already ran before the
            # tables change under them: wait for the inputs to empty and the header path
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
    names = ["nl.seq", "nl.rr"] + [f"nl.{c}" for c in ("collide", "stale", "absorbed",
                                                        "commits", "ignored", "refused")]
    await env.check_memories(names)
    for s in (1, 2, 3):
        assert await env.csr.mem_read("nl.slots", s) == env.model.mem_read("nl.slots", s), s
    c = {n: env.model.mem_read(n, 0) for n in names if n != "nl.rr"}
    assert c["nl.seq"] > 20 and all(v > 0 for v in c.values()), c
    assert env.model.counter("nl.trust.miss") > 0
