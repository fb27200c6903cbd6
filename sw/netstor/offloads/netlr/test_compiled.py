"""The compiled model against the interpreter on fuzzed NetLR traffic (the harness of
``netstor/model/test_compiled.py``: every output, counter, register and memory cell equal).

Traffic: the rack's three servers are replicas (rids 1..3 and 9) in two groups; clients write
and read a handful of objects in a few slots (so slots collide and objects are listed while
reads arrive); every write copy the switch sends is answered by its replica's ack, queued and
sent later in a random order, with duplicates, stale acks of older seqs, acks from the wrong
port (untrusted) and acks with a wrong fp; read replies; random ops, groups and slots;
membership changes (a replica down, joining, back) between packets; plus the harness's random
header fields, malformed frames, random bytes, host writes of random words, register changes,
counter clears and a reset."""
from __future__ import annotations

import os

import pytest

from netstor.model import test_compiled as tc

from .header import (NETLR_UDP_PORT, OP_READ, OP_READ_REPLY, OP_WRITE, OP_WRITE_REPLY, HEADER,
                     LrHeader)

N = int(os.environ.get("NETSTOR_COMPILED_PACKETS", 100_000)) // 5
RIDS = (1, 2, 3, 9)


class NetLr(tc.Traffic):
    def pipeline(self):
        from netstor.programs import default_pipeline
        return default_pipeline(self.n_ports)

    def section(self, down=(), joining=()):
        s = self.rack.servers
        hosts = {1: s[0], 2: s[1], 3: s[2], 9: s[0]}
        return {"smac": 0x02AA000000FE, "mcast_base": 300,
                "replicas": {r: {"ip": h.ip, "mac": h.mac, "port": h.segment,
                                 "udp": NETLR_UDP_PORT + r} for r, h in hosts.items()},
                "groups": {0: [1, 2, 3], 1: [9, 2]}, "down": list(down),
                "joining": list(joining)}

    def extra_setup(self):
        super().extra_setup()
        from .config import model_writes
        self.hosts = {1: self.rack.servers[0], 2: self.rack.servers[1],
                      3: self.rack.servers[2], 9: self.rack.servers[0]}
        trusted = sorted({h.segment for h in self.rack.servers})
        _p, writes = model_writes(self.pl, self.section(), writer=self.tw,
                                  trusted_ports=trusted)
        self.pair.writes(writes)
        self.acks = []
        self.commits = getattr(self, "commits", 0)       # WRITE_REPLYs the switch passed on
        NetLr.last = self
        self.fps = [0x1111, 0x2222, 0x3333, 0x4444, 0xFFFFFFFFFFFFFFFF]

    def membership(self):
        from .config import model_writes
        r = self.rng
        down = [x for x in RIDS if r.random() < 0.15]
        joining = [x for x in RIDS if x not in down and r.random() < 0.15]
        _p, writes = model_writes(self.pl, self.section(down, joining), writer=self.tw)
        self.pair.writes(writes)

    def _frame(self, src, dst_ip, sport, hdr, port=None):
        r = self.rng
        body = r.randbytes(r.choice([16, 16, 16, 40, 0, 5]))
        dmac = 0x024E53FF0000 | src.segment
        f = tc.udp_frame(src.mac, dmac, src.ip, dst_ip, sport, NETLR_UDP_PORT,
                         hdr.pack() + body, **self.variant())
        return f, src.segment if port is None else port

    def structured(self):
        r = self.rng
        if r.random() < 0.01:
            self.membership()
        k = r.random()
        if self.acks and k < 0.45:                       # a queued ack, random order
            h, rid = self.acks.pop(r.randrange(len(self.acks)))
            if r.random() < 0.1:
                self.acks.append((h, rid))               # it will come again (duplicate)
            if r.random() < 0.05:
                h = h._replace(seq=max(0, h.seq - r.randrange(1, 3)))    # stale
            if r.random() < 0.03:
                h = h._replace(fp=r.choice(self.fps))
            a = h._replace(op=OP_WRITE_REPLY, rid=rid)
            src = self.hosts.get(rid, self.rack.servers[0])
            port = r.choice(self.rack.clients).segment if r.random() < 0.05 else None
            return self._frame(src, r.choice(self.clients).ip, NETLR_UDP_PORT + rid, a, port)
        c = r.choice(self.clients)
        group = r.choice([0, 0, 0, 1, 1, 2])
        hdr = LrHeader(op=r.choice([OP_READ, OP_READ, OP_WRITE, OP_WRITE, OP_READ_REPLY,
                                    r.randrange(256)]),
                       flags=r.choice([0, 1]), group=group,
                       slot=r.choice([0, 1, 2, 2, 131072 + 2, r.getrandbits(32)]),
                       fp=r.choice(self.fps + [0]), seq=r.getrandbits(32) if r.random() < 0.1
                       else 0, rid=r.choice([0, 1, 2, 3, 9, 200]), req=r.getrandbits(32))
        if hdr.op == OP_READ_REPLY:
            src = self.hosts[r.choice(RIDS)]
            return self._frame(src, c.ip, NETLR_UDP_PORT + 1, hdr)
        return self._frame(c, "10.77.1.254", NETLR_UDP_PORT, hdr)

    def observe(self, frame, port, outs):
        for o in outs:
            if len(o.frame) < 42 + HEADER.size:
                continue
            l3, u, app = tc.app_of(o.frame)
            if len(app) < HEADER.size:
                continue
            h = LrHeader.unpack(app)
            if h.op == OP_WRITE_REPLY and u + 2 < len(o.frame) and \
                    int.from_bytes(o.frame[u + 2:u + 4], "big") == NETLR_UDP_PORT:
                self.commits += 1
            if h.op == OP_WRITE and h.rid in RIDS:
                self.acks.append((h, h.rid))
        del self.acks[:-64]


@pytest.fixture
def netlr_traffic(monkeypatch):
    monkeypatch.setitem(tc.TRAFFIC, "nl", NetLr)


def test_compiled_equals_interpreter_netlr(netlr_traffic):
    pair = tc.compare("nl", N, groups="list")
    c = pair.totals
    assert pair.packets == N and pair.outputs > N // 4
    # the protocol's every branch ran (so equality is not vacuous)
    for k in ("nl.groups.hit", "nl.groups.miss", "nl.replicas.hit", "nl.copies.hit",
              "nl.trust.miss"):
        assert c[k] > 0, k
    banks = {n: pair.ref.mem_read(f"nl.{n}", 0) for n in
             ("collide", "stale", "absorbed", "commits", "ignored", "refused")}
    assert all(v > 0 for v in banks.values()), banks
    assert pair.multi_same_port > 0                  # several copies on one port
    assert NetLr.last.commits > 0                    # committed writes reached the client
