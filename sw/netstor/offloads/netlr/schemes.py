"""NetLR's clients and the baselines' clients on the same agents, with the histories the
linearizability checker (:mod:`netstor.lincheck`) takes; and ``netstor-load``'s scheme
(:class:`NetLrLoad`, :data:`SCHEMES`: storage requests behind the NetLR header, for load and
latency, no histories).

Clients (one operation at a time each; ``read(key)`` returns the value or None when the key
holds nothing, ``write(key, value)`` returns once the write is acknowledged; both raise
:class:`LrTimeout` when every try timed out):

* :class:`NetLrClient` -- NetLR through the switch: requests go to the service address
  (``service``: any address routed through the switch, UDP port 7460) from UDP port 7460
  (replies come back to it; the switch recognises NetLR by the destination port);
  ``group``, ``slot`` and ``fp`` come from the key by the published rule (:func:`.header.group_of`,
  :func:`.header.slot_of`, :func:`.header.fingerprint` of :func:`.codec.key16`). A write is
  multicast by the switch to the group's live replicas and answered once all acked; a write
  whose slot is held by another object is dropped by the switch, so the client **retries
  after its timeout** (flag ``F_RETRY``, a new ``req``): the switch gives the retry a new seq.
* :class:`ChainClient` -- chain replication: writes to the head (the chain travels with the
  write), the tail acks; reads at the tail.
* :class:`HermesClient` -- Hermes-like: a write to one replica (its coordinator: random per
  write, the same for all its tries), reads at a random replica (served locally when the
  key is valid there, else after it turns valid).

**Retries and linearizability.** A write that timed out is sent again (a new try: a new
``req``, and for NetLR a new seq from the switch). A plain resend is not linearizable: if the
first try was applied (and read) and a later write of another client superseded it, the
resend would bring the old value back after the newer one. So every write carries an **op id**
(``u32``: client id in the top 8 bits, the client's operation counter below; the same in every
try, :func:`.codec.write_value`) and the replicas remember the last op ids of each object
(:meth:`.codec.ObjectStore.apply`): a try of an operation that was applied here before and
has since been superseded is not applied again, only acknowledged (``DONE``; CR passes it
down the chain as a no-op, Hermes answers once the key is valid). A write returns on the
acknowledgement of any of its tries. Reads may take the answer to any of their tries.

History: every client appends to a :class:`netstor.lincheck.Recorder` (call and return times on the
host's monotonic clock, which all network namespaces share): op, key, value; an operation
that never got an answer stays pending. Written values are unique (``c<client>.<n>``), so
:func:`netstor.lincheck.acked_writes_lost` can tell them apart.

:func:`run_workload` runs ``n`` client threads with a random read/write mix over a key set,
then reads every key once more (the final reads the lost-write count needs).
``python -m netstor.offloads.netlr.schemes --scheme netlr|cr|hermes ...`` does the same from
the command line (one process per client host in the test bed) and writes the history and
its counts as JSON.
"""
from __future__ import annotations

import argparse
import json
import queue
import random
import socket
import sys
import threading
import time

from netstor.agent.schemes import Scheme
from netstor.proto import Op

from .codec import (F_STORAGE, T_CR_ACK, T_CR_READ, T_CR_READ_REPLY, T_CR_WRITE, T_HM_READ,
                    T_HM_READ_REPLY, T_HM_WRITE, T_HM_WRITE_REPLY, NetLrCodec, Route, key16,
                    pack_host, pack_msg, unpack_host, unpack_msg, write_value)
from .header import (F_RETRY, NETLR_UDP_PORT, OP_READ, OP_READ_REPLY, OP_WRITE,
                     OP_WRITE_REPLY, LrHeader, fingerprint, group_of, slot_of)
from netstor.lincheck import Recorder

__all__ = ["SCHEMES", "NetLrLoad", "LrTimeout", "Endpoint", "NetLrClient", "ChainClient",
           "HermesClient", "CLIENTS", "run_workload", "final_read", "main"]


class LrTimeout(Exception):
    """Every try of an operation timed out."""


