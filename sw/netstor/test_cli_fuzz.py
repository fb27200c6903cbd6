"""Every command of ``netstor``, ``netstor-server`` and ``netstor-load`` given bad values, as a
careless operator would (issue 11): none may print a traceback or an "internal error"; each
answers one line naming the bad value (argparse's own errors print the usage above it) with
exit status 2 for a bad argument, 1 for something the device, a file or the system refused.

The short-lived commands run in this process through ``main(argv)`` (a golden model each:
fast); the daemons (``serve-model``, ``controller``, ``switch``, ``netstor-server``) run as
processes with a time-out, since a bad value they did not catch would leave them serving."""
import contextlib
import io
import json
import os
import subprocess
import sys

import pytest

from netstor import cli
from netstor.agent import load
from netstor.agent.schemes import all_schemes


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from netstor.build import build_core
    d = tmp_path_factory.mktemp("fuzz")
    (d / "schema.json").write_text(json.dumps(build_core().schema))
    # 65 keys for a 64-entry exact table: the 65th does not fit
    (d / "full.yaml").write_text("tables:\n  prim.ops:\n    entries:\n" + "".join(
        f"      - {{key: {k}, action: forward, params: {{port: 1}}}}\n" for k in range(65)))
    (d / "dup.yaml").write_text("registers:\n  parser.udp_port.prim: 7000\n"
                                "registers:\n  parser.udp_port.prim: 7001\n")
    (d / "dupinner.yaml").write_text("registers:\n  parser.udp_port.prim: 7000\n"
                                     "  parser.udp_port.prim: 7001\n")
    (d / "dup.json").write_text('{"banks": {"prim.cells": {"0": 1, "0": 2}}}')
    (d / "tables0.yaml").write_text("tables: 0\n")
    (d / "list.yaml").write_text("- tables\n")
    (d / "list.json").write_text('[{"tables": {}}]')
    (d / "floatidx.yaml").write_text("banks:\n  prim.cells: {1.5: 3}\n")
    (d / "netrsfloat.yaml").write_text("netrs:\n  marker: 2.7\n")
    (d / "broken.yaml").write_text("tables: [\n")
    (d / "conf.txt").write_text("x")
    (d / "xi.yaml").write_text('xorinc:\n  clients:\n    a: {ops: [0, 3], '
                               'requester: "127.0.0.1:9"}\n')
    (d / "xibig.yaml").write_text('xorinc:\n  clients:\n    a: {ops: [63, 65], '
                                  'requester: "127.0.0.1:9"}\n')
    (d / "out").mkdir()
    return d


def _check(argv, code, err, expect, needle):
    where = f"{' '.join(map(str, argv))}: exit {code}, stderr {err!r}"
    assert "Traceback" not in err and "internal error" not in err, where
    assert code == expect, where
    lines = err.strip().splitlines()
    assert lines, where
    last = lines[-1]
    assert ": error: " in last, where
    assert needle in last, where
    if not any(line.startswith("usage:") for line in lines):    # (a daemon may say what
        assert sum("error" in line for line in lines) == 1, where  # it did before failing)


def _in_process(main, argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:             # argparse
            code = e.code
    return code, err.getvalue()


def _process(argv, env=None, timeout=30):
    r = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True,
                       timeout=timeout, env={**os.environ, **(env or {})},
                       stdin=subprocess.DEVNULL)
    return r.returncode, r.stderr


