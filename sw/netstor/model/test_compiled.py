"""The compiled model (:mod:`netstor.model.compiled`) against the interpreter
(:class:`netstor.model.DataplaneModel`, the reference), side by side.

For every program of the default pipeline (and an ``edge`` pipeline of this file that reaches
the corners the built-in programs do not: the recirculation limit, three ports, egress writes of
deparsed fields, a kind and an expression without code generation), ``N_PACKETS`` frames go
through both models: structured traffic of the program with its state-building sequences
(NetClone replies to the requests the switch cloned, NetRS responses to the requests it
selected, prim's compare-and-swap on the cell values it holds, ...), the same with random header
fields, malformed and truncated frames, random bytes, runts and oversize frames, on random
inputs (wire and host) with random ``tuser`` and arrival times, interleaved with host writes of
random words to random memories (tables and state), parser UDP-port register changes, default
entries, counter clears, a reset, and segments in deferred-recirculation mode. Every output
(port, bytes, tuser) must be equal, and every counter, register and memory cell at every
checkpoint and at the end.

Frames are built from byte templates (``struct``, the one Internet checksum helper): the
interpreter is the cost. ``NETSTOR_COMPILED_PACKETS`` overrides the packet count.
"""
from __future__ import annotations

import collections
import functools
import os
import random
import struct
import time

import pytest

from netstor.driver.tables import TableWriter, apply_writes
from netstor.elements import Compute, Hash, RegisterOp, Table
from netstor.lang import (Action, Element, F, Pipeline, Program, Set, Mux, Cat, Const, Old,
                          APP_BYTES)
from netstor.lang.expr import Expr, _BinOp, _CmpOp
from netstor.model import DataplaneModel, MAX_FRAME
from netstor.model.compiled import CompiledModel, Codegen
from netstor.model.replication import encode_group
from netstor.programs import default_pipeline
from netstor.programs.primitives import (PRIM_UDP_PORT, OP_FORWARD, OP_CAS, OP_MAX, OP_MCAST,
                                         OP_RECIRC, OP_CLONE)
from netstor.proto import Header as StorageHeader, Op, Status, STORAGE_UDP_PORT
from netstor.testbed.rack import Rack, route_config
from netstor.compiler import config_ops
from netstor.wire.checksum import checksum

N_PACKETS = int(os.environ.get("NETSTOR_COMPILED_PACKETS", 100_000))
CHECKPOINTS = 10


# ---- the side-by-side pair ---------------------------------------------------------------------
class Mismatch(AssertionError):
    pass


class Pair:
    """The interpreter and the compiled model of one pipeline, fed the same operations."""

    def __init__(self, pipeline, compiled=CompiledModel, groups="bitmap"):
        self.ref = DataplaneModel(pipeline, groups=groups)
        self.dut = compiled(pipeline, groups=groups)
        self.models = (self.ref, self.dut)
        self.packets = 0
        self.outputs = 0
        self.multi_same_port = 0          # outputs of one packet that name a port twice
        self.totals = collections.Counter()      # the counters, summed across a reset
        self.last = None

    def process(self, frame, port, user=0, arrival=0):
        self.packets += 1
        self.last = (frame, port, user, arrival)
        rc = f"in{self.ref.pipeline.recirc_input}.pkts"
        passes = self.ref.counter(rc)
        a = self.ref.process(frame, port, user=user, arrival=arrival)
        b = self.dut.process(frame, port, user=user, arrival=arrival)
        self._same(a, b)
        ports = [o.port for o in a]
        if self.ref.counter(rc) == passes and len(set(ports)) < len(ports):
            self.multi_same_port += 1    # one pass, two copies on one port: a copy list
        return a

    def run_deferred(self):
        self._same(self.ref.run_deferred(), self.dut.run_deferred())

    def set_deferred(self, on):
        for m in self.models:
            m.deferred = [] if on else None

    def _same(self, a, b):
        ta = [(o.port, o.frame, o.user) for o in a]
        tb = [(o.port, o.frame, o.user) for o in b]
        if ta != tb:
            frame, port, user, arrival = self.last
            raise Mismatch(f"packet {self.packets}: outputs differ for frame {frame.hex()} on "
                           f"input {port} (user {user:#x}, arrival {arrival}):\n"
                           f"  interpreter {[(p, f.hex(), u) for p, f, u in ta]}\n"
                           f"  compiled    {[(p, f.hex(), u) for p, f, u in tb]}")
        self.outputs += len(ta)

    def write(self, mem, addr, word):
        for m in self.models:
            m.mem_write(mem, addr, word)

    def writes(self, ops):
        for m in self.models:
            apply_writes(m, ops)

    def reg_write(self, name, value):
        for m in self.models:
            m.reg_write(name, value)

    def check_state(self):
        a, b = self.ref, self.dut
        if a.counters() != b.counters():
            diff = {k: (v, b.counters()[k]) for k, v in a.counters().items()
                    if b.counters()[k] != v}
            raise Mismatch(f"after {self.packets} packets: counters differ {diff}")
        for r in a.register_names:
            if a.reg_read(r) != b.reg_read(r):
                raise Mismatch(f"register {r}: {a.reg_read(r)} != {b.reg_read(r)}")
        for name in a.memory_names:
            wa, wb = a.memory(name).words, b.memory(name).words
            if wa != wb:
                i = next(i for i, (x, y) in enumerate(zip(wa, wb)) if x != y)
                raise Mismatch(f"after {self.packets} packets: memory {name}[{i}] "
                               f"{wa[i]:#x} != {wb[i]:#x}")


# ---- frames from byte templates -----------------------------------------------------------------
def ip4(s):
    return bytes(int(x) for x in s.split("."))


def mac(v):
    return v.to_bytes(6, "big") if isinstance(v, int) else bytes.fromhex(v.replace(":", ""))


def udp_frame(smac, dmac, sip, dip, sport, dport, payload, *, ttl=64, tos=0, ident=0,
              frag=0, vlan=None, options=b"", udp_csum="ok", proto=17):
    """Ethernet (optionally 802.1Q) / IPv4 (optionally with options) / UDP, checksums right
    (``udp_csum``: "ok", "zero" or an int)."""
    ihl = 5 + len(options) // 4
    ulen = 8 + len(payload)
    sip, dip = (ip4(x) if isinstance(x, str) else x for x in (sip, dip))
    iph = bytearray(struct.pack(">BBHHHBBH4s4s", 0x40 | ihl, tos, 4 * ihl + ulen, ident, frag,
                                ttl, proto, 0, sip, dip) + options)
    iph[10:12] = checksum(bytes(iph)).to_bytes(2, "big")
    udp = bytearray(struct.pack(">HHHH", sport, dport, ulen, 0) + payload)
    if udp_csum == "ok":
        c = checksum(sip + dip + struct.pack(">BBH", 0, 17, ulen) + bytes(udp)) or 0xFFFF
    elif udp_csum == "zero":
        c = 0
    else:
        c = udp_csum
    udp[6:8] = c.to_bytes(2, "big")
    l2 = mac(dmac) + mac(smac)
    if vlan is not None:
        l2 += b"\x81\x00" + vlan.to_bytes(2, "big")
    return bytes(l2 + b"\x08\x00" + iph + udp)


