"""cocotb tests of the whole core (``netstor_core`` behind ``tb_core``) against the model.

Every test configures tables through the AXI-Lite window (mirrored into the golden model),
sends scapy-built frames with cocotbext-axi sources, and compares every output frame (bytes
and tuser), the TX completions, the counters and (where state changes) register banks with
the model.
"""
from __future__ import annotations

import os
import random

import cocotb
from cocotb.triggers import ClockCycles

from netstor.sim.core_env import CoreEnv, pause_generator
from netstor.sim.frames import (udp_frame, prim_frame, arp_frame, ipv6_frame, tcp_frame, bad_frames,
                    ROUTER_MAC)
from netstor.gateware.core import APP_ID
from netstor.programs.primitives import (OP_FORWARD, OP_CAS, OP_MAX, OP_MCAST, OP_RECIRC,
                                         OP_CLONE)

SEED = int(os.environ.get("NETSTOR_SEED", "1"))


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
    await env.apply(w.mcast_set(3, [(0, 7), (1, 8), (3, 9)]))
    for rid, tag in ((7, 0x0707), (8, 0x0808), (9, 0x0909)):
        await env.apply(w.exact_add("prim.copy_tag", [rid], "tag_copy", {"tag": tag}))
    # deny source 10.66.0.0/16 with source port 666 exactly
    await env.apply(w.ternary_add("prim.acl", [ip("10.66.0.0"), 666],
                                  [0xFFFF0000, 0xFFFF], "deny", priority=0))


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
}


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
        dumps = {t: dev.table(t).dump() for t in dev.table_names}
        return dumps, dev.mcast_dump(), dev.bank("prim.cells").read(3), dev.registers()

    dumps, groups, cell, regs = await bridge(host_code)()
    routes = model_dev.table("l3.routes")
    routes.add("10.2.0.0/16", "route", port=0, dmac=3, smac=4)
    routes.delete("10.3.0.0/16")
    assert dumps == {t: model_dev.table(t).dump() for t in model_dev.table_names}
    assert groups == model_dev.mcast_dump() == {2: [(0, 1), (1, 2)]}
    assert cell == 77 and regs == model_dev.registers()
    rng = env.rng
    for i in range(24):
        dst = rng.choice(["10.1.0.5", "10.1.2.7", "10.2.3.4", "10.3.1.1", "192.168.0.1"])
        await env.send(udp_frame(rng, rng.choice([64, 128, 300]), dst=dst), rng.randrange(2))
        await env.send(prim_frame(rng, OP_MCAST if i % 3 == 0 else OP_FORWARD), 0)
    await env.drain()
    env.check_outputs()
    await env.check_counters()


