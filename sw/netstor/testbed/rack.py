"""A rack on one machine: client and server hosts in network namespaces around the switch.

::

    client ns c0 ─┐                                          ┌─ server ns s0
    client ns c1 ─┼─ br0 ── p0 ═[ switch process ]═ p1 ── br1 ─┼─ server ns s1
                  │  (segment 0: 10.77.0.0/24)  (segment 1: 10.77.1.0/24)  └─ ...
                  └──────────── all of this inside the switch ns ─────────

* One namespace per host (``<prefix>c<i>`` / ``<prefix>s<i>``) and one for the switch
  (``<prefix>sw``); ``<prefix>`` is ``nst<pid>x<n>-`` (:func:`netstor.testbed.netns.rack_prefix`).
* Two L2 segments, each a Linux bridge in the switch namespace (``br0`` for wire port 0, the
  clients; ``br1`` for wire port 1, the servers). A host's ``eth0`` is a veth whose peer
  (``c<i>``/``s<i>``) is a bridge port; the switch process owns the veth ``p0``/``p1`` whose
  peer ``p0b``/``p1b`` is in the bridge.
* Deterministic MACs (:func:`host_mac`, :func:`port_mac`); hosts have ``10.77.<seg>.<10+i>/24``,
  a default route via ``10.77.<seg>.1`` and a PERMANENT neighbour entry for that gateway with
  the switch port's MAC (no ARP). IPv6 is off in every namespace.
* :meth:`Rack.config` is the table configuration (netstor config format): one ``/32`` route
  per host in ``l3.routes`` (out of the host's segment, destination MAC the host's, source
  MAC the switch port's); everything else goes to the host (the default).

Teardown always happens: :class:`Rack` is a context manager, registers itself with ``atexit``,
and turns SIGTERM (and SIGHUP) into ``SystemExit`` while it is up (SIGINT already raises
``KeyboardInterrupt``), so the ``with`` block unwinds; processes started with
:meth:`Rack.spawn` are stopped (their process groups), then every namespace is deleted, also
when setup was interrupted half-way. :func:`netstor.testbed.netns.cleanup_stale` removes
leftovers of racks whose process died (``python -m netstor.testbed.netns``).
"""
from __future__ import annotations

import atexit
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from . import netns
from .netns import ip

__all__ = ["Rack", "Host", "Proc", "host_mac", "port_mac", "route_config", "route_writes"]

SUBNET = "10.77"


def port_mac(port: int) -> int:
    """The MAC of switch wire port ``port`` (the hosts' gateway on that segment)."""
    return 0x024E53FF0000 | port


def host_mac(segment: int, index: int) -> int:
    return 0x024E53000000 | (segment << 8) | index


@dataclass
class Host:
    name: str           # "c0", "s2"
    ns: str             # namespace name
    segment: int        # 0 clients, 1 servers (= wire port)
    index: int
    ip: str
    mac: int
    gateway: str
    ifname: str = "eth0"

    @property
    def mac_str(self):
        return netns.mac_str(self.mac)


def route_config(hosts):
    """The table configuration (netstor config format) that routes to every host: one /32
    per host in ``l3.routes``, default ``to_host``. The one place routes are built."""
    entries = [{"prefix": f"{h.ip}/32", "action": "route",
                "params": {"port": h.segment, "dmac": netns.mac_str(h.mac),
                           "smac": netns.mac_str(port_mac(h.segment))}} for h in hosts]
    return {"tables": {"l3.routes": {"default": {"action": "to_host"}, "entries": entries}}}


def route_writes(hosts, pipeline=None):
    """:func:`route_config` as table writes for ``pipeline`` (default: the default one)."""
    from netstor.programs import default_pipeline
    from netstor.compiler import config_writes
    return config_writes(pipeline or default_pipeline(), route_config(hosts))