def app_of(frame):
    """``(l3 offset, udp offset, bytes after the UDP header)`` of a frame the data plane sent."""
    l3 = 18 if frame[12:14] == b"\x81\x00" else 14
    u = l3 + 4 * (frame[l3] & 15)
    return l3, u, frame[u + 8:]


def pack_header(program, **values):
    """A program's storage header from its declared fields (``header_fields``)."""
    v = 0
    for name, w in program.header_fields:
        v = (v << w) | (values.get(name, 0) & ((1 << w) - 1))
    return v.to_bytes(program.header_bytes, "big")


def fix_ip_checksum(f, l3=None):
    f = bytearray(f)
    l3 = (18 if f[12:14] == b"\x81\x00" else 14) if l3 is None else l3
    ihl = f[l3] & 15
    if ihl >= 5 and len(f) >= l3 + 4 * ihl:
        f[l3 + 10:l3 + 12] = b"\0\0"
        f[l3 + 10:l3 + 12] = checksum(bytes(f[l3:l3 + 4 * ihl])).to_bytes(2, "big")
    return bytes(f)


def malformed(rng, f):
    """A broken variant of a well-formed frame ``f``."""
    k = rng.randrange(11)
    l3 = 18 if f[12:14] == b"\x81\x00" else 14
    b = bytearray(f)
    if k == 0:                                       # truncated anywhere (runts included)
        return bytes(b[:rng.randrange(0, len(b))])
    if k == 1:                                       # a random byte of the headers changed
        i = rng.randrange(min(len(b), 80))
        b[i] = rng.getrandbits(8)
        return bytes(b)
    if k == 2:                                       # ... with the IPv4 checksum fixed up
        i = rng.randrange(l3, min(len(b), l3 + 48))
        b[i] = rng.getrandbits(8)
        return fix_ip_checksum(b, l3)
    if k == 3:                                       # version / IHL
        b[l3] = rng.choice([0x44, 0x40, 0x65, 0x05, 0x4F, 0x46, rng.getrandbits(8)])
        return fix_ip_checksum(b, l3) if rng.random() < 0.7 else bytes(b)
    if k == 4:                                       # total length
        b[l3 + 2:l3 + 4] = rng.choice([0, 19, 20, len(b) - l3 + 1, rng.getrandbits(16)]) \
            .to_bytes(2, "big")
        return fix_ip_checksum(b, l3)
    if k == 5:                                       # fragments
        b[l3 + 6:l3 + 8] = rng.choice([0x2000, 0x0001, 0x4000, 0x1FFF, rng.getrandbits(16)]) \
            .to_bytes(2, "big")
        return fix_ip_checksum(b, l3)
    u = l3 + 4 * max(5, b[l3] & 15)
    if k == 6 and len(b) >= u + 8:                   # UDP length
        b[u + 4:u + 6] = rng.choice([0, 7, 8, 9, len(b) - u, len(b) - u + 1,
                                     rng.getrandbits(16)]).to_bytes(2, "big")
        return bytes(b)
    if k == 7:                                       # trailing bytes beyond IPv4's length
        return bytes(b) + rng.randbytes(rng.randrange(1, 40))
    if k == 8:                                       # cut inside the app window
        lo = min(max(14, u), len(b))
        return bytes(b[:rng.randrange(lo, max(lo, min(len(b), u + 48)) + 1)])
    if k == 9:                                       # oversize
        return bytes(b) + bytes(MAX_FRAME + 1 - len(b) + rng.randrange(3))
    return rng.randbytes(rng.randrange(0, 160))      # noise


def random_frame(rng):
    """Random bytes with a plausible start (IPv4, VLAN, other EtherTypes)."""
    n = rng.choice([rng.randrange(0, 20), rng.randrange(14, 140), rng.randrange(14, 1600)])
    b = bytearray(rng.randbytes(n))
    if n >= 14 and rng.random() < 0.6:
        b[12:14] = rng.choice([b"\x08\x00", b"\x81\x00", b"\x86\xdd", b"\x08\x06"])
        if b[12:14] == b"\x81\x00" and n >= 18:
            b[16:18] = rng.choice([b"\x08\x00", b"\x81\x00"])
        if b[12:14] == b"\x08\x00" and n >= 15 and rng.random() < 0.7:
            b[14] = 0x45
    return bytes(b)


def random_word(rng, width):
    return rng.getrandbits(width) if rng.random() < 0.5 else rng.getrandbits(
        rng.randrange(1, width + 1))


@functools.lru_cache(maxsize=None)
def current_schema():
    """The host schema of the default pipeline as the source says now (not a build's file,
    which may be older)."""
    from netstor.build import build_core
    return build_core().schema


