"""cocotb tests of the control block, run by ``sim/test_csr.py`` (top: ``CsrTestTop``).

Most checks go through :class:`netstor.driver.regs.AsyncCsrClient` over cocotbext-axi's
``AxiLiteMaster``; channel-ordering and back-pressure cases drive the AXI-Lite wires directly.
"""
from __future__ import annotations

import copy
import itertools
import json
import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiResp
from netstor.sim.axil_transport import AxilTransport

from netstor.driver.regs import AsyncCsrClient, IndirectError, SchemaMismatch, schema_hash

with open(os.environ["CSR_TEST_PARAMS"]) as f:
    PARAMS = json.load(f)
SCHEMA = PARAMS["schema"]
INIT_FAST = PARAMS["init_fast"]
INIT_SLOW = PARAMS["init_slow"]
APP_ID = 0x4E535452
CLK_NS = 4
TIMEOUT_US = 200             # a hung handshake fails the test instead of the run
HDR = SCHEMA["header"]
IND = SCHEMA["indirect"]
REG = {r["name"]: r for r in SCHEMA["registers"]}
CNT = {c["name"]: c for c in SCHEMA["counters"]}
BIG = 0xFFFF_FFFF


def cycles():
    return int(get_sim_time(unit="ns")) // CLK_NS


async def reset(dut):
    Clock(dut.clk, CLK_NS, unit="ns").start()
    dut.rst.value = 1
    await ClockCycles(dut.clk, 5)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


async def setup(dut, max_polls=1000):
    for sig in ("awvalid", "wvalid", "bready", "arvalid", "rready"):
        getattr(dut, f"s_axil_{sig}").value = 0
    axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
    await reset(dut)
    tr = AxilTransport(axil)
    return axil, tr, AsyncCsrClient(SCHEMA, tr, max_polls=max_polls)


def pattern_sum(n):
    """Value of cnt.pattern after n cycles from reset: sum of (i mod 8) for i < n."""
    q, r = divmod(n, 8)
    return 28 * q + r * (r - 1) // 2


# --------------------------------------------------------------------------- header


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def test_header(dut):
    axil, tr, csr = await setup(dut)
    info = await csr.check_id(APP_ID)
    assert info == {"app_id": APP_ID, "version": tuple(PARAMS["version"]),
                    "hash": SCHEMA["hash"]}
    assert await tr.read32(HDR["id"]) == APP_ID
    assert await tr.read32(HDR["version"]) == PARAMS["version"][0] << 16 | PARAMS["version"][1]
    assert await tr.read32(HDR["schema_hash"]) == int(SCHEMA["hash"], 16)
    assert await tr.read32(HDR["caps"]) == 2 | len(IND["data"]) << 16
    assert len(IND["data"]) == 3                      # ceil(72 / 32)
    assert await tr.read32(HDR["scratch"]) == 0       # reset value (check_id restored it)
    await tr.write32(HDR["scratch"], 0xDEAD_BEEF)
    assert await tr.read32(HDR["scratch"]) == 0xDEAD_BEEF
    await axil.write(HDR["scratch"] + 2, b"\x34\x12")  # wstrb 0b1100
    assert await tr.read32(HDR["scratch"]) == 0x1234_BEEF
    # ro header words ignore writes
    for off in (HDR["id"], HDR["version"], HDR["schema_hash"], HDR["caps"]):
        before = await tr.read32(off)
        await tr.write32(off, 0)
        assert await tr.read32(off) == before

    # wrong application id
    try:
        await csr.check_id(0x1234_5678)
        assert False, "check_id accepted a wrong application id"
    except SchemaMismatch as e:
        assert "not the expected application" in str(e)

    def variant(**changes):
        sc = copy.deepcopy(SCHEMA)
        sc.update(changes)
        sc["hash"] = schema_hash(sc)
        return AsyncCsrClient(sc, tr)

    hw_version = SCHEMA["version"]
    for changes, stale in (({"version": hw_version + 1}, "the bitstream is stale"),
                           ({"version": hw_version - 1}, "the host schema is stale"),
                           ({"extra_field": 1}, "same version but different register maps")):
        try:
            await variant(**changes).check_id(APP_ID)
            assert False, f"check_id accepted a mismatching schema {changes}"
        except SchemaMismatch as e:
            assert stale in str(e), str(e)
    # an edited schema file (hash no longer matches its content) is refused up front
    edited = copy.deepcopy(SCHEMA)
    edited["registers"][0]["offset"] += 4
    try:
        AsyncCsrClient(edited, tr)
        assert False
    except SchemaMismatch as e:
        assert "edited or corrupted" in str(e)


