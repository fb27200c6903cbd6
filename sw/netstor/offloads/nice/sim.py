"""NICE and the paper's NOOB baselines in the cluster simulator (:mod:`netstor.cluster`): the
paper's set-up (Al-Kiswany et al., HPDC 2017, section 6) in virtual time.

::

    c0 .. c2, gw (load balancer) ── wire port 0 ═[ switch ]═ wire port 1 ──┬─ n0 .. n14 (storage)
    (10.77.0.10 + i)                                                       └─ md (metadata)

Every host has its own cable (1 Gb/s, ``link_ns`` each way) to its switch port (a port leads to
its segment's hosts by destination MAC, :mod:`netstor.cluster.net`): every frame is serialised
on every cable it crosses, so a node's uplink is shared by everything it sends, and the switch's
multicast copies leave on the members' own cables at line rate. The switch is our data plane
at the device's timing (:class:`netstor.cluster.switch.SwitchNode`).

**Objects** of 4 B .. 1 MB travel as datagrams of at most :data:`.header.FRAG_DATA` (1,400)
bytes of data behind the NICE header and key (:mod:`.header`): a 1,484-byte frame per full
fragment. Every application-level hop (a gateway, a replica-oblivious node, the primary
replicating) receives the whole object before it forwards it (a proxy / a store-then-replicate
primary, as the paper's figure 2 draws them); replies go straight to the client (the header's
``client``), whatever hop the request took.

**Schemes** (:data:`SCHEMES`), all on the same agents and the same per-message costs:

* ``nice`` -- gets to the key's vnode in the unicast vring (the switch rewrites it to the
  primary, or to a division's replica); puts' fragments to the multicast vring (the switch
  copies each to every member of the partition's put set), then NICE-2PC: every replica with
  the whole object locks, logs, stores it pending and sends PUT_ACK to the primary; the
  primary with its own copy and every PUT_ACK sends TS to the multicast vring; each replica
  commits and sends TS_ACK; the primary then sends PUT_REPLY to the client.
* ``rac`` (replica-aware client: straight to the primary), ``rag`` (replica-aware gateway: the
  load balancer forwards to the primary: one extra hop), ``rog`` (replica-oblivious gateway:
  the load balancer forwards to a random storage node, which forwards to the primary: two
  extra hops; none when it picks the primary) -- each with ``pb`` (primary-backup / the
  paper's "primary-only": the primary stores the object, sends R-1 copies over its own link,
  answers after R-1 acks) or ``2pc`` (the primary logs and stores pending, sends the object to
  the R-1 secondaries (prepare), which log, store and vote; then commit to each, acks, reply).

**Switch** (``switch=``): ``model`` -- NICE's program in the compiled data-plane model
(``default_pipeline()``, copy-list groups), its tables written by the metadata
service (:class:`.metadata.Metadata` through a ``ModelSink``: :func:`.config.entries`, diffed);
``ref`` -- :class:`RefNice`, the vring rules of ``docs/nice.md`` in plain Python around the
default pipeline (which routes everything else), following the same ring state. The tests run
both on the same traffic and compare every time and byte count.

**Costs** (:data:`COSTS`): every node is one CPU taking messages in arrival order (our agents
are single-threaded); per datagram received or sent, per LMDB store / read, the times
:func:`measure_costs` measured on this machine (our own Python datagram path: ``recvfrom`` +
header unpack + copy into the object's buffer, header pack + ``sendto``; LMDB ``put`` in a
write transaction with and without fsync, ``get``). Each draw is the fitted median times a
ratio drawn from the measured distribution (its 20 quantiles of sample / median), so repeats
differ the way the measurements do. Nothing is fitted to the paper. The writes are the
agents' (:mod:`.codec`): a replica with the whole object locks, logs and stores it pending in
one transaction; a commit deletes the log record and writes the object (two).

**Load balancing** (:func:`lb_run`, the paper's figure 10): gets of an object a put holds
locked (NICE-2PC, 2PC) wait at the replica for the commit, as the agents do; each node counts
the GETs the switch delivered to it and those it served (``gets_in``, ``gets_served``).

**Membership and failures**: the metadata service is :class:`.metadata.Metadata` (the
membership logic the controller runs) on the virtual clock, in a metadata node
(:class:`MetadataNode`) that receives the nodes' heartbeats (every ``heartbeat_s``) and the
primaries' time-out reports as datagrams and ticks once a beat. With ``fail`` a node dies
(drops everything); a primary whose PUT_ACK wait (``ack_timeout_s``) runs out sends ABORT to
the client (which retries after ``retry_s``, the paper's 2 s) and a report; 2 reports or 3
missed beats hide the node (table writes: out of every mapping, a handoff in its place in the
put set and in its get division; the handoff forwards gets for objects it lacks to the
primary). At ``rejoin_s`` the node comes back with its store: phase 1 (put sets), the objects
of each handoff fetched over the cables, phase 2 (get ring, handoffs out). The agents read
the membership from the ring state when the change is written (the informing messages'
microseconds are not modelled).
"""
from __future__ import annotations

import functools
import ipaddress
import math
import time

import numpy as np

from netstor.cluster.engine import Sim
from netstor.cluster.frames import ip4, parse_udp, udp_frame
from netstor.cluster.host import Host
from netstor.cluster.net import Network
from netstor.cluster.rack import rack_plan
from netstor.cluster.rng import Streams
from netstor.cluster.switch import SwitchNode, cached_config_ops
from netstor.model.dataplane import Output
from netstor.testbed.rack import port_mac, route_config

from .header import (FRAG_DATA, HEADER, KEY_LEN, MULTICAST, NICE_LEN, NICE_UDP_PORT, OP_ABORT,
                     OP_FWD_GET, OP_GET, OP_GET_REPLY, OP_PUT, OP_PUT_ACK, OP_PUT_REPLY, OP_TS,
                     OP_TS_ACK, UNICAST, default_partition, n_frags, subgroup, vnode_addr)

__all__ = ["SCHEMES", "CONSISTENCY", "COSTS", "Costs", "measure_costs", "RefNice", "NiceRun",
           "model_available", "frame_len", "wire_ns", "LB_SYSTEMS", "lb_run"]

SCHEMES = ("nice", "rac", "rag", "rog")
CONSISTENCY = ("pb", "2pc")
_H = HEADER.struct
APP = NICE_LEN + KEY_LEN                 # 42 bytes before a fragment's data
# message kinds between nodes (in ``rsv``): what a NICE op means in the NOOB baselines
ST_CLIENT, ST_RELAY, ST_REPL, ST_PREP, ST_CTRL, ST_HB, ST_SYNC, ST_REPORT = range(8)
HOST_PORT = NICE_UDP_PORT

#: Per-message costs measured by :func:`measure_costs` on this machine (2-core VM, Python
#: 3 + lmdb 0.9.36, 2026-11-25): medians in us; ``*_per_kib`` per KiB of data; ``ratio``: 20
#: quantiles (5 % steps) of sample / median, for the datagram path and for LMDB.
COSTS = {
    "source": "measure_costs() on the 2-core evaluation VM (load average ~8: seven engineers), "
              "2026-11-25 12:25 UTC",
    "tx_frag_us": 3.575, "rx_frag_us": 3.539, "tx_ctrl_us": 3.689, "rx_ctrl_us": 3.656,
    "store_us": 2.81, "store_per_kib_us": 0.3931,
    "store_points_us": {"4": 2.81, "1024": 5.81, "16384": 10.42, "65536": 34.21,
                        "262144": 110.34, "1048576": 407.45},
    "get_us": 1.549, "get_per_kib_us": 0.0666, "fsync_us": 175.6,
    "ratio": {"dgram": [0.586, 0.623, 0.644, 0.678, 0.882, 0.925, 0.95, 0.969, 0.983, 0.995,
                        1.005, 1.014, 1.023, 1.033, 1.043, 1.058, 1.076, 1.103, 1.15, 1.497],
              "lmdb": [0.764, 0.866, 0.899, 0.93, 0.955, 0.97, 0.979, 0.987, 0.992, 0.997,
                       1.004, 1.014, 1.028, 1.049, 1.084, 1.194, 1.434, 1.582, 1.769, 2.464]},
}


def frame_len(data_len):
    """Bytes of a NICE frame carrying ``data_len`` bytes (Ethernet/IPv4/UDP, header, key)."""
    return 42 + APP + data_len