# ---- traffic ------------------------------------------------------------------------------------
class Traffic:
    """Base: a rack (hosts only) with its routes; subclasses add the program's setup and its
    structured frames."""

    n_ports = 2

    def __init__(self, rng):
        self.rng = rng
        self.rack = Rack(3, 3)
        self.clients, self.servers = self.rack.clients, self.rack.servers
        self.by_ip = {h.ip: h for h in self.rack.hosts}
        self.get = StorageHeader(op=Op.GET, key=7, req_id=1)

    def pipeline(self):
        return default_pipeline(self.n_ports)

    def config(self):
        return route_config(self.rack.hosts)

    def setup(self, pair):
        self.pair = pair
        self.pl = pair.ref.pipeline
        self.tw = TableWriter(self.pl)
        cfg = self.config()
        # trust: the primitives from port 1 and host TX 0, two source prefixes (so the
        # structured frames are trusted or not); NetClone's and NetRS's configurations say
        # their own (the servers' port)
        cfg.setdefault("programs", {}).setdefault("prim", {
            "trusted_ports": [1, "host0"], "trusted_sources": ["192.0.2.0/24", "10.77.0.0/16"]})
        writes, regs = config_ops(cfg, schema=current_schema())
        self.base = (writes, regs)
        self.apply_base()

    def apply_base(self):
        """Tables cleared (random host writes break them), defaults back to their reset
        words, then the configuration and the extra entries."""
        m = self.pair.ref
        for t in self.pl.tables:
            for name in (t.qualname, t.qualname + ".default"):
                mem = m.memory(name)
                for a, w in enumerate(mem.words):
                    if w != mem.reset:
                        self.pair.write(name, a, mem.reset)
        for name in m.register_names:
            self.pair.reg_write(name, m._reg(name)[2])
        writes, regs = self.base
        self.pair.writes(writes)
        for n, v in regs:
            self.pair.reg_write(n, v)
        self.tw = TableWriter(self.pl)
        for t in self.pl.tables:
            self.tw.load_shadow(t.qualname, m.memory(t.qualname).words)
        self.extra_setup()

    def extra_setup(self):
        """More entries than the configuration gives (other actions, defaults, ...)."""
        rng, tw = self.rng, self.tw
        for _ in range(6):            # overlapping routes elsewhere, some to bad ports
            plen = rng.choice([0, 8, 16, 24, 28, 32])
            prefix = int.from_bytes(ip4(f"10.{rng.randrange(70, 90)}.{rng.randrange(4)}.0"),
                                    "big") & ~((1 << (32 - plen)) - 1) & 0xFFFFFFFF
            action = rng.choice(["route", "route", "to_host", "drop"])
            params = ({"port": rng.choice([0, 1, 2, 3, 5]), "dmac": rng.getrandbits(48),
                       "smac": rng.getrandbits(48)} if action == "route" else None)
            if plen == 0:
                continue
            self.pair.writes(self.tw.lpm_add("l3.routes", prefix, plen, action, params))

    def host(self, frame_host_pairs=None):
        return self.rng.choice(self.rack.hosts)

    def storage(self, reply=False):
        h = self.get.reply(Status.NOT_FOUND, server_id=1, queue_len=0) if reply else self.get
        return h.pack() + self.rng.randbytes(self.rng.choice([0, 0, 3, 30, 200]))

    def frame(self, src, dst, sport, dport, payload, **kw):
        dmac = 0x024E53FF0000 | src.segment         # the switch port's MAC, as the rack does
        dip = dst if isinstance(dst, str) else dst.ip
        return udp_frame(src.mac, dmac, src.ip, dip, sport, dport, payload, **kw)

    def variant(self):
        """Random IPv4/L2 options for a structured frame."""
        r = self.rng
        kw = {"ttl": r.choice([64, 64, 64, 2, 1, 0, 255]), "tos": r.choice([0, 0, 0x28, 0xFF]),
              "ident": r.getrandbits(16)}
        if r.random() < 0.08:
            kw["vlan"] = r.getrandbits(16)
        if r.random() < 0.06:
            kw["options"] = r.choice([b"\x94\x04\x00\x00", bytes(8), r.randbytes(40)])
        if r.random() < 0.1:
            kw["udp_csum"] = r.choice(["zero", r.getrandbits(16)])
        return kw

    def structured(self):
        """``(frame, input port)`` of the program's own traffic."""
        r = self.rng
        c, s = r.choice(self.clients), r.choice(self.servers)
        if r.random() < 0.5:
            return self.frame(c, s, r.randrange(40000, 40010), STORAGE_UDP_PORT,
                              self.storage(), **self.variant()), c.segment
        return self.frame(s, c, STORAGE_UDP_PORT, r.randrange(40000, 40010),
                          self.storage(True), **self.variant()), s.segment

    def fuzzed(self):
        """A structured frame with random header fields."""
        f, port = self.structured()
        r = self.rng
        if len(f) < 50:
            return f, port
        b = bytearray(f)
        l3, u, _ = app_of(f)
        for _ in range(r.randrange(1, 4)):        # MACs, IPv4 addresses, UDP ports, app
            lo, hi = r.choice([(0, 12), (l3 + 12, l3 + 20), (u, u + 4), (u + 8, u + 40)])
            hi = min(hi, len(b))
            if lo < hi:
                b[r.randrange(lo, hi)] = r.getrandbits(8)
        return fix_ip_checksum(b, l3), port

    def mcast(self, group, members):
        """Multicast group ``group`` with ``members`` (``[(port, rid)]``, one per port): the
        bitmap as written; a copy list (``groups="list"``) gets them in a random order, some
        listed again (replicas behind one port) and, sometimes, a copy to a port that is not
        an output (not made, counted)."""
        if self.pair.ref.groups != "list":
            self.pair.writes(self.tw.mcast_set(group, members))
            return
        r = self.rng
        copies = list(members) + [r.choice(members) for _ in range(r.randrange(4))
                                  if members]
        r.shuffle(copies)
        for _ in range(r.choice([0, 0, 0, 1, 2]) if copies else 0):
            copies.insert(r.randrange(len(copies) + 1), (r.randrange(2 * self.pl.n_ports, 16),
                                                         r.getrandbits(16)))
        self.pair.write("tm.groups", group, encode_group(copies[:16]))

    def observe(self, frame, port, outs):
        """See what the data plane sent (state-building sequences answer it)."""

    def host_write(self):
        """A random word into a random memory (tables, state, multicast groups)."""
        r, m = self.rng, self.pair.ref
        name = r.choice(m.memory_names)
        depth, width = m.memories()[name]
        word = random_word(r, width)
        if r.random() < 0.5:
            word |= 1                      # a valid entry, whatever it says
        self.pair.write(name, r.randrange(depth), word)

    def reg_write(self):
        r, m = self.rng, self.pair.ref
        name = r.choice(m.register_names)
        default = m._reg(name)[2]
        ports = [m._reg(n)[2] for n in m.register_names]
        self.pair.reg_write(name, r.choice([default, default, r.choice(ports),
                                            STORAGE_UDP_PORT, r.getrandbits(16)]))


class L3(Traffic):
    def structured(self):
        r = self.rng
        k = r.random()
        if k < 0.7:
            return super().structured()
        src = r.choice(self.rack.hosts)
        dst = r.choice([f"10.{r.randrange(70, 90)}.{r.randrange(4)}.{r.randrange(256)}",
                        f"{r.randrange(1, 224)}.{r.randrange(256)}.0.1"])
        return self.frame(src, dst, r.getrandbits(16), r.getrandbits(16), r.randbytes(
            r.randrange(0, 64)), **self.variant()), r.randrange(4)

    def extra_setup(self):
        super().extra_setup()
        r = self.rng
        choice = r.choice(["to_host", "drop", "route", None])
        params = ({"port": r.randrange(6), "dmac": 1, "smac": 2} if choice == "route" else None)
        self.pair.writes(self.tw.set_default("l3.routes", choice, params))


