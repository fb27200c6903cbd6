"""XORInc's timeout path end to end: the data plane frees an op whose contributions stop, counts
it per op id (``xi.engine.expired``), the controller's notifier (:mod:`.notify`) reads that
memory and sends TIMEOUT to the op's requester (the ``xorinc:`` section's ``clients`` with a
``requester``), the client retries and then reports the switch's timeout.

* ``test_notifier_on_the_model``: the golden model's counts, the notifier's messages (one per
  op id whose count grew, to its client's address, ``seq`` the count), the baseline, op ids
  without a requester counted, the 32-bit wrap.
* ``test_dead_helper_gets_timeout_over_sockets``: real UDP sockets on loopback: RS(3, 2) on
  five ``netstor-server``\\ s, the client (:class:`.schemes.XorIncClient`), and between the
  helpers and the requester a switch around the golden model (the helpers' PARTs go to the
  requester's address, port 7450: that is the switch here, which runs the engine and its
  timeout scan on its own clock, as the core's scanner does). One helper is down: the
  client gets the switch's TIMEOUT (not its own timer), retries once with the next op id,
  gets a second TIMEOUT and reports both op ids; the op ids stay usable (freed, not retired):
  the next repair on the same op id is byte-exact against galois (stale partial sums would
  make it wrong).
"""
from __future__ import annotations

import select
import socket
import threading
import time

import numpy as np
import pytest

from netstor.agent.server import Server
from netstor.driver.tables import TableWriter, apply_writes
from netstor.model.dataplane import DataplaneModel, ipv4_header_checksum

from . import header as H
from .codec import ip_int
from .config import EXPIRED_MEMORY, model_writes, plan
from .notify import TimeoutNotifier
from .program import N_OPS, core_test_pipeline
from .schemes import SwitchTimeout, XorIncClient, XorIncError
from .test_agents import ref_encode, ref_repair

LOOP = "127.0.0.1"


def _recv_timeouts(s, n, wait=2.0):
    s.settimeout(wait)
    out = []
    for _ in range(n):
        raw, _ = s.recvfrom(4096)
        out.append(H.XiHeader.unpack(raw))
    return out


def test_config_requesters_and_refusals():
    sec = {"clients": {"a": [0, 3], "b": {"ops": [4, 5], "requester": "127.0.0.9:4000"}}}
    p = plan(sec)
    assert p.clients == {"a": (0, 3), "b": (4, 5)}
    assert p.op_requesters() == {4: ("127.0.0.9", 4000), 5: ("127.0.0.9", 4000)}
    for bad, msg in [({"b": {"ops": [4, 5], "requester": "127.0.0.9"}}, "ipv4:port"),
                     ({"b": {"ops": [4, 5], "requester": "x:1"}}, "ipv4:port"),
                     ({"b": {"ops": [4, 5], "requester": "1.2.3.4:0"}}, "out of range"),
                     ({"b": {"requester": "1.2.3.4:1"}}, "expected"),
                     ({"b": {"ops": [4, 5], "who": 1}}, "expected"),
                     ({"b": "x"}, "expected")]:
        with pytest.raises(ValueError, match=msg):
            plan({"clients": bad})


