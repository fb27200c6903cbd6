"""XORInc's timeout notifier: the controller's half of "a timeout frees the slot, counted, the
requester told" (``docs/xorinc.md``, "Timeouts").

The data plane frees an operation whose contributions stop arriving and counts it per op id
in memory ``xi.engine.expired`` (one 32-bit word per op id, wrapping; the golden model's and
the core's, read through the control window like any element memory). It sends no frame of
its own. :class:`TimeoutNotifier` polls that memory and, for each op id whose count grew,
sends one XORInc ``TIMEOUT`` (type 10) to the op's requester over UDP.

Where the op -> requester mapping comes from: the ``xorinc:`` section's ``clients``. The
controller gives each client a disjoint op-id range; a client given with its address
(``{ops: [lo, hi], requester: "ip:port"}``, :meth:`.config.Plan.op_requesters`) is told of
the timeouts of every op id in its range. The data plane keeps no per-op requester state; the
stripe and chunk are not known here (a client runs one operation per op id at a time and
matches the TIMEOUT by ``opid``).

The TIMEOUT message: the 26-byte header (:mod:`.header`), ``type`` 10, ``opid`` the op id,
``seq`` the op's expired count as read (so a receiver can tell two TIMEOUTs of one op id
apart), ``req_addr``/``req_port`` the requester, every other field 0, no data.

Counting: the notifier never writes the memory (no race with the data plane's increments);
it keeps the last count it saw per op id and sends when the word differs
(``(now - last) mod 2**32`` timeouts; one message per op id and poll, however many). Counts
present when it starts are its baseline (not reported). Op ids of clients without a
requester are counted in :attr:`TimeoutNotifier.unaddressed`.
"""
from __future__ import annotations

import logging
import socket
import threading

from .config import EXPIRED_MEMORY
from .header import T_TIMEOUT, XiHeader, frame_payload
from .program import N_OPS

__all__ = ["TimeoutNotifier", "timeout_message"]

log = logging.getLogger("netstor.offloads.xorinc.notify")


def timeout_message(opid, count, req_addr, req_port):
    """The TIMEOUT datagram's payload (module docstring)."""
    return frame_payload(XiHeader(type=T_TIMEOUT, flags=0, opid=opid, stripe=0, chunk=0,
                                  src=0, need=0, code=0, off=0, len=0,
                                  seq=count & 0xFFFFFFFF, req_addr=req_addr,
                                  req_port=req_port))


class TimeoutNotifier:
    """Polls ``xi.engine.expired`` and tells requesters (module docstring).

    ``read(memory, address) -> int``: the data plane's memory read (a
    :class:`netstor.api.Device`'s ``client.mem_read``, a ``CsrClient``'s, a golden model's
    ``mem_read``). ``requesters``: ``{op id: (ipv4 text, udp port)}``
    (:meth:`.config.Plan.op_requesters`). ``sock``: the UDP socket it sends from (default a
    new one; the controller's address), or ``send(payload, (ip, port))``: how a message
    leaves instead (the test bed's switch sends it through its data plane).
    ``before_poll``: called first in each poll (a model switch runs its timeout scan there)."""

    def __init__(self, read, requesters, *, sock=None, send=None, n_ops=N_OPS,
                 memory=EXPIRED_MEMORY, before_poll=None):
        bad = [op for op in requesters if not 0 <= op < n_ops]
        if bad:
            raise ValueError(f"op ids {bad} outside 0..{n_ops - 1}")
        self.read, self.memory, self.n_ops = read, memory, n_ops
        self.requesters = dict(requesters)
        self.before_poll = before_poll
        self._own = sock is None and send is None
        self.sock = sock or (socket.socket(socket.AF_INET, socket.SOCK_DGRAM) if self._own
                             else None)
        self._send = send or self.sock.sendto
        self.last = [self.read(memory, op) for op in range(n_ops)]
        self.sent = 0               # TIMEOUT messages sent
        self.timeouts = 0           # timeouts seen (all op ids)
        self.unaddressed = 0        # timeouts of op ids no requester is configured for
        self.send_errors = 0
        self._thread = None
        self._stop = threading.Event()

    @classmethod
    def for_device(cls, dev, plan, **kw):
        """A notifier on a :class:`netstor.api.Device` for a computed ``xorinc:`` plan."""
        return cls(dev.client.mem_read, plan.op_requesters(), **kw)

    def poll(self):
        """One pass over every op id; returns ``[(op id, new timeouts, (ip, port) or None)]``
        for the op ids whose count changed (TIMEOUT sent to those with an address)."""
        if self.before_poll is not None:
            self.before_poll()
        out = []
        for op in range(self.n_ops):
            cur = self.read(self.memory, op)
            new = (cur - self.last[op]) & 0xFFFFFFFF
            if not new:
                continue
            self.last[op] = cur
            self.timeouts += new
            to = self.requesters.get(op)
            out.append((op, new, to))
            if to is None:
                self.unaddressed += new
                log.info("xorinc: op %d timed out (%d), no requester configured", op, new)
                continue
            self.sent += 1                  # counted first: whoever receives it sees it
            try:
                self._send(timeout_message(op, cur, _ip_int(to[0]), to[1]), to)
            except OSError as e:
                self.sent -= 1
                self.send_errors += 1
                log.warning("xorinc: TIMEOUT of op %d to %s failed: %s", op, to, e)
        return out

    # ---- a polling thread ------------------------------------------------------------------
    def start(self, interval=0.02):
        """Poll every ``interval`` seconds in a thread until :meth:`stop`."""
        if self._thread is not None:
            raise RuntimeError("notifier already started")
        if interval <= 0:
            raise ValueError(f"poll interval {interval} must be > 0")

        def loop():
            while not self._stop.wait(interval):
                try:
                    self.poll()
                except Exception:               # keep notifying; the failure is logged
                    log.exception("xorinc: timeout poll failed")

        self._thread = threading.Thread(target=loop, name="xorinc-timeouts", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._own:
            self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def _ip_int(text):
    import ipaddress
    return int(ipaddress.IPv4Address(text))