class Prim(Traffic):
    SRC = ["192.0.2.1", "192.0.2.9", "192.0.3.9", "10.77.0.1"]

    def extra_setup(self):
        super().extra_setup()
        r, tw, w = self.rng, self.tw, self.pair.writes
        self.prog = next(p for p in self.pl.programs if p.name == "prim")
        w(tw.exact_add("prim.ops", [OP_FORWARD], "forward", {"port": r.randrange(5)}))
        w(tw.exact_add("prim.ops", [OP_CAS], "forward", {"port": r.randrange(4)}))
        w(tw.exact_add("prim.ops", [OP_MAX], "forward", {"port": r.randrange(4)}))
        w(tw.exact_add("prim.ops", [OP_MCAST], "multicast", {"group": r.choice([1, 2, 3, 20])}))
        w(tw.exact_add("prim.ops", [OP_RECIRC], "recirculate", {"port": r.randrange(4)}))
        w(tw.exact_add("prim.ops", [OP_CLONE], "clone", {"port": r.randrange(4)}))
        self.mcast(1, [(0, 10), (2, 11), (3, 12)])
        self.mcast(2, [(1, 11)])
        self.mcast(3, [])
        w(tw.exact_add("prim.copy_tag", [10], "tag_copy", {"tag": 0xAAAA}))
        w(tw.exact_add("prim.copy_tag", [11], "tag_copy", {"tag": 0xBBBB}))
        a = int.from_bytes(ip4("192.0.2.0"), "big")
        w(tw.ternary_add("prim.acl", [a | 1, 7000], [0xFFFFFFFF, 0xFFFF], "allow", priority=0))
        w(tw.ternary_add("prim.acl", [a, 0], [0xFFFFFF00, 0], "deny", priority=r.randrange(1, 3)))

    def structured(self):
        r = self.rng
        op = r.choice([OP_FORWARD, OP_CAS, OP_CAS, OP_MAX, OP_MCAST, OP_RECIRC, OP_CLONE, 0, 9])
        tag = r.choice([r.randrange(8), r.randrange(8) | 0x100, r.getrandbits(16)])
        cells = self.pair.ref.memory("prim.cells").words
        value = r.choice([r.randrange(10), r.getrandbits(32), cells[tag & 0xFF] + 1])
        expect = cells[tag & 0xFF] if r.random() < 0.5 else r.randrange(4)
        hdr = pack_header(self.prog, op=op, tag=tag, value=value, expect=expect,
                          flags=r.getrandbits(8) if r.random() < 0.1 else 0)
        src = r.choice(self.rack.hosts)
        f = udp_frame(src.mac, 0x02AA00000001, r.choice(self.SRC), r.choice(
            ["10.1.2.3", self.servers[0].ip]), r.choice([7000, 7001, 7002]),
            self.pair.ref.reg_read("parser.udp_port.prim") if r.random() < 0.95 else
            PRIM_UDP_PORT, hdr + r.randbytes(r.choice([0, 4, 40])), **self.variant())
        return f, r.randrange(4)


class NetClone(Traffic):
    def config(self):
        from netstor.offloads.netclone.config import netclone_config
        self.setup_nc = netclone_config(self.rack.hosts, self.servers)
        return self.setup_nc.config

    def extra_setup(self):
        super().extra_setup()
        from netstor.offloads.netclone.header import NETCLONE_UDP_PORT
        r = self.rng
        self.port = NETCLONE_UDP_PORT
        self.pending = collections.deque(maxlen=64)
        # least-loaded and random policies, a group naming an unknown server
        for g in r.sample(self.setup_nc.groups, 2):
            s1, s2 = self.setup_nc.pairs[g]
            self.pair.writes(self.tw.exact_add("nc.groups", [g], "candidates", {
                "s1": s1 + 1, "s2": s2 + 1, "policy": r.randrange(2)}))
        self.pair.writes(self.tw.exact_add("nc.groups", [40], "candidates",
                                           {"s1": 1, "s2": 9, "policy": 1}))

    def structured(self):
        from netstor.offloads.netclone.header import NcHeader, OP_REQ
        r = self.rng
        if self.pending and r.random() < 0.5:
            return self.reply()
        c = r.choice(self.clients)
        group = r.choice(self.setup_nc.groups + [40, 63, r.getrandbits(16)])
        hdr = NcHeader(op=OP_REQ, group=group)
        if r.random() < 0.05:
            hdr = hdr._replace(clone=r.randrange(3), seq=r.getrandbits(32))
        return self.frame(c, self.setup_nc.vip, self.port, self.port,
                          hdr.pack() + self.storage(), **self.variant()), c.segment

    def reply(self):
        from netstor.offloads.netclone.header import NcHeader
        r = self.rng
        i = r.randrange(len(self.pending))
        app, dst_ip, src_ip = self.pending[i]
        if r.random() < 0.7:
            del self.pending[i]
        hdr = NcHeader.unpack(app)
        load = r.choice([0, 0, 0, 1, 2, r.randrange(100)])
        server = self.by_ip.get(dst_ip) or r.choice(self.servers)
        client = self.by_ip.get(src_ip) or r.choice(self.clients)
        rep = hdr.reply(hdr.server_id if r.random() < 0.9 else r.randrange(70), load)
        return self.frame(server, client, self.port, self.port, rep.pack() + self.storage(True),
                          **self.variant()), server.segment

    def observe(self, frame, port, outs):
        from netstor.offloads.netclone.header import OP_REQ
        for o in outs:
            if len(o.frame) < 80 or o.port >= 2:
                continue
            l3, u, app = app_of(o.frame)
            if len(app) >= 16 and app[0] == OP_REQ:
                self.pending.append((app[:16], ".".join(map(str, o.frame[l3 + 16:l3 + 20])),
                                     ".".join(map(str, o.frame[l3 + 12:l3 + 16]))))