class Endpoint:
    """One UDP socket shared by clients (threads): a receiver thread hands each answer to the
    operation waiting for its ``req``. NetLR clients on one host share one (the switch knows
    NetLR packets by their UDP destination port, so every client receives on port 7460)."""

    def __init__(self, bind=("0.0.0.0", 0), *, host_ops=True):
        self.host_ops = host_ops
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 21)
        except OSError:
            pass
        self.sock.bind(bind)
        self.sock.settimeout(0.2)
        self.addr = self.sock.getsockname()[:2]
        self._waiting = {}          # req -> queue
        self._lock = threading.Lock()
        self._stop = False
        self.unmatched = 0
        self._t = threading.Thread(target=self._receiver, name="netlr-endpoint", daemon=True)
        self._t.start()

    def _receiver(self):
        while not self._stop:
            try:
                raw, _ = self.sock.recvfrom(65535)
            except socket.timeout:
                continue
            except OSError:
                if self._stop:
                    return
                continue
            try:
                if self.host_ops:
                    h, _, value, _ = unpack_host(raw)
                else:
                    h, _, value = unpack_msg(raw)
            except ValueError:
                continue
            with self._lock:
                q = self._waiting.get(h.req)
                if q is None:
                    self.unmatched += 1
            if q is not None:
                q.put((h, value))

    def register(self, req, q):
        with self._lock:
            self._waiting[req] = q

    def unregister(self, reqs):
        with self._lock:
            for r in reqs:
                self._waiting.pop(r, None)

    def sendto(self, payload, to):
        self.sock.sendto(payload, to)

    def close(self):
        self._stop = True
        self._t.join(1.0)
        self.sock.close()


class _Client:
    """Plumbing shared by the clients: an :class:`Endpoint` (its own, or one shared by the
    clients of a host: ``endpoint``), tries with fresh request ids (``client_id`` in the top
    8 bits of ``req``)."""
    scheme = ""
    host_ops = True              # host-to-host framing (u16 value length) on this scheme

    def __init__(self, *, client_id=0, bind=("0.0.0.0", 0), timeout=0.5, tries=20,
                 recorder=None, seed=None, endpoint=None):
        self.client_id = client_id
        self.timeout, self.tries = timeout, tries
        self.recorder = recorder
        self.rng = random.Random(seed)
        self._own = endpoint is None
        self.ep = endpoint or Endpoint(bind, host_ops=self.host_ops)
        self.addr = self.ep.addr
        self._req = (client_id & 0xFF) << 24
        self._ops = 0
        self.stats = {"reads": 0, "writes": 0, "tries": 0, "retries": 0, "timeouts": 0,
                      "stale_replies": 0}

    def close(self):
        if self._own:
            self.ep.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _next_req(self):
        self._req = (self._req & 0xFF000000) | ((self._req + 1) & 0x00FFFFFF)
        return self._req

    def _exchange(self, make, reply_op, *, latest_only):
        """Send tries (``make(req, retry) -> (payload, to)``) until an answer ``reply_op``
        to the latest try (``latest_only``) or to any try arrives; ``(header, value)``."""
        reqs = []
        q = queue.Queue()
        try:
            for attempt in range(self.tries):
                req = self._next_req()
                reqs.append(req)
                self.ep.register(req, q)
                payload, to = make(req, attempt > 0)
                self.stats["tries"] += 1
                if attempt:
                    self.stats["retries"] += 1
                self.ep.sendto(payload, to)
                end = time.monotonic() + self.timeout
                while True:
                    left = end - time.monotonic()
                    if left <= 0:
                        break
                    try:
                        h, value = q.get(timeout=left)
                    except queue.Empty:
                        break
                    if h.op != reply_op:
                        continue
                    if h.req == req or not latest_only:
                        return h, value
                    self.stats["stale_replies"] += 1
        finally:
            self.ep.unregister(reqs)
        self.stats["timeouts"] += 1
        raise LrTimeout(f"{self.scheme}: no answer after {self.tries} tries")

    def _record(self, op, key, value=None):
        if self.recorder is None:
            return None
        return self.recorder.call(self.client_id, op, _key_text(key), value)

    def read(self, key):
        token = self._record("read", key)
        h, value = self._read(key16(key))
        out = value.decode() if h.seq else None     # seq 0: the key holds nothing
        if token is not None:
            self.recorder.ret(token, out)
        self.stats["reads"] += 1
        return out

    def write(self, key, value: str):
        token = self._record("write", key, value)
        self._ops = (self._ops + 1) & 0xFFFFFF
        opid = (self.client_id & 0xFF) << 24 | self._ops
        self._write(key16(key), write_value(opid, value.encode()))
        if token is not None:
            self.recorder.ret(token)
        self.stats["writes"] += 1


