"""The controller daemon: owns a device, applies the configuration, runs periodic work and
offers a small HTTP/JSON API to agents and operators.

    netstor controller --config CONFIG [--device TARGET] [--listen HOST:PORT]
                       [--poll-interval S] [--agent-timeout S] [--port-timeout S]

Periodic work: counter polling (values and per-second rates), port liveness (a wire port is
*up* while its receive counter moves within ``--port-timeout``; the application block sees no
link-status signal, so traffic is the evidence), agent liveness from heartbeats (an agent is
*down* after ``--agent-timeout`` without one). Changes are logged as events.

HTTP API (JSON in and out; errors are ``{"error": message}`` with status 400/404):

==========  =================================  ===============================================
GET         /api/v1/status                     device identity, uptime, ports, agents summary
GET         /api/v1/counters[?prefix=P]        values and rates of the last poll
GET         /api/v1/ports                      per wire port: up, rx packets, last activity
GET         /api/v1/agents                     agents with last heartbeat and status
POST        /api/v1/heartbeat                  agent heartbeat: {"server_id", "addr", "port",
                                               "queue_len", "served", ...}
GET         /api/v1/tables                     table names, kinds, sizes
GET         /api/v1/tables/NAME                entries and default read back from the device
POST        /api/v1/tables/NAME                {"op": "add"|"modify"|"delete", "match", ...
                                               "action", "params", "mask", "priority"}
GET         /api/v1/registers                  run-time registers
PUT         /api/v1/registers/NAME             {"value": V}
POST        /api/v1/config[?dry_run=1]         apply a configuration (JSON body, config format)
GET         /api/v1/events[?since=N]           the event log (agent/port up/down, config)
==========  =================================  ===============================================

Offloads plug in with :meth:`Controller.add_task` (periodic work) and
:meth:`Controller.add_route` (API routes), and add configuration sections with
:func:`netstor.config.register_section`.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse, parse_qs

__all__ = ["Controller", "main", "PLUGINS"]

API = "/api/v1"
#: callables ``plugin(controller)`` run when a controller starts (offloads register here)
PLUGINS = []


class ApiError(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class Controller:
    def __init__(self, device, config=None, *, poll_interval=1.0, agent_timeout=3.0,
                 port_timeout=5.0, clock=time.monotonic):
        self.dev = device
        self.config = config
        self.poll_interval = poll_interval
        self.agent_timeout = agent_timeout
        self.port_timeout = port_timeout
        self.clock = clock
        self.lock = threading.RLock()          # every device access
        self.started = clock()
        self.counters, self.rates, self._last_poll = {}, {}, None
        self.ports = {p: {"up": False, "rx_pkts": 0, "last_rx": None}
                      for p in range(device.pipeline_view.pipeline.n_ports)}
        self.agents = {}
        self.events = []
        self._seq = 0
        self.tasks = []            # (name, interval, fn, next due)
        self.routes = {}           # (method, path) -> fn(body, query) -> obj
        self._stop = threading.Event()
        self._threads = []
        self.httpd = None
        self.add_task("counters", poll_interval, self.poll_counters)
        self.add_task("agents", min(1.0, agent_timeout / 2), self.check_agents)

    # ---- plumbing for offloads -----------------------------------------------------------------
    def add_task(self, name, interval, fn):
        self.tasks.append([name, interval, fn, 0.0])

    def add_route(self, method, path, fn):
        """``fn(body: dict|None, query: dict) -> JSON-able``; ``path`` below ``/api/v1``."""
        self.routes[(method, API + path)] = fn

    def event(self, kind, **data):
        with self.lock:
            self._seq += 1
            self.events.append({"seq": self._seq, "time": time.time(), "kind": kind, **data})
            del self.events[:-500]

    # ---- periodic work -------------------------------------------------------------------------
    def poll_counters(self):
        now = self.clock()
        with self.lock:
            vals = self.dev.counters()
        if self._last_poll is not None and now > self._last_poll[0]:
            dt = now - self._last_poll[0]
            self.rates = {k: (v - self._last_poll[1].get(k, v)) / dt for k, v in vals.items()}
        self._last_poll = (now, vals)
        self.counters = vals
        for p, st in self.ports.items():
            n = vals.get(f"in{p}.pkts", 0)
            if n != st["rx_pkts"]:
                st["rx_pkts"], st["last_rx"] = n, now
            up = st["last_rx"] is not None and now - st["last_rx"] <= self.port_timeout
            if up != st["up"]:
                st["up"] = up
                self.event("port_up" if up else "port_down", port=p)

    def heartbeat(self, hb):
        if not isinstance(hb, dict) or "server_id" not in hb:
            raise ApiError(400, "a heartbeat is a JSON object with at least server_id")
        sid = hb["server_id"]
        if isinstance(sid, bool) or not isinstance(sid, int) or not 0 <= sid < 1 << 16:
            raise ApiError(400, f"server_id {sid!r} is not a 16-bit integer")
        now = self.clock()
        with self.lock:
            a = self.agents.get(sid)
            was_alive = a is not None and a["alive"]
            self.agents[sid] = {**hb, "alive": True, "last_seen": now,
                                "heartbeats": (a["heartbeats"] + 1) if a else 1}
        if not was_alive:
            self.event("agent_up", server_id=sid, addr=hb.get("addr"), port=hb.get("port"))
        return {"ok": True}

    def check_agents(self):
        now = self.clock()
        with self.lock:
            for sid, a in self.agents.items():
                if a["alive"] and now - a["last_seen"] > self.agent_timeout:
                    a["alive"] = False
                    self.event("agent_down", server_id=sid)

    def run_due_tasks(self):
        now = self.clock()
        for t in self.tasks:
            name, interval, fn, due = t
            if now >= due:
                t[3] = now + interval
                try:
                    fn()
                except Exception as e:             # periodic work must not kill the daemon
                    self.event("task_error", task=name, error=str(e))
                    traceback.print_exc(file=sys.stderr)

    # ---- API -----------------------------------------------------------------------------------
    def status(self):
        return {"device": self.dev.info(), "uptime_s": round(self.clock() - self.started, 3),
                "ports": self.ports_view(),
                "agents": {"total": len(self.agents),
                           "alive": sum(a["alive"] for a in self.agents.values())}}

    def ports_view(self):
        now = self.clock()
        return {str(p): {"up": st["up"], "rx_pkts": st["rx_pkts"],
                         "idle_s": None if st["last_rx"] is None
                         else round(now - st["last_rx"], 3)} for p, st in self.ports.items()}

    def agents_view(self):
        now = self.clock()
        with self.lock:
            return {str(sid): {**{k: v for k, v in a.items() if k != "last_seen"},
                               "age_s": round(now - a["last_seen"], 3)}
                    for sid, a in sorted(self.agents.items())}

    def table_op(self, name, body):
        if not isinstance(body, dict):
            raise ApiError(400, "body must be a JSON object")
        op = body.get("op")
        with self.lock:
            t = self.dev.table(name)
            if op == "add":
                kw = {k: body[k] for k in ("mask", "priority") if k in body}
                t.add(body.get("match"), body.get("action"), body.get("params") or {}, **kw)
            elif op == "modify":
                t.modify(body.get("match"), body.get("action"), body.get("params") or {})
            elif op == "delete":
                m = body.get("match")
                t.delete(m)
            else:
                raise ApiError(400, f"op must be add, modify or delete, not {op!r}")
            return {"ok": True, "entries": len(t.dump())}

    def handle(self, method, path, query, body):
        if (method, path) in self.routes:
            return self.routes[(method, path)](body, query)
        if method == "GET" and path == API + "/status":
            return self.status()
        if method == "GET" and path == API + "/counters":
            p = query.get("prefix", [""])[0]
            return {"counters": {k: v for k, v in self.counters.items() if k.startswith(p)},
                    "rates": {k: v for k, v in self.rates.items() if k.startswith(p)}}
        if method == "GET" and path == API + "/ports":
            return self.ports_view()
        if method == "GET" and path == API + "/agents":
            return self.agents_view()
        if method == "POST" and path == API + "/heartbeat":
            return self.heartbeat(body)
        if method == "GET" and path == API + "/events":
            since = int(query.get("since", ["0"])[0])
            with self.lock:
                return [e for e in self.events if e["seq"] > since]
        if method == "GET" and path == API + "/registers":
            with self.lock:
                return self.dev.registers()
        if method == "PUT" and path.startswith(API + "/registers/"):
            name = path[len(API + "/registers/"):]
            if not isinstance(body, dict) or "value" not in body:
                raise ApiError(400, 'body must be {"value": V}')
            with self.lock:
                self.dev.reg_write(name, body["value"])
                return {name: self.dev.reg_read(name)}
        if method == "GET" and path == API + "/tables":
            return {n: {"kind": self.dev.table(n).kind, "size": self.dev.table(n).desc.size}
                    for n in self.dev.table_names}
        if path.startswith(API + "/tables/"):
            name = path[len(API + "/tables/"):]
            if name not in self.dev.table_names:
                raise ApiError(404, f"no table {name!r}")
            if method == "GET":
                with self.lock:
                    t = self.dev.table(name)
                    return {"table": name, "entries": t.dump(), "default": t.get_default()}
            if method == "POST":
                return self.table_op(name, body)
        if method == "POST" and path == API + "/config":
            dry = query.get("dry_run", ["0"])[0] in ("1", "true")
            with self.lock:
                summary = self.dev.apply(body if isinstance(body, dict) else {}, dry_run=dry)
            if not dry:
                self.event("config_applied", **summary)
            return summary
        raise ApiError(404, f"no route {method} {path}")

    # ---- life cycle ----------------------------------------------------------------------------
    def start(self, listen=("127.0.0.1", 8470)):
        if self.config is not None:
            with self.lock:
                summary = self.dev.apply(self.config)
            self.event("config_applied", **summary)
        for plugin in PLUGINS:
            plugin(self)
        ctl = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _serve(self, method):
                u = urlparse(self.path)
                body = None
                n = int(self.headers.get("Content-Length") or 0)
                try:
                    if n:
                        try:
                            body = json.loads(self.rfile.read(n))
                        except json.JSONDecodeError as e:
                            raise ApiError(400, f"body is not JSON: {e}") from None
                    out, status = ctl.handle(method, u.path.rstrip("/"), parse_qs(u.query),
                                             body), 200
                except ApiError as e:
                    out, status = {"error": str(e)}, e.status
                except KeyError as e:
                    out, status = {"error": e.args[0] if e.args else str(e)}, 404
                except (ValueError, TypeError) as e:
                    out, status = {"error": str(e)}, 400
                data = json.dumps(out, default=str).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._serve("GET")

            def do_POST(self):
                self._serve("POST")

            def do_PUT(self):
                self._serve("PUT")

        self.httpd = ThreadingHTTPServer(listen, Handler)
        self.httpd.daemon_threads = True
        t = threading.Thread(target=self.httpd.serve_forever, name="controller-http", daemon=True)
        t.start()
        w = threading.Thread(target=self._loop, name="controller-tasks", daemon=True)
        w.start()
        self._threads = [t, w]
        return self

    @property
    def address(self):
        return self.httpd.server_address[:2]

    def _loop(self):
        while not self._stop.is_set():
            self.run_due_tasks()
            self._stop.wait(min(0.1, self.poll_interval))

    def stop(self):
        self._stop.set()
        if self.httpd:
            self.httpd.shutdown()
            self.httpd.server_close()
        for t in self._threads:
            t.join(timeout=5)
        self.dev.close()


def _listen(text):
    host, _, port = text.rpartition(":")
    try:
        return host or "127.0.0.1", int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--listen {text!r} is not HOST:PORT") from None


def main(argv=None):
    import os
    ap = argparse.ArgumentParser(prog="netstor controller",
                                 description="netstor controller daemon (HTTP/JSON API)")
    ap.add_argument("--config", help="YAML/TOML configuration applied at start")
    ap.add_argument("--device", default=os.environ.get("NETSTOR_DEVICE", "model"))
    ap.add_argument("--schema", default=os.environ.get("NETSTOR_SCHEMA"))
    ap.add_argument("--listen", type=_listen, default=("127.0.0.1", 8470),
                    help="HOST:PORT of the HTTP API (default 127.0.0.1:8470; port 0 = any)")
    ap.add_argument("--poll-interval", type=float, default=1.0)
    ap.add_argument("--agent-timeout", type=float, default=3.0)
    ap.add_argument("--port-timeout", type=float, default=5.0)
    args = ap.parse_args(argv)
    from netstor.api import Device
    from netstor.config import load_config, ConfigError
    try:
        cfg = load_config(args.config) if args.config else None
        dev = Device.open(args.device, schema=args.schema)
        ctl = Controller(dev, cfg, poll_interval=args.poll_interval,
                         agent_timeout=args.agent_timeout, port_timeout=args.port_timeout)
        ctl.start(args.listen)
    except (ConfigError, KeyError, ValueError, OSError, RuntimeError) as e:
        print(f"netstor controller: error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 1
    host, port = ctl.address
    print(f"netstor controller on {args.device} listening on http://{host}:{port}{API}",
          flush=True)
    done = threading.Event()
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda *_: done.set())
    done.wait()
    ctl.stop()
    print("netstor controller stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
