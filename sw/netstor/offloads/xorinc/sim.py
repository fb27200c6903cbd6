"""XORInc's set-up in the cluster simulator (:mod:`netstor.cluster`): one client and ``n = k + r``
storage nodes behind one switch running our data plane, every host cable at the *bottleneck
bandwidth*, real frames (the XORInc layout: header, pad, chunk data from frame byte 128, up to
1,024 data bytes a packet), virtual time.

::

    client c0 ── wire port 0 ═[ switch ]═ wire port 1 ──┬─ s0 ... s(n-1)
    (10.77.0.10)                                        (10.77.1.10 + i, one cable each)

Stripes: RS(k, r) stripes of ``chunk_bytes`` chunks grouped in blocks (HDFS-RAID's unit):
chunk ``j`` of every stripe of block ``b`` on node ``(b + j) mod n`` (rotated per block), data
random (seeded), parity encoded **with galois** (an independent library:
``GF(2^8)``, polynomial 0x11D, the ISA-L Cauchy matrix computed in galois' own arithmetic).
A run is a sequence of chunk operations with ``window`` of them outstanding at the client (a
new one starts when one completes); its time is the virtual time from the first request to the
last completion; its traffic is what the **switch's own counters** say went in and out of its
wire ports (``in{p}``/``out{p}`` ``.pkts``/``.bytes``), not a formula.

Repair schemes (a degraded read of a lost data chunk; helpers = the first ``k`` surviving
chunk indexes, the controller's documented policy):

* ``normal`` -- a normal read: the chunk from its own node (READ, READ_REPLY).
* ``conv`` -- conventional repair: the client reads the ``k`` helpers' chunks and decodes
  (star: its downlink carries ``k`` chunks).
* ``rp`` -- repair pipelining (Li et al., ATC'17, ECPipe): a chain helper 1 -> ... -> helper k ->
  client, packet by packet (a packet is a slice): each helper XORs its chunk times its decoding
  coefficient into the partial slice and forwards it.
* ``netrepair`` -- NetRepair: each helper sends its raw chunk as PART packets; the switch's
  payload element multiplies by the controller's decoding coefficient and XORs; the completing
  packet reaches the client as REPAIRED.

Update schemes (overwrite a data chunk with new data; every parity node must end with the
new parity):

* ``conv_update`` -- conventional update: client -> data node (new data); the data node computes
  delta = old XOR new and sends it to each of the ``r`` parity nodes (star: its uplink carries
  ``r`` deltas), which multiply it by their coefficient ``C[i][j]``, XOR it in and ACK.
* ``tupdate`` -- T-Update (Pei et al., INFOCOM'16): the delta travels down a tree rooted at the
  data node (``fanout`` children a node, 2 by default: our assumption, the slides give no
  tree), each node forwarding packet by packet.
* ``netupdate`` -- NetUpdate: the client's new data (UPD_NEW) and the data node's old data
  (UPD_OLD) meet in the switch's engine; the delta leaves as copies, one to the data node and
  one per parity node multiplied by ``C[i][j]`` in the switch.

The baselines speak the same frame layout on UDP :data:`BASELINE_PORT` (plain routed UDP: the
switch only routes them), so a data packet is the same 1,152-byte frame in every scheme.
Hosts add no processing time (the simulator's rule): what differs between schemes is which
links carry how many bytes, and how many hops a slice waits for. In every update scheme each
node ACKs the client once per chunk (when the chunk's whole delta or new data is applied); an
update completes with ``r + 1`` ACKs. T-Update's tree is the heap order over ``[data node,
parity nodes]`` (node ``t``'s children ``fanout*t + 1 ..``).
"""
from __future__ import annotations

import functools
import time

import numpy as np

from netstor.cluster.engine import Sim
from netstor.cluster.frames import ip4
from netstor.cluster.host import Host
from netstor.cluster.net import Network
from netstor.cluster.rack import rack_plan
from netstor.cluster.switch import SwitchNode, cached_config_ops
from netstor.model import gf
from netstor.testbed.rack import port_mac, route_config