def _key_text(key) -> str:
    return key16(key).rstrip(b"\0").hex()


class NetLrClient(_Client):
    """NetLR through the switch (module docstring): ``service`` = ``(ip, port)`` the requests
    are addressed to; ``n_groups``: the controller's published group count. The client must
    receive on UDP port 7460 (``bind``, or a shared :class:`Endpoint` there): the data plane
    takes a packet as NetLR by its UDP destination port, so replies to another port pass
    the switch as plain IPv4 and are not aggregated."""
    scheme = "netlr"
    host_ops = False

    def __init__(self, service, n_groups=1, **kw):
        super().__init__(**kw)
        self.service = (str(service[0]), int(service[1]))
        self.n_groups = n_groups

    def _head(self, op, key, req, retry):
        return LrHeader(op=op, flags=F_RETRY if retry else 0,
                        group=group_of(key, self.n_groups), slot=slot_of(key),
                        fp=fingerprint(key), seq=0, rid=0, nrep=0, req=req)

    def _read(self, key):
        return self._exchange(lambda req, retry: (pack_msg(self._head(OP_READ, key, req, retry),
                                                           key), self.service),
                              OP_READ_REPLY, latest_only=False)

    def _write(self, key, value):
        return self._exchange(lambda req, retry: (pack_msg(self._head(OP_WRITE, key, req,
                                                                      retry), key, value),
                                                  self.service),
                              OP_WRITE_REPLY, latest_only=False)


def _host_head(op, key, req, retry):
    return LrHeader(op=op, flags=F_RETRY if retry else 0, group=0, slot=slot_of(key),
                    fp=fingerprint(key), seq=0, rid=0, nrep=0, req=req)


class ChainClient(_Client):
    """Chain replication over ``nodes`` (``[(ip, port)]`` of the replicas' NetLR sockets,
    head first)."""
    scheme = "cr"

    def __init__(self, nodes, **kw):
        super().__init__(**kw)
        self.nodes = [(str(a), int(p)) for a, p in nodes]
        self.route = Route(self.addr, self.nodes, 0).pack()

    def _read(self, key):
        return self._exchange(lambda req, retry: (pack_host(_host_head(T_CR_READ, key, req,
                                                                       retry), key),
                                                  self.nodes[-1]),
                              T_CR_READ_REPLY, latest_only=False)

    def _write(self, key, value):
        return self._exchange(lambda req, retry: (pack_host(_host_head(T_CR_WRITE, key, req,
                                                                       retry), key, value,
                                                            self.route), self.nodes[0]),
                              T_CR_ACK, latest_only=False)


class HermesClient(_Client):
    """Hermes-like over ``nodes`` (``[(ip, port)]``, every replica): writes to a random
    coordinator (all tries of a write to it: one FIFO path), reads at a random replica (a
    retry picks again)."""
    scheme = "hermes"

    def __init__(self, nodes, **kw):
        super().__init__(**kw)
        self.nodes = [(str(a), int(p)) for a, p in nodes]

    def _read(self, key):
        return self._exchange(lambda req, retry: (pack_host(_host_head(T_HM_READ, key, req,
                                                                       retry), key),
                                                  self.rng.choice(self.nodes)),
                              T_HM_READ_REPLY, latest_only=False)

    def _write(self, key, value):
        pos = self.rng.randrange(len(self.nodes))     # every try to the same coordinator

        def make(req, retry):
            return (pack_host(_host_head(T_HM_WRITE, key, req, retry), key, value,
                              Route(self.addr, self.nodes, pos).pack()), self.nodes[pos])
        return self._exchange(make, T_HM_WRITE_REPLY, latest_only=False)


CLIENTS = {"netlr": NetLrClient, "cr": ChainClient, "hermes": HermesClient}


