"""``netstor-server``: a UDP storage server in front of LMDB.

Run ``python -m netstor.agent.server --db DIR [options]`` (or ``netstor-server``). When ready
it prints exactly one line ``netstor-server <id> listening on <addr>:<port>`` to stdout
(``port`` is the real one, so ``--port 0`` works). SIGTERM / SIGINT stop it cleanly.

Threads: one receiver reads datagrams, answers malformed ones and BUSY at once, and queues
the rest for ``--workers`` worker threads (the worker slots). A worker does the LMDB work,
adds the service-time model's delay (:mod:`netstor.agent.servicetime`) by sleeping, and
replies with ``server_id``, ``queue_len`` (requests queued or in service, including this
one) and ``service_ns`` (measured time the worker spent: LMDB work plus the delay as slept).

Durability: every PUT/DEL is its own LMDB write transaction, committed (and, unless
``--no-sync``, fsynced) before the reply is sent.

Offloads: for every registered offload with a codec (:mod:`netstor.agent.codec`) the server opens one more UDP socket (``--<offload>-port``, default the
offload's port, 0 = off; when the default port is taken the server runs without that offload
and warns; an explicit port that cannot be bound is an error). Its datagrams carry the
offload's request header before the storage request; the codec checks it (a datagram that is
not a request of the offload is dropped and counted), the same workers serve the storage
request, and the reply goes back behind the codec's reply header, which carries the server's
load (the queue a new request would wait in) and the request's service time. BUSY and
BAD_REQUEST answers carry it too (service time 0).

Exposure (who may talk to it): the server binds ``--bind`` (default 127.0.0.1: nothing
off this host reaches it; the test bed and a deployment give the storage network's address)
and, with ``--allow PREFIX ...``, serves only sources inside those IPv4 prefixes: datagrams
from elsewhere are dropped unanswered and counted (``not_allowed``). The protocol has no
authentication, and UDP source addresses can be forged, so the allow-list limits *who can be
made to receive replies*, not who can send requests. Replies are not bounded by the request's
size: a 32-byte GET of a 1,440-byte value returns 1,472 bytes (46x), which is the service
(a GET cannot be answered in fewer bytes than its value). What keeps the server from being a
reflector is therefore where it is reachable from: loopback by default, and outside the test
bed a storage-network address plus ``--allow`` for the clients' prefixes. A non-loopback bind
without ``--allow`` starts with a warning. Answers the server makes on its own (BAD_REQUEST,
BUSY) are never longer than the request (an offload's reply header may add a few bytes).

Bad datagrams (malformed, not for an offload, not allowed) are counted in :meth:`stats`
and in the heartbeat's ``counters``, each one logged at DEBUG, and summarised at WARNING at
most once a minute (how many of each kind since the last summary, and the last source and
reason).

The same code serves tests in-process through :class:`Server`.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import os
import queue
import signal
import socket
import struct
import sys
import threading
import time
import urllib.error
import urllib.request

import lmdb

from netstor.proto import (Header, HEADER_LEN, MAGIC, MAX_VALUE, Op, ProtocolError,
                           Status, STORAGE, STORAGE_UDP_PORT, VERSION)
from netstor import apitoken
from netstor.agent import servicetime
from netstor.offloads import offloads

__all__ = ["Server", "main"]

log = logging.getLogger("netstor.agent.server")

_KEY = struct.Struct("!Q")
_PEEK = struct.Struct("!HB")
_RECV_BUF = 65535
_STOP = None
_BAD_LOG_EVERY_S = 60.0
# the heartbeat's "counters": at most this many integers (the controller keeps what it is sent)
HEARTBEAT_COUNTERS_MAX = 32
_HEARTBEAT_COUNTERS = ("received", "served", "ok", "not_found", "busy", "bad_request",
                       "dropped", "not_allowed", "storage_errors", "send_errors",
                       "heartbeat_failures")


def parse_prefixes(prefixes):
    """IPv4 prefixes (``"10.0.0.0/8"``, ``"10.1.2.3"`` = /32, or ``ip_network`` objects) as
    a tuple of :class:`ipaddress.IPv4Network`; a ValueError names a bad one."""
    out = []
    for p in prefixes:
        try:
            net = p if isinstance(p, ipaddress.IPv4Network) else \
                ipaddress.IPv4Network(str(p).strip(), strict=False)
        except (ValueError, TypeError):
            raise ValueError(f"allow prefix {p!r} is not an IPv4 address or prefix "
                             "(e.g. 10.0.0.0/8)") from None
        out.append(net)
    return tuple(out)


def _check_port(what, port, none_ok=False):
    if port is None and none_ok:
        return None
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 0xFFFF:
        raise ValueError(f"{what} must be a UDP port 0..65535, got {port!r}")
    return port


def codecs():
    """The registered offloads' server codecs, in registry order."""
    return [off.hook("codec")() for off in offloads() if off.codec is not None]


