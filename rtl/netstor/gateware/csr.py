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
"""

from __future__ import annotations

from dataclasses import dataclass, field

from amaranth.hdl import Signal

__all__ = ["CsrBuilder", "MemoryPort", "RegInfo", "CounterInfo", "MemoryInfo"]


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


class MemoryPort:
    """Host-side request into a block's memory. Driven by the control block:
    ``req``, ``we``, ``addr``, ``wdata``; driven by the owning block: ``ack``, ``rdata``."""

    def __init__(self, name, entry_width, depth):
        addr_bits = max(1, (depth - 1).bit_length())
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

    def _claim(self, name):
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