def wire_ns(frame, gbps=1.0):
    """Nanoseconds a frame of ``frame`` bytes takes on a ``gbps`` link (FCS, preamble, gap;
    at least 64 bytes): the independent formula the tests use."""
    return (max(frame, 60) + 24) * 8 / gbps


# ---- costs --------------------------------------------------------------------------------------
def measure_costs(rounds=20, sizes=(4, 1024, 16384, 65536, 262144, 1 << 20), sync=True):
    """Measure the per-message costs on this machine (see :data:`COSTS` for the keys): a UDP
    socket pair on loopback (full fragments and data-less control datagrams: header pack +
    ``sendto``; ``recvfrom`` + header unpack + copy of the data into an object buffer), LMDB in
    a temporary folder (``put`` in its own write transaction, ``sync=False``, at ``sizes``,
    fitted a + b x size; ``get``; with ``sync`` the extra time of an fsync'd commit)."""
    import os
    import socket
    import statistics
    import tempfile
    import lmdb

    def med(xs):
        return statistics.median(xs) * 1e6

    def ratios(xs):
        xs = sorted(xs)
        m = statistics.median(xs)
        return [round(xs[min(len(xs) - 1, int(len(xs) * (k + 0.5) / 20))] / m, 3)
                for k in range(20)]
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    a.bind(("127.0.0.1", 0))
    b.bind(("127.0.0.1", 0))
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    dst = b.getsockname()
    out = {}
    dg = []
    buf = bytearray(1 << 20)
    for plen, name in ((FRAG_DATA, "frag"), (0, "ctrl")):
        data, key = bytes(plen), bytes(KEY_LEN)
        tx, rx = [], []
        for _ in range(rounds):
            for i in range(100):
                t0 = time.perf_counter()
                a.sendto(_H.pack(OP_PUT, 0, i, 100, 0, 1, 0, plen, 0, 0) + key + data, dst)
                tx.append(time.perf_counter() - t0)
            for i in range(100):
                t0 = time.perf_counter()
                d, _ = b.recvfrom(2048)
                f = _H.unpack_from(d)
                off = f[2] * FRAG_DATA
                buf[off:off + len(d) - APP] = memoryview(d)[APP:]
                rx.append(time.perf_counter() - t0)
        out[f"tx_{name}_us"], out[f"rx_{name}_us"] = round(med(tx), 3), round(med(rx), 3)
        dg += [x / statistics.median(tx) for x in tx] + [x / statistics.median(rx) for x in rx]
    a.close()
    b.close()
    with tempfile.TemporaryDirectory() as d:
        env = lmdb.open(d, map_size=1 << 31, sync=False)
        pts, lm = [], []
        for size in sizes:
            v = os.urandom(size)
            ts = []
            for i in range(max(10, rounds * (2 if size >= 65536 else 10))):
                t0 = time.perf_counter()
                with env.begin(write=True) as tx:
                    tx.put(b"k%d" % (i % 50), v)
                ts.append(time.perf_counter() - t0)
            pts.append((size, med(ts)))
            lm += [x / statistics.median(ts) for x in ts]
        xs = np.array([p[0] for p in pts], float) / 1024
        ys = np.array([p[1] for p in pts], float)
        slope, _ = np.polyfit(xs, ys, 1)
        # the smallest object's time, and the slope over all sizes
        out["store_us"], out["store_per_kib_us"] = round(ys[0], 3), round(slope, 4)
        out["store_points_us"] = {int(s): round(t, 2) for s, t in pts}
        gts = []
        for size in (sizes[0], sizes[-1]):
            with env.begin(write=True) as tx:
                tx.put(b"g", os.urandom(size))
            g = []
            for _ in range(rounds * 5):
                t0 = time.perf_counter()
                with env.begin() as tx:
                    bytes(tx.get(b"g"))
                g.append(time.perf_counter() - t0)
            gts.append((size, med(g)))
        out["get_us"] = round(gts[0][1], 3)
        out["get_per_kib_us"] = round((gts[1][1] - gts[0][1]) / (sizes[-1] - sizes[0]) * 1024, 4)
        env.close()
        if sync:
            env = lmdb.open(d + "/s", map_size=1 << 28, sync=True, subdir=True)
            ts = []
            for i in range(max(10, rounds)):
                t0 = time.perf_counter()
                with env.begin(write=True) as tx:
                    tx.put(b"s%d" % i, bytes(64))
                ts.append(time.perf_counter() - t0)
            out["fsync_us"] = round(med(ts) - out["store_us"], 1)
            env.close()
    out["ratio"] = {"dgram": ratios(dg), "lmdb": ratios(lm)}
    return out


class Costs:
    """Cost draws (ns) from a :data:`COSTS`-shaped table: the median of the kind (data sizes
    scale the LMDB ones) times a ratio drawn from the kind's measured quantiles (a numpy
    stream of the run: ``rng``). ``sync``: stores and logs pay the fsync too."""

    def __init__(self, table, rng, *, sync=False, scale=1.0):
        self.t, self.rng, self.sync, self.scale = table, rng, bool(sync), float(scale)
        self.qd = np.asarray(table["ratio"]["dgram"], float)
        self.ql = np.asarray(table["ratio"]["lmdb"], float)
        self._u = rng.integers(0, 20, 1 << 16)
        self._i = 0

    def _k(self):
        i = self._i
        self._i = (i + 1) & 0xFFFF
        if self._i == 0:
            self._u = self.rng.integers(0, 20, 1 << 16)
        return self._u[i]

    def rx(self, data_len):
        base = self.t["rx_frag_us"] if data_len > 64 else self.t["rx_ctrl_us"]
        return int(base * self.qd[self._k()] * self.scale * 1e3)

    def tx(self, data_len):
        base = self.t["tx_frag_us"] if data_len > 64 else self.t["tx_ctrl_us"]
        return int(base * self.qd[self._k()] * self.scale * 1e3)

    def store(self, size):
        us = (self.t["store_us"] + self.t["store_per_kib_us"] * size / 1024) * self.ql[self._k()]
        if self.sync:
            us += self.t["fsync_us"] * self.ql[self._k()]
        return int(us * self.scale * 1e3)

    def get(self, size):
        us = (self.t["get_us"] + self.t["get_per_kib_us"] * size / 1024) * self.ql[self._k()]
        return int(us * self.scale * 1e3)