class Server:
    """A storage server. ``start()`` binds and starts the threads (returns at once);
    ``stop()`` stops and closes LMDB. ``address`` is the bound ``(addr, port)``.

    Counters (:meth:`stats`): ``received`` datagrams; ``served`` requests answered by a
    worker (any status); ``ok``, ``not_found``; ``busy`` (BUSY replies);
    ``bad_request`` (malformed but answered); ``dropped`` (malformed, not answerable);
    ``not_allowed`` (from a source outside ``allow``, dropped unanswered; not in ``errors``);
    ``storage_errors`` (ERROR replies); ``send_errors``; ``by_op``; ``errors`` =
    storage_errors + bad_request + dropped. ``service_ns``: the workers' total service time
    (LMDB work and the modelled delay). ``slow_served``: requests served while a ``fluct``
    service model was in its slow mode. Per offload codec: ``<prefix>_received``,
    ``<prefix>_replies``, ``<prefix>_dropped`` and the codec's own.

    ``bind``: the address of every socket (default 127.0.0.1). ``allow``: None (default:
    every source is served) or IPv4 prefixes (text or ``IPv4Network``) whose sources alone
    are served. ``<offload>_port`` (a keyword per registered codec, e.g. ``<name>_port=0``):
    None (default) = no socket for that offload; 0 = any free port; else that port
    (:meth:`offload_address` is the bound address); ``<offload>_optional=True``: a port that
    cannot be bound turns the offload off instead of failing.
    """

    def __init__(self, db, bind="127.0.0.1", port=STORAGE_UDP_PORT, workers=4, server_id=0,
                 queue_limit=1024, service_model="none", seed=None, controller=None,
                 heartbeat_interval=1.0, sync=True, map_size=1 << 30, advertise=None,
                 allow=None, token_file=None, **offload_ports):
        if not isinstance(server_id, int) or not 0 <= server_id <= 0xFFFF:
            raise ValueError(f"server_id must be a 16-bit unsigned integer, got {server_id!r}")
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers!r}")
        if not isinstance(queue_limit, int) or queue_limit < 0:
            raise ValueError(f"queue_limit must be >= 0, got {queue_limit!r}")
        if controller is not None and not heartbeat_interval > 0:
            raise ValueError(f"heartbeat_interval must be > 0, got {heartbeat_interval!r}")
        if isinstance(map_size, bool) or not isinstance(map_size, int) or map_size < 1:
            raise ValueError(f"map_size must be a positive number of bytes, got {map_size!r}")
        _check_port("port", port)
        self.db_path = os.fspath(db)
        self.bind, self.port = bind, port
        # the allow-list: None = every source; else (network int, mask int) pairs
        self.allow = None if allow is None else parse_prefixes(allow)
        self._allow = None if self.allow is None else tuple(
            (int(n.network_address), int(n.netmask)) for n in self.allow)
        self.workers, self.server_id, self.queue_limit = workers, server_id, queue_limit
        self.model = servicetime.parse(service_model, seed=seed)
        self.controller = controller.rstrip("/") if controller else None
        self.heartbeat_interval = float(heartbeat_interval)
        # the controller's write token (netstor.apitoken): heartbeats without it get 401
        self.token_file = token_file
        self.sync, self.map_size = sync, int(map_size)
        self.advertise = advertise
        self.codecs = {}            # offload name -> (codec, port, optional)
        for codec in codecs():
            port = offload_ports.pop(f"{codec.name}_port", None)
            optional = bool(offload_ports.pop(f"{codec.name}_optional", False))
            if port is not None:
                self.codecs[codec.name] = (codec, _check_port(f"{codec.name}_port", port),
                                           optional)
        if offload_ports:
            raise TypeError(f"unknown argument(s) {sorted(offload_ports)} (offload ports: "
                            f"{[c.name + '_port' for c in codecs()]})")
        self.offload_socks = {}     # offload name -> bound socket
        self.env = None
        self.sock = None
        self._threads = []
        self._q = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pending = 0           # queued + in service
        self._in_service = 0
        self._stop = threading.Event()
        self._started_at = None
        self._c = dict(received=0, served=0, ok=0, not_found=0, busy=0, bad_request=0,
                       dropped=0, not_allowed=0, storage_errors=0, send_errors=0,
                       heartbeats_sent=0, heartbeat_failures=0, service_ns=0, slow_served=0)
        # bad datagrams since the last WARNING summary: kind -> count, and the last one seen
        self._bad_since = {}
        self._bad_last = None
        self._bad_logged_at = None
        for codec in codecs():
            for name in (f"{codec.prefix}_received", f"{codec.prefix}_replies",
                         f"{codec.prefix}_dropped", *codec.extra_counters):
                self._c[name] = 0
        self._by_op = {"GET": 0, "PUT": 0, "DEL": 0}

    # -- life cycle --------------------------------------------------------------------------
    @property
    def address(self):
        return self.sock.getsockname()[:2] if self.sock else (self.bind, self.port)

    def offload_address(self, name):
        """The bound address of offload ``name``'s socket, or None when it is off."""
        sock = self.offload_socks.get(name)
        return sock.getsockname()[:2] if sock else None

    @property
    def running(self):
        return self._started_at is not None and not self._stop.is_set()

    def start(self):
        if self._started_at is not None:
            raise RuntimeError("server already started")
        os.makedirs(self.db_path, exist_ok=True)
        self.env = lmdb.open(self.db_path, map_size=self.map_size, subdir=True,
                             sync=self.sync, metasync=self.sync, lock=True,
                             max_readers=max(126, 2 * self.workers + 8), max_dbs=0)
        try:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
            except OSError:
                pass
            self.sock.bind((self.bind, self.port))
            for name, (codec, port, optional) in self.codecs.items():
                sock = self._open_extra(port, optional, name)
                if sock is not None:
                    self.offload_socks[name] = sock
        except BaseException:
            self.env.close()
            self.env = None
            for sock in [self.sock, *self.offload_socks.values()]:
                if sock is not None:
                    sock.close()
            self.sock, self.offload_socks = None, {}
            raise
        self._started_at = time.monotonic()
        self._threads = [threading.Thread(target=self._worker, name=f"netstor-worker{i}",
                                          daemon=True) for i in range(self.workers)]
        self._threads.append(threading.Thread(target=self._receiver, args=(self.sock, None),
                                              name="netstor-rx", daemon=True))
        for name, sock in self.offload_socks.items():
            self._threads.append(threading.Thread(target=self._receiver,
                                                  args=(sock, self.codecs[name][0]),
                                                  name=f"netstor-rx-{name}", daemon=True))
        if self.controller:
            self._threads.append(threading.Thread(target=self._heartbeat,
                                                  name="netstor-heartbeat", daemon=True))
        for t in self._threads:
            t.start()
        return self

    def _open_extra(self, port, optional, what):
        """The socket of an offload protocol (None when ``port`` is None, or when it is
        ``optional`` and cannot be bound)."""
        if port is None:
            return None
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        except OSError:
            pass
        try:
            sock.bind((self.bind, port))
        except OSError as e:
            sock.close()
            if not optional:
                raise
            log.warning("%s port %s:%d unavailable (%s): %s off", what, self.bind, port, e,
                        what)
            return None
        return sock

    def stop(self, timeout=5.0):
        """Stop serving: the receiver stops, queued requests are still answered, then LMDB
        is closed. Idempotent."""
        if self._started_at is None or self.env is None:
            return
        self._stop.set()
        self._wake_receiver()
        rx = [t for t in self._threads if t.name.startswith("netstor-rx")]
        for t in rx:
            t.join(timeout)
        for _ in range(self.workers):
            self._q.put(_STOP)
        end = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, end - time.monotonic()))
        self.sock.close()
        for sock in self.offload_socks.values():
            sock.close()
        self.env.close()
        self.env = None

    def _wake_receiver(self):
        """Wake the receivers blocked in recvfrom: on Linux shutdown() of a UDP socket does
        (it also reports ENOTCONN); elsewhere fall back to the socket timeout."""
        for sock in (self.sock, *self.offload_socks.values()):
            if sock is None:
                continue
            try:
                sock.shutdown(socket.SHUT_RD)
            except OSError:
                pass
            if sys.platform != "linux":
                sock.settimeout(0.1)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- stats -------------------------------------------------------------------------------
    @property
    def queue_len(self):
        return self._pending

    def stats(self):
        with self._lock:
            s = dict(self._c)
            s["by_op"] = dict(self._by_op)
            s["queue_len"] = self._pending
            s["in_service"] = self._in_service
        s["errors"] = s["storage_errors"] + s["bad_request"] + s["dropped"]
        s["uptime_s"] = 0.0 if self._started_at is None else time.monotonic() - self._started_at
        s["server_id"] = self.server_id
        return s

    def _count(self, name, n=1):
        with self._lock:
            self._c[name] += n

    def count(self, name, n=1):
        """Add ``n`` to counter ``name`` (an offload codec's own counters)."""
        self._count(name, n)

    # -- data path ---------------------------------------------------------------------------
    def _send(self, h, addr, via=None, queued=True, service_ns=0):
        """Send reply ``h``; ``via`` = ``(codec, request header)`` sends it on that offload's
        socket behind the codec's reply header, carrying the load once it has gone
        (``queued``: the request counts in ``_pending`` until after this send) and
        ``service_ns``."""
        try:
            if via is None:
                self.sock.sendto(h.pack(), addr)
            else:
                codec, head = via
                with self._lock:
                    # the queue a new request would wait in, without this request
                    load = self._pending - (1 if queued else 0) - self.workers + 1
                    self._c[f"{codec.prefix}_replies"] += 1
                self.offload_socks[codec.name].sendto(
                    codec.reply_header(head, self.server_id, load, service_ns) + h.pack(), addr)
        except (OSError, ValueError) as e:
            self._count("send_errors")
            log.debug("send to %s failed: %s", addr, e)

    def _malformed(self, data, addr, why, via=None):
        """Answer BAD_REQUEST when the header is there with our magic and version, else drop."""
        if len(data) >= HEADER_LEN and _PEEK.unpack_from(data) == (MAGIC, VERSION):
            raw = STORAGE.unpack(data)
            req = Header(op=raw.op & 0x7F, key=raw.key, req_id=raw.req_id, flags=raw.flags,
                         seq=raw.seq)
            with self._lock:
                self._c["bad_request"] += 1
                ql = self._pending
            self._send(req.reply(Status.BAD_REQUEST, server_id=self.server_id,
                                 queue_len=min(ql, 0xFFFF)), addr, via, queued=False)
            self._note_bad("bad_request", addr, why)
        else:
            self._count("dropped")
            self._note_bad("dropped", addr, why)

    def _note_bad(self, kind, addr, why):
        """A bad datagram (already counted): DEBUG each, and a WARNING summary of what came
        since the last one, at most once every minute."""
        log.debug("%s: datagram from %s: %s", kind, addr, why)
        now = time.monotonic()
        with self._lock:
            self._bad_since[kind] = self._bad_since.get(kind, 0) + 1
            self._bad_last = (addr, why)
            if self._bad_logged_at is not None and \
                    now - self._bad_logged_at < _BAD_LOG_EVERY_S:
                return
            since, last = self._bad_since, self._bad_last
            self._bad_since, self._bad_logged_at = {}, now
        log.warning("bad datagrams (%s) in the last %.0f s; last from %s:%s: %s; counted in "
                    "the stats and the heartbeat; each at DEBUG",
                    ", ".join(f"{k} {v}" for k, v in sorted(since.items())),
                    _BAD_LOG_EVERY_S, last[0][0], last[0][1], last[1])

    def allowed(self, ip):
        """Whether source address ``ip`` (dotted text) may be served."""
        if self._allow is None:
            return True
        try:
            a = int(ipaddress.IPv4Address(ip))
        except ValueError:
            return False
        return any(a & mask == net for net, mask in self._allow)

    def _receiver(self, sock, codec):
        q, lock, c, allow = self._q, self._lock, self._c, self._allow
        while not self._stop.is_set():
            try:
                data, addr = sock.recvfrom(_RECV_BUF)
            except socket.timeout:
                continue
            except OSError as e:
                if self._stop.is_set():
                    break
                log.debug("recvfrom: %s", e)     # e.g. ICMP errors reported on the socket
                continue
            if self._stop.is_set():     # woken by stop() (shutdown returns an empty read)
                break
            try:
                via = None
                with lock:
                    c["received"] += 1
                    if codec is not None:
                        c[f"{codec.prefix}_received"] += 1
                if allow is not None and not self.allowed(addr[0]):
                    with lock:
                        c["not_allowed"] += 1
                    self._note_bad("not_allowed", addr, "source outside --allow")
                    continue
                if codec is not None and codec.serves:
                    codec.serve(self, sock, data, addr)     # its own protocol, not storage
                    continue
                if codec is not None:
                    split = codec.split_request(data)
                    if split is None:
                        with lock:
                            c["dropped"] += 1
                            c[f"{codec.prefix}_dropped"] += 1
                        self._note_bad("dropped", addr, f"not a {codec.name} request")
                        continue
                    head, data = split
                    via = (codec, head)
                try:
                    h = Header.unpack(data)
                except ProtocolError as e:
                    self._malformed(data, addr, str(e), via)
                    continue
                if h.is_reply or h.op not in Op.NAMES:
                    self._malformed(data, addr, f"not a request op ({Op.name(h.op)})", via)
                    continue
                if h.op == Op.PUT and len(h.value) > MAX_VALUE:
                    self._malformed(data, addr, f"value of {len(h.value)} bytes > MAX_VALUE",
                                    via)
                    continue
                with lock:
                    why = codec.admit(head, self._pending, self.workers) if via else None
                    if why is not None:
                        c[why] += 1
                        continue
                    if self._pending - self._in_service >= self.queue_limit:
                        c["busy"] += 1
                        ql = self._pending
                        busy = True
                    else:
                        self._pending += 1
                        busy = False
                if busy:
                    self._send(h.reply(Status.BUSY, server_id=self.server_id,
                                       queue_len=min(ql, 0xFFFF)), addr, via, queued=False)
                    continue
                q.put((h, addr, via))
            except Exception:       # never let one datagram kill the receiver
                log.exception("receiver: unexpected error on a datagram from %s", addr)

    def _do(self, h):
        key = _KEY.pack(h.key)
        env = self.env
        if h.op == Op.GET:
            with env.begin(buffers=False) as txn:
                v = txn.get(key)
            return (Status.OK, v) if v is not None else (Status.NOT_FOUND, b"")
        if h.op == Op.PUT:
            with env.begin(write=True) as txn:
                txn.put(key, h.value)
            return Status.OK, b""
        with env.begin(write=True) as txn:
            found = txn.delete(key)
        return (Status.OK if found else Status.NOT_FOUND), b""

    def _worker(self):
        q, lock, c, model = self._q, self._lock, self._c, self.model
        sleep, clock = time.sleep, time.perf_counter_ns
        while True:
            item = q.get()
            if item is _STOP:
                return
            h, addr, via = item
            with lock:
                self._in_service += 1
            t0 = clock()
            try:
                try:
                    status, value = self._do(h)
                except lmdb.Error as e:
                    log.warning("storage error on %s key=%d: %s", Op.name(h.op), h.key, e)
                    status, value = Status.ERROR, b""
                delay = model.sample_ns()
                slow = model.fluct_slow()
                if delay > 0:
                    t_end = t0 + (clock() - t0) + delay
                    sleep(delay / 1e9)
                    # a short top-up if woken early (sleep never sleeps less on Linux, but be safe)
                    left = t_end - clock()
                    if left > 0:
                        sleep(left / 1e9)
                service = clock() - t0
                with lock:
                    ql = self._pending
                    c["served"] += 1
                    c["service_ns"] += service
                    c["slow_served"] += slow
                    c[{Status.OK: "ok", Status.NOT_FOUND: "not_found"}.get(
                        status, "storage_errors")] += 1
                    self._by_op[Op.NAMES[h.op]] += 1
                self._send(h.reply(status, value=value, server_id=self.server_id,
                                   queue_len=min(ql, 0xFFFF), service_ns=service), addr, via,
                           service_ns=service)
            except Exception:
                log.exception("worker: unexpected error")
            finally:
                with lock:
                    self._pending -= 1
                    self._in_service -= 1

    # -- heartbeat ---------------------------------------------------------------------------
    def heartbeat_payload(self):
        s = self.stats()
        addr, port = self.address
        return {"server_id": self.server_id, "addr": self.advertise or addr, "port": port,
                "queue_len": s["queue_len"], "served": s["served"], "errors": s["errors"],
                "uptime_s": round(s["uptime_s"], 3), "counters": self.heartbeat_counters(s)}

    def heartbeat_counters(self, s=None):
        """The heartbeat's ``counters``: the served/bad/dropped datagram counters and the
        offload codecs' (at most :data:`HEARTBEAT_COUNTERS_MAX` names, integers only)."""
        s = self.stats() if s is None else s
        names = list(_HEARTBEAT_COUNTERS)
        for codec, _, _ in self.codecs.values():
            names += [f"{codec.prefix}_received", f"{codec.prefix}_replies",
                      f"{codec.prefix}_dropped", *codec.extra_counters]
        return {n: int(s[n]) for n in names[:HEARTBEAT_COUNTERS_MAX] if n in s}

    def _heartbeat(self):
        url = self.controller + "/api/v1/heartbeat"
        last_log = None
        failures = 0
        while not self._stop.wait(self.heartbeat_interval):
            body = json.dumps(self.heartbeat_payload()).encode()
            try:
                headers = {"Content-Type": "application/json",
                           **apitoken.auth_header(self.token_file)}
                req = urllib.request.Request(url, data=body, method="POST", headers=headers)
                timeout = min(2.0, max(0.2, self.heartbeat_interval))
                with urllib.request.urlopen(req, timeout=timeout) as resp:
                    resp.read()
                self._count("heartbeats_sent")
                if failures:
                    log.info("controller %s reachable again", self.controller)
                failures = 0
            except Exception as e:      # never fatal
                failures += 1
                self._count("heartbeat_failures")
                now = time.monotonic()
                if last_log is None or now - last_log >= 60.0:
                    last_log = now
                    log.warning("heartbeat to %s failed (%s); retrying every %gs, logging at "
                                "most once a minute", url, e, self.heartbeat_interval)


