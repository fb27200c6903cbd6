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


# ---- netstor xorinc notify (the cli hook) ------------------------------------------------------
def cli(parser):
    """XORInc's ``cli`` hook (:class:`netstor.offload.Offload`): ``netstor xorinc notify CONFIG
    --device TARGET [--interval S] [--once] [--state FILE]``, the timeout notifier against a
    device with the op -> requester mapping of CONFIG's ``xorinc:`` section."""
    from netstor.cli import _positive_float
    sub = parser.add_subparsers(dest="xorinc_cmd", metavar="COMMAND", required=True)
    p = sub.add_parser(
        "notify", help="send TIMEOUT to requesters of timed-out ops (xi.engine.expired)",
        description="Poll TARGET's per-op expired counts (xi.engine.expired) and send one "
        "XORInc TIMEOUT per op id whose count grew to the requester CONFIG's xorinc: clients "
        "give it (UDP). One line per op id (netstor --json: JSON). Without --once: every "
        "--interval seconds until SIGINT/SIGTERM (exit 0), counts present at start are the "
        "baseline. With --once: one poll against the --state file's counts, or against zero "
        "without one (every non-zero count is reported). A bad CONFIG: exit 2; a device "
        "without xi.engine.expired: exit 1.")
    p.add_argument("config", help="a netstor configuration (.yaml/.toml/.json) with a xorinc: "
                   "section whose clients give requesters")
    p.add_argument("--device", dest="notify_device", metavar="TARGET",
                   help="the switch (unix:PATH, pcie:BDF, ...; default the global --device "
                   "or NETSTOR_DEVICE; the global --schema names its schema)")
    p.add_argument("--interval", type=_positive_float, default=1.0, metavar="S",
                   help="seconds between polls (default 1)")
    p.add_argument("--once", action="store_true", help="poll once, print what was sent, exit")
    p.add_argument("--state", metavar="FILE", help="the last counts seen (JSON list): the "
                   "baseline when it exists, rewritten after every poll")
    return _run


def _load_plan(path):
    from netstor.cli import UsageError
    from netstor.config import ConfigError, load_config

    from .config import plan
    try:
        cfg = load_config(path)
    except ConfigError as e:
        raise UsageError(str(e)) from None
    if "xorinc" not in cfg:
        raise UsageError(f"{path}: no xorinc: section")
    try:
        p = plan(cfg["xorinc"])
    except (ValueError, KeyError, TypeError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        raise UsageError(f"{path}: {msg}") from None
    if not p.op_requesters():
        raise UsageError(f"{path}: xorinc: no client gives a requester "
                         "({ops: [lo, hi], requester: 'ip:port'}): no TIMEOUT could be sent")
    return p


def _read_state(path, n_ops):
    import json
    import os

    from netstor.cli import UsageError
    if path is None or not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            v = json.load(f)
    except (OSError, ValueError) as e:
        raise UsageError(f"--state {path}: {e}") from None
    if (not isinstance(v, list) or len(v) != n_ops
            or not all(isinstance(x, int) and 0 <= x < 2 ** 32 for x in v)):
        raise UsageError(f"--state {path}: expected a list of {n_ops} 32-bit counts")
    return v


def _write_state(path, last):
    import json
    import os
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(list(last), f)
    os.replace(tmp, path)


def _report(rows, n, as_json):
    import json
    for op, new, to in rows:
        count = n.last[op]
        if as_json:
            print(json.dumps({"op": op, "new": new, "count": count,
                              "requester": None if to is None else f"{to[0]}:{to[1]}",
                              "sent": to is not None}), flush=True)
        elif to is None:
            print(f"op {op}: {new} timeout(s), count {count}: no requester, not sent",
                  flush=True)
        else:
            print(f"TIMEOUT op {op} -> {to[0]}:{to[1]}: {new} timeout(s), count {count}",
                  flush=True)


def _run(args):
    import argparse
    import json
    import os
    import signal

    from netstor.cli import UsageError, open_device
    p = _load_plan(args.config)
    target = (getattr(args, "notify_device", None) or args.device
              or os.environ.get("NETSTOR_DEVICE"))
    if target is None:
        raise UsageError("xorinc notify: give --device TARGET (the switch to poll)")
    dev = open_device(argparse.Namespace(**{**vars(args), "device": target}))
    try:
        mem = {m["name"]: m for m in dev.schema["memories"]}.get(EXPIRED_MEMORY)
        if mem is None:
            raise RuntimeError(f"{target}: no {EXPIRED_MEMORY} memory (a device without "
                               "XORInc's engine)")
        n_ops = mem["depth"]
        bad = sorted(op for op in p.op_requesters() if op >= n_ops)
        if bad:
            raise UsageError(f"{args.config}: op ids {bad[0]}..{bad[-1]} outside the "
                             f"device's 0..{n_ops - 1}")
        base = _read_state(args.state, n_ops)
        with TimeoutNotifier.for_device(dev, p, n_ops=n_ops) as n:
            if base is not None:
                n.last = list(base)
            elif args.once:
                n.last = [0] * n_ops
            if args.once:
                rows = n.poll()
                if args.state:
                    _write_state(args.state, n.last)
                if args.json:
                    print(json.dumps([{"op": op, "new": new, "count": n.last[op],
                                       "requester": None if to is None else f"{to[0]}:{to[1]}",
                                       "sent": to is not None} for op, new, to in rows]))
                else:
                    _report(rows, n, False)
                return 1 if n.send_errors else 0
            if not args.json:
                print(f"xorinc notify: polling {target} every {args.interval:g} s, "
                      f"{len(n.requesters)} op id(s) with a requester", flush=True)
            return _loop(n, args, signal)
    finally:
        dev.close()


def _loop(n, args, signal):
    stop = threading.Event()
    old = {}
    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGINT, signal.SIGTERM):
            old[s] = signal.signal(s, lambda *_: stop.set())
    try:
        while not stop.is_set():
            try:
                rows = n.poll()
            except OSError as e:                # the device went away: exit 1, one line
                raise RuntimeError(f"reading {EXPIRED_MEMORY}: {e}") from None
            if args.state and rows:
                _write_state(args.state, n.last)
            _report(rows, n, args.json)
            stop.wait(args.interval)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if not args.json:
        print(f"xorinc notify: {n.sent} TIMEOUT(s) sent, {n.timeouts} timeout(s) seen, "
              f"{n.unaddressed} without a requester, {n.send_errors} send error(s)", flush=True)
    return 0