class NetRS(Traffic):
    def config(self):
        from netstor.offloads.netrs.config import rack_config
        cfg, self.groups = rack_config(self.rack.hosts, self.clients, self.servers)
        return cfg

    def extra_setup(self):
        super().extra_setup()
        from netstor.offloads.netrs.header import NETRS_UDP_PORT, DRS_RID
        r, tw, w = self.rng, self.tw, self.pair.writes
        self.port = NETRS_UDP_PORT
        self.pending = collections.deque(maxlen=64)
        self.arrival = r.getrandbits(32)
        # other algorithms and settings for some groups (every parameter of the action at
        # random, server slots among the rack's ids and a few unknown ones)
        table = next(t for t in self.pl.tables if t.qualname == "rs.rgroups")
        act = next(a for a in table.actions if a.name == "replicas")
        for g in range(len(self.groups), len(self.groups) + 3):
            params = {}
            for p, width in act.params.items():
                if p[0] == "s" and p[1:].isdigit():
                    params[p] = r.choice([1, 2, 3, 1, 2, 3, 9])
                elif p == "mask":
                    params[p] = r.choice([0x07, 0x03, 0xFF, 0x00, r.getrandbits(8)])
                else:
                    params[p] = r.choice([0, 1, r.getrandbits(width)])
            w(tw.exact_add("rs.rgroups", [g], "replicas", params))
        # a degraded (DRS) client and an RSNode elsewhere
        w(tw.lpm_add("rs.tgroups", int.from_bytes(ip4("10.77.0.200"), "big"), 32, "rsnode",
                     {"rid": DRS_RID, "tg": 3}))
        w(tw.lpm_add("rs.tgroups", int.from_bytes(ip4("10.77.0.201"), "big"), 32, "rsnode",
                     {"rid": 77, "tg": 2}))
        w(tw.exact_add("rs.forward", [77], "forward", {"port": 1, "dmac": 0x0200000000F7,
                                                       "smac": 0x0200000000F8}))
        self.ngroups = len(self.groups) + 3

    def next_arrival(self):
        r = self.rng
        self.arrival = (self.arrival + r.choice([r.randrange(1, 300), r.randrange(1, 1 << 16),
                                                 r.randrange(1, 1 << 26)])) & 0xFFFFFFFF
        return self.arrival

    def structured(self):
        from netstor.offloads.netrs.header import (RsRequest, M_RESP, M_MON, M_DRS, f)
        r = self.rng
        k = r.random()
        if self.pending and k < 0.45:
            return self.response()
        c = r.choice(self.clients)
        src = c
        if r.random() < 0.1:          # the DRS client, the other RSNode's client, unknown
            src = self.frame_host(r.choice(["10.77.0.200", "10.77.0.201", "10.77.0.99"]), c)
        req = RsRequest(rgid=r.choice(list(range(self.ngroups)) + [r.getrandbits(16)]),
                        avail=r.choice([0xFF, 0xFF, 0x07, 0x05, r.getrandbits(8)]))
        if r.random() < 0.08:         # an already selected / degraded / odd magic
            req = req._replace(mf=r.choice([f(M_RESP), f(M_DRS), M_MON, M_RESP,
                                            r.getrandbits(48)]), rid=r.getrandbits(16))
        dst = r.choice(self.servers)
        return self.frame(src, dst, self.port, self.port, req.pack() + self.storage(),
                          **self.variant()), r.choice([c.segment] * 9 + [1, 2, 3])

    def frame_host(self, ip, like):
        return type(like)(**{**like.__dict__, "ip": ip})

    def response(self):
        from netstor.offloads.netrs.header import RsRequest, M_DRS, M_MON, f_inv
        r = self.rng
        i = r.randrange(len(self.pending))
        app, dst_ip, src_ip = self.pending[i]
        if r.random() < 0.8:
            del self.pending[i]
        req = RsRequest.unpack(app)
        server = self.by_ip.get(dst_ip) or r.choice(self.servers)
        sid = self.servers.index(server) + 1 if server in self.servers else r.randrange(70)
        q = r.choice([0, 1, 2, 5, r.randrange(5000), 0xFFFF])
        t = r.choice([r.randrange(1, 20_000), r.randrange(1, 5_000_000), 0])
        resp = req.response(sid if r.random() < 0.95 else r.randrange(80), q, t)
        if r.random() < 0.05:
            resp = resp._replace(mf=r.choice([M_DRS, M_MON, f_inv(M_DRS)]))
        if r.random() < 0.1:
            resp = resp._replace(sm=r.getrandbits(32))
        client = self.by_ip.get(src_ip) or r.choice(self.clients)
        return self.frame(server, client, self.port, self.port,
                          resp.pack() + self.storage(True), **self.variant()), \
            r.choice([server.segment] * 9 + [0, 3])

    def observe(self, frame, port, outs):
        from netstor.offloads.netrs.header import REQ_LEN
        for o in outs:
            if o.port >= 2 or len(o.frame) < 60:
                continue
            l3, u, app = app_of(o.frame)
            if len(app) >= REQ_LEN and o.frame[u + 2:u + 4] == self.port.to_bytes(2, "big"):
                self.pending.append((app[:REQ_LEN], ".".join(map(str, o.frame[l3 + 16:l3 + 20])),
                                     ".".join(map(str, o.frame[l3 + 12:l3 + 16]))))


class Generic(Traffic):
    """A registered offload this file has no traffic of its own for: its UDP port, random
    header bytes."""

    def __init__(self, rng, name):
        super().__init__(rng)
        self.name = name

    def structured(self):
        r = self.rng
        prog = next(p for p in self.pl.programs if p.name == self.name)
        c, s = r.choice(self.clients), r.choice(self.servers)
        src, dst = (c, s) if r.random() < 0.5 else (s, c)
        port = self.pair.ref.reg_read(f"parser.udp_port.{prog.name}") if prog.hdr_type else \
            r.getrandbits(16)
        return self.frame(src, dst, port, port, r.randbytes(prog.header_bytes) + self.storage(),
                          **self.variant()), src.segment


class XorInc(Traffic):
    """XORInc (copy-list groups): the PART contributions of a few repairs and the UPD_NEW/UPD_OLD pairs of updates, in random
    order with duplicates, random lengths and offsets (short, whole, too long), ops, codes
    and types; DELTA copies scaled in egress per copy."""

    def pipeline(self):
        return default_pipeline(self.n_ports)

    def extra_setup(self):
        super().extra_setup()
        from netstor.offloads.xorinc.config import model_writes
        hosts = self.rack.hosts
        nodes = {f"n{i}": {"ip": h.ip, "mac": h.mac, "port": h.segment}
                 for i, h in enumerate(hosts)}
        names = list(nodes)
        sec = {"smac": 0x02AA000000FE, "nodes": nodes, "timeout": 60_000,
               "codes": {1: {"k": 4, "r": 2, "nodes": names[:6]},
                         2: {"k": 3, "r": 3, "nodes": names[::-1][:6]}}}
        _plan, writes = model_writes(self.pl, sec, writer=self.tw)
        self.pair.writes(writes)
        self.recent, self.queue = [], []

    def operation(self):
        """The frames of one whole operation (queued, sent interleaved with the rest): a
        repair's k PART packets or an update's UPD_NEW and UPD_OLD."""
        from netstor.offloads.xorinc import header as xh
        from netstor.offloads.xorinc.config import helpers
        r = self.rng
        code, k = r.choice([(1, 4), (2, 3)])
        base = dict(opid=r.randrange(8), stripe=r.getrandbits(32), code=code,
                    off=r.choice([0, 16, 48]), len=r.choice([64, 1024, 300, 1]),
                    req_addr=r.getrandbits(32), req_port=r.getrandbits(16))
        if r.random() < 0.5:
            lost = r.randrange(6)
            hdrs = [xh.HEADER.pack(type=xh.T_PART, chunk=lost, src=s, need=k, **base)
                    for s in helpers(6, k, lost)]
            r.shuffle(hdrs)
        else:
            j = r.randrange(k)
            hdrs = [xh.HEADER.pack(type=t, chunk=j, src=j, need=2, **base)
                    for t in (xh.T_UPD_NEW, xh.T_UPD_OLD)]
        return [(h, r.randbytes(base["len"])) for h in hdrs]

    def structured(self):
        from netstor.offloads.xorinc import header as xh
        r = self.rng
        if self.recent and r.random() < 0.1:          # a duplicate of a recent frame
            return r.choice(self.recent)
        if not self.queue and r.random() < 0.3:
            self.queue = self.operation()
        if self.queue and r.random() < 0.8:
            hdr, data = self.queue.pop(0)
            return self._frame(hdr, data)
        code = r.choice([1, 1, 2, 3])
        n = 6
        t = r.choice([xh.T_PART] * 5 + [xh.T_UPD_NEW, xh.T_UPD_OLD] * 2
                     + [xh.T_READ, xh.T_DELTA, xh.T_ACK])
        length = r.choice([64, 64, 1024, 1024, 200, 5, 0, 1100])
        hdr = xh.HEADER.pack(type=t, opid=r.choice([0, 1, 2, 3, r.randrange(70)]),
                             stripe=r.getrandbits(32), chunk=r.randrange(n + 1),
                             src=r.randrange(n + 1), need=r.randrange(8), code=code,
                             off=r.choice([0, 16, 32, 48, 60, r.randrange(70)]), len=length,
                             req_addr=r.getrandbits(32), req_port=r.getrandbits(16))
        data = r.randbytes(min(length, xh.MAX_DATA + 100) if r.random() < 0.95
                           else r.randrange(60))
        return self._frame(hdr, data)

    def _frame(self, hdr, data):
        from netstor.offloads.xorinc import header as xh
        r = self.rng
        src, dst = r.choice(self.rack.hosts), r.choice(self.rack.hosts)
        kw = self.variant() if r.random() < 0.1 else {}
        f = udp_frame(src.mac, 0x02AA00000001, src.ip, dst.ip, r.getrandbits(16),
                      self.pair.ref.reg_read("parser.udp_port.xi"),
                      hdr + bytes(xh.PAD) + data, **kw)
        out = (f, r.randrange(4))
        self.recent = (self.recent + [out])[-12:]
        return out


