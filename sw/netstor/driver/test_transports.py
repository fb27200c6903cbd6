"""One CsrClient over the model and over a memory-mapped window (the PCIe path, on a file)."""
import struct

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from netstor.driver.regs import CsrClient, SchemaMismatch, IndirectError
from netstor.driver.tables import TableWriter, apply_writes
from netstor.driver.transports import MmioTransport, ModelTransport, open_device
from netstor.model.dataplane import DataplaneModel
from netstor.programs import default_pipeline


@pytest.fixture(scope="module")
def schema():
    from netstor.build import build_core
    return build_core().schema


def test_model_target_runs_controller_code(schema):
    model = DataplaneModel(default_pipeline())
    dev = open_device("model", schema, model=model)     # checks ID, version, hash, scratch
    tw = TableWriter(default_pipeline())
    apply_writes(dev, tw.lpm_add("l3.routes", 0x0A010000, 16, "route",
                                 {"port": 1, "dmac": 0xAA, "smac": 0xBB}))
    # the write went through the emulated indirect access into the model's table
    assert dev.mem_read("l3.routes", 0) == model.mem_read("l3.routes", 0) != 0
    frame = bytes(Ether() / IP(src="10.0.0.1", dst="10.1.2.3") / UDP() / Raw(bytes(30)))
    out = model.process(frame, 0)
    assert [o.port for o in out] == [1]
    assert dev.counter_read("l3.routes.hit") == 1
    dev.counter_clear("l3.routes.hit")
    assert dev.counter_read("l3.routes.hit") == 0
    assert dev.reg_read("parser.udp_port.prim") == 0x5EED
    dev.reg_write("parser.udp_port.prim", 7000)
    assert model.reg_read("parser.udp_port.prim") == 7000
    with pytest.raises(ValueError):
        dev.mem_read("l3.routes", 64)                    # outside the table: refused on host


def test_model_transport_rejects_bad_commands(schema):
    t = ModelTransport(DataplaneModel(default_pipeline()), schema)
    ind = schema["indirect"]
    t.write32(ind["select"], 999)
    t.write32(ind["command"], 1)
    assert t.read32(ind["status"]) == 2
    assert t.read32(0xFFFFFC) == 0                       # unmapped reads 0


def _window_file(tmp_path, schema, *, hash_value=None, version=None):
    path = tmp_path / "resource2"
    buf = bytearray(1 << 16)
    hdr = schema["header"]
    for off, v in ((hdr["id"], schema["app_id"]),
                   (hdr["version"], schema["version"] if version is None else version),
                   (hdr["schema_hash"], int(schema["hash"], 16) if hash_value is None
                    else hash_value)):
        struct.pack_into("<I", buf, off, v)
    path.write_bytes(bytes(buf))
    return path


def test_mmio_byte_order_and_bounds(tmp_path):
    path = tmp_path / "bar"
    path.write_bytes(bytes(64))
    with MmioTransport(path) as t:
        t.write32(8, 0x11223344)
        assert t.read32(8) == 0x11223344
        with pytest.raises(ValueError):
            t.read32(6)                                   # unaligned
        with pytest.raises(ValueError):
            t.read32(64)                                  # outside the window
        with pytest.raises(ValueError):
            t.write32(0, 1 << 32)
    raw = path.read_bytes()
    assert raw[8:12] == bytes([0x44, 0x33, 0x22, 0x11])  # little-endian, as PCIe delivers it


def test_mmio_open_checks_identity(tmp_path, schema):
    # a window holding the right header opens (SCRATCH is plain memory in a file)
    dev = open_device(str(_window_file(tmp_path, schema)), schema)
    assert dev.reg_read("parser.udp_port.prim") == 0      # the file has no reset values
    # a bitstream older than the host schema is named as the stale side
    older = schema["version"] - 1
    with pytest.raises(SchemaMismatch, match="bitstream is stale"):
        open_device(str(_window_file(tmp_path, schema, hash_value=0x12345678, version=older)),
                    schema)
    with pytest.raises(SchemaMismatch, match="host schema is stale"):
        open_device(str(_window_file(tmp_path, schema, hash_value=0x12345678,
                                     version=schema["version"] + 1)), schema)


def test_mmio_indirect_error_surfaces(tmp_path, schema):
    # a window whose status register reads 2 (error): the client raises, it does not hang
    path = _window_file(tmp_path, schema)
    buf = bytearray(path.read_bytes())
    struct.pack_into("<I", buf, schema["indirect"]["status"], 2)
    path.write_bytes(bytes(buf))
    with MmioTransport(path) as t:
        with pytest.raises(IndirectError):
            CsrClient(schema, t).mem_read("l3.routes", 0)
