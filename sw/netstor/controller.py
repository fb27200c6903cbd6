"""The controller daemon: owns a device, applies the configuration, runs periodic work and
offers a small HTTP/JSON API to agents and operators.

    netstor controller --config CONFIG [--device TARGET] [--listen HOST:PORT]
                       [--token-file PATH] [--tls-cert PEM --tls-key PEM] [--allow-host NAME]
                       [--poll-interval S] [--agent-timeout S] [--port-timeout S]
                       [--max-agents N] [--workers N] [--max-connections N] [--timeout S]
    netstor api [--url URL] [--token-file PATH] [--cafile PEM] METHOD PATH [JSON|@FILE|-]

Periodic work: counter polling (values and per-second rates), port liveness (a wire port is
*up* while its receive counter moves within ``--port-timeout``; the application block sees no
link-status signal, so traffic is the evidence), agent liveness from heartbeats (an agent is
*down* after ``--agent-timeout`` without one). Changes are logged as events.

HTTP API (JSON in and out; every error, whatever the request, is ``{"error": message}``):

==========  =================================  ===============================================
GET         /api/v1/status                     device identity, uptime, ports, agents summary
GET         /api/v1/counters[?prefix=P]        values and rates of the last poll
GET         /api/v1/ports                      per wire port: up, rx packets, last activity
GET         /api/v1/agents                     agents with last heartbeat and status
POST        /api/v1/heartbeat                  agent heartbeat (:data:`HEARTBEAT_FIELDS`)
GET         /api/v1/tables                     table names, kinds, sizes
GET         /api/v1/tables/NAME                entries and default read back from the device
POST        /api/v1/tables/NAME                {"op": "add"|"modify"|"delete", "match", ...
                                               "action", "params", "mask", "priority"}
GET         /api/v1/registers                  run-time registers
PUT         /api/v1/registers/NAME             {"value": V}
POST        /api/v1/config[?dry_run=1]         apply a configuration (JSON body, config format)
GET         /api/v1/events[?since=N]           the event log (agent/port up/down, config)
==========  =================================  ===============================================

Trust (see docs/host-software.md): every write (POST, PUT, DELETE -- heartbeats too) needs
``Authorization: Bearer TOKEN``, the token of :mod:`netstor.apitoken` (made on the first start,
a 0600 file); reads need it too unless the API is bound to a loopback address. A request whose
``Host`` names a host other than an IP literal, ``localhost``, the bound name or an
``--allow-host`` name (DNS rebinding), whose ``Origin`` is not the API's own, or whose
``Sec-Fetch-Site`` says another site, is refused (403); writes must be ``application/json``
(415). Limits: bodies of at most :data:`MAX_BODY` bytes (heartbeats
:data:`HEARTBEAT_MAX_BODY`; 413 is answered before reading the body), JSON nested at most
:data:`MAX_DEPTH` deep, one request per connection that must arrive whole within ``--timeout``
seconds, at most ``--max-connections`` open connections (503 beyond), a fixed pool of
``--workers`` threads that a connection takes only once its first bytes have arrived (idle
connections hold no thread), at most ``--max-agents`` agents.

Offloads plug in with :meth:`Controller.add_task` (periodic work) and
:meth:`Controller.add_route` (API routes), and add configuration sections with
:func:`netstor.config.register_section`.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import math
import os
import re
import selectors
import signal
import socket
import ssl
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit, parse_qs

from netstor.apitoken import (TokenError, default_token_file, load_or_create_token, read_token,
                              token_matches)
from netstor.driver.tables import TableFullError

__all__ = ["Controller", "ApiServer", "ApiError", "main", "client_main", "request", "PLUGINS",
           "MAX_BODY", "MAX_DEPTH", "HEARTBEAT_MAX_BODY", "HEARTBEAT_FIELDS"]

log = logging.getLogger("netstor.controller")

API = "/api/v1"
DEFAULT_PORT = 8470
#: callables ``plugin(controller)`` run when a controller starts (offloads register here)
PLUGINS = []

#: the largest request body (bytes); larger ones get 413 without being read
MAX_BODY = 1 << 20
#: the deepest JSON nesting accepted in a body (a configuration needs 5)
MAX_DEPTH = 32
#: the largest heartbeat body (bytes)
HEARTBEAT_MAX_BODY = 8192
#: methods that change state: they need the token and an ``application/json`` body
WRITE_METHODS = ("POST", "PUT", "DELETE")
METHODS = ("GET",) + WRITE_METHODS


class ApiError(Exception):
    def __init__(self, status, message, headers=()):
        super().__init__(message)
        self.status = status
        self.headers = tuple(headers)


# ---- heartbeats -------------------------------------------------------------------------------

_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,48}\Z")
_HOSTNAME = re.compile(r"[A-Za-z0-9.\-]{1,253}\Z")
_U64 = (1 << 64) - 1
#: counters an agent may report (the dict ``counters`` of a heartbeat)
MAX_HB_COUNTERS = 64


def _hb_uint(bits):
    top = (1 << bits) - 1

    def check(name, v):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= top:
            raise ApiError(400, f"heartbeat {name} {v!r:.40} is not an integer in 0..{top}")
        return v
    return check


def _hb_seconds(name, v):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ApiError(400, f"heartbeat {name} {v!r:.40} is not a number of seconds >= 0")
    return v


def _hb_addr(name, v):
    if not isinstance(v, str):
        raise ApiError(400, f"heartbeat {name} {v!r:.40} is not an address (text)")
    try:
        return str(ipaddress.ip_address(v))
    except ValueError:
        if _HOSTNAME.match(v):
            return v
    raise ApiError(400, f"heartbeat {name} {v!r:.40} is not an IP address or host name")


def _hb_counters(name, v):
    if not isinstance(v, dict):
        raise ApiError(400, f"heartbeat {name} is not an object of counters")
    if len(v) > MAX_HB_COUNTERS:
        raise ApiError(400, f"heartbeat {name} has {len(v)} entries (at most "
                            f"{MAX_HB_COUNTERS})")
    out = {}
    for k, n in v.items():
        if not _NAME.match(k):
            raise ApiError(400, f"heartbeat {name} key {k!r:.60} is not a counter name "
                                "(1..48 of A-Z a-z 0-9 _ . -)")
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= _U64:
            raise ApiError(400, f"heartbeat {name}.{k} {n!r:.40} is not a 64-bit count")
        out[k] = n
    return out


#: the fields a heartbeat may carry and their checks; others are refused (400)
HEARTBEAT_FIELDS = {
    "server_id": _hb_uint(16), "addr": _hb_addr, "port": _hb_uint(16),
    "queue_len": _hb_uint(64), "served": _hb_uint(64), "errors": _hb_uint(64),
    "uptime_s": _hb_seconds, "counters": _hb_counters,
}


def _positive(name, v, minimum=0.0):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
            or v <= 0 or v < minimum:
        floor = f">= {minimum:g}" if minimum else "> 0"
        raise ValueError(f"{name} must be a number of seconds {floor}, not {v!r}")
    return float(v)


class Controller:
    def __init__(self, device, config=None, *, poll_interval=1.0, agent_timeout=3.0,
                 port_timeout=5.0, clock=time.monotonic, token=None, max_agents=256):
        self.dev = device
        self.config = config
        self.poll_interval = _positive("poll_interval", poll_interval, 0.01)
        self.agent_timeout = _positive("agent_timeout", agent_timeout)
        self.port_timeout = _positive("port_timeout", port_timeout)
        if isinstance(max_agents, bool) or not isinstance(max_agents, int) \
                or not 1 <= max_agents <= 1 << 16:
            raise ValueError(f"max_agents must be in 1..65536, not {max_agents!r}")
        self.max_agents = max_agents
        #: the API token; without one given, a random one only this object knows (no one
        #: else can write)
        self.token = token or __import__("secrets").token_urlsafe(32)
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
        self.add_task("counters", self.poll_interval, self.poll_counters)
        self.add_task("agents", min(1.0, self.agent_timeout / 2), self.check_agents)

    # ---- plumbing for offloads -----------------------------------------------------------------
    def add_task(self, name, interval, fn):
        self.tasks.append([name, _positive(f"task {name} interval", interval, 0.01), fn, 0.0])

    def add_route(self, method, path, fn):
        """``fn(body: dict|None, query: dict) -> JSON-able``; ``path`` below ``/api/v1``.
        Routes of a write method need the token like the built-in ones."""
        if method not in METHODS:
            raise ValueError(f"method {method!r} is not one of {', '.join(METHODS)}")
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
        unknown = sorted(set(hb) - set(HEARTBEAT_FIELDS))
        if unknown:
            raise ApiError(400, f"heartbeat field {unknown[0]!r:.60} is not known (known: "
                                f"{', '.join(HEARTBEAT_FIELDS)})")
        hb = {k: HEARTBEAT_FIELDS[k](k, v) for k, v in hb.items()}
        sid = hb["server_id"]
        now = self.clock()
        evicted = None
        with self.lock:
            a = self.agents.get(sid)
            if a is None and len(self.agents) >= self.max_agents:
                dead = [(b["last_seen"], s) for s, b in self.agents.items() if not b["alive"]]
                if not dead:
                    raise ApiError(503, f"agent table full: {len(self.agents)} live agents "
                                        f"(--max-agents {self.max_agents})")
                evicted = min(dead)[1]             # forget the agent dead the longest
                del self.agents[evicted]
            was_alive = a is not None and a["alive"]
            self.agents[sid] = {**hb, "alive": True, "last_seen": now,
                                "heartbeats": (a["heartbeats"] + 1) if a else 1}
        if evicted is not None:
            self.event("agent_forgotten", server_id=evicted)
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
        with self.lock:
            agents = {"total": len(self.agents),
                      "alive": sum(a["alive"] for a in self.agents.values())}
        return {"device": self.dev.info(), "uptime_s": round(self.clock() - self.started, 3),
                "ports": self.ports_view(), "agents": agents}

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
                if "match" not in body:
                    raise ApiError(400, "delete needs a match")
                t.delete(body["match"])
            else:
                raise ApiError(400, f"op must be add, modify or delete, not {op!r:.40}")
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
            text = query.get("since", ["0"])[0]
            if not re.fullmatch(r"[0-9]{1,18}", text):
                raise ApiError(400, f"since={text!r:.40} is not a sequence number")
            since = int(text)
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
                raise ApiError(404, f"no table {name!r:.80}")
            if method == "GET":
                with self.lock:
                    t = self.dev.table(name)
                    return {"table": name, "entries": t.dump(), "default": t.get_default()}
            if method == "POST":
                return self.table_op(name, body)
        if method == "POST" and path == API + "/config":
            dry = query.get("dry_run", ["0"])[0] in ("1", "true")
            if not isinstance(body, dict):
                raise ApiError(400, f"a configuration is a JSON object, not "
                                    f"{type(body).__name__}")
            with self.lock:
                summary = self.dev.apply(body, dry_run=dry)
            if not dry:
                self.event("config_applied", **summary)
            return summary
        raise ApiError(404, f"no route {method} {path:.200}")

    # ---- life cycle ----------------------------------------------------------------------------
    def start(self, listen=("127.0.0.1", DEFAULT_PORT), *, ssl_context=None, allow_hosts=(),
              workers=8, max_connections=64, timeout=10.0):
        """Apply the configuration, run the plugins, serve the API on ``listen`` (see
        :class:`ApiServer` for the other arguments) and start the periodic work."""
        if self.config is not None:
            with self.lock:
                summary = self.dev.apply(self.config)
            self.event("config_applied", **summary)
        for plugin in PLUGINS:
            plugin(self)
        self.httpd = ApiServer(self, listen, ssl_context=ssl_context, allow_hosts=allow_hosts,
                               workers=workers, max_connections=max_connections,
                               timeout=timeout)
        t = threading.Thread(target=self.httpd.serve_forever, name="controller-http",
                             daemon=True)
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
        for t in self._threads:
            t.join(timeout=5)
        self.dev.close()


# ---- the HTTP server --------------------------------------------------------------------------

def _is_ip(host):
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
        return True
    except ValueError:
        return False


def _split_hostport(value):
    """``host[:port]`` / ``[v6][:port]`` -> ``(host lower-cased, port or None)``."""
    value = value.strip()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            raise ValueError(value)
        host, rest = value[1:end], value[end + 1:]
        if rest and not rest.startswith(":"):
            raise ValueError(value)
        port = rest[1:] if rest else None
    elif value.count(":") == 1:
        host, _, port = value.partition(":")
    elif ":" in value:
        host, port = value, None              # a bare IPv6 address
    else:
        host, port = value, None
    if port is not None and not (port.isascii() and port.isdigit() and len(port) <= 5
                                 and int(port) <= 65535):
        raise ValueError(value)
    if not host:
        raise ValueError(value)
    return host.lower().rstrip("."), None if port is None else int(port)


def _json_depth_ok(obj, limit):
    stack = [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, (dict, list)):
            if d > limit:
                return False
            stack.extend((v, d + 1) for v in (o.values() if isinstance(o, dict) else o))
    return True


def _no_constant(name):
    raise ValueError(f"{name} is not a JSON number")


def parse_json_body(raw, max_depth=MAX_DEPTH):
    """A request body as JSON: UTF-8, no NaN/Infinity, nested at most ``max_depth`` deep
    (the parser's own recursion limit stops a deeper one before it costs anything)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ApiError(400, f"body is not UTF-8 text ({e.reason} at byte {e.start})") from None
    try:
        obj = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise ApiError(400, f"body is JSON nested deeper than {max_depth}") from None
    except json.JSONDecodeError as e:
        raise ApiError(400, f"body is not JSON: {e}") from None
    except ValueError as e:                    # NaN, a number of more than 4300 digits
        raise ApiError(400, f"body is not acceptable JSON: {e}") from None
    if not _json_depth_ok(obj, max_depth):
        raise ApiError(400, f"body is JSON nested deeper than {max_depth}")
    return obj


class _ClientGone(Exception):
    pass


class _Conn:
    """One accepted connection: its socket and the time it must be done by (None while the
    device works on its request)."""
    __slots__ = ("sock", "addr", "deadline", "lock", "closed", "busy")

    def __init__(self, sock, addr, deadline):
        self.sock, self.addr, self.deadline = sock, addr, deadline
        self.lock = threading.Lock()
        self.closed = self.busy = False

    def kill(self):
        """Break a worker's blocking read or write (the time-out ran out)."""
        with self.lock:
            if not self.closed:
                try:
                    self.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class _Handler(BaseHTTPRequestHandler):
    """One request per connection (HTTP/1.0); every answer, errors included, is JSON."""
    server_version = "netstor-controller"
    sys_version = ""
    protocol_version = "HTTP/1.0"

    def __init__(self, conn, api):
        self.conn = conn
        self.pending = False                   # a body left unread (drain before closing)
        super().__init__(conn.sock, conn.addr, api)

    def setup(self):
        self.timeout = self.server.timeout
        super().setup()

    def log_message(self, *a):
        pass

    def version_string(self):
        return self.server_version

    def handle(self):
        self.handle_one_request()

    def handle_one_request(self):
        self.requestline, self.request_version, self.command, self.path = \
            "", "HTTP/1.0", "", ""
        self.close_connection = True
        try:
            self.raw_requestline = self.rfile.readline(65537)
            if len(self.raw_requestline) > 65536:
                self.send_error(414, "request line longer than 65536 bytes")
                return
            if not self.raw_requestline:
                return                         # closed without a request
            if not self.raw_requestline.strip():
                self.send_error(400, "empty request line")
                return
            if not self.parse_request():       # it has answered (send_error below)
                return
            if self.request_version == "HTTP/0.9":
                self.send_error(400, "HTTP/0.9 requests are not served")
                return
            self._serve()
        except TimeoutError:
            self._try_error(408, f"request not received whole within {self.server.timeout:g} s")
        except (_ClientGone, ConnectionError, ssl.SSLError):
            pass
        except OSError as e:
            log.debug("connection from %s: %s", self.client_address, e)
        except Exception as e:                 # a bug of ours: answered, logged in one line
            log.error("request %r: %s: %s", self.requestline[:200], type(e).__name__, e)
            self._try_error(500, f"internal error ({type(e).__name__})")

    def _try_error(self, status, message):
        try:
            self.send_error(status, message)
        except (OSError, ValueError):
            pass

    def send_error(self, code, message=None, explain=None):
        if self.request_version in ("HTTP/0.9", "", None):
            self.request_version = "HTTP/1.0"
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "error"
        self._reply(code, {"error": message or phrase})

    def _reply(self, status, obj, headers=()):
        try:
            data = json.dumps(obj, default=str).encode()
        except (ValueError, TypeError, RecursionError) as e:
            status, data = 500, json.dumps({"error": f"answer is not JSON: {e}"}).encode()
        self.conn.deadline = time.monotonic() + self.server.timeout
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Connection", "close")
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _serve(self):
        method, api = self.command, self.server
        ctl = api.ctl
        headers = ()
        h = self.headers
        self.pending = h.get("Transfer-Encoding") is not None or \
            (h.get("Content-Length") or "0").strip() not in ("", "0")
        try:
            if method not in METHODS:
                raise ApiError(405, f"method {method:.20} is not served",
                               headers=[("Allow", ", ".join(METHODS))])
            api.check_origin(h)
            write = method in WRITE_METHODS
            if (write or not api.reads_open) and not token_matches(h.get("Authorization"),
                                                                   ctl.token):
                raise ApiError(401, "this request needs the API token (Authorization: Bearer "
                                    "<the controller's token file>)",
                               headers=[("WWW-Authenticate", 'Bearer realm="netstor"')])
            u = urlsplit(self.path)
            path = u.path.rstrip("/")
            query = parse_qs(u.query, max_num_fields=16)
            body = self._body(method, write, path)
            self.conn.deadline = None          # the device's time, not the client's
            out, status = ctl.handle(method, path, query, body), 200
            api.stats["requests"] += 1
        except ApiError as e:
            out, status, headers = {"error": str(e)}, e.status, e.headers
        except TableFullError as e:
            out, status = {"error": str(e)}, 409
        except KeyError as e:
            out, status = {"error": str(e.args[0] if e.args else e)}, 404
        except RecursionError:
            out, status = {"error": "too deeply nested"}, 400
        except (ValueError, TypeError, OverflowError) as e:
            out, status = {"error": str(e)}, 400
        except (_ClientGone, TimeoutError):
            raise
        except Exception as e:                 # the device or a plugin failed: still an answer
            log.error("%s %s: %s: %s", method, self.path[:200], type(e).__name__, e)
            out, status = {"error": f"{type(e).__name__}: {e}"}, 500
        self._reply(status, out, headers)

    def _body(self, method, write, path):
        h = self.headers
        if h.get("Transfer-Encoding") is not None:
            raise ApiError(411, "Transfer-Encoding is not accepted: send the body with a "
                                "Content-Length")
        lengths = h.get_all("Content-Length") or []
        if len(lengths) > 1:
            raise ApiError(400, "more than one Content-Length")
        if not lengths:
            if write:
                raise ApiError(411, f"{method} needs a JSON body with a Content-Length")
            return None
        text = lengths[0].strip()
        if not (text.isascii() and text.isdigit() and len(text) <= 15):
            raise ApiError(400, f"Content-Length {text!r:.40} is not a number of bytes")
        n = int(text)
        if not write:
            if n:
                raise ApiError(400, f"{method} takes no body")
            return None
        ctype = h.get_content_type()
        charset = (h.get_param("charset") or "utf-8")
        if ctype != "application/json" or str(charset).lower() not in ("utf-8", "utf8"):
            raise ApiError(415, f"a write must be Content-Type: application/json (UTF-8), not "
                                f"{h.get('Content-Type')!r:.60}")
        limit = HEARTBEAT_MAX_BODY if path == API + "/heartbeat" else self.server.max_body
        if n > limit:
            raise ApiError(413, f"body of {n} bytes is over the limit of {limit} bytes")
        if n == 0:
            raise ApiError(400, f"{method} needs a JSON body (Content-Length is 0)")
        try:
            raw = self.rfile.read(n)
        except TimeoutError:
            raise ApiError(408, f"body not received whole within {self.server.timeout:g} s") \
                from None
        except OSError:
            raise _ClientGone() from None
        if len(raw) < n:                       # the client half-closed early: still answered
            raise ApiError(400, f"body ended after {len(raw)} of {n} bytes")
        self.pending = False
        return parse_json_body(raw)


class ApiServer:
    """The controller's HTTP server: one thread waits on every connection with a selector and
    hands a connection to a fixed pool of ``workers`` threads only once its first bytes have
    arrived, so idle connections hold no thread; a connection must deliver its request within
    ``timeout`` seconds of being accepted (its socket is shut down otherwise), at most
    ``max_connections`` are open (more get 503 at once). ``ssl_context``: TLS."""

    def __init__(self, ctl, listen, *, ssl_context=None, allow_hosts=(), workers=8,
                 max_connections=64, timeout=10.0, max_body=MAX_BODY):
        if not 1 <= workers <= 256:
            raise ValueError(f"workers must be in 1..256, not {workers!r}")
        if not 1 <= max_connections <= 65535:
            raise ValueError(f"max_connections must be in 1..65535, not {max_connections!r}")
        self.timeout = _positive("timeout", timeout, 0.05)
        self.ctl, self.max_body = ctl, max_body
        self.ssl_context = ssl_context
        self.max_connections = max_connections
        host, port = listen
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"port {port!r} is not in 0..65535")
        family, _, _, _, addr = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                   flags=socket.AI_PASSIVE)[0]
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(addr)
            self.socket.listen(128)
            self.socket.setblocking(False)
        except OSError:
            self.socket.close()
            raise
        self.server_address = self.socket.getsockname()
        bound = ipaddress.ip_address(self.server_address[0].split("%", 1)[0])
        self.wildcard = bound.is_unspecified
        self.loopback = bound.is_loopback
        #: reads without the token only on a loopback address
        self.reads_open = self.loopback
        names = {"localhost"}
        if host and not _is_ip(host):
            names.add(host.lower().rstrip("."))
        if not self.loopback:
            names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
        names |= {h.lower().rstrip(".") for h in allow_hosts}
        self.allowed_names = frozenset(names)
        self.scheme = "https" if ssl_context else "http"
        self.stats = {"accepted": 0, "refused_busy": 0, "timed_out": 0, "requests": 0}
        self.conns = set()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.socket, selectors.EVENT_READ, None)
        self.sel.register(self._wake_r, selectors.EVENT_READ, None)
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="controller-api")

    # -- checks ---------------------------------------------------------------------------------
    def check_origin(self, headers):
        """Refuse (403) requests that a web page of another site made (DNS rebinding: a Host
        that is not ours; CSRF: an Origin not ours, Sec-Fetch-Site cross-site)."""
        hosts = headers.get_all("Host") or []
        if len(hosts) > 1:
            raise ApiError(400, "more than one Host header")
        host = port = None
        if hosts:
            try:
                host, port = _split_hostport(hosts[0])
            except ValueError:
                raise ApiError(400, f"Host {hosts[0]!r:.80} is not HOST[:PORT]") from None
            if not (_is_ip(host) or host in self.allowed_names):
                raise ApiError(403, f"Host {host!r:.80} is not a name of this controller (an IP "
                                    "address, localhost, the --listen name or --allow-host "
                                    "NAME): refused")
        site = (headers.get("Sec-Fetch-Site") or "").strip().lower()
        if site in ("cross-site", "same-site"):
            raise ApiError(403, f"a {site} request from a web page is refused")
        origin = headers.get("Origin")
        if origin is not None:
            default = 443 if self.scheme == "https" else 80
            try:
                u = urlsplit(origin.strip())
                ok = (u.scheme == self.scheme and host is not None
                      and (u.hostname or "").rstrip(".") == host
                      and (u.port or default) == (port or default))
            except ValueError:
                ok = False
            if not ok:
                raise ApiError(403, f"cross-origin request (Origin {origin!r:.80}) refused")

    # -- the loop -------------------------------------------------------------------------------
    def serve_forever(self):
        try:
            while not self._stopped.is_set():
                for key, _ in self.sel.select(timeout=0.1):
                    if key.fileobj is self.socket:
                        self._accept()
                    elif key.fileobj is self._wake_r:
                        try:
                            self._wake_r.recv(64)
                        except OSError:
                            pass
                    else:
                        conn = key.data
                        self.sel.unregister(conn.sock)
                        conn.busy = True
                        self.pool.submit(self._work, conn)
                self._expire()
        finally:
            self._close_all()

    def _accept(self):
        for _ in range(64):
            try:
                sock, addr = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:                   # out of file descriptors: back off
                log.warning("accept: %s", e)
                self._stopped.wait(0.05)
                return
            self.stats["accepted"] += 1
            with self._lock:
                full = len(self.conns) >= self.max_connections
            if full:
                self.stats["refused_busy"] += 1
                self._refuse(sock, 503, f"too many connections (at most "
                                        f"{self.max_connections})", plain=True)
                continue
            sock.setblocking(False)
            if self.ssl_context is not None:
                try:
                    sock = self.ssl_context.wrap_socket(sock, server_side=True,
                                                        do_handshake_on_connect=False)
                except (OSError, ValueError):
                    sock.close()
                    continue
            conn = _Conn(sock, addr, time.monotonic() + self.timeout)
            with self._lock:
                self.conns.add(conn)
            self.sel.register(sock, selectors.EVENT_READ, conn)

    def _refuse(self, sock, status, message, plain):
        """Answer at once without a worker (best effort, never blocks) and close."""
        try:
            sock.setblocking(False)
            try:
                sock.recv(65536)                   # what the client sent already: no reset
            except OSError:
                pass
            if plain:
                data = json.dumps({"error": message}).encode()
                phrase = HTTPStatus(status).phrase
                sock.send(f"HTTP/1.0 {status} {phrase}\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
                          + data)
        except OSError:
            pass
        finally:
            sock.close()

    def _expire(self):
        now = time.monotonic()
        with self._lock:
            late = [c for c in self.conns if c.deadline is not None and now > c.deadline]
        for c in late:
            self.stats["timed_out"] += 1
            if c.busy:
                c.deadline = None
                c.kill()
            else:                                  # never sent a byte: no worker has it
                with self._lock:
                    self.conns.discard(c)
                try:
                    self.sel.unregister(c.sock)
                except (KeyError, ValueError):
                    pass
                c.closed = True
                self._refuse(c.sock, 408, f"no request within {self.timeout:g} s",
                             plain=self.ssl_context is None)

    def _work(self, conn):
        drain = False
        try:
            conn.sock.settimeout(self.timeout)
            if self.ssl_context is not None:
                conn.sock.do_handshake()
            drain = _Handler(conn, self).pending
        except Exception as e:                     # handshake failures, a client gone
            log.debug("connection from %s: %s: %s", conn.addr, type(e).__name__, e)
        finally:
            self._finish(conn, drain)

    def _finish(self, conn, drain):
        """Close; after an answer given without reading the body, read (and drop) up to
        ``max_body`` more bytes for at most a second first, so the client sees the answer
        instead of a connection reset."""
        conn.deadline = None
        with self._lock:
            self.conns.discard(conn)
        sock = conn.sock
        try:
            if drain:
                sock.shutdown(socket.SHUT_WR)
                end, got = time.monotonic() + 1.0, 0
                while got < self.max_body:
                    left = end - time.monotonic()
                    if left <= 0:
                        break
                    sock.settimeout(left)
                    data = sock.recv(65536)
                    if not data:
                        break
                    got += len(data)
        except (OSError, ValueError):
            pass
        finally:
            with conn.lock:
                conn.closed = True
                sock.close()

    def _close_all(self):
        with self._lock:
            conns = list(self.conns)
        for c in conns:
            if c.busy:
                c.kill()
            else:
                with c.lock:
                    c.closed = True
                    c.sock.close()
        self.pool.shutdown(wait=False, cancel_futures=True)
        for s in (self.socket, self._wake_r, self._wake_w):
            s.close()
        self.sel.close()

    def shutdown(self):
        self._stopped.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass


