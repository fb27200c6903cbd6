"""NetRS: in-network replica selection (Su et al., IEEE TCC 2020), one device being both the
ToR switch and the RSNode (the paper's switch + network accelerator, with the selector as the
on-chip ranking core).

Recognised by UDP destination port ``NETRS_UDP_PORT`` (requests; clients send from the same
port, so responses are recognised too). Header (paper 5.1, :mod:`.header`; requests use the
first 15 bytes, then the storage message; responses all 26)::

     0                 2                                                 8
    +-----------------+-------------------------------------------------+
    |   RID (RSNode)  |                 MF (magic, 48)                  |
    +-----------------+-----------------+-----------------+-------------+
    |            RV (retain, 32)        | request: RGID = group (16), avail (8), ...
    |                                   | response: SM (source marker, 32)
    +-----------------+-----------------+-----------------+-------------+
    |   SSL (= 8)     | SS: server id   |  SS: queue (q)  | SS: service time (t, ns, 32)
    +-----------------+-----------------+-----------------+-------------+

Magic fields (48 bit): ``M_REQ`` request, ``M_RESP`` response, ``M_MON`` monitored response,
``M_DRS`` degraded; ``f(m) = m ^ 0xFFFFFFFFFFFF`` (invertible): a request leaves the RSNode
with ``MF = f(M_RESP)``, a DRS request with ``f(M_DRS)``; servers answer with ``f^-1(MF)``.

Per request, first pass: ``rs.tgroups`` (LPM on the client address) gives the traffic group
and the RSNode ID (``rsnode(rid, tg)``; rid ``0xFFFF`` = DRS: the request is relabelled
``f(M_DRS)`` and goes where the client sent it, its backup replica); ``rs.local`` (exact on
RID) says whether this device is that RSNode; if not, ``rs.forward`` (exact on RID ->
``forward(port, dmac, smac)``) sends the request on towards it unchanged (miss: dropped);
``rs.rgroups`` (exact on the group, 1,024 entries) gives up to 8 server ids (``SID_BITS`` =
10 bits each: ids 0..1,023, :mod:`.header`), the mask of the slots in use, the algorithm,
C3's n (8-bit code, ``ranking.n_code``), the group's time unit (code u: 1.024 us << u) and
EWMA weight (code w: 2^-w), and sets ``RV`` = the arrival time in 1.024 us ticks
(``arrival[31:8]``, 24 bits) | u << 24 | w << 28 (:mod:`.formats`); the state of the 8
candidates is read from 8 copies of the per-server state (banks ``rs.st0..7``, one per
candidate slot, 1,024 cells each indexed by the server id, cell = q | os | t | r: UQ12.4
EWMA queue length, outstanding requests, UQ12.4 EWMA service and response time in the unit
of the server's groups); the ranking core (``Rank``) picks one among the candidates the
RGID's availability bits allow; the request is recirculated with the chosen id in
``meta.bridge[9:0]`` (none available: dropped, counted in bank ``rs.noreplica``). Second
pass: every state copy counts one more outstanding request for the chosen server;
``rs.servers`` (exact on the 10-bit id, 1,024 entries) rewrites the destination;
``MF = f(M_RESP)``.

The ranking core's inputs besides the state: ``rr`` = a per-group pointer (bank ``rs.rr``,
1,024 cells at the group id's low 10 bits: groups whose ids agree there share a pointer)
that cycles through ``0 .. popcount(mask) - 1``, one step per selection (round robin over
the slots in use -- declare them from slot 0 up -- and the tie-break start of the other
algorithms); ``rnd`` (P2C) = CRC-32 of the client address and a per-device request count
(bank ``rs.seq``).

Per response (``M_RESP``, RID local, server id below ``SERVERS`` = 1,024; a larger id teaches
nothing): the samples, in the unit the RV names, saturated at 0xFFFF instead of wrapping: queue
length * 16; service time ``ss_t`` (ns) * 16 / unit; response time = (now - stamp) mod 2^24
ticks (exact up to the 32-bit cycle counter's 17.18 s) * 16 / 2^u. Every state copy of the
server (SS server id) gets ``os - 1`` and the EWMAs ``old + floor((sample - old) / 2^w)`` of
the three samples; bank ``rs.samples`` counts the response at cell ``sat`` (bit 0: q saturated,
bit 1: t, bit 2: r; the cells sum to the samples learnt from); the response is relabelled
``M_MON``. A ``M_DRS`` response is relabelled ``M_MON`` too. Both get this device's source
marker (register ``rs.marker``, cell 0) when they come from the server side (wire port
``SERVER_PORT``) unmarked (SM = 0: the server's own ToR marks, switches further on keep it). A
``M_RESP`` response for an RSNode that is not this device goes towards it by ``rs.forward`` too
(miss: routed by ``l3.routes``), so the RSNode sees every response of the requests it selected
for. Monitor: a ``M_MON`` response counts in bank ``rs.monitor`` at ``tg * 4 + class`` (class 0
same rack, 1 same pod, 2 other pod: source marker vs this device's; tg from ``rs.tgroups`` on
the destination).

Trust (:mod:`netstor.elements.trust`): responses (``M_RESP``, ``M_DRS``) and monitor packets
(``M_MON``) are reports, accepted only from the ports (and source prefixes) the
configuration names for ``rs``; requests (any other MF) from the request ports (default: any
port, once configured). An untrusted packet is dropped before it reads or writes any bank,
counted in ``rs.trust.miss``; the unconfigured data plane trusts nothing.

Units and comparability: the ranking core sees q, t, r as 16-bit UQ12.4 numbers; t and r
are in the unit of the group being ranked, and every replica of that group is a server whose
state is kept in that same unit (groups that share a server on one device must agree on unit
and weight, :mod:`.config` checks it), so ``R + q_hat^3 * T`` compares like with like within
a group. Scores of groups with different units are never compared.
"""
from netstor.elements import Compute, Hash, Rank, RegisterOp, Table
from netstor.elements.trust import guard
from netstor.lang import Program, Action, Set, Mux, Const, Cat, F

