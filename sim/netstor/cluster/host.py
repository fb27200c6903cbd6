"""End hosts of the simulated cluster: a NIC with UDP sockets (:class:`Host`), the storage
server (:class:`Server`) and the open-loop client (:class:`Client`).

A host sends real frames (:mod:`netstor.cluster.frames`) to its gateway (the switch port it is
cabled to, or the peer of a back-to-back cable) and accepts frames addressed to its MAC and IP,
handing the UDP payload to the socket bound to the destination port; anything else is dropped
and counted. Hosts add no processing delay of their own: a host's stack and NIC are part of
its link's latency.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from netstor.proto import HEADER_LEN, MAGIC, STORAGE, STORAGE_UDP_PORT, VERSION, Op, Status

from .frames import ip4, ip_str, mac, parse_udp, udp_frame, verify_checksums
from .net import Node

__all__ = ["Host", "Server", "Client", "SERVICE_STRIDE"]

#: service draws are indexed ``request id * SERVICE_STRIDE + server index``
SERVICE_STRIDE = 1024
_STORAGE = STORAGE.struct


class Host(Node):
    """One end host: ``mac``, ``ip`` (bytes; ``ip_str`` text), one NIC on port 0."""

    def __init__(self, net, name, mac_addr, ip_addr, gateway_mac, *, udp_checksum=True,
                 check_checksums=False):
        super().__init__(net, name)
        self.mac, self.ip = mac(mac_addr), ip4(ip_addr)
        self.ip_str = ip_str(self.ip)
        self.gateway = mac(gateway_mac)
        self.macs[0] = self.mac
        self.udp_checksum, self.check_checksums = udp_checksum, check_checksums
        self.sockets = {}
        self.sent = self.received = 0
        self.dropped = {"not_udp": 0, "not_ours": 0, "no_socket": 0, "bad_checksum": 0}
        self._ident = 0

    def bind(self, port, handler):
        """Deliver datagrams to UDP ``port`` as ``handler(view)`` (:class:`frames.UdpView`)."""
        if port in self.sockets:
            raise ValueError(f"{self.name}: UDP port {port} is taken")
        self.sockets[port] = handler

    def send(self, dst_ip, sport, dport, payload, t=None):
        """One datagram to ``dst_ip`` (4 bytes) through the gateway."""
        self._ident = (self._ident + 1) & 0xFFFF
        frame = udp_frame(self.gateway, self.mac, self.ip, dst_ip, sport, dport, payload,
                          ident=self._ident, udp_checksum=self.udp_checksum)
        self.sent += 1
        self.transmit(0, frame, t)

    def receive(self, frame, port):
        v = parse_udp(frame)
        if v is None:
            self.dropped["not_udp"] += 1
            return
        if v.dst_mac != self.mac or v.dst_ip != self.ip:
            self.dropped["not_ours"] += 1
            return
        if self.check_checksums and not verify_checksums(frame):
            self.dropped["bad_checksum"] += 1
            return
        h = self.sockets.get(v.dport)
        if h is None:
            self.dropped["no_socket"] += 1
            return
        self.received += 1
        h(v)


class Server:
    """A storage server on ``host``: ``workers`` workers taking requests from one FIFO queue,
    the storage protocol on UDP 7430 and every codec in ``codecs`` (an offload's
    :class:`netstor.agent.codec.ServerCodec`) on the codec's default port, with the semantics of
    ``netstor-server`` (:mod:`netstor.agent.server`): the codec's ``admit`` sees ``pending``
    (queued + in service) and ``workers``; a reply carries ``queue_len`` = pending (this request
    included) and ``service_ns``; the codec's reply header gets ``load`` = the queue a new
    request would wait in once this reply has gone. No storage engine: every request is answered
    ``OK`` (a GET with ``value_len`` zero bytes of value). ``queue_limit`` (None: unbounded)
    answers ``BUSY`` when that many requests wait.

    The service time of request ``r`` here is ``service.ns(u, v, index, now)`` with
    ``u = draws[0].uniform(r * SERVICE_STRIDE + index)`` (``v`` likewise from ``draws[1]``).
    """

    def __init__(self, host, index, server_id, workers, service, draws, *, codecs=(),
                 value_len=0, queue_limit=None):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if index >= SERVICE_STRIDE:
            raise ValueError(f"server index {index} >= {SERVICE_STRIDE}")
        self.host, self.sim = host, host.sim
        self.index, self.server_id, self.workers = index, server_id, workers
        self.service, (self._u, self._v) = service, draws
        self.value = bytes(value_len)
        self.queue_limit = queue_limit
        self.pending = 0                  # queued + in service
        self.in_service = 0
        self.queue = deque()
        self.busy_ns = 0                  # total service time (utilisation)
        self.log = None                   # a list: (req_id, start ns, service ns) per request
        self.c = {"served": 0, "busy": 0, "bad_request": 0, "dropped": 0}
        host.bind(STORAGE_UDP_PORT, self._plain)
        self.codecs = list(codecs)
        for codec in self.codecs:
            self.c[f"{codec.prefix}_received"] = 0
            self.c[f"{codec.prefix}_replies"] = 0
            for name in codec.extra_counters:
                self.c[name] = 0
            host.bind(codec.default_port, self._offload_handler(codec))

    def _offload_handler(self, codec):
        def handle(view):
            self.c[f"{codec.prefix}_received"] += 1
            split = codec.split_request(view.payload)
            if split is None:
                self.c["dropped"] += 1
                return
            head, body = split
            self._request(view, body, (codec, head))
        return handle

    def _plain(self, view):
        self._request(view, view.payload, None)

    def _request(self, view, body, via):
        # netstor.proto.Header.unpack's checks, on the raw fields (the hot path)
        if len(body) < HEADER_LEN:
            self.c["bad_request"] += 1
            return
        magic, ver, op, _st, flags, _sid, req_id, _ql, vlen, _sns, key, seq = \
            _STORAGE.unpack_from(body)
        if magic != MAGIC or ver != VERSION or vlen != len(body) - HEADER_LEN \
                or op not in Op.NAMES:
            self.c["bad_request"] += 1        # also replies (bit 7 set: not a request op)
            return
        if via is not None:
            why = via[0].admit(via[1], self.pending, self.workers)
            if why is not None:
                self.c[why] += 1
                return
        job = (view, op, flags, req_id, key, seq, via)
        if self.queue_limit is not None and self.pending - self.in_service >= self.queue_limit:
            self.c["busy"] += 1
            self._reply(job, Status.BUSY, 0, queued=False)
            return
        self.pending += 1
        if self.in_service < self.workers:
            self._start(job)
        else:
            self.queue.append(job)

    def _start(self, job):
        self.in_service += 1
        i = job[3] * SERVICE_STRIDE + self.index
        t = self.service.ns(self._u.uniform(i), self._v.uniform(i), self.index, self.sim.now)
        self.busy_ns += t
        if self.log is not None:
            self.log.append((job[3], self.sim.now, t))
        self.sim.after(t, self._done, job, t)

    def _done(self, job, service_ns):
        self.c["served"] += 1
        self._reply(job, Status.OK, service_ns)
        self.pending -= 1
        self.in_service -= 1
        if self.queue:
            self._start(self.queue.popleft())

    def _reply(self, job, status, service_ns, queued=True):
        """The reply of ``netstor.proto.Header.reply`` (op | 0x80, the request's key, req_id,
        seq and flags; our id; queue_len = pending; service_ns), behind the codec's header."""
        view, op, flags, req_id, key, seq, via = job
        value = self.value if op == Op.GET and status == Status.OK else b""
        data = _STORAGE.pack(MAGIC, VERSION, op | 0x80, status, flags, self.server_id, req_id,
                             min(self.pending, 0xFFFF), len(value), min(service_ns, 0xFFFF_FFFF),
                             key, seq) + value
        if via is not None:
            codec, head = via
            # the queue a new request would wait in, without this request
            load = self.pending - (1 if queued else 0) - self.workers + 1
            self.c[f"{codec.prefix}_replies"] += 1
            data = codec.reply_header(head, self.server_id, load, service_ns) + data
        self.host.send(view.src_ip, view.dport, view.sport, data)

    def stats(self, span_ns=None):
        """Counters; ``utilisation``: service time started per worker over ``span_ns`` (above
        1 when more work arrived than the workers can do in that span: overload)."""
        out = dict(self.c)
        out["pending"] = self.pending
        if span_ns:
            out["utilisation"] = round(self.busy_ns / (span_ns * self.workers), 4)
        return out