# ---- command line -----------------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    """Usage errors in one line (``PROG: error: ...``), exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _listen(text):
    host, port = text, None
    if text.startswith("["):
        end = text.find("]")
        if end > 0 and text[end + 1:end + 2] == ":":
            host, port = text[1:end], text[end + 2:]
    elif ":" in text:
        host, _, port = text.rpartition(":")
    if port is None or not (port.isascii() and port.isdigit() and len(port) <= 5):
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    if not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} of {text!r} is not in 0..65535")
    return host or "127.0.0.1", int(port)


def _seconds(minimum=0.0):
    def parse(text):
        try:
            v = float(text)
        except ValueError:
            v = None
        if v is None or not math.isfinite(v) or v <= 0 or v < minimum:
            floor = f">= {minimum:g}" if minimum else "> 0"
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds {floor}")
        return v
    return parse


def _int_in(lo, hi):
    def parse(text):
        try:
            v = int(text, 10)
        except ValueError:
            v = None
        if v is None or not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer in {lo}..{hi}")
        return v
    return parse


def _tls_context(cert, key):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    return ctx


def _url_host(host):
    return f"[{host}]" if ":" in host else host


def build_parser():
    ap = _Parser(prog="netstor controller",
                 description="netstor controller daemon (HTTP/JSON API)")
    ap.add_argument("--config", help="YAML/TOML configuration applied at start")
    ap.add_argument("--device", default=os.environ.get("NETSTOR_DEVICE", "model"))
    ap.add_argument("--schema", default=os.environ.get("NETSTOR_SCHEMA"))
    ap.add_argument("--listen", type=_listen, default=("127.0.0.1", DEFAULT_PORT),
                    help=f"HOST:PORT of the HTTP API (default 127.0.0.1:{DEFAULT_PORT}; port 0 "
                         "= any; [::1]:PORT for IPv6). Reads need no token only on loopback")
    ap.add_argument("--token-file", metavar="PATH",
                    help=f"the API token, made (0600) on first start (default "
                         f"$NETSTOR_TOKEN_FILE, else {default_token_file()})")
    ap.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate chain")
    ap.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert")
    ap.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                    help="a host name clients may use in Host (besides IP addresses, "
                         "localhost and the --listen name); repeatable")
    ap.add_argument("--poll-interval", type=_seconds(0.01), default=1.0, metavar="S",
                    help="seconds between counter polls (>= 0.01; default 1)")
    ap.add_argument("--agent-timeout", type=_seconds(), default=3.0, metavar="S")
    ap.add_argument("--port-timeout", type=_seconds(), default=5.0, metavar="S")
    ap.add_argument("--max-agents", type=_int_in(1, 1 << 16), default=256, metavar="N",
                    help="agents remembered at most (default 256)")
    ap.add_argument("--workers", type=_int_in(1, 256), default=8, metavar="N",
                    help="threads serving requests (default 8)")
    ap.add_argument("--max-connections", type=_int_in(1, 65535), default=64, metavar="N",
                    help="open connections at most, more get 503 (default 64)")
    ap.add_argument("--timeout", type=_seconds(0.05), default=10.0, metavar="S",
                    help="a request must arrive whole within S seconds (default 10)")
    return ap


