"""The generic CLI's offload commands (``Offload.cli``): an offload with the hook gets
``netstor NAME ...`` through the registry alone, one without it adds no command, ``netstor
--help`` lists them, and the hook's module is imported only when its command runs."""
from __future__ import annotations

import sys
import textwrap

import pytest

from netstor import cli

PKGS = {
    "toyplain": '''
        from netstor.offload import Offload
        OFFLOAD = Offload(name="toyplain", title="toy without commands", udp_port=7497,
                          program="toyplain.nothing:make")
        ''',
    "toyhook": '''
        from netstor.offload import Offload
        OFFLOAD = Offload(name="toyhook", title="toy with commands", udp_port=7498,
                          program="toyhook.nothing:make", cli="toyhook.commands:cli")
        ''',
}
COMMANDS = '''
    from netstor.cli import UsageError

    def cli(parser):
        sub = parser.add_subparsers(dest="toy_cmd", required=True)
        p = sub.add_parser("greet")
        p.add_argument("who")
        return run

    def run(args):
        if args.who == "bad":
            raise UsageError("toyhook greet: 'bad' is not a name")
        if args.who == "refused":
            raise OSError("toyhook greet: the device said no")
        print(f"hello {args.who} json={args.json}")
        return 0
    '''


@pytest.fixture
def toys(tmp_path, monkeypatch):
    for name, text in PKGS.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(textwrap.dedent(text))
    (tmp_path / "toyhook" / "commands.py").write_text(textwrap.dedent(COMMANDS))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("NETSTOR_OFFLOADS", "toyplain,toyhook")
    from netstor import offloads
    offloads.reset()
    yield
    offloads.reset()
    for m in [m for m in sys.modules if m.split(".")[0] in PKGS]:
        del sys.modules[m]


def _choices(parser):
    return set(parser._subparsers._group_actions[0].choices)


def test_offload_without_hook_adds_no_command(toys, capsys):
    choices = _choices(cli._parser())
    assert "toyhook" in choices and "toyplain" not in choices
    with pytest.raises(SystemExit) as e:
        cli.main(["toyplain", "greet", "x"])
    assert e.value.code == 2 and "invalid choice: 'toyplain'" in capsys.readouterr().err


def test_offload_hook_runs_through_main(toys, capsys):
    assert "toyhook.commands" not in sys.modules
    cli._parser("info")                               # another command: the hook stays unloaded
    assert "toyhook.commands" not in sys.modules
    assert cli.main(["--json", "toyhook", "greet", "ann"]) == 0
    assert capsys.readouterr().out == "hello ann json=True\n"
    assert cli.main(["toyhook", "greet", "bad"]) == 2
    assert capsys.readouterr().err == "netstor: error: toyhook greet: 'bad' is not a name\n"
    assert cli.main(["toyhook", "greet", "refused"]) == 1
    assert "the device said no" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:              # its own argparse usage errors
        cli.main(["toyhook"])
    assert e.value.code == 2


def test_help_lists_offload_commands(toys, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    from netstor.offloads import offloads
    with_cli = [o for o in offloads() if o.cli is not None]
    assert {o.name for o in with_cli} >= {"nice", "toyhook"}
    listing = out.split("Offload commands")[1]
    for o in with_cli:
        assert f"{o.name}" in listing and o.title in listing
    assert "toyplain" not in out


def test_hook_name_cannot_shadow_a_builtin_command(tmp_path, monkeypatch):
    (tmp_path / "toyinfo").mkdir()
    (tmp_path / "toyinfo" / "__init__.py").write_text(
        "from netstor.offload import Offload\n"
        "OFFLOAD = Offload(name='info', title='x', udp_port=7496, program='a:b', cli='a:b')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("NETSTOR_OFFLOADS", "toyinfo")
    from netstor import offloads
    offloads.reset()
    try:
        with pytest.raises(ValueError, match="offload info: its command name is a built-in"):
            cli._parser()
    finally:
        offloads.reset()
        sys.modules.pop("toyinfo", None)
