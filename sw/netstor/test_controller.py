"""The controller daemon: its HTTP/JSON API, periodic work (counters, port and agent
liveness), as a process (`netstor controller`) and in-process with a fake clock."""
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from netstor.api import Device
from netstor.controller import Controller
from netstor.model.dataplane import DataplaneModel
from netstor.programs import default_pipeline

CONFIG = {"tables": {"l3.routes": {"entries": [
    {"prefix": "10.1.0.0/16", "action": "route",
     "params": {"port": 1, "dmac": "02:00:00:00:01:01", "smac": "02:00:00:00:ff:01"}}]}}}


@pytest.fixture(scope="module")
def schema():
    from netstor.build import build_core
    return build_core().schema


TOKEN = "test-token-0123456789abcdef"


def call(base, method, path, body=None, token=TOKEN):
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


@pytest.fixture
def ctl(schema):
    model = DataplaneModel(default_pipeline())
    clock = Clock()
    c = Controller(Device.open("model", schema=schema, model=model), CONFIG,
                   poll_interval=1.0, agent_timeout=3.0, port_timeout=5.0, clock=clock,
                   token=TOKEN)
    c.start(("127.0.0.1", 0))
    c._stop.set()                  # drive the periodic work by hand with the fake clock
    c.model, c.fake = model, clock
    host, port = c.address
    c.base = f"http://{host}:{port}/api/v1"
    yield c
    c.stop()


def frame(dst):
    return bytes(Ether() / IP(src="10.0.0.1", dst=dst) / UDP(sport=1, dport=2) / Raw(bytes(20)))


def test_api_tables_registers_config(ctl):
    st, body = call(ctl.base, "GET", "/tables/l3.routes")
    assert st == 200 and body["entries"][0]["prefix"] == 0x0A010000   # config applied at start
    st, body = call(ctl.base, "POST", "/tables/prim.ops",
                    {"op": "add", "match": 5, "action": "forward", "params": {"port": 1}})
    assert st == 200 and body == {"ok": True, "entries": 1}
    assert ctl.model.mem_read("prim.ops", Device.open("model", model=ctl.model)
                              .table("prim.ops").get(5)["address"]) != 0
    st, body = call(ctl.base, "POST", "/tables/prim.ops",
                    {"op": "add", "match": 5, "action": "forward", "params": {"port": 99}})
    assert st == 400 and "4 bits" in body["error"]
    st, body = call(ctl.base, "POST", "/tables/prim.ops", {"op": "delete", "match": 5})
    assert st == 200 and body["entries"] == 0
    st, body = call(ctl.base, "POST", "/tables/prim.ops", {"op": "frob"})
    assert st == 400 and "op must be" in body["error"]
    st, body = call(ctl.base, "GET", "/tables/nope")
    assert st == 404 and "no table" in body["error"]
    st, body = call(ctl.base, "PUT", "/registers/parser.udp_port.prim", {"value": 7001})
    assert st == 200 and ctl.model.reg_read("parser.udp_port.prim") == 7001
    st, body = call(ctl.base, "GET", "/registers")
    assert body == {"parser.udp_port.prim": 7001, "parser.udp_port.nc": 7431,
                    "parser.udp_port.rs": 7432, "parser.udp_port.nl": 7460,
                    "parser.udp_port.xi": 7450, "parser.udp_port.nice": 7470}
    cfg = {"tables": {"l3.routes": {"entries": [{"prefix": "10.2.0.0/16", "action": "drop"}]}}}
    st, body = call(ctl.base, "POST", "/config?dry_run=1", cfg)
    assert st == 200 and call(ctl.base, "GET", "/tables/l3.routes")[1]["entries"][0][
        "prefix"] == 0x0A010000
    st, body = call(ctl.base, "POST", "/config", cfg)
    assert st == 200 and body["entries"] == 1
    assert [e["prefix"] for e in call(ctl.base, "GET", "/tables/l3.routes")[1]["entries"]] == \
        [0x0A020000]
    st, body = call(ctl.base, "POST", "/config", {"tables": {"l3.routes": {"entries": [
        {"prefix": "10.2.0.0/40", "action": "drop"}]}}})
    assert st == 400 and "prefix length 40" in body["error"]
    st, body = call(ctl.base, "GET", "/nothing")
    assert st == 404
    kinds = [e["kind"] for e in call(ctl.base, "GET", "/events")[1]]
    assert kinds.count("config_applied") == 2