def _int(text):
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def _u16(text):
    v = _int(text)
    if not 0 <= v <= 0xFFFF:
        raise argparse.ArgumentTypeError(f"{text} is not a 16-bit unsigned integer")
    return v


def _port(text):
    v = _int(text)
    if not 0 <= v <= 0xFFFF:
        raise argparse.ArgumentTypeError(f"port {text} is out of range 0..65535")
    return v


def _positive_int(text):
    v = _int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text} must be >= 1")
    return v


def _nonneg_int(text):
    v = _int(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"{text} must be >= 0")
    return v


def _positive_float(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < v < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a number > 0")
    return v


def _ipv4(text):
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an IPv4 address") from None


def _prefix(text):
    try:
        return parse_prefixes([text])[0]
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _url(text):
    if not text.startswith(("http://", "https://")) or len(text) <= len("https://"):
        raise argparse.ArgumentTypeError(f"{text!r} is not an http:// or https:// URL")
    return text


def _service_model(text):
    try:
        servicetime.parse(text)
    except servicetime.SpecError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def build_parser():
    p = argparse.ArgumentParser(prog="netstor-server",
                                description="netstor UDP storage server in front of LMDB")
    p.add_argument("--bind", type=_ipv4, default="127.0.0.1", metavar="ADDR",
                   help="IPv4 address to bind (default 127.0.0.1: this host only; give the "
                        "storage network's address to serve other hosts)")
    p.add_argument("--allow", type=_prefix, action="append", default=None, metavar="PREFIX",
                   help="serve only sources in this IPv4 prefix (repeatable; default: every "
                        "source that reaches --bind); others are dropped and counted")
    p.add_argument("--port", type=_port, default=STORAGE_UDP_PORT,
                   help=f"UDP port (default {STORAGE_UDP_PORT}; 0 = any free port)")
    p.add_argument("--db", required=True, metavar="DIR", help="LMDB environment directory")
    p.add_argument("--workers", type=_positive_int, default=4, metavar="N",
                   help="worker slots (default 4)")
    p.add_argument("--server-id", type=_u16, default=0, metavar="K",
                   help="16-bit id written into every reply (default 0)")
    p.add_argument("--queue-limit", type=_nonneg_int, default=1024, metavar="Q",
                   help="requests waiting beyond this get BUSY at once (default 1024)")
    p.add_argument("--service-model", type=_service_model, default="none", metavar="SPEC",
                   help=f"extra service time: {servicetime.SPEC_HELP} (default none)")
    p.add_argument("--seed", type=_int, default=None, help="seed of the service-model RNG")
    p.add_argument("--controller", type=_url, default=None, metavar="URL",
                   help="POST heartbeats to URL/api/v1/heartbeat")
    p.add_argument("--token-file", default=None, metavar="PATH",
                   help="the controller's token file, sent with every heartbeat (default: "
                        "$NETSTOR_TOKEN_FILE, else the controller's default path)")
    p.add_argument("--heartbeat-interval", type=_positive_float, default=1.0, metavar="S",
                   help="seconds between heartbeats (default 1.0)")
    for codec in codecs():
        p.add_argument(f"--{codec.name}-port", type=_port, default=None, metavar="PORT",
                       help=f"UDP port for {codec.name} requests (default "
                            f"{codec.default_port}; 0 = {codec.name} off)")
    p.add_argument("--advertise", type=_ipv4, default=None, metavar="ADDR",
                   help="address reported in heartbeats (default: the bound address)")
    p.add_argument("--no-sync", action="store_true",
                   help="do not fsync LMDB commits (faster, not durable on power loss)")
    p.add_argument("--map-size", type=_positive_int, default=1 << 30, metavar="BYTES",
                   help="LMDB map size (default 1 GiB)")
    p.add_argument("--log-level", default="INFO",
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="netstor-server %(levelname)s %(message)s")
    ports = {}
    for codec in codecs():      # the default port is optional, an explicit one is not
        port = getattr(args, f"{codec.name}_port")
        ports[f"{codec.name}_port"] = codec.default_port if port is None else port or None
        ports[f"{codec.name}_optional"] = port is None
    srv = Server(db=args.db, bind=args.bind, port=args.port, workers=args.workers,
                 server_id=args.server_id, queue_limit=args.queue_limit,
                 service_model=args.service_model, seed=args.seed, controller=args.controller,
                 heartbeat_interval=args.heartbeat_interval, sync=not args.no_sync,
                 map_size=args.map_size, advertise=args.advertise, allow=args.allow,
                 token_file=args.token_file, **ports)
    stop = threading.Event()

    def on_signal(signum, _frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        srv.start()
    except (OSError, lmdb.Error, OverflowError) as e:
        print(f"netstor-server: error: cannot start (--bind {args.bind}, --port {args.port}, "
              f"--db {args.db}): {e}", file=sys.stderr)
        return 1
    if args.allow is None and not ipaddress.IPv4Address(args.bind).is_loopback:
        log.warning("bound to %s with no --allow: every source that reaches it is served, and "
                    "a GET's reply can be ~46x its request (a reflector if untrusted hosts "
                    "can reach %s); give --allow PREFIX for the clients' networks",
                    args.bind, args.bind)
    addr, port = srv.address
    for name in srv.offload_socks:
        log.info("%s requests on %s:%d", name, *srv.offload_address(name))
    print(f"netstor-server {srv.server_id} listening on {addr}:{port}", flush=True)
    try:
        while not stop.wait(0.1):
            pass
    finally:
        srv.stop()
        s = srv.stats()
        log.info("stopped: served %d, busy %d, bad_request %d, dropped %d, storage errors %d, "
                 "service time %.3f s", s["served"], s["busy"], s["bad_request"], s["dropped"],
                 s["storage_errors"], s["service_ns"] / 1e9)
        # every counter, for the experiments that run servers (netstor.testbed.experiment)
        log.info("netstor-server stats %s", json.dumps(s, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