# ---- the NICE switch rules in Python (the reference) -------------------------------------------
class RefNice:
    """The NICE data plane as ``docs/nice.md`` states it, in plain Python, with the golden
    model's API (``process``, ``mem_write``, ``reg_write``, ``counters``) around a model of the
    default pipeline that handles every frame NICE does not map (plain L3). UDP to port 7470
    whose destination lies in the unicast vring: subgroup -> partition -> the division's
    replica whose prefix holds the source address (longest first), else the primary; the
    frame is rewritten to it (IP, MAC, port; ``part`` written). In the multicast vring: one
    copy per member of the partition's put set, each rewritten to its member. A subgroup
    without a partition, or a partition without a node: dropped and counted ``nice.miss``.
    Set with :meth:`set_node`, :meth:`set_partition` (subgroup map, primary, put set,
    divisions)."""

    def __init__(self, pipeline, *, inner=None, unicast=UNICAST, multicast=MULTICAST):
        from netstor.cluster.switch import default_model_class
        self.inner = (inner or default_model_class())(pipeline)
        self.P = pipeline.n_ports
        self.uni, self.mc = unicast, multicast
        self.sub2part = {}              # subgroup -> partition
        self.primary = {}               # partition -> node id (gets outside every division)
        self.put_set = {}               # partition -> [node ids]
        self.divisions = {}             # partition -> [(src int, prefix len, node id)]
        self.nodes = {}                 # node id -> (ip bytes, mac bytes, port, smac bytes)
        self.c = {k: 0 for k in ("nice.unicast", "nice.multicast", "nice.division",
                                 "nice.copies", "nice.miss")}

    # ---- control plane
    def set_node(self, nid, ip, mac, port):
        self.nodes[nid] = (ip4(ip), bytes(mac), int(port), port_mac(int(port)).to_bytes(6, "big"))

    def set_partition(self, part, *, subgroups=None, primary=None, put_set=None,
                      divisions=None):
        for s in subgroups or ():
            self.sub2part[int(s)] = part
        if primary is not None:
            self.primary[part] = primary
        if put_set is not None:
            self.put_set[part] = list(put_set)
        if divisions is not None:
            self.divisions[part] = sorted(((int(ipaddress.IPv4Address(a)) if isinstance(a, str)
                                            else int.from_bytes(a, "big")
                                            if isinstance(a, (bytes, bytearray)) else int(a),
                                            int(n), int(r))
                                           for a, n, r in divisions), key=lambda d: -d[1])

    def mem_write(self, name, addr, word):
        self.inner.mem_write(name, addr, word)

    def mem_read(self, name, addr):
        return self.inner.mem_read(name, addr)

    def reg_write(self, name, value):
        self.inner.reg_write(name, value)

    def counters(self):
        out = dict(self.inner.counters())
        out.update(self.c)
        return out

    def _to(self, nid, v, part):
        ip, mac, port, smac = self.nodes[nid]
        p = v.payload
        head = p[:NICE_LEN - 4] + part.to_bytes(2, "big") + p[NICE_LEN - 2:NICE_LEN]
        return Output(port, udp_frame(mac, smac, v.src_ip, ip, v.sport, v.dport,
                                      head + p[NICE_LEN:], ttl=v.ttl - 1))

    def process(self, frame, ingress_port, *, user=0, arrival=0):
        v = parse_udp(frame)
        if v is None or v.dport != NICE_UDP_PORT or len(v.payload) < NICE_LEN \
                or ingress_port >= self.P:
            return self.inner.process(frame, ingress_port, user=user, arrival=arrival)
        dst = int.from_bytes(v.dst_ip, "big")
        for ring, multi in ((self.uni, False), (self.mc, True)):
            if ring.contains(dst):
                break
        else:
            return self.inner.process(frame, ingress_port, user=user, arrival=arrival)
        c = self.c
        part = self.sub2part.get((dst - ring.base) >> (32 - ring.sub))
        if multi:
            c["nice.multicast"] += 1
            members = self.put_set.get(part) if part is not None else None
            if not members:
                c["nice.miss"] += 1
                return []
            c["nice.copies"] += len(members)
            return [self._to(n, v, part) for n in members]
        c["nice.unicast"] += 1
        if part is None or part not in self.primary:
            c["nice.miss"] += 1
            return []
        nid = self.primary[part]
        src = int.from_bytes(v.src_ip, "big")
        for a, n, r in self.divisions.get(part, ()):
            if (src ^ a) >> (32 - n) == 0 if n else True:
                c["nice.division"] += 1
                nid = r
                break
        if nid not in self.nodes:
            c["nice.miss"] += 1
            return []
        return [self._to(nid, v, part)]


def model_available():
    """Whether NICE's program and its configuration for the data-plane model are there
    (``program.make_nice`` and ``config.model_writes``); else the runs use :class:`RefNice`."""
    try:
        from . import config as nconfig
        from . import program  # noqa: F401
    except ImportError:
        return False
    return hasattr(nconfig, "model_writes")


# ---- hosts ---------------------------------------------------------------------------------------
class Agent:
    """One host's agent: one CPU (messages in arrival order, ``busy`` until then), sends that
    leave when their CPU work is done (the cable queues them behind each other)."""

    def __init__(self, run, host, index, nid=None):
        self.run, self.host, self.sim = run, host, run.sim
        self.index, self.nid = index, nid
        self.busy = 0
        self.alive = True
        self.cpu_ns = 0
        self.rx_bytes = self.tx_bytes = 0
        self.msgs = 0
        host.bind(HOST_PORT, self._rx)

    def work(self, ns):
        """CPU work of ``ns`` after what is queued: returns the time it is done."""
        now = self.sim.now
        t = (self.busy if self.busy > now else now) + ns
        self.busy = t
        self.cpu_ns += ns
        return t

    def send(self, ip, payload):
        """Send one datagram (its CPU cost first); returns the time it left the CPU."""
        t = self.work(self.run.costs.tx(len(payload) - APP))
        self.tx_bytes += len(payload) + 42
        self.host.send(ip, HOST_PORT, HOST_PORT, payload, t)
        return t

    def send_object(self, ips, h, size):
        """The fragments of an object of ``size`` bytes to each address in ``ips``
        (interleaved fragment by fragment: concurrent transfers sharing the cable); ``h``:
        the header fields with frag/nfrag/size replaced per fragment."""
        nf = n_frags(size)
        op, flags, _f, _n, client, req, ts, _s, part, rsv, key = h
        for i in range(nf):
            dl = min(FRAG_DATA, size - i * FRAG_DATA) if size else 0
            p = _H.pack(op, flags, i, nf, client, req, ts, size, part, rsv) + key + bytes(dl)
            for ip in ips:
                self.send(ip, p)

    def _rx(self, v):
        if not self.alive:
            return
        p = v.payload
        self.rx_bytes += len(p) + 42
        self.msgs += 1
        f = _H.unpack_from(p)
        self.work(self.run.costs.rx(len(p) - APP))
        self.handle(v, f, p[NICE_LEN:APP])

    def handle(self, v, f, key):
        raise NotImplementedError


class _Assembly:
    """Fragments of one object arriving at one agent."""
    __slots__ = ("got", "n", "first")

    def __init__(self, n, now):
        self.got, self.n, self.first = set(), n, now


