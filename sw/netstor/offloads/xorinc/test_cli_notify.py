"""``netstor xorinc notify CONFIG --device TARGET`` (XORInc's ``cli`` hook, run through
``netstor.cli.main``) against a golden model with the XORInc program serving its control
window (as ``netstor switch`` / ``serve-model`` do): the ``xi.engine.expired`` words are set
through the host API (``Device.client.mem_write``), and the TIMEOUTs arrive on real UDP sockets
bound on loopback, decoded with the XORInc header struct: one per op id whose count differs
from the baseline, to its client's requester, ``seq`` the count; nothing for unchanged op ids
or for op ids of a client without a requester. The loop mode ends cleanly on SIGTERM. Bad
input exits 2, a device without XORInc's engine 1, each with one line."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from netstor import cli

from . import header as H
from .config import EXPIRED_MEMORY

LOOP = "127.0.0.1"


@pytest.fixture(scope="module")
def xi_switch(tmp_path_factory):
    """(target, schema path, host-API device, n_ops, data-plane write) of a served model with
    XORInc."""
    from netstor.offloads.testing import served_model
    from netstor.programs import default_pipeline
    with served_model(tmp_path_factory.mktemp("xi_switch"), default_pipeline()) as sw:
        schema = json.loads(sw.schema.read_text())
        depth = {m["name"]: m for m in schema["memories"]}[EXPIRED_MEMORY]["depth"]

        def dataplane_set(words):            # as the engine counts: the owner's side, its lock
            with sw.server.lock:
                for op, v in words.items():
                    sw.model.memory(EXPIRED_MEMORY).words[op] = v

        yield sw.target, sw.schema, sw.dev, depth, dataplane_set


@pytest.fixture
def rx():
    """Two requesters' UDP sockets on loopback."""
    socks = []
    for _ in range(2):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((LOOP, 0))
        socks.append(s)
    yield socks
    for s in socks:
        s.close()


def _config(tmp_path, a, b):
    f = tmp_path / "xi.yaml"
    f.write_text("xorinc:\n  clients:\n"
                 f"    a: {{ops: [0, 7], requester: \"{LOOP}:{a}\"}}\n"
                 f"    b: {{ops: [8, 15], requester: \"{LOOP}:{b}\"}}\n"
                 "    c: [16, 23]\n")
    return f


def _drain(s, wait=0.3):
    """Every TIMEOUT on ``s``: [(type, opid, seq, req_addr, req_port, len, datagram size)]."""
    s.settimeout(wait)
    out = []
    while True:
        try:
            raw = s.recv(4096)
        except socket.timeout:
            return out
        h = H.XiHeader.unpack(raw)
        out.append((h.type, h.opid, h.seq, h.req_addr, h.req_port, h.len, len(raw)))


def _set(dev, words):
    for op, v in words.items():
        dev.client.mem_write(EXPIRED_MEMORY, op, v)
    assert {op: dev.client.mem_read(EXPIRED_MEMORY, op) for op in words} == words


LO = int.from_bytes(socket.inet_aton(LOOP), "big")


def test_once_sends_timeouts(xi_switch, rx, tmp_path, capsys):
    target, schema, dev, n_ops, _ = xi_switch
    pa, pb = (s.getsockname()[1] for s in rx)
    conf = _config(tmp_path, pa, pb)
    _set(dev, {op: 0 for op in range(n_ops)})
    _set(dev, {3: 2, 9: 5, 12: 0xFFFFFFFF, 18: 4})
    state = tmp_path / "state.json"
    argv = ["--schema", str(schema), "xorinc", "notify", str(conf), "--device", target,
            "--once", "--state", str(state)]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    got_a, got_b = _drain(rx[0]), _drain(rx[1])
    assert [g[:5] for g in got_a] == [(H.T_TIMEOUT, 3, 2, LO, pa)]
    assert sorted(g[:5] for g in got_b) == [(H.T_TIMEOUT, 9, 5, LO, pb),
                                            (H.T_TIMEOUT, 12, 0xFFFFFFFF, LO, pb)]
    assert all(g[5] == 0 for g in got_a + got_b)                 # no data
    lines = out.splitlines()
    assert f"TIMEOUT op 3 -> {LOOP}:{pa}: 2 timeout(s), count 2" in lines
    assert f"TIMEOUT op 9 -> {LOOP}:{pb}: 5 timeout(s), count 5" in lines
    assert "op 18: 4 timeout(s), count 4: no requester, not sent" in lines
    assert len(lines) == 4
    assert json.loads(state.read_text())[:19] == [0, 0, 0, 2] + [0] * 5 + [5, 0, 0,
                                                                           0xFFFFFFFF] + [0] * 5 + [4]

    # second run against the state: op 9 grew by 3, op 12 wrapped (+2); the rest unchanged
    _set(dev, {9: 8, 12: 1})
    assert cli.main(["--json"] + argv) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows == [{"op": 9, "new": 3, "count": 8, "requester": f"{LOOP}:{pb}", "sent": True},
                    {"op": 12, "new": 2, "count": 1, "requester": f"{LOOP}:{pb}",
                     "sent": True}]
    assert _drain(rx[0]) == []
    assert sorted(g[:5] for g in _drain(rx[1])) == [(H.T_TIMEOUT, 9, 8, LO, pb),
                                                    (H.T_TIMEOUT, 12, 1, LO, pb)]
    # nothing changed: nothing sent, an empty list
    assert cli.main(["--json"] + argv) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert _drain(rx[0], 0.1) == [] and _drain(rx[1], 0.1) == []