# ---- the edge pipeline --------------------------------------------------------------------------
class Popcount(Element):
    """A kind without ``compile``: the compiled model runs its ``evaluate``."""

    egress_ok = True

    def __init__(self, name, dst, src, when=None):
        super().__init__(name, when)
        self.dst, self.src = dst, src

    def reads(self):
        return [self.src]

    def writes(self):
        return [self.dst]

    def set_items(self):
        return [Set(self.dst, 0)]

    def model_counters(self):
        return [f"{self.qualname}.odd"]

    def evaluate(self, model, phv, env):
        n = bin(self.src.eval(env)).count("1")
        if n & 1:
            model.count(f"{self.qualname}.odd")
        model.assign(phv, [(self.dst.name, n)])


class Rotl(Expr):
    """An expression class without ``py``: the generated code calls its ``eval``."""

    def __init__(self, a, n):
        self.a, self.n, self.width = a, n, a.width

    def eval(self, env):
        v, w = self.a.eval(env), self.width
        return ((v << self.n) | (v >> (w - self.n))) & ((1 << w) - 1)

    def refs(self):
        yield from self.a.refs()


EDGE_PORT = 0x7000


def edge_pipeline():
    p = Program("edge", udp_port=EDGE_PORT)
    h = p.header([("a", 16), ("b", 16), ("c", 32), ("d", 8), ("e", 8), ("f", 16)])
    x, one = p.meta("x", 8), p.meta("one", 1)
    p.add(Compute("swap", [Set(h["a"], h["b"]), Set(h["b"], h["a"]), Set(x, h["a"] + 0x1FF),
                           Set(one, (h["d"] > h["e"]) | (h["d"][0:1] == 1))]))
    bank = p.bank("small", width=8, depth=5)             # indexes 5..: out of bounds
    p.add(RegisterOp.add("acc", bank, h["b"][0:4], 200, result=h["c"]))
    wide = p.bank("wide", width=40, depth=4)
    p.add(RegisterOp("peek", wide, index=h["d"][0:2], update=lambda old: old + h["c"] - 3,
                     write=0, result=h["f"], returns="new"))
    p.add(RegisterOp("rmw", p.bank("wide2", width=40, depth=4), index=h["e"][0:2],
                     update=lambda old: ~old, write=h["d"][7:8] | Old(40)[0:1],
                     result=F.meta.bridge, returns="old", when=one))
    p.add(Compute("noop", []))
    p.add(Hash("h", h["c"], [F.ipv4.src, h["a"], one], seed=7, when=h["a"] == 0xEEEE))
    p.add(Popcount("pop", h["e"], F.ipv4.dst, when=h["d"][1:2] == 1))
    p.add(Compute("rot", [Set(h["d"], Rotl(h["d"], 3)), Set(F.ipv4.tos, Rotl(h["e"], 1))],
                  when=h["a"][4:8] == 5))
    loop = Action("loop", {"inc": 4}, lambda a: [
        Set(F.meta.recirc, 1), Set(F.meta.bridge, F.meta.bridge + a.inc)])
    mc = Action("mc", {"g": 8}, lambda a: [Set(F.meta.mcast_group, a.g),
                                           Set(F.meta.clone, h["f"][0:1])])
    fwd = Action("fwd", {"port": 4}, lambda a: [Set(F.meta.egress_port, a.port),
                                                Set(F.meta.drop, h["f"][15:16])])
    p.add(Table("ops", kind="exact", key=[h["a"][0:8], one], size=8, ways=2,
                actions=[loop, mc, fwd], default=fwd, default_params={"port": 5}))
    p.add(Table("tern", kind="ternary", key=[h["b"]], size=4, actions=[
        Action("mark", {"v": 8}, lambda a: [Set(h["e"], a.v), Set(F.udp.sport, a.v)])]))
    p.add(Compute("hops", [Set(h["d"], F.meta.recirc_count), Set(h["f"], F.meta.bridge[0:16])],
                  when=F.meta.recirc_count != 0))
    tag = Action("tag", {"t": 16}, lambda a: [Set(h["f"], a.t), Set(F.eth.src, Cat(a.t, a.t))])
    p.add_egress(Table("etag", kind="exact", key=[F.meta.rid], size=8, ways=1, actions=[tag]))
    p.add_egress(Compute("eport", [Set(h["e"], Cat(F.meta.egress_port, Const(0xA, 4)))],
                         when=F.meta.rid == 0))
    p.add_egress(Popcount("epop", x, F.meta.egress_port, when=F.meta.rid == 7))
    # a header that fills the whole window: a 26-byte offload header, then a 16-byte key in
    # the window's last bytes, read and rewritten
    other = Program("other", udp_port=0x7001)
    oh = other.header([("k", 16), ("mid", 26 * 8 - 16), ("key", 128)])
    other.add(Compute("bump", [Set(oh["k"], oh["k"] + 1), Set(F.ipv4.ttl, Mux(
        F.ipv4.ttl > 3, F.ipv4.ttl - 3, 0)), Set(oh["key"], Cat(oh["key"][64:128] ^ oh["k"],
                                                               oh["key"][0:64]))]))
    # a program without a UDP port that reads the app window (so it is always extracted) and
    # rewrites every other deparsed field
    raw = Program("raw")
    sel = F.udp.sport[0:2] == 1
    A = APP_BYTES * 8
    raw.add(Compute("rw", [Set(F.ipv4.ident, Cat(F.app[0:8], F.app[A - 8:A])),
                           Set(F.vlan.tci, F.vlan.tci + F.app[100:104]),
                           Set(F.ipv4.src, F.ipv4.src ^ 0x10001),
                           Set(F.udp.dport, Mux(F.app[A - 1:A] == 1, F.udp.dport, 0x7000))],
                    when=sel))
    return Pipeline([raw, p, other], n_ports=3, mcast_groups=8, max_recirc=3)