class Node(Agent):
    """A storage node (also the replica-oblivious gateway's random hop). ``store``: key ->
    (ts, client, req, size); ``pending``: key -> the same, locked (NICE-2PC / 2PC);
    ``handoff_store``: a handoff's separate database."""

    def __init__(self, run, host, index, nid):
        super().__init__(run, host, index, nid)
        self.store, self.pending, self.handoff_store = {}, {}, {}
        self.asm = {}                   # (client, req, kind) -> _Assembly
        self.puts = {}                  # primary: (client, req) -> put state
        self.counter = 0
        self.forwarded_gets = 0
        self.gets_in = 0                # GETs that reached this node (from the switch)
        self.gets_served = 0            # GET_REPLYs this node sent (the figure 10 counters)
        self.gets_waited = 0            # of those, gets that found the object locked
        self.lock_wait_ns = 0           # their total wait for the commit
        self.waiting = {}               # key -> [(client, req, part, flags, t)]: locked gets

    # helpers
    def _assemble(self, f, tag):
        k = (f[4], f[5], tag)
        a = self.asm.get(k)
        if a is None:
            a = self.asm[k] = _Assembly(f[3], self.sim.now)
        a.got.add(f[2])
        if len(a.got) < a.n:
            return False
        del self.asm[k]
        return True

    def handle(self, v, f, key):
        op, flags, frag, nfrag, client, req, ts, size, part, rsv = f
        run = self.run
        sch = run.scheme
        if rsv == ST_HB:
            return
        if rsv == ST_SYNC:              # a handoff's object for a rejoining node
            if op == OP_PUT and self._assemble(f, "sync"):
                self.work(run.costs.store(size))
                old = self.store.get(key)
                if old is None or old[0] < ts:
                    self.store[key] = (ts, client, req, size)
                run.synced_one(self)
            return
        if op == OP_GET:
            self.gets_in += 1
            if sch == "rog" and rsv == ST_CLIENT and not run.is_primary(self, part):
                self.send(run.node_ip(run.primary_of(part)), _H.pack(
                    op, flags, 0, 1, client, req, 0, size, part, ST_RELAY) + key)
                return
            self.serve_get(client, req, key, part, flags)
            return
        if op == OP_FWD_GET:
            self.serve_get(client, req, key, part, flags)
            return
        if op == OP_PUT:
            if sch == "nice":
                return self.nice_fragment(f, key)
            if rsv in (ST_CLIENT, ST_RELAY):
                if not self._assemble(f, "in"):
                    return
                if sch == "rog" and rsv == ST_CLIENT and not run.is_primary(self, part):
                    self.send_object([run.node_ip(run.primary_of(part))],
                                     (op, flags, 0, 0, client, req, 0, size, part, ST_RELAY,
                                      key), size)
                    return
                return self.noob_primary(f, key)
            if rsv in (ST_REPL, ST_PREP):
                if not self._assemble(f, "repl"):
                    return
                return self.noob_secondary(f, key)
            return
        if op == OP_PUT_ACK:
            return self.on_put_ack(f, key, v)
        if op == OP_TS:
            return self.on_ts(f, key)
        if op == OP_TS_ACK:
            return self.on_ts_ack(f, key, v)

    # ---- gets
    def serve_get(self, client, req, key, part, flags, waited=None):
        run = self.run
        if key in self.pending and run.locks:
            # NICE-2PC and 2PC: a get of a locked object waits for the commit (docs/nice.md,
            # "why a get of a locked object waits"); primary-backup has no locks
            self.waiting.setdefault(key, []).append((client, req, part, flags, self.sim.now))
            return
        if waited is not None:
            self.gets_waited += 1
            self.lock_wait_ns += self.sim.now - waited
        rec = self.store.get(key) or self.handoff_store.get(key)
        if rec is None and run.is_handoff(self, part):
            # a handoff without the object: forward to the primary
            self.forwarded_gets += 1
            self.send(run.node_ip(run.primary_of(part)),
                      _H.pack(OP_FWD_GET, flags, 0, 1, client, req, 0, 0, part, ST_RELAY) + key)
            return
        size = rec[3] if rec else 0
        self.gets_served += 1
        self.work(run.costs.get(size))
        self.send_object([run.client_ip(client)],
                         (OP_GET_REPLY, flags, 0, 0, client, req, rec[0] if rec else 0, size,
                          part, ST_CTRL, key), size)

    # ---- NICE-2PC
    def nice_fragment(self, f, key):
        op, flags, frag, nfrag, client, req, ts, size, part, rsv = f
        if not self._assemble(f, "nice"):
            return
        run = self.run
        self.work(run.costs.store(size))    # lock + log + pending: one transaction
        self.pending[key] = (0, client, req, size)
        if run.is_primary(self, part):
            self._primary_got(part, client, req, key, size, self.nid)
        else:
            self.send(run.node_ip(run.primary_of(part)),
                      _H.pack(OP_PUT_ACK, flags, 0, 1, client, req, 0, size, part, ST_CTRL)
                      + key)

    def _pstate(self, part, client, req, key, size):
        k = (client, req)
        st = self.puts.get(k)
        if st is None:
            members = list(self.run.put_set(part))
            st = self.puts[k] = {"part": part, "key": key, "size": size, "acks": set(),
                                 "members": members, "ts": 0, "tsacks": set(),
                                 "phase": 1, "t0": self.sim.now}
            self.sim.at(self.sim.now + self.run.ack_timeout_ns, self._ack_timeout, k)
        return st

    def _primary_got(self, part, client, req, key, size, who):
        st = self._pstate(part, client, req, key, size)
        if st["phase"] != 1:
            return
        st["acks"].add(who)
        if all(m in st["acks"] for m in st["members"]):
            st["phase"] = 2
            self.counter += 1
            st["ts"] = ts = (self.nid << 24) | (self.counter & 0xFFFFFF)
            run = self.run
            h = _H.pack(OP_TS, 0, 0, 1, client, req, ts, size, part, ST_CTRL) + key
            if run.scheme == "nice":
                self.send(run.mc_addr(key), h)
            else:                       # 2PC: commit to each secondary, then to itself
                for m in st["members"]:
                    if m != self.nid:
                        self.send(run.node_ip(m), h)
                self._commit(key, ts, part)
                st["tsacks"].add(self.nid)
                self._maybe_reply(client, req)

    def on_put_ack(self, f, key, v):
        op, flags, frag, nfrag, client, req, ts, size, part, rsv = f
        who = self.run.nid_of_ip(v.src_ip)
        if self.run.scheme == "nice" or self.run.consistency == "2pc":
            self._primary_got(part, client, req, key, size, who)
        else:                            # primary-backup: the secondary stored it
            st = self.puts.get((client, req))
            if st is None or st["phase"] != 2:
                return
            st["tsacks"].add(who)
            self._maybe_reply(client, req)

    def on_ts(self, f, key):
        op, flags, frag, nfrag, client, req, ts, size, part, rsv = f
        self._commit(key, ts, part)
        run = self.run
        if run.is_primary(self, part) and (client, req) in self.puts:
            self.puts[(client, req)]["tsacks"].add(self.nid)
            self._maybe_reply(client, req)
        else:
            self.send(run.node_ip(run.primary_of(part)),
                      _H.pack(OP_TS_ACK, 0, 0, 1, client, req, ts, size, part, ST_CTRL) + key)

    def _commit(self, key, ts, part):
        rec = self.pending.pop(key, None)
        # as the agents (codec.py) commit: the log record deleted (one transaction), the
        # object written to its store (another)
        self.work(self.run.costs.store(64) + (self.run.costs.store(rec[3]) if rec else 0))
        if rec is not None:
            rec = (ts,) + rec[1:]
            db = self.handoff_store if self.run.is_handoff(self, part) else self.store
            old = db.get(key)
            if old is None or old[0] < ts or (old[0] >> 24 != ts >> 24):
                db[key] = rec
        self._release(key)

    def _release(self, key):
        """The lock is gone: the gets that waited on it are served (after the commit's
        work, in their arrival order)."""
        if key in self.pending:
            return
        for client, req, part, flags, t in self.waiting.pop(key, ()):
            self.serve_get(client, req, key, part, flags, waited=t)

    def on_ts_ack(self, f, key, v):
        op, flags, frag, nfrag, client, req, ts, size, part, rsv = f
        st = self.puts.get((client, req))
        if st is None:
            return
        st["tsacks"].add(self.run.nid_of_ip(v.src_ip))
        self._maybe_reply(client, req)

    def _maybe_reply(self, client, req):
        st = self.puts.get((client, req))
        if st is None or st["phase"] != 2:
            return
        if all(m in st["tsacks"] for m in st["members"]):
            del self.puts[(client, req)]
            self.send(self.run.client_ip(client), _H.pack(
                OP_PUT_REPLY, 0, 0, 1, client, req, st["ts"], st["size"], st["part"],
                ST_CTRL) + st["key"])

    def _ack_timeout(self, k):
        st = self.puts.get(k)
        if st is None or st["phase"] == 3 or not self.alive:
            return
        if st["phase"] == 1 or not all(m in st["tsacks"] for m in st["members"]):
            del self.puts[k]
            missing = [m for m in st["members"]
                       if m not in (st["acks"] if st["phase"] == 1 else st["tsacks"])]
            self.pending.pop(st["key"], None)
            self._release(st["key"])
            self.send(self.run.client_ip(k[0]), _H.pack(
                OP_ABORT, 0, 0, 1, k[0], k[1], 0, st["size"], st["part"], ST_CTRL) + st["key"])
            for m in missing:
                self.run.report_timeout(self, m)

    # ---- NOOB
    def noob_primary(self, f, key):
        op, flags, frag, nfrag, client, req, ts, size, part, rsv = f
        run = self.run
        st = self._pstate(part, client, req, key, size)
        others = [m for m in st["members"] if m != self.nid]
        if run.consistency == "pb":
            self.work(run.costs.store(size))
            self.counter += 1           # the version, as NICE's primary makes it
            st["ts"] = ts = (self.nid << 24) | (self.counter & 0xFFFFFF)
            self._commit_direct(key, (ts, client, req, size))
            st["phase"] = 2
            st["tsacks"].add(self.nid)
            self.send_object([run.node_ip(m) for m in others],
                             (OP_PUT, 0, 0, 0, client, req, ts, size, part, ST_REPL, key), size)
            self._maybe_reply(client, req)
        else:
            self.work(run.costs.store(size))    # lock + log + pending: one transaction
            self.pending[key] = (0, client, req, size)
            self.send_object([run.node_ip(m) for m in others],
                             (OP_PUT, 0, 0, 0, client, req, 0, size, part, ST_PREP, key), size)
            self._primary_got(part, client, req, key, size, self.nid)

    def _commit_direct(self, key, rec):
        self.store[key] = rec

    def noob_secondary(self, f, key):
        op, flags, frag, nfrag, client, req, ts, size, part, rsv = f
        run = self.run
        if rsv == ST_REPL:
            self.work(run.costs.store(size))
            self._commit_direct(key, (ts, client, req, size))
        else:
            self.work(run.costs.store(size))    # lock + log + pending: one transaction
            self.pending[key] = (0, client, req, size)
        self.send(run.node_ip(run.primary_of(part)),
                  _H.pack(OP_PUT_ACK, 0, 0, 1, client, req, 0, size, part, ST_CTRL) + key)


class Gateway(Agent):
    """The load balancer of ``rag`` (to the primary) and ``rog`` (to a random storage node):
    it receives the whole request, then forwards it."""

    def handle(self, v, f, key):
        op, flags, frag, nfrag, client, req, ts, size, part, rsv = f
        run = self.run
        if op == OP_PUT and nfrag > 1:
            k = (client, req)
            a = run._gw_asm.setdefault(k, set())
            a.add(frag)
            if len(a) < nfrag:
                return
            del run._gw_asm[k]
        if run.scheme == "rag":
            to, stage = run.primary_of(part), ST_RELAY
        else:
            to, stage = run.random_node(client, req), ST_CLIENT
        if op == OP_PUT:
            self.send_object([run.node_ip(to)], (op, flags, 0, 0, client, req, 0, size, part,
                                                 stage, key), size)
        else:
            self.send(run.node_ip(to), _H.pack(op, flags, 0, 1, client, req, 0, size, part,
                                               stage) + key)