class Client:
    """An open-loop client on ``host``: request ``i`` is due at ``arrivals_ns[i]`` whatever
    happened before (Poisson when the gaps are exponential); ``scheme.send(self, rid, i)``
    sends it. Request ids are ``rid = i * stride + offset`` (unique across clients). Latency is
    measured from the *scheduled* time to the first reply; a later reply is a duplicate; no reply
    within ``timeout_ns`` is a timeout, kept in the samples as ``timeout_ns``
    (:meth:`samples`)."""

    def __init__(self, host, index, scheme, arrivals_ns, *, stride, offset, timeout_ns):
        self.host, self.sim, self.index, self.scheme = host, host.sim, index, scheme
        self.arrivals = np.asarray(arrivals_ns, dtype=np.int64)
        self.n = len(self.arrivals)
        self.stride, self.offset = stride, offset
        self.timeout_ns = int(timeout_ns)
        self.latency = np.full(self.n, -1, dtype=np.int64)
        self.done_at = np.full(self.n, -1, dtype=np.int64)
        self.duplicates = self.stray = 0
        self._arr = self.arrivals.tolist()

    def rid(self, i):
        return i * self.stride + self.offset

    def start(self):
        if self.n:
            self.sim.at(self._arr[0], self._send, 0)

    def _send(self, i):
        self.scheme.send(self, i * self.stride + self.offset, i)
        if i + 1 < self.n:
            self.sim.at(self._arr[i + 1], self._send, i + 1)

    def complete(self, rid):
        """A reply for request ``rid`` arrived (the scheme unwrapped it)."""
        i, off = divmod(rid - self.offset, self.stride)
        if off or not 0 <= i < self.n:
            self.stray += 1
            return False
        if self.latency[i] >= 0:
            self.duplicates += 1
            return False
        now = self.sim.now
        self.latency[i] = now - self._arr[i]
        self.done_at[i] = now
        return True

    def samples(self, first):
        """``(latency samples ns, timed-out mask)`` of requests ``first..n-1``: a request with
        no reply within the timeout counts as ``timeout_ns``."""
        lat = self.latency[first:]
        to = (lat < 0) | (lat > self.timeout_ns)
        return np.where(to, self.timeout_ns, lat), to
