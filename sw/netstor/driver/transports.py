"""Transports for :class:`netstor.driver.regs.CsrClient`: the same host code on every data plane.

A transport moves 32-bit words of the application control window (``read32(offset)``,
``write32(offset, value)``; byte offsets, 4-byte aligned). Three kinds:

* :class:`MmioTransport`: a memory mapping of the window on a real card: Corundum's BAR2 through
  the PCI sysfs file ``/sys/bus/pci/devices/<BDF>/resource2``, or region 1 of the mqnic
  character device (``/dev/mqnicN``, mmap offset ``1 << 40``). Little-endian 32-bit accesses, as
  PCIe delivers them to the AXI-Lite window. Any file works, which is how it is tested.
* :class:`ModelTransport`: the control window emulated over the golden model
  (:class:`netstor.model.dataplane.DataplaneModel`), decoded with the same schema, so register,
  counter and indirect-memory traffic reach the model's state.
* the simulation's transport (``sim/axil_transport.py``): cocotbext-axi's AXI-Lite master on the
  simulated RTL, used with :class:`~netstor.driver.regs.AsyncCsrClient`; and
  :class:`SimTransport`, the same bus behind blocking ``read32``/``write32`` for host code that
  runs in a thread started with ``cocotb.task.bridge`` (each access blocks the thread while
  the simulator runs the bus transaction), so synchronous host code (the API, the controller,
  the CLI's functions) runs unchanged against the simulated RTL.

:func:`open_device` picks one from a target string and checks the device identity (ID,
version, schema hash) before returning a client.

Bring-up on a card (Corundum with our bitstream, see boards/README.md): load the mqnic driver,
find the card's BDF (``lspci -d 1234:1001``), then ``open_device("pcie:0000:81:00.0", schema)``
as root (the sysfs ``resource2`` file needs it) or ``open_device("/dev/mqnic0", schema)``.
"""

from __future__ import annotations

import mmap
import os
import struct

from .regs import CsrClient

__all__ = ["MmioTransport", "ModelTransport", "SimTransport", "open_device", "APP_WINDOW_BYTES"]

#: Corundum's application window on Alveo builds (AXIL_APP_CTRL_ADDR_WIDTH = 24)
APP_WINDOW_BYTES = 1 << 24
#: mmap offset of the application region of Corundum's mqnic character device
MQNIC_APP_REGION_OFFSET = 1 << 40


def _check_offset(offset, size):
    if not isinstance(offset, int) or offset % 4 or not 0 <= offset <= size - 4:
        raise ValueError(f"offset {offset!r} is not a 4-byte aligned offset inside the "
                         f"{size}-byte window")


