"""The demo end to end: real netstor-server/netstor-load through the model switch, and a
Ctrl-C in the middle leaves no namespace and no process behind."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from netstor.testbed import netns
from netstor.testbed.demo import run_demo

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the test bed needs root")


def test_storage_agents_through_model_switch(capsys):
    res = run_demo(servers=2, clients=2, rate=150, duration=2.0, write_ratio=0.2)
    out = capsys.readouterr().out
    assert "total" in out and "data plane counters" in out
    sent = replies = 0
    for name, r in res["clients"].items():
        assert r["timeouts"] == 0 and r["replies"] == r["sent"] > 100, (name, r)
        assert r["errors"] in ({}, 0, None) or not r["errors"], r["errors"]
        sent += r["sent"]
        replies += r["replies"]
    st = res["switch"]
    # every request crossed port 0 -> 1, every reply 1 -> 0, all routed by l3.routes
    assert st["ports"]["0"]["rx_frames"] == sent == st["ports"]["1"]["tx_frames"]
    assert st["ports"]["1"]["rx_frames"] == replies == st["ports"]["0"]["tx_frames"]
    assert st["dataplane"]["l3.routes.hit"] == sent + replies
    assert st["to_host_total"] == 0 and st["drops"] == 0 and st["tx_errors"] == 0
    # NetRS step: every request selected by the switch (C3), its monitor counted every
    # response (one rack: class "same rack"), each server answered some, the counters agree
    rs = res["netrs"]["summary"]
    assert rs["timeouts"] == 0 and rs["replies"] == rs["sent"] == rs["selected"] > 10, rs
    assert rs["monitor"] == {"same_rack": rs["replies"], "same_pod": 0, "other_pod": 0}
    assert sum(rs["per_server"].values()) == rs["replies"] and rs["noreplica"] == 0
    dp = res["netrs"]["switch"]["dataplane"]
    assert dp["rs.rgroups.hit"] == dp["rs.servers.hit"] == rs["sent"]
    assert "NetRS (" in out and "selected by the switch" in out


def _procs_mentioning(text):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd:
            found.append((int(pid), cmd))
    return found


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_demo_interrupted_cleans_up(sig):
    p = subprocess.Popen([sys.executable, "-m", "netstor.testbed.demo", "--duration", "30",
                          "--rate", "100"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "netstor-load client(s)" in line:
                break
        text = "".join(lines)
        m = re.search(r"rack (nst\S+-):.*work dir (\S+)", text)
        assert m and "netstor-load client(s)" in text, text
        prefix, workdir = m.group(1), m.group(2)
        time.sleep(1.0)          # mid-run: servers and clients busy
        assert _procs_mentioning(workdir)
        os.kill(p.pid, sig)
        rc = p.wait(60)
        rest = p.stdout.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert rc in (130, 128 + sig), text + rest
    assert not [n for n in netns.list_ns() if n.startswith(prefix)]
    assert not _procs_mentioning(workdir)
    assert not os.path.exists(workdir)
