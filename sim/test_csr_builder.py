"""Pure-Python tests of the register builder's allocation and schema, and of the host client's
bus encoding (against a recording fake transport, sync and async)."""
from __future__ import annotations

import asyncio
import hashlib
import json

import pytest

from netstor.gateware.csr import (CsrBuilder, HEADER, NETSTOR_APP_ID, schema_hash,
                                  axil_slave_signature)
from netstor.driver import regs as host
from netstor.driver.regs import CsrClient, AsyncCsrClient, IndirectError, SchemaMismatch


def declare(b, *, extra_reg=False, doc="x"):
    b.reg("a", 32, "rw", 1, doc=doc)
    b.reg("mac", 48, "rw")
    b.reg("wide", 100, "ro")
    b.reg("b.c", 1, "ro")
    if extra_reg:
        b.reg("late", 8)
    b.counter("pkts", 1)
    b.counter("bytes", 14)
    b.memory("t0", 40, 16, kind="exact", ways=2)
    b.memory("t1", 97, 3)
    return b


def silenced(result):
    """Drop Amaranth's unused-elaboratable warning for components only built for a schema."""
    result[0]._MustUse__silence = True
    return result


def built(**kw):
    return silenced(declare(CsrBuilder(), **kw).build(app_id=NETSTOR_APP_ID, version=(1, 2)))


def all_words(schema):
    words = [(v, f"header.{k}") for k, v in schema["header"].items()]
    ind = schema["indirect"]
    words += [(ind[k], k) for k in ("select", "address", "command", "status")]
    words += [(o, "data") for o in ind["data"]]
    for r in schema["registers"]:
        words += [(r["offset"] + 4 * j, r["name"]) for j in range(r["words"])]
    for c in schema["counters"]:
        words += [(c["offset"], c["name"]), (c["offset"] + 4, c["name"])]
    return words


def test_allocation():
    b = declare(CsrBuilder())
    _, sc = silenced(b.build(app_id=NETSTOR_APP_ID, version=(1, 2)))
    words = all_words(sc)
    offsets = [o for o, _ in words]
    assert len(offsets) == len(set(offsets)), "two things share an offset"
    assert all(o % 4 == 0 and 0 <= o < 2**sc["addr_width"] for o in offsets)
    assert sc["header"] == HEADER == {"id": 0, "version": 4, "schema_hash": 8, "scratch": 12,
                                      "caps": 16}
    ind = sc["indirect"]
    assert (ind["select"], ind["address"], ind["command"], ind["status"]) == (0x20, 0x24,
                                                                              0x28, 0x2C)
    assert ind["data"] == [0x30, 0x34, 0x38, 0x3C]       # ceil(97 / 32) = 4
    assert ind["commands"] == {"read": 1, "write": 2}
    regs = {r["name"]: r for r in sc["registers"]}
    assert [r["name"] for r in sc["registers"]] == ["a", "mac", "wide", "b.c"]
    assert regs["a"]["offset"] == CsrBuilder.BASE
    assert regs["mac"]["offset"] == CsrBuilder.BASE + 4 and regs["mac"]["words"] == 2
    assert regs["wide"]["offset"] == CsrBuilder.BASE + 12 and regs["wide"]["words"] == 4
    assert regs["b.c"]["offset"] == CsrBuilder.BASE + 28
    assert [c["offset"] for c in sc["counters"]] == [CsrBuilder.BASE + 32, CsrBuilder.BASE + 40]
    assert [(m["name"], m["id"]) for m in sc["memories"]] == [("t0", 0), ("t1", 1)]
    assert sc["memories"][0]["kind"] == "exact" and sc["memories"][0]["ways"] == 2
    # the builder's own records carry the same offsets
    assert [r.offset for r in b.regs] == [r["offset"] for r in sc["registers"]]
    assert [c.offset for c in b.counters] == [c["offset"] for c in sc["counters"]]
    assert [m.id for m in b.memories] == [0, 1]
    assert regs["a"] == {"name": "a", "offset": 0x100, "width": 32, "access": "rw",
                         "reset": 1, "doc": "x", "words": 1}