class Edge(Traffic):
    n_ports = 3

    def pipeline(self):
        return edge_pipeline()

    def config(self):
        return None

    def setup(self, pair):
        self.pair = pair
        self.pl = pair.ref.pipeline
        self.tw = TableWriter(self.pl)
        self.base = ([], [])
        self.prog = self.pl.programs[1]
        self.apply_base()

    def extra_setup(self):
        r, tw, w = self.rng, self.tw, self.pair.writes
        for a in range(6):
            for one in (0, 1):
                act = r.choice(["loop", "mc", "fwd"])
                params = {"loop": {"inc": r.randrange(16)}, "mc": {"g": r.randrange(10)},
                          "fwd": {"port": r.randrange(8)}}[act]
                try:
                    w(tw.exact_add("edge.ops", [a, one], act, params))
                except Exception:       # a full way: fine, the key misses
                    pass
        w(tw.ternary_add("edge.tern", [0x10], [0xF0], "mark", {"v": 0x33}, priority=1))
        w(tw.ternary_add("edge.tern", [0x0], [0x0], "mark", {"v": 0x44}, priority=3))
        for g in range(1, 8):
            members = [(q, r.randrange(10)) for q in range(6) if r.random() < 0.5]
            self.mcast(g, members)
        for rid in range(8):
            w(tw.exact_add("edge.etag", [rid], "tag", {"t": r.getrandbits(16)}))

    def structured(self):
        r = self.rng
        prog = self.prog if r.random() < 0.8 else self.pl.programs[2]
        vals = {n: r.choice([r.randrange(8), r.getrandbits(w), 3, 5, 0xEEEE & ((1 << w) - 1),
                             0x55 & ((1 << w) - 1)]) for n, w in prog.header_fields}
        hdr = pack_header(prog, **vals)
        c, s = r.choice(self.clients), r.choice(self.servers)
        port = self.pair.ref.reg_read(f"parser.udp_port.{prog.name}")
        return self.frame(c, s, r.getrandbits(16), port, hdr + r.randbytes(r.choice(
            [0, 0, 9, 40])), **self.variant()), r.randrange(6)


#: the default programs' generic comparisons (bitmap multicast); XORInc's traffic needs copy
#: lists and has its own (``test_compiled_equals_interpreter_payload``)
PROGRAMS = [p.name for p in default_pipeline().programs if p.name != "xi"] + ["edge"]
TRAFFIC = {"l3": L3, "prim": Prim, "nc": NetClone, "rs": NetRS, "edge": Edge, "xi": XorInc}


def make_traffic(name, rng):
    cls = TRAFFIC.get(name)
    return cls(rng) if cls else Generic(rng, name)