from .header import (BEAT, MAX_DATA, T_ACK, T_PART, T_READ, T_READ_REPLY, T_REPAIR,
                     T_REPAIRED, T_DELTA, T_UPD_NEW, T_UPD_OLD, XORINC_UDP_PORT, XiHeader,
                     frame_payload, split)

__all__ = ["BASELINE_PORT", "CLIENT_PORT", "REPAIR_SCHEMES", "UPDATE_SCHEMES", "SCHEMES",
           "Stripes", "XorRun", "run_xor", "galois_field", "galois_parity"]

#: the baselines' UDP port (same frame layout as XORInc's, routed like any UDP)
BASELINE_PORT = 7451
#: the client's UDP port (replies, ACKs, REPAIRED)
CLIENT_PORT = 40450
REPAIR_SCHEMES = ("normal", "conv", "rp", "netrepair")
UPDATE_SCHEMES = ("conv_update", "tupdate", "netupdate")
SCHEMES = REPAIR_SCHEMES + UPDATE_SCHEMES
_NET = ("netrepair", "netupdate")


# ---- the reference: galois ---------------------------------------------------------------------
_GF = None


def galois_field():
    """``galois.GF(2^8)`` with the irreducible polynomial 0x11D (the independent reference)."""
    global _GF
    if _GF is None:
        import galois
        _GF = galois.GF(2 ** 8, irreducible_poly=0x11D)
    return _GF


def galois_cauchy(k, r):
    """The Cauchy block ``C[i][j] = 1 / (x_i + y_j)``, ``x_i = k + i``, ``y_j = j`` (ISA-L's
    ``gf_gen_cauchy1_matrix``), in galois' arithmetic."""
    GF = galois_field()
    return GF([[int(GF(1) / (GF(k + i) + GF(j))) for j in range(k)] for i in range(r)])


def galois_parity(data, r):
    """Parity chunks ``(r, L)`` of data chunks ``(k, L)`` (uint8), computed by galois."""
    GF = galois_field()
    k = data.shape[0]
    C = galois_cauchy(k, r)
    d = GF(np.ascontiguousarray(data, dtype=np.uint8))
    out = np.zeros((r, data.shape[1]), dtype=np.uint8)
    for i in range(r):
        acc = GF.Zeros(data.shape[1])
        for j in range(k):
            acc += C[i, j] * d[j]
        out[i] = np.asarray(acc, dtype=np.uint8)
    return out


