"""The ``xorinc:`` configuration section: erasure codes, stripe layout and the coefficient
tables the controller computes (``docs/xorinc.md``, "Configuration").

::

    xorinc:
      smac: "02:00:00:00:ff:01"          # the switch's MAC (source of the delta copies)
      nodes:                             # storage nodes: addresses and switch output port
        n0: {ip: 10.0.0.1, mac: "02:00:00:00:00:01", port: 1}
        ...
      codes:                             # code id (the header's ``code``) -> RS(k, r)
        1: {k: 5, r: 3, nodes: [n0, n1, n2, n3, n4, n5, n6, n7]}
      clients:                           # engine op-id ranges (inclusive), disjoint
        c0: [0, 31]                      # ... as a range, or with the client's address:
        c1: {ops: [32, 63], requester: "10.0.0.100:40000"}   # where TIMEOUTs go
      timeout: 0                         # engine timeout (cycles: ticks of meta.arrival; 0: never)
      requesters: [10.0.0.100/32]        # who may send UPD_NEW (IPv4 prefixes; default none)

Stripe layout: chunk ``j`` of every stripe of a code lives on ``nodes[j]`` (chunks ``0..k-1``
data, ``k..n-1`` parity; generator :func:`netstor.model.gf.generator`, ISA-L's Cauchy
``[I; C]``). The controller computes, per code:

* ``xi.repair`` ``(code, lost, src) -> coeff(a_s, need=k)`` for every lost chunk and every
  helper ``src`` of the **repair policy**: the helpers of lost chunk ``l`` are the first
  ``k`` chunk indexes other than ``l`` (:func:`helpers`); ``a = G[l] . inv(G[helpers])``
  (:func:`netstor.model.gf.decode_coefficients`);
* ``xi.groups`` ``(code, chunk) -> group`` for every data chunk: a copy list (model
  ``groups="list"``) of ``(port of nodes[chunk], 1 + chunk)`` then ``(port of nodes[k + i],
  1 + k + i)`` for each parity ``i``; groups are numbered from 1 in code then chunk order;
* ``xi.delta`` ``(code, chunk, rid) -> node(coeff, ip, mac, smac)``: the data node's copy
  coefficient 1, parity ``i``'s ``C[i][chunk]``;
* ``xi.trust`` (the program's trust guard): the contributions (PART, UPD_OLD, UPD_NEW: the
  packets that write engine state) only from the nodes' addresses and the ``requesters``
  prefixes (as the fewest prefixes covering exactly them), from any port; every other XORInc packet from any port
  (:func:`trust_entries`). A contribution from anywhere else is dropped, counted in
  ``xi.trust.miss``. Without ``requesters`` no client can update (NetRepair needs none:
  its contributions come from the nodes).

:func:`plan` computes it (pure); :func:`apply_section` writes it through a
:class:`netstor.api.Device` (the ``netstor apply`` path); :func:`model_writes` gives the
memory writes for a golden model of ``default_pipeline()`` directly (the
simulator and tests, which need no schema).

Requesters: a client given as ``{ops: [lo, hi], requester: "ip:port"}`` is told of its timed-out
operations: :meth:`Plan.op_requesters` maps each of its op ids to that address, which
:class:`.notify.TimeoutNotifier` sends the TIMEOUT to (the data plane keeps no requester per
op; the op-id range the controller gave the client is the mapping). A client given as a bare
range gets no TIMEOUT (its own timer only).
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from netstor.config import write_plan
from netstor.model import gf

from .program import TRUST_SIZE

__all__ = ["Code", "Plan", "plan", "helpers", "apply_section", "model_writes", "MAX_N",
           "K_RANGE", "R_RANGE", "TIMEOUT_MEMORY", "EXPIRED_MEMORY", "trust_entries"]

MAX_N = gf.SRC_MAX          #: chunks per stripe (src is 4 bits in the engine)
K_RANGE = range(1, 13)      #: data chunks offered (the issue: k 3..12)
R_RANGE = range(1, 5)       #: parity chunks offered (r 2..4)
TIMEOUT_MEMORY = "xi.engine.timeout"   #: the engine's timeout (cycles; 0: never)
EXPIRED_MEMORY = "xi.engine.expired"   #: per op id: the timeouts that freed it (wrapping)


@dataclass(frozen=True)
class Code:
    code: int
    k: int
    r: int
    nodes: tuple            # node name of chunk j

    @property
    def n(self):
        return self.k + self.r

    @property
    def generator(self):
        return gf.generator(self.k, self.r)


@dataclass
class Plan:
    codes: dict                                   # code id -> Code
    nodes: dict                                   # name -> {"ip": int, "mac": int, "port": int}
    entries: list = field(default_factory=list)   # (table, key list, action, params)
    groups: list = field(default_factory=list)    # (group, [(port, rid)])
    clients: dict = field(default_factory=dict)   # name -> (first op id, last op id)
    requesters: dict = field(default_factory=dict)  # name -> (ipv4 int, udp port)
    timeout: int = 0
    sources: list = field(default_factory=list)   # trusted contribution sources (addr, mask)

    def op_requesters(self):
        """``{op id: (ipv4 text, udp port)}``: where a TIMEOUT of each op id goes (the ops of
        the clients given with a ``requester``)."""
        out = {}
        for name, (ipa, port) in self.requesters.items():
            lo, hi = self.clients[name]
            for op in range(lo, hi + 1):
                out[op] = (str(ipaddress.IPv4Address(ipa)), port)
        return out

    def group_of(self, code, chunk):
        for t, key, _a, params in self.entries:
            if t == "xi.groups" and key == [code, chunk]:
                return params["group"]
        raise KeyError((code, chunk))


def helpers(n, k, lost):
    """The repair policy: the first ``k`` chunk indexes of ``0..n-1`` other than ``lost``."""
    if not 0 <= lost < n:
        raise ValueError(f"lost chunk {lost} out of range 0..{n - 1}")
    return [i for i in range(n) if i != lost][:k]


def _mac(v):
    if isinstance(v, int):
        return v
    return int(str(v).replace(":", "").replace("-", ""), 16)


def _ip(v):
    return v if isinstance(v, int) else int(ipaddress.IPv4Address(str(v)))


def _endpoint(v, what):
    """``"ip:port"`` -> ``(ipv4 int, port)``."""
    try:
        host, port = str(v).rsplit(":", 1)
        ipa, port = int(ipaddress.IPv4Address(host)), int(port)
    except ValueError:
        raise ValueError(f"xorinc: {what}: requester {v!r}: expected 'ipv4:port'") from None
    if not 0 < port < 1 << 16:
        raise ValueError(f"xorinc: {what}: requester port {port} out of range 1..65535")
    return ipa, port


def plan(value, *, n_ops=64, mcast_groups=4096):
    """The controller's computation for a ``xorinc:`` section (see the module doc)."""
    if not isinstance(value, dict):
        raise ValueError("xorinc: expected a mapping")
    unknown = set(value) - {"smac", "nodes", "codes", "clients", "timeout", "requesters"}
    if unknown:
        raise ValueError(f"xorinc: unknown key(s) {sorted(unknown)}")
    smac = _mac(value.get("smac", 0))
    nodes = {}
    for name, nd in (value.get("nodes") or {}).items():
        try:
            nodes[str(name)] = {"ip": _ip(nd["ip"]), "mac": _mac(nd["mac"]),
                                "port": int(nd["port"])}
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"xorinc: node {name}: {e}") from None
    codes = {}
    for cid, c in (value.get("codes") or {}).items():
        cid = int(cid)
        k, r = int(c["k"]), int(c["r"])
        if not 0 <= cid < 256:
            raise ValueError(f"xorinc: code id {cid} out of range 0..255")
        if k not in K_RANGE or r not in R_RANGE or k + r > MAX_N:
            raise ValueError(f"xorinc: code {cid}: RS({k}, {r}) not offered (k 1..12, r 1..4, "
                             f"k + r <= {MAX_N})")
        names = tuple(str(x) for x in c.get("nodes", ()))
        if len(names) != k + r:
            raise ValueError(f"xorinc: code {cid}: {len(names)} nodes for n = {k + r} chunks")
        missing = [x for x in names if x not in nodes]
        if missing:
            raise ValueError(f"xorinc: code {cid}: unknown node(s) {missing}")
        codes[cid] = Code(cid, k, r, names)
    clients, requesters = {}, {}
    taken = []
    for name, rng in (value.get("clients") or {}).items():
        if isinstance(rng, dict):
            extra = set(rng) - {"ops", "requester"}
            if extra or "ops" not in rng:
                raise ValueError(f"xorinc: client {name}: expected {{ops: [lo, hi], "
                                 f"requester: 'ip:port'}}, got keys {sorted(rng)}")
            if "requester" in rng:
                requesters[str(name)] = _endpoint(rng["requester"], f"client {name}")
            rng = rng["ops"]
        try:
            lo, hi = (int(x) for x in rng)
        except (TypeError, ValueError):
            raise ValueError(f"xorinc: client {name}: op ids {rng!r}: expected [lo, hi]") \
                from None
        if not 0 <= lo <= hi < n_ops:
            raise ValueError(f"xorinc: client {name}: op ids {lo}..{hi} outside 0..{n_ops - 1}")
        for other, (a, b) in taken:
            if lo <= b and a <= hi:
                raise ValueError(f"xorinc: client {name}: op ids {lo}..{hi} overlap {other}'s")
        taken.append((name, (lo, hi)))
        clients[str(name)] = (lo, hi)
    timeout = int(value.get("timeout", 0))
    if not 0 <= timeout < 1 << 32:
        raise ValueError(f"xorinc: timeout {timeout} out of range")
    nets = [ipaddress.IPv4Network(nd["ip"]) for nd in nodes.values()]
    for i, pre in enumerate(value.get("requesters") or ()):
        try:
            nets.append(ipaddress.IPv4Network(str(pre), strict=True))
        except ValueError as e:
            raise ValueError(f"xorinc: requesters[{i}]: {pre!r}: {e}") from None
    # the fewest prefixes that cover exactly these addresses (a flip-flop TCAM of 16 entries)
    sources = [(int(n.network_address), int(n.netmask))
               for n in ipaddress.collapse_addresses(nets)]
    if len(sources) + 1 > TRUST_SIZE:
        raise ValueError(f"xorinc: {len(sources)} trusted source prefixes (nodes and "
                         f"requesters) and the request entry do not fit xi.trust's "
                         f"{TRUST_SIZE} entries")
    out = Plan(codes, nodes, clients=clients, requesters=requesters, timeout=timeout,
               sources=sources)
    gid = 1
    for cid, c in sorted(codes.items()):
        g = c.generator
        for lost in range(c.n):
            hs = helpers(c.n, c.k, lost)
            a = gf.decode_coefficients(g, hs, lost)
            for s, coeff in zip(hs, a):
                out.entries.append(("xi.repair", [cid, lost, s], "coeff",
                                    {"coeff": int(coeff), "need": c.k}))
        cauchy = g[c.k:]
        for j in range(c.k):
            if gid >= mcast_groups:
                raise ValueError(f"xorinc: {gid} groups needed, the data plane has "
                                 f"{mcast_groups - 1}")
            targets = [(j, 1)] + [(c.k + i, int(cauchy[i][j])) for i in range(c.r)]
            copies = []
            for chunk, coeff in targets:
                nd = nodes[c.nodes[chunk]]
                copies.append((nd["port"], 1 + chunk))
                out.entries.append(("xi.delta", [cid, j, 1 + chunk], "node",
                                    {"coeff": coeff, "ip": nd["ip"], "mac": nd["mac"],
                                     "smac": smac}))
            out.entries.append(("xi.groups", [cid, j], "group", {"group": gid}))
            out.groups.append((gid, copies))
            gid += 1
    return out