def test_notifier_on_the_model():
    pl = core_test_pipeline()
    m = DataplaneModel(pl, groups="list")
    words = m.memory(EXPIRED_MEMORY).words
    assert len(words) == N_OPS and m.memory(EXPIRED_MEMORY).width == 32
    words[9] = 5                                       # before the notifier: its baseline
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind((LOOP, 0))
    port = rx.getsockname()[1]
    p = plan({"clients": {"c0": {"ops": [8, 15], "requester": f"{LOOP}:{port}"},
                          "c1": [16, 20]}})
    with TimeoutNotifier(m.mem_read, p.op_requesters()) as n:
        assert n.poll() == []
        words[9] += 2
        words[12] = 1
        words[17] = 3                                  # c1 has no requester
        got = n.poll()
        assert got == [(9, 2, (LOOP, port)), (12, 1, (LOOP, port)), (17, 3, None)]
        msgs = _recv_timeouts(rx, 2)
        assert [(h.type, h.opid, h.seq, h.req_port) for h in msgs] == \
            [(H.T_TIMEOUT, 9, 7, port), (H.T_TIMEOUT, 12, 1, port)]
        assert msgs[0].req_addr == ip_int(LOOP)
        assert (n.sent, n.timeouts, n.unaddressed) == (2, 6, 3)
        assert n.poll() == []                          # nothing new: nothing sent
        words[12] = 0xFFFFFFFF
        n.poll()
        words[12] = 1                                  # wrapped: two more
        assert n.poll() == [(12, 2, (LOOP, port))]
    rx.close()
    with pytest.raises(ValueError, match="outside"):
        TimeoutNotifier(m.mem_read, {64: (LOOP, 1)})


# ---- the real-socket case -------------------------------------------------------------------
CLOCK_HZ = 250_000_000          # the switch's clock: meta.arrival ticks (a card's core clock)
TIMEOUT_S = 0.15