class MmioTransport:
    """32-bit little-endian accesses through ``mmap`` of ``path`` at ``offset``."""

    def __init__(self, path, *, offset=0, size=None):
        self.path = str(path)
        flags = os.O_RDWR | getattr(os, "O_SYNC", 0)
        try:
            self._fd = os.open(self.path, flags)
        except PermissionError as e:
            raise PermissionError(f"{self.path}: {e.strerror}; mapping a PCI BAR needs root "
                                  "(or access to the mqnic character device)") from e
        try:
            if size is None:
                size = os.fstat(self._fd).st_size or APP_WINDOW_BYTES
            self.size = size
            self._map = mmap.mmap(self._fd, size, mmap.MAP_SHARED,
                                  mmap.PROT_READ | mmap.PROT_WRITE, offset=offset)
        except Exception:
            os.close(self._fd)
            raise
        # one aligned 32-bit access each (memoryview of "I" does a single load/store)
        self._words = memoryview(self._map).cast("I")

    def read32(self, offset):
        _check_offset(offset, self.size)
        return struct.unpack("<I", struct.pack("=I", self._words[offset // 4]))[0]

    def write32(self, offset, value):
        _check_offset(offset, self.size)
        if not isinstance(value, int) or not 0 <= value <= 0xFFFF_FFFF:
            raise ValueError(f"write32 value {value!r} is not a 32-bit unsigned integer")
        self._words[offset // 4] = struct.unpack("=I", struct.pack("<I", value))[0]

    def close(self):
        self._words.release()
        self._map.close()
        os.close(self._fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class ModelTransport:
    """The control window of ``schema`` decoded over a golden-model instance.

    Behaves like the AXI-Lite block (see ``rtl/netstor/gateware/csr.py``): header registers,
    ``rw``/``ro`` registers (``ro`` writes ignored), 64-bit counters (reading the low word
    latches the high word, writing the low word clears), indirect memory access (status 0 done,
    2 error; the model completes a command at once), unmapped reads 0.
    """

    def __init__(self, model, schema):
        self.model, self.schema = model, schema
        hdr = schema["header"]
        self._ro = {hdr["id"]: schema["app_id"], hdr["version"]: schema["version"],
                    hdr["schema_hash"]: int(schema["hash"], 16),
                    hdr["caps"]: len(schema["memories"]) | len(schema["indirect"]["data"]) << 16}
        self._scratch_off = hdr["scratch"]
        self.scratch = 0
        self._regs = {}
        for r in schema["registers"]:
            for j in range(r["words"]):
                self._regs[r["offset"] + 4 * j] = (r, j)
        self._ctr = {}
        for c in schema["counters"]:
            self._ctr[c["offset"]] = (c["name"], 0)
            self._ctr[c["offset"] + 4] = (c["name"], 1)
        self._latched = {}
        ind = schema["indirect"]
        self._ind = ind
        self._data = [0] * len(ind["data"])
        self._select = self._address = self._status = 0
        self._mems = {m["id"]: m for m in schema["memories"]}
        self._pending = {}          # register name -> value being assembled word by word

    def read32(self, offset):
        if offset in self._ro:
            return self._ro[offset]
        if offset == self._scratch_off:
            return self.scratch
        if offset in self._regs:
            r, j = self._regs[offset]
            return (self.model.reg_read(r["name"]) >> (32 * j)) & 0xFFFF_FFFF
        if offset in self._ctr:
            name, j = self._ctr[offset]
            if j == 0:
                v = self.model.counter_read(name) if name in self.model.counter_names else 0
                self._latched[name] = v >> 32
                return v & 0xFFFF_FFFF
            return self._latched.get(name, 0)
        ind = self._ind
        if offset == ind["status"]:
            return self._status
        if offset in (ind["select"], ind["address"]):
            return self._select if offset == ind["select"] else self._address
        if offset in ind["data"]:
            return self._data[ind["data"].index(offset)]
        return 0

    def write32(self, offset, value):
        value &= 0xFFFF_FFFF
        ind = self._ind
        if offset == self._scratch_off:
            self.scratch = value
        elif offset in self._regs:
            r, j = self._regs[offset]
            if r["access"] != "rw":
                return
            cur = self.model.reg_read(r["name"])
            cur = (cur & ~(0xFFFF_FFFF << (32 * j))) | value << (32 * j)
            self.model.reg_write(r["name"], cur & ((1 << r["width"]) - 1))
        elif offset in self._ctr:
            name, j = self._ctr[offset]
            if j == 0 and name in self.model.counter_names:
                self.model.counter_clear(name)
        elif offset == ind["select"]:
            self._select = value
        elif offset == ind["address"]:
            self._address = value
        elif offset in ind["data"]:
            self._data[ind["data"].index(offset)] = value
        elif offset == ind["command"]:
            self._command(value)

    def _command(self, cmd):
        mem = self._mems.get(self._select)
        if mem is None or not 0 <= self._address < mem["depth"] or cmd not in (1, 2):
            self._status = 2
            return
        n = -(-mem["entry_width"] // 32)
        if cmd == 2:
            word = sum(w << (32 * j) for j, w in enumerate(self._data[:n]))
            self.model.mem_write(mem["name"], self._address,
                                 word & ((1 << mem["entry_width"]) - 1))
        else:
            word = self.model.mem_read(mem["name"], self._address)
            for j in range(n):
                self._data[j] = (word >> (32 * j)) & 0xFFFF_FFFF
        self._status = 0


class SimTransport:
    """Blocking access to an asynchronous (cocotb) transport, for code in a bridge thread:
    ``await cocotb.task.bridge(host_function)(...)`` in the test, and inside
    ``host_function`` every ``read32``/``write32`` waits for the simulated bus."""

    def __init__(self, async_transport):
        from cocotb.task import resume
        self._read = resume(async_transport.read32)
        self._write = resume(async_transport.write32)

    def read32(self, offset):
        return self._read(offset)

    def write32(self, offset, value):
        self._write(offset, value)


def open_device(target, schema, *, model=None, transport=None, expected_app_id=None):
    """A checked :class:`CsrClient` for ``target``:

    * ``"model"``: the golden model (``model``, or a new one of the default pipeline);
    * ``"sim"``: the simulated RTL inside a cocotb test: ``transport`` is the test's
      asynchronous AXI-Lite transport, and the caller runs in a ``bridge`` thread;
    * ``"unix:<PATH>"``: the control window a switch or model process serves
      (:mod:`netstor.driver.remote`);
    * ``"pcie:<BDF>"``: BAR2 of that PCI function through sysfs;
    * ``"/dev/mqnicN"``: the application region of Corundum's character device;
    * any other path: a file mapped as the window (tests, captures).

    The device's ID, version and schema hash are checked against ``schema``; a mismatch raises
    :class:`netstor.driver.regs.SchemaMismatch` saying which side is stale.
    """
    if target == "model":
        if model is None:
            from netstor.model.dataplane import DataplaneModel
            from netstor.programs import default_pipeline
            model = DataplaneModel(default_pipeline())
        transport = ModelTransport(model, schema)
    elif target == "sim":
        if transport is None:
            raise ValueError("target 'sim' needs transport= (the cocotb test's AXI-Lite "
                             "transport)")
        transport = SimTransport(transport)
    elif target.startswith("unix:"):
        from .remote import SocketTransport
        transport = SocketTransport(target[len("unix:"):])
    elif target.startswith("pcie:"):
        bdf = target[len("pcie:"):]
        if bdf.count(":") == 1:
            bdf = "0000:" + bdf
        transport = MmioTransport(f"/sys/bus/pci/devices/{bdf}/resource2",
                                  size=APP_WINDOW_BYTES)
    elif os.path.basename(target).startswith("mqnic"):
        transport = MmioTransport(target, offset=MQNIC_APP_REGION_OFFSET, size=APP_WINDOW_BYTES)
    else:
        transport = MmioTransport(target)
    client = CsrClient(schema, transport)
    client.check_id(schema["app_id"] if expected_app_id is None else expected_app_id)
    return client
