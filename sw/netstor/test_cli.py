"""The netstor CLI as a user runs it: separate processes against a data plane that keeps its
state (a golden model serving its control window on a Unix socket)."""
import json
import os
import subprocess
import sys
import time

import pytest

from netstor.api import Device
from netstor.driver.remote import SocketTransport, WindowServer, RemoteError
from netstor.driver.transports import ModelTransport
from netstor.model.dataplane import DataplaneModel
from netstor.programs import default_pipeline


@pytest.fixture(scope="module")
def schema_file(tmp_path_factory):
    from netstor.build import build_core
    p = tmp_path_factory.mktemp("schema") / "schema.json"
    p.write_text(json.dumps(build_core().schema))
    return p


@pytest.fixture
def served(tmp_path, schema_file):
    """A `netstor serve-model` process; yields (socket path, run)."""
    sock = tmp_path / "model.sock"
    env = {**os.environ, "NETSTOR_SCHEMA": str(schema_file)}
    proc = subprocess.Popen([sys.executable, "-m", "netstor.cli", "serve-model", "--control",
                             str(sock)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert "serving its control window" in line, line

        def run(*args, ok=True):
            r = subprocess.run([sys.executable, "-m", "netstor.cli", "--device", f"unix:{sock}",
                                *args], capture_output=True, text=True, env=env, timeout=60)
            if ok:
                assert r.returncode == 0, r.stderr
            return r
        yield sock, run
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert not sock.exists()                  # the server removes its socket


def test_tables_through_separate_processes(served):
    sock, run = served
    run("table", "add", "l3.routes", "10.1.0.0/16", "route", "port=1",
        "dmac=02:00:00:00:01:01", "smac=02:00:00:00:ff:01")
    run("table", "add", "l3.routes", "10.1.2.0/24", "drop")
    run("table", "add", "prim.ops", "4", "multicast", "group=3")
    run("table", "add", "prim.acl", "10.0.0.9,0", "deny", "--mask", "255.255.255.255,0",
        "--priority", "1")
    dump = json.loads(run("--json", "table", "dump", "l3.routes").stdout)
    assert [(e["prefix"], e["prefix_len"], e["action"]) for e in dump["entries"]] == \
        [(0x0A010200, 24, "drop"), (0x0A010000, 16, "route")]
    assert dump["entries"][1]["params"] == {"port": 1, "dmac": 0x020000000101,
                                           "smac": 0x02000000FF01}
    text = run("table", "dump", "l3.routes").stdout
    assert "10.1.0.0/16" in text and "dmac=02:00:00:00:01:01" in text and "2/64 entries" in text
    assert json.loads(run("--json", "table", "get", "prim.ops", "4").stdout)["params"] == \
        {"group": 3}
    assert json.loads(run("--json", "table", "get", "prim.acl", "1").stdout)["value"] == \
        [0x0A000009, 0]
    run("table", "modify", "l3.routes", "10.1.2.0/24", "to_host")
    run("table", "delete", "prim.ops", "4")
    listing = {t["name"]: t for t in json.loads(run("--json", "table", "list").stdout)}
    assert listing["l3.routes"]["used"] == 2 and listing["prim.ops"]["used"] == 0
    run("table", "default", "l3.routes", "drop")
    assert json.loads(run("--json", "table", "default", "l3.routes").stdout)["action"] == "drop"
    run("table", "clear", "l3.routes")
    # the same state seen by the API in this process over the socket
    dev = Device.open(f"unix:{sock}")
    assert dev.table("l3.routes").dump() == [] and len(dev.table("prim.acl").dump()) == 1
    dev.close()


def test_errors_are_messages_not_tracebacks(served):
    _, run = served
    for args, msg in [(("table", "add", "l3.routes", "10.0.0.0/33", "drop"), "prefix length 33"),
                      (("table", "add", "nope", "1", "x"), "no table 'nope'"),
                      (("table", "add", "prim.ops", "1", "forward", "port=99"), "4 bits"),
                      (("table", "add", "prim.ops", "1", "forward", "port"), "NAME=VALUE"),
                      (("table", "delete", "prim.ops", "9"), "no entry"),
                      (("reg", "set", "parser.udp_port.prim", "0x10000"), "16 bits"),
                      (("bank", "write", "prim.cells", "999", "1"), "out of range"),
                      (("mcast", "set", "4096", "0:1"), "out of range"),
                      (("apply", "/nonexistent.yaml"), "not found")]:
        r = run(*args, ok=False)
        usage = msg == "NAME=VALUE"         # a malformed argument: usage error, exit 2
        assert r.returncode == (2 if usage else 1) and msg in r.stderr and \
            "Traceback" not in r.stderr, (args, r.stderr)
    r = subprocess.run([sys.executable, "-m", "netstor.cli", "--device", "unix:/nonexistent",
                        "info"], capture_output=True, text=True)
    assert r.returncode == 1 and "no data plane serves" in r.stderr


def test_registers_banks_mcast_counters_apply(served, tmp_path):
    _, run = served
    run("reg", "set", "parser.udp_port.prim", "7000")
    assert json.loads(run("--json", "reg", "get", "parser.udp_port.prim").stdout) == \
        {"parser.udp_port.prim": 7000}
    run("bank", "write", "prim.cells", "3", "0xbeef")
    assert json.loads(run("--json", "bank", "read", "prim.cells", "2", "--count", "3").stdout) \
        == {"2": 0, "3": 0xBEEF, "4": 0}
    run("mcast", "set", "2", "0:1", "3:9")
    assert json.loads(run("--json", "mcast", "list").stdout) == {"2": [[0, 1], [3, 9]]}
    run("mcast", "clear", "2")
    assert json.loads(run("--json", "mcast", "list").stdout) == {}
    c = json.loads(run("--json", "counters", "in0.").stdout)
    assert set(c["counters"]) == {f"in0.{n}" for n in
                                  ("pkts", "bytes", "drop_runt", "drop_oversize", "drop_error",
                                   "drop_full")}
    cfg = tmp_path / "c.yaml"
    cfg.write_text("tables:\n  l3.routes:\n    entries:\n"
                   "      - {prefix: 10.77.1.1/32, action: drop}\n"
                   "banks:\n  prim.cells: {7: 70}\n")
    out = run("apply", str(cfg), "--dry-run").stdout
    assert "nothing written" in out
    assert json.loads(run("--json", "table", "dump", "l3.routes").stdout)["entries"] == []
    run("apply", str(cfg))
    assert len(json.loads(run("--json", "table", "dump", "l3.routes").stdout)["entries"]) == 1
    assert json.loads(run("--json", "bank", "read", "prim.cells", "7").stdout) == {"7": 70}


def test_counters_watch_refreshes(served):
    """The live view: --watch with --count refreshes N times and reports rates."""
    sock, run = served
    r = run("--json", "counters", "in0.pkts", "--watch", "--interval", "0.2", "--count", "3")
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(lines) == 3 and lines[0]["rates"] is None
    assert lines[2]["rates"] == {"in0.pkts": 0.0}
    assert lines[2]["time"] - lines[0]["time"] >= 0.35
    text = run("counters", "in0.pkts", "--watch", "--interval", "0.1", "--count", "2").stdout
    assert text.count("netstor counters on unix:") == 2 and "rate" in text


def test_schema_and_info(served):
    _, run = served
    info = json.loads(run("--json", "info").stdout)
    assert info["app_id"] == "0x4e530001" and info["ports"] == 2
    text = run("schema").stdout
    assert "l3.routes" in text and "route(port:4,dmac:48,smac:48)" in text


def test_window_server_refuses_bad_offsets(tmp_path, schema_file):
    schema = json.loads(schema_file.read_text())
    model = DataplaneModel(default_pipeline())
    srv = WindowServer(ModelTransport(model, schema), tmp_path / "w.sock").start()
    try:
        t = SocketTransport(str(tmp_path / "w.sock"))
        assert t.read32(0) == schema["app_id"]
        t.write32(12, 0x1234)                                    # scratch
        assert t.read32(12) == 0x1234
        with pytest.raises(ValueError, match="aligned"):
            t.read32(2)
        with pytest.raises(RemoteError):
            t.read32(1 << 30)                                    # outside the window
        assert t.read32(0) == schema["app_id"]                   # connection still usable
        t.close()
    finally:
        srv.stop()
