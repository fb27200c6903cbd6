"""XORInc's client: chunk reads, repairs and updates against the storage nodes' chunk stores
(:mod:`.codec`), in-network (NetRepair, NetUpdate) and the paper's baselines on the same
agents.

A stripe of code RS(k, r) (:func:`netstor.model.gf.generator`: systematic ``[I; C]``, Cauchy
``C``) has ``n = k + r`` chunks, chunk ``i`` on node ``nodes[i]`` (an ``(ip, port)`` of a
``netstor-server``'s XORInc socket). Operations of :class:`XorIncClient` (one at a time):

* :meth:`~XorIncClient.write_stripe`: encode the data chunks, write every chunk (``T_WRITE``).
* :meth:`~XorIncClient.read`: normal read (``READ`` -> ``READ_REPLY``).
* :meth:`~XorIncClient.repair_net` (**NetRepair**, degraded read): ``REPAIR`` to each of the k
  helpers (the first k surviving chunk indexes); each sends its chunk as ``PART`` packets
  toward the client; the switch's engine multiplies each by its decoding coefficient and XORs;
  the completing packet reaches the client as ``REPAIRED``.
* :meth:`~XorIncClient.update_net` (**NetUpdate**): ``UPD_NEW`` (the new data) toward the data
  node; the switch keeps the data and passes the header on; the data node answers with
  ``UPD_OLD`` (its old data) toward the client's address at port 7450; the engine XORs
  them (need 2) and sends the delta as ``DELTA`` copies to the data node and, scaled by
  ``C[i][j]``, to each parity node; each ``ACK``\\ s to the client.
* Baselines: :meth:`~XorIncClient.repair_conventional` (the client reads k chunks and decodes:
  :func:`netstor.model.gf.decode_coefficients`), :meth:`~XorIncClient.repair_pipeline` (repair
  pipelining, ATC'17: per packet a partial sum chained through the k helpers, ``T_CHAIN``),
  :meth:`~XorIncClient.update_conventional` (the paper's star: the client sends the new data
  to the data node, which computes the delta and sends it to every parity node),
  :meth:`~XorIncClient.update_client` (the client reads the old data, computes the delta and
  writes the data node and the r parity nodes itself), :meth:`~XorIncClient.update_tupdate`
  (T-Update, INFOCOM'16: the delta forwarded along a tree of parity nodes, fan-out 2).

Every operation returns an :class:`OpResult`: the data (reads, repairs), the time it took, the
packets the client sent and received carrying chunk data (``tx``, ``rx``) and the other
packets (``ctl_tx``, ``ctl_rx``). Transfers of chunk data (host -> switch and switch -> host,
the paper's count) are counted by the hosts' counters (the servers' ``xi_data_tx``,
``xi_data_rx`` and the client's ``tx`` / ``rx``) or by the switch's port counters.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from netstor.model import gf

from .codec import (NO_PARENT, Route, T_CHAIN, T_STATS, T_WRITE, T_XDELTA, T_XUPDATE, ip_int,
                    packets)
from .header import (BEAT, F_ERROR, F_LAST, T_ACK, T_DELTA, T_PART, T_READ, T_READ_REPLY,
                     T_REPAIR, T_REPAIRED, T_TIMEOUT, T_UPD_NEW, T_UPD_OLD, XiHeader,
                     frame_payload, split)

__all__ = ["XorIncClient", "OpResult", "XorIncError", "SwitchTimeout", "tupdate_tree",
           "SCHEMES"]

DATA_TYPES = (T_READ_REPLY, T_PART, T_REPAIRED, T_UPD_NEW, T_UPD_OLD, T_DELTA, T_WRITE,
              T_CHAIN, T_XUPDATE, T_XDELTA)


class XorIncError(Exception):
    """An operation failed (timeout, a node without the chunk, the switch's TIMEOUT).
    ``switch_timeouts``: the op ids the switch timed out on the way (one per attempt)."""
    switch_timeouts = ()


class SwitchTimeout(XorIncError):
    """The controller's TIMEOUT for the operation's op id (``.notify``): the switch freed its
    slots (a contribution never arrived)."""


@dataclass
class OpResult:
    op: str
    data: bytes | None = None
    seconds: float = 0.0
    tx: int = 0                 # data packets the client sent
    rx: int = 0                 # data packets the client received
    ctl_tx: int = 0
    ctl_rx: int = 0
    extra: dict = field(default_factory=dict)


def tupdate_tree(r, fanout=2):
    """T-Update's tree over the data node (entry 0) and the r parity nodes (entries 1..r):
    the data node sends to parity 0; parity ``i`` forwards to parities ``fanout*i + 1 ..
    fanout*i + fanout``. Returns the parent entry of each entry."""
    parents = [NO_PARENT, 0]
    for i in range(1, r):
        parents.append(1 + (i - 1) // fanout)
    return parents[:r + 1]


class XorIncClient:
    """A client of one rack's XORInc stripes.

    ``nodes``: ``[(ip, port)]`` of chunk ``0..n-1``'s node (one list for every stripe here);
    ``k``, ``r``: the code; ``code``: its id in the switch's tables; ``opids``: the op ids
    the controller gave this client (used in turn; one whose operation failed by the client's
    own timer is retired: :attr:`retired`); ``bind``: the client's address (its IPv4
    address goes in ``req_addr``: it must be the one the nodes and the switch reach; its port
    is where the controller's TIMEOUTs come when the ``xorinc:`` section names it).

    Switch timeouts: a ``TIMEOUT`` for the running in-network operation's op id (the
    controller's notifier, ``.notify``) means the switch freed the op's slots: the op id stays
    usable, and the operation is retried with the next op id, at most ``switch_retries``
    times (a contributor that lost one request recovers; a dead one fails every attempt), then
    :class:`SwitchTimeout` names the op ids the switch timed out. NetUpdate's retry is safe
    when positions of the first attempt completed: the data node then holds the new data,
    and their delta is 0."""

    def __init__(self, nodes, k, r, code=0, opids=range(64), bind=("127.0.0.1", 0),
                 timeout=2.0, switch_retries=1):
        self.nodes = [(str(a), int(p)) for a, p in nodes]
        if len(self.nodes) != k + r:
            raise ValueError(f"RS({k}, {r}) needs {k + r} nodes, got {len(self.nodes)}")
        self.k, self.r, self.n, self.code = k, r, k + r, code
        self.g = gf.generator(k, r)
        self.timeout = timeout
        self.opids = list(opids)            # usable op ids, in turn
        self.retired = []                   # op ids of failed in-network operations
        if switch_retries < 0:
            raise ValueError(f"switch_retries {switch_retries} must be >= 0")
        self.switch_retries = switch_retries
        self.switch_timeouts = []           # op ids the switch timed out (TIMEOUT received)
        self._timeout_seen = {}             # op id -> the last TIMEOUT's count (its seq)
        self._next_op = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        except OSError:
            pass
        self.sock.bind(bind)
        self.addr, self.port = self.sock.getsockname()[:2]
        self._seq = 0
        self.lengths = {}           # stripe -> chunk length (as written by this client)

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- plumbing --------------------------------------------------------------------------
    def _opid(self):
        if not self.opids:
            raise XorIncError(f"no op id left (retired after failures: {self.retired})")
        self._next_op %= len(self.opids)
        opid = self.opids[self._next_op]
        self._next_op += 1
        return opid

    def _retire(self, opid):
        """An in-network operation failed: its engine slots may hold partial sums (until the
        switch's timeout frees them, if one is configured), so its op id is not used again."""
        if opid in self.opids:
            self.opids.remove(opid)
            self.retired.append(opid)

    def _switch_timeout(self, h, opid, what):
        """Raise :class:`SwitchTimeout` for a TIMEOUT of ``opid`` not seen before (its
        ``seq``, the op's expired count, is newer than the last one this client saw)."""
        if h.type != T_TIMEOUT or h.opid != opid:
            return False
        last = self._timeout_seen.get(opid)
        if last is not None and not 0 < (h.seq - last) & 0xFFFFFFFF < 1 << 31:
            return False                    # an old one (an earlier use of the op id)
        self._timeout_seen[opid] = h.seq
        raise SwitchTimeout(f"{what}: the switch timed out op id {opid} (TIMEOUT, count "
                            f"{h.seq})")

    def _in_network(self, what, attempt):
        """``attempt(opid)`` with the next op id; on the switch's TIMEOUT the op id goes back
        to the pool (the switch freed it) and the attempt is retried with the next one
        (``switch_retries`` times); on any other failure the op id is retired. Returns
        ``(result, [op ids timed out by the switch])``."""
        timed_out = []
        for _ in range(self.switch_retries + 1):
            opid = self._opid()
            try:
                return attempt(opid), timed_out
            except SwitchTimeout:
                timed_out.append(opid)
                self.switch_timeouts.append(opid)
            except XorIncError as e:
                self._retire(opid)
                e.switch_timeouts = tuple(timed_out)
                raise
        e = SwitchTimeout(f"{what}: the switch timed out op ids {timed_out} "
                          f"({len(timed_out)} attempts): a contribution never arrived (a "
                          "node down, or its request or data lost)")
        e.switch_timeouts = tuple(timed_out)
        raise e

    def _head(self, typ, stripe, chunk, **kw):
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        f = dict(type=typ, flags=0, opid=0, stripe=stripe, chunk=chunk, src=0, need=0,
                 code=self.code, off=0, len=0, seq=self._seq, req_addr=ip_int(self.addr),
                 req_port=self.port)
        f.update(kw)
        return XiHeader(**f)

    def _send(self, res, h, data, to, trailer=b""):
        self.sock.sendto(frame_payload(h, data) + trailer, to)
        if h.type in DATA_TYPES and h.len:
            res.tx += 1
        else:
            res.ctl_tx += 1

    def _send_chunk(self, res, h, data, to, trailer=b""):
        for off, a, b in packets(len(data)):
            self._send(res, h._replace(off=off, len=b - a,
                                       flags=F_LAST if b >= len(data) else 0),
                       data[a:b], to, trailer)

    def _collect(self, res, want, done, what):
        """Receive until ``done()``; ``want(h, data, raw)`` takes each packet (returns False
        for one that is not this operation's). Raises :class:`XorIncError` on a timeout, an
        ``F_ERROR`` answer or the switch's ``TIMEOUT``."""
        end = time.monotonic() + self.timeout
        while not done():
            left = end - time.monotonic()
            if left <= 0:
                raise XorIncError(f"{what}: timed out ({res})")
            self.sock.settimeout(left)
            try:
                raw, _ = self.sock.recvfrom(65535)
            except socket.timeout:
                continue
            try:
                h, data = split(raw)
            except ValueError:
                continue
            if h.type in DATA_TYPES and h.len:
                res.rx += 1
            else:
                res.ctl_rx += 1
            if not want(h, data, raw):
                continue
            if h.flags & F_ERROR:
                raise XorIncError(f"{what}: node answered F_ERROR ({h})")

    def _parts(self, what):
        """A packet collector for one chunk: ``(want_part(off, data, last), result(),
        complete())``."""
        got, total = {}, [None]

        def add(h, data):
            got[h.off] = data
            if h.flags & F_LAST:
                total[0] = h.off * BEAT + len(data)

        def complete():
            if total[0] is None:
                return False
            return sum(len(d) for d in got.values()) >= total[0]

        def result():
            buf = bytearray(total[0])
            for off, d in got.items():
                buf[off * BEAT:off * BEAT + len(d)] = d
            return bytes(buf)

        return add, result, complete

    def survivors(self, lost, failed=()):
        """NetRepair's helpers: the first k chunk indexes that are neither lost nor failed
        (the documented policy the switch's coefficient table follows)."""
        out = [i for i in range(self.n) if i != lost and i not in set(failed)][:self.k]
        if len(out) < self.k:
            raise XorIncError(f"chunk {lost}: fewer than k={self.k} survivors")
        return out

    def node_counters(self):
        """Every node's ``xi_*`` counters (``T_STATS``), in chunk order."""
        res = OpResult("stats")
        got = {}
        for i, node in enumerate(self.nodes):
            self._send(res, self._head(T_STATS, 0, i, seq=i), b"", node)

        def want(h, data, raw):
            if h.type == T_STATS:
                got[h.chunk] = json.loads(data)
                return True
            return False

        self._collect(res, want, lambda: len(got) >= self.n, "node counters")
        self.stats_packets = res.ctl_tx + res.ctl_rx
        return [got[i] for i in range(self.n)]

    def host_transfers(self, before, after, results):
        """Chunk-data packets sent + received by every host between two
        :meth:`node_counters` and by the client in ``results`` (:class:`OpResult` or their
        dicts): each is one host -> switch or switch -> host transfer on a rack's star."""
        nodes = sum(a["xi_data_tx"] + a["xi_data_rx"] - b["xi_data_tx"] - b["xi_data_rx"]
                    for b, a in zip(before, after))
        return nodes + sum((x.tx + x.rx) if hasattr(x, "tx") else
                           (x.get("tx", 0) + x.get("rx", 0)) for x in results)

    # ---- stripes and reads -----------------------------------------------------------------
    def write_stripe(self, stripe, data_chunks):
        """Encode ``data_chunks`` (k equal-length byte strings) and write the n chunks."""
        res = OpResult("write_stripe")
        t0 = time.perf_counter()
        arr = np.array([np.frombuffer(bytes(c), np.uint8) for c in data_chunks])
        if arr.shape[0] != self.k:
            raise ValueError(f"need {self.k} data chunks")
        chunks = gf.encode(arr, self.r)
        length = chunks.shape[1]
        self.lengths[stripe] = length
        npk = len(packets(length))
        acks = set()
        for i, node in enumerate(self.nodes):
            self._send_chunk(res, self._head(T_WRITE, stripe, i), chunks[i].tobytes(), node)

        def want(h, data, raw):
            if h.type == T_ACK and h.stripe == stripe:
                acks.add((h.src, h.off))
                return True
            return False

        self._collect(res, want, lambda: len(acks) >= self.n * npk, "write_stripe")
        res.seconds = time.perf_counter() - t0
        res.data = chunks
        return res

    def read(self, stripe, chunk):
        """Normal read of one chunk."""
        res = OpResult("read")
        t0 = time.perf_counter()
        add, result, complete = self._parts("read")
        self._send(res, self._head(T_READ, stripe, chunk), b"", self.nodes[chunk])

        def want(h, data, raw):
            if h.type == T_READ_REPLY and h.stripe == stripe and h.chunk == chunk:
                add(h, data)
                return True
            return False

        self._collect(res, want, complete, f"read {stripe}/{chunk}")
        res.data, res.seconds = result(), time.perf_counter() - t0
        return res

    # ---- repair ----------------------------------------------------------------------------
    def repair_net(self, stripe, lost):
        """NetRepair (module docstring): the lost chunk, repaired in the switch. The helpers
        are the repair policy's (:meth:`survivors` with no other failure: the switch's
        coefficient table holds those). A switch TIMEOUT retries (class docstring);
        ``extra["switch_timeouts"]``: the op ids it timed out before the repair completed."""
        helpers = self.survivors(lost)
        what = f"NetRepair {stripe}/{lost}"
        t0 = time.perf_counter()

        def attempt(opid):
            res = OpResult("repair_net")
            add, result, complete = self._parts("repair")
            parts = [0]
            for s in helpers:
                self._send(res, self._head(T_REPAIR, stripe, lost, opid=opid, src=s,
                                           need=self.k), b"", self.nodes[s])

            def want(h, data, raw):
                if self._switch_timeout(h, opid, what):
                    return False
                if h.stripe != stripe or h.opid != opid:
                    return False
                if h.type == T_PART:        # the engine was not on the path
                    parts[0] += 1
                    return False
                if h.type == T_REPAIRED and h.chunk == lost:
                    add(h, data)
                    return True
                return False

            self._collect(res, want, complete, what)
            res.data = result()
            res.extra = {"helpers": helpers, "raw_parts": parts[0], "opid": opid}
            return res

        res, timed_out = self._in_network(what, attempt)
        res.seconds = time.perf_counter() - t0
        res.extra["switch_timeouts"] = timed_out
        return res

    def repair_conventional(self, stripe, lost, failed=()):
        """Conventional repair: read k chunks at the client and decode."""
        res = OpResult("repair_conventional")
        t0 = time.perf_counter()
        helpers = self.survivors(lost, failed)
        cols = {s: self._parts("read") for s in helpers}
        for s in helpers:
            self._send(res, self._head(T_READ, stripe, s), b"", self.nodes[s])

        def want(h, data, raw):
            if h.type == T_READ_REPLY and h.stripe == stripe and h.chunk in cols:
                cols[h.chunk][0](h, data)
                return True
            return False

        self._collect(res, want, lambda: all(c[2]() for c in cols.values()),
                      f"conventional repair {stripe}/{lost}")
        chunks = {s: np.frombuffer(cols[s][1](), np.uint8) for s in helpers}
        res.data = gf.repair(self.g, chunks, helpers, lost).tobytes()
        res.seconds = time.perf_counter() - t0
        res.extra = {"helpers": helpers}
        return res

    def repair_pipeline(self, stripe, lost, failed=(), length=None):
        """Repair pipelining (ATC'17): per packet position a partial sum is chained through
        the k helpers (``T_CHAIN``), the last sends the repaired part to the client.
        ``length``: the chunk length (default: as this client wrote the stripe)."""
        res = OpResult("repair_pipeline")
        t0 = time.perf_counter()
        helpers = self.survivors(lost, failed)
        coeffs = gf.decode_coefficients(self.g, helpers, lost)
        length = self.lengths[stripe] if length is None else length
        entries = [(s, int(c), NO_PARENT if i == 0 else i - 1, ip_int(self.nodes[s][0]),
                    self.nodes[s][1]) for i, (s, c) in enumerate(zip(helpers, coeffs))]
        route = Route(entries, 0).pack()
        add, result, complete = self._parts("pipeline")
        for off, a, b in packets(length):
            self._send(res, self._head(T_CHAIN, stripe, lost, off=off, seq=b - a,
                                       flags=F_LAST if b >= length else 0),
                       b"", self.nodes[helpers[0]], route)

        def want(h, data, raw):
            if h.type == T_CHAIN and h.stripe == stripe and h.chunk == lost:
                add(h._replace(flags=F_LAST if h.off * BEAT + len(data) >= length else 0),
                    data)
                return True
            return False

        self._collect(res, want, complete, f"repair pipelining {stripe}/{lost}")
        res.data, res.seconds = result(), time.perf_counter() - t0
        res.extra = {"helpers": helpers}
        return res

    # ---- update ----------------------------------------------------------------------------
    def _await_acks(self, res, stripe, chunks, npk, what, opid=None):
        acks = set()

        def want(h, data, raw):
            if h.type == T_ACK and h.stripe == stripe and (opid is None or h.opid == opid):
                acks.add((h.src, h.off))
                return True
            if h.flags & F_ERROR and h.stripe == stripe and (opid is None or h.opid == opid):
                return True                 # a node without the chunk: _collect raises
            if opid is not None:
                self._switch_timeout(h, opid, what)
            return False

        self._collect(res, want, lambda: all((c, off) in acks for c in chunks
                                             for off, _, _ in npk), what)

    def _updated(self, chunk):
        return [chunk] + list(range(self.k, self.n))

    def update_net(self, stripe, chunk, new):
        """NetUpdate (module docstring): data chunk ``chunk`` becomes ``new``. A switch
        TIMEOUT retries (class docstring)."""
        t0 = time.perf_counter()
        self._check_data(chunk)
        what = f"NetUpdate {stripe}/{chunk}"

        def attempt(opid):
            res = OpResult("update_net")
            self._send_chunk(res, self._head(T_UPD_NEW, stripe, chunk, opid=opid, need=2,
                                             src=chunk), bytes(new), self.nodes[chunk])
            self._await_acks(res, stripe, self._updated(chunk), packets(len(new)), what, opid)
            res.extra = {"opid": opid}
            return res

        res, timed_out = self._in_network(what, attempt)
        res.seconds = time.perf_counter() - t0
        res.extra["switch_timeouts"] = timed_out
        return res

    def _check_data(self, chunk):
        if not 0 <= chunk < self.k:
            raise ValueError(f"chunk {chunk} is not a data chunk of RS({self.k}, {self.r})")

    def _tree_update(self, res, stripe, chunk, new, parents, what):
        entries = [(chunk, 1, NO_PARENT, ip_int(self.nodes[chunk][0]), self.nodes[chunk][1])]
        for i in range(self.r):
            p = self.k + i
            entries.append((p, int(self.g[p, chunk]), parents[i + 1],
                            ip_int(self.nodes[p][0]), self.nodes[p][1]))
        self._send_chunk(res, self._head(T_XUPDATE, stripe, chunk), bytes(new),
                         self.nodes[chunk], Route(entries, 0).pack())
        self._await_acks(res, stripe, self._updated(chunk), packets(len(new)), what)

    def update_conventional(self, stripe, chunk, new):
        """Conventional update (the paper's star at the data node): the new data to the data
        node, which sends the delta to each of the r parity nodes."""
        res = OpResult("update_conventional")
        t0 = time.perf_counter()
        self._check_data(chunk)
        self._tree_update(res, stripe, chunk, new, [NO_PARENT] + [0] * self.r,
                          f"conventional update {stripe}/{chunk}")
        res.seconds = time.perf_counter() - t0
        return res

    def update_tupdate(self, stripe, chunk, new, fanout=2):
        """T-Update (INFOCOM'16): the data node sends the delta to the first parity node,
        which forwards it along a tree (fan-out ``fanout``)."""
        res = OpResult("update_tupdate")
        t0 = time.perf_counter()
        self._check_data(chunk)
        self._tree_update(res, stripe, chunk, new, tupdate_tree(self.r, fanout),
                          f"T-Update {stripe}/{chunk}")
        res.seconds = time.perf_counter() - t0
        return res

    def update_client(self, stripe, chunk, new):
        """Update computed at the client: read the old data, compute the delta, write the
        new data and send each parity node its delta (``T_XDELTA``, a one-node route with
        the parity's coefficient)."""
        res = OpResult("update_client")
        t0 = time.perf_counter()
        self._check_data(chunk)
        old = self.read(stripe, chunk)
        res.tx, res.rx, res.ctl_tx, res.ctl_rx = old.tx, old.rx, old.ctl_tx, old.ctl_rx
        new = bytes(new)
        delta = (np.frombuffer(old.data.ljust(len(new), b"\0")[:len(new)], np.uint8) ^
                 np.frombuffer(new, np.uint8)).tobytes()
        self._send_chunk(res, self._head(T_WRITE, stripe, chunk), new, self.nodes[chunk])
        for i in range(self.r):
            p = self.k + i
            route = Route([(p, int(self.g[p, chunk]), NO_PARENT, ip_int(self.nodes[p][0]),
                            self.nodes[p][1])]).pack()
            self._send_chunk(res, self._head(T_XDELTA, stripe, chunk), delta, self.nodes[p],
                             route)
        self._await_acks(res, stripe, self._updated(chunk), packets(len(new)),
                         f"client update {stripe}/{chunk}")
        res.seconds = time.perf_counter() - t0
        return res


REPAIRS = {"net": "repair_net", "conventional": "repair_conventional",
           "pipeline": "repair_pipeline"}
UPDATES = {"net": "update_net", "conventional": "update_conventional",
           "tupdate": "update_tupdate", "client": "update_client"}


def _switch_ports(path, after_ns, timeout=10.0):
    """The test-bed switch's port counters from its stats JSON once it was rewritten after
    ``after_ns`` (``time.time_ns()``): ``(rx_frames, tx_frames)`` summed over the wire ports."""
    end = time.monotonic() + timeout
    while True:
        try:
            if os.stat(path).st_mtime_ns > after_ns:
                ports = json.loads(open(path).read())["ports"].values()
                return (sum(p["rx_frames"] for p in ports), sum(p["tx_frames"] for p in ports))
        except (OSError, ValueError, KeyError):
            pass
        if time.monotonic() > end:
            raise XorIncError(f"switch stats {path} not rewritten in {timeout} s")
        time.sleep(0.05)


def run_scenario(nodes, k, r, *, code=0, opids=range(64), bind=("0.0.0.0", 0), length=4096,
                 seed=1, lost=None, repairs=tuple(REPAIRS), updates=tuple(UPDATES),
                 switch_stats=None, timeout=2.0):
    """The test bed's XORInc run from one client: stripe 0 written and read back, every
    chunk in ``lost`` (default all) repaired by each scheme of ``repairs`` (one phase per
    scheme), then each scheme of ``updates`` updates data chunk ``i % k`` of its own stripe
    ``1 + i``, and every stripe is read back at the end. Returns a JSON-able dict: the data
    the client wrote (hex), per op its result (hex), time and packet counts, and per phase
    ``host_transfers`` (chunk transfers per op counted by every host: chunk-data packets
    sent + received, over packets per chunk; on a rack where every host has its own switch
    port these are the link transfers the paper counts) and the switch's frames in and out
    (``switch_stats``: the switch's stats JSON, rewritten about once a second;
    ``data_transfers`` = chunk transfers through the switch per op = (frames in + out - 2 x
    the client's control packets) / packets per chunk; traffic between hosts on one segment
    of the test bed, e.g. server to server, does not cross the switch)."""
    rng = np.random.default_rng(seed)
    npk = len(packets(length))
    out = {"config": {"k": k, "r": r, "code": code, "length": length, "seed": seed,
                      "nodes": [f"{a}:{p}" for a, p in nodes]},
           "stripes": {}, "ops": [], "phases": []}
    with XorIncClient(nodes, k, r, code=code, opids=opids, bind=bind,
                      timeout=timeout) as c:
        def write(stripe):
            data = rng.integers(0, 256, (k, length), dtype=np.uint8)
            c.write_stripe(stripe, data)
            out["stripes"][str(stripe)] = [d.tobytes().hex() for d in data]

        write(0)
        for i, _ in enumerate(updates):
            write(1 + i)
        # [node counters, switch (rx, tx), control packets since that switch snapshot]
        mark = [c.node_counters(), _switch_ports(switch_stats, time.time_ns())
                if switch_stats else None, 0]

        def phase(name, results):
            ph = {"phase": name, "ops": len(results),
                  "errors": sum(1 for x in results if "error" in x)}
            ctl = mark[2] + sum(x.get("ctl_tx", 0) + x.get("ctl_rx", 0) for x in results)
            sw = _switch_ports(switch_stats, time.time_ns()) if switch_stats else None
            counters = c.node_counters()        # after the switch snapshot: the next phase's
            ph["host_transfers"] = round(c.host_transfers(mark[0], counters, results) /
                                         (npk * max(1, len(results))), 3)
            mark[0], mark[2] = counters, c.stats_packets
            if switch_stats:
                rx, tx = sw
                rx0, tx0 = mark[1]
                ph.update(switch_rx=rx - rx0, switch_tx=tx - tx0, client_ctl=ctl,
                          data_transfers=round((rx - rx0 + tx - tx0 - 2 * ctl) /
                                               (npk * max(1, len(results))), 3))
                mark[1] = (rx, tx)
            out["phases"].append(ph)

        def record(op, **kw):
            fn = getattr(c, op)
            entry = {"op": op, **{a: b for a, b in kw.items() if a != "new"}}
            try:
                res = fn(**kw)
            except XorIncError as e:
                entry["error"] = str(e)
                entry["switch_timeouts"] = list(e.switch_timeouts)
                return entry
            entry.update(seconds=round(res.seconds, 6), tx=res.tx, rx=res.rx,
                         ctl_tx=res.ctl_tx, ctl_rx=res.ctl_rx, extra=res.extra)
            if res.data is not None and isinstance(res.data, bytes):
                entry["data"] = res.data.hex()
            if "new" in kw:
                entry["new"] = kw["new"].hex()
            return entry

        reads = [record("read", stripe=0, chunk=i) for i in range(k + r)]
        out["ops"] += reads
        phase("read", reads)
        for scheme in repairs:
            res = [record(REPAIRS[scheme], stripe=0, lost=x)
                   for x in (range(k + r) if lost is None else lost)]
            out["ops"] += res
            phase(f"repair_{scheme}", res)
        for i, scheme in enumerate(updates):
            new = rng.integers(0, 256, length, dtype=np.uint8).tobytes()
            res = [record(UPDATES[scheme], stripe=1 + i, chunk=i % k, new=new)]
            out["ops"] += res
            phase(f"update_{scheme}", res)
        out["final"] = {}
        for i, _ in enumerate(updates):
            out["final"][str(1 + i)] = [c.read(1 + i, j).data.hex() for j in range(k + r)]
    return out


def one_repair(nodes, k, r, stripe, lost, *, code=0, opids=range(64), bind=("0.0.0.0", 0),
               timeout=2.0):
    """One NetRepair: ``{"data": hex}`` or ``{"error", "switch_timeout": bool,
    "switch_timeouts": [op ids]}``, with ``seconds``, ``retired`` and the op ids left."""
    with XorIncClient(nodes, k, r, code=code, opids=opids, bind=bind, timeout=timeout) as c:
        t0 = time.monotonic()
        try:
            res = c.repair_net(stripe, lost)
            out = {"data": res.data.hex(), "switch_timeouts": res.extra["switch_timeouts"]}
        except XorIncError as e:
            out = {"error": str(e), "switch_timeout": isinstance(e, SwitchTimeout),
                   "switch_timeouts": list(e.switch_timeouts)}
        out.update(seconds=round(time.monotonic() - t0, 3), retired=c.retired,
                   opids=c.opids)
    return out


def _range(text):
    lo, sep, hi = text.partition("-")
    return range(int(lo), int(hi) + 1) if sep else range(int(lo), int(lo) + 1)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.offloads.xorinc.schemes",
                                 description="XORInc client: one scenario (run_scenario)")
    ap.add_argument("--nodes", required=True, help="IP:PORT of chunk 0..n-1's node, comma-"
                                                   "separated")
    ap.add_argument("--k", type=int, required=True)
    ap.add_argument("--r", type=int, required=True)
    ap.add_argument("--code", type=int, default=0)
    ap.add_argument("--opids", type=_range, default=range(64), metavar="A-B")
    ap.add_argument("--bind", default="0.0.0.0", help="the client's address")
    ap.add_argument("--port", type=int, default=0,
                    help="the client's UDP port (0: any; the xorinc: section's requester "
                         "port, where the controller's TIMEOUTs come)")
    ap.add_argument("--one", default=None, metavar="repair_net:STRIPE:LOST",
                    help="instead of the scenario: one NetRepair of a stripe written before "
                         "(its JSON: the data, or the error and the op ids the switch timed "
                         "out, and the seconds it took)")
    ap.add_argument("--length", type=int, default=4096, help="chunk bytes")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lost", default=None, help="chunks to repair (default all)")
    ap.add_argument("--repairs", default=",".join(REPAIRS))
    ap.add_argument("--updates", default=",".join(UPDATES))
    ap.add_argument("--switch-stats", default=None, metavar="FILE")
    ap.add_argument("--timeout", type=float, default=2.0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    nodes = [(n.rsplit(":", 1)[0], int(n.rsplit(":", 1)[1])) for n in a.nodes.split(",")]
    if a.one is not None:
        op, stripe, lost = a.one.split(":")
        if op != "repair_net":
            ap.error(f"--one {a.one}: only repair_net")
        res = one_repair(nodes, a.k, a.r, int(stripe), int(lost), code=a.code,
                         opids=a.opids, bind=(a.bind, a.port), timeout=a.timeout)
        with open(a.out, "w") as f:
            json.dump(res, f)
        return 0
    res = run_scenario(nodes, a.k, a.r, code=a.code, opids=a.opids, bind=(a.bind, a.port),
                       length=a.length, seed=a.seed,
                       lost=None if a.lost is None else [int(x) for x in a.lost.split(",")],
                       repairs=[x for x in a.repairs.split(",") if x],
                       updates=[x for x in a.updates.split(",") if x],
                       switch_stats=a.switch_stats, timeout=a.timeout)
    with open(a.out, "w") as f:
        json.dump(res, f)
    return 0


#: XORInc adds no ``netstor-load`` scheme: its operations are chunk reads, repairs and
#: updates (:class:`XorIncClient`), not key-value requests
SCHEMES = {}


if __name__ == "__main__":
    sys.exit(main())
