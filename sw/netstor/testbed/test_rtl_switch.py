"""RTL in the loop: real UDP request/replies between two namespaces through the whole core in
Verilator (``sim/rtl_switch.py`` on the shared core build); the hardware's outputs and
counters equal the golden model's for the same frames."""
import json
import os
import sys
import time

import pytest

from netstor.testbed import netns
from netstor.testbed.rack import Rack
from netstor.testbed.test_testbed import ECHO, CLIENT, SEND

PY = sys.executable


@pytest.mark.cocotb
@pytest.mark.xdist_group("core2")
@pytest.mark.skipif(os.geteuid() != 0, reason="the test bed needs root")
def test_rtl_switch_udp(tmp_path):
    stats = tmp_path / "stats.json"
    n = 5
    with Rack(1, 1, workdir=tmp_path) as r:
        c, s = r.clients[0], r.servers[0]
        t0 = time.monotonic()
        r.start_switch(dataplane="rtl", stats_json=stats, ready_timeout=900,
                       log=tmp_path / "switch.log")
        t_ready = time.monotonic() - t0
        echo = r.spawn(s, [PY, "-c", ECHO, s.ip, 9000])
        echo.wait_line("echo ready")
        t1 = time.monotonic()
        cli = r.spawn(c, [PY, "-c", CLIENT, s.ip, 9000, n, 20.0])
        assert cli.wait(300) == 0
        t_rr = (time.monotonic() - t1) / n
        res = json.loads(cli.lines[-1])
        assert res["ok"] == n, cli.output()
        # unrouted: to the host port of the ingress port
        r.spawn(c, [PY, "-c", SEND, "10.77.1.99", 9002, 2]).wait(10)
        time.sleep(2.0)
        out = r.stop_switch(timeout=120)
    st = json.loads(stats.read_text())
    print(f"RTL switch: ready after {t_ready:.1f} s, {t_rr * 1e3:.0f} ms per request/reply, "
          f"{st.get('sim_khz')} kHz simulated")
    assert not st.get("error"), out
    assert st["counter_mismatches"] == {} and st["output_problems"] == [], out
    assert st["ports"]["0"]["rx_frames"] == n + 2 and st["ports"]["1"]["tx_frames"] == n
    assert st["ports"]["1"]["rx_frames"] == n and st["ports"]["0"]["tx_frames"] == n
    assert st["to_host"]["2"] == 2
    assert st["dataplane"]["l3.routes.hit"] == 2 * n
    assert st["dataplane"]["l3.routes.miss"] == 2
    assert not [x for x in netns.list_ns() if x.startswith(r.prefix)]