def _now():
    return (time.monotonic_ns() * CLOCK_HZ // 1_000_000_000) & 0xFFFFFFFF


class ModelSwitch:
    """The switch on the helpers' way to the requester: it owns the requester's address at UDP
    port 7450 (where the nodes send contributions), turns each datagram into the frame a
    switch port would receive (IPv4 source: the sender's), runs it through the golden model
    and sends each output frame's UDP payload to the frame's IPv4 destination and UDP port;
    between datagrams it runs the engine's timeout scan on its clock
    (:meth:`GFAccumulate.scan`, the core's scanner)."""

    def __init__(self, req, section):
        self.pl = core_test_pipeline()
        self.model = DataplaneModel(self.pl, groups="list")
        w = TableWriter(self.pl)
        writes = w.lpm_add("l3.routes", ip_int(req), 32, "route",
                           {"port": 0, "dmac": 0x020000000064, "smac": 0x0200000000FF})
        self.plan, cw = model_writes(self.pl, section, writer=w)
        apply_writes(self.model, writes + cw)
        self.engine = next(e for e in self.pl.elements if e.qualname == "xi.engine")
        self.lock = threading.Lock()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((req, H.XORINC_UDP_PORT))
        self.req = req
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def read(self, name, addr):
        with self.lock:
            return self.model.mem_read(name, addr)

    def counter(self, name):
        with self.lock:
            return self.model.counters()[name]

    def _frame(self, payload, src):
        udp_len = 8 + len(payload)
        ip = bytearray(b"\x45\x00" + (20 + udp_len).to_bytes(2, "big") + b"\0\0\0\0\x40\x11\0\0"
                       + ip_int(src[0]).to_bytes(4, "big") + ip_int(self.req).to_bytes(4, "big"))
        ip[10:12] = ipv4_header_checksum(bytes(ip)).to_bytes(2, "big")
        udp = (src[1].to_bytes(2, "big") + H.XORINC_UDP_PORT.to_bytes(2, "big")
               + udp_len.to_bytes(2, "big") + b"\0\0")
        return bytes(6) + bytes(6) + b"\x08\x00" + bytes(ip) + udp + payload

    def _run(self):
        while not self._stop.is_set():
            ready, _, _ = select.select([self.sock], [], [], 0.005)
            if ready:
                payload, src = self.sock.recvfrom(65535)
                with self.lock:
                    outs = self.model.process(self._frame(payload, src), 1, arrival=_now())
                for o in outs:
                    f = o.frame
                    dst = socket.inet_ntoa(f[30:34])
                    dport = int.from_bytes(f[36:38], "big")
                    self.sock.sendto(f[42:], (dst, dport))
            with self.lock:
                self.engine.scan(self.model, _now())

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self.thread.join()
        self.sock.close()


def test_dead_helper_gets_timeout_over_sockets(tmp_path):
    k, r, length, req = 3, 2, 3000, "127.0.0.21"
    servers = [Server(tmp_path / f"db{i}", bind=LOOP, port=0, server_id=i, sync=False,
                      workers=1, xorinc_port=0).start() for i in range(k + r)]
    nodes = [s.offload_address("xorinc") for s in servers]
    try:
        rng = np.random.default_rng(21)
        data = rng.integers(0, 256, (k, length), dtype=np.uint8)
        ref = ref_encode(data, r)
        # the client's own timer is long: a failure within it is the switch's TIMEOUT
        client = XorIncClient(nodes, k, r, code=1, opids=[6, 7], bind=(req, 0), timeout=10.0)
        client.write_stripe(5, data)
        section = {"nodes": {f"n{j}": {"ip": LOOP, "mac": 0x020000000001 + j, "port": 1}
                             for j in range(k + r)},
                   "codes": {1: {"k": k, "r": r, "nodes": [f"n{j}" for j in range(k + r)]}},
                   "clients": {"c0": {"ops": [4, 7], "requester": f"{req}:{client.port}"}},
                   "requesters": [f"{req}/32"],
                   "timeout": int(TIMEOUT_S * CLOCK_HZ)}
        with ModelSwitch(req, section) as sw, \
                TimeoutNotifier(sw.read, sw.plan.op_requesters()).start(0.02) as notifier:
            # all helpers up: NetRepair through the switch's engine
            res = client.repair_net(5, 3)
            assert res.data == ref[3].tobytes() == \
                ref_repair(ref, k, r, [0, 1, 2], 3).tobytes()
            assert res.extra["switch_timeouts"] == [] and sw.counter("xi.engine.done") >= 1
            # helper 1 is down: lost chunk 0's helpers are 1, 2, 3; 2 and 3's PARTs wait
            servers[1].stop()
            t0 = time.monotonic()
            with pytest.raises(SwitchTimeout, match=r"timed out op ids \[7, 6\] \(2 attempts"):
                client.repair_net(5, 0)
            took = time.monotonic() - t0
            assert took < 5.0, took               # the TIMEOUTs, not the client's 10 s timer
            assert client.switch_timeouts == [7, 6] and client.retired == []
            assert client.opids == [6, 7]         # freed by the switch: still usable
            assert [sw.read(EXPIRED_MEMORY, op) for op in range(N_OPS)] == \
                [int(op in (6, 7)) for op in range(N_OPS)]
            assert sw.counter("xi.engine.timeouts") == 2
            assert (notifier.sent, notifier.timeouts, notifier.unaddressed) == (2, 2, 0)
            # op 7's slots hold no stale sum: lost chunk 4 from 0, 1 (down), ... needs helper
            # 1 again, so repair chunk 1 (helpers 0, 2, 3) on the freed op ids 7 then 6
            for _ in range(2):
                res = client.repair_net(5, 1)
                assert res.data == ref[1].tobytes()
                assert res.extra["switch_timeouts"] == []
        client.close()
    finally:
        for s in servers:
            s.stop()


def test_client_without_switch_still_times_out_itself(tmp_path):
    """No switch on the path and no notifier: the client's own timer (unchanged), the op id
    retired (its slots may hold partial sums: nobody said they were freed)."""
    with Server(tmp_path / "db", bind=LOOP, port=0, sync=False, xorinc_port=0) as srv:
        node = srv.offload_address("xorinc")
        with XorIncClient([node, node, node], 2, 1, timeout=0.3, opids=[1, 2]) as c:
            c.write_stripe(1, [b"a" * 64, b"b" * 64])
            with pytest.raises(XorIncError, match="timed out") as ei:
                c.repair_net(1, 0)
            assert not isinstance(ei.value, SwitchTimeout)
            assert c.retired == [1] and c.opids == [2]