def _nc_frame(rng, op, *, group=10, seq=0, server_id=0, load=0, fidx=0, clone=0, src="10.77.0.1",
              dst="10.77.2.1", size=None):
    import struct
    from netstor.offloads.netclone.program import NETCLONE_UDP_PORT
    hdr = struct.pack("!BBHIHHHH", op, clone, group, seq, server_id, load, fidx, 0)
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
    from cocotb.task import bridge
    from netstor.sim.axil_transport import AxilTransport
    from netstor.api import Device
    from netstor.offloads.netclone.program import OP_REQ, OP_REPLY
    env = CoreEnv(dut, seed=SEED + 7)
    await env.reset()
    servers = {1: "10.77.1.1", 2: "10.77.1.2", 3: "10.77.1.3"}
    cfg = {"tables": {
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
            await env.send(f, 0)
        else:                # bad op / truncated header on the NetClone port
            f = _nc_frame(rng, rng.choice([0, 3, 255]), group=10)
            if rng.random() < 0.5:
                from netstor.offloads.netclone.program import NETCLONE_UDP_PORT
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
    assert env.model.mem_read("nc.filtered", 0) > 0, "no duplicate was filtered in this run"


def _rs_request(rng, group, *, avail=0xFF, src="10.77.0.1", dst="10.77.1.1", mf=None):
    import struct
    from netstor.offloads.netrs.program import NETRS_UDP_PORT, M_REQ
    hdr = struct.pack("!H6sHHB", 0, (M_REQ if mf is None else mf).to_bytes(6, "big"), 0,
                      group, avail)
    payload = hdr + bytes(rng.randrange(256) for _ in range(rng.choice([19, 40, 100])))
    return udp_frame(rng, 64 + len(payload), src=src, dst=dst, sport=NETRS_UDP_PORT,
                     dport=NETRS_UDP_PORT, payload=payload)


def _rs_response(rng, rid, mf, rv, sid, q, t, *, marker=0, src="10.77.1.1", dst="10.77.0.1"):
    import struct
    from netstor.offloads.netrs.program import NETRS_UDP_PORT
    hdr = struct.pack("!H6sHIHHHH", rid, mf.to_bytes(6, "big"), rv & 0xFFFF, marker, 6, sid,
                      q, t)
    payload = hdr + bytes(rng.randrange(256) for _ in range(rng.choice([10, 60])))
    return udp_frame(rng, 64 + len(payload), src=src, dst=dst, sport=NETRS_UDP_PORT,
                     dport=NETRS_UDP_PORT, payload=payload)


@cocotb.test()
async def test_netrs(dut):
    """NetRS on the RTL against the model: selections by C3 / least outstanding / power of two
    choices / round robin with the availability bits, back-to-back requests (the recirculated
    second passes that count outstanding requests come after the burst, as the model is told),
    responses updating the state (EWMA q, t, response time from RV), responses for unknown
    servers and other RSNodes, DRS, requests forwarded to another RSNode or dropped, source
    markers and the monitor, a wrong magic field and a truncated header.

    meta.arrival is a cycle count the model cannot know; RV and the response time use it in
    units of 256 cycles, so NetRS packets are sent in windows well inside one 256-cycle unit
    (arrival = this test's cycle count + the input path, exact to a few cycles). Requests come
    in on port 0 and responses on port 1 (the servers' side), never in the same window, so the
    hardware handles the stateful packets in the model's order."""
    from cocotb.task import bridge
    from netstor.sim.axil_transport import AxilTransport
    from netstor.api import Device
    from netstor.offloads.netrs.program import M_RESP, M_MON, M_DRS, DRS_RID, NETRS_UDP_PORT
    env = CoreEnv(dut, seed=SEED + 11)
    await env.reset()
    servers = {1: "10.77.1.1", 2: "10.77.1.2", 3: "10.77.1.3", 4: "10.77.1.4"}
    sw = "02:00:00:00:ff:01"

    def group(algo, n, mask, sids):
        sl = {f"s{k}": (sids[k] if k < len(sids) else 0) for k in range(8)}
        return {"action": "replicas", "params": {"algo": algo, "n": n, "mask": mask, **sl}}

    cfg = {"tables": {
        "l3.routes": {"entries": [
            {"prefix": "10.77.0.0/24", "action": "route",
             "params": {"port": 0, "dmac": "02:00:00:00:00:01", "smac": sw}},
            {"prefix": "10.77.1.0/24", "action": "route",
             "params": {"port": 1, "dmac": "02:00:00:00:01:01", "smac": sw}}]},
        "rs.tgroups": {"entries": [
            {"prefix": "10.77.0.0/24", "action": "rsnode", "params": {"rid": 5, "tg": 2}},
            {"prefix": "10.77.0.9/32", "action": "rsnode", "params": {"rid": DRS_RID, "tg": 3}},
            {"prefix": "10.77.0.20/32", "action": "rsnode", "params": {"rid": 9, "tg": 4}},
            {"prefix": "10.77.0.21/32", "action": "rsnode", "params": {"rid": 10, "tg": 4}}]},
        "rs.local": {"entries": [{"key": 5, "action": "local"}]},
        "rs.forward": {"entries": [{"key": 9, "action": "forward", "params": {
            "port": 1, "dmac": "02:00:00:00:0a:09", "smac": sw}}]},
        "rs.rgroups": {"entries": [
            {"key": 7, **group(0, 2, 0b111, [1, 2, 3])},
            {"key": 8, **group(1, 1, 0b1111, [1, 2, 3, 4])},
            {"key": 9, **group(2, 1, 0b1111, [4, 3, 2, 1])},
            {"key": 10, **group(3, 1, 0b111, [2, 3, 4])}]},
        "rs.servers": {"entries": [
            {"key": s, "action": "server", "params": {"ip": ip, "mac": f"02:00:00:00:01:0{s}",
                                                      "smac": sw, "port": 1}}
            for s, ip in servers.items()]}}}
    Device.open("model", schema=env.schema, model=env.model).apply(cfg)
    await bridge(lambda: Device.open("sim", schema=env.schema,
                                     transport=AxilTransport(env.axil)).apply(cfg))()
    marker = (1 << 16) | 3
    env.model.mem_write("rs.marker", 0, marker)
    await env.csr.mem_write("rs.marker", 0, marker)
    env.model.deferred = []
    rng = env.rng
    D = 8                                  # input path: wire RX to the parser, idle input
    rvs = [0]                              # RVs the switch stamped (from the model's outputs)
    slot = 0
    for w in range(100):
        # two windows per 256 cycles (at +24 and +140: every packet of a window arrives in
        # the same 256-cycle unit, and the previous window's packets, second passes
        # included, are through)
        while True:
            target = (slot // 2) * 256 + (24 if slot % 2 == 0 else 140) + rng.randrange(4)
            slot += 1
            if target > env.cycle + D:
                break
        await ClockCycles(dut.clk, target - (env.cycle + D))
        arrival = env.cycle + D
        kind = rng.randrange(10)
        if kind <= 4:                      # 1-3 requests back to back from the client side
            for _ in range(rng.choice([1, 1, 2, 3])):
                g = rng.choice([7, 7, 8, 9, 10, 99])
                avail = rng.choice([0xFF, 0xFF, 0xFF, 0b110, 0b1001, 0b1000_0000])
                src = rng.choice(["10.77.0.1", "10.77.0.2", "10.77.0.1", "10.77.0.9",
                                  "10.77.0.20", "10.77.0.21"] if rng.random() < 0.3
                                 else ["10.77.0.1", "10.77.0.2"])
                f = _rs_request(rng, g, avail=avail, src=src,
                                dst=servers[rng.choice([1, 2, 3, 4])])
                await env.send(f, 0, arrival=arrival)
                arrival += 2 + len(f) // 64
        elif kind <= 8:                    # 1-2 responses from the server side
            for _ in range(rng.choice([1, 1, 2])):
                sid = rng.choice([1, 2, 3, 4, 4, 44])
                mf = rng.choice([M_RESP] * 6 + [M_DRS, M_MON])
                rid = rng.choice([5] * 8 + [6, 9, DRS_RID])
                rv = rng.choice(rvs[-8:])
                f = _rs_response(rng, rid, mf, rv, sid, rng.choice([0, 1, 3, 70000 & 0xFFFF]),
                                 rng.choice([16, 40, 400, 0xFFFF]),
                                 src=servers.get(sid, "10.77.1.44"),
                                 dst=rng.choice(["10.77.0.1", "10.77.0.9"]))
                await env.send(f, 1, arrival=arrival)
                arrival += 2 + len(f) // 64
        else:                              # odd packets: monitored response from the client
            c = rng.randrange(3)           # side (other pod), wrong magic, truncated header
            if c == 0:
                f = _rs_response(rng, 5, M_MON, 0, 1, 0, 0, marker=(7 << 16) | 1,
                                 src="10.77.0.1", dst="10.77.0.2")
            elif c == 1:
                f = _rs_request(rng, 7, mf=0x123456789ABC)
            else:
                f = udp_frame(rng, 64, src="10.77.0.1", dst="10.77.1.2", sport=NETRS_UDP_PORT,
                              dport=NETRS_UDP_PORT, payload=b"\x00\x05NRSR")
            await env.send(f, 0, arrival=arrival)
        if rng.random() < 0.4:             # routed traffic on the other port meanwhile
            await env.send(udp_frame(rng, rng.choice([64, 300]), dst="10.77.0.33"), 1,
                           arrival=arrival)
        if env.model.deferred is not None:
            env.expect_deferred()       # second passes after the burst, as in hardware
        # the RVs requests left with (so responses carry real ones)
        for fr, _ in env.expected[1][-3:]:
            if len(fr) > 52 and fr[36:38] == NETRS_UDP_PORT.to_bytes(2, "big"):
                rvs.append(int.from_bytes(fr[50:52], "big"))
    await env.drain(timeout_cycles=40000)
    env.check_outputs()
    await env.check_counters()
    await env.check_memories(["rs.st0", "rs.st5",       # two of the 8 copies (time)
                              
        "rs.monitor", "rs.noreplica", "rs.rr", "rs.seq"])
    m = env.model
    picked = {s: m.mem_read("rs.st0", s) for s in servers}
    assert sum(m.mem_read("rs.monitor", a) for a in range(64)) > 10
    assert m.mem_read("rs.noreplica", 0) > 0 and m.counter_read("out1.pkts") > 40
    assert all(v != 0 for v in picked.values()), picked    # every server got state