def _netstor_cases(f):
    mac_route = ["table", "add", "l3.routes", "10.1.0.0/16", "route", "port=1",
                 "dmac=10.0.0.1", "smac=02:00:00:00:ff:01"]
    return [
        (["info", "x"], 2, "unrecognized arguments: x"),
        (["schema", "x"], 2, "unrecognized arguments: x"),
        (["--device", "unix:/nonexistent/sock", "info"], 1, "/nonexistent/sock"),
        (["--device", "bogus", "info"], 1, "bogus"),
        # table
        (["table", "bogus"], 2, "'bogus'"),
        (["table", "list", "x"], 2, "no arguments"),
        (["table", "dump"], 2, "table name"),
        (["table", "dump", "nope"], 1, "nope"),
        (["table", "clear", "prim.ops", "x"], 2, "'x'"),
        (["table", "get", "prim.ops"], 2, "MATCH"),
        (["table", "get", "prim.ops", "1", "2"], 2, "'2'"),
        (["table", "delete", "prim.ops"], 2, "MATCH"),          # was IndexError
        (["table", "delete", "prim.ops", "4"], 1, "no entry"),
        (["table", "delete", "l3.routes", "10.0.0.0/99"], 1, "99"),
        (["table", "modify", "prim.ops", "1"], 2, "MATCH ACTION"),
        (["table", "add", "prim.ops", "1", "forward", "port=99"], 1, "99"),
        (["table", "add", "prim.ops", "0x100", "forward", "port=1"], 1, "0x100"),
        (["table", "add", "prim.ops", "1", "nosuchaction"], 1, "nosuchaction"),
        (["table", "add", "prim.ops", "1", "forward", "port"], 2, "'port'"),
        (["table", "add", "prim.ops", "1", "forward", "port=1", "--priority", "3"], 2,
         "--priority"),
        (["table", "add", "l3.routes", "10.0.0.0/8", "drop", "--mask", "1", "--priority",
          "3"], 2, "--mask/--priority"),                        # was silently accepted
        (mac_route, 1, "'10.0.0.1' is an IPv4 address"),        # was silently accepted
        (mac_route[:6] + ["dmac=02:00:00:00:01", "smac=1"], 1, "02:00:00:00:01"),
        (["table", "add", "prim.acl", "1", "deny"], 2, "--mask and --priority"),
        (["table", "add", "prim.acl", "1", "deny", "--mask", "1", "--priority", "-1"], 2,
         "'-1'"),
        (["table", "add", "prim.acl", "1", "deny", "--mask", "1", "--priority", "x"], 2,
         "'x'"),
        (["table", "default", "prim.ops", "nosuchaction"], 1, "nosuchaction"),
        (["table", "delete", "prim.ops", "1", "--mask", "3"], 2, "--mask"),
        # reg
        (["reg", "bogus"], 2, "'bogus'"),
        (["reg", "get"], 2, "register name"),
        (["reg", "get", "nope"], 1, "nope"),
        (["reg", "set", "parser.udp_port.prim"], 2, "VALUE"),
        (["reg", "set", "parser.udp_port.prim", "0x10000"], 1, "0x10000"),
        (["reg", "set", "parser.udp_port.prim", "abc"], 1, "'abc'"),
        (["reg", "list", "x"], 2, "no arguments"),
        # bank
        (["bank", "read", "prim.cells", "0", "5x"], 2, "5x"),    # COUNT was ignored
        (["bank", "read", "prim.cells", "0", "0"], 2, "'0'"),
        (["bank", "read", "prim.cells", "0", "3", "--count", "4"], 2, "disagree"),
        (["bank", "read", "prim.cells", "-1"], 2, "'-1'"),
        (["bank", "read", "prim.cells", "x"], 2, "'x'"),
        (["bank", "read", "prim.cells", "250", "10"], 1, "250+10"),
        (["bank", "read", "nope"], 1, "nope"),
        (["bank", "write", "prim.cells", "0"], 2, "INDEX VALUE"),
        (["bank", "write", "prim.cells", "0", "-5"], 1, "-5"),
        (["bank", "write", "prim.cells", "0", "5", "--count", "2"], 2, "--count"),
        (["bank", "clear", "prim.cells", "3"], 2, "INDEX"),
        # counters
        (["counters", "--watch", "--interval", "-1"], 2, "'-1'"),
        (["counters", "--watch", "--interval", "nan"], 2, "'nan'"),
        (["counters", "--watch", "--count", "x"], 2, "'x'"),
        (["counters", "--interval", "0.5"], 2, "--watch"),
        (["counters", "nosuchprefix"], 1, "nosuchprefix"),
        # mcast
        (["mcast", "get"], 2, "group number"),
        (["mcast", "get", "-1"], 2, "'-1'"),
        (["mcast", "set", "1", "x:y"], 2, "'x:y'"),
        (["mcast", "set", "4096", "0:1"], 1, "out of range"),
        (["mcast", "clear", "1", "0:1"], 2, "'0:1'"),
        (["mcast", "list", "3"], 2, "no arguments"),
        # apply
        (["apply"], 2, "config"),
        (["apply", str(f / "full.yaml")], 1, "entries[64]"),     # was TableFullError
        (["apply", "--dry-run", str(f / "full.yaml")], 1, "is full"),
        (["apply", str(f / "dup.yaml")], 1, "duplicate key 'registers'"),
        (["apply", str(f / "dupinner.yaml")], 1, "duplicate key 'parser.udp_port.prim'"),
        (["apply", str(f / "dup.json")], 1, "duplicate key '0'"),
        (["apply", str(f / "tables0.yaml")], 1, "tables: expected a mapping, got int"),
        (["apply", str(f / "list.yaml")], 1, "must be a mapping, got list"),
        (["apply", str(f / "list.json")], 1, "must be a mapping, got list"),
        (["apply", str(f / "floatidx.yaml")], 1, "1.5"),
        (["apply", str(f / "netrsfloat.yaml")], 1, "2.7"),       # was truncated to 2
        (["apply", str(f / "broken.yaml")], 1, "broken.yaml:2"),
        (["apply", str(f / "conf.txt")], 1, "'.txt'"),
        (["apply", str(f / "missing.yaml")], 1, "missing.yaml"),
        (["apply", str(f / "out")], 1, "out"),
        # an offload's commands (its Offload.cli hook; docs/host-software.md)
        (["nice"], 2, "COMMAND"),
        (["nice", "view"], 2, "give CONFIG or --device"),
        (["nice", "view", str(f / "missing.yaml")], 2, "missing.yaml not found"),
        (["nice", "view", str(f / "full.yaml")], 2, "no nice: section"),
        (["nice", "view", str(f / "broken.yaml")], 2, "broken.yaml:2"),
        (["xorinc"], 2, "COMMAND"),
        (["xorinc", "notify"], 2, "config"),
        (["xorinc", "notify", str(f / "missing.yaml"), "--once"], 2, "missing.yaml not found"),
        (["xorinc", "notify", str(f / "full.yaml"), "--once"], 2, "no xorinc: section"),
        (["xorinc", "notify", str(f / "broken.yaml"), "--once"], 2, "broken.yaml:2"),
        (["xorinc", "notify", str(f / "xi.yaml"), "--interval", "0"], 2, "'0'"),
        (["xorinc", "notify", str(f / "xi.yaml"), "--once"], 2, "give --device TARGET"),
        # the default bitstream's model has XORInc's engine (64 op ids): a range past it
        (["xorinc", "notify", str(f / "xibig.yaml"), "--device", "model", "--once"], 2,
         "op ids 63..65 outside 0..63"),
    ]