class Client(Agent):
    """A client: operations from a list (closed loop, one at a time, or open loop at given
    times); a put that gets ABORT or no answer in ``timeout`` is sent again after ``retry``."""

    def __init__(self, run, host, index):
        super().__init__(run, host, index)
        self.ops = []                   # [kind, key, size, t_arrival]
        self.start_t, self.done_t, self.ok = [], [], []
        self.attempt_t = []
        self.got = {}
        self.asm = {}
        self.req_of = {}                # req -> op index
        self.next_req = 1
        self.aborts = self.timeouts = 0
        self.acked = []                 # (key, ts, req)
        self.closed = True

    def begin(self, i):
        if self.done_t[i] >= 0 or (self.start_t[i] >= 0 and self.run.sim.now >= self.deadline(i)):
            return
        if self.start_t[i] < 0:
            self.start_t[i] = self.sim.now
            if self.run.track_roles:
                self.run.snap_roles(self.ops[i][1])
        self.attempt_t[i] = self.sim.now
        req = self.next_req
        self.next_req += 1
        self.req_of[req] = i
        kind, key, size, _ = self.ops[i]
        run = self.run
        flags = 1 if self.attempt_t[i] != self.start_t[i] else 0
        part = run.part_of(key)
        if kind == "put":
            if run.scheme == "nice":
                dst = run.mc_addr(key)
            elif run.scheme == "rac":
                dst = run.node_ip(run.primary_of(part))
            else:
                dst = run.gw_ip
            self.send_object([dst], (OP_PUT, flags, 0, 0, self.index, req, 0, size,
                                     0 if run.scheme == "nice" else part, ST_CLIENT, key), size)
        else:
            if run.scheme == "nice":
                dst = run.uni_addr(key)
            elif run.scheme == "rac":
                dst = run.node_ip(run.get_replica(part, self.index))
            else:
                dst = run.gw_ip
            self.send(dst, _H.pack(OP_GET, flags, 0, 1, self.index, req, 0, 0,
                                   0 if run.scheme == "nice" else part, ST_CLIENT) + key)
        self.sim.at(self.sim.now + run.timeout_ns, self._timeout, i, req)

    def deadline(self, i):
        return self.start_t[i] + self.run.give_up_ns

    def _timeout(self, i, req):
        if self.done_t[i] >= 0 or self.req_of.get(req) != i:
            return
        self.timeouts += 1
        self.req_of.pop(req, None)
        self._retry(i)

    def _retry(self, i):
        if self.sim.now + self.run.retry_ns < self.deadline(i):
            self.sim.at(self.sim.now + self.run.retry_ns, self.begin, i)
        else:
            self._finish(i, False)

    def _finish(self, i, ok):
        if self.done_t[i] >= 0:
            return
        self.done_t[i] = self.sim.now
        self.ok[i] = ok
        if self.run.track_roles:
            self.run.add_roles()
        if self.closed and i + 1 < len(self.ops):
            self.begin(i + 1)

    def handle(self, v, f, key):
        op, flags, frag, nfrag, client, req, ts, size, part, rsv = f
        i = self.req_of.get(req)
        if i is None:
            return
        if op == OP_GET_REPLY:
            if nfrag > 1:
                a = self.asm.setdefault(req, set())
                a.add(frag)
                if len(a) < nfrag:
                    return
                del self.asm[req]
            del self.req_of[req]
            self.got[i] = ts
            self._finish(i, True)
        elif op == OP_PUT_REPLY:
            del self.req_of[req]
            self.acked.append((key, ts, req))
            self._finish(i, True)
        elif op == OP_ABORT:
            self.aborts += 1
            del self.req_of[req]
            self._retry(i)


class MetadataNode(Agent):
    """The metadata node: heartbeats and time-out reports arrive as datagrams and go to the
    membership logic (:class:`.metadata.Metadata`: 3 missed beats or 2 reported time-outs,
    handoff choice, two-phase rejoin), whose table writes go to the switch at once."""

    def handle(self, v, f, key):
        run = self.run
        src = run.nid_of_ip(v.src_ip)
        if f[9] == ST_HB:
            run.meta.heartbeat(src)
        elif f[9] == ST_REPORT:
            run.meta_call(run.meta.report_timeout, src, f[6])

    def tick(self):
        run = self.run
        run.meta_call(run.meta.tick)
        self.sim.at(self.sim.now + run.heartbeat_ns, self.tick)