def test_counters_and_port_liveness(ctl):
    ctl.run_due_tasks()
    assert call(ctl.base, "GET", "/ports")[1]["0"]["up"] is False
    for _ in range(10):
        ctl.model.process(frame("10.1.0.9"), 0)
    ctl.fake.t += 2.0
    ctl.run_due_tasks()
    st, body = call(ctl.base, "GET", "/counters?prefix=in0.pkts")
    assert body["counters"] == {"in0.pkts": 10} and body["rates"] == {"in0.pkts": 5.0}
    ports = call(ctl.base, "GET", "/ports")[1]
    assert ports["0"]["up"] is True and ports["1"]["up"] is False
    ctl.fake.t += 6.0                        # no traffic for longer than port_timeout
    ctl.run_due_tasks()
    assert call(ctl.base, "GET", "/ports")[1]["0"]["up"] is False
    kinds = [(e["kind"], e.get("port")) for e in call(ctl.base, "GET", "/events")[1]]
    assert ("port_up", 0) in kinds and ("port_down", 0) in kinds
    st, body = call(ctl.base, "GET", "/status")
    assert body["device"]["app_id"] == "0x4e530001" and body["ports"]["0"]["rx_pkts"] == 10


def test_agent_heartbeats(ctl):
    hb = {"server_id": 3, "addr": "10.77.1.3", "port": 7430, "queue_len": 2, "served": 10}
    assert call(ctl.base, "POST", "/heartbeat", hb) == (200, {"ok": True})
    assert call(ctl.base, "POST", "/heartbeat", {**hb, "served": 20})[0] == 200
    agents = call(ctl.base, "GET", "/agents")[1]
    assert agents["3"]["alive"] and agents["3"]["served"] == 20 and agents["3"]["heartbeats"] == 2
    assert call(ctl.base, "GET", "/status")[1]["agents"] == {"total": 1, "alive": 1}
    ctl.fake.t += 4.0
    ctl.run_due_tasks()
    assert call(ctl.base, "GET", "/agents")[1]["3"]["alive"] is False
    assert call(ctl.base, "POST", "/heartbeat", hb)[0] == 200           # comes back
    kinds = [e["kind"] for e in call(ctl.base, "GET", "/events")[1]]
    assert kinds.count("agent_up") == 2 and kinds.count("agent_down") == 1
    for bad in ({"addr": "x"}, {"server_id": 1 << 16}, {"server_id": "a"}):
        st, body = call(ctl.base, "POST", "/heartbeat", bad)
        assert st == 400 and "server_id" in body["error"]
    req = urllib.request.Request(ctl.base + "/heartbeat", data=b"{nope", method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {TOKEN}"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 400


def test_plugins_add_tasks_and_routes(ctl):
    ran = []
    ctl.add_task("offload", 0.5, lambda: ran.append(ctl.fake.t))
    ctl.add_route("GET", "/offload/state", lambda body, q: {"ran": len(ran)})
    ctl.run_due_tasks()
    ctl.fake.t += 0.5
    ctl.run_due_tasks()
    assert call(ctl.base, "GET", "/offload/state")[1] == {"ran": 2}
    ctl.add_task("broken", 0.5, lambda: 1 / 0)
    ctl.run_due_tasks()                       # logged as an event, the daemon goes on
    assert any(e["kind"] == "task_error" and e["task"] == "broken"
               for e in call(ctl.base, "GET", "/events")[1])


def test_controller_process_with_agent_heartbeat(tmp_path):
    """`netstor controller` as a process on a served model: applies its config file, serves
    the API, stops on SIGTERM."""
    from netstor.build import build_core
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(build_core().schema))
    token_file = tmp_path / "state" / "token"
    env = {**os.environ, "NETSTOR_SCHEMA": str(schema), "NETSTOR_TOKEN_FILE": str(token_file)}
    cfg = tmp_path / "c.yaml"
    cfg.write_text("tables:\n  l3.routes:\n    entries:\n"
                   "      - {prefix: 10.9.0.0/16, action: drop}\n")
    sock = tmp_path / "m.sock"
    model = subprocess.Popen([sys.executable, "-m", "netstor.cli", "serve-model", "--control",
                              str(sock)], stdout=subprocess.PIPE, text=True, env=env)
    ctl = None
    try:
        assert "serving" in model.stdout.readline()
        ctl = subprocess.Popen([sys.executable, "-m", "netstor.cli", "--device", f"unix:{sock}",
                                "controller", "--config", str(cfg), "--listen", "127.0.0.1:0",
                                "--poll-interval", "0.2"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = ctl.stdout.readline()
        assert "listening on http://127.0.0.1:" in line, (line, ctl.stderr.read())
        base = line.split()[-1]
        st, body = call(base, "GET", "/tables/l3.routes")
        assert st == 200 and body["entries"][0]["prefix"] == 0x0A090000
        # the model process holds the state: a CLI process sees the controller's entry
        r = subprocess.run([sys.executable, "-m", "netstor.cli", "--device", f"unix:{sock}",
                            "--json", "table", "dump", "l3.routes"], capture_output=True,
                           text=True, env=env, timeout=30)
        assert json.loads(r.stdout)["entries"][0]["prefix_len"] == 16
        token = token_file.read_text().strip()     # made on the first start, 0600
        assert (token_file.stat().st_mode & 0o777) == 0o600 and len(token) >= 40
        assert call(base, "POST", "/heartbeat", {"server_id": 1}, token=None)[0] == 401
        assert call(base, "POST", "/heartbeat", {"server_id": 1}, token=token)[0] == 200
        # the CLI's client sends the token from the same file
        r = subprocess.run([sys.executable, "-m", "netstor.cli", "api", "--url", base, "POST",
                            "/tables/prim.ops", '{"op": "add", "match": 3, "action": "forward",'
                            ' "params": {"port": 1}}'], capture_output=True, text=True,
                           env=env, timeout=30)
        assert r.returncode == 0 and json.loads(r.stdout) == {"ok": True, "entries": 1}, r.stderr
        # a real storage agent heartbeats with the token from the same file and shows up
        from netstor.agent.server import Server
        with Server(tmp_path / "db", port=0, server_id=7, sync=False,
                    controller=base.rsplit("/api/v1", 1)[0], heartbeat_interval=0.05, token_file=token_file) as srv:
            end = time.monotonic() + 10
            while time.monotonic() < end:
                agents = call(base, "GET", "/agents")[1]
                if "7" in agents:
                    break
                time.sleep(0.05)
            assert agents["7"]["alive"] and agents["7"]["port"] == srv.address[1]
            assert srv.stats()["heartbeat_failures"] == 0
        ctl.terminate()
        assert ctl.wait(timeout=10) == 0
        assert "stopped" in ctl.stdout.read()
    finally:
        for p in (ctl, model):
            if p and p.poll() is None:
                p.kill()
                p.wait()


def test_controller_refuses_bad_config(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("tables: {nope: {}}\n")
    r = subprocess.run([sys.executable, "-m", "netstor.cli", "controller", "--config", str(cfg),
                        "--listen", "127.0.0.1:0", "--token-file", str(tmp_path / "t")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "no table 'nope'" in r.stderr