def trust_entries(p):
    """``xi.trust``'s ``(value, mask)`` pairs for plan ``p`` (key ``[report, ingress port,
    ipv4.src]``; the format of :meth:`netstor.api.Device.trust_entries` with any port): a
    report entry per trusted source, then the request entry."""
    return ([([1, 0, a], [1, 0, mk]) for a, mk in p.sources]
            + [([0, 0, 0], [1, 0, 0])])


def _prefix(addr, mask):
    return f"{ipaddress.IPv4Address(addr)}/{bin(mask).count('1')}"


def apply_section(dev, value, dry_run=False):
    """The ``xorinc:`` section handler (inside :func:`netstor.config.apply_config`'s batch):
    the tables and groups, then the engine's timeout (memory ``xi.engine.timeout``, one
    word: the model's, and the core's control shadow's, which runs the timeout scanner)."""
    p = plan(value, mcast_groups=dev.schema.get("mcast_groups", 4096)
             if isinstance(getattr(dev, "schema", None), dict) else 4096)
    mems = {mm["name"] for mm in dev.schema.get("memories", ())} \
        if isinstance(getattr(dev, "schema", None), dict) else {TIMEOUT_MEMORY}
    if TIMEOUT_MEMORY not in mems and p.timeout:
        raise ValueError(f"xorinc: timeout {p.timeout}: this device has no {TIMEOUT_MEMORY}")
    if dry_run:
        return
    write_plan(dev, "xorinc", p.entries, p.groups, copies_are="delta copies")
    # reports (the contributions) from the sources only; no source: no report at all
    sources = [_prefix(a, mk) for a, mk in p.sources]
    dev.set_trust("xi", "any" if sources else [], sources=sources or None, request_ports="any")
    if TIMEOUT_MEMORY in mems:
        # a plain one-word memory (no table or bank view): the device's batched write
        dev._write([(TIMEOUT_MEMORY, 0, p.timeout)])


def model_writes(pipeline, value, *, writer=None):
    """``(plan, [(memory, address, word)])``: the writes that configure a golden model of
    ``pipeline`` (one holding the ``xi`` program) for the section ``value``. The groups are
    copy lists (the model must be built with ``groups="list"``)."""
    from netstor.driver.tables import TableWriter
    w = writer or TableWriter(pipeline)
    p = plan(value, mcast_groups=pipeline.mcast_groups)
    writes = []
    for table, key, action, params in p.entries:
        writes += w.exact_add(table, key, action, params)
    for g, copies in p.groups:
        writes += w.mcast_list_set(g, copies)
    for prio, (v, mk) in enumerate(trust_entries(p)):
        writes += w.ternary_add("xi.trust", v, mk, "trusted", {}, priority=prio)
    writes.append((TIMEOUT_MEMORY, 0, p.timeout))
    return p, writes