# ---- the run ------------------------------------------------------------------------------------
class NiceRun:
    """One simulated run (see the module doc). Arguments:

    * ``scheme``: ``nice``, ``rac``, ``rag``, ``rog``; ``consistency`` (NOOB): ``pb`` or
      ``2pc``; ``replicas`` R (1..9, the paper's figure 9); ``nodes`` (15 storage nodes).
    * ``clients`` (1); ``ops``: the workload, per client ``[(kind, key, size, t_s)]`` (None:
      closed loop, each starts when the last ended; else open loop at ``t_s``).
    * ``gbps`` (1.0), ``link_ns`` (per cable each way), ``costs`` (a :data:`COSTS`-shaped
      table), ``sync`` (stores fsync'd), ``cost_scale``.
    * ``switch``: ``ref`` / ``model``; ``divisions``: give client ``i`` the partition's replica
      ``i`` for gets (NICE's get load balancing: the switch's division entries; with
      ``rac`` and 2PC the same assignment made by the client, the paper's "client-side load
      balancing"; primary-backup has none: its gets are the primary's. False: every get to
      the primary).
    * failures: ``fail`` = (node index, t_s), ``rejoin_s``, ``heartbeat_s``, ``ack_timeout_s``
      (the primary's wait for PUT_ACK / TS_ACK), ``timeout_s`` (the client's), ``retry_s``,
      ``give_up_s``.
    """

    def __init__(self, scheme, *, consistency="pb", replicas=3, nodes=15, clients=1, ops=None,
                 gbps=1.0, link_ns=500, costs=None, sync=False, cost_scale=1.0, seed=1,
                 switch="ref", divisions=False, fail=None, rejoin_s=None, heartbeat_s=1.0,
                 ack_timeout_s=0.5, timeout_s=2.0, retry_s=2.0, give_up_s=30.0,
                 model_class=None, report_timeouts=True):
        if scheme not in SCHEMES:
            raise ValueError(f"scheme {scheme!r}: one of {SCHEMES}")
        if consistency not in CONSISTENCY:
            raise ValueError(f"consistency {consistency!r}: one of {CONSISTENCY}")
        if not 1 <= replicas <= nodes:
            raise ValueError("replicas: 1..nodes")
        self.scheme, self.consistency = scheme, (consistency if scheme != "nice" else "nice2pc")
        if divisions and scheme not in ("nice", "rac"):
            raise ValueError("divisions: NICE's switch entries, or RAC's client-side choice")
        if divisions and scheme == "rac" and consistency == "pb":
            raise ValueError("divisions: primary-backup serves gets at the primary only")
        # gets of a locked object wait for its commit (NICE-2PC, 2PC)
        self.locks = self.consistency in ("nice2pc", "2pc")
        self.R, self.n_nodes, self.seed = replicas, nodes, int(seed)
        self.streams = Streams(seed)
        self.costs = Costs(costs or COSTS, self.streams.generator("costs"), sync=sync,
                           scale=cost_scale)
        self.sim = Sim()
        self.net = Network(self.sim)
        self.ack_timeout_ns = int(ack_timeout_s * 1e9)
        self.timeout_ns, self.retry_ns = int(timeout_s * 1e9), int(retry_s * 1e9)
        self.give_up_ns = int(give_up_s * 1e9)
        self.heartbeat_ns = int(heartbeat_s * 1e9)
        self.fail, self.rejoin_s = fail, rejoin_s
        self.report_timeouts = bool(report_timeouts)
        pc, ps, px = rack_plan(clients + 1, 0, ())
        _, ps, px = rack_plan(0, nodes, ("md",))
        self.plan = pc + ps + [px["md"]]
        self.switch_kind = switch if scheme == "nice" else "route"
        pipeline = mclass = None
        if self.switch_kind == "model":
            from netstor.programs import default_pipeline
            pipeline = default_pipeline(2)
            mclass = _list_model_class(model_class)
        elif self.switch_kind == "ref":
            mclass = _ref_class()
        self.switch = SwitchNode(self.net, "tor", {0: port_mac(0).to_bytes(6, "big"),
                                                   1: port_mac(1).to_bytes(6, "big")},
                                 pipeline=pipeline, model_class=mclass)
        hosts = {}
        for h in self.plan:
            node = Host(self.net, h.name, h.mac, h.ip, port_mac(h.segment), udp_checksum=False)
            self.net.connect(node, 0, self.switch, h.segment, latency_ns=link_ns, gbps=gbps)
            hosts[h.name] = node
        self.clients = [Client(self, hosts[h.name], k) for k, h in enumerate(pc[:clients])]
        self.gw = Gateway(self, hosts[pc[clients].name], 0)
        self.gw_ip = self.gw.host.ip
        self._gw_asm = {}
        self.nodes = [Node(self, hosts[h.name], k, k + 1) for k, h in enumerate(ps)]
        self.md = MetadataNode(self, hosts["md"], 0)
        self._ip_nid = {n.host.ip: n.nid for n in self.nodes}
        self._nid_ip = {n.nid: n.host.ip for n in self.nodes}
        self._client_ip = [c.host.ip for c in self.clients]
        # partitions: partition p = node p's arc; replicas p, p+1, .. (mod nodes)
        self.members0 = {p: [1 + (p + j) % nodes for j in range(replicas)]
                         for p in range(nodes)}
        self.divisions = bool(divisions)
        self.events = []
        self.config = route_config(self.plan)
        from .metadata import Metadata, ModelSink
        if self.switch_kind == "model":
            from netstor.driver.tables import TableWriter
            writes, regs = cached_config_ops(self.config)
            self.switch.apply_ops(list(writes), regs)
            sink = ModelSink(self.switch.model, TableWriter(self.switch.pipeline))
        else:
            self.switch.configure(self.config)
            sink = self._ref_sink if self.switch_kind == "ref" else None
        self.meta = Metadata(self.nice_section(), clock=lambda: self.sim.now / 1e9, sink=sink,
                             beat=heartbeat_s, nodes_max=4096)
        self.state = self.meta.state
        self._ref_sink(())
        self._meta_seen = 0
        self._sync_wait = {}
        for c, lst in zip(self.clients, ops or [[] for _ in self.clients]):
            c.ops = [list(o) for o in lst]
            n = len(lst)
            c.start_t, c.done_t = [-1] * n, [-1] * n
            c.attempt_t, c.ok = [-1] * n, [False] * n
            c.closed = any(o[3] is None for o in lst)
        self._keyinfo = {}
        self.track_roles = False
        self.role_bytes = [0, 0]        # bytes in + out at primaries, at secondaries
        self.role_n = [0, 0]

    def snap_roles(self, key):
        """Closed loop, one operation at a time: remember every node's bytes now."""
        self._snap = (key, [n.rx_bytes + n.tx_bytes for n in self.nodes])

    def add_roles(self):
        """The operation is over (its last message answered): what its primary and its
        secondaries sent and received during it."""
        key, before = self._snap
        r = self.put_set(self.part_of(key))
        for j, m in enumerate(r):
            n = self.nodes[m - 1]
            role = 0 if j == 0 else 1
            self.role_bytes[role] += n.rx_bytes + n.tx_bytes - before[m - 1]
            self.role_n[role] += 1

    # ---- the switch's tables (the metadata service's writes) -------------------------------
    def nice_section(self):
        """The ``nice:`` section of the deployment (:mod:`.config`): every storage node
        (behind wire port 1), the partitions (node p's arc: p, p+1, .. mod N), and with
        ``divisions`` client i's /32 given to the partition's member i."""
        ps = self.plan[len(self.clients) + 1:]
        sec = {"smac": ":".join(f"{b:02x}" for b in port_mac(1).to_bytes(6, "big")),
               "nodes": {n.nid: {"ip": h.ip, "mac": ":".join(f"{b:02x}" for b in n.host.mac),
                                 "port": h.segment}
                         for n, h in zip(self.nodes, ps)},
               "partitions": {p: list(r) for p, r in self.members0.items()}}
        if self.divisions:
            sec["divisions"] = {p: [[c.host.ip_str + "/32", r[i % len(r)]]
                                    for i, c in enumerate(self.clients)]
                                for p, r in self.members0.items()}
        return sec

    def _ref_sink(self, ops):
        """The reference switch follows the ring state (whatever the ops)."""
        if self.switch_kind != "ref" or not hasattr(self, "meta"):
            return
        m, st = self.switch.model, self.meta.state
        if not m.nodes:
            for n, h in zip(self.nodes, self.plan[len(self.clients) + 1:]):
                m.set_node(n.nid, h.ip, n.host.mac, h.segment)
            for s_, p in st.subgroups.items():
                m.sub2part[s_] = p
        for nid in list(m.nodes):
            if nid in st.down:
                del m.nodes[nid]
        for n, h in zip(self.nodes, self.plan[len(self.clients) + 1:]):
            if n.nid not in st.down and n.nid not in m.nodes:
                m.set_node(n.nid, h.ip, n.host.mac, h.segment)
        for p in st.partitions:
            prim = st.primary(p)
            if prim is None:
                m.primary.pop(p, None)
                m.put_set.pop(p, None)
                continue
            m.set_partition(p, primary=prim, put_set=st.put_set(p),
                            divisions=st.divisions_of(p))

    def meta_call(self, fn, *args):
        """Call the membership logic; its new events go into :attr:`events` (with the
        virtual time)."""
        out = fn(*args)
        ev = self.meta.events
        for e in ev[self._meta_seen:]:
            self.events.append({"t_s": self.sim.now / 1e9, "event": e[0],
                                "detail": [x if isinstance(x, (int, str)) else str(x)
                                           for x in e[1:]]})
        self._meta_seen = len(ev)
        return out

    # ---- lookups the agents use ------------------------------------------------------------
    def keyinfo(self, key):
        k = self._keyinfo.get(key)
        if k is None:
            s = subgroup(key, UNICAST)
            k = self._keyinfo[key] = (default_partition(s, UNICAST.n_subgroups, self.n_nodes),
                                      vnode_addr(key, UNICAST).to_bytes(4, "big"),
                                      vnode_addr(key, MULTICAST).to_bytes(4, "big"))
        return k

    def part_of(self, key):
        return self.keyinfo(key)[0]

    def uni_addr(self, key):
        return self.keyinfo(key)[1]

    def mc_addr(self, key):
        return self.keyinfo(key)[2]

    def primary_of(self, part):
        return self.state.primary(part)

    def is_primary(self, node, part):
        return self.state.primary(part) == node.nid

    def is_handoff(self, node, part):
        return node.nid in self.state.handoff.get(part, {}).values() \
            and node.nid not in self.state.partitions[part]

    def put_set(self, part):
        return self.state.put_set(part)

    def get_replica(self, part, client):
        """Where a RAC client sends its gets: the primary, or with ``divisions`` (2PC) the
        partition's live replica ``client mod R`` (the NICE division's assignment)."""
        if not self.divisions:
            return self.state.primary(part)
        r = self.replicas_of(part)
        return r[client % len(r)]

    def replicas_of(self, part):
        """The partition's members that serve gets (live), primary first."""
        st = self.state
        return [m for m in st.partitions[part] if st.live(m, part)]

    def node_ip(self, nid):
        return self._nid_ip[nid]

    def nid_of_ip(self, ip):
        return self._ip_nid.get(bytes(ip))

    def client_ip(self, i):
        return self._client_ip[i]

    def random_node(self, client, req):
        u = self.streams.counter("rog").uniform(client * 1_000_003 + req)
        return 1 + int(u * self.n_nodes)

    # ---- failures ---------------------------------------------------------------------------
    def report_timeout(self, reporter, nid):
        """``reporter`` timed out waiting for ``nid``: a report datagram to the metadata node."""
        if self.report_timeouts:
            reporter.send(self.md.host.ip, _H.pack(0, 0, 0, 1, 0, 0, nid, 0, 0, ST_REPORT)
                          + bytes(KEY_LEN))

    def _heartbeats(self, node):
        if node.alive:
            node.send(self.md.host.ip, _H.pack(0, 0, 0, 1, 0, 0, 0, 0, 0, ST_HB) + bytes(16))
        self.sim.at(self.sim.now + self.heartbeat_ns, self._heartbeats, node)

    def kill(self, index):
        n = self.nodes[index]
        n.alive = False
        n.asm.clear()
        n.puts.clear()
        n.pending.clear()
        self.events.append({"t_s": self.sim.now / 1e9, "event": "killed", "detail": [n.nid]})

    def rejoin(self, index):
        """Node ``index`` comes back (its store as it was): phase 1 (put sets), the objects of
        each of its handoffs fetched, then phase 2 (get ring, handoffs out)."""
        n = self.nodes[index]
        n.alive = True
        n.busy = self.sim.now
        self.events.append({"t_s": self.sim.now / 1e9, "event": "back", "detail": [n.nid]})
        fetch = self.meta_call(self.meta.rejoin, n.nid)
        hands = sorted(set(fetch.values()))
        self._fetch_left = set(hands)
        if not hands:
            self.meta_call(self.meta.caught_up, n.nid)
        for h in hands:
            self._sync(index, h, set())

    def _sync(self, index, hand, sent):
        """The rejoining node fetches the handoff's objects (each its fragments over the
        cables), round after round until nothing new; then it is consistent."""
        n, h = self.nodes[index], self.nodes[hand - 1]
        todo = [(k, r) for k, r in h.handoff_store.items() if k not in sent]
        if not todo:
            self._fetch_left.discard(hand)
            if not self._fetch_left:
                self.meta_call(self.meta.caught_up, n.nid)
                self.events[-1]["objects_fetched"] = getattr(self, "synced", 0)
            return
        self._sync_wait[index] = (hand, sent, len(todo))
        for k, rec in todo:
            sent.add(k)
            h.work(self.costs.get(rec[3]))
            h.send_object([n.host.ip], (OP_PUT, 0, 0, 0, rec[1], rec[2], rec[0], rec[3],
                                        0, ST_SYNC, k), rec[3])
        self.synced = getattr(self, "synced", 0) + len(todo)

    def synced_one(self, node):
        """The rejoining node stored one fetched object; after the round's last, the next
        round (what the handoff committed meanwhile)."""
        w = self._sync_wait.get(node.index)
        if w is None:
            return
        hand, sent, left = w
        self._sync_wait[node.index] = (hand, sent, left - 1)
        if left == 1:
            self.sim.at(max(self.sim.now, node.busy), self._sync, node.index, hand, sent)

    # ---- running ------------------------------------------------------------------------------
    def run(self, until_s=None):
        t0 = time.perf_counter()
        for c in self.clients:
            if not c.ops:
                continue
            if c.closed:
                self.sim.at(0, c.begin, 0)
            else:
                for i, o in enumerate(c.ops):
                    self.sim.at(int(o[3] * 1e9), c.begin, i)
        if self.fail is not None:
            idx, at_s = self.fail
            for n in self.nodes:
                self.sim.at(int(n.index * self.heartbeat_ns / self.n_nodes), self._heartbeats, n)
            self.sim.at(self.heartbeat_ns, self.md.tick)
            self.sim.at(int(at_s * 1e9), self.kill, idx)
            if self.rejoin_s is not None:
                self.sim.at(int(self.rejoin_s * 1e9), self.rejoin, idx)
        self.sim.run(until=None if until_s is None else int(until_s * 1e9))
        self.wall_s = time.perf_counter() - t0
        return self

    def link_bytes(self):
        """Frame bytes over every cable (both directions)."""
        return sum(link.bytes for link in self.net.links())

    def op_times(self, client=0):
        c = self.clients[client]
        return [(c.done_t[i] - c.start_t[i]) if c.ok[i] else None for i in range(len(c.ops))]

    def acked_lost(self):
        """``(acked puts, lost: held by no replica of the key's partition at the end, under:
        held by fewer than R)``; a newer put of the same key counts as holding it."""
        acked = lost = under = 0
        for c in self.clients:
            for key, ts, req in c.acked:
                acked += 1
                p = self.part_of(key)
                have = 0
                for m in self.replicas_of(p):
                    n = self.nodes[m - 1]
                    rec = n.store.get(key) or n.handoff_store.get(key)
                    if rec is not None and rec[0] >= ts:
                        have += 1
                    elif rec is not None and rec[0] >> 24 != ts >> 24:
                        have += 1       # written by another primary later: newer
                if have == 0:
                    lost += 1
                elif have < self.R:
                    under += 1
        return acked, lost, under


