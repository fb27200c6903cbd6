"""Client side of the netstor storage protocol.

* :class:`Engine` -- an asynchronous, pipelined request engine: many requests outstanding on
  one UDP socket, matched to replies by ``req_id``, each with its own timeout. The load
  generator drives it; :class:`Client` is built on it.
* :class:`Client` -- a small synchronous API: ``get(key) -> bytes | None``,
  ``put(key, value)``, ``delete(key) -> bool``. Errors raise :class:`NetstorError`
  subclasses (:class:`RequestTimeout`, :class:`BadRequest`, :class:`ServerBusy`,
  :class:`ServerError`).

Replies are matched by ``req_id`` only (not by source address), so a reply may come from a
different server than the one addressed (e.g. a data-plane offload answering, or a clone).
Keys are unsigned 64-bit integers.

Cloning: ``Engine.send(..., copies=[addr, ...])`` sends the same request (same ``req_id``)
to more servers (client-side cloning): the first reply completes it, later ones are counted as
``duplicates`` (a subset of ``unmatched``).

Offloads: ``Engine.send(..., head=bytes)`` puts an offload's request header in front of the
storage request; an engine made with an offload's ``codec`` unwraps replies that start with
that offload's reply header and keeps the header in ``Completion.head``.
``Completion.src`` is the address a reply came from.
"""

from __future__ import annotations

import collections
import errno
import random
import select
import socket
import time

from netstor.proto import (Header, MAX_VALUE, Op, ProtocolError, Status,
                           STORAGE_UDP_PORT)

__all__ = ["Client", "Engine", "Completion", "NetstorError", "RequestTimeout", "BadRequest",
           "ServerBusy", "ServerError", "parse_target", "parse_targets"]

_RECV_BUF = 65535


class NetstorError(Exception):
    """A storage request failed."""

    def __init__(self, msg, reply=None):
        super().__init__(msg)
        self.reply = reply


class RequestTimeout(NetstorError, TimeoutError):
    """No reply within the timeout (after all retries)."""


class BadRequest(NetstorError):
    """The server answered BAD_REQUEST."""


class ServerBusy(NetstorError):
    """The server answered BUSY (its queue was full)."""


class ServerError(NetstorError):
    """The server answered ERROR (storage engine failure) or an unknown status."""


_STATUS_EXC = {Status.BAD_REQUEST: BadRequest, Status.BUSY: ServerBusy,
               Status.ERROR: ServerError}


def parse_target(t, default_port=STORAGE_UDP_PORT):
    """``"host:port"``, ``"host"``, or ``(host, port)`` -> ``(ipv4 address, port)``."""
    if isinstance(t, (tuple, list)):
        host, port = t
    else:
        s = str(t).strip()
        host, sep, port = s.rpartition(":")
        if not sep:
            host, port = s, default_port
    try:
        port = int(port)
    except ValueError:
        raise ValueError(f"bad port in target {t!r}") from None
    if not 0 < port < 65536:
        raise ValueError(f"port {port} out of range in target {t!r}")
    try:
        addr = socket.gethostbyname(str(host))
    except OSError as e:
        raise ValueError(f"cannot resolve host {host!r} in target {t!r}: {e}") from None
    return (addr, port)


def parse_targets(targets, default_port=STORAGE_UDP_PORT):
    """One target or a list of them (a string may hold several, comma-separated)."""
    if isinstance(targets, str):
        items = [x for x in targets.split(",") if x.strip()]
    elif isinstance(targets, tuple) and len(targets) == 2 and isinstance(targets[1], int):
        items = [targets]
    else:
        items = list(targets)
    if not items:
        raise ValueError("no target given")
    return [parse_target(x, default_port) for x in items]


class Completion:
    """One finished request: ``reply`` is the reply :class:`Header`, or None on timeout."""

    __slots__ = ("req_id", "op", "key", "target", "tag", "sent_ns", "done_ns", "reply",
                 "deadline_ns", "head", "src")

    def __init__(self, req_id, op, key, target, tag, sent_ns, deadline_ns):
        self.req_id, self.op, self.key, self.target, self.tag = req_id, op, key, target, tag
        self.sent_ns, self.deadline_ns = sent_ns, deadline_ns
        self.done_ns = None
        self.reply = None
        self.head = None        # the offload's reply header (an engine with a codec)
        self.src = None         # where the reply came from

    @property
    def timed_out(self):
        return self.reply is None

    @property
    def latency_ns(self):
        return None if self.done_ns is None else self.done_ns - self.sent_ns

    def __repr__(self):
        st = "timeout" if self.reply is None else Status.NAMES.get(self.reply.status,
                                                                   self.reply.status)
        return (f"Completion({Op.name(self.op)} key={self.key} req_id={self.req_id} {st} "
                f"latency_ns={self.latency_ns})")