from .formats import STAMP_SHIFT, STAMP_BITS, UNIT_MAX, EWMA_MAX
from .ranking_core import XLS_RANKING

from .header import (NETRS_UDP_PORT, MASK48, M_REQ, M_RESP, M_MON, M_DRS, DRS_RID,  # noqa: F401
                     SID_BITS, SERVERS, NR, f, PROGRAM_VIEW as HEADER)

TGROUPS = 16
#: replica groups one device holds (``rs.rgroups``) and the round-robin pointers (``rs.rr``,
#: indexed by the group id's low ``GROUP_BITS`` bits: groups whose ids agree there share one)
GROUP_BITS = 10
GROUPS = 1 << GROUP_BITS
SERVER_PORT = 1              # the wire port the servers sit behind (source-marker rule)


def _by_code(code, options):
    """``options[code]``; a code beyond the list takes the last option."""
    v = options[-1]
    for k in reversed(range(len(options) - 1)):
        v = Mux(code == k, options[k], v)
    return v


def _sample(value, unit_slices):
    """UQ12.4 sample of ``value`` in the group's unit, saturated: ``unit_slices[u]`` =
    ``(bits of the sample, bits that must be zero)`` for unit code ``u``. Returns
    ``(per-code samples, per-code saturation flags)``."""
    samples, sats = [], []
    for lo, over in unit_slices:
        sat = (value[over:value.width] != 0) if over < value.width else Const(0, 1)
        hi = min(lo + 16, value.width)
        samples.append(Mux(sat, Const(0xFFFF, 16), value[lo:hi]))
        sats.append(sat)
    return samples, sats