def test_loop_until_sigterm(xi_switch, rx, tmp_path):
    """The loop mode in a process: counts present at start are its baseline; a count that
    grows while it runs is sent once; SIGTERM ends it with status 0 and a summary. The counts
    grow on the data plane's side (the owner's lock) while the notifier polls: a second host
    using the window's indirect memory access at the same time could interleave with its
    reads (each 32-bit access is atomic, a memory read is several)."""
    target, schema, dev, n_ops, dataplane_set = xi_switch
    pa, pb = (s.getsockname()[1] for s in rx)
    conf = _config(tmp_path, pa, pb)
    _set(dev, {op: 0 for op in range(n_ops)})
    _set(dev, {4: 7})                                   # baseline: not reported
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    p = subprocess.Popen([sys.executable, "-m", "netstor.cli", "--schema", str(schema),
                          "xorinc", "notify", str(conf), "--device", target, "--interval",
                          "0.05"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env)
    try:
        first = p.stdout.readline()                 # after the baseline was read
        assert first.startswith(f"xorinc notify: polling {target} every 0.05 s"), first
        dataplane_set({5: 1, 10: 2})
        got_a, got_b = _drain(rx[0], 2.0), _drain(rx[1], 1.0)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=5)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    assert [g[:5] for g in got_a] == [(H.T_TIMEOUT, 5, 1, LO, pa)]
    assert [g[:5] for g in got_b] == [(H.T_TIMEOUT, 10, 2, LO, pb)]
    assert "xorinc notify: 2 TIMEOUT(s) sent, 3 timeout(s) seen" in out, out
    assert "op 4" not in out and err == ""


@pytest.mark.parametrize("name, text, needle", [
    ("missing.yaml", None, "missing.yaml not found"),
    ("noxi.yaml", "tables: {}\n", "noxi.yaml: no xorinc: section"),
    ("broken.yaml", "xorinc: [\n", "broken.yaml:2"),
    ("badreq.yaml", "xorinc:\n  clients:\n    a: {ops: [0, 3], requester: \"1.2.3.4\"}\n",
     "ipv4:port"),
    ("noreq.yaml", "xorinc:\n  clients:\n    a: [0, 3]\n", "no client gives a requester"),
    ("unknown.yaml", "xorinc:\n  bogus: 1\n", "unknown key"),
])
def test_bad_config_exits_2(xi_switch, tmp_path, capsys, name, text, needle):
    target, schema, _, _, _ = xi_switch
    f = tmp_path / name
    if text is not None:
        f.write_text(text)
    assert cli.main(["--schema", str(schema), "xorinc", "notify", str(f), "--device", target,
                     "--once"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("netstor: error: ") and err.count("\n") == 1 and needle in err, err


def test_bad_arguments_and_devices(xi_switch, rx, tmp_path, capsys, monkeypatch):
    target, schema, dev, n_ops, _ = xi_switch
    conf = _config(tmp_path, *(s.getsockname()[1] for s in rx))
    monkeypatch.delenv("NETSTOR_DEVICE", raising=False)
    assert cli.main(["xorinc", "notify", str(conf), "--once"]) == 2
    assert "give --device TARGET" in capsys.readouterr().err
    for bad in ("0", "-1", "nan"):
        with pytest.raises(SystemExit) as e:
            cli.main(["xorinc", "notify", str(conf), "--device", target, "--interval", bad])
        assert e.value.code == 2
    capsys.readouterr()
    bad_state = tmp_path / "s.json"
    bad_state.write_text("[1, 2]")
    assert cli.main(["--schema", str(schema), "xorinc", "notify", str(conf), "--device",
                     target, "--once", "--state", str(bad_state)]) == 2
    assert f"expected a list of {n_ops} 32-bit counts" in capsys.readouterr().err
    # op ids beyond the device's engine
    big = tmp_path / "big.yaml"
    big.write_text(f"xorinc:\n  clients:\n    a: {{ops: [{n_ops - 1}, {n_ops + 1}], "
                   f"requester: \"{LOOP}:9\"}}\n")
    code = cli.main(["--schema", str(schema), "xorinc", "notify", str(big), "--device",
                     target, "--once"])
    assert code == 2, capsys.readouterr()
    capsys.readouterr()
    # a device without XORInc's engine (a core built without it): 1
    from netstor.offloads.testing import served_model
    from netstor.programs import default_pipeline
    (tmp_path / "noxi").mkdir()
    with served_model(tmp_path / "noxi", default_pipeline(exclude=("xorinc",))) as sw:
        assert cli.main(["--schema", str(sw.schema), "xorinc", "notify", str(conf), "--device",
                         sw.target, "--once"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"no {EXPIRED_MEMORY} memory" in err, err
    # no switch listening: 1
    assert cli.main(["--schema", str(schema), "xorinc", "notify", str(conf), "--device",
                     f"unix:{tmp_path / 'none.sock'}", "--once"]) == 1
    assert "none.sock" in capsys.readouterr().err