def test_collisions_rejected():
    b = CsrBuilder()
    b.reg("x")
    for declare_again in (lambda: b.reg("x"), lambda: b.counter("x"),
                          lambda: b.memory("x", 8, 2)):
        with pytest.raises(ValueError, match="declared twice"):
            declare_again()
    b.memory("m", 8, 2)
    with pytest.raises(ValueError, match="declared twice"):
        b.reg("m")


def test_argument_checks():
    b = CsrBuilder()
    with pytest.raises(ValueError):
        b.reg("r", 8, "wo")
    with pytest.raises(ValueError):
        b.reg("r", 8, "rw", reset=256)
    with pytest.raises(ValueError):
        b.counter("c", 0)
    with pytest.raises(ValueError):
        b.counter("c", 65)
    with pytest.raises(ValueError):
        b.memory("m", 0, 4)
    with pytest.raises(ValueError):
        b.reg("")
    for bad in (dict(app_id=-1, version=1), dict(app_id=2**32, version=1),
                dict(app_id=1, version=(1,)), dict(app_id=1, version=(2**16, 0)),
                dict(app_id=1, version=2**32)):
        with pytest.raises(ValueError):
            CsrBuilder().build(**bad)
    with pytest.raises(ValueError, match="clash"):
        CsrBuilder().build(app_id=1, version=1, schema_extra={"registers": []})
    with pytest.raises(ValueError, match="clash"):
        CsrBuilder().build(app_id=1, version=1, schema_extra={"hash": "0"})
    b = CsrBuilder()
    b.memory("m", 8, 2, id=5)
    with pytest.raises(ValueError, match="clash"):
        b.build(app_id=1, version=1)
    b = CsrBuilder()
    b.memory("m", 8, 2, bad=object())
    with pytest.raises(TypeError, match="JSON"):
        b.build(app_id=1, version=1)


def test_frozen_after_build():
    b = CsrBuilder()
    b.reg("x")
    silenced(b.build(app_id=1, version=1))
    with pytest.raises(RuntimeError, match="after CsrBuilder.build"):
        b.reg("y")
    with pytest.raises(RuntimeError, match="after CsrBuilder.build"):
        b.counter("z")
    with pytest.raises(RuntimeError):
        b.build(app_id=1, version=1)


def test_window_overflow():
    b = CsrBuilder(addr_width=9)          # 512 bytes: 0x100 left for declared things
    for i in range(64):
        b.reg(f"r{i}")
    silenced(b.build(app_id=1, version=1))          # exactly fits
    b = CsrBuilder(addr_width=9)
    for i in range(65):
        b.reg(f"r{i}")
    with pytest.raises(ValueError, match="address window"):
        b.build(app_id=1, version=1)


def test_very_wide_memory_moves_registers_up():
    b = CsrBuilder()
    b.memory("huge", 32 * 60, 2)          # 60 data words reach past BASE
    b.reg("r")
    _, sc = silenced(b.build(app_id=1, version=1))
    assert sc["indirect"]["data"][-1] == 0x30 + 4 * 59
    assert sc["registers"][0]["offset"] == 0x200
    offsets = [o for o, _ in all_words(sc)]
    assert len(offsets) == len(set(offsets))