# ------------------------------------------------------------------------- registers


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def test_registers(dut):
    axil, tr, csr = await setup(dut)
    # reset values, and ro registers driven by the top
    for name, value in (("ctl", 0x12345678), ("small", 5), ("wide", 0), ("blk.dotted", 0xA5),
                        ("test.stall", 0), ("mirror", 0xEDCBA987), ("wide_mirror", 1),
                        ("const", 0xABCDE)):
        assert await csr.reg_read(name) == value, name

    await csr.reg_write("ctl", 0xCAFE_F00D)
    assert await csr.reg_read("ctl") == 0xCAFE_F00D
    assert await csr.reg_read("mirror") == 0xCAFE_F00D ^ BIG   # the gateware sees it

    # byte strobes
    off = REG["ctl"]["offset"]
    await axil.write(off + 1, b"\xAB")                          # wstrb 0b0010
    assert await csr.reg_read("ctl") == 0xCAFE_AB0D
    await axil.write(off + 3, b"\x01")                          # wstrb 0b1000
    assert await csr.reg_read("ctl") == 0x01FE_AB0D
    await axil.write(off, b"\x55\x66")                          # wstrb 0b0011
    assert await csr.reg_read("ctl") == 0x01FE_6655

    # narrow register: bits above its width are dropped on write and read as 0
    await tr.write32(REG["small"]["offset"], BIG)
    assert await tr.read32(REG["small"]["offset"]) == 0xFFF
    await axil.write(REG["small"]["offset"] + 1, b"\x03")
    assert await csr.reg_read("small") == 0x3FF
    await tr.write32(REG["blk.dotted"]["offset"], 0x1234_5677)
    assert await csr.reg_read("blk.dotted") == 0x77

    # 48-bit register: two words, LSW first; the carry in the mirror crosses the words
    await csr.reg_write("wide", 0x1234_FFFF_FFFF)
    assert await csr.reg_read("wide") == 0x1234_FFFF_FFFF
    assert await csr.reg_read("wide_mirror") == 0x1235_0000_0000
    wo = REG["wide"]["offset"]
    assert await tr.read32(wo) == BIG and await tr.read32(wo + 4) == 0x1234
    await tr.write32(wo + 4, 0xFFFF_ABCD)                       # only 16 bits exist
    assert await tr.read32(wo + 4) == 0xABCD
    await axil.write(wo + 4 + 1, b"\x99")
    assert await csr.reg_read("wide") == 0x99CD_FFFF_FFFF
    await csr.reg_write("wide", 2**48 - 1)
    assert await csr.reg_read("wide_mirror") == 0               # wraps at 48 bits

    # read-only registers ignore writes
    for name in ("mirror", "const", "wide_mirror"):
        before = await csr.reg_read(name)
        r = REG[name]
        for j in range(r["words"]):
            await tr.write32(r["offset"] + 4 * j, 0x5A5A_5A5A)
        assert await csr.reg_read(name) == before, name
    try:
        await csr.reg_write("mirror", 1)
        assert False
    except PermissionError:
        pass
    try:
        await csr.reg_write("small", 0x1000)
        assert False
    except ValueError:
        pass


# ---------------------------------------------------------------------------- counters


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def test_counters(dut):
    axil, tr, csr = await setup(dut)
    t0 = cycles()
    # cnt.cycles counts cycles since reset
    for _ in range(5):
        a = cycles() - t0
        v = await csr.counter_read("cnt.cycles")
        b = cycles() - t0
        assert a - 2 <= v <= b + 2, (a, v, b)
        await ClockCycles(dut.clk, random.randint(0, 30))

    # cnt.pattern: exactly one of the values sum(i mod 8, i < n)
    for _ in range(5):
        v = await csr.counter_read("cnt.pattern")
        n0 = max(0, int(v / 3.5) - 16)
        assert any(pattern_sum(n) == v for n in range(n0, n0 + 40)), v

    # cnt.big: +0xFFFFFFFF per cycle, so every consistent 64-bit read is a multiple of it;
    # a read whose high word came from another cycle than its low word is not.
    last = 0
    for i in range(40):
        v = await csr.counter_read("cnt.big")
        assert v % BIG == 0, f"torn 64-bit read {v:#x}"
        assert v >= last and v >> 32 > 0
        last = v
        await ClockCycles(dut.clk, random.randint(0, 7))

    # the high word is latched by the low-word read and stays put
    lo_off = CNT["cnt.big"]["offset"]
    lo = await tr.read32(lo_off)
    hi1 = await tr.read32(lo_off + 4)
    await ClockCycles(dut.clk, 50)
    assert await tr.read32(lo_off + 4) == hi1
    assert (hi1 << 32 | lo) % BIG == 0
    # writing the high word does nothing
    await tr.write32(lo_off + 4, 0)
    assert await tr.read32(lo_off + 4) == hi1
    assert await csr.counter_read("cnt.big") > (hi1 << 32 | lo)

    # clear: the value restarts from 0
    for name, per_cycle in (("cnt.big", BIG), ("cnt.cycles", 1), ("cnt.pattern", 7)):
        a = cycles()
        await csr.counter_clear(name)
        v = await csr.counter_read(name)
        b = cycles()
        assert v <= (b - a) * per_cycle, (name, v, b - a)
        if name == "cnt.big":
            assert v % BIG == 0
    # one counter's clear leaves the others alone
    assert await csr.counter_read("cnt.big") > 0
    assert await csr.counter_read("cnt.cycles") < 200


