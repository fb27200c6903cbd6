"""NetClone: dynamic request cloning in the data plane (Kim, SIGCOMM 2023).

Recognised by UDP destination port ``NETCLONE_UDP_PORT`` (run-time register
``parser.udp_port.nc``). Requests go from clients to a service address; replies come back from
servers to the client's NetClone port (clients send from ``NETCLONE_UDP_PORT``, so replies are
addressed to it). The 16-byte NetClone header follows the UDP header and precedes the storage
message (``netstor.proto``)::

     0        1        2                 4                                 8
    +--------+--------+-----------------+---------------------------------+
    |   op   | clone  |     group       |           seq (32)              |
    +--------+--------+-----------------+---------------------------------+
    |    server_id    |      load       |      fidx       |      rsvd     |
    +-----------------+-----------------+-----------------+---------------+

* ``op``: ``OP_REQ`` (client -> service) or ``OP_REPLY`` (server -> client).
* ``clone``: ``CLONE_NONE``, ``CLONE_ORIGINAL`` (this request was cloned; this is the copy to
  the first candidate), ``CLONE_COPY`` (the copy to the second candidate). Servers echo it.
* ``group``: the clone group (a pair of candidate servers), chosen by the client.
* ``seq``: request sequence number assigned by the data plane (register ``nc.seq``); servers
  echo it.
* ``server_id``: the server the data plane sent the request to; the server that answered.
* ``load``: in replies, the server's load (requests queued or in service); 0 means idle.
* ``fidx``: the response-filter slot, ``CRC-32(seq)`` assigned with ``seq``; servers echo it.

Per request (first pass): ``seq += 1`` -> ``nc.seq``; ``fidx``; table ``nc.groups`` (exact on
``group``) -> ``candidates(s1, s2, policy)`` (a miss drops the request: counted as the table's
miss counter); the loads of s1 and s2 from two copies of the per-server state (banks
``nc.load1``, ``nc.load2``, so one pass reads both). Both idle (load 0, ``s1 != s2``): the
request goes to s1 marked ``CLONE_ORIGINAL`` and a copy goes through recirculation, which on
its second pass is sent to s2 marked ``CLONE_COPY`` (s2 travels in ``meta.bridge``). Otherwise
one server: the less loaded (``policy`` 1; s1 on a tie) or a pseudo-random one (``policy`` 0,
bit 0 of ``fidx``). Table ``nc.servers`` (exact on the server id) -> ``server(ip, mac, smac,
port)`` rewrites the destination address, MACs and output port; a server id missing from
the table drops the request (the table's miss counter).

Trust (:mod:`netstor.elements.trust`): replies are reports, accepted only from the ports
(and source prefixes) the configuration names for ``nc``; requests from the request ports
(default: any port, once configured). An untrusted packet is dropped before it reads or
writes any bank, counted in ``nc.trust.miss``; the unconfigured data plane trusts nothing.

Per reply: both state copies get ``load[server_id] = load``. A reply of a cloned request
(``clone != 0``) checks filter bank ``nc.filter`` at ``fidx``: if it holds ``seq``, this is the
slower response: it is dropped (counted in bank ``nc.filtered``, cell 0) and the slot cleared;
otherwise the reply records ``seq`` there and passes (a slot whose partner never arrived is
simply overwritten by a later request; ``seq`` 0, reached only when the counter wraps, is never
filtered). Replies are then routed by ``l3.routes`` like any IPv4
packet (the L3 program routes NetClone packets too).
"""
from netstor.elements import Compute, Hash, RegisterOp, Table
from netstor.elements.trust import guard
from netstor.lang import Program, Action, Set, Mux, Const, F

from .header import (HEADER, NETCLONE_UDP_PORT, OP_REQ, OP_REPLY, CLONE_NONE,  # noqa: F401
                     CLONE_ORIGINAL, CLONE_COPY, POLICY_RANDOM, POLICY_LEAST_LOADED, SERVERS)

FILTER_SLOTS = 4096


def filter_update(old, seq):
    """The response filter's cell update: a reply finding its own ``seq`` clears the slot,
    any other reply records its ``seq`` (formal/props_register.py proves the filter drops at
    most one reply per recorded sequence number with this very expression)."""
    return Mux(old == seq, Const(0, old.width), seq)


def filter_drops(old, seq):
    """The reply is the slower one of its pair: its slot held its ``seq`` (0 is never a
    recorded sequence number: a reply with seq 0, which only exists after the 32-bit counter
    wraps, always passes)."""
    return (old == seq) & (seq != 0)


