"""The driver's transport (``read32``/``write32``) over a cocotbext-axi ``AxiLiteMaster``:
what ``netstor.driver.regs.AsyncCsrClient`` uses inside every cocotb test."""
from cocotbext.axi import AxiResp


class AxilTransport:
    """``read32``/``write32`` over cocotbext-axi, checking every response is OKAY."""

    def __init__(self, axil):
        self.axil = axil

    async def read32(self, offset):
        r = await self.axil.read(offset, 4)
        assert r.resp == AxiResp.OKAY, f"read {offset:#x}: {r.resp}"
        return int.from_bytes(r.data, "little")

    async def write32(self, offset, value):
        r = await self.axil.write(offset, int(value).to_bytes(4, "little"))
        assert r.resp == AxiResp.OKAY, f"write {offset:#x}: {r.resp}"