# ----------------------------------------------------------------------- indirect access


async def wait_idle(tr):
    for _ in range(2000):
        s = await tr.read32(IND["status"])
        if s != 1:
            return s
    raise TimeoutError("status stuck busy")


async def raw_command(tr, sel, addr, cmd):
    await tr.write32(IND["select"], sel)
    await tr.write32(IND["address"], addr)
    await tr.write32(IND["command"], cmd)
    return await wait_idle(tr)


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def test_indirect(dut):
    axil, tr, csr = await setup(dut)
    fast, slow = list(INIT_FAST), list(INIT_SLOW)
    for a in range(len(fast)):
        assert await csr.mem_read("fast", a) == fast[a], a
    for a in range(len(slow)):
        assert await csr.mem_read("slow", a) == slow[a], a
    # after a read the staging words hold the entry, zero-extended
    await csr.mem_read("fast", 3)
    words = [await tr.read32(o) for o in IND["data"]]
    assert words == [fast[3] & BIG, fast[3] >> 32, 0]

    # writes, including all-ones across the partial top word
    for name, model, width in (("fast", fast, 40), ("slow", slow, 72)):
        for a, v in ((0, 2**width - 1), (len(model) - 1, 0), (1, 0x5A5A << (width - 16))):
            await csr.mem_write(name, a, v)
            model[a] = v
        for a in range(len(model)):
            assert await csr.mem_read(name, a) == model[a], (name, a)

    # errors: status 2 and nothing touched (fast's address bits are 4: 16 and 0x10000
    # would alias entry 0 if the range check were missing)
    await tr.write32(IND["data"][0], 0x1111_1111)
    await tr.write32(IND["data"][1], 0x22)
    for sel, addr, cmd in ((0, 16, 2), (0, 0x10000, 2), (1, 5, 2), (1, 7, 1), (2, 0, 2),
                           (0xFFFF_FFFF, 0, 1), (0, 0, 0), (0, 0, 3), (0, 0, 0x102)):
        assert await raw_command(tr, sel, addr, cmd) == 2, (sel, addr, cmd)
        assert await tr.read32(IND["data"][0]) == 0x1111_1111   # no read happened either
    assert await csr.mem_read("fast", 0) == fast[0]
    assert await csr.mem_read("slow", 0) == slow[0]
    # an error is cleared by the next good command
    assert await raw_command(tr, 0, 2, 1) == 0
    try:
        await csr.mem_read("fast", 16)
        assert False
    except ValueError:
        pass

    # while busy: status reads 1 and select/address/data/command writes are ignored
    await csr.reg_write("test.stall", 200)
    await tr.write32(IND["select"], 1)
    await tr.write32(IND["address"], 2)
    await tr.write32(IND["command"], 1)
    assert await tr.read32(IND["status"]) == 1
    await tr.write32(IND["select"], 0)
    await tr.write32(IND["address"], 4)
    await tr.write32(IND["data"][0], 0x7777_7777)
    await tr.write32(IND["command"], 2)
    assert await tr.read32(IND["select"]) == 1
    assert await tr.read32(IND["address"]) == 2
    assert await tr.read32(IND["status"]) == 1
    assert await wait_idle(tr) == 0
    words = [await tr.read32(o) for o in IND["data"]]
    value = sum(w << (32 * j) for j, w in enumerate(words))
    assert value == slow[2]
    assert await csr.mem_read("fast", 4) == fast[4]           # the ignored write did nothing

    # bounded polling: a client that gives up raises TimeoutError, and the next command
    # (from a patient client) waits for the pending one first
    impatient = AsyncCsrClient(SCHEMA, tr, max_polls=2)
    try:
        await impatient.mem_read("slow", 1)
        assert False, "no timeout"
    except TimeoutError as e:
        assert "still busy" in str(e)
    assert await csr.mem_read("fast", 5) == fast[5]
    await csr.reg_write("test.stall", 0)

    # random mixed traffic against a model
    rng = random.Random(7)
    for _ in range(60):
        name, model, width = rng.choice((("fast", fast, 40), ("slow", slow, 72)))
        a = rng.randrange(len(model))
        if rng.random() < 0.5:
            v = rng.getrandbits(width)
            await csr.mem_write(name, a, v)
            model[a] = v
        else:
            assert await csr.mem_read(name, a) == model[a]