class Engine:
    """Pipelined requests on one UDP socket.

    ``send()`` returns immediately; ``poll()`` returns the requests that finished (reply or
    timeout) since the last call. All requests share the engine's ``timeout`` (seconds), so
    they expire in send order. Not thread-safe: drive it from one thread.
    """

    def __init__(self, targets, timeout=1.0, bind=("0.0.0.0", 0), seed=None, rcvbuf=1 << 22,
                 codec=None):
        """``codec``: an offload's codec (:mod:`netstor.agent.codec`); replies behind its
        reply header are unwrapped and the header kept in ``Completion.head``."""
        self.codec = codec
        self.targets = parse_targets(targets)
        if not 0 < timeout < 1e6:
            raise ValueError(f"timeout must be > 0 s (and below 10^6 s), got {timeout!r}")
        bport = bind[1]
        if isinstance(bport, bool) or not isinstance(bport, int) or not 0 <= bport <= 0xFFFF:
            raise ValueError(f"local port must be 0..65535, got {bport!r}")
        self.timeout_ns = int(timeout * 1e9)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for opt, size in ((socket.SO_RCVBUF, rcvbuf), (socket.SO_SNDBUF, rcvbuf)):
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, opt, size)
            except OSError:
                pass
        self.sock.bind(bind)
        self.sock.setblocking(False)
        self._rng = random.Random(seed)
        self._next_id = self._rng.randrange(1, 1 << 32)
        self._pending = {}
        self._order = collections.deque()   # Completions in send (= deadline) order
        self._done = []
        self._answered = set()              # req_ids answered lately (duplicate detection)
        self._answered_order = collections.deque()
        # counters
        self.sent = 0
        self.replies = 0
        self.timeouts = 0
        self.unmatched = 0      # replies for no outstanding request (late or duplicate)
        self.duplicates = 0     # of those: a further reply to a request already answered
        self.malformed = 0      # datagrams that are not netstor replies
        self.send_errors = 0

    @property
    def outstanding(self):
        return len(self._pending)

    @property
    def local_address(self):
        return self.sock.getsockname()

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _new_id(self):
        while True:
            rid = self._next_id
            self._next_id = (rid + 1) & 0xFFFF_FFFF
            if rid not in self._pending:
                return rid

    def _addr(self, target):
        if target is None:
            return self.targets[0]
        if isinstance(target, int):
            return self.targets[target]
        return target

    def send(self, op, key, value=b"", target=None, tag=None, flags=0, seq=0, now_ns=None,
             copies=(), head=b""):
        """Send one request; ``target`` is an index into ``targets`` or an address tuple;
        ``copies``: more targets that get the same request (client-side cloning); ``head``:
        an offload's request header, sent before the storage request.
        Returns its :class:`Completion` (filled in when it finishes)."""
        addr = self._addr(target)
        rid = self._new_id()
        data = head + Header(op=op, key=key, req_id=rid, flags=flags, seq=seq,
                             value=value).pack()
        now = time.monotonic_ns() if now_ns is None else now_ns
        c = Completion(rid, op, key, addr, tag, now, now + self.timeout_ns)
        for a in (addr, *(self._addr(t) for t in copies)):
            try:
                self.sock.sendto(data, a)
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.ENOBUFS, errno.ECONNREFUSED,
                                   errno.EWOULDBLOCK):
                    raise
                # treated as a lost datagram: the request times out like any other loss
                self.send_errors += 1
        self._pending[rid] = c
        self._order.append(c)
        self.sent += 1
        return c

    def _drain_socket(self):
        sock, pending, done = self.sock, self._pending, self._done
        got = 0
        while True:
            try:
                data, src = sock.recvfrom(_RECV_BUF)
            except (BlockingIOError, InterruptedError):
                return got
            except ConnectionRefusedError:
                continue    # ICMP port unreachable from an earlier send: ignore
            t = time.monotonic_ns()
            head = None
            if self.codec is not None:
                split = self.codec.split_reply(data)
                if split is not None:
                    head, data = split
            try:
                h = Header.unpack(data)
            except ProtocolError:
                self.malformed += 1
                continue
            if not h.is_reply:
                self.malformed += 1
                continue
            c = pending.pop(h.req_id, None)
            if c is None or (h.op & 0x7F) != c.op:
                if c is not None:       # req_id collision with a foreign reply: keep waiting
                    pending[h.req_id] = c
                elif h.req_id in self._answered:
                    self.duplicates += 1
                self.unmatched += 1
                continue
            c.reply, c.done_ns, c.head, c.src = h, t, head, src
            self.replies += 1
            self._answered.add(h.req_id)
            self._answered_order.append(h.req_id)
            if len(self._answered_order) > 65536:
                self._answered.discard(self._answered_order.popleft())
            done.append(c)
            got += 1

    def _expire(self, now):
        order, pending, n = self._order, self._pending, 0
        while order:
            c = order[0]
            if c.done_ns is not None:
                order.popleft()
                continue
            if c.deadline_ns > now:
                break
            order.popleft()
            if pending.pop(c.req_id, None) is c:
                c.done_ns = now
                self.timeouts += 1
                self._done.append(c)
                n += 1
        return n

    def next_deadline_ns(self):
        order = self._order
        while order and order[0].done_ns is not None:
            order.popleft()
        return order[0].deadline_ns if order else None

    def poll(self, timeout=0.0):
        """Wait up to ``timeout`` seconds for at least one request to finish; return all
        finished :class:`Completion`\\ s (replies and expired ones), possibly empty."""
        end = time.monotonic_ns() + max(0, int(timeout * 1e9))
        while True:
            self._drain_socket()
            now = time.monotonic_ns()
            self._expire(now)
            if self._done or now >= end:
                break
            wait = end - now
            dl = self.next_deadline_ns()
            if dl is not None:
                wait = min(wait, max(0, dl - now))
            select.select([self.sock], [], [], wait / 1e9)
        done, self._done = self._done, []
        return done

    def wait(self, completion, timeout=None):
        """Poll until ``completion`` finishes (others finishing meanwhile are kept for the
        next ``poll``). Returns it."""
        keep = []
        limit = None if timeout is None else time.monotonic_ns() + int(timeout * 1e9)
        try:
            while completion.done_ns is None:
                left = self.timeout_ns / 1e9 if limit is None else \
                    max(0.0, (limit - time.monotonic_ns()) / 1e9)
                keep.extend(self.poll(left))
                if limit is not None and time.monotonic_ns() >= limit:
                    break
        finally:
            self._done[:0] = [c for c in keep if c is not completion]
        return completion