def make_netclone(n_ports=2):
    p = Program("nc", udp_port=NETCLONE_UDP_PORT)
    h = p.header(HEADER.fields)
    is_nc = p.meta("is_nc", 1)
    hit = p.meta("group_hit", 1)
    s1, s2, policy = p.meta("s1", 8), p.meta("s2", 8), p.meta("policy", 1)
    l1, l2 = p.meta("load1", 16), p.meta("load2", 16)
    target = p.meta("target", 8)
    srv_hit = p.meta("server_hit", 1)
    fold = p.meta("filter_old", 32)
    first = F.meta.recirc_count == 0
    is_copy = p.meta("is_copy", 1)
    # replies report server state (loads, the filter): trusted ports/sources only
    guard(p, reports=h["op"] == OP_REPLY)
    p.add(Compute("match", [Set(is_nc, p.selected)]))
    req = is_nc & (h["op"] == OP_REQ)
    rep = is_nc & (h["op"] == OP_REPLY)
    # decided once: later elements rewrite the clone field this is computed from
    p.add(Compute("copy_pass", [Set(is_copy, req & ~first & (h["clone"] == CLONE_ORIGINAL))]))
    copy_pass = is_copy

    # sequence number and filter slot of a new request
    p.add(RegisterOp.add("seq", p.bank("seq", width=32, depth=1), 0, 1, result=h["seq"],
                         when=req & first))
    p.add(Hash("fidx", h["fidx"], [h["seq"]], when=req & first))

    # candidate servers of the group
    candidates = Action("candidates", {"s1": 8, "s2": 8, "policy": 1}, lambda a: [
        Set(hit, 1), Set(s1, a.s1), Set(s2, a.s2), Set(policy, a.policy)])
    p.add(Table("groups", kind="exact", key=[h["group"]], size=64, ways=4,
                actions=[candidates], when=req & first))
    p.add(Compute("unknown_group", [Set(F.meta.drop, 1)], when=req & first & ~hit))

    # server state: two copies, written by every reply, read for the two candidates
    sid = h["server_id"][0:6]
    for name, cand, dst in (("load1", s1, l1), ("load2", s2, l2)):
        p.add(RegisterOp(name, p.bank(name, width=16, depth=SERVERS),
                         index=Mux(rep, sid, cand[0:6]),
                         update=lambda old: Mux(rep, h["load"], old), write=rep,
                         result=dst, returns="old", when=rep | (req & first & hit)))

    # the decision (first pass) and the copy's second pass
    both_idle = (l1 == 0) & (l2 == 0) & (s1 != s2)
    pick2 = Mux(policy == POLICY_LEAST_LOADED, l2 < l1, h["fidx"][0])
    p.add(Compute("decide", [
        Set(F.meta.clone, both_idle),
        Set(F.meta.bridge, Mux(both_idle, s2, Const(0, 8))),
        Set(h["clone"], Mux(both_idle, CLONE_ORIGINAL, CLONE_NONE)),
        Set(target, Mux(both_idle, s1, Mux(pick2, s2, s1))),
    ], when=req & first & hit))
    p.add(Compute("copy", [Set(target, F.meta.bridge[0:8]),
                           Set(h["clone"], CLONE_COPY)], when=copy_pass))
    p.add(Compute("stamp", [Set(h["server_id"], target)], when=req & (hit | copy_pass)))

    server = Action("server", {"ip": 32, "mac": 48, "smac": 48, "port": 4}, lambda a: [
        Set(srv_hit, 1), Set(F.ipv4.dst, a.ip), Set(F.eth.dst, a.mac), Set(F.eth.src, a.smac),
        Set(F.meta.egress_port, a.port)])
    p.add(Table("servers", kind="exact", key=[target], size=SERVERS, ways=4, actions=[server],
                when=req & (hit | copy_pass)))
    p.add(Compute("unknown_server", [Set(F.meta.drop, 1)],
                  when=req & (hit | copy_pass) & ~srv_hit))

    # response filter
    cloned_rep = rep & (h["clone"] != CLONE_NONE)
    p.add(RegisterOp("filter", p.bank("filter", width=32, depth=FILTER_SLOTS),
                     index=h["fidx"][0:12], update=lambda old: filter_update(old, h["seq"]),
                     result=fold, returns="old", when=cloned_rep))
    slower = cloned_rep & filter_drops(fold, h["seq"])
    p.add(Compute("drop_slower", [Set(F.meta.drop, 1)], when=slower))
    p.add(RegisterOp.add("count_filtered", p.bank("filtered", width=32, depth=1), 0, 1,
                         when=slower))
    return p