def main(argv=None):
    ap = build_parser()
    args = ap.parse_args(argv)
    if (args.tls_cert is None) != (args.tls_key is None):
        ap.error("--tls-cert and --tls-key go together")
    from netstor.api import Device
    from netstor.config import load_config, ConfigError
    try:
        token, created = load_or_create_token(args.token_file)
        if created:
            print(f"netstor controller: made a new API token in "
                  f"{args.token_file or default_token_file()} (mode 0600)", file=sys.stderr)
        ctx = _tls_context(args.tls_cert, args.tls_key) if args.tls_cert else None
        cfg = load_config(args.config) if args.config else None
        dev = Device.open(args.device, schema=args.schema)
        ctl = Controller(dev, cfg, poll_interval=args.poll_interval,
                         agent_timeout=args.agent_timeout, port_timeout=args.port_timeout,
                         token=token, max_agents=args.max_agents)
        ctl.start(args.listen, ssl_context=ctx, allow_hosts=args.allow_host,
                  workers=args.workers, max_connections=args.max_connections,
                  timeout=args.timeout)
    except (ConfigError, TokenError, TableFullError, KeyError, ValueError, OSError,
            RuntimeError) as e:
        print(f"netstor controller: error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 1
    host, port = ctl.address
    srv = ctl.httpd
    if srv.wildcard:
        bar = "!" * 78
        print(f"{bar}\nWARNING: netstor controller listens on EVERY interface "
              f"({_url_host(host)}:{port}).\nWARNING: anyone who can reach this port can try "
              f"the API; reads and writes need the token.\n"
              + ("" if ctx else "WARNING: without --tls-cert/--tls-key the token crosses "
                                "the network in clear text.\n")
              + f"WARNING: bind 127.0.0.1 (the default) unless other hosts must reach it.\n"
              f"{bar}", file=sys.stderr, flush=True)
    elif not srv.loopback:
        print(f"WARNING: netstor controller listens on {host}, not loopback: reads and writes "
              "need the token" + ("" if ctx else "; without TLS it crosses the network in "
                                              "clear text"), file=sys.stderr, flush=True)
    done = threading.Event()
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda *_: done.set())
    print(f"netstor controller on {args.device} listening on "
          f"{srv.scheme}://{_url_host(host)}:{port}{API}", flush=True)
    done.wait()
    ctl.stop()
    print("netstor controller stopped", flush=True)
    return 0


