"""NetRS: in-network replica selection (Su et al., IEEE TCC 2020), one device being both the
ToR switch and the RSNode (the paper's switch + network accelerator, with the selector as the
on-chip ranking core).

Recognised by UDP destination port ``NETRS_UDP_PORT`` (requests; clients send from the same
port, so responses are recognised too). Header (paper 5.1; requests use the first 13 bytes,
then the storage message; responses the first 22)::

     0                 2                                                 8
    +-----------------+-------------------------------------------------+
    |   RID (RSNode)  |                 MF (magic, 48)                  |
    +-----------------+-----------------+-----------------+-------------+
    |   RV (retain)   | request: RGID = group (16) | avail (8) | ...    |
    |                 | response: SM (source marker, 32)                |
    +-----------------+-----------------+-----------------+-------------+
    |   SSL (= 6)     | SS: server id   |  SS: queue (q)  | SS: svc (t) |
    +-----------------+-----------------+-----------------+-------------+

Magic fields (48 bit): ``M_REQ`` request, ``M_RESP`` response, ``M_MON`` monitored response,
``M_DRS`` degraded; ``f(m) = m ^ 0xFFFFFFFFFFFF`` (invertible): a request leaves the RSNode
with ``MF = f(M_RESP)``, a DRS request with ``f(M_DRS)``; servers answer with ``f^-1(MF)``.

Per request, first pass: ``rs.tgroups`` (LPM on the client address) gives the traffic group
and the RSNode ID (``rsnode(rid, tg)``; rid ``0xFFFF`` = DRS: the request is relabelled
``f(M_DRS)`` and goes where the client sent it, its backup replica); ``rs.local`` (exact on
RID) says whether this device is that RSNode; if not, ``rs.forward`` (exact on RID ->
``forward(port, dmac, smac)``) sends the request on towards it unchanged (miss: dropped);
``rs.rgroups`` (exact on the group) gives up to 8 server ids, the mask of the slots in use,
the algorithm and C3's n; the state of the 8 candidates is read from 8 copies of the
per-server state (banks ``rs.st0..7``, one per candidate slot, cell = q | os | t | r:
UQ12.4 EWMA queue length, outstanding requests, UQ12.4 EWMA service and response time in us);
the ranking core (``Rank``) picks one among the candidates the RGID's availability bits allow;
the request is recirculated with the chosen id in ``meta.bridge`` (none available: dropped,
counted in bank ``rs.noreplica``). Second pass: every state copy counts one more outstanding
request for the chosen server; ``rs.servers`` rewrites the destination; ``MF = f(M_RESP)``,
``RV`` = the request's arrival time at the first pass, in units of 256 cycles (1.024 us at
250 MHz; carried in ``meta.bridge`` with the chosen id).

The ranking core's inputs besides the state: ``rr`` = a per-group pointer (bank ``rs.rr``)
that cycles through ``0 .. popcount(mask) - 1``, one step per selection (round robin over the
slots in use -- declare them from slot 0 up -- and the tie-break start of the other
algorithms); ``rnd`` (P2C) = CRC-32 of the client address and a per-device request count
(bank ``rs.seq``).

Per response (``M_RESP``, RID local): every state copy of the server (SS server id) gets
``os - 1`` and EWMAs (weight 1/8) of the reported queue length, the reported service time and
the response time (now - RV); the response is relabelled ``M_MON``. A ``M_DRS`` response is
relabelled ``M_MON`` too. Both get this device's source marker (register ``rs.marker``, cell
0) when they come from the server side (wire port ``SERVER_PORT``) unmarked (SM = 0: the
server's own ToR marks, switches further on keep it). A ``M_RESP`` response for an RSNode
that is not this device goes towards it by ``rs.forward`` too (miss: routed by ``l3.routes``),
so the RSNode sees every response of the requests it selected for. Monitor: a ``M_MON``
response counts in bank ``rs.monitor`` at ``tg * 4 + class``
(class 0 same rack, 1 same pod, 2 other pod: source marker vs this device's; tg from
``rs.tgroups`` on the destination).
"""
from netstor.elements import Compute, Hash, Rank, RegisterOp, Table
from netstor.lang import Program, Action, Set, Mux, Const, Cat, F

from .ranking_core import XLS_RANKING

from .header import (NETRS_UDP_PORT, MASK48, M_REQ, M_RESP, M_MON, M_DRS, DRS_RID,  # noqa: F401
                     SERVERS, NR, f, PROGRAM_VIEW as HEADER)