@functools.lru_cache(maxsize=4)
def _list_model_class(base=None):
    """The compiled model (else the interpreter) with copy-list multicast groups."""
    from netstor.cluster.switch import default_model_class
    base = default_model_class() if base is None else base

    class ListGroups(base):
        def __init__(self, pipeline):
            super().__init__(pipeline, groups="list")
    ListGroups.__name__ = ListGroups.__qualname__ = f"{base.__name__}(groups=list)"
    return ListGroups


@functools.lru_cache(maxsize=1)
def _ref_class():
    class Ref(RefNice):
        def __init__(self, pipeline):
            super().__init__(pipeline)
    Ref.__name__ = Ref.__qualname__ = "RefNice"
    return Ref


def key_pool(n, seed=1, part=None, n_nodes=15, prefix="k"):
    """``n`` distinct keys (16 bytes), optionally all in partition ``part``."""
    out, i = [], 0
    while len(out) < n:
        k = f"{prefix}{seed}-{i}".encode().ljust(KEY_LEN, b"\0")
        i += 1
        if part is not None and default_partition(subgroup(k, UNICAST), UNICAST.n_subgroups,
                                                  n_nodes) != part:
            continue
        out.append(k)
    return out


def latency_run(scheme, kind, size, *, n=50, replicas=3, consistency="pb", seed=1,
                sync=False, switch="ref", costs=None):
    """Single client, ``n`` operations one after the other (the paper's sections 6.1, 6.2, 6.4):
    gets of stored objects or puts of new ones, of ``size`` bytes, random keys. Returns
    ``{mean_us, times_us, link_bytes_per_op, primary_bytes, secondary_bytes, ...}``."""
    keys = key_pool(n, seed)
    ops = [(kind, k, size, None) for k in keys]
    run = NiceRun(scheme, consistency=consistency, replicas=replicas, ops=[ops], seed=seed,
                  sync=sync, switch=switch, costs=costs)
    run.track_roles = True
    if kind == "get":                   # the objects are there (every replica)
        for k in keys:
            for m in run.replicas_of(run.part_of(k)):
                run.nodes[m - 1].store[k] = (1, 0, 0, size)
    run.run()
    t = [x for x in run.op_times() if x is not None]
    rb, rn = run.role_bytes, run.role_n
    return {"scheme": scheme, "kind": kind, "size": size, "replicas": replicas,
            "consistency": run.consistency, "n": len(t), "failed": n - len(t),
            "mean_us": float(np.mean(t)) / 1e3 if t else None,
            "p50_us": float(np.median(t)) / 1e3 if t else None,
            "link_bytes_per_op": run.link_bytes() / n,
            "primary_bytes_per_op": rb[0] / max(1, rn[0]),
            "secondary_bytes_per_op": rb[1] / rn[1] if rn[1] else None,
            "switch": run.switch_kind, "model": run.switch.model_class.__name__,
            "counters": {k: v for k, v in run.switch.counters().items()
                         if k.startswith("nice.") and v},
            "frames": run.switch.frames_in, "events": run.sim.events,
            "cpu_s": round(run.sim.cpu_s, 3)}