# ---------------------------------------------------------------- traffic and unmapped


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def test_traffic(dut):
    axil, tr, csr = await setup(dut)
    rng = random.Random(3)

    # back-to-back: queue many writes and reads without waiting
    for i in range(16):
        axil.init_write(HDR["scratch"], (0x100 + i).to_bytes(4, "little"))
    events = [axil.init_read(HDR["id"], 4) for _ in range(16)]
    await axil.wait()
    for ev in events:
        await ev.wait()
        assert int.from_bytes(ev.data.data, "little") == APP_ID
    assert await tr.read32(HDR["scratch"]) == 0x10F

    # concurrent clients on one bus, with random idle gaps and response back-pressure
    def gaps(p):
        return itertools.cycle([rng.random() < p for _ in range(97)])
    axil.write_if.aw_channel.set_pause_generator(gaps(0.3))
    axil.write_if.w_channel.set_pause_generator(gaps(0.4))
    axil.write_if.b_channel.set_pause_generator(gaps(0.5))
    axil.read_if.ar_channel.set_pause_generator(gaps(0.3))
    axil.read_if.r_channel.set_pause_generator(gaps(0.5))

    async def ctl_task():
        for _ in range(25):
            v = rng.getrandbits(32)
            await csr.reg_write("ctl", v)
            assert await csr.reg_read("ctl") == v
            assert await csr.reg_read("mirror") == v ^ BIG

    async def wide_task():
        for _ in range(25):
            v = rng.getrandbits(48)
            await csr.reg_write("wide", v)
            assert await csr.reg_read("wide") == v
            assert await csr.reg_read("wide_mirror") == (v + 1) % 2**48

    async def id_task():
        for _ in range(40):
            assert await tr.read32(HDR["id"]) == APP_ID

    async def mem_task():
        # memory contents survive the reset (earlier tests wrote them)
        model = [await csr.mem_read("fast", a) for a in range(16)]
        for _ in range(15):
            a, v = rng.randrange(16), rng.getrandbits(40)
            await csr.mem_write("fast", a, v)
            model[a] = v
            b = rng.randrange(16)
            assert await csr.mem_read("fast", b) == model[b]

    async def counter_task():
        last = 0
        for _ in range(20):
            v = await csr.counter_read("cnt.big")
            assert v % BIG == 0 and v >= last
            last = v

    tasks = [cocotb.start_soon(t()) for t in (ctl_task, wide_task, id_task, mem_task,
                                              counter_task)]
    for t in tasks:
        await t

    # unmapped offsets read 0 and take writes without effect
    end = max([r["offset"] + 4 * r["words"] for r in SCHEMA["registers"]]
              + [c["offset"] + 8 for c in SCHEMA["counters"]])
    unmapped = [0x14, 0x18, 0x1C, IND["data"][-1] + 4, 0xFC, end, end + 0x100, 0x1000,
                2**SCHEMA["addr_width"] - 4]
    snapshot = {r["name"]: await csr.reg_read(r["name"]) for r in SCHEMA["registers"]}
    scratch = await tr.read32(HDR["scratch"])
    for off in unmapped:
        assert await tr.read32(off) == 0, hex(off)
        await tr.write32(off, 0xFFFF_FFFF)
        assert await tr.read32(off) == 0, hex(off)
    assert await tr.read32(HDR["scratch"]) == scratch
    for name, v in snapshot.items():
        assert await csr.reg_read(name) == v, name
    # the command register reads 0
    assert await tr.read32(IND["command"]) == 0


# ---------------------------------------------------------- raw channel ordering


