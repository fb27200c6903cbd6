"""Nodes and links: how frames move between hosts and switches.

* A :class:`Link` is one direction of a cable from a node's port to another node's port: a
  propagation latency (ns) and, when given a rate, serialisation of every frame at that rate
  (frames queue FIFO behind each other: the link is busy until the previous frame has left).
  Wire size = frame + FCS + preamble + inter-frame gap (:func:`netstor.cluster.frames.wire_bytes`).
* A node's port holds one or more outgoing links. One link: every frame out of that port takes
  it (a point-to-point cable). Several links: the port leads to an L2 segment (a bridge, as in
  the test bed, where each switch port is a Linux bridge of hosts) and the frame takes the link
  towards the node that owns its destination MAC; a frame for no MAC on the segment is dropped
  and counted (``Node.unknown_mac``).
* :class:`Network` owns the nodes and wires them: ``connect(a, pa, b, pb, latency_ns, gbps)``
  makes both directions.
"""
from __future__ import annotations

__all__ = ["Link", "Node", "Network"]


class Link:
    __slots__ = ("sim", "src", "dst", "dst_port", "latency_ns", "ps_per_byte", "busy_until",
                 "frames", "bytes")

    def __init__(self, sim, src, dst, dst_port, latency_ns=0, gbps=None):
        if latency_ns < 0:
            raise ValueError(f"link latency {latency_ns} ns is negative")
        if gbps is not None and gbps <= 0:
            raise ValueError(f"link rate {gbps} Gb/s is not positive")
        self.sim, self.src, self.dst, self.dst_port = sim, src, dst, dst_port
        self.latency_ns = int(latency_ns)
        # integer picoseconds per byte (100 Gb/s: 80 ps), 0 = no serialisation delay
        self.ps_per_byte = 0 if gbps is None else round(8000 / gbps)
        self.busy_until = 0
        self.frames = self.bytes = 0

    def __repr__(self):
        return f"Link({self.src.name} -> {self.dst.name}:{self.dst_port})"

    def send(self, frame, t):
        """Put ``frame`` on the link at time ``t`` (>= now); it reaches the far end after
        queueing, serialisation and the latency."""
        n = len(frame)
        self.frames += 1
        self.bytes += n
        if self.ps_per_byte:
            start = t if t > self.busy_until else self.busy_until
            # frames.wire_bytes(n) inline: at least 60 bytes, + FCS, preamble and gap (24)
            t = start - (-((n if n > 60 else 60) + 24) * self.ps_per_byte // 1000)
            self.busy_until = t
        self.sim.at(t + self.latency_ns, self.dst.receive, frame, self.dst_port)


class Node:
    """Base of hosts and switches: ``name``, ``macs`` (port -> MAC bytes), the outgoing links
    per port. Subclasses implement ``receive(frame, port)`` (called at the arrival time)."""

    def __init__(self, net, name):
        self.net, self.sim, self.name = net, net.sim, name
        self.macs = {}                # port -> 6-byte MAC of this node on that port
        self._out = {}                # port -> [links]
        self._by_mac = {}             # port -> {dst MAC: link}
        self.unknown_mac = 0
        net._add(self)

    def __repr__(self):
        return f"{type(self).__name__}({self.name})"

    def links(self, port):
        return list(self._out.get(port, ()))

    def transmit(self, port, frame, t=None):
        """Send ``frame`` out of ``port`` at ``t`` (default now)."""
        t = self.sim.now if t is None else t
        links = self._out.get(port)
        if not links:
            self.unknown_mac += 1
            return False
        if len(links) == 1:
            links[0].send(frame, t)
            return True
        link = self._by_mac[port].get(frame[0:6])
        if link is None:
            self.unknown_mac += 1
            return False
        link.send(frame, t)
        return True

    def receive(self, frame, port):
        raise NotImplementedError


class Network:
    """The nodes of one simulation and their cables."""

    def __init__(self, sim):
        self.sim = sim
        self.nodes = {}

    def _add(self, node):
        if node.name in self.nodes:
            raise ValueError(f"node name {node.name!r} is used twice")
        self.nodes[node.name] = node

    def __getitem__(self, name):
        return self.nodes[name]

    def connect(self, a, pa, b, pb, *, latency_ns=0, gbps=None):
        """A cable between ``a``'s port ``pa`` and ``b``'s port ``pb`` (both directions, the same
        latency and rate); both ports must have a MAC (``node.macs[port]``)."""
        for n, p in ((a, pa), (b, pb)):
            if p not in n.macs:
                raise ValueError(f"{n.name} has no MAC on port {p}")
        for x, px, y, py in ((a, pa, b, pb), (b, pb, a, pa)):
            link = Link(self.sim, x, y, py, latency_ns, gbps)
            x._out.setdefault(px, []).append(link)
            by = x._by_mac.setdefault(px, {})
            peer = y.macs[py]
            if peer in by:
                raise ValueError(f"{x.name} port {px}: two nodes with MAC {peer.hex()}")
            by[peer] = link
        return self

    def links(self):
        return [link for n in self.nodes.values() for ls in n._out.values() for link in ls]