# ---- the client side: `netstor api` -----------------------------------------------------------

def request(url, method, path, body=None, *, token=None, token_file=None, timeout=10.0,
            cafile=None):
    """One API request: ``(status, JSON answer)``. ``url`` is the controller's base
    (``http://127.0.0.1:8470``, ``/api/v1`` optional), ``path`` below ``/api/v1``. The token:
    ``token``, else the token file (``token_file`` or the default); none if there is no file.
    Proxies from the environment are not used."""
    import urllib.error
    import urllib.request
    if token is None:
        token = read_token(token_file)
    base = url.rstrip("/")
    if base.endswith(API):
        base = base[:-len(API)]
    full = base + (path if path.startswith(API + "/") else API + "/" + path.lstrip("/"))
    data = None if body is None else json.dumps(body).encode()
    headers = {"Accept": "application/json"}
    if data is not None:
        headers["Content-Type"] = "application/json"
    if token:
        headers["Authorization"] = f"Bearer {token}"
    handlers = [urllib.request.ProxyHandler({})]
    if full.startswith("https:"):
        handlers.append(urllib.request.HTTPSHandler(
            context=ssl.create_default_context(cafile=cafile)))
    opener = urllib.request.build_opener(*handlers)
    req = urllib.request.Request(full, data=data, method=method, headers=headers)
    try:
        with opener.open(req, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, {"error": raw[:200].decode("utf-8", "replace")}


def client_main(argv=None):
    """``netstor api METHOD PATH [BODY]``: a request to a running controller with the token
    from its token file; prints the JSON answer, exit 1 (one line on stderr) on an error."""
    ap = _Parser(prog="netstor api", description="a request to the controller's HTTP API")
    ap.add_argument("--url", default=os.environ.get("NETSTOR_CONTROLLER",
                                                     f"http://127.0.0.1:{DEFAULT_PORT}"),
                    help=f"the controller (default $NETSTOR_CONTROLLER or "
                         f"http://127.0.0.1:{DEFAULT_PORT})")
    ap.add_argument("--token-file", metavar="PATH",
                    help=f"default $NETSTOR_TOKEN_FILE, else {default_token_file()}")
    ap.add_argument("--cafile", metavar="PEM", help="CA certificate(s) for an https URL")
    ap.add_argument("--timeout", type=_seconds(), default=10.0, metavar="S")
    ap.add_argument("method", type=str.upper, choices=METHODS)
    ap.add_argument("path", help="below /api/v1, e.g. /status or /tables/l3.routes")
    ap.add_argument("body", nargs="?", help="JSON text, @FILE or - (standard input)")
    args = ap.parse_args(argv)
    import urllib.error
    try:
        body = None
        if args.body is not None:
            text = args.body
            if text == "-":
                text = sys.stdin.read()
            elif text.startswith("@"):
                with open(text[1:], encoding="utf-8") as f:
                    text = f.read()
            try:
                body = json.loads(text)
            except ValueError as e:
                raise ValueError(f"the body is not JSON: {e}") from None
        status, out = request(args.url, args.method, args.path, body,
                              token_file=args.token_file, timeout=args.timeout,
                              cafile=args.cafile)
    except urllib.error.URLError as e:
        print(f"netstor api: error: {args.url}: {e.reason}", file=sys.stderr)
        return 1
    except (TokenError, ValueError, OSError) as e:
        print(f"netstor api: error: {e}", file=sys.stderr)
        return 1
    if status >= 400:
        msg = out.get("error") if isinstance(out, dict) else out
        print(f"netstor api: error: HTTP {status}: {msg}", file=sys.stderr)
        return 1
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