async def send(dut, ch, fields):
    """Drive one beat on channel ch (aw/w/ar) and wait for the handshake."""
    for k, v in fields.items():
        getattr(dut, f"s_axil_{k}").value = v
    valid, ready = getattr(dut, f"s_axil_{ch}valid"), getattr(dut, f"s_axil_{ch}ready")
    valid.value = 1
    while True:
        await ReadOnly()
        taken = int(ready.value)
        await RisingEdge(dut.clk)
        if taken:
            break
    valid.value = 0


async def take(dut, ch, hold, payload):
    """Wait for valid on ch (b/r), keep ready low ``hold`` cycles (checking the payload stays
    put), then take the beat; returns the payload's value."""
    valid, ready = getattr(dut, f"s_axil_{ch}valid"), getattr(dut, f"s_axil_{ch}ready")
    sig = getattr(dut, f"s_axil_{payload}")
    ready.value = 0
    while True:
        await ReadOnly()
        if int(valid.value):
            break
        await RisingEdge(dut.clk)
    first = int(sig.value)
    for _ in range(hold):
        await RisingEdge(dut.clk)
        await ReadOnly()
        assert int(valid.value) == 1 and int(sig.value) == first, f"{ch} changed while stalled"
    await RisingEdge(dut.clk)
    ready.value = 1
    await ReadOnly()
    assert int(valid.value) == 1 and int(sig.value) == first
    await RisingEdge(dut.clk)
    ready.value = 0
    return first


async def raw_write(dut, addr, data, order, gap=0, bhold=0, strb=0xF):
    aw = {"awaddr": addr, "awprot": 0}
    w = {"wdata": data, "wstrb": strb}
    if order == "together":
        t = cocotb.start_soon(send(dut, "w", w))
        await send(dut, "aw", aw)
        await t
    else:
        first, second = (("aw", aw), ("w", w)) if order == "aw_first" else (("w", w), ("aw", aw))
        await send(dut, *first)
        await ClockCycles(dut.clk, gap)
        await send(dut, *second)
    assert await take(dut, "b", bhold, "bresp") == 0


async def raw_read(dut, addr, rhold=0):
    await send(dut, "ar", {"araddr": addr, "arprot": 0})
    return await take(dut, "r", rhold, "rdata")


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def test_raw_ordering(dut):
    for sig in ("awvalid", "wvalid", "bready", "arvalid", "rready"):
        getattr(dut, f"s_axil_{sig}").value = 0
    await reset(dut)
    scratch = HDR["scratch"]
    n = 0
    for order in ("together", "aw_first", "w_first"):
        for gap in (0, 1, 5):
            for hold in (0, 3):
                n += 1
                await raw_write(dut, scratch, 0x1000 + n, order, gap=gap, bhold=hold)
                assert await raw_read(dut, scratch, rhold=hold) == 0x1000 + n
    # the held side stalls the other channel's second beat: AW then another AW before W
    await send(dut, "aw", {"awaddr": scratch, "awprot": 0})
    dut.s_axil_awaddr.value = REG["ctl"]["offset"]
    dut.s_axil_awvalid.value = 1
    for _ in range(4):
        await ReadOnly()
        assert int(dut.s_axil_awready.value) == 0
        await RisingEdge(dut.clk)
    dut.s_axil_awvalid.value = 0
    await send(dut, "w", {"wdata": 0xABCD, "wstrb": 0xF})
    assert await take(dut, "b", 0, "bresp") == 0
    assert await raw_read(dut, scratch) == 0xABCD

    # a second read waits while the first response is stalled
    await send(dut, "ar", {"araddr": HDR["id"], "arprot": 0})
    dut.s_axil_araddr.value = scratch
    dut.s_axil_arvalid.value = 1
    for _ in range(3):
        await ReadOnly()
        assert int(dut.s_axil_arready.value) == 0
        await RisingEdge(dut.clk)
    assert await take(dut, "r", 2, "rdata") == APP_ID
    while True:
        await ReadOnly()
        taken = int(dut.s_axil_arready.value)
        await RisingEdge(dut.clk)
        if taken:
            break
    dut.s_axil_arvalid.value = 0
    assert await take(dut, "r", 1, "rdata") == 0xABCD

    # a write and a read in flight together
    t = cocotb.start_soon(raw_write(dut, scratch, 0x5555, "w_first", gap=2, bhold=2))
    assert await raw_read(dut, HDR["id"], rhold=1) == APP_ID
    await t
    assert await raw_read(dut, scratch) == 0x5555
    # wstrb 0 writes nothing
    await raw_write(dut, scratch, 0xFFFF_FFFF, "together", strb=0)
    assert await raw_read(dut, scratch) == 0x5555