def test_hash():
    _, s1 = built()
    _, s2 = built()
    assert s1 == s2 and s1["hash"] == s2["hash"]              # stable
    body = {k: v for k, v in s1.items() if k != "hash"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    assert s1["hash"] == hashlib.sha256(text.encode()).hexdigest()[:8]
    assert s1["hash"] == schema_hash(s1) == host.schema_hash(s1)   # both sides agree
    assert len(s1["hash"]) == 8
    # anything in the schema changes it
    assert built(extra_reg=True)[1]["hash"] != s1["hash"]
    assert built(doc="y")[1]["hash"] != s1["hash"]
    b3 = declare(CsrBuilder())
    assert silenced(b3.build(app_id=NETSTOR_APP_ID, version=(1, 3)))[1]["hash"] != s1["hash"]
    b4 = declare(CsrBuilder())
    _, s4 = silenced(b4.build(app_id=NETSTOR_APP_ID, version=(1, 2),
                              schema_extra={"tables": {"t0": 1}}))
    assert s4["tables"] == {"t0": 1} and s4["hash"] != s1["hash"]
    # a JSON round trip (the host loads the file) keeps it
    assert host.schema_hash(json.loads(json.dumps(s1))) == s1["hash"]
    assert (1 << 16 | 2) == s1["version"]


def test_component_ports():
    comp, _ = built()
    sig = axil_slave_signature(24)
    assert comp.signature == sig
    names = set(sig.members.keys())
    for ch in ("aw", "ar"):
        assert {f"s_axil_{ch}addr", f"s_axil_{ch}prot", f"s_axil_{ch}valid",
                f"s_axil_{ch}ready"} <= names
    assert {"s_axil_wdata", "s_axil_wstrb", "s_axil_wvalid", "s_axil_wready", "s_axil_bresp",
            "s_axil_bvalid", "s_axil_bready", "s_axil_rdata", "s_axil_rresp", "s_axil_rvalid",
            "s_axil_rready"} <= names
    assert len(comp.s_axil_awaddr) == 24 and len(comp.s_axil_wstrb) == 4


# ----------------------------------------------------------------- host client encoding


class FakeDevice:
    """Word-level fake of the control window: registers as a dict, one indirect memory model
    whose commands finish after ``busy_polls`` status reads. Records every access."""

    def __init__(self, schema, busy_polls=2):
        self.sc, self.busy_polls = schema, busy_polls
        self.words = {schema["header"]["id"]: schema["app_id"],
                      schema["header"]["version"]: schema["version"],
                      schema["header"]["schema_hash"]: int(schema["hash"], 16)}
        self.mems = {m["id"]: {} for m in schema["memories"]}
        self.log = []
        self.pending = 0

    def read32(self, off):
        self.log.append(("r", off))
        ind = self.sc["indirect"]
        if off == ind["status"]:
            if self.pending:
                self.pending -= 1
                return 1
            return self.words.get(off, 0)
        return self.words.get(off, 0)

    def write32(self, off, value):
        self.log.append(("w", off, value))
        ind = self.sc["indirect"]
        if off != ind["command"]:
            self.words[off] = value
            return
        mems = self.sc["memories"]
        sel, addr = self.words.get(ind["select"], 0), self.words.get(ind["address"], 0)
        if sel >= len(mems) or addr >= mems[sel]["depth"] or value not in (1, 2):
            self.words[ind["status"]] = 2
            return
        self.words[ind["status"]] = 0
        self.pending = self.busy_polls
        n = -(-mems[sel]["entry_width"] // 32)
        if value == 2:
            self.mems[sel][addr] = [self.words.get(o, 0) for o in ind["data"][:n]]
        else:
            data = self.mems[sel].get(addr, [0] * n)
            for o, w in zip(ind["data"], data + [0] * len(ind["data"])):
                self.words[o] = w


class AsyncFake:
    def __init__(self, dev):
        self.dev = dev

    async def read32(self, off):
        await asyncio.sleep(0)
        return self.dev.read32(off)

    async def write32(self, off, value):
        await asyncio.sleep(0)
        self.dev.write32(off, value)


def test_client_encoding_sync():
    _, sc = built()
    dev = FakeDevice(sc)
    c = CsrClient(sc, dev)
    assert c.check_id(NETSTOR_APP_ID) == {"app_id": NETSTOR_APP_ID, "version": (1, 2),
                                          "hash": sc["hash"]}
    regs = {r["name"]: r for r in sc["registers"]}
    dev.log.clear()
    c.reg_write("mac", 0x1122_3344_5566)
    assert dev.log == [("w", regs["mac"]["offset"], 0x3344_5566),
                       ("w", regs["mac"]["offset"] + 4, 0x1122)]
    assert c.reg_read("mac") == 0x1122_3344_5566
    with pytest.raises(PermissionError):
        c.reg_write("wide", 1)
    with pytest.raises(ValueError):
        c.reg_write("mac", 2**48)
    with pytest.raises(KeyError, match="no register named"):
        c.reg_read("nope")
    cnt = sc["counters"][1]
    dev.words[cnt["offset"]], dev.words[cnt["offset"] + 4] = 5, 7
    dev.log.clear()
    assert c.counter_read("bytes") == 7 << 32 | 5
    assert dev.log == [("r", cnt["offset"]), ("r", cnt["offset"] + 4)]   # low word first
    c.counter_clear("bytes")
    assert dev.log[-1] == ("w", cnt["offset"], 0)

    v = (1 << 96) | 0xDEAD_BEEF_0000_0001_2345
    c.mem_write("t1", 2, v)
    assert c.mem_read("t1", 2) == v
    ind = sc["indirect"]
    dev.log.clear()
    c.mem_write("t0", 1, 0xAB_1234_5678)
    writes = [e for e in dev.log if e[0] == "w"]
    assert writes == [("w", ind["data"][0], 0x1234_5678), ("w", ind["data"][1], 0xAB),
                      ("w", ind["select"], 0), ("w", ind["address"], 1),
                      ("w", ind["command"], 2)]
    with pytest.raises(ValueError):
        c.mem_read("t1", 3)
    with pytest.raises(ValueError):
        c.mem_write("t0", 0, 2**40)
    # the device refusing a command
    dev.sc = {**sc, "memories": []}               # device sees no memory: status 2
    with pytest.raises(IndirectError, match="status 2"):
        c.mem_read("t0", 0)
    dev.sc = sc
    # bounded polling
    slow = CsrClient(sc, FakeDevice(sc, busy_polls=10**6), max_polls=5)
    with pytest.raises(TimeoutError, match="5 polls"):
        slow.mem_read("t0", 0)


def test_client_checks_schema_and_device():
    _, sc = built()
    with pytest.raises(SchemaMismatch, match="edited or corrupted"):
        CsrClient({**sc, "version": 9}, FakeDevice(sc))
    dev = FakeDevice(sc)
    dev.words[sc["header"]["schema_hash"]] ^= 1
    with pytest.raises(SchemaMismatch, match="same version but different register maps"):
        CsrClient(sc, dev).check_id(NETSTOR_APP_ID)
    dev = FakeDevice(sc)
    dev.words[sc["header"]["version"]] += 1
    dev.words[sc["header"]["schema_hash"]] ^= 1
    with pytest.raises(SchemaMismatch, match="host schema is stale"):
        CsrClient(sc, dev).check_id(NETSTOR_APP_ID)
    dev.words[sc["header"]["version"]] -= 2
    with pytest.raises(SchemaMismatch, match="bitstream is stale"):
        CsrClient(sc, dev).check_id(NETSTOR_APP_ID)
    with pytest.raises(SchemaMismatch, match="not the expected application"):
        CsrClient(sc, FakeDevice(sc)).check_id(0x1234)


def test_client_async_matches_sync():
    _, sc = built()
    sync_dev, async_dev = FakeDevice(sc), FakeDevice(sc)
    s, a = CsrClient(sc, sync_dev), AsyncCsrClient(sc, AsyncFake(async_dev))

    async def run_async():
        out = [await a.check_id(NETSTOR_APP_ID)]
        await a.reg_write("mac", 0xABCDEF012345)
        out.append(await a.reg_read("mac"))
        out.append(await a.counter_read("pkts"))
        await a.mem_write("t1", 1, 2**97 - 1)
        out.append(await a.mem_read("t1", 1))
        return out

    out_s = [s.check_id(NETSTOR_APP_ID)]
    s.reg_write("mac", 0xABCDEF012345)
    out_s.append(s.reg_read("mac"))
    out_s.append(s.counter_read("pkts"))
    s.mem_write("t1", 1, 2**97 - 1)
    out_s.append(s.mem_read("t1", 1))
    assert asyncio.run(run_async()) == out_s
    assert out_s[-1] == 2**97 - 1
    assert async_dev.log == sync_dev.log        # the same bus traffic
