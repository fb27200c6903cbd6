"""NetClone on the whole core in Verilator against the golden model (run by ``sim/test_core.py``
on the shared core build, listed in the offload's ``cocotb`` hook)."""
from __future__ import annotations

import os

import cocotb
from cocotb.task import bridge
from cocotb.triggers import ClockCycles

from netstor.api import Device
from netstor.sim.axil_transport import AxilTransport
from netstor.sim.core_env import CoreEnv
from netstor.sim.frames import udp_frame

from .header import NcHeader
from .program import NETCLONE_UDP_PORT, OP_REQ, OP_REPLY

SEED = int(os.environ.get("NETSTOR_SEED", "1"))


def _nc_frame(rng, op, *, group=10, seq=0, server_id=0, load=0, fidx=0, clone=0, src="10.77.0.1",
              dst="10.77.2.1", size=None):
    hdr = NcHeader(op, clone, group, seq, server_id, load, fidx, 0).pack()
    payload = hdr + bytes(rng.randrange(256) for _ in range(rng.choice([16, 40, 200])))
    return udp_frame(rng, size or 64 + len(payload), src=src, dst=dst, sport=NETCLONE_UDP_PORT,
                     dport=NETCLONE_UDP_PORT, payload=payload)


@cocotb.test()
async def test_netclone(dut):
    """NetClone on the RTL against the model: cloning when both candidates are idle (through
    recirculation), back-to-back requests to the same group, replies updating the state,
    filtered duplicates, filter-slot collisions, lost partners, unknown groups and servers,
    bad header fields. Stateful NetClone packets share one input (so the hardware sees them in
    the model's order); routed traffic loads the other port meanwhile."""
    env = CoreEnv(dut, seed=SEED + 7)
    await env.reset()
    servers = {1: "10.77.1.1", 2: "10.77.1.2", 3: "10.77.1.3"}
    # trust: replies only from wire port 0 (every stateful packet of this test comes in
    # there) and the servers' /24; forged replies from port 1 or from a client's address are
    # dropped and counted (nc.trust.miss) and change nothing
    cfg = {"programs": {"nc": {"trusted_ports": [0], "trusted_sources": ["10.77.1.0/24"]}},
           "tables": {
        "l3.routes": {"entries": [
            {"prefix": "10.77.0.0/24", "action": "route",
             "params": {"port": 0, "dmac": "02:00:00:00:00:01", "smac": "02:00:00:00:ff:01"}},
            {"prefix": "10.77.2.0/24", "action": "route",
             "params": {"port": 1, "dmac": "02:00:00:00:02:01", "smac": "02:00:00:00:ff:01"}}]},
        "nc.groups": {"entries": [
            {"key": 10, "action": "candidates", "params": {"s1": 1, "s2": 2, "policy": 1}},
            {"key": 11, "action": "candidates", "params": {"s1": 2, "s2": 3, "policy": 0}},
            {"key": 12, "action": "candidates", "params": {"s1": 3, "s2": 9, "policy": 1}}]},
        "nc.servers": {"entries": [
            {"key": s, "action": "server", "params": {"ip": ip, "mac": f"02:00:00:00:01:0{s}",
                                                      "smac": "02:00:00:00:ff:01", "port": 1}}
            for s, ip in servers.items()]}}}
    Device.open("model", schema=env.schema, model=env.model).apply(cfg)
    await bridge(lambda: Device.open("sim", schema=env.schema,
                                     transport=AxilTransport(env.axil)).apply(cfg))()
    rng = env.rng
    for i in range(120):
        kind = rng.randrange(10)
        if kind <= 4:        # requests, mostly to known groups, back to back
            f = _nc_frame(rng, OP_REQ, group=rng.choice([10, 10, 11, 12, 99]),
                          clone=rng.choice([0, 0, 1, 0x7F]))
            await env.send(f, 0)
        elif kind <= 8:      # replies with small seq/fidx ranges so slots collide and match
            sid = rng.choice([1, 2, 3])
            seq = rng.randrange(1, 12)
            f = _nc_frame(rng, OP_REPLY, seq=seq, server_id=sid, load=rng.choice([0, 0, 1, 5]),
                          fidx=rng.choice([seq, 3, 4]), clone=rng.choice([0, 1, 2, 2]),
                          src=servers[sid], dst="10.77.0.1")
            # one input for every stateful packet: the model's order is the hardware's
            forged = rng.random() < 0.25
            if forged and rng.random() < 0.5:          # from a client's address
                f = _nc_frame(rng, OP_REPLY, seq=seq, server_id=sid, load=65535,
                              fidx=rng.choice([seq, 3, 4]), clone=rng.choice([1, 2]),
                              src="10.77.0.66", dst="10.77.0.1")
                await env.send(f, 0)
            else:                                      # from the untrusted port (stateless)
                await env.send(f, 1 if forged else 0)
        else:                # bad op / truncated header on the NetClone port
            f = _nc_frame(rng, rng.choice([0, 3, 255]), group=10)
            if rng.random() < 0.5:
                f = udp_frame(rng, 64, dst="10.77.2.1", sport=NETCLONE_UDP_PORT,
                              dport=NETCLONE_UDP_PORT, payload=b"\x01\x00\x0a")
            await env.send(f, 0)
        if rng.random() < 0.5:   # stateless routed traffic on the other port meanwhile
            await env.send(udp_frame(rng, rng.choice([64, 300]), dst="10.77.0.9"), 1)
        # paced so that no input or recirculation buffer overflows (the model has no
        # buffers; overflow is covered by test_sizes_backpressure_updates)
        await ClockCycles(dut.clk, rng.choice([0, 8, 30]))
    await env.drain(timeout_cycles=40000)
    env.check_outputs()
    await env.check_counters()
    await env.check_memories(["nc.seq", "nc.load1", "nc.load2", "nc.filtered"])
    for addr in range(0, 4096, 97):          # a sample of the filter bank
        assert await env.csr.mem_read("nc.filter", addr) == env.model.mem_read("nc.filter", addr)
    assert env.model.mem_read("nc.seq", 0) > 20
    assert env.model.counter("nc.trust.miss") > 5
    assert all(env.model.mem_read(b, s) != 65535 for b in ("nc.load1", "nc.load2")
               for s in range(64))
    assert env.model.mem_read("nc.filtered", 0) > 0, "no duplicate was filtered in this run"
