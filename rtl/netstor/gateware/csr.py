"""Control/status registers: a register builder and the AXI-Lite slave it elaborates into.

Blocks *declare* what the host must reach while they elaborate; the builder allocates
addresses (never by hand), rejects name collisions, builds the AXI-Lite slave (Corundum's
application control window, 32-bit data) and exports the same map as the host schema.

Three kinds of things are declared:

* ``reg(name, width, access)``: a plain register. ``access="rw"``: the host writes it, the
  gateware reads the returned Signal. ``"ro"``: the gateware drives the returned Signal, the
  host reads it. Registers wider than 32 bits take consecutive words, least significant word
  first.
* ``counter(name, inc_width)``: a 64-bit counter. The gateware drives the returned Signal with
  the amount to add this cycle (0 for none). The host reads the low word first, which latches
  the high word (read at +4) so the 64-bit value is consistent. Writing any value to the low
  word clears the counter.
* ``memory(name, entry_width, depth)``: indirect access to a table, register bank or other
  memory through shared staging registers. The returned :class:`MemoryPort` carries a request
  the owning block must serve: ``req`` is held high until the block answers with a one-cycle
  ``ack``; on a read (``we == 0``) ``rdata`` is valid in the ``ack`` cycle. A block may take any
  number of cycles to ack (for instance to wait for a free write slot), but must not ack a
  request that is not pending.

Indirect access protocol (offsets in the schema under ``"indirect"``): write the entry words to
``data[0..]`` (LSW first), the memory's id and the entry address to ``select`` and ``address``,
then write ``command`` (1 = read, 2 = write). ``status`` reads 1 while busy, 0 when done; after
a read, ``data[0..]`` holds the entry. An address beyond the memory's depth or an unknown id
sets ``status`` to 2 (error) and touches nothing.

Address map (``CsrBuilder.build``; every offset is a byte offset, 4-byte aligned)::

    0x000  ID           ro  app_id (0x4E535452 'NSTR' for netstor)
    0x004  VERSION      ro  major << 16 | minor
    0x008  SCHEMA_HASH  ro  int(first 8 hex digits of sha256(canonical JSON of the schema
                            without its "hash" field)), see schema_hash()
    0x00C  SCRATCH      rw  reset 0, free for the host (the driver uses it as a bus check)
    0x010  CAPS         ro  number of memories (bits 15:0) | number of data words (bits 31:16)
    0x020  select       rw  memory id (declaration order, from 0)
    0x024  address      rw  entry address
    0x028  command      wo  1 = read, 2 = write (reads as 0)
    0x02C  status       ro  0 done/idle, 1 busy, 2 error
    0x030  data[0..N-1] rw  entry staging words, LSW first; N = ceil(max entry_width / 32)
    BASE   registers    in declaration order, ceil(width / 32) words each, LSW first
    ...    counters     in declaration order, two words each: low (+0) then high (+4)

``BASE`` (0x100) is where declared things start unless the data words of a very wide memory
(more than 52 words, 1664 bits) reach it; the registers then start at the next multiple of
0x100 after the data words. The schema always carries the real offsets: the host never
computes one.

Bus behaviour, by decision:

* Every access answers OKAY. Reads of unmapped offsets return 0; writes to unmapped offsets,
  to ``ro`` registers, to header words other than SCRATCH and to counter high words are
  ignored. The two low address bits are ignored (word access only).
* A write with ``wstrb == 0`` does nothing. ``rw`` words (registers, SCRATCH, select, address,
  data) take only the bytes whose strobe is set. Side-effect words (a counter's low word,
  ``command``) act on any write with a strobe set and use the whole ``wdata``.
* A register wider than 32 bits is not updated atomically: each word takes effect when it is
  written (write the most significant word last if the gateware must not act on a half-written
  value), and a read of an ``ro`` one returns each word as it is when that word is read.
* While ``status`` is 1 (busy), writes to ``select``, ``address``, ``data[]`` and ``command``
  are ignored, so the request the owning block sees never changes under it. A ``command``
  other than 1 or 2 sets ``status`` to 2.
* A counter's clear (write to its low word) wins over that cycle's increment.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field

from amaranth.hdl import Signal, Module, Cat, Const, Mux
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["CsrBuilder", "MemoryPort", "memory_port_signature", "RegInfo", "CounterInfo", "MemoryInfo",
           "AxiLiteCsr", "axil_slave_signature", "schema_hash", "NETSTOR_APP_ID",
           "HEADER", "CMD_READ", "CMD_WRITE", "STATUS_DONE", "STATUS_BUSY", "STATUS_ERROR"]

#: the ID register value of netstor bitstreams ('NSTR')
NETSTOR_APP_ID = 0x4E535452

#: fixed header offsets
HEADER = {"id": 0x000, "version": 0x004, "schema_hash": 0x008, "scratch": 0x00C, "caps": 0x010}
_INDIRECT = {"select": 0x020, "address": 0x024, "command": 0x028, "status": 0x02C}
_DATA0 = 0x030

CMD_READ, CMD_WRITE = 1, 2
STATUS_DONE, STATUS_BUSY, STATUS_ERROR = 0, 1, 2

SCHEMA_FORMAT = 1


def schema_hash(schema):
    """First 8 hex digits of sha256 over the canonical JSON (sorted keys, no spaces) of
    ``schema`` without its ``"hash"`` key. (``netstor.driver.regs.schema_hash`` is the same
    function on the host side; a test checks that they agree.)"""
    body = {k: v for k, v in schema.items() if k != "hash"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _words(width):
    return (width + 31) // 32


@dataclass
class RegInfo:
    name: str
    width: int
    access: str
    reset: int
    doc: str
    signal: Signal
    offset: int = -1


@dataclass
class CounterInfo:
    name: str
    inc_width: int
    doc: str
    inc: Signal
    offset: int = -1


@dataclass
class MemoryInfo:
    name: str
    entry_width: int
    depth: int
    doc: str
    port: "MemoryPort"
    meta: dict = field(default_factory=dict)
    id: int = -1


def memory_port_signature(entry_width, depth):
    """The :class:`MemoryPort` protocol as a signature, seen from the control block (``req``,
    ``we``, ``addr``, ``wdata`` out; ``ack``, ``rdata`` in). The owning block declares
    ``In(memory_port_signature(...))``; ``wiring.connect`` joins it to the builder's port."""
    addr_bits = max(1, (depth - 1).bit_length())
    return wiring.Signature({
        "req": Out(1), "we": Out(1), "addr": Out(addr_bits), "wdata": Out(entry_width),
        "ack": In(1), "rdata": In(entry_width),
    })


