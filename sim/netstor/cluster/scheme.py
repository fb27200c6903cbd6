"""What clients do per request in a simulated experiment: a *scheme*.

The simulator owns arrivals, request ids, draws, timeouts and latency accounting
(:class:`netstor.cluster.host.Client`); a scheme decides, per request, where it goes and with
which header (which server, which offload header, copies) and how a reply is recognised, and it
may configure the switch and put its own logic on extra hosts (a coordinator). The storage
servers are generic: they speak the storage protocol and every registered offload's codec
(:class:`netstor.agent.codec.ServerCodec`), as ``netstor-server`` does.

``direct`` is built in; an offload adds its own schemes through its ``sim_schemes`` hook
(:attr:`netstor.offload.Offload.sim_schemes`: ``{name: SimScheme subclass}``);
:func:`sim_schemes` lists them all.

A scheme's hooks, called by :class:`netstor.cluster.rack.RackRun`:

* ``extra_hosts``: names of hosts it needs besides clients and servers (on the servers' side).
* ``switch_config(run)``: the switch configuration (:mod:`netstor.config` format), or None for
  the rack's routes (``run.route_config()``).
* ``setup(run)``: bind the clients' reply sockets, install logic on extra hosts.
* ``send(client, rid, i)``: send request ``rid`` (the client's ``i``-th); per-request draws are
  ``client.picks[i]`` (uniform) and ``client.keys[i]``.
* ``result(run)``: the scheme's own section of the result (or None).
"""
from __future__ import annotations

import functools

from netstor.proto import MAGIC, VERSION, Op, STORAGE, STORAGE_UDP_PORT

__all__ = ["SimScheme", "Direct", "sim_schemes", "storage_request", "storage_req_id"]

_STORAGE = STORAGE.struct


def storage_request(op, key, rid):
    """The 32-byte storage request header (no value) of request ``rid``."""
    return _STORAGE.pack(MAGIC, VERSION, op, 0, 0, 0, rid & 0xFFFF_FFFF, 0, 0, 0, key, 0)


def storage_req_id(data):
    """``req_id`` of a storage reply (None when ``data`` is not a netstor reply)."""
    if len(data) < 32 or data[0:2] != b"NS" or not data[3] & 0x80:
        return None
    return int.from_bytes(data[8:12], "big")


class SimScheme:
    name = ""
    help = ""
    #: UDP port the clients send from (replies come back to it)
    client_port = 40000
    #: ``{option: default}``; the constructor takes them as keywords
    options = {}
    #: how the RTL replay test traces this scheme (``netstor.cluster.replay``): None when its
    #: switch configuration is another scheme's (client-side schemes: plain routed traffic),
    #: else ``{"topology": "rack" | "fattree", "scheme_options": {...}}``
    replay = None
    extra_hosts = ()

    def __init__(self, **options):
        for k, default in self.options.items():
            setattr(self, k, options.pop(k, default))
        if options:
            raise TypeError(f"scheme {self.name}: unknown option(s) {sorted(options)}")

    def config(self):
        """The scheme's options, for the result."""
        return {k: getattr(self, k) for k in self.options}

    def switch_config(self, run):
        return None

    def setup(self, run):
        for c in run.clients:
            c.host.bind(self.client_port, functools.partial(self.on_reply, c))

    def on_reply(self, client, view):
        rid = storage_req_id(view.payload)
        if rid is None:
            client.stray += 1
        else:
            client.complete(rid)

    def send(self, client, rid, i):
        raise NotImplementedError

    def result(self, run):
        return None


class Direct(SimScheme):
    """Plain storage GETs straight to one server, uniformly at random (``picks``); no
    offload header, the switch only routes."""
    name = "direct"
    help = "plain requests to a random server"
    replay = {"topology": "rack"}

    def setup(self, run):
        super().setup(run)
        self._ips = [s.host.ip for s in run.servers]

    def send(self, client, rid, i):
        s = int(client.picks[i] * len(self._ips))
        client.host.send(self._ips[s], self.client_port, STORAGE_UDP_PORT,
                         storage_request(Op.GET, client.keys[i], rid))


def sim_schemes():
    """``{name: SimScheme subclass}``: ``direct`` and every registered offload's."""
    from netstor.offloads import offloads
    out = {"direct": Direct}
    for off in offloads():
        extra = off.hook("sim_schemes")
        for name, cls in (extra or {}).items():
            if name in out:
                raise ValueError(f"simulator scheme {name!r} of offload {off.name} is taken")
            out[name] = cls
    return out
