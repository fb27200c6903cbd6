"""The real-socket test bed: namespaces come and go cleanly, frames really cross the model
switch (TTL, MACs as the route says), unrouted traffic goes to the host, checksums hold."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from netstor.testbed import netns
from netstor.testbed.rack import Rack, port_mac
from netstor.compiler import config_writes
from netstor.testbed.ports import complete_checksum

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the test bed needs root")

PY = sys.executable

# a UDP echo server: prints "echo ready", answers every datagram with its payload
ECHO = r'''
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
print("echo ready", flush=True)
while True:
    d, a = s.recvfrom(4096)
    s.sendto(d, a)
'''

# a UDP client: N request/replies (1 s timeout each), prints JSON {"ok": n, "rps": r}
CLIENT = r'''
import json, socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(float(sys.argv[4]) if len(sys.argv) > 4 else 1.0)
n = int(sys.argv[3]); ok = 0; t = time.time()
for i in range(n):
    msg = b"req-%06d" % i + b"." * 30
    s.sendto(msg, (sys.argv[1], int(sys.argv[2])))
    try:
        d, _ = s.recvfrom(4096)
        ok += d == msg
    except socket.timeout:
        pass
print(json.dumps({"ok": ok, "rps": ok / (time.time() - t)}), flush=True)
'''

# capture: the first IPv4/UDP frame to port argv[2] on argv[1]: its MACs, TTL, UDP checksum
# validity (the kernel checks it too, but here we look at the bytes)
CAPTURE = r'''
import json, socket, struct, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((sys.argv[1], 3)); s.settimeout(0.2)
sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)   # no ICMP port unreachable
sink.bind(("0.0.0.0", int(sys.argv[2])))
print("capture ready", flush=True)
end = time.time() + 10
while time.time() < end:
    try:
        f, addr = s.recvfrom(65536)
    except socket.timeout:
        continue
    if addr[2] == 4 or len(f) < 42 or f[12:14] != b"\x08\x00" or f[23] != 17:
        continue
    ihl = (f[14] & 15) * 4
    if struct.unpack_from("!H", f, 14 + ihl + 2)[0] != int(sys.argv[2]):
        continue
    print(json.dumps({"dst": f[0:6].hex(), "src": f[6:12].hex(), "ttl": f[22]}), flush=True)
    break
time.sleep(60)    # keep the sink open until stopped
'''

SEND = r'''
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(int(sys.argv[3])):
    s.sendto(b"hello", (sys.argv[1], int(sys.argv[2])))
'''


def _leftovers(prefix):
    return [n for n in netns.list_ns() if n.startswith(prefix)]


def _root_links():
    return sorted(subprocess.run(["ip", "-o", "link"], capture_output=True,
                                 text=True).stdout.split("\n"))


def _names(out):
    return [line.split(":")[1].strip().split("@")[0] for line in out if line.strip()]


def test_rack_up_down_leaves_nothing():
    before = _names(_root_links())
    with Rack(2, 3) as r:
        names = list(r.namespaces)
        assert len(names) == 6 and all(n in netns.list_ns() for n in names)
        # nothing in the root namespace
        assert _names(_root_links()) == before
        # a process left running inside is stopped by the teardown
        r.spawn("s0", [PY, "-c", "import time; time.sleep(60)"])
    assert not _leftovers(r.prefix)
    assert _names(_root_links()) == before


def test_rack_interrupted_mid_setup(monkeypatch):
    import netstor.testbed.rack as rack_mod
    calls = {"n": 0}
    real_ip = rack_mod.ip

    def flaky_ip(*a, **kw):
        calls["n"] += 1
        if calls["n"] == 20:
            raise KeyboardInterrupt
        return real_ip(*a, **kw)
    monkeypatch.setattr(rack_mod, "ip", flaky_ip)
    r = Rack(2, 2)
    with pytest.raises(KeyboardInterrupt):
        r.up()
    assert r.namespaces == [] and not _leftovers(r.prefix)


def test_cleanup_stale():
    # a namespace named like a rack of a process that no longer exists
    dead = 4194304 + 7         # above pid_max's maximum: never a live pid
    name = f"{netns.PREFIX}{dead}x0-sw"
    netns.add_ns(name)
    try:
        assert name in netns.cleanup_stale()
    finally:
        netns.del_ns(name)
    assert name not in netns.list_ns()


def test_udp_through_model_switch(tmp_path):
    stats = tmp_path / "stats.json"
    with Rack(1, 2) as r:
        c, s0, s1 = r.clients[0], r.servers[0], r.servers[1]
        r.start_switch(stats_json=stats)
        echo = r.spawn(s0, [PY, "-c", ECHO, s0.ip, 9000])
        echo.wait_line("echo ready")
        cap = r.spawn(s1, [PY, "-c", CAPTURE, "eth0", 9001])
        cap.wait_line("capture ready")
        # request/replies through the switch, both directions routed
        cli = r.spawn(c, [PY, "-c", CLIENT, s0.ip, 9000, 200])
        assert cli.wait(60) == 0
        res = json.loads(cli.lines[-1])
        assert res["ok"] == 200, cli.output()
        # a frame as the server sees it: MACs rewritten as the route says, TTL 64 -> 63
        r.spawn(c, [PY, "-c", SEND, s1.ip, 9001, 3]).wait(10)
        got = json.loads(cap.wait_line(r"^\{", timeout=15))
        assert got == {"dst": s1.mac_str.replace(":", ""),
                       "src": f"{port_mac(1):012x}", "ttl": 63}
        # unrouted traffic (no /32 for .99) goes to the host
        r.spawn(c, [PY, "-c", SEND, "10.77.1.99", 9002, 5]).wait(10)
        time.sleep(0.3)
        out = r.stop_switch()
    st = json.loads(stats.read_text())
    assert "final counters" in out
    assert st["to_host"]["2"] == 5 and st["to_host"]["3"] == 0
    assert st["dataplane"]["l3.routes.miss"] == 5
    assert st["ports"]["0"]["rx_frames"] == 200 + 3 + 5
    assert st["ports"]["1"]["tx_frames"] == 200 + 3
    assert st["ports"]["1"]["rx_frames"] == 200 and st["ports"]["0"]["tx_frames"] == 200
    assert st["drops"] == 0 and st["tx_errors"] == 0
    assert st["dataplane"]["l3.routes.hit"] == 403
    assert not _leftovers(r.prefix)


def test_complete_checksum():
    import struct
    from netstor.model.dataplane import ipv4_header_checksum
    payload = b"abcdefghijk"
    iph = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + 8 + len(payload), 1, 0, 64,
                                17, 0, bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])))
    iph[10:12] = struct.pack("!H", ipv4_header_checksum(bytes(iph)))
    udp = struct.pack("!HHHH", 1000, 2000, 8 + len(payload), 0) + payload
    f = bytes(12) + b"\x08\x00" + bytes(iph) + udp
    fixed = complete_checksum(f)
    # verify: the ones' complement sum over pseudo header + UDP is 0xFFFF
    seg = fixed[34:]
    pseudo = bytes(iph[12:20]) + struct.pack("!BBH", 0, 17, len(seg))
    data = pseudo + seg + (b"\0" if len(seg) & 1 else b"")
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    assert s == 0xFFFF
    assert complete_checksum(b"\0" * 20) == b"\0" * 20    # not IPv4: unchanged


def test_config_writes_match_table_writer():
    from netstor.programs import default_pipeline
    from netstor.driver.tables import TableWriter
    p = default_pipeline()
    cfg = {"tables": {"l3.routes": {"default": {"action": "to_host"}, "entries": [
        {"prefix": "10.77.1.10/32", "action": "route",
         "params": {"port": 1, "dmac": "02:4e:53:00:01:00", "smac": "02:4e:53:ff:00:01"}}]}}}
    w = TableWriter(p)
    want = w.set_default("l3.routes", "to_host") + w.lpm_add(
        "l3.routes", 0x0A4D010A, 32, "route",
        {"port": 1, "dmac": 0x024E53000100, "smac": 0x024E53FF0001})
    assert config_writes(p, cfg) == want


def test_control_window_while_forwarding(tmp_path):
    """``--control PATH``: the host API reads counters and changes routes of the running
    model switch (device ``unix:PATH``)."""
    from netstor.api import Device
    stats = tmp_path / "stats.json"
    ctl = tmp_path / "switch.sock"
    with Rack(1, 1) as r:
        c, s = r.clients[0], r.servers[0]
        r.start_switch(stats_json=stats, extra_args=["--control", ctl])
        r.spawn(s, [PY, "-c", ECHO, s.ip, 9000]).wait_line("echo ready")
        cli = r.spawn(c, [PY, "-c", CLIENT, s.ip, 9000, 20])
        assert cli.wait(60) == 0 and json.loads(cli.lines[-1])["ok"] == 20
        dev = Device.open(f"unix:{ctl}")
        try:
            assert dev.counters("l3.routes")["l3.routes.hit"] == 40
            dev.table("l3.routes").delete("10.77.1.10/32")     # the server's route goes
        finally:
            dev.close()
        cli = r.spawn(c, [PY, "-c", CLIENT, s.ip, 9000, 3, 0.3])
        assert cli.wait(60) == 0 and json.loads(cli.lines[-1])["ok"] == 0
        r.stop_switch()
    st = json.loads(stats.read_text())
    assert st["to_host"]["2"] == 3 and st["dataplane"]["l3.routes.miss"] == 3
