"""NetRS on the whole core in Verilator against the golden model (run by ``sim/test_core.py``
on the shared core build, listed in the offload's ``cocotb`` hook)."""
from __future__ import annotations

import os

import cocotb
from cocotb.triggers import ClockCycles

from netstor.compiler import config_ops
from netstor.sim.core_env import CoreEnv
from netstor.sim.frames import udp_frame

from .header import SSL, RsRequest, RsResponse
from .program import DRS_RID, M_DRS, M_MON, M_REQ, M_RESP, NETRS_UDP_PORT
from .ranking import n_code

SEED = int(os.environ.get("NETSTOR_SEED", "1"))


def _rs_request(rng, group, *, avail=0xFF, src="10.77.0.1", dst="10.77.1.1", mf=None):
    hdr = RsRequest(rgid=group, avail=avail, mf=M_REQ if mf is None else mf).pack()
    payload = hdr + bytes(rng.randrange(256) for _ in range(rng.choice([19, 40, 100])))
    return udp_frame(rng, 64 + len(payload), src=src, dst=dst, sport=NETRS_UDP_PORT,
                     dport=NETRS_UDP_PORT, payload=payload)


def _rs_response(rng, rid, mf, rv, sid, q, t, *, marker=0, src="10.77.1.1", dst="10.77.0.1"):
    hdr = RsResponse(rid, mf, rv & 0xFFFFFFFF, marker, SSL, sid, q, t).pack()
    payload = hdr + bytes(rng.randrange(256) for _ in range(rng.choice([10, 60])))
    return udp_frame(rng, 64 + len(payload), src=src, dst=dst, sport=NETRS_UDP_PORT,
                     dport=NETRS_UDP_PORT, payload=payload)