# ---- the run ------------------------------------------------------------------------------------
def compare(program, n, seed=1, compiled=CompiledModel, checkpoints=CHECKPOINTS,
            groups="bitmap"):
    """Run ``n`` operations' worth of frames of ``program``'s traffic through both models
    (multicast ``groups``: "bitmap" or "list"); raises :class:`Mismatch` at the first
    difference. Returns the pair (its counts)."""
    rng = random.Random(f"{program}-{seed}" + ("" if groups == "bitmap" else f"-{groups}"))
    traffic = make_traffic(program, rng)
    pair = Pair(traffic.pipeline(), compiled, groups)
    traffic.setup(pair)
    P = pair.ref.P
    every = max(1, n // checkpoints)
    deferred = False
    arrival = rng.getrandbits(32)
    reset_at = rng.randrange(1, checkpoints) * every
    for i in range(1, n + 1):
        k = rng.random()
        if k < 0.003:
            traffic.host_write()
        elif k < 0.0035:
            traffic.reg_write()
        elif k < 0.004:
            pair.ref.counter_clear(name := rng.choice(pair.ref.counter_names))
            pair.dut.counter_clear(name)
        k = rng.random()
        if k < 0.62:
            frame, port = traffic.structured()
        elif k < 0.77:
            frame, port = traffic.fuzzed()
        elif k < 0.95:
            frame, port = traffic.structured()
            frame = malformed(rng, frame)
        else:
            frame, port = random_frame(rng), rng.randrange(2 * P)
        if rng.random() < 0.05:
            port = rng.randrange(2 * P)
        user = rng.getrandbits(16)
        if rng.random() < 0.9:
            user &= ~1
        if isinstance(traffic, NetRS):
            arrival = traffic.next_arrival()
        else:
            arrival = (arrival + rng.randrange(1, 5000)) & 0xFFFFFFFF if rng.random() < 0.95 \
                else rng.getrandbits(40)
        outs = pair.process(frame, port, user, arrival)
        traffic.observe(frame, port, outs)
        if deferred and rng.random() < 0.2:
            pair.run_deferred()
        if i % every == 0 or i == n:
            if deferred:
                pair.run_deferred()
            pair.check_state()
            deferred = rng.random() < 0.3 and i != n
            pair.set_deferred(deferred)
            if i == reset_at:
                pair.totals.update(pair.ref.counters())
                for m in pair.models:
                    m.reset()
                traffic.apply_base()
            else:
                traffic.apply_base()        # restore what random host writes broke
            pair.check_state()
    pair.totals.update(pair.ref.counters())
    return pair


@pytest.mark.parametrize("program", PROGRAMS)
def test_compiled_equals_interpreter(program, record_property):
    n = N_PACKETS if program != "edge" else max(1, N_PACKETS // 4)
    t0 = time.perf_counter()
    pair = compare(program, n)
    wall = time.perf_counter() - t0
    record_property("packets_compared", pair.packets)
    print(f"compiled model vs interpreter, program {program}: {pair.packets} packets, "
          f"{pair.outputs} outputs equal, {wall:.1f} s")
    assert pair.packets == n
    c = pair.totals
    # the traffic reached what it is meant to reach (so equality is not vacuous); generic
    # traffic (random headers, unconfigured tables) also meets the other unconfigured
    # offloads, which trust nothing and drop (NetLR: 24 % of its packets left since XORInc and
    # NICE joined the default pipeline)
    assert pair.outputs > (n // 4 if program in TRAFFIC else n // 5)
    assert sum(v for k, v in c.items() if k.startswith("parser.err.")) > n // 100
    assert c[f"in{2 * pair.ref.P}.pkts"] > 0 or program not in RECIRCULATES
    hits = {k: v for k, v in c.items() if k.endswith(".hit") and k.startswith(program + ".")}
    if program in TRAFFIC:
        assert not hits or sum(v > 0 for v in hits.values()) >= len(hits) // 2, hits
    # else: Generic traffic (random headers, tables unconfigured: equality only); an offload
    # with its own configured comparison (NetLR: netstor/offloads/netlr/test_compiled.py,
    # every branch reached) checks its coverage there


RECIRCULATES = {"prim", "nc", "rs", "edge"}


@pytest.mark.parametrize("program", ["prim", "edge"])
def test_compiled_equals_interpreter_copy_lists(program):
    """Copy-list multicast (the replication engine's ``tm.groups``): lists in any order, a
    port listed several times, copies to ports that are not outputs, random group words
    written by the host, each copy through the egress elements."""
    n = max(1, N_PACKETS // 10)
    pair = compare(program, n, groups="list")
    c = pair.totals
    assert pair.packets == n and pair.outputs > n // 4
    assert "tm.groups" in pair.ref.memory_names and "tm.mcast" not in pair.ref.memory_names
    # multicast really ran: a group listed a port that is not an output, and the packets
    # sent more copies than a port bitmap could (more than one per port)
    assert c["tm.bad_port"] > 0 and c["tm.mcast_empty"] > 0
    assert pair.multi_same_port > 0


def test_compiled_equals_interpreter_payload():
    """The payload elements (the XORInc program, with copy-list groups): both
    models' outputs, counters and engine memories equal; the engine completed, absorbed,
    refused duplicates and misaligned frames, and timed ops out (so equality is not
    vacuous)."""
    n = max(1, N_PACKETS // 50)
    pair = compare("xi", n, groups="list")
    c = pair.totals
    assert pair.packets == n and pair.outputs > n // 8
    for k in ("done", "absorbed", "dup", "bad", "misaligned", "timeouts"):
        assert c[f"xi.engine.{k}"] > 0, k
    assert c["xi.scale.scaled"] > 0


# ---- the comparison can fail ------------------------------------------------------------------
def _wrong_cmp(self, ctx):
    op = {"<": "<=", ">": ">="}.get(self.op, self.op)
    return f"({self.a.py(ctx)} {op} {self.b.py(ctx)})"


def _wrong_add(self, ctx):
    a, b = self.a.py(ctx), self.b.py(ctx)
    if self.op in "+-":
        return f"({a} {self.op} {b})"           # the truncation to the width forgotten
    return _BinOp_py(self, ctx)


_BinOp_py = _BinOp.py


#: (program, mutation, seed). The untruncated sum shows in NetRS once an EWMA sum
#: (``rs.st0``) or a sample count overflows: within 20,000 packets at seeds 1, 3 and 4 (after
#: 4,000 / 2,000 / 18,000), not at seed 2 since XORInc and NICE joined the pipeline (the
#: traffic's random draws changed); the others at seed 2 as before
MUTANTS = [("l3", "cmp", 2), ("rs", "add", 3), ("prim", "stale", 2), ("nc", "cmp", 2)]


@pytest.mark.parametrize("program,mutation,seed", MUTANTS)
def test_a_wrong_compiled_model_is_caught(monkeypatch, program, mutation, seed):
    """A deliberately wrong generated expression (``<`` as ``<=``, a sum not truncated) or a
    copy of a memory instead of the live list: the comparison fails, and soon."""
    if mutation == "cmp":
        monkeypatch.setattr(_CmpOp, "py", _wrong_cmp)
    elif mutation == "add":
        monkeypatch.setattr(_BinOp, "py", _wrong_add)
    else:
        real = Codegen.words
        monkeypatch.setattr(Codegen, "words", lambda self, memory: self.const(
            list(self.model.memory(memory).words), "W_copy_" + memory) if "." in memory
            else real(self, memory))
    with pytest.raises(Mismatch):
        compare(program, 20_000, seed=seed)


def test_live_state_and_source():
    """Host writes between packets reach the compiled code at once (the generated code holds
    the memories' own lists, also across a reset), and the source is there to read."""
    pair = Pair(default_pipeline())
    m = pair.dut
    assert "def _pass(frame, inp, user, arrival, recirc_count, bridge):" in m.source
    assert "l3.routes" in m.source and "S_FAST.unpack_from" in m.source
    t = Traffic(random.Random(3))
    t.setup(pair)
    c, s = t.clients[0], t.servers[0]
    f = t.frame(c, s, 40000, STORAGE_UDP_PORT, t.get.pack())
    (routed,) = pair.process(f, c.segment)
    assert routed.port == s.segment and routed.frame != f
    pair.writes(t.tw.set_default("l3.routes", "drop"))
    for e in range(64):
        pair.write("l3.routes", e, 0)
    assert pair.process(f, c.segment) == []
    for mm in pair.models:
        mm.reset()
    (punted,) = pair.process(f, c.segment)
    assert (punted.port, punted.frame, punted.user) == (c.segment + 2, f, 0)
    words = m.memory("prim.flows").words
    m.memory("prim.flows").words = [1] * len(words)      # copied in, not rebound
    assert m.memory("prim.flows").words is words and words[5] == 1


def test_pickled_and_copied():
    """A compiled model pickles (state, not code: the code is generated again) and goes on
    exactly where the original is."""
    import copy
    import pickle
    pair = Pair(default_pipeline())
    t = Prim(random.Random(4))
    t.setup(pair)
    for _ in range(300):
        pair.process(*t.structured())
    for make in (lambda m: pickle.loads(pickle.dumps(m)), copy.deepcopy):
        clone = make(pair.dut)
        assert clone.counters() == pair.dut.counters() and clone.source == pair.dut.source
        for _ in range(200):
            f, port = t.structured()
            a = pair.ref.process(f, port)
            assert clone.process(f, port) == a == pair.dut.process(f, port)
        for name in clone.memory_names:
            assert clone.memory(name).words == pair.ref.memory(name).words
        assert clone.counters() == pair.ref.counters()


def test_other_programs_copies_beside_egress_metadata():
    """A program's egress elements may write its own metadata (XORInc's ``xi.delta`` its
    coefficient), which the compiled code binds only on that program's packets. Another
    program's packet through the same egress path (a primitives packet: ``prim.copy_tag``
    runs in egress) must not read it: found when XORInc joined the default pipeline (an
    ``UnboundLocalError`` in the generated code). Both models agree on the copy."""
    pair = Pair(default_pipeline(), groups="list")
    t = Traffic(random.Random(5))
    t.setup(pair)
    c, s = t.clients[0], t.servers[0]
    hdr = struct.pack("!BBHIIIIBBH", OP_FORWARD, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    f = t.frame(c, s, 40000, PRIM_UDP_PORT, hdr)
    P = pair.dut.pipeline.n_ports
    outs = pair.process(f, P)                  # from host TX 0: a trusted port
    assert pair.ref.counter("prim.copy_tag.miss") + pair.ref.counter("prim.copy_tag.hit") > 0
    assert outs and all(o.port in range(2 * pair.dut.pipeline.n_ports) for o in outs)