class Stripes:
    """``count`` stripes of RS(k, r) with ``chunk_bytes`` chunks: ``data[s]`` (k, B) random
    (seeded), ``parity[s]`` (r, B) by galois. :meth:`chunk` gives chunk ``j`` of stripe
    ``s``."""

    def __init__(self, k, r, count, chunk_bytes, seed, per_block=1):
        self.k, self.r, self.n, self.count, self.B = k, r, k + r, count, chunk_bytes
        self.per_block = per_block
        self.rotate = True
        rng = np.random.default_rng([seed, 0x5E])
        self.data = rng.integers(0, 256, (count, k, chunk_bytes), dtype=np.uint8)
        flat = self.data.transpose(1, 0, 2).reshape(k, count * chunk_bytes)
        par = galois_parity(flat, r)
        self.parity = par.reshape(r, count, chunk_bytes).transpose(1, 0, 2).copy()

    def chunk(self, s, j):
        return self.data[s, j] if j < self.k else self.parity[s, j - self.k]

    def node_of(self, s, j):
        """Node holding chunk ``j`` of stripe ``s``: the stripes of one block share their nodes
        (a block's chunk ``j`` lives on one node), blocks rotate."""
        return ((s // self.per_block if self.rotate else 0) + j) % self.n


# ---- hosts -------------------------------------------------------------------------------------
def _packets(nbytes):
    """``[(byte offset, length)]`` of a chunk cut into packets of at most MAX_DATA bytes."""
    return [(o, min(MAX_DATA, nbytes - o)) for o in range(0, nbytes, MAX_DATA)]


class _Node:
    """A storage node: its chunks (``{(stripe, j): uint8 array}``, writable) and the handlers of
    both ports (baselines and XORInc)."""

    def __init__(self, run, host, index):
        self.run, self.host, self.index = run, host, index
        self.chunks = {}
        self.got = {}                 # (opid, stripe) -> bytes applied so far (DELTA, UPD_NEW)
        host.bind(BASELINE_PORT, self._baseline)
        host.bind(XORINC_UDP_PORT, self._xorinc)

    def send(self, dst_ip, port, header, data=b"", sport=None):
        self.host.send(dst_ip, sport or port, port, frame_payload(header, data))

    # ---- baselines (the switch only routes) ----------------------------------------------
    def _baseline(self, view):
        h, data = split(view.payload)
        run = self.run
        if h.type == T_READ:                      # conventional repair, normal read
            own = self.chunks[(h.stripe, h.chunk)]
            for o, n in _packets(run.B):
                self.send(view.src_ip, view.sport, h._replace(
                    type=T_READ_REPLY, src=h.chunk, off=o // BEAT, len=n),
                    own[o:o + n].tobytes(), sport=BASELINE_PORT)
        elif h.type == T_REPAIR:                  # repair pipelining: the chain's head starts
            plan = run.plans[h.opid]
            pos = plan["chain"].index(self.index)
            if pos == 0:
                own = self.chunks[(h.stripe, plan["helpers"][0])]
                for o, n in _packets(run.B):
                    part = gf.mul_vec(plan["coeffs"][0], own[o:o + n])
                    self._rp_forward(plan, 0, h, o, part)
        elif h.type == T_PART:                    # repair pipelining: a partial slice
            plan = run.plans[h.opid]
            pos = plan["chain"].index(self.index)
            own = self.chunks[(h.stripe, plan["helpers"][pos])]
            o = h.off * BEAT
            part = np.frombuffer(data, dtype=np.uint8) ^ gf.mul_vec(plan["coeffs"][pos],
                                                                    own[o:o + h.len])
            self._rp_forward(plan, pos, h, o, part)
        elif h.type == T_UPD_NEW:                 # conventional update / T-Update: data node
            plan = run.plans[h.opid]
            o = h.off * BEAT
            own = self.chunks[(h.stripe, h.chunk)]
            new = np.frombuffer(data, dtype=np.uint8)
            delta = own[o:o + h.len] ^ new
            own[o:o + h.len] = new
            for child in plan["children"][0]:
                self.send(run.node_ip(child), BASELINE_PORT, h._replace(type=T_DELTA),
                          delta.tobytes())
            self._count_and_ack(h, view)
        elif h.type == T_DELTA:                   # a parity node: apply, forward (T-Update)
            plan = run.plans[h.opid]
            pos = plan["tree"].index(self.index)
            pidx = plan["parities"][pos - 1]
            own = self.chunks[(h.stripe, pidx)]
            o = h.off * BEAT
            delta = np.frombuffer(data, dtype=np.uint8)
            own[o:o + h.len] ^= gf.mul_vec(int(run.C[pidx - run.k, h.chunk]), delta)
            for child in plan["children"][pos]:
                self.send(run.node_ip(child), BASELINE_PORT, h, data)
            self._count_and_ack(h, view)

    def _rp_forward(self, plan, pos, h, o, part):
        nxt = plan["chain"][pos + 1] if pos + 1 < len(plan["chain"]) else None
        if nxt is None:
            self.send(self.run.client_ip, CLIENT_PORT, h._replace(
                type=T_REPAIRED, src=0, off=o // BEAT, len=len(part)), part.tobytes(),
                sport=BASELINE_PORT)
        else:
            self.send(self.run.node_ip(nxt), BASELINE_PORT, h._replace(
                type=T_PART, src=plan["helpers"][pos], off=o // BEAT, len=len(part)),
                part.tobytes())

    def _count_and_ack(self, h, view, port=BASELINE_PORT):
        key = (h.opid, h.stripe)
        got = self.got.get(key, 0) + h.len
        if got >= self.run.B:
            self.got.pop(key, None)
            self.send(self.run.client_ip, CLIENT_PORT, h._replace(
                type=T_ACK, src=self.index, off=0, len=0), sport=port)
        else:
            self.got[key] = got

    # ---- XORInc (the switch computes) ----------------------------------------------------
    def _xorinc(self, view):
        self.run.net_agent.node_receive(self, view)


class _Client:
    """The client: runs the operations, ``window`` outstanding; records completion times and
    the repaired chunks."""

    def __init__(self, run, host):
        self.run, self.host = run, host
        self.ops = {}                 # opid -> state
        self.free = list(range(run.window))[::-1]
        self.next = 0
        self.done = 0
        self.t_done = []
        self.results = {}             # op index -> repaired chunk
        host.bind(CLIENT_PORT, self._reply)

    def start(self):
        for _ in range(min(self.run.window, len(self.run.ops))):
            self._start_next()

    def _start_next(self):
        run = self.run
        if self.next >= len(run.ops):
            return
        i = self.next
        self.next += 1
        slot = self.free.pop()
        opid = run.opid_base + slot
        s, j = run.ops[i][:2]
        st = {"i": i, "slot": slot, "stripe": s, "chunk": j, "t0": run.sim.now,
              "buf": np.zeros(run.B, dtype=np.uint8), "bytes": 0, "acks": 0, "parts": {}}
        self.ops[opid] = st
        run.start_op(self, opid, st)

    def finish(self, opid, st):
        del self.ops[opid]
        self.free.append(st["slot"])
        self.done += 1
        self.t_done.append(self.run.sim.now)
        self._start_next()

    def _reply(self, view):
        h, data = split(view.payload)
        st = self.ops.get(h.opid)
        if st is None or h.stripe != st["stripe"]:
            self.run.stray += 1
            return
        run = self.run
        o = h.off * BEAT
        if h.type in (T_READ_REPLY, T_REPAIRED) and run.scheme != "conv":
            st["buf"][o:o + h.len] = np.frombuffer(data, dtype=np.uint8)
            st["bytes"] += h.len
            if st["bytes"] >= run.B:
                self.results[st["i"]] = st["buf"]
                self.finish(h.opid, st)
        elif h.type == T_READ_REPLY:              # conventional repair: decode at the client
            part = st["parts"].setdefault(h.src, np.zeros(run.B, dtype=np.uint8))
            part[o:o + h.len] = np.frombuffer(data, dtype=np.uint8)
            st["bytes"] += h.len
            if st["bytes"] >= run.k * run.B:
                plan = run.plans[h.opid]
                out = np.zeros(run.B, dtype=np.uint8)
                for c, src in zip(plan["coeffs"], plan["helpers"]):
                    out ^= gf.mul_vec(c, st["parts"][src])
                self.results[st["i"]] = out
                self.finish(h.opid, st)
        elif h.type == T_ACK:
            st["acks"] += 1
            if st["acks"] >= run.r + 1:
                self.finish(h.opid, st)
        else:
            run.stray += 1


@functools.lru_cache(maxsize=2)
def xorinc_pipeline(n_ports=2):
    """The pipeline the simulated switch runs: the default bitstream's programs
    (``default_pipeline()``, XORInc's among them)."""
    from netstor.programs import default_pipeline
    return default_pipeline(n_ports)


@functools.lru_cache(maxsize=4)
def list_model_class(base=None):
    """``base`` (default: the compiled model when there, else the interpreter) with copy-list
    multicast groups (``groups="list"``: NetUpdate's per-copy ``rid``)."""
    from netstor.cluster.switch import default_model_class
    base = default_model_class() if base is None else base

    class ListGroups(base):
        def __init__(self, pipeline):
            super().__init__(pipeline, groups="list")
    ListGroups.__name__ = ListGroups.__qualname__ = f"{base.__name__}(groups=list)"
    return ListGroups


class NetAgent:
    """NetRepair / NetUpdate in a run: the ``xorinc:`` section the controller would apply
    (one code per block rotation: code ``1 + rot`` places chunk ``j`` on node ``(rot + j) mod
    n``), written into the switch with :func:`.config.model_writes`; what the client and the
    nodes send (the agents' protocol, :mod:`.codec`):

    * NetRepair: the client sends REPAIR (``chunk`` = lost, ``src`` = the helper's chunk,
      ``need`` = k) to each helper; a helper sends its chunk as PART packets addressed to the
      client (UDP 7450); the switch's engine absorbs all but the completing one, which reaches
      the client as REPAIRED.
    * NetUpdate: the client sends UPD_NEW (new data) to the data node; the engine keeps the
      data and passes the header on (truncated): the data node answers with UPD_OLD (its old
      data of that range) addressed to the client; the completing packet leaves as DELTA
      copies (data node: coefficient 1, parity ``k + i``: ``C[i][j]``); every node XORs its
      copy into its chunk (``src`` names it) and, once the whole chunk is applied, ACKs.
    """

    def __init__(self, run):
        self.run = run
        self.rots = sorted({run.stripes.node_of(s, 0) for s in range(len(run.ops))})

    def pipeline(self):
        return xorinc_pipeline(2)

    def model_class(self, base=None):
        return list_model_class(base)

    def code_of(self, stripe):
        return 1 + self.run.stripes.node_of(stripe, 0)

    def section(self):
        run = self.run
        ps = run.plan_hosts[1:]
        return {"smac": ":".join(f"{b:02x}" for b in port_mac(1).to_bytes(6, "big")),
                "nodes": {h.name: {"ip": h.ip, "mac": h.mac, "port": h.segment} for h in ps},
                "codes": {1 + rot: {"k": run.k, "r": run.r,
                                    "nodes": [ps[(rot + j) % run.n].name
                                              for j in range(run.n)]} for rot in self.rots},
                "clients": {"c0": [run.opid_base, run.opid_base + run.window - 1]},
                "requesters": [f"{run.plan_hosts[0].ip}/32"],
                "timeout": 0}

    def configure(self, switch):
        from .config import model_writes
        writes, regs = cached_config_ops(self.run.config)
        _, xi = model_writes(switch.pipeline, self.section())
        switch.apply_ops(list(writes) + list(xi), regs)
        self.xi_section = self.section()

    def start_op(self, client, opid, st, base):
        run = self.run
        s, j = st["stripe"], st["chunk"]
        code = self.code_of(s)
        host = client.host

        def send(node, header, data=b""):
            host.send(run.node_ip(node), XORINC_UDP_PORT, XORINC_UDP_PORT,
                      frame_payload(header, data))

        if run.scheme == "netrepair":
            for x in run.survivors(j):
                send(run.stripes.node_of(s, x), base._replace(type=T_REPAIR, src=x,
                                                              need=run.k, code=code))
        else:
            new = run.ops[st["i"]][2]
            node = run.stripes.node_of(s, j)
            for o, n in _packets(run.B):
                send(node, base._replace(type=T_UPD_NEW, src=j, need=2, code=code,
                                         off=o // BEAT, len=n), new[o:o + n].tobytes())

    def node_receive(self, node, view):
        run = self.run
        h = XiHeader.unpack(view.payload)
        if h.type == T_UPD_NEW:                   # the switch kept the data (truncated)
            data = b""
        else:
            h, data = split(view.payload)
        to = h.req_addr.to_bytes(4, "big")
        if h.type == T_REPAIR:
            own = node.chunks[(h.stripe, h.src)]
            for o, n in _packets(run.B):
                node.send(to, XORINC_UDP_PORT, h._replace(type=T_PART, off=o // BEAT, len=n),
                          own[o:o + n].tobytes())
        elif h.type == T_UPD_NEW:                 # header only: send the old data
            own = node.chunks[(h.stripe, h.chunk)]
            o = h.off * BEAT
            node.send(to, XORINC_UDP_PORT, h._replace(type=T_UPD_OLD, src=h.chunk),
                      own[o:o + h.len].tobytes())
        elif h.type == T_DELTA:
            own = node.chunks[(h.stripe, h.src)]
            o = h.off * BEAT
            own[o:o + h.len] ^= np.frombuffer(data, dtype=np.uint8)
            node._count_and_ack(h, view, port=XORINC_UDP_PORT)
        else:
            run.stray += 1

    def stats(self, switch):
        return {k: v for k, v in switch.counters().items() if k.startswith("xi.") and v}


# ---- the run -----------------------------------------------------------------------------------
class XorRun:
    """One run: ``scheme`` (of :data:`SCHEMES`) on RS(``k``, ``r``), every host cable at
    ``mbps`` Mb/s and ``link_ns`` latency each way, ``ops`` chunk operations of
    ``chunk_bytes`` (one stripe each), ``window`` outstanding. The stripes form ``blocks``
    blocks (HDFS-RAID's unit: consecutive stripes on the same nodes, the same chunk lost or
    updated: a random data chunk per block, or ``lost[b]``: any chunk for a repair), so a
    block's operations load the same links; ``rotate=False`` puts every block on the same
    nodes (one code). ``seed`` draws the data, the chunks and the new data. ``fanout``: T-Update's
    tree. ``model_class``: the switch's model (None: compiled when available). ``switch``:
    ``"xorinc"`` (the default pipeline plus XORInc's program, configured with the ``xorinc:``
    section; every scheme) or ``"default"`` (the bitstream's pipeline: baselines only).
    ``check_checksums``: every host drops frames whose IPv4 or UDP checksum is wrong."""

    def __init__(self, scheme, *, k=3, r=2, mbps=1000.0, chunk_bytes=4096, ops=64, blocks=1,
                 window=8, seed=1, link_ns=1_000, fanout=2, model_class=None, trace=0,
                 switch="xorinc", lost=None, rotate=True, check_checksums=False):
        if scheme not in SCHEMES:
            raise ValueError(f"scheme {scheme!r}: one of {SCHEMES}")
        if chunk_bytes % BEAT or chunk_bytes <= 0:
            raise ValueError(f"chunk_bytes {chunk_bytes}: a positive multiple of {BEAT}")
        if not 1 <= window <= 64:
            raise ValueError("window: 1..64 (the engine's operations)")
        self.scheme, self.k, self.r, self.n = scheme, k, r, k + r
        self.B, self.mbps, self.window, self.seed = chunk_bytes, float(mbps), window, seed
        self.link_ns, self.fanout = link_ns, fanout
        self.opid_base = 0
        self.stray = 0
        if ops % blocks:
            raise ValueError(f"ops {ops} is not a multiple of blocks {blocks}")
        self.blocks = blocks
        per = ops // blocks
        self.stripes = Stripes(k, r, ops, chunk_bytes, seed, per_block=per)
        self.stripes.rotate = rotate
        rng = np.random.default_rng([seed, 0x0B])
        drawn = rng.integers(0, k, blocks)
        if lost is not None:
            drawn = np.asarray(list(lost), dtype=np.int64)
            top = k if scheme in UPDATE_SCHEMES else k + r
            if drawn.shape != (blocks,) or drawn.min() < 0 or drawn.max() >= top:
                raise ValueError(f"lost: one chunk index per block, in 0..{top - 1}")
        lost = np.repeat(drawn, per)
        if scheme in UPDATE_SCHEMES:
            new = rng.integers(0, 256, (ops, chunk_bytes), dtype=np.uint8)
            self.ops = [(s, int(lost[s]), new[s]) for s in range(ops)]
        else:
            self.ops = [(s, int(lost[s])) for s in range(ops)]
        self.G = gf.generator(k, r)
        self.C = gf.cauchy(k, r)
        self.sim = Sim()
        self.net = Network(self.sim)
        pc, ps, _ = rack_plan(1, self.n)
        self.plan_hosts = pc + ps
        if switch not in ("xorinc", "default"):
            raise ValueError(f"switch {switch!r}: 'xorinc' or 'default'")
        if scheme in _NET and switch != "xorinc":
            raise ValueError(f"{scheme} needs XORInc's program in the switch")
        # every scheme runs through the same pipeline (XORInc's program included), so the
        # switch's latency is the same for all; "default": the bitstream's (baselines only)
        self.switch_kind = switch
        self.net_agent = NetAgent(self) if switch == "xorinc" else None
        pipeline = model = None
        if self.net_agent:
            pipeline = self.net_agent.pipeline()
            model = self.net_agent.model_class(model_class)
        else:
            model = model_class
        self.switch = SwitchNode(self.net, "tor", {0: port_mac(0).to_bytes(6, "big"),
                                                   1: port_mac(1).to_bytes(6, "big")},
                                 pipeline=pipeline, model_class=model, trace=trace)
        hosts = {}
        for h in self.plan_hosts:
            node = Host(self.net, h.name, h.mac, h.ip, port_mac(h.segment),
                        check_checksums=check_checksums)
            self.net.connect(node, 0, self.switch, h.segment, latency_ns=link_ns,
                             gbps=self.mbps / 1000.0)
            hosts[h.name] = node
        self.client_ip = ip4(pc[0].ip)
        self._node_ips = [ip4(h.ip) for h in ps]
        self.nodes = [_Node(self, hosts[h.name], i) for i, h in enumerate(ps)]
        for s in range(ops):
            for j in range(self.n):
                self.nodes[self.stripes.node_of(s, j)].chunks[(s, j)] = \
                    self.stripes.chunk(s, j).copy()
        self.client = _Client(self, hosts[pc[0].name])
        self.config = route_config(self.plan_hosts)
        if self.net_agent:
            self.net_agent.configure(self.switch)
        else:
            self.switch.configure(self.config)
        self.plans = {}

    def node_ip(self, node):
        return self._node_ips[node]

    # ---- per operation -------------------------------------------------------------------
    def survivors(self, lost):
        """The helpers: the first ``k`` chunk indexes other than ``lost``."""
        return [j for j in range(self.n) if j != lost][:self.k]

    def start_op(self, client, opid, st):
        s, j = st["stripe"], st["chunk"]
        sch = self.scheme
        base = XiHeader(type=T_READ, flags=0, opid=opid, stripe=s, chunk=j, src=0, need=0,
                        code=0, off=0, len=0, seq=st["i"], req_addr=int.from_bytes(
                            self.client_ip, "big"), req_port=CLIENT_PORT)
        host = client.host

        def send(node, port, header, data=b""):
            host.send(self.node_ip(node), CLIENT_PORT, port, frame_payload(header, data))

        if sch == "normal":
            send(self.stripes.node_of(s, j), BASELINE_PORT, base)
        elif sch in ("conv", "rp"):
            helpers = self.survivors(j)
            coeffs = [int(c) for c in gf.decode_coefficients(self.G, helpers, j)]
            chain = [self.stripes.node_of(s, x) for x in helpers]
            self.plans[opid] = {"helpers": helpers, "coeffs": coeffs, "chain": chain}
            for x, node in zip(helpers, chain):
                send(node, BASELINE_PORT, base._replace(
                    type=T_READ if sch == "conv" else T_REPAIR, chunk=x if sch == "conv" else j))
        elif sch in ("conv_update", "tupdate"):
            parities = list(range(self.k, self.n))
            tree = [self.stripes.node_of(s, j)] + [self.stripes.node_of(s, p) for p in parities]
            f = self.r if sch == "conv_update" else self.fanout
            children = [[tree[c] for c in range(f * t + 1, min(f * t + f + 1, len(tree)))]
                        for t in range(len(tree))]
            if sch == "conv_update":          # a star: the data node sends every delta
                children = [tree[1:]] + [[] for _ in parities]
            self.plans[opid] = {"tree": tree, "parities": parities, "children": children}
            new = self.ops[st["i"]][2]
            for o, n in _packets(self.B):
                send(tree[0], BASELINE_PORT, base._replace(type=T_UPD_NEW, off=o // BEAT,
                                                           len=n), new[o:o + n].tobytes())
        else:
            self.net_agent.start_op(client, opid, st, base)

    # ---- running and checking ------------------------------------------------------------
    def run(self):
        t0 = time.perf_counter()
        self.client.start()
        self.sim.run()
        wall = time.perf_counter() - t0
        return self.result(wall)

    def check(self):
        """``(chunks checked, byte mismatches)`` against the galois reference: a repair's result
        equals the lost data chunk; after updates every node's chunk equals the new data and
        galois' parity of the new stripe."""
        st = self.stripes
        checked = mism = 0
        if self.scheme in REPAIR_SCHEMES:
            for i, (s, j) in enumerate(self.ops):
                got = self.client.results.get(i)
                exp = st.chunk(s, j)
                checked += 1
                mism += int(self.B if got is None else (got != exp).sum())
        else:
            data = st.data.copy()
            for s, j, new in self.ops:
                data[s, j] = new
            flat = data.transpose(1, 0, 2).reshape(self.k, -1)
            par = galois_parity(flat, self.r).reshape(self.r, len(self.ops), self.B)
            for s, j, _ in self.ops:
                checked += 1
                for x in range(self.n):
                    exp = data[s, x] if x < self.k else par[x - self.k, s]
                    got = self.nodes[st.node_of(s, x)].chunks[(s, x)]
                    mism += int((got != exp).sum())
        return checked, mism

    def traffic(self):
        """What went through the switch's wire ports, from its counters."""
        c = self.switch.counters()
        P = self.switch.P
        out = {"frames_in": sum(c[f"in{p}.pkts"] for p in range(P)),
               "bytes_in": sum(c[f"in{p}.bytes"] for p in range(P)),
               "frames_out": sum(c[f"out{p}.pkts"] for p in range(P)),
               "bytes_out": sum(c[f"out{p}.bytes"] for p in range(P))}
        out["frames"] = out["frames_in"] + out["frames_out"]
        out["bytes"] = out["bytes_in"] + out["bytes_out"]
        out["ports"] = {f"{d}{p}": c[f"{d}{p}.pkts"] for d in ("in", "out") for p in range(P)}
        return out

    def links(self):
        """Per host cable direction (the simulator's own link counters, for explaining times):
        frames, bytes and the time its wire bytes take at the bottleneck rate; ``busiest``."""
        out = {}
        for link in self.net.links():
            if not link.frames:
                continue
            up = isinstance(link.src, Host)
            name = f"{(link.src if up else link.dst).name}.{'up' if up else 'down'}"
            wire = link.bytes + 24 * link.frames          # all frames here are >= 60 bytes
            out[name] = {"frames": link.frames, "bytes": link.bytes,
                         "busy_ns": round(wire * 8e3 / self.mbps)}
        if out:
            top = max(out, key=lambda n: out[n]["busy_ns"])
            out["busiest"] = {"link": top, **out[top]}
        return out

    def result(self, wall=None):
        checked, mism = self.check()
        t = max(self.client.t_done) if self.client.t_done else None
        res = {"scheme": self.scheme, "k": self.k, "r": self.r, "mbps": self.mbps,
               "chunk_bytes": self.B, "ops": len(self.ops), "blocks": self.blocks,
               "window": self.window,
               "seed": self.seed, "link_ns": self.link_ns,
               "completed": self.client.done, "time_ns": t,
               "data_bytes": len(self.ops) * self.B,
               "traffic": self.traffic(), "chunks_checked": checked, "byte_mismatches": mism,
               "stray": self.stray, "switch": self.switch.stats(),
               "model": self.switch.model_class.__name__,
               "perf": {"events": self.sim.events,
                        "wall_s": round(wall if wall is not None else self.sim.wall_s, 3),
                        "cpu_s": round(self.sim.cpu_s, 3)}}
        if self.net_agent:
            res["engine"] = self.net_agent.stats(self.switch)
        res["switch_kind"] = self.switch_kind
        res["links"] = self.links()
        hd = {h.name: {k: v for k, v in h.dropped.items() if v}
              for h in self.net.nodes.values() if isinstance(h, Host) and any(h.dropped.values())}
        res["hosts_dropped"] = hd
        return res


def run_xor(scheme, **kw):
    """``XorRun(scheme, **kw).run()``."""
    return XorRun(scheme, **kw).run()


def ideal_ns(scheme, k, r, chunk_bytes, mbps):
    """A chunk's bottleneck-link transfer time (for the report's explanation): wire bytes of
    its packets at ``mbps``, times the chunks the busiest link carries."""
    wire = sum(max(128 + n, 60) + 24 for _, n in _packets(chunk_bytes))
    per = wire * 8 / (mbps * 1e6) * 1e9
    busiest = {"normal": 1, "conv": k, "rp": 1, "netrepair": 1, "conv_update": r,
               "tupdate": None, "netupdate": 1}[scheme]
    return None if busiest is None else busiest * per

