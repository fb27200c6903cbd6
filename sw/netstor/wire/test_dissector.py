"""The committed Lua dissector is the generator's current output."""

from netstor.wire import HEADERS
from netstor.wire.dissector import DEFAULT_OUT, generate, main


def test_committed_lua_is_not_stale():
    assert DEFAULT_OUT.name == "netstor.lua" and DEFAULT_OUT.exists()
    assert DEFAULT_OUT.read_text() == generate(), (
        "sw/netstor/wire/netstor.lua is stale: run `python -m netstor.wire.dissector` and "
        "commit the result")


def test_every_header_is_in_the_lua():
    lua = generate()
    for spec in HEADERS.values():
        assert f'Proto("{spec.name}", ' in lua
        assert f'DissectorTable.get("udp.port"):add({spec.udp_port}, proto)' in lua
        for n, w in spec.fields:
            kind = "uint64" if w > 32 else ""
            assert f'ProtoField.{kind}' in lua and f'"{spec.name}.{n}"' in lua
    assert 'ProtoField.uint64("netstor.key", "key", base.HEX, nil)' in lua
    assert '[129] = "GET reply"' in lua


def test_cli_writes_the_file(tmp_path, capsys):
    out = tmp_path / "x.lua"
    main(["--out", str(out)])
    assert out.read_text() == generate()
    assert "netstor_prim" in capsys.readouterr().out