@cocotb.test()
async def test_netrs(dut):
    """NetRS on the RTL against the model: selections by C3 (n below and above 127) / least
    outstanding / power of two choices / round robin with the availability bits, back-to-back
    requests (the recirculated second passes that count outstanding requests come after the
    burst, as the model is told), responses updating the state (EWMAs of q, t and the
    response time from RV, in the time unit and with the weight each group's RV carries:
    groups of different units and weights; service times from 1 us to the 32-bit maximum,
    RVs from the switch and random ones with every unit code, so samples saturate in every
    field, counted in rs.samples), responses for unknown servers and other RSNodes, DRS,
    requests forwarded to another RSNode or dropped, source markers and the monitor, a wrong
    magic field and a truncated header.

    meta.arrival is a cycle count the model cannot know; RV and the response time use it in
    units of 256 cycles, so NetRS packets are sent in windows well inside one 256-cycle unit
    (arrival = this test's cycle count + the input path, exact to a few cycles). Requests come
    in on port 0 and responses on port 1 (the servers' side), never in the same window, so the
    hardware handles the stateful packets in the model's order."""
    env = CoreEnv(dut, seed=SEED + 11)
    await env.reset()
    # server ids are 10 bits: 1000 is a real server (its cell, rs.servers key and group slot
    # beyond the 6 bits of old); 44 has state but no address, 2024 is beyond the ids
    servers = {1: "10.77.1.1", 2: "10.77.1.2", 3: "10.77.1.3", 1000: "10.77.1.4"}
    sw = "02:00:00:00:ff:01"

    def group(algo, n, mask, sids, unit, ewma):
        sl = {f"s{k}": (sids[k] if k < len(sids) else 0) for k in range(8)}
        return {"action": "replicas", "params": {"algo": algo, "n": n, "mask": mask,
                                                 "unit": unit, "ewma": ewma, **sl}}

    # trust: reports (responses, monitor packets) from the servers' /24 and from 10.77.0.1
    # (the monitored responses "from another pod" below) on either wire port; forged ones
    # from another client address are dropped and counted (rs.trust.miss)
    cfg = {"programs": {"rs": {"trusted_ports": [0, 1],
                               "trusted_sources": ["10.77.1.0/24", "10.77.0.1/32"]}},
           "tables": {
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
            {"key": 7, **group(0, 2, 0b111, [1, 2, 3], 0, 3)},
            {"key": 11, **group(0, n_code(500), 0b111, [3, 1, 2], 6, 1)},
            {"key": 8, **group(1, 1, 0b1111, [1, 2, 3, 1000], 12, 7)},
            {"key": 9, **group(2, 1, 0b1111, [1000, 3, 2, 1], 2, 0)},
            {"key": 10, **group(3, 1, 0b111, [2, 3, 1000], 9, 4)}]},
        "rs.servers": {"entries": [
            {"key": s, "action": "server",
             "params": {"ip": ip, "mac": f"02:00:00:00:{s >> 8:02x}:{s & 0xFF:02x}",
                        "smac": sw, "port": 1}}
            for s, ip in servers.items()]}}}
    # the writes the host API makes on a fresh device (config_ops: recorded on a scratch
    # model), replayed to the RTL and the model: a Device over AXI-Lite would first read back
    # every entry of each table it touches (rs.servers and rs.rgroups: 1,024 entries, ~11k
    # AXI reads, many minutes of cocotb)
    writes, regs = config_ops(cfg, schema=env.schema)
    for name, value in regs:
        await env.reg_write(name, value)
    await env.apply(writes)
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
                g = rng.choice([7, 7, 11, 8, 9, 10, 99])
                avail = rng.choice([0xFF, 0xFF, 0xFF, 0b110, 0b1001, 0b1000_0000])
                src = rng.choice(["10.77.0.1", "10.77.0.2", "10.77.0.1", "10.77.0.9",
                                  "10.77.0.20", "10.77.0.21"] if rng.random() < 0.3
                                 else ["10.77.0.1", "10.77.0.2"])
                f = _rs_request(rng, g, avail=avail, src=src,
                                dst=servers[rng.choice([1, 2, 3, 1000])])
                await env.send(f, 0, arrival=arrival)
                arrival += 2 + len(f) // 64
        elif kind <= 8:                    # 1-2 responses from the server side
            for _ in range(rng.choice([1, 1, 2])):
                sid = rng.choice([1, 2, 3, 1000, 1000, 44, 2024])
                mf = rng.choice([M_RESP] * 6 + [M_DRS, M_MON])
                rid = rng.choice([5] * 8 + [6, 9, DRS_RID])
                rv = rng.choice(rvs[-8:]) if rng.random() < 0.8 else rng.getrandbits(32)
                f = _rs_response(rng, rid, mf, rv, sid, rng.choice([0, 1, 3, 4096, 0xFFFF]),
                                 rng.choice([1000, 40_000, 400_000, 4_000_000, 70_000_000,
                                             rng.getrandbits(32), 0xFFFFFFFF]),
                                 src=servers.get(sid, "10.77.1.44"),
                                 dst=rng.choice(["10.77.0.1", "10.77.0.9"]))
                await env.send(f, 1, arrival=arrival)
                arrival += 2 + len(f) // 64
        else:                              # odd packets: monitored response from the client
            c = rng.randrange(4)           # side (other pod), wrong magic, truncated header,
            if c == 3:                     # a forged response or monitor packet (untrusted)
                f = _rs_response(rng, 5, rng.choice([M_RESP, M_MON]), rng.choice(rvs[-8:]),
                                 rng.choice([1, 2, 3]), 0xFFFF, 0xFFFFFFFF,
                                 marker=(7 << 16) | 1, src="10.77.0.2", dst="10.77.0.1")
            elif c == 0:
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
            if len(fr) > 54 and fr[36:38] == NETRS_UDP_PORT.to_bytes(2, "big"):
                rvs.append(int.from_bytes(fr[50:54], "big"))
    await env.drain(timeout_cycles=40000)
    env.check_outputs()
    await env.check_counters()
    await env.check_memories(["rs.samples", "rs.monitor", "rs.noreplica", "rs.seq"])
    # two of the 8 state copies and the round-robin pointers (1,024 cells each; cocotb reads
    # a cell in ~1 ms, so not all): the cells below 64, the ids and groups in use above,
    # and 2024 mod 1024 (= 1000, in use) and its neighbours
    for name, cells in (("rs.st0", [*range(64), 999, 1000, 1001, 1023]),
                        ("rs.st5", [*range(64), 999, 1000, 1001, 1023]),
                        ("rs.rr", [*range(64), 99, 1023])):
        for a in cells:
            hw, mo = await env.csr.mem_read(name, a), env.model.mem_read(name, a)
            assert hw == mo, f"{name}[{a}]: hw {hw:#x} model {mo:#x}"
    m = env.model
    picked = {s: m.mem_read("rs.st0", s) for s in servers}
    assert sum(m.mem_read("rs.monitor", a) for a in range(64)) > 10
    assert m.counter_read("rs.trust.miss") > 0
    assert m.mem_read("rs.noreplica", 0) > 0 and m.counter_read("out1.pkts") > 40
    assert all(v != 0 for v in picked.values()), picked    # every server got state
    cells = [m.mem_read("rs.samples", k) for k in range(8)]
    assert cells[0] > 0 and all(sum(c for k, c in enumerate(cells) if k & b) > 0
                                for b in (1, 2, 4)), cells   # every kind of saturation