TGROUPS = 16
SERVER_PORT = 1              # the wire port the servers sit behind (source-marker rule)


def _sat16(e):
    """``e`` (wider) saturated to 16 bits."""
    return Mux(e > 0xFFFF, Const(0xFFFF, 16), e[0:16])


def _ewma(old, sample):
    """(7 * old + sample) / 8 on 16-bit UQ12.4 values (computed in 20 bits: no overflow)."""
    o = Cat(old, Const(0, 4))
    return (((o << 3) - o) + Cat(sample, Const(0, 4)))[3:19]


def make_netrs(n_ports=2):
    p = Program("rs", udp_port=NETRS_UDP_PORT)
    h = p.header(HEADER)
    is_rs = p.meta("is_rs", 1)
    first = F.meta.recirc_count == 0
    kind = p.meta("kind", 2)            # 0 other, 1 request, 2 response, 3 DRS response
    local, ghit, tg = p.meta("local", 1), p.meta("ghit", 1), p.meta("tg", 4)
    algo, nmul, declared = p.meta("algo", 2), p.meta("n", 8), p.meta("declared", 8)
    sids = [p.meta(f"s{k}", 8) for k in range(NR)]
    cells = [p.meta(f"c{k}", 56) for k in range(NR)]
    found, idx, rnd = p.meta("found", 1), p.meta("idx", 3), p.meta("rnd", 16)
    chosen = p.meta("chosen", 8)
    mk = p.meta("marker", 32)
    mclass = p.meta("mclass", 2)

    p.add(Compute("match", [
        Set(is_rs, p.selected),
        Set(kind, Mux(p.selected & (h["mf"] == M_REQ), 1,
                      Mux(p.selected & (h["mf"] == M_RESP), 2,
                          Mux(p.selected & (h["mf"] == M_DRS), 3, 0)))),
    ]))
    req1 = (kind == 1) & first
    pass2 = is_rs & ~first & (h["mf"] == M_REQ)
    resp = kind == 2
    any_resp = (kind == 2) | (kind == 3)
    mon = is_rs & (h["mf"] == M_MON)

    # ToR rules: traffic group (by client address) and RSNode ID
    rsnode = Action("rsnode", {"rid": 16, "tg": 4}, lambda a: [
        Set(h["rid"], Mux(req1, a.rid, h["rid"])), Set(tg, a.tg)])
    p.add(Table("tgroups", kind="lpm", key=[Mux(req1, F.ipv4.src, F.ipv4.dst)], size=32,
                actions=[rsnode], when=req1 | mon | any_resp))
    p.add(Compute("drs", [Set(h["mf"], f(M_DRS)), Set(kind, 0)],
                  when=req1 & (h["rid"] == DRS_RID)))
    p.add(Table("local", kind="exact", key=[h["rid"]], size=16, ways=2,
                actions=[Action("local", {}, lambda a: [Set(local, 1)])],
                when=((kind == 1) & first) | resp))
    group = h["x"][16:32]
    avail_bits = h["x"][8:16]
    replicas = Action("replicas", {"algo": 2, "n": 8, "mask": 8,
                                   **{f"s{k}": 8 for k in range(NR)}}, lambda a: [
        Set(ghit, 1), Set(algo, a.algo), Set(nmul, a.n), Set(declared, a.mask),
        *[Set(sids[k], getattr(a, f"s{k}")) for k in range(NR)]])
    p.add(Table("rgroups", kind="exact", key=[group], size=64, ways=4, actions=[replicas],
                when=(kind == 1) & first & local))
    # P2C's random bits: a hash of the client and a per-device request count
    count = p.meta("count", 32)
    p.add(RegisterOp.add("seq", p.bank("seq", width=32, depth=1), 0, 1, result=count,
                         when=req1))
    p.add(Hash("rnd", rnd, [F.ipv4.src, count], when=req1))

    # per-server state, 8 copies (one per candidate slot): read for a selection, os + 1 on
    # the second pass, os - 1 and EWMAs on a response
    select = (kind == 1) & first & local & ghit
    upd = resp & local
    rsid = h["ss_sid"][0:6]
    rt_sample = _sat16(Cat(Const(0, 4), (F.meta.arrival[8:24] - h["rv"])[0:16]))
    for k in range(NR):
        def update(old, k=k):
            q, os_, t, r = old[0:16], old[16:24], old[24:40], old[40:56]
            os_up = Mux(os_ == 0xFF, os_, os_ + 1)[0:8]
            os_dn = Mux(os_ == 0, os_, os_ - 1)[0:8]
            q_new = _ewma(q, _sat16(Cat(Const(0, 4), h["ss_q"])))
            return Mux(pass2, Cat(q, os_up, t, r),
                       Cat(q_new, os_dn, _ewma(t, h["ss_t"]), _ewma(r, rt_sample)))
        p.add(RegisterOp(f"st{k}", p.bank(f"st{k}", width=56, depth=SERVERS),
                         index=Mux(pass2, F.meta.bridge[0:6], Mux(upd, rsid, sids[k][0:6])),
                         update=update, write=pass2 | upd, result=cells[k], returns="old",
                         when=select | pass2 | upd))
    # round-robin pointer (and tie-break start) per group: 0 .. (slots in use) - 1
    rr = p.meta("rr", 8)
    used = Const(0, 4)
    for k in range(NR):
        used = used + Cat(declared[k], Const(0, 3))
    p.add(RegisterOp("rr", p.bank("rr", width=8, depth=64), index=group[0:6],
                     update=lambda old: Mux((old + 1)[0:8] >= used, Const(0, 8), old + 1),
                     result=rr, returns="old", when=select))
    p.add(Rank("select", core=XLS_RANKING, algo=algo, avail=avail_bits & declared, n=nmul, rr=rr[0:3], rnd=rnd,
               replicas=[(c[0:16], c[16:24], c[24:40], c[40:56]) for c in cells],
               found=found, index=idx, when=select))
    pick = sids[0]
    for k in range(1, NR):
        pick = Mux(idx == k, sids[k], pick)
    p.add(Compute("steer", [
        Set(chosen, pick), Set(F.meta.bridge, Cat(pick, F.meta.arrival[8:24])),
        Set(F.meta.recirc, found),
        Set(F.meta.drop, ~found)], when=select))
    p.add(RegisterOp.add("count_noreplica", p.bank("noreplica", width=32, depth=1), 0, 1,
                         when=select & ~found))
    # a request whose RSNode is another device goes towards it (the paper's RID forwarding)
    fwd_hit = p.meta("fwd", 1)
    forward = Action("forward", {"port": 4, "dmac": 48, "smac": 48}, lambda a: [
        Set(fwd_hit, 1), Set(F.eth.dst, a.dmac), Set(F.eth.src, a.smac),
        Set(F.meta.egress_port, a.port)])
    p.add(Table("forward", kind="exact", key=[h["rid"]], size=16, ways=2, actions=[forward],
                when=(((kind == 1) & first) | resp) & ~local & (h["rid"] != DRS_RID)))
    p.add(Compute("unrouted", [Set(F.meta.drop, 1)],
                  when=(kind == 1) & first & ((local & ~ghit) | (~local & ~fwd_hit))
                  & (h["rid"] != DRS_RID)))

    # second pass: to the chosen server
    server = Action("server", {"ip": 32, "mac": 48, "smac": 48, "port": 4}, lambda a: [
        Set(F.ipv4.dst, a.ip), Set(F.eth.dst, a.mac), Set(F.eth.src, a.smac),
        Set(F.meta.egress_port, a.port)])
    p.add(Table("servers", kind="exact", key=[F.meta.bridge[0:8]], size=SERVERS, ways=4,
                actions=[server], when=pass2))
    p.add(Compute("relabel_req", [Set(h["mf"], f(M_RESP)),
                                  Set(h["rv"], F.meta.bridge[8:24])], when=pass2))

    # responses: source marker from the server side, relabel for the monitor
    p.add(RegisterOp.read("marker", p.bank("marker", width=32, depth=1), 0, result=mk,
                          when=any_resp | mon))
    p.add(Compute("mark", [Set(h["x"], mk)],
                  when=any_resp & (F.meta.ingress_port == SERVER_PORT) & (h["x"] == 0)))
    p.add(Compute("relabel_resp", [Set(h["mf"], M_MON)], when=(resp & local) | (kind == 3)))
    # monitor: responses leaving towards clients (after relabelling: `mon` reads the PHV now)
    sm = h["x"]
    p.add(Compute("classify", [Set(mclass, Mux(sm == mk, 0, Mux(sm[16:32] == mk[16:32], 1, 2)))],
                  when=mon))
    p.add(RegisterOp.add("monitor", p.bank("monitor", width=32, depth=TGROUPS * 4),
                         Cat(mclass, tg), 1, when=mon))
    return p