def test_netstor_commands(files, monkeypatch):
    monkeypatch.setenv("NETSTOR_SCHEMA", str(files / "schema.json"))
    monkeypatch.delenv("NETSTOR_DEVICE", raising=False)
    cases = _netstor_cases(files)
    seen = set()
    for argv, expect, needle in cases:
        code, err = _in_process(cli.main, argv)
        _check(argv, code, err, expect, needle)
        seen.add(next(a for a in argv if not a.startswith("-") and ":" not in a))
    # every command of the CLI's parser is driven here or in test_daemons
    commands = set(cli._parser()._subparsers._group_actions[0].choices)
    assert commands - DAEMONS <= seen, commands - seen


DAEMONS = {"serve-model", "controller", "switch", "api"}     # driven in test_daemons


def test_daemons(files, tmp_path):
    env = {"NETSTOR_SCHEMA": str(files / "schema.json"),
           "NETSTOR_TOKEN_FILE": str(tmp_path / "token")}
    sock = str(tmp_path / "m.sock")
    cases = [
        (["netstor.cli", "serve-model"], 2, "--control"),
        (["netstor.cli", "serve-model", "--control", sock, "--config",
          str(files / "full.yaml")], 1, "is full"),                 # was TableFullError
        (["netstor.cli", "serve-model", "--control", "/nonexistent/dir/m.sock"], 2,
         "/nonexistent/dir/m.sock"),
        (["netstor.cli", "controller", "--listen", "127.0.0.1:70000"], 2, "70000"),
        (["netstor.cli", "controller", "--listen", "127.0.0.1:0", "--config",
          str(files / "full.yaml")], 1, "is full"),                 # was TableFullError
        (["netstor.cli", "switch", "--port0", "nosuch0", "--port1", "nosuch1"], 2,
         "'nosuch0'"),
        (["netstor.cli", "switch", "--port0", "lo", "--port1", "lo", "--duration", "-1"], 2,
         "-1"),
        (["netstor.cli", "api", "BOGUS", "/status"], 2, "'BOGUS'"),
        (["netstor.cli", "api", "--url", "http://127.0.0.1:1", "GET", "/status"], 1,
         "http://127.0.0.1:1"),
    ]
    for argv, expect, needle in cases:
        code, err = _process(argv, env)
        _check(argv, code, err, expect, needle)