# ---- netstor-load ----------------------------------------------------------------------------
class NetLrLoad(Scheme):
    """``netstor-load --scheme netlr``: every request a NetLR READ (GET) or WRITE (PUT) in
    storage mode (:data:`.codec.F_STORAGE`: the netstor storage request behind the NetLR
    header) to the service address ``--target VIP[:7460]``, from local UDP port 7460 (the
    switch knows NetLR replies by it); ``group``/``slot``/``fp`` from the key's
    :func:`.codec.key16`. No retries: a write the switch drops (slot collision) or that does
    not commit counts as a timeout. The result's ``netlr`` section: replies per replica id
    (``by_rid``)."""
    name = "netlr"
    help = "NetLR reads/writes to the service address --target (the switch replicates)"
    codec = NetLrCodec()
    port = NETLR_UDP_PORT
    preload = False
    options = {"lr_groups": 1, "lr_bind_port": NETLR_UDP_PORT}

    def __init__(self, n_targets, rng, seed, **options):
        super().__init__(n_targets, rng, seed, **options)
        if not 1 <= self.lr_groups <= 0xFFFF:
            raise ValueError(f"lr_groups must be 1..65535, got {self.lr_groups!r}")
        self.by_rid = {}

    @property
    def bind_port(self):
        return self.lr_bind_port

    @classmethod
    def add_arguments(cls, p):
        p.add_argument("--lr-groups", type=int, default=1, metavar="N",
                       help="netlr: the published replica-group count (key -> group rule)")
        p.add_argument("--lr-bind-port", type=int, default=NETLR_UDP_PORT, metavar="PORT",
                       help=f"netlr: local UDP port (default {NETLR_UDP_PORT}: the switch "
                            "takes replies to it as NetLR packets)")

    def send(self, eng, op, key, value, now_ns):
        k = key16(key)
        if op not in (Op.GET, Op.PUT):
            raise ValueError(f"scheme netlr sends GET and PUT only, not {Op.name(op)}")
        head = LrHeader(op=OP_WRITE if op == Op.PUT else OP_READ, flags=F_STORAGE,
                        group=group_of(k, self.lr_groups), slot=slot_of(k),
                        fp=fingerprint(k), seq=0, rid=0, nrep=0, req=0).pack()
        eng.send(op, key, value, target=0, now_ns=now_ns, head=head)

    def record(self, c):
        if c.reply is not None and c.head is not None:
            self.by_rid[c.head.rid] = self.by_rid.get(c.head.rid, 0) + 1

    def result(self, replies, targets):
        return {"by_rid": {str(r): n for r, n in sorted(self.by_rid.items())}}

    def config(self):
        return {"lr_groups": self.lr_groups}


SCHEMES = {"netlr": NetLrLoad}


