"""The compiled model against the interpreter on fuzzed NICE traffic (the harness of
``netstor/model/test_compiled.py``: every output, counter, register and memory cell equal).

Traffic: the rack's three servers are storage nodes 1, 2 and 1500 in three partitions; the
unicast and multicast vrings are the defaults with /20 subgroups, some of them left unmapped;
clients GET (unicast vring) and PUT (multicast vring) from inside and outside the divisions,
the primaries send TS, nodes send replies and PUT_ACKs to physical addresses, plus frames to
addresses next to the rings; the metadata service fails, re-admits and catches up nodes
between packets (its diffed writes). Plus the harness's random header fields, malformed
frames, random bytes, host writes of random words, counter clears and a reset."""
from __future__ import annotations

import ipaddress
import os

import pytest

from netstor.model import test_compiled as tc

from .header import (NICE_UDP_PORT, OP_GET, OP_GET_REPLY, OP_PUT, OP_PUT_ACK, OP_TS,
                     NiceHeader)

N = int(os.environ.get("NETSTOR_COMPILED_PACKETS", 100_000)) // 10
NODES = (1, 2, 1500)


class Nice(tc.Traffic):
    events = []             # the metadata service's events over the run (setups included)

    def pipeline(self):
        from netstor.programs import default_pipeline
        return default_pipeline(self.n_ports)

    def section(self):
        s = self.rack.servers
        hosts = dict(zip(NODES, s))
        return {"smac": 0x02AA000000FE, "mcast_base": 300, "subgroup": 20,
                "nodes": {n: {"ip": h.ip, "mac": h.mac, "port": h.segment,
                              "udp": NICE_UDP_PORT + (n % 3)} for n, h in hosts.items()},
                "partitions": {0: [1, 2, 1500], 1: [2, 1500, 1], 2: [1500, 1]},
                "subgroups": {s: s % 3 for s in range(16) if s not in (4, 9)},
                "clients": [str(ipaddress.IPv4Network(self.clients[0].ip + "/30", strict=False)),
                            self.clients[2].ip + "/32"]}

    def extra_setup(self):
        super().extra_setup()
        from .config import model_apply
        from .metadata import Metadata
        self.hosts = dict(zip(NODES, self.rack.servers))
        self.t = 0.0
        self.md = Metadata(self.section(), clock=lambda: self.t,
                           sink=lambda ops: self.pair.writes(model_apply(self.tw, ops)))

    def membership(self):
        r, md = self.rng, self.md
        live = [n for n in NODES if md.state.live(n)]
        k = r.random()
        if k < 0.4 and len(live) > 1:
            md.fail(r.choice(live))
        elif k < 0.7 and md.state.down:
            md.rejoin(r.choice(sorted(md.state.down)))
        elif md.state.joining:
            md.caught_up(r.choice(sorted(md.state.joining)))
        Nice.events += [e[0] for e in md.events]
        md.events.clear()

    def _frame(self, src, dst_ip, sport, dport, hdr, port=None):
        r = self.rng
        body = r.randbytes(r.choice([16, 16, 16, 40, 0, 5, 300]))
        dmac = 0x024E53FF0000 | src.segment
        f = tc.udp_frame(src.mac, dmac, src.ip, dst_ip, sport, dport, hdr.pack() + body,
                         **self.variant())
        return f, src.segment if port is None else port

    def structured(self):
        r = self.rng
        if r.random() < 0.01:
            self.membership()
        c = r.choice(self.clients)
        s = r.randrange(16)
        host = r.randrange(4096)
        k = r.random()
        hdr = NiceHeader(op=r.choice([OP_GET, OP_PUT, OP_TS, OP_GET_REPLY, OP_PUT_ACK,
                                      r.randrange(256)]),
                         flags=r.getrandbits(8), frag=r.randrange(3), nfrag=3,
                         client=int(ipaddress.IPv4Address(c.ip)),
                         req=r.getrandbits(32), size=r.randrange(5000),
                         part=r.choice([0, 0, r.getrandbits(16)]))
        if k < 0.35:                                    # a GET to the unicast vring
            return self._frame(c, f"10.10.{s * 16 + host // 256}.{host % 256}",
                               r.randrange(40000, 40004), NICE_UDP_PORT, hdr)
        if k < 0.65:                                    # a PUT fragment (or TS) to the mcast ring
            src = c if r.random() < 0.7 else r.choice(self.servers)
            return self._frame(src, f"10.11.{s * 16 + host // 256}.{host % 256}",
                               r.randrange(40000, 40004), NICE_UDP_PORT, hdr)
        if k < 0.8:                                     # node -> client / node (plain L3)
            n = r.choice(self.servers)
            dst = r.choice(self.clients + self.servers)
            return self._frame(n, dst.ip, NICE_UDP_PORT, r.choice([NICE_UDP_PORT, 40001]),
                               hdr)
        # next to the rings
        dst = r.choice(["10.12.0.1", "10.9.255.255", "10.10.0.0", "10.11.255.255"])
        return self._frame(c, dst, 40000, NICE_UDP_PORT, hdr)


@pytest.fixture
def nice_traffic(monkeypatch):
    monkeypatch.setitem(tc.TRAFFIC, "nice", Nice)
    Nice.events = []


def test_compiled_equals_interpreter_nice(nice_traffic):
    pair = tc.compare("nice", N, groups="list")
    c = pair.totals
    assert pair.packets == N and pair.outputs > N // 4
    # every branch ran (so equality is not vacuous)
    for k in ("nice.rings.hit", "nice.rings.miss", "nice.unicast.hit", "nice.unicast.miss",
              "nice.multicast.hit", "nice.multicast.miss", "nice.divisions.hit",
              "nice.divisions.miss", "nice.nodes.hit", "nice.copies.hit"):
        assert c[k] > 0, k
    assert pair.multi_same_port > 0                  # several copies on one port
    assert {"failed", "promote", "handoff", "rejoin", "rejoined"} <= set(Nice.events)