class MemoryPort:
    """Host-side request into a block's memory. Driven by the control block:
    ``req``, ``we``, ``addr``, ``wdata``; driven by the owning block: ``ack``, ``rdata``.
    Its :attr:`signature` is :func:`memory_port_signature` (so it can be connected)."""

    def __init__(self, name, entry_width, depth):
        addr_bits = max(1, (depth - 1).bit_length())
        self.signature = memory_port_signature(entry_width, depth)
        self.req = Signal(name=f"{name}_req")
        self.we = Signal(name=f"{name}_we")
        self.addr = Signal(addr_bits, name=f"{name}_addr")
        self.wdata = Signal(entry_width, name=f"{name}_wdata")
        self.ack = Signal(name=f"{name}_ack")
        self.rdata = Signal(entry_width, name=f"{name}_rdata")

    @property
    def write(self):
        """1 in the cycle a write request is pending (the block may perform it and ack)."""
        return self.req & self.we


class CsrBuilder:
    #: first offset handed out to declared registers (the fixed header sits below it)
    BASE = 0x100

    def __init__(self, *, addr_width=24):
        self.addr_width = addr_width
        self.regs: list[RegInfo] = []
        self.counters: list[CounterInfo] = []
        self.memories: list[MemoryInfo] = []
        self._names = set()
        self._built = False

    def _claim(self, name):
        if self._built:
            raise RuntimeError(f"control register {name!r} declared after CsrBuilder.build(): "
                               "declare everything before building the control block")
        if not isinstance(name, str) or not name:
            raise ValueError(f"control register name must be a non-empty string, not {name!r}")
        if name in self._names:
            raise ValueError(f"control register name {name!r} declared twice")
        self._names.add(name)

    def reg(self, name, width=32, access="rw", reset=0, doc=""):
        if access not in ("rw", "ro"):
            raise ValueError(f"register {name}: access must be 'rw' or 'ro'")
        if width <= 0 or (reset >> width):
            raise ValueError(f"register {name}: bad width {width} or reset {reset}")
        self._claim(name)
        sig = Signal(width, name=name.replace(".", "__"), init=reset)
        self.regs.append(RegInfo(name, width, access, reset, doc, sig))
        return sig

    def counter(self, name, inc_width=1, doc=""):
        if not 1 <= inc_width <= 64:
            raise ValueError(f"counter {name}: inc_width must be 1..64, not {inc_width}")
        self._claim(name)
        sig = Signal(inc_width, name=f"{name.replace('.', '__')}_inc")
        self.counters.append(CounterInfo(name, inc_width, doc, sig))
        return sig

    def memory(self, name, entry_width, depth, doc="", **meta):
        if entry_width <= 0 or depth <= 0:
            raise ValueError(f"memory {name}: entry_width and depth must be positive")
        self._claim(name)
        port = MemoryPort(name.replace(".", "__"), entry_width, depth)
        self.memories.append(MemoryInfo(name, entry_width, depth, doc, port, dict(meta)))
        return port

    # ------------------------------------------------------------------ allocation + schema

    def build(self, *, app_id, version, schema_extra=None):
        """Allocate every offset, freeze the builder and return ``(component, schema)``.

        ``app_id``: the ID register (32 bits; netstor uses :data:`NETSTOR_APP_ID`).
        ``version``: ``(major, minor)`` (16 bits each) or the already packed
        ``major << 16 | minor``. ``schema_extra``: a JSON-serialisable dict merged into the
        top level of the schema (its keys must not clash with the builder's own); it is
        covered by the hash.

        ``component`` is an :class:`AxiLiteCsr`; add it to the same design as the blocks that
        declared the registers (it drives and reads their Signals directly). ``schema`` is a
        plain JSON-serialisable dict (see the module docstring for the map). Declaring anything
        after ``build()`` raises, so a late declaration cannot silently miss the map.
        """
        if self._built:
            raise RuntimeError("CsrBuilder.build() called twice")
        if not isinstance(app_id, int) or not 0 <= app_id < 2**32:
            raise ValueError(f"app_id must be a 32-bit unsigned int, not {app_id!r}")
        if isinstance(version, tuple):
            if (len(version) != 2 or not all(isinstance(v, int) and 0 <= v < 2**16
                                             for v in version)):
                raise ValueError(f"version must be (major, minor) of 16 bits each, "
                                 f"not {version!r}")
            version = version[0] << 16 | version[1]
        elif not isinstance(version, int) or not 0 <= version < 2**32:
            raise ValueError(f"version must be (major, minor) or a 32-bit int, not {version!r}")

        n_data = max((_words(mem.entry_width) for mem in self.memories), default=0)
        data_offsets = [_DATA0 + 4 * i for i in range(n_data)]
        indirect_end = _DATA0 + 4 * n_data
        base = self.BASE if indirect_end <= self.BASE else -(-indirect_end // 0x100) * 0x100

        offset = base
        for r in self.regs:
            r.offset = offset
            offset += 4 * _words(r.width)
        for c in self.counters:
            c.offset = offset
            offset += 8
        for i, mem in enumerate(self.memories):
            mem.id = i
        if offset > 2**self.addr_width:
            raise ValueError(f"control map needs {offset:#x} bytes, more than the "
                             f"{self.addr_width}-bit address window")
        if len(self.memories) >= 2**16 or n_data >= 2**16:
            raise ValueError("too many memories or data words for the CAPS register")

        memories = []
        for mem in self.memories:
            entry = {"name": mem.name, "id": mem.id, "entry_width": mem.entry_width,
                     "depth": mem.depth, "doc": mem.doc}
            clash = set(mem.meta) & set(entry)
            if clash:
                raise ValueError(f"memory {mem.name}: metadata keys {sorted(clash)} clash "
                                 "with the schema's own")
            entry.update(copy.deepcopy(mem.meta))
            memories.append(entry)

        schema = {
            "format": SCHEMA_FORMAT,
            "app_id": app_id,
            "version": version,
            "addr_width": self.addr_width,
            "header": dict(HEADER),
            "indirect": {**_INDIRECT, "data": data_offsets,
                         "commands": {"read": CMD_READ, "write": CMD_WRITE}},
            "registers": [{"name": r.name, "offset": r.offset, "width": r.width,
                           "access": r.access, "reset": r.reset, "doc": r.doc,
                           "words": _words(r.width)} for r in self.regs],
            "counters": [{"name": c.name, "offset": c.offset, "doc": c.doc}
                         for c in self.counters],
            "memories": memories,
        }
        if schema_extra:
            if not isinstance(schema_extra, dict):
                raise TypeError("schema_extra must be a dict")
            clash = set(schema_extra) & (set(schema) | {"hash"})
            if clash:
                raise ValueError(f"schema_extra keys {sorted(clash)} clash with the schema's own")
            schema.update(copy.deepcopy(schema_extra))
        try:
            schema["hash"] = schema_hash(schema)
        except (TypeError, ValueError) as e:
            raise TypeError(f"schema (memory metadata or schema_extra) is not plain JSON: {e}")
        self._built = True
        return AxiLiteCsr(self, schema, n_data=n_data), schema


def axil_slave_signature(addr_width):
    """Flat AXI-Lite slave ports with Corundum's names (``s_axil_*``), 32-bit data."""
    return wiring.Signature({
        "s_axil_awaddr": In(addr_width), "s_axil_awprot": In(3), "s_axil_awvalid": In(1),
        "s_axil_awready": Out(1),
        "s_axil_wdata": In(32), "s_axil_wstrb": In(4), "s_axil_wvalid": In(1),
        "s_axil_wready": Out(1),
        "s_axil_bresp": Out(2), "s_axil_bvalid": Out(1), "s_axil_bready": In(1),
        "s_axil_araddr": In(addr_width), "s_axil_arprot": In(3), "s_axil_arvalid": In(1),
        "s_axil_arready": Out(1),
        "s_axil_rdata": Out(32), "s_axil_rresp": Out(2), "s_axil_rvalid": Out(1),
        "s_axil_rready": In(1),
    })


class AxiLiteCsr(wiring.Component):
    """The control block: an AXI-Lite slave over the builder's registers, counters and
    indirect memory access (made by :meth:`CsrBuilder.build`; map in the module docstring).

    Drives: ``rw`` register Signals, each :class:`MemoryPort`'s ``req``/``we``/``addr``/
    ``wdata``. Reads: ``ro`` register Signals, counter increments, ``ack``/``rdata``.

    Write path: AW and W are each taken into a one-entry holding register (``awready`` /
    ``wready`` are low while it is full), in either order or together. In the first cycle both
    are held and no response is pending, the word address is decoded into registers (a hit per
    group of ``2**GROUP_BITS`` words and a one-hot of the low bits); the next cycle performs the
    write (the word's enable is one LUT of those registers and the strobe) and ``bvalid`` rises
    the cycle after, with the register already updated. Latency: AW+W accepted in cycle 0 ->
    ``bvalid`` in cycle 3; throughput one write per 3 cycles when ``bready`` is high.

    Read path: AR into a one-entry holding register (``arready = ~held & ~busy & ~rvalid``);
    R1 registers, per group of ``2**GROUP_BITS`` words, the word picked by the low address bits
    and whether the group is the addressed one (and performs the read side effects); R2 ORs the
    groups into the registered ``rdata``. Latency: AR accepted in cycle 0 -> ``rvalid`` in
    cycle 3; one read per 4 cycles. Responses are always OKAY. (Every decoder is a tree of
    registered stages so that no path is deeper than a few LUTs at any map size.)

    Counters: a 64-bit accumulator each, ``acc += inc`` every cycle (``inc`` registered first:
    a counter counts one cycle after its event). Reading the low word
    returns bits 31:0 and copies bits 63:32 into the counter's high-word shadow in the same
    cycle (R1); the high word reads the shadow.

    Indirect access: the memory a command goes to (``select`` and ``address`` in range) is
    decoded continuously into one registered hit per memory. Accepting a valid ``command``
    sets ``status`` busy; the next cycle raises the selected port's ``req`` (``we``, ``addr``,
    ``wdata`` come straight from the staging registers, frozen while busy), or sets ``status``
    to 2 when no memory matched. ``req`` falls the cycle after ``ack``; the acks and the
    acking memory's ``rdata`` pass two registered OR stages (``ACK_FANIN`` memories per first
    stage), so ``status`` is 0 and, on a read, ``data[]`` holds ``rdata`` (zero-extended) two
    cycles after the ``ack`` cycle. An owner may ack combinationally with ``req`` or later
    (a registered ``ack <= req & ~ack`` works too).
    """

    #: read/write decode: words are grouped by their address bits above GROUP_BITS
    GROUP_BITS = 4
    #: memories per first-level group of the completion OR tree
    ACK_FANIN = 6

    def __init__(self, builder, schema, *, n_data):
        self._builder = builder
        self.schema = schema
        self.n_data = n_data
        super().__init__(axil_slave_signature(builder.addr_width))
        # observation only (formal invariants, debug): an indirect command is in progress;
        # a memory's ack is on its way through the completion OR stages
        self.cmd_busy = Signal()
        self.ack_inflight = Signal()

    def elaborate(self, platform):
        m = Module()
        b = self._builder
        sc = self.schema
        G = self.GROUP_BITS

        # ------------------------------------------------------------ AXI-Lite write channel
        aw_full = Signal()
        aw_addr = Signal(b.addr_width, reset_less=True)
        w_full = Signal()
        w_data = Signal(32, reset_less=True)
        w_strb = Signal(4, reset_less=True)
        bvalid = self.s_axil_bvalid
        m.d.comb += [
            self.s_axil_awready.eq(~aw_full),
            self.s_axil_wready.eq(~w_full),
            self.s_axil_bresp.eq(0),
            self.s_axil_rresp.eq(0),
        ]
        with m.If(self.s_axil_awvalid & ~aw_full):
            m.d.sync += [aw_full.eq(1), aw_addr.eq(self.s_axil_awaddr)]
        with m.If(self.s_axil_wvalid & ~w_full):
            m.d.sync += [w_full.eq(1), w_data.eq(self.s_axil_wdata), w_strb.eq(self.s_axil_wstrb)]
        with m.If(bvalid & self.s_axil_bready):
            m.d.sync += bvalid.eq(0)
        # W1: decode (registered select); W2 (wr_pend): perform, then bvalid
        wr_pend = Signal()
        do_write = Signal()
        m.d.comb += do_write.eq(aw_full & w_full & ~bvalid & ~wr_pend)
        m.d.sync += wr_pend.eq(do_write)
        with m.If(wr_pend):
            m.d.sync += [aw_full.eq(0), w_full.eq(0), bvalid.eq(1)]
        wr_word = aw_addr[2:]
        wr_lo = Signal(2 ** G, reset_less=True)        # one-hot of the word's low bits
        m.d.sync += wr_lo.eq(1 << wr_word[:G])
        strb_any = Signal()
        m.d.comb += strb_any.eq(w_strb.any())

        # ------------------------------------------------------------- AXI-Lite read channel
        ar_full = Signal()
        ar_addr = Signal(b.addr_width, reset_less=True)
        rd_s1 = Signal()                   # the group values are registered
        rvalid = self.s_axil_rvalid
        rdata = self.s_axil_rdata
        m.d.comb += self.s_axil_arready.eq(~ar_full & ~rd_s1 & ~rvalid)
        with m.If(self.s_axil_arvalid & ~ar_full & ~rd_s1 & ~rvalid):
            m.d.sync += [ar_full.eq(1), ar_addr.eq(self.s_axil_araddr)]
        with m.If(rvalid & self.s_axil_rready):
            m.d.sync += rvalid.eq(0)
        rd_en = Signal()
        m.d.comb += rd_en.eq(ar_full)
        m.d.sync += rd_s1.eq(rd_en)
        with m.If(rd_en):
            m.d.sync += ar_full.eq(0)
        with m.If(rd_s1):
            m.d.sync += rvalid.eq(1)
        rd_word = ar_addr[2:]

        # word index -> read value / read side effect / write action
        reads, read_fx, writes = {}, {}, {}

        # write enable of word `word` in the perform cycle: registered group hit & low one-hot
        wr_hi = {}

        def wr_hit(word):
            g = word >> G
            if g not in wr_hi:
                h = Signal(name=f"wr_hit_g{g}", reset_less=True)
                m.d.sync += h.eq(wr_word[G:] == g)
                wr_hi[g] = h
            return wr_pend & wr_hi[g] & wr_lo[word & (2 ** G - 1)]

        def strobed(sig, lo, n):
            """Take the strobed bytes of w_data into sig[lo:lo+n] (n <= 32)."""
            for byte in range((n + 7) // 8):
                top = min(8 * byte + 8, n)
                with m.If(w_strb[byte]):
                    m.d.sync += sig[lo + 8 * byte:lo + top].eq(w_data[8 * byte:top])

        # ----------------------------------------------------------------------- header
        hdr = sc["header"]
        scratch = Signal(32)
        reads[hdr["id"] // 4] = Const(sc["app_id"], 32)
        reads[hdr["version"] // 4] = Const(sc["version"], 32)
        reads[hdr["schema_hash"] // 4] = Const(int(sc["hash"], 16), 32)
        reads[hdr["scratch"] // 4] = scratch
        reads[hdr["caps"] // 4] = Const(len(b.memories) | self.n_data << 16, 32)
        writes[hdr["scratch"] // 4] = lambda: strobed(scratch, 0, 32)

        # -------------------------------------------------------------- indirect access
        ind = sc["indirect"]
        sel = Signal(32, reset_less=True)
        address = Signal(32, reset_less=True)
        status = Signal(2)
        cur_we = Signal(reset_less=True)
        data = [Signal(32, name=f"data{i}", reset_less=True) for i in range(self.n_data)]
        busy = Signal()
        m.d.comb += [busy.eq(status == STATUS_BUSY), self.cmd_busy.eq(busy)]
        reads[ind["select"] // 4] = sel
        reads[ind["address"] // 4] = address
        reads[ind["status"] // 4] = status

        def guarded(sig):
            def action():
                with m.If(~busy):
                    strobed(sig, 0, 32)
            return action

        writes[ind["select"] // 4] = guarded(sel)
        writes[ind["address"] // 4] = guarded(address)
        for off, d in zip(ind["data"], data):
            reads[off // 4] = d
            writes[off // 4] = guarded(d)

        # The memory a command goes to is decoded ahead, registered: select/address change
        # only by bus writes (never while busy), and a command is performed at least three
        # cycles after the write before it, when these registers have settled.
        mem_hit = [Signal(name=f"mem_hit{i}", reset_less=True) for i in range(len(b.memories))]
        for mem, h in zip(b.memories, mem_hit):
            m.d.sync += h.eq((sel == mem.id) & (address < mem.depth))
        any_hit = Signal(reset_less=True)
        m.d.sync += any_hit.eq(Cat(*mem_hit).any() if mem_hit else 0)
        cmd_go = Signal()              # the cycle after an accepted command
        cmd_ok = Signal(reset_less=True)
        m.d.sync += cmd_go.eq(0)
        m.d.sync += cmd_ok.eq((w_data == CMD_READ) | (w_data == CMD_WRITE))

        def command():
            with m.If(~busy):
                with m.If(cmd_ok):
                    m.d.sync += [status.eq(STATUS_BUSY), cmd_go.eq(1),
                                 cur_we.eq(w_data == CMD_WRITE)]
                with m.Else():
                    m.d.sync += status.eq(STATUS_ERROR)
        writes[ind["command"] // 4] = command

        with m.If(cmd_go):
            with m.If(any_hit):
                for mem, h in zip(b.memories, mem_hit):
                    m.d.sync += mem.port.req.eq(h)
            with m.Else():
                m.d.sync += status.eq(STATUS_ERROR)

        # completion: the acks and the acking memory's rdata go through registered OR trees
        all_data = Cat(*data) if data else Const(0, 1)
        acks, rds = [], []
        for mem in b.memories:
            port = mem.port
            m.d.comb += [
                port.we.eq(cur_we),
                port.addr.eq(address[:len(port.addr)]),
                port.wdata.eq(all_data[:mem.entry_width]),
            ]
            with m.If(port.ack):
                m.d.sync += port.req.eq(0)
            got = port.req & port.ack
            acks.append(got)
            rds.append(Mux(got, port.rdata, 0))
        dw = 32 * self.n_data
        if b.memories:
            acks_a, rds_a = [], []
            for k in range(0, len(acks), self.ACK_FANIN):
                a = Signal(name=f"ack_grp{k}")
                r = Signal(max(1, dw), name=f"rdata_grp{k}", reset_less=True)
                m.d.sync += [a.eq(Cat(*acks[k:k + self.ACK_FANIN]).any()),
                             r.eq(_or_all(rds[k:k + self.ACK_FANIN]))]
                acks_a.append(a)
                rds_a.append(r)
            ack_b = Signal()
            rd_b = Signal(max(1, dw), reset_less=True)
            m.d.sync += [ack_b.eq(Cat(*acks_a).any()), rd_b.eq(_or_all(rds_a))]
            m.d.comb += self.ack_inflight.eq(Cat(*acks_a).any() | ack_b)
            with m.If(ack_b):
                m.d.sync += status.eq(STATUS_DONE)
                with m.If(~cur_we):
                    for i, d in enumerate(data):
                        m.d.sync += d.eq(rd_b[32 * i:32 * i + 32])

        # -------------------------------------------------------------------- registers
        for r in b.regs:
            for j in range(_words(r.width)):
                lo, n = 32 * j, min(32, r.width - 32 * j)
                word = r.offset // 4 + j
                reads[word] = r.signal[lo:lo + n]
                if r.access == "rw":
                    writes[word] = (lambda sig=r.signal, lo=lo, n=n: strobed(sig, lo, n))

        # --------------------------------------------------------------------- counters
        for c in b.counters:
            safe = c.name.replace(".", "__")
            acc = Signal(64, name=f"{safe}_acc")
            shadow = Signal(32, name=f"{safe}_hi", reset_less=True)
            # the increment registered first: it comes from anywhere in the data path, and
            # its logic plus the 64-bit add made the deepest paths across modules
            inc = Signal(len(c.inc), name=f"{safe}_inc_r")
            m.d.sync += inc.eq(c.inc)
            m.d.sync += acc.eq(acc + inc)     # a clear below overrides this
            word = c.offset // 4
            reads[word] = acc[:32]
            reads[word + 1] = shadow

            def latch_high(acc=acc, shadow=shadow):
                m.d.sync += shadow.eq(acc[32:])

            def clear(acc=acc):
                m.d.sync += acc.eq(0)

            read_fx[word] = latch_high
            writes[word] = clear

        # ----------------------------------------------------------------- decoders
        # writes: the registered group hit and low-bits one-hot enable each word's action
        with m.If(strb_any):
            for word, action in sorted(writes.items()):
                with m.If(wr_hit(word)):
                    action()
        # reads: R1 registers, per group of 2**G words, the word the low bits pick and whether
        # the group is the addressed one (and performs the read side effects); R2 ORs them.
        groups = {}
        for word, value in reads.items():
            groups.setdefault(word >> G, {})[word & (2 ** G - 1)] = value
        picks = []
        for g, items in sorted(groups.items()):
            hit = Signal(name=f"rd_hit_g{g}", reset_less=True)
            val = Signal(32, name=f"rd_val_g{g}", reset_less=True)
            m.d.sync += hit.eq(rd_word[G:] == g)
            with m.Switch(rd_word[:G]):
                for lo, value in sorted(items.items()):
                    with m.Case(lo):
                        m.d.sync += val.eq(value)
                with m.Default():
                    m.d.sync += val.eq(0)
            picks.append(Mux(hit, val, 0))
        with m.If(rd_en):
            for word, fx in sorted(read_fx.items()):
                with m.If(rd_word == word):
                    fx()
        with m.If(rd_s1):
            m.d.sync += rdata.eq(_or_all(picks) if picks else 0)
        return m


def _or_all(values):
    """Bitwise OR of a list of Values (Amaranth balances nothing; Yosys maps it to a tree)."""
    acc = values[0]
    for v in values[1:]:
        acc = acc | v
    return acc
