"""NetClone and its paper's baselines as schemes of the cluster simulator
(:mod:`netstor.cluster`; the ``sim_schemes`` hook).

Every scheme draws the request's group from the same per-request uniform (``client.picks[i]``)
over the same list of ordered server pairs (:func:`.config.ordered_pairs`, group ``g`` = pair
``g``), so at one load the schemes see the same arrivals, the same pairs and, at a given
server, the same service time for the same request (common random numbers):

* ``direct`` (the simulator's own, the paper's no-cloning baseline): one server, ``pair[0]``
  of the drawn group (which is uniform over the servers).
* ``cclone`` -- client cloning (C-Clone, the paper's CLICLONE): plain requests to both servers of
  the drawn pair; the first reply counts, the second is a duplicate.
* ``netclone`` -- NetClone requests (group ``g``) to the service address; the switch, running
  the NetClone program configured by :func:`.config.netclone_config` (the test bed's
  configuration), clones when both candidates were idle at their last reply and drops the
  slower reply; the servers run NetClone's server codec (:class:`.codec.NetCloneCodec`).
* ``laedge`` -- LAEDGE (Primorac et al., NSDI '21) as the NetClone authors' evaluation runs it
  (``server.c``, coordinator role): a coordinator host between clients and servers keeps every
  server idle or busy (busy from dispatch until that server's reply: ``slots`` = 1 outstanding
  request per server), sends a request to two random idle servers when at least two are idle,
  to the idle one when one is, else queues it centrally; each server reply frees its server,
  the first reply of a request is relayed to the client (the second is dropped), and a queued
  request goes to the server that just replied. ``slots`` > 1 lets a server count as idle
  while it has fewer than ``slots`` outstanding requests (``slots`` = workers: per-worker
  idleness); ``cpu_ns`` is the coordinator's processing time per message (one core, FIFO; 0 by
  default: only the extra hops through the coordinator cost).
"""
from __future__ import annotations

import functools
from collections import deque

from netstor.cluster.scheme import SimScheme, storage_req_id, storage_request
from netstor.proto import Op, STORAGE_UDP_PORT

from .codec import NetCloneCodec
from .config import netclone_config, ordered_pairs
from .header import HEADER, NETCLONE_UDP_PORT, OP_REQ, POLICY_LEAST_LOADED, POLICY_RANDOM

__all__ = ["CClone", "NetCloneScheme", "Laedge", "SIM_SCHEMES", "COORDINATOR_PORT"]

#: the coordinator's UDP port towards the servers (their replies come back to it)
COORDINATOR_PORT = 7435
_NC = HEADER.struct
_POLICIES = {"random": POLICY_RANDOM, "least-loaded": POLICY_LEAST_LOADED}


class _Pairs(SimScheme):
    def setup(self, run):
        super().setup(run)
        self.pairs = ordered_pairs(len(run.servers))
        self.ips = [s.host.ip for s in run.servers]

    def group(self, client, i):
        return int(client.picks[i] * len(self.pairs))


class CClone(_Pairs):
    """Client cloning: both servers of the drawn pair."""
    name = "cclone"
    help = "client cloning (C-Clone): plain requests to both servers of a random pair"

    def send(self, client, rid, i):
        a, b = self.pairs[self.group(client, i)]
        data = storage_request(Op.GET, client.keys[i], rid)
        client.host.send(self.ips[a], self.client_port, STORAGE_UDP_PORT, data)
        client.host.send(self.ips[b], self.client_port, STORAGE_UDP_PORT, data)

    def result(self, run):
        return {"second_replies": sum(c.duplicates for c in run.clients)}


class NetCloneScheme(_Pairs):
    """NetClone requests to the service address; the switch clones and filters."""
    name = "netclone"
    replay = {"topology": "rack"}
    help = "NetClone requests to the service address (the switch clones and filters)"
    client_port = NETCLONE_UDP_PORT
    options = {"policy": "random"}

    def __init__(self, **options):
        super().__init__(**options)
        if self.policy not in _POLICIES:
            raise ValueError(f"policy must be one of {sorted(_POLICIES)}, got {self.policy!r}")
        self.codec = NetCloneCodec()
        self.cloned = 0

    def switch_config(self, run):
        setup = netclone_config(run.plan, run.plan_servers, policy=_POLICIES[self.policy])
        self.vip = bytes(int(x) for x in setup.vip.split("."))
        return setup.config

    def send(self, client, rid, i):
        head = _NC.pack(OP_REQ, 0, self.group(client, i), 0, 0, 0, 0, 0)
        client.host.send(self.vip, NETCLONE_UDP_PORT, NETCLONE_UDP_PORT,
                         head + storage_request(Op.GET, client.keys[i], rid))

    def on_reply(self, client, view):
        split = self.codec.split_reply(view.payload)
        rid = None if split is None else storage_req_id(split[1])
        if rid is None:
            client.stray += 1
        elif client.complete(rid) and split[0].clone:
            self.cloned += 1

    def result(self, run):
        counters = run.switch.model
        measured = sum(int((c.latency >= 0).sum()) for c in run.clients)
        return {"cloned_replies": self.cloned,
                "cloned_fraction": round(self.cloned / max(1, measured), 4),
                "filtered_in_switch": counters.mem_read("nc.filtered", 0),
                "clones_dropped_at_servers": sum(s.c.get("clones_dropped", 0)
                                                 for s in run.servers),
                "duplicates_at_clients": sum(c.duplicates for c in run.clients)}