def failure_run(*, duration_s=120.0, fail_s=30.0, rejoin_s=90.0, rate=50.0, clients=3,
                put_ratio=0.2, size=1024, heartbeat_s=1.0, ack_timeout_s=0.5, retry_s=2.0,
                timeout_s=2.0, seed=1, switch="ref", bin_s=1.0, fail_index=None,
                report_timeouts=True, fail_role="secondary"):
    """The paper's section 6.6: ``clients`` clients (open loop, Poisson ``rate`` ops/s each),
    ``put_ratio`` puts of new keys and gets of one of the client's last 100 acknowledged keys,
    ``size``-byte objects, all in partition 0 (R = 3, gets load-balanced: client i's get
    division is replica i); the partition's second secondary (``fail_role="primary"``: its
    primary) fails at ``fail_s`` and rejoins at ``rejoin_s``. Only primaries report time-outs
    (as the agents do), so a primary's failure is found by the heartbeats."""
    st = Streams(seed)
    keys = key_pool(int(duration_s * rate * clients * put_ratio * 1.3) + 50, seed, part=0)
    ki = 0
    ops = []
    for c in range(clients):
        g = st.generator(f"fail/{c}")
        t = np.cumsum(g.standard_exponential(int(duration_s * rate * 1.2) + 10) / rate)
        t = t[t < duration_s]
        is_put = g.random(len(t)) < put_ratio
        lst = []
        for tt, p in zip(t.tolist(), is_put.tolist()):
            if p:
                lst.append(["put", keys[ki], size, tt])
                ki += 1
            else:
                lst.append(["get", None, size, tt])
        ops.append(lst)
    run = NiceRun("nice", replicas=3, clients=clients, ops=ops, seed=seed, switch=switch,
                  divisions=True, heartbeat_s=heartbeat_s, ack_timeout_s=ack_timeout_s,
                  retry_s=retry_s, timeout_s=timeout_s, give_up_s=duration_s,
                  report_timeouts=report_timeouts)
    p0 = run.replicas_of(0)
    if fail_role not in ("secondary", "primary"):
        raise ValueError("fail_role: secondary or primary")
    # the partition's second secondary (the paper's "secondary node 2") or its primary
    idx = (p0[2 if fail_role == "secondary" else 0] - 1) if fail_index is None else fail_index
    run.fail, run.rejoin_s = (idx, fail_s), rejoin_s
    # gets pick one of the client's recently acked keys when they start
    for c in run.clients:
        orig = c.begin

        def begin(i, c=c, orig=orig):
            op = c.ops[i]
            if op[0] == "get" and op[1] is None:
                if not c.acked:
                    c.done_t[i] = c.start_t[i] = c.sim.now
                    c.ok[i] = None
                    return
                recent = c.acked[-100:]
                u = run.streams.counter(f"pick/{c.index}").uniform(i)
                op[1] = recent[int(u * len(recent))][0]
            orig(i)
        c.begin = begin
    # pre-failure objects would be there; the experiment starts empty (as ours)
    run.run(until_s=duration_s + 5 * timeout_s)
    # timeline: completions per bin
    nb = int(math.ceil(duration_s / bin_s))
    puts, gets = np.zeros(nb, int), np.zeros(nb, int)
    put_fail_t = []
    ok_attempts = []
    for c in run.clients:
        for i, o in enumerate(c.ops):
            if c.ok[i] is None:
                continue
            if c.ok[i]:
                b = min(nb - 1, int(c.done_t[i] / 1e9 / bin_s))
                (puts if o[0] == "put" else gets)[b] += 1
                if o[0] == "put":
                    ok_attempts.append(c.attempt_t[i] / 1e9)
            elif o[0] == "put":
                put_fail_t.append(c.start_t[i] / 1e9)
    after = sorted(t for t in ok_attempts if t >= fail_s)
    back = after[0] if after else None
    acked, lost, under = run.acked_lost()
    ev = run.events
    return {"bin_s": bin_s, "puts": puts.tolist(), "gets": gets.tolist(),
            "fail_s": fail_s, "rejoin_s": rejoin_s, "heartbeat_s": heartbeat_s,
            "ack_timeout_s": ack_timeout_s, "retry_s": retry_s,
            "report_timeouts": report_timeouts, "fail_role": fail_role,
            "failed_node": run.nodes[idx].nid, "rate_per_client": rate, "clients": clients,
            "put_ratio": put_ratio, "size": size,
            "puts_available_again_s": back,
            "unavailable_s": None if back is None else round(back - fail_s, 4),
            "aborts": sum(c.aborts for c in run.clients),
            "timeouts": sum(c.timeouts for c in run.clients),
            "puts_given_up": len(put_fail_t),
            "forwarded_gets": sum(n.forwarded_gets for n in run.nodes),
            "acked_puts": acked, "acked_puts_lost": lost, "acked_puts_under_replicated": under,
            "events": ev, "switch": run.switch_kind,
            "perf": {"events": run.sim.events, "cpu_s": round(run.sim.cpu_s, 2)}}


#: Figure 10's systems: name -> (scheme, consistency, get divisions).
LB_SYSTEMS = {"nice": ("nice", "pb", True), "pb": ("rac", "pb", False),
              "2pc": ("rac", "2pc", True)}


def lb_run(system, size, replicas, *, n=50, get_only=False, seed=1, switch="ref", sync=True,
           divisions=None, history=False):
    """The paper's section 6.5 (figure 10): one popular object of ``size`` bytes, R =
    ``replicas``; client 0 puts it ``n`` times, clients 1 .. R-1 each get it ``n`` times, all
    closed loop (one operation after another) and starting together; ``get_only``: without
    the put client (the figure's bold markers). ``system``: ``nice`` (client i's /32 is a
    division of the key's partition served by replica i mod R: the get clients land on the R-1
    secondaries, the primary coordinates the puts), ``pb`` (NOOB-RAC primary-only: gets at
    the primary), ``2pc`` (NOOB-RAC 2PC, the client picks replica i mod R: the same
    assignment). Gets of a locked object (NICE-2PC, 2PC) wait for the commit. ``divisions``:
    override the system's (``nice`` without divisions: every get to the primary).
    ``history``: also return every operation as ``(client, kind, start_ns, end_ns, ts)`` (the
    version a get returned, the one a put wrote).

    Returns mean operation times (all operations, gets, puts; us), the makespan, the
    per-replica get counts the agents saw (``gets_in``: GETs the switch delivered to each
    replica, primary first; ``gets_served``), the switch's division counters, the gets that
    found the object locked and their mean wait."""
    if system not in LB_SYSTEMS:
        raise ValueError(f"system {system!r}: one of {sorted(LB_SYSTEMS)}")
    if replicas < 2:
        raise ValueError("replicas: at least 2 (R-1 get clients)")
    scheme, cons, div = LB_SYSTEMS[system]
    div = div if divisions is None else bool(divisions)
    key = key_pool(1, seed, prefix="lb")[0]
    ops = [[] if get_only else [("put", key, size, None)] * n]
    ops += [[("get", key, size, None)] * n for _ in range(replicas - 1)]
    run = NiceRun(scheme, consistency=cons, replicas=replicas, clients=replicas, ops=ops,
                  seed=seed, sync=sync, switch=switch, divisions=div)
    part = run.part_of(key)
    reps = run.replicas_of(part)
    for m in reps:                      # the object is there before the run
        run.nodes[m - 1].store[key] = (1, 0, 0, size)
    run.run()
    times = {"get": [], "put": []}
    hist = []
    for c in run.clients:
        acked = iter(c.acked)
        for i, o in enumerate(c.ops):
            if c.ok[i]:
                times[o[0]].append((c.done_t[i] - c.start_t[i]) / 1e3)
                ts = c.got[i] if o[0] == "get" else next(acked)[1]
                hist.append((c.index, o[0], c.start_t[i], c.done_t[i], ts))
    ends = [max(c.done_t) for c in run.clients if c.ops]
    alls = times["get"] + times["put"]
    nodes = [run.nodes[m - 1] for m in reps]
    waited = sum(x.gets_waited for x in nodes)
    cnt = run.switch.counters()
    return {"system": system, "size": size, "replicas": replicas, "n": n,
            "get_only": bool(get_only), "divisions": div, "partition": part,
            "replica_nodes": reps,
            "ops": len(alls), "failed": (replicas - (1 if get_only else 0)) * n - len(alls),
            "mean_op_us": float(np.mean(alls)) if alls else None,
            "get_us": float(np.mean(times["get"])) if times["get"] else None,
            "put_us": float(np.mean(times["put"])) if times["put"] else None,
            "makespan_ms": max(ends) / 1e6 if ends else None,
            "throughput_ops_s": len(alls) / (max(ends) / 1e9) if ends and max(ends) else None,
            "gets_in": [x.gets_in for x in nodes],
            "gets_served": [x.gets_served for x in nodes],
            "gets_waited": waited,
            "lock_wait_us": (sum(x.lock_wait_ns for x in nodes) / waited / 1e3) if waited
            else 0.0,
            "counters": {k: v for k, v in cnt.items()
                         if k.startswith("nice.") and ("division" in k or "unicast" in k)},
            "switch": run.switch_kind, "model": run.switch.model_class.__name__,
            "events": run.sim.events, "cpu_s": round(run.sim.cpu_s, 3),
            **({"history": hist} if history else {})}