def test_server_arguments(tmp_path):
    db = str(tmp_path / "db")
    a = ["netstor.agent.server", "--db", db]
    cases = [
        (["netstor.agent.server"], 2, "--db"),
        (a + ["--port", "70000"], 2, "70000"),                       # was OverflowError
        (a + ["--port", "-1"], 2, "-1"),
        (a + ["--port", "x"], 2, "'x'"),
        (a + ["--netclone-port", "70000"], 2, "70000"),
        (a + ["--netrs-port", "65536"], 2, "65536"),
        (a + ["--map-size", "-1"], 2, "-1"),
        (a + ["--map-size", "1e9"], 2, "'1e9'"),
        (a + ["--bind", "1.2.3"], 2, "'1.2.3'"),
        (a + ["--bind", "192.0.2.1"], 1, "--bind 192.0.2.1"),          # not this host's
        (a + ["--allow", "10.0.0.0/33"], 2, "10.0.0.0/33"),
        (a + ["--allow", "nowhere"], 2, "nowhere"),
        (a + ["--advertise", "x"], 2, "'x'"),
        (a + ["--workers", "0"], 2, "0"),
        (a + ["--server-id", "70000"], 2, "70000"),
        (a + ["--queue-limit", "-1"], 2, "-1"),
        (a + ["--service-model", "bogus:1"], 2, "bogus"),
        (a + ["--heartbeat-interval", "0"], 2, "0"),
        (a + ["--heartbeat-interval", "inf"], 2, "inf"),
        (a + ["--controller", "ftp://x"], 2, "ftp://x"),
        (a + ["--log-level", "LOUD"], 2, "LOUD"),
        (a + ["--seed", "x"], 2, "'x'"),
        (["netstor.agent.server", "--db", "/dev/null", "--port", "0"], 1, "/dev/null"),
    ]
    for argv, expect, needle in cases:
        code, err = _process(argv)
        _check(argv, code, err, expect, needle)


def test_load_arguments(tmp_path):
    t = ["--target", "127.0.0.1:9", "--requests", "1", "--timeout", "0.2"]
    cases = [
        (["--requests", "1"], 2, "--target"),
        (["--target", "127.0.0.1:70000"], 2, "70000"),
        (["--target", "host.invalid:7430"], 2, "host.invalid"),
        (["--target", ","], 2, "no target"),
        (t + ["--max-outstanding", "0"], 2, "0"),                    # was accepted
        (t + ["--out", str(tmp_path / "missing" / "r.json")], 2, "missing"),  # was lost
        (t + ["--out", str(tmp_path)], 2, "is a directory"),
        (t + ["--mode", "open"], 2, "--rate"),
        (t + ["--mode", "open", "--rate", "-1"], 2, "-1"),
        (t + ["--mode", "open", "--rate", "inf"], 2, "inf"),
        (t + ["--concurrency", "0"], 2, "0"),
        (t + ["--duration", "0"], 2, "0"),
        (t + ["--duration", "nan"], 2, "nan"),
        (t + ["--requests", "0"], 2, "0"),
        (t + ["--keys", "0"], 2, "0"),
        (t + ["--keys", "1000000000000"], 2, "1000000000000"),
        (t + ["--zipf", "-1"], 2, "-1"),
        (t + ["--write-ratio", "2"], 2, "2"),
        (t + ["--value-size", "99999"], 2, "99999"),
        (t + ["--timeout", "0"], 2, "0"),
        (t + ["--timeout", "inf"], 2, "inf"),
        (t + ["--seed", "x"], 2, "'x'"),
        (t + ["--scheme", "bogus"], 2, "bogus"),
        (t + ["--pick", "bogus"], 2, "bogus"),
    ]
    # every scheme (the load generator's "subcommands") with bad values of its own flags
    flags = {a.dest: a for a in load.build_parser()._actions}
    for name, cls in all_schemes().items():
        cases.append((t + ["--scheme", name, "--keys", "-3"], 2, "-3"))
        for opt in cls.options:
            if flags.get(opt) is not None and flags[opt].option_strings and \
                    flags[opt].nargs != 0:
                flag = flags[opt].option_strings[0]
                cases.append((t + ["--scheme", name, flag, "70000x"], 2, "70000x"))
    for opt in ("nc_bind_port", "rs_bind_port"):
        if opt in flags:
            scheme = next(n for n, c in all_schemes().items() if opt in c.options)
            extra = {"netclone": ["--groups", "1"], "netrs": ["--replica-groups", "0"]}
            cases.append((t + ["--scheme", scheme, *extra.get(scheme, []),
                               flags[opt].option_strings[0], "70000"], 2, "70000"))
    for argv, expect, needle in cases:
        code, err = _in_process(load.main, argv)
        _check(argv, code, err, expect, needle)
