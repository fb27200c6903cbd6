"""Register access from the host, driven by the schema that ``CsrBuilder.build`` exports.

The host never computes an offset: every name is looked up in the schema. A *transport* moves
32-bit words: any object with ``read32(offset) -> int`` and ``write32(offset, value)``, where
``offset`` is a byte offset inside the application's control window (a PCIe BAR mapping, a
simulation bus master, a test fake).

Two clients share one implementation: each operation is written once as a generator that
yields bus operations (``("r", offset)`` / ``("w", offset, value)``) and receives read values;
:class:`CsrClient` drives it with a synchronous transport, :class:`AsyncCsrClient` with a
transport whose ``read32``/``write32`` are coroutines (cocotb, asyncio). The two expose the same
methods with the same arguments; the async ones are awaited.
"""

from __future__ import annotations

import hashlib
import json

__all__ = ["CsrClient", "AsyncCsrClient", "SchemaMismatch", "IndirectError", "schema_hash"]

SCHEMA_FORMAT = 1
_STATUS_BUSY, _STATUS_ERROR = 1, 2


def schema_hash(schema):
    """First 8 hex digits of sha256 over the canonical JSON (sorted keys, no spaces) of
    ``schema`` without its ``"hash"`` key: the value of the SCHEMA_HASH register."""
    body = {k: v for k, v in schema.items() if k != "hash"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


class SchemaMismatch(RuntimeError):
    """The device and the host schema do not describe the same register map."""


class IndirectError(RuntimeError):
    """The device answered an indirect memory command with status 2 (error)."""


def _version_str(v):
    return f"{v >> 16}.{v & 0xFFFF}"


class _CsrCore:
    """Schema lookups and the operations as bus-operation generators (no I/O here)."""

    def __init__(self, schema, transport, *, max_polls=1000):
        if schema.get("format") != SCHEMA_FORMAT:
            raise SchemaMismatch(f"schema format {schema.get('format')!r} is not "
                                 f"{SCHEMA_FORMAT}: this driver cannot read it")
        if schema.get("hash") != schema_hash(schema):
            raise SchemaMismatch(f"schema hash field {schema.get('hash')!r} does not match its "
                                 f"content ({schema_hash(schema)}): the schema file was edited "
                                 "or corrupted; regenerate it from the gateware build")
        if max_polls < 1:
            raise ValueError("max_polls must be at least 1")
        self.schema = schema
        self.transport = transport
        self.max_polls = max_polls
        self._regs = {r["name"]: r for r in schema["registers"]}
        self._counters = {c["name"]: c for c in schema["counters"]}
        self._mems = {mem["name"]: mem for mem in schema["memories"]}
        self._ind = schema["indirect"]
        self._hdr = schema["header"]

    # -------------------------------------------------------------------- lookups

    def _lookup(self, table, kind, name):
        try:
            return table[name]
        except KeyError:
            raise KeyError(f"no {kind} named {name!r} in the schema") from None

    @property
    def register_names(self):
        return list(self._regs)

    @property
    def counter_names(self):
        return list(self._counters)

    @property
    def memory_names(self):
        return list(self._mems)

    # ----------------------------------------------------------- operation generators

    def _g_check_id(self, expected_app_id):
        sc = self.schema
        ident = yield ("r", self._hdr["id"])
        if ident != expected_app_id:
            raise SchemaMismatch(f"device ID is {ident:#010x}, expected {expected_app_id:#010x}: "
                                 "not the expected application bitstream (or the wrong "
                                 "control window)")
        if sc["app_id"] != expected_app_id:
            raise SchemaMismatch(f"host schema is for application {sc['app_id']:#010x}, not "
                                 f"{expected_app_id:#010x}: wrong schema file")
        hw_version = yield ("r", self._hdr["version"])
        hw_hash = yield ("r", self._hdr["schema_hash"])
        sw_hash = int(sc["hash"], 16)
        sw_version = sc["version"]
        if hw_hash != sw_hash or hw_version != sw_version:
            both = (f"bitstream: version {_version_str(hw_version)}, schema hash "
                    f"{hw_hash:08x}; host schema: version {_version_str(sw_version)}, hash "
                    f"{sc['hash']}")
            if hw_version < sw_version:
                verdict = "the bitstream is stale (older than the host schema): rebuild/reload it"
            elif hw_version > sw_version:
                verdict = ("the host schema is stale (older than the bitstream): regenerate it "
                           "from the bitstream's build")
            else:
                verdict = ("same version but different register maps: one side was rebuilt "
                           "without a version bump; the bitstream's build is the reference, so "
                           "regenerate the host schema from it (or reload a matching bitstream)")
            raise SchemaMismatch(f"register map mismatch ({both}): {verdict}")
        # bus check through SCRATCH: two complementary patterns, then restore
        old = yield ("r", self._hdr["scratch"])
        for pattern in (0xA5C3_5A3C, 0x5A3C_A5C3):
            yield ("w", self._hdr["scratch"], pattern)
            got = yield ("r", self._hdr["scratch"])
            if got != pattern:
                raise SchemaMismatch(f"SCRATCH read back {got:#010x} after writing "
                                     f"{pattern:#010x}: the control bus is not working")
        yield ("w", self._hdr["scratch"], old)
        return {"app_id": ident, "version": (hw_version >> 16, hw_version & 0xFFFF),
                "hash": sc["hash"]}

    def _g_reg_read(self, name):
        r = self._lookup(self._regs, "register", name)
        value = 0
        for j in range(r["words"]):
            word = yield ("r", r["offset"] + 4 * j)
            value |= word << (32 * j)
        return value & ((1 << r["width"]) - 1)

    def _g_reg_write(self, name, value):
        r = self._lookup(self._regs, "register", name)
        if r["access"] != "rw":
            raise PermissionError(f"register {name!r} is read-only")
        if not isinstance(value, int) or not 0 <= value < 2 ** r["width"]:
            raise ValueError(f"register {name!r}: {value!r} does not fit {r['width']} bits")
        for j in range(r["words"]):
            yield ("w", r["offset"] + 4 * j, (value >> (32 * j)) & 0xFFFF_FFFF)

    def _g_counter_read(self, name):
        c = self._lookup(self._counters, "counter", name)
        lo = yield ("r", c["offset"])          # latches the high word
        hi = yield ("r", c["offset"] + 4)
        return hi << 32 | lo

    def _g_counter_clear(self, name):
        c = self._lookup(self._counters, "counter", name)
        yield ("w", c["offset"], 0)

    def _g_wait_idle(self, what):
        for _ in range(self.max_polls):
            status = yield ("r", self._ind["status"])
            if status != _STATUS_BUSY:
                return status
        raise TimeoutError(f"{what}: indirect access still busy after {self.max_polls} polls")

    def _g_mem_command(self, name, addr, words):
        """Run one indirect command: a read when ``words`` is None, else a write of them."""
        mem = self._lookup(self._mems, "memory", name)
        if not isinstance(addr, int) or not 0 <= addr < mem["depth"]:
            raise ValueError(f"memory {name!r}: address {addr!r} outside 0..{mem['depth'] - 1}")
        op = "read" if words is None else "write"
        yield from self._g_wait_idle(f"memory {name!r} {op} (waiting for a previous command)")
        for off, w in zip(self._ind["data"], words or ()):
            yield ("w", off, w)
        yield ("w", self._ind["select"], mem["id"])
        yield ("w", self._ind["address"], addr)
        yield ("w", self._ind["command"], self._ind["commands"][op])
        status = yield from self._g_wait_idle(f"memory {name!r} {op} of address {addr}")
        if status == _STATUS_ERROR:
            raise IndirectError(f"memory {name!r}: the device rejected the {op} of address "
                                f"{addr} (status 2)")
        if status != 0:
            raise IndirectError(f"memory {name!r}: unexpected status {status}")
        return mem

    def _g_mem_read(self, name, addr):
        mem = yield from self._g_mem_command(name, addr, None)
        value = 0
        for j in range(-(-mem["entry_width"] // 32)):
            word = yield ("r", self._ind["data"][j])
            value |= word << (32 * j)
        return value & ((1 << mem["entry_width"]) - 1)

    def _g_mem_write(self, name, addr, value):
        mem = self._lookup(self._mems, "memory", name)
        if not isinstance(value, int) or not 0 <= value < 2 ** mem["entry_width"]:
            raise ValueError(f"memory {name!r}: {value!r} does not fit {mem['entry_width']} bits")
        words = [(value >> (32 * j)) & 0xFFFF_FFFF for j in range(-(-mem["entry_width"] // 32))]
        yield from self._g_mem_command(name, addr, words)


def _run_sync(transport, gen):
    try:
        op = next(gen)
        while True:
            if op[0] == "r":
                op = gen.send(transport.read32(op[1]))
            else:
                transport.write32(op[1], op[2])
                op = gen.send(None)
    except StopIteration as stop:
        return stop.value


async def _run_async(transport, gen):
    try:
        op = next(gen)
        while True:
            if op[0] == "r":
                op = gen.send(await transport.read32(op[1]))
            else:
                await transport.write32(op[1], op[2])
                op = gen.send(None)
    except StopIteration as stop:
        return stop.value


class CsrClient(_CsrCore):
    """Synchronous client: ``CsrClient(schema, transport, *, max_polls=1000)``.

    ``max_polls`` bounds every busy wait of the indirect access (``TimeoutError`` beyond)."""

    def check_id(self, expected_app_id):
        """Check ID, VERSION, SCHEMA_HASH against ``expected_app_id`` and the schema, and the bus
        through SCRATCH (restored). Raises :class:`SchemaMismatch` naming the stale side;
        returns ``{"app_id", "version": (major, minor), "hash"}``."""
        return _run_sync(self.transport, self._g_check_id(expected_app_id))

    def reg_read(self, name):
        """Read a register (all its words, LSW first)."""
        return _run_sync(self.transport, self._g_reg_read(name))

    def reg_write(self, name, value):
        """Write an ``rw`` register (all its words, LSW first; ``value`` must fit)."""
        return _run_sync(self.transport, self._g_reg_write(name, value))

    def counter_read(self, name):
        """Read a 64-bit counter (low word, which latches the high word, then high word)."""
        return _run_sync(self.transport, self._g_counter_read(name))

    def counter_clear(self, name):
        """Clear a counter."""
        return _run_sync(self.transport, self._g_counter_clear(name))

    def mem_read(self, name, addr):
        """Read entry ``addr`` of memory ``name`` through the indirect access."""
        return _run_sync(self.transport, self._g_mem_read(name, addr))

    def mem_write(self, name, addr, value):
        """Write entry ``addr`` of memory ``name``; returns when the block has acked."""
        return _run_sync(self.transport, self._g_mem_write(name, addr, value))


class AsyncCsrClient(_CsrCore):
    """The same methods as :class:`CsrClient`, as coroutines, over an async transport."""

    async def check_id(self, expected_app_id):
        return await _run_async(self.transport, self._g_check_id(expected_app_id))

    async def reg_read(self, name):
        return await _run_async(self.transport, self._g_reg_read(name))

    async def reg_write(self, name, value):
        return await _run_async(self.transport, self._g_reg_write(name, value))

    async def counter_read(self, name):
        return await _run_async(self.transport, self._g_counter_read(name))

    async def counter_clear(self, name):
        return await _run_async(self.transport, self._g_counter_clear(name))

    async def mem_read(self, name, addr):
        return await _run_async(self.transport, self._g_mem_read(name, addr))

    async def mem_write(self, name, addr, value):
        return await _run_async(self.transport, self._g_mem_write(name, addr, value))