def run_workload(make_client, *, clients=2, ops=200, keys=8, write_ratio=0.3, seed=1,
                 recorder=None, client_base=0, final_reads=True, stop_at=None,
                 think_s=0.0, key_prefix="k"):
    """``clients`` threads, each with ``make_client(client_id, recorder)`` (ids
    ``client_base..``), ``ops`` operations each (reads and writes of keys ``k0..``, writes
    with ratio ``write_ratio``; ``stop_at``: a monotonic time to stop early), then one more
    read of every key (``final_reads``). Returns ``{"history", "ops", "stats", "errors"}``."""
    rec = recorder if recorder is not None else Recorder()
    key_names = [f"{key_prefix}{i}" for i in range(keys)]
    stats, errors = [], []
    lock = threading.Lock()

    def worker(cid):
        rng = random.Random(seed * 1000 + cid)
        try:
            with make_client(cid, rec) as c:
                n = 0
                for _ in range(ops):
                    if stop_at is not None and time.monotonic() >= stop_at:
                        break
                    key = rng.choice(key_names)
                    try:
                        if rng.random() < write_ratio:
                            n += 1
                            c.write(key, f"c{cid}.{n}")
                        else:
                            c.read(key)
                    except LrTimeout as e:
                        with lock:
                            errors.append(str(e))
                    if think_s:
                        time.sleep(rng.uniform(0, 2 * think_s))
                with lock:
                    stats.append(dict(c.stats, client=cid))
        except Exception as e:          # reported, the other clients go on
            with lock:
                errors.append(f"client {cid}: {type(e).__name__}: {e}")
    threads = [threading.Thread(target=worker, args=(client_base + i,), daemon=True)
               for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if final_reads:
        final_read(make_client, client_base + clients, rec, key_names, errors)
    hist = rec.history()
    return {"history": hist, "ops": len(hist), "stats": stats, "errors": errors}


def final_read(make_client, cid, rec, key_names, errors=None):
    """One read of every key (after the run went quiet): the reads that show which
    acknowledged writes survived."""
    with make_client(cid, rec) as c:
        for key in key_names:
            try:
                c.read(key)
            except LrTimeout as e:
                if errors is not None:
                    errors.append(f"final read {key}: {e}")


# ---- command line --------------------------------------------------------------------------
def _addr(text, default_port=NETLR_UDP_PORT):
    host, sep, port = text.rpartition(":")
    return (host, int(port)) if sep else (text, default_port)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.offloads.netlr.schemes",
                                 description="NetLR / CR / Hermes-like clients: a random "
                                             "read/write workload with its history")
    ap.add_argument("--scheme", choices=sorted(CLIENTS), required=True)
    ap.add_argument("--service", help="netlr: the address requests go to (IP[:PORT])")
    ap.add_argument("--groups", type=int, default=1, help="netlr: published group count")
    ap.add_argument("--nodes", help="cr/hermes: IP[:PORT],... (chain order for cr)")
    ap.add_argument("--bind", default="0.0.0.0")
    ap.add_argument("--port", type=int, default=NETLR_UDP_PORT,
                    help="netlr: the clients' UDP port (default 7460: the switch takes "
                         "replies to it as NetLR packets)")
    ap.add_argument("--clients", type=int, default=2, help="client threads")
    ap.add_argument("--client-base", type=int, default=0, help="first client id")
    ap.add_argument("--ops", type=int, default=200, help="operations per client")
    ap.add_argument("--duration", type=float, help="stop after this many seconds")
    ap.add_argument("--keys", type=int, default=8)
    ap.add_argument("--key-prefix", default="k", help="key names: PREFIX0, PREFIX1, ...")
    ap.add_argument("--write-ratio", type=float, default=0.3)
    ap.add_argument("--timeout", type=float, default=0.5, help="seconds per try")
    ap.add_argument("--tries", type=int, default=20)
    ap.add_argument("--think", type=float, default=0.0, help="mean pause between ops (s)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--final-reads", action="store_true",
                    help="read every key once at the end")
    ap.add_argument("--only-final-reads", action="store_true",
                    help="no workload: read every key once")
    ap.add_argument("--write-each", action="store_true",
                    help="no workload: write every key once (keys --key-base..)")
    ap.add_argument("--key-base", type=int, default=0, help="--write-each: first key")
    ap.add_argument("--out", required=True, help="JSON result file")
    a = ap.parse_args(argv)
    common = dict(bind=(a.bind, 0), timeout=a.timeout, tries=a.tries)
    if a.scheme == "netlr":
        if not a.service:
            ap.error("--scheme netlr needs --service")
        service = _addr(a.service)
        # one socket on UDP 7460 for every client thread: the switch knows NetLR packets
        # by their destination port, the replies' included
        shared = Endpoint((a.bind, a.port), host_ops=False)

        def make(cid, rec):
            return NetLrClient(service, a.groups, client_id=cid, recorder=rec, seed=cid,
                               endpoint=shared, **common)
    else:
        if not a.nodes:
            ap.error(f"--scheme {a.scheme} needs --nodes")
        nodes = [_addr(x) for x in a.nodes.split(",") if x]
        cls = CLIENTS[a.scheme]

        def make(cid, rec):
            return cls(nodes, client_id=cid, recorder=rec, seed=cid, **common)
    t0 = time.monotonic()
    if a.only_final_reads or a.write_each:
        rec, errors = Recorder(), []
        if a.write_each:
            with make(a.client_base, rec) as c:
                for i in range(a.key_base, a.key_base + a.keys):
                    try:
                        c.write(f"{a.key_prefix}{i}", f"c{a.client_base}.{i}")
                    except LrTimeout as e:
                        errors.append(str(e))
        else:
            final_read(make, a.client_base, rec, [f"{a.key_prefix}{i}" for i in range(a.keys)],
                       errors)
        res = {"history": rec.history(), "stats": [], "errors": errors}
    else:
        res = run_workload(make, clients=a.clients, ops=a.ops, keys=a.keys,
                           write_ratio=a.write_ratio, seed=a.seed, client_base=a.client_base,
                           final_reads=a.final_reads, think_s=a.think, key_prefix=a.key_prefix,
                           stop_at=t0 + a.duration if a.duration else None)
    if a.scheme == "netlr":
        shared.close()
    res.update(scheme=a.scheme, seconds=round(time.monotonic() - t0, 3), ops=len(res["history"]))
    with open(a.out, "w") as f:
        json.dump(res, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