def _ewma(old, sample, w, hold=None):
    """``old + floor((sample - old) / 2^w)`` on 16-bit UQ12.4 values (w = 0..7): the sample's
    weight is 2^-w. The difference is a 17-bit two's complement value, shifted
    arithmetically; the result lies between old and sample, so 16 bits hold it. ``hold``
    (optional condition): ``old`` instead (the step is zeroed before the add, so a register
    bank's update has no mux after its adder: one LUT level less in its one-cycle loop)."""
    d = (Cat(sample, Const(0, 1)) - Cat(old, Const(0, 1)))[0:17]
    sign = d[16]
    shifted = [d] + [Cat(d[k:17], Mux(sign, Const((1 << k) - 1, k), Const(0, k)))
                     for k in range(1, EWMA_MAX + 1)]
    step = _by_code(w, shifted)
    if hold is not None:
        step = Mux(hold, Const(0, 17), step)
    return (Cat(old, Const(0, 1)) + step)[0:16]


def make_netrs(n_ports=2, *, servers_size=SERVERS, groups_size=GROUPS):
    """The program; ``servers_size`` / ``groups_size``: entries of ``rs.servers`` /
    ``rs.rgroups`` (exact tables, 4 ways; default one per server id / per pointer of
    ``rs.rr``); smaller sizes make a smaller build (the ids stay 10 bits)."""
    p = Program("rs", udp_port=NETRS_UDP_PORT)
    h = p.header(HEADER)
    is_rs = p.meta("is_rs", 1)
    first = F.meta.recirc_count == 0
    kind = p.meta("kind", 2)            # 0 other, 1 request, 2 response, 3 DRS response
    local, ghit, tg = p.meta("local", 1), p.meta("ghit", 1), p.meta("tg", 4)
    algo, nmul, declared = p.meta("algo", 2), p.meta("n", 8), p.meta("declared", 8)
    s_q, s_t, s_r = p.meta("sq", 16), p.meta("st", 16), p.meta("sr", 16)
    wt, sat = p.meta("wt", 3), p.meta("sat", 3)
    sids = [p.meta(f"s{k}", SID_BITS) for k in range(NR)]
    cells = [p.meta(f"c{k}", 56) for k in range(NR)]
    found, idx, rnd = p.meta("found", 1), p.meta("idx", 3), p.meta("rnd", 16)
    chosen = p.meta("chosen", SID_BITS)
    mk = p.meta("marker", 32)
    mclass = p.meta("mclass", 2)

    # responses (M_RESP, M_DRS) and monitor packets (M_MON) report server state and feed
    # the monitor: trusted ports/sources only
    guard(p, reports=(h["mf"] == M_RESP) | (h["mf"] == M_DRS) | (h["mf"] == M_MON))
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
    # a response's samples in the unit its RV names (UQ12.4, saturated; see .formats): queue
    # length * 16; service time ss_t (ns) * 16 / unit; response time (now - stamp, in
    # 1.024 us ticks mod 2^24) * 16 / 2^unit
    unit, weight = h["rv"][24:28], h["rv"][28:31]
    # the response time in ticks, a step of its own ahead of the samples (it needs no `kind`,
    # so it shares an earlier stage): the subtraction's carry chain and the saturation /
    # unit selection after it are too deep for one cycle at 250 MHz
    ticks = p.meta("ticks", STAMP_BITS)
    p.add(Compute("ticks", [Set(ticks, F.meta.arrival[STAMP_SHIFT:STAMP_SHIFT + STAMP_BITS]
                                - h["rv"][0:STAMP_BITS])]))
    ticks16 = Cat(Const(0, 4), ticks)                     # ticks * 16, 28 bits
    r_opts, r_sats = _sample(ticks16, [(u, u + 16) for u in range(UNIT_MAX + 1)])
    # ss_t * 16 / (1024 << u) = ss_t >> (6 + u)
    t_opts, t_sats = _sample(h["ss_t"], [(6 + u, 22 + u) for u in range(UNIT_MAX + 1)])
    q_sat = h["ss_q"][12:16] != 0
    p.add(Compute("samples", [
        Set(s_q, Mux(q_sat, Const(0xFFFF, 16), Cat(Const(0, 4), h["ss_q"][0:12]))),
        Set(s_t, _by_code(unit, t_opts)), Set(s_r, _by_code(unit, r_opts)),
        Set(wt, weight),
        Set(sat, Cat(q_sat, _by_code(unit, t_sats), _by_code(unit, r_sats)))], when=resp))

    group = h["x"][16:32]
    avail_bits = h["x"][8:16]
    # the group: its servers, algorithm, C3's n (8-bit code), time unit and EWMA weight; RV =
    # the arrival stamp with the group's unit and weight (the response brings them back)
    replicas = Action("replicas", {"algo": 2, "n": 8, "mask": 8, "unit": 4, "ewma": 3,
                                   **{f"s{k}": SID_BITS for k in range(NR)}}, lambda a: [
        Set(ghit, 1), Set(algo, a.algo), Set(nmul, a.n), Set(declared, a.mask),
        Set(h["rv"], Cat(F.meta.arrival[STAMP_SHIFT:STAMP_SHIFT + STAMP_BITS], a.unit,
                         a.ewma, Const(0, 1))),
        *[Set(sids[k], getattr(a, f"s{k}")) for k in range(NR)]])
    p.add(Table("rgroups", kind="exact", key=[group], size=groups_size, ways=4,
                actions=[replicas],
                when=(kind == 1) & first & local))
    # P2C's random bits: a hash of the client and a per-device request count
    count = p.meta("count", 32)
    p.add(RegisterOp.add("seq", p.bank("seq", width=32, depth=1), 0, 1, result=count,
                         when=req1))
    p.add(Hash("rnd", rnd, [F.ipv4.src, count], when=req1))

    # per-server state, 8 copies (one per candidate slot): read for a selection, os + 1 on
    # the second pass, os - 1 and EWMAs on a response (a server id beyond the state: none)
    select = (kind == 1) & first & local & ghit
    upd = resp & local & (h["ss_sid"] < SERVERS)
    rsid = h["ss_sid"][0:SID_BITS]
    for k in range(NR):
        def update(old, k=k):
            q, os_, t, r = old[0:16], old[16:24], old[24:40], old[40:56]
            os_up = Mux(os_ == 0xFF, os_, os_ + 1)[0:8]
            os_dn = Mux(os_ == 0, os_, os_ - 1)[0:8]
            # the EWMAs keep q, t, r on the second pass (their step zeroed before the add)
            return Cat(_ewma(q, s_q, wt, pass2), Mux(pass2, os_up, os_dn),
                       _ewma(t, s_t, wt, pass2), _ewma(r, s_r, wt, pass2))
        p.add(RegisterOp(f"st{k}", p.bank(f"st{k}", width=56, depth=SERVERS),
                         index=Mux(pass2, F.meta.bridge[0:SID_BITS], Mux(upd, rsid, sids[k])),
                         update=update, write=pass2 | upd, result=cells[k], returns="old",
                         when=select | pass2 | upd))
    # the samples learnt from, by saturation pattern (bit 0 q, bit 1 t, bit 2 r)
    p.add(RegisterOp.add("count_samples", p.bank("samples", width=32, depth=8), sat, 1,
                         when=upd))
    # round-robin pointer (and tie-break start) per group: 0 .. (slots in use) - 1
    rr = p.meta("rr", 8)
    used = Const(0, 4)
    for k in range(NR):
        used = used + Cat(declared[k], Const(0, 3))
    p.add(RegisterOp("rr", p.bank("rr", width=8, depth=GROUPS), index=group[0:GROUP_BITS],
                     update=lambda old: Mux((old + 1)[0:8] >= used, Const(0, 8), old + 1),
                     result=rr, returns="old", when=select))
    p.add(Rank("select", core=XLS_RANKING, algo=algo, avail=avail_bits & declared, n=nmul, rr=rr[0:3], rnd=rnd,
               replicas=[(c[0:16], c[16:24], c[24:40], c[40:56]) for c in cells],
               found=found, index=idx, when=select))
    pick = sids[0]
    for k in range(1, NR):
        pick = Mux(idx == k, sids[k], pick)
    p.add(Compute("steer", [
        Set(chosen, pick), Set(F.meta.bridge, pick),
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
    p.add(Table("servers", kind="exact", key=[F.meta.bridge[0:SID_BITS]], size=servers_size,
                ways=4, actions=[server], when=pass2))
    p.add(Compute("relabel_req", [Set(h["mf"], f(M_RESP))], when=pass2))

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