class Client:
    """Synchronous client. ``addr``: ``"host:port"``, ``(host, port)`` or a list of them.

    With several servers, ``pick="key"`` (default) sends every request for one key to the same
    server (``key % n``), ``"round_robin"`` rotates; a timed-out attempt is retried
    (``retries`` times) on the next server in the list. ``last_reply`` holds the last reply
    header (server_id, queue_len, service_ns...).
    """

    def __init__(self, addr, timeout=1.0, retries=2, pick="key", seed=None):
        if pick not in ("key", "round_robin"):
            raise ValueError(f"pick must be 'key' or 'round_robin', got {pick!r}")
        if not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be a non-negative integer, got {retries!r}")
        self.engine = Engine(addr, timeout=timeout, seed=seed)
        self.targets = self.engine.targets
        self.retries, self.pick = retries, pick
        self._rr = 0
        self.last_reply = None

    def close(self):
        self.engine.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @staticmethod
    def _check_key(key):
        if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key < 1 << 64:
            raise ValueError(f"key {key!r} is not an unsigned 64-bit integer")

    def request(self, op, key, value=b"", flags=0, seq=0):
        """Send one request (with retries on timeout) and return the reply :class:`Header`
        whatever its status."""
        self._check_key(key)
        value = bytes(value)
        if len(value) > MAX_VALUE:
            raise ValueError(f"value of {len(value)} bytes exceeds MAX_VALUE={MAX_VALUE}")
        n = len(self.targets)
        if self.pick == "key":
            first = key % n
        else:
            first, self._rr = self._rr, (self._rr + 1) % n
        for attempt in range(self.retries + 1):
            c = self.engine.send(op, key, value, target=(first + attempt) % n, flags=flags,
                                 seq=seq)
            self.engine.wait(c)
            if c.reply is not None:
                self.last_reply = c.reply
                return c.reply
        raise RequestTimeout(f"{Op.name(op)} key={key}: no reply from "
                             f"{', '.join(f'{a}:{p}' for a, p in self.targets)} after "
                             f"{self.retries + 1} attempt(s) of "
                             f"{self.engine.timeout_ns / 1e9:g} s")

    def _ok(self, op, key, value=b"", allow=(Status.OK,)):
        r = self.request(op, key, value)
        if r.status in allow:
            return r
        exc = _STATUS_EXC.get(r.status, ServerError)
        raise exc(f"{Op.name(op)} key={key}: server {r.server_id} answered "
                  f"{Status.NAMES.get(r.status, f'status {r.status}')}", reply=r)

    def get(self, key):
        """The value stored under ``key``, or None when it is not there."""
        r = self._ok(Op.GET, key, allow=(Status.OK, Status.NOT_FOUND))
        return r.value if r.status == Status.OK else None

    def put(self, key, value):
        self._ok(Op.PUT, key, value)

    def delete(self, key):
        """True if the key was there (and is now deleted), False if it was not."""
        return self._ok(Op.DEL, key, allow=(Status.OK, Status.NOT_FOUND)).status == Status.OK