class _Coordinator:
    """LAEDGE's coordinator on one host (see the module doc)."""

    def __init__(self, run, host, slots, cpu_ns):
        self.sim, self.host = run.sim, host
        self.ips = [s.host.ip for s in run.servers]
        self.index = {ip: k for k, ip in enumerate(self.ips)}
        self.slots, self.cpu_ns = slots, cpu_ns
        self.out = [0] * len(self.ips)        # outstanding requests per server
        self.queue = deque()
        self.reqs = {}                        # rid -> [client ip, client port, copies out]
        self.answered = set()
        self.pick = run.streams.counter("laedge/pick")
        self.busy_until = 0
        self.c = {"requests": 0, "cloned": 0, "single": 0, "queued": 0, "relayed": 0,
                  "second_replies_dropped": 0, "max_queue": 0}
        host.bind(STORAGE_UDP_PORT, functools.partial(self._cpu, self._from_client))
        host.bind(COORDINATOR_PORT, functools.partial(self._cpu, self._from_server))

    def _cpu(self, fn, view):
        if not self.cpu_ns:
            fn(view)
            return
        t = max(self.sim.now, self.busy_until) + self.cpu_ns
        self.busy_until = t
        self.sim.at(t, fn, view)

    def _to(self, s, payload):
        self.out[s] += 1
        self.host.send(self.ips[s], COORDINATOR_PORT, STORAGE_UDP_PORT, payload)

    def _from_client(self, view):
        rid = int.from_bytes(view.payload[8:12], "big")
        self.c["requests"] += 1
        self.reqs[rid] = [view.src_ip, view.sport, 0]
        idle = [s for s, n in enumerate(self.out) if n < self.slots]
        if len(idle) >= 2:
            i = int(self.pick.uniform(2 * rid) * len(idle))
            j = int(self.pick.uniform(2 * rid + 1) * (len(idle) - 1))
            j += j >= i
            self.reqs[rid][2] = 2
            self._to(idle[i], view.payload)
            self._to(idle[j], view.payload)
            self.c["cloned"] += 1
        elif idle:
            self.reqs[rid][2] = 1
            self._to(idle[0], view.payload)
            self.c["single"] += 1
        else:
            self.queue.append((rid, view.payload))
            self.c["queued"] += 1
            if len(self.queue) > self.c["max_queue"]:
                self.c["max_queue"] = len(self.queue)

    def _from_server(self, view):
        rid = storage_req_id(view.payload)
        s = self.index.get(view.src_ip)
        rec = self.reqs.get(rid)
        if s is None or rec is None:
            return
        self.out[s] -= 1
        rec[2] -= 1
        if rid in self.answered:
            self.c["second_replies_dropped"] += 1
        else:
            self.c["relayed"] += 1
            self.host.send(rec[0], STORAGE_UDP_PORT, rec[1], view.payload)
            if rec[2]:
                self.answered.add(rid)
        if not rec[2]:
            del self.reqs[rid]
            self.answered.discard(rid)
        if self.queue and self.out[s] < self.slots:
            qrid, payload = self.queue.popleft()
            self.reqs[qrid][2] = 1
            self._to(s, payload)


class Laedge(SimScheme):
    """LAEDGE: clients send plain requests to a coordinator host that clones when two servers
    are idle (see the module doc)."""
    name = "laedge"
    help = "LAEDGE: a coordinator host clones only when two servers are idle"
    extra_hosts = ("coord",)
    options = {"slots": 1, "cpu_ns": 0}

    def setup(self, run):
        super().setup(run)
        if self.slots < 1 or self.cpu_ns < 0:
            raise ValueError("laedge: slots >= 1 and cpu_ns >= 0")
        self.coord = _Coordinator(run, run.extra["coord"], int(self.slots), int(self.cpu_ns))
        self.coord_ip = run.extra["coord"].ip

    def send(self, client, rid, i):
        client.host.send(self.coord_ip, self.client_port, STORAGE_UDP_PORT,
                         storage_request(Op.GET, client.keys[i], rid))

    def result(self, run):
        return dict(self.coord.c, left_in_queue=len(self.coord.queue))


SIM_SCHEMES = {s.name: s for s in (CClone, NetCloneScheme, Laedge)}