class Proc:
    """A process running in a namespace; its output lines are collected by a thread."""

    def __init__(self, name, argv, ns, *, log=None, env=None, cwd=None):
        self.name, self.ns, self.argv = name, ns, list(argv)
        self.lines = []
        self._cond = threading.Condition()
        self._log = open(log, "w") if log else None
        self.popen = subprocess.Popen(netns.ns_exec(ns, argv), stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      text=True, start_new_session=True, env=env, cwd=cwd,
                                      bufsize=1)
        self._t = threading.Thread(target=self._reader, daemon=True)
        self._t.start()

    @property
    def pid(self):
        return self.popen.pid

    def _reader(self):
        for line in self.popen.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
            if self._log:
                self._log.write(line)
                self._log.flush()
        with self._cond:
            self._cond.notify_all()

    def output(self):
        with self._cond:
            return "\n".join(self.lines)

    def wait_line(self, pattern, timeout=30.0):
        """The first output line matching ``pattern`` (regex); raises ``TimeoutError`` or
        ``RuntimeError`` (process exited) with the output so far."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for line in self.lines[seen:]:
                    if rx.search(line):
                        return line
                seen = len(self.lines)
                if self.popen.poll() is not None and not self._t.is_alive():
                    raise RuntimeError(f"{self.name} exited ({self.popen.returncode}) before "
                                       f"printing /{pattern}/:\n" + "\n".join(self.lines[-30:]))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self.name}: no /{pattern}/ within {timeout} s:\n"
                                       + "\n".join(self.lines[-30:]))
                self._cond.wait(min(left, 0.2))

    def running(self):
        return self.popen.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        """Send ``sig`` to the process, wait up to ``timeout``, then SIGKILL its whole process
        group (its own session: the process and whatever it started). Returns the exit code.
        The first signal goes to the process only, so it can stop its children in order
        (the RTL switch lets its simulation write its counters)."""
        pgid = self.popen.pid
        if self.popen.poll() is None:
            try:
                os.kill(self.popen.pid, sig)
                self.popen.wait(timeout)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        try:      # the leader is gone or late: nothing of its group may survive it
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        rc = self.popen.wait(5)
        self._t.join(2)
        if self._log:
            self._log.close()
            self._log = None
        return rc

    def wait(self, timeout=None):
        rc = self.popen.wait(timeout)
        self._t.join(2)
        return rc


_live_racks = []


def _atexit_teardown():
    for r in list(_live_racks):
        r.down()


atexit.register(_atexit_teardown)


class Rack:
    """``with Rack(n_clients=2, n_servers=3) as rack: ...`` (see the module doc)."""

    def __init__(self, n_clients=2, n_servers=3, *, prefix=None, workdir=None):
        if not (1 <= n_clients <= 100 and 1 <= n_servers <= 100):
            raise ValueError("1..100 clients and servers")
        self.prefix = prefix or netns.rack_prefix()
        self.sw_ns = self.prefix + "sw"
        self.clients = [self._host("c", 0, i) for i in range(n_clients)]
        self.servers = [self._host("s", 1, i) for i in range(n_servers)]
        self.procs: list[Proc] = []
        self.namespaces: list[str] = []      # created (or being created), deleted in down()
        self.switch: Proc | None = None
        self.workdir = Path(workdir) if workdir else None
        self._old_handlers = {}
        self._up = False

    def _host(self, kind, seg, i):
        return Host(name=f"{kind}{i}", ns=f"{self.prefix}{kind}{i}", segment=seg, index=i,
                    ip=f"{SUBNET}.{seg}.{10 + i}", mac=host_mac(seg, i),
                    gateway=f"{SUBNET}.{seg}.1")

    @property
    def hosts(self):
        return self.clients + self.servers

    def host(self, name):
        return next(h for h in self.hosts if h.name == name)

    # ---- lifecycle ------------------------------------------------------------------------
    def __enter__(self):
        self.up()
        return self

    def __exit__(self, *exc):
        self.down()
        return False

    def _install_signals(self):
        if threading.current_thread() is not threading.main_thread():
            return

        def to_exit(signum, frame):
            raise SystemExit(128 + signum)
        for s in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(s) in (signal.SIG_DFL, None):
                self._old_handlers[s] = signal.signal(s, to_exit)

    def _restore_signals(self):
        for s, h in self._old_handlers.items():
            try:
                signal.signal(s, h)
            except (ValueError, TypeError):
                pass
        self._old_handlers = {}

    def up(self):
        netns.check_prereqs()
        _live_racks.append(self)
        self._install_signals()
        self._up = True
        try:
            self._build()
        except BaseException:
            self.down()
            raise
        return self

    def _add_ns(self, name):
        self.namespaces.append(name)
        netns.add_ns(name)

    def _build(self):
        sw = self.sw_ns
        self._add_ns(sw)
        netns.sysctl(sw, "net.ipv4.ip_forward=0", check=False)
        for seg in (0, 1):
            br, p, pb = f"br{seg}", f"p{seg}", f"p{seg}b"
            ip("link", "add", br, "type", "bridge", "stp_state", "0", "mcast_snooping", "0",
               ns=sw)
            ip("link", "add", p, "type", "veth", "peer", "name", pb, ns=sw)
            ip("link", "set", p, "address", netns.mac_str(port_mac(seg)), ns=sw)
            ip("link", "set", pb, "master", br, ns=sw)
            for dev in (br, pb, p):
                ip("link", "set", dev, "up", ns=sw)
        for h in self.hosts:
            self._add_ns(h.ns)
            # created directly in the two namespaces: no name ever appears in the root ns
            ip("link", "add", h.ifname, "netns", h.ns, "type", "veth", "peer", "name", h.name,
               "netns", sw)
            ip("link", "set", h.ifname, "address", h.mac_str, ns=h.ns)
            ip("addr", "add", f"{h.ip}/24", "dev", h.ifname, ns=h.ns)
            ip("link", "set", h.ifname, "up", ns=h.ns)
            ip("route", "add", "default", "via", h.gateway, "dev", h.ifname, ns=h.ns)
            ip("neigh", "replace", h.gateway, "lladdr", netns.mac_str(port_mac(h.segment)),
               "dev", h.ifname, "nud", "permanent", ns=h.ns)
            ip("link", "set", h.name, "master", f"br{h.segment}", ns=sw)
            ip("link", "set", h.name, "up", ns=sw)

    def down(self):
        """Stop every process, delete every namespace (idempotent, never raises)."""
        if not self._up:
            return
        for p in reversed(self.procs):
            try:
                p.stop(timeout=5)
            except Exception:
                pass
        self.procs.clear()
        for name in reversed(self.namespaces):
            try:
                netns.del_ns(name)
            except Exception as e:    # keep going: the rest must go too
                print(f"rack teardown: {name}: {e}", file=sys.stderr)
        self.namespaces.clear()
        self._restore_signals()
        if self in _live_racks:
            _live_racks.remove(self)
        self._up = False

    # ---- configuration and processes -----------------------------------------------------
    def config(self):
        return route_config(self.hosts)

    def writes(self, pipeline=None):
        return route_writes(self.hosts, pipeline)

    def spawn(self, where, argv, *, name=None, log=None, env=None, cwd=None) -> Proc:
        """Start ``argv`` inside host ``where`` (a :class:`Host`, a host name, or "switch");
        it is stopped by :meth:`down` if still running."""
        if where == "switch":
            ns, label = self.sw_ns, "switch"
        else:
            h = where if isinstance(where, Host) else self.host(where)
            ns, label = h.ns, h.name
        p = Proc(name or f"{label}:{Path(str(argv[0])).name}", argv, ns, log=log, env=env,
                 cwd=cwd)
        self.procs.append(p)
        return p

    def run_on_clients(self, argv_for, out_dir, *, timeout, tag="", what="netstor-load"):
        """Run one process per client host at once and wait for all: ``argv_for(i, host,
        out)`` gives client ``i``'s command, which writes its result as JSON to ``out``
        (``out_dir/<tag><host>.json``). Returns ``{host name: result}``; a process that
        fails (or outlives ``timeout`` seconds) raises ``RuntimeError`` with its output."""
        procs, outs = {}, {}
        for i, h in enumerate(self.clients):
            outs[h.name] = Path(out_dir) / f"{tag}{h.name}.json"
            procs[h.name] = self.spawn(h, argv_for(i, h, outs[h.name]))
        res = {}
        for name, p in procs.items():
            rc = p.wait(timeout=timeout)
            if rc != 0:
                raise RuntimeError(f"{what} on {name} failed ({rc}):\n{p.output()}")
            res[name] = json.loads(outs[name].read_text())
        return res

    def start_switch(self, *, dataplane="model", stats_json=None, config_path=None,
                     extra_args=(), ready_timeout=30.0, log=None) -> Proc:
        """Write the route config (YAML) and start ``python -m netstor.testbed.switch`` in the
        switch namespace on ``p0``/``p1``; returns once it printed its ready line."""
        import json
        if config_path is None:
            d = self.workdir or Path("/tmp")
            config_path = d / f"{self.prefix}switch-config.json"
        Path(config_path).write_text(json.dumps(self.config(), indent=1))
        argv = [sys.executable, "-m", "netstor.testbed.switch", "--port0", "p0", "--port1",
                "p1", "--dataplane", dataplane, "--config", str(config_path)]
        if stats_json:
            argv += ["--stats-json", str(stats_json)]
        argv += list(extra_args)
        self.switch = self.spawn("switch", argv, name="switch", log=log)
        self.switch.wait_line(r"^netstor-switch ready", timeout=ready_timeout)
        return self.switch

    def stop_switch(self, timeout=30.0):
        """SIGTERM the switch; returns its output (final counters included)."""
        if self.switch is None:
            return ""
        self.switch.stop(signal.SIGTERM, timeout=timeout)
        return self.switch.output()
