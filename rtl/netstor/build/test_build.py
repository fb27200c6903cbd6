"""``core_verilog``'s Verilog: zero memories without an ``initial`` block, others with theirs."""
import re

from amaranth.back import rtlil, verilog
from amaranth.hdl import Module, Signal
from amaranth.lib.memory import Memory

from netstor.build import zero_memories_uninitialised


def _two_memories():
    m = Module()
    m.submodules.zero = zero = Memory(shape=16, depth=64, init=[])
    m.submodules.table = table = Memory(shape=8, depth=4, init=[0x1D, 0, 0x3A, 0x74])
    addr, out0, out1 = Signal(6), Signal(16), Signal(8)
    r0, r1 = zero.read_port(), table.read_port()
    m.d.comb += [r0.addr.eq(addr), r1.addr.eq(addr[:2]), out0.eq(r0.data), out1.eq(r1.data)]
    return m, [addr, out0, out1]


def _initial_blocks(text):
    return re.findall(r"initial begin\n(.*?)\n\s*end\n", text, re.S)


def test_zero_memory_loses_its_initial_block_others_keep_theirs():
    m, ports = _two_memories()
    plain = verilog.convert(m, name="top", ports=ports, emit_src=False)
    assert len(_initial_blocks(plain)) == 2          # Amaranth writes both out
    m, ports = _two_memories()
    with zero_memories_uninitialised():
        text = verilog.convert(m, name="top", ports=ports, emit_src=False)
    blocks = _initial_blocks(text)
    assert len(blocks) == 1
    words = sorted(re.findall(r"\[(\d+)\] = 8'h([0-9a-f]+)", blocks[0]))
    assert words == [("0", "1d"), ("1", "00"), ("2", "3a"), ("3", "74")]
    assert len(text) < len(plain)


def test_the_emitter_is_restored_after_the_block():
    before = rtlil.ModuleEmitter.emit_memory
    try:
        with zero_memories_uninitialised():
            assert rtlil.ModuleEmitter.emit_memory is not before
            raise RuntimeError("inside")
    except RuntimeError:
        pass
    assert rtlil.ModuleEmitter.emit_memory is before


def test_verilator_builds_start_memories_at_zero():
    """The assumption that makes the left-out block harmless in simulation."""
    import inspect
    from netstor.sim import harness
    src = inspect.getsource(harness.run_cocotb)
    assert '"--x-initial", "0"' in src


def test_extra_offloads_join_the_core_and_its_schema(tmp_path, monkeypatch, capsys):
    """``python -m netstor.build rtl --extra NAME``: the program of an offload outside the
    bitstream (a toy one: every built-in offload is in it) is in the generated core and its
    memories in the schema; the default build has neither; an unknown name is refused with the
    registered ones listed."""
    import pytest
    from netstor.build import build_core, main
    from netstor.programs import default_pipeline
    from netstor.offloads import offloads
    from netstor.offloads.testing import NAME, PROGRAM, forget, outside_offload

    assert all(o.bitstream for o in offloads())
    outside_offload(tmp_path, monkeypatch)
    try:
        assert [o.name for o in offloads() if not o.bitstream] == [NAME]
        default = {p.name for p in default_pipeline().programs}
        assert PROGRAM not in default
        core = build_core(extra=(NAME,))
        assert {p.name for p in core.pipeline.programs} - default == {PROGRAM}
        mems = {m["name"] for m in core.schema["memories"]}
        assert {f"{PROGRAM}.route", f"{PROGRAM}.copy"} <= mems
        with pytest.raises(ValueError):
            build_core(default_pipeline(), extra=(NAME,))
        with pytest.raises(SystemExit):
            main(["rtl", "--out", str(tmp_path / "bad"), "--extra", "nosuch"])
        assert "nosuch" in capsys.readouterr().err
    finally:
        monkeypatch.undo()
        forget()


def test_ports_core_leaves_out_payload_offloads():
    """``build_core(copies="ports")`` (no payload path) is built without the offloads whose
    program has a payload element; the default (copy-lane) core carries them; a ports core
    given such a pipeline explicitly is refused."""
    import pytest
    from netstor.build import build_core
    from netstor.programs import default_pipeline, payload_offloads
    pay = payload_offloads()
    assert pay == ["xorinc"]
    ports = build_core(copies="ports")
    assert "xi" not in {p.name for p in ports.pipeline.programs}
    assert not any(e.rewrites_payload
                   for e in ports.pipeline.elements + ports.pipeline.egress_elements)
    assert {p.name for p in default_pipeline().programs} - \
        {p.name for p in ports.pipeline.programs} == {"xi"}
    with pytest.raises(ValueError, match="copy-lane"):
        build_core(default_pipeline(), copies="ports")
