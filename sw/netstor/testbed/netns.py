"""Linux network-namespace plumbing for the test bed (``ip`` from iproute2; needs root).

Everything here happens *inside* namespaces this module creates: links are created directly
in their target namespace (``ip link add NAME netns NS type veth peer name PEER netns NS2``),
so no interface, address or route ever appears in the root namespace. Namespace names carry
a per-process prefix (:func:`rack_prefix`, ``nst<pid>x<n>-``) so parallel racks (pytest-xdist
workers) never collide, and :func:`cleanup_stale` can find the leftovers of a process that
died without tearing down (deleting a namespace destroys its veths and bridges too).
"""
from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import subprocess
import time

__all__ = ["NetnsError", "check_prereqs", "ip", "ns_exec", "sysctl", "add_ns", "del_ns",
           "list_ns", "ns_pids", "kill_ns_pids", "rack_prefix", "cleanup_stale", "mac_str",
           "PREFIX"]

#: every namespace the test bed creates starts with this
PREFIX = "nst"
_NAME_RE = re.compile(rf"^{PREFIX}(\d+)x(\d+)-")
_counter = itertools.count()


class NetnsError(RuntimeError):
    """A precondition is missing (not root, no ``ip``, no netns support) or a command failed."""


def check_prereqs():
    """Raise :class:`NetnsError` with a clear message unless we can build namespaces."""
    if os.geteuid() != 0:
        raise NetnsError("the netstor test bed needs root (network namespaces, veth pairs, "
                         "bridges, AF_PACKET sockets): run it as root, e.g. with sudo")
    for tool in ("ip",):
        if shutil.which(tool) is None:
            raise NetnsError(f"`{tool}` (iproute2) is not installed or not on PATH")
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if r.returncode != 0:
        raise NetnsError("`ip netns list` failed; this kernel/container does not support "
                         f"network namespaces here: {r.stderr.strip()}")


def _run(argv, *, check=True, timeout=20):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise NetnsError(f"command failed ({r.returncode}): {' '.join(argv)}: "
                         f"{r.stderr.strip() or r.stdout.strip()}")
    return r


def ip(*args, ns=None, check=True):
    """Run ``ip [-n ns] args...``."""
    argv = ["ip"] + (["-n", ns] if ns else []) + [str(a) for a in args]
    return _run(argv, check=check)


def ns_exec(ns, argv):
    """The argv that runs ``argv`` inside namespace ``ns``."""
    return ["ip", "netns", "exec", ns] + [str(a) for a in argv]


def sysctl(ns, *settings, check=True):
    """``sysctl -w`` inside ``ns`` (settings like ``net.ipv4.ip_forward=0``)."""
    return _run(ns_exec(ns, ["sysctl", "-q", "-w", *settings]), check=check)


def list_ns():
    """Names of all namespaces ``ip netns`` knows."""
    r = _run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def add_ns(name):
    ip("netns", "add", name)
    ip("link", "set", "lo", "up", ns=name)
    # no IPv6 (router solicitations, MLD, DAD): the segments carry only our traffic
    sysctl(name, "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1",
           check=False)


def ns_pids(name):
    r = _run(["ip", "netns", "pids", name], check=False)
    return [int(x) for x in r.stdout.split() if x.isdigit()]


def kill_ns_pids(name, grace=1.0):
    """SIGTERM then SIGKILL every process still running inside namespace ``name``."""
    pids = ns_pids(name)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            pids = [p for p in pids if _alive(p)]
            if not pids:
                return
            time.sleep(0.02)


def del_ns(name):
    """Delete namespace ``name`` (its veths, bridges, addresses go with it)."""
    kill_ns_pids(name)
    ip("netns", "delete", name, check=False)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie counts as dead
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def rack_prefix():
    """A name prefix unique to this process and call: ``nst<pid>x<n>-``."""
    return f"{PREFIX}{os.getpid()}x{next(_counter)}-"


def cleanup_stale(*, all_racks=False, verbose=False):
    """Delete test-bed namespaces left behind by processes that no longer run (or, with
    ``all_racks``, every test-bed namespace). Returns the deleted names."""
    gone = []
    for name in list_ns():
        m = _NAME_RE.match(name)
        if not m:
            continue
        owner = int(m.group(1))
        if not all_racks and (owner == os.getpid() or _alive(owner)):
            continue
        del_ns(name)
        gone.append(name)
        if verbose:
            print(f"deleted stale namespace {name}")
    return gone


def mac_str(mac: int) -> str:
    return ":".join(f"{(mac >> (8 * i)) & 0xFF:02x}" for i in range(5, -1, -1))


def mac_int(mac: str) -> int:
    return int(mac.replace(":", "").replace("-", ""), 16)


if __name__ == "__main__":       # python -m netstor.testbed.netns [--all]: clean up leftovers
    import sys
    check_prereqs()
    names = cleanup_stale(all_racks="--all" in sys.argv[1:], verbose=True)
    print(f"{len(names)} stale namespace(s) deleted")
