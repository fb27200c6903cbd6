"""NetRS's load-generator schemes: ``netrs`` (NetRS requests to a per-client backup replica of
the key's replica group; the switch selects) and the client-side baseline ``c3`` (C3 at the
client, on its own EWMA view of the servers, with the ranking reference).
* ``netrs`` and ``c3``: replica selection. Replica groups are sets of target indexes
  (``--replica-groups "0,1,2;1,2,3;..."``, default: ``n`` groups of 3 consecutive targets on
  a ring, ``g -> (g, g+1, g+2) mod n``, the replication factor 3 of consistent hashing); a
  request for key ``k`` belongs to group ``k mod (number of groups)``.

  ``netrs``: the request goes as a NetRS request (``M_REQ``, RGID = the group, every slot
  available) to the NetRS port (7432) of the group's *backup replica*: one replica of each
  group drawn per client at start (seeded), where a DRS request ends up. The engine binds
  ``--rs-bind-port`` (default 7432: NetRS is recognised by that port both ways). The switch
  selects; the result gets ``netrs``: replies selected by the switch (``selected``: response
  relabelled ``M_MON`` and RID not the DRS one), DRS replies, replies with no NetRS header,
  replies from a server other than the backup (``redirected``).

  ``c3``: client-side C3 (the NetRS paper's CliRS baseline): the client ranks the group's
  replicas with the C3 reference (:func:`netstor.offloads.netrs.ranking.rank`, the switch's ranking
  bit for bit) on its own state, and sends a plain storage request to the winner. Its state
  per server, in the switch's formats (:mod:`.formats`): UQ12.4 in a time unit
  (``--c3-time-unit-us``, default 65.536 us, as a replica group's default in the switch),
  EWMAs of weight ``--c3-ewma`` (default 1/8); queue length from the replies'
  ``queue_len`` turned into the switch's measure (requests a new one would wait behind:
  ``queue_len - c3_workers``, at least 0; ``--c3-workers`` = the servers' workers), service
  time from ``service_ns``, response time as measured here (send to reply, ns), all
  saturated (not wrapped) at 0xFFFF units; and its own outstanding requests (C3's ``os``,
  multiplied by ``--c3-n``, the number of independent selectors = clients, up to 31744, as
  the core's 8-bit code: exact up to 127, within 3.1 % above). The result gets ``c3``:
  selections per target and the share of samples that saturated. ``--c3-selectors K`` (default 1) runs K independent C3 selectors in this one
  process, as K clients on one host would: each request goes to one of them drawn uniformly
  (each a Poisson source at ``rate / K``), and each keeps its own state and learns only from
  the replies to its own requests (the test bed's way to many selectors on few CPUs).
"""
from __future__ import annotations

import random

from netstor.agent.schemes import Scheme

from .codec import NetRSCodec
from .formats import (DEFAULT_EWMA, DEFAULT_UNIT, ewma, ewma_shift, ewma_weight, ns_sample,
                      q_sample, saturation_shares, unit_code, unit_us, SAT_Q, SAT_R, SAT_T)
from .header import DRS_RID, M_MON, NETRS_UDP_PORT, RsRequest
from .ranking import C3, N_MAX, Replica, n_code, n_value, rank

__all__ = ["SCHEMES", "parse_replica_groups", "RS_MAX_REPLICAS"]

RS_MAX_REPLICAS = 8


def parse_replica_groups(spec, n_targets):
    """``"0,1,2;1,2,3"`` or ``[[0, 1, 2], ...]`` (target indexes) -> list of tuples; None =
    ``n_targets`` groups of 3 consecutive targets on a ring (fewer when there are fewer
    targets)."""
    if spec is None:
        k = min(3, n_targets)
        groups = [tuple((g + i) % n_targets for i in range(k)) for g in range(n_targets)]
    elif isinstance(spec, str):
        try:
            groups = [tuple(int(x) for x in part.split(",") if x.strip())
                      for part in spec.split(";") if part.strip()]
        except ValueError:
            raise ValueError(f"bad replica groups {spec!r}") from None
    else:
        groups = [tuple(int(x) for x in g) for g in spec]
    if not groups or any(not 1 <= len(g) <= RS_MAX_REPLICAS or len(set(g)) != len(g)
                         or not all(0 <= x < n_targets for x in g) for g in groups):
        raise ValueError(f"bad replica groups {spec!r} for {n_targets} target(s) (1..8 "
                         "distinct target indexes each)")
    if len(groups) > 0x10000:
        raise ValueError("more than 65536 replica groups")
    return groups


class _Replicas(Scheme):
    """Replica groups (key k belongs to group k mod #groups) and each group's backup replica
    (drawn per client from ``seed + 2``)."""
    preload = False
    options = {"replica_groups": None, "c3_n": 1, "c3_workers": 1, "c3_selectors": 1,
               "c3_time_unit_us": unit_us(DEFAULT_UNIT), "c3_ewma": ewma_weight(DEFAULT_EWMA)}

    def __init__(self, n_targets, rng, seed, **options):
        super().__init__(n_targets, rng, seed, **options)
        if not (isinstance(self.c3_n, int) and not isinstance(self.c3_n, bool)
                and 0 <= self.c3_n <= N_MAX):
            raise ValueError(f"c3_n must be an integer in 0..{N_MAX}, got {self.c3_n!r}")
        self.n_code = n_code(self.c3_n)
        try:
            self.unit = unit_code(self.c3_time_unit_us)
        except ValueError as e:
            raise ValueError(f"c3_time_unit_us: {e}") from None
        try:
            self.ewma_w = ewma_shift(self.c3_ewma)
        except ValueError as e:
            raise ValueError(f"c3_ewma: {e}") from None
        if not (isinstance(self.c3_workers, int) and self.c3_workers >= 1):
            raise ValueError(f"c3_workers must be an integer >= 1, got {self.c3_workers!r}")
        if not (isinstance(self.c3_selectors, int) and self.c3_selectors >= 1):
            raise ValueError(f"c3_selectors must be an integer >= 1, got "
                             f"{self.c3_selectors!r}")
        self.rgroups = parse_replica_groups(self.replica_groups, n_targets)
        brng = random.Random(None if seed is None else seed + 2)
        self.backup = [brng.choice(g) for g in self.rgroups]

    @classmethod
    def add_arguments(cls, p):
        if any("--replica-groups" in a.option_strings for a in p._actions):
            return
        p.add_argument("--replica-groups", default=None, metavar="I,J,K[;...]",
                       help="netrs/c3: replica groups as target indexes (default: n groups "
                            "of 3 consecutive targets on a ring); key k belongs to group k "
                            "mod #groups")
        p.add_argument("--rs-bind-port", type=int, default=NETRS_UDP_PORT, metavar="PORT",
                       help=f"netrs: local UDP port (default {NETRS_UDP_PORT}: NetRS is "
                            "recognised by it both ways)")
        p.add_argument("--c3-n", type=int, default=1, metavar="N",
                       help="c3: C3's multiplier of the outstanding requests (the number of "
                            "independent selectors, i.e. clients; default 1)")
        p.add_argument("--c3-workers", type=int, default=1, metavar="W",
                       help="c3: the servers' workers (queue_len - W = the queue a new "
                            "request waits in, the switch's measure; default 1)")
        p.add_argument("--c3-selectors", type=int, default=1, metavar="K",
                       help="c3: independent C3 selectors in this process (clients sharing "
                            "the host; each request drawn to one uniformly; default 1)")
        p.add_argument("--c3-time-unit-us", default=unit_us(DEFAULT_UNIT), metavar="US",
                       help="c3: time unit of the state (1.024 us * 2^u, u = 0..12; default "
                            f"{unit_us(DEFAULT_UNIT):g}: saturates at 4095.94 units)")
        p.add_argument("--c3-ewma", default=ewma_weight(DEFAULT_EWMA), metavar="W",
                       help="c3: EWMA weight of a new sample, 2^-w (e.g. 1/8, the default)")

    def config(self):
        return {"replica_groups": [list(g) for g in self.rgroups]}


class NetRS(_Replicas):
    name = "netrs"
    help = "NetRS requests to a backup replica; the switch selects"
    codec = NetRSCodec()
    port = NETRS_UDP_PORT
    options = dict(_Replicas.options, rs_bind_port=NETRS_UDP_PORT)

    def __init__(self, n_targets, rng, seed, **options):
        super().__init__(n_targets, rng, seed, **options)
        self.count = {"selected": 0, "drs": 0, "plain": 0, "other": 0, "redirected": 0}
        self.targets = None

    @property
    def bind_port(self):
        return self.rs_bind_port

    def send(self, eng, op, key, value, now_ns):
        self.targets = eng.targets
        g = key % len(self.rgroups)
        head = RsRequest(rgid=g, avail=(1 << len(self.rgroups[g])) - 1).pack()
        eng.send(op, key, value, target=self.backup[g], now_ns=now_ns, head=head,
                 tag=self.backup[g])

    def record(self, c):
        if c.reply is None:
            return
        h = c.head
        if h is None:
            self.count["plain"] += 1
        elif h.rid == DRS_RID:
            self.count["drs"] += 1
        elif h.mf == M_MON:
            self.count["selected"] += 1
        else:
            self.count["other"] += 1
        if c.src is not None and tuple(c.src[:2]) != tuple(self.targets[c.tag]):
            self.count["redirected"] += 1

    @classmethod
    def note(cls, r):
        rs = r.get("netrs") or {}
        return f"{rs.get('selected_fraction', 0):.0%} selected by the switch"

    def result(self, replies, targets):
        return dict(self.count,
                    selected_fraction=round(self.count["selected"] / max(1, replies), 4),
                    backup=[f"{targets[b][0]}:{targets[b][1]}" for b in self.backup])


class ClientC3(_Replicas):
    name = "c3"
    help = "client-side C3 replica selection"

    def __init__(self, n_targets, rng, seed, **options):
        super().__init__(n_targets, rng, seed, **options)
        self.selections = [0] * n_targets
        self.saturated = [0] * 8         # replies by saturation pattern (formats.SAT_*)
        # per selector, per target: q, os, t, r
        self.state = [[[0, 0, 0, 0] for _ in range(n_targets)]
                      for _ in range(self.c3_selectors)]

    def send(self, eng, op, key, value, now_ns):
        g = self.rgroups[key % len(self.rgroups)]
        sel = self.rng.randrange(self.c3_selectors) if self.c3_selectors > 1 else 0
        state = self.state[sel]
        reps = [Replica(q=state[t][0], os=min(255, state[t][1]), t=state[t][2], r=state[t][3])
                for t in g]
        _found, idx, _score = rank(C3, (1 << len(g)) - 1, reps, n=self.n_code)
        t = g[idx]
        self.selections[t] += 1
        state[t][1] += 1
        eng.send(op, key, value, target=t, now_ns=now_ns, tag=(sel, t))

    def record(self, c):
        st = self.state[c.tag[0]][c.tag[1]]
        st[1] = max(0, st[1] - 1)
        r = c.reply
        if r is not None:
            w = self.ewma_w
            q, qs = q_sample(max(0, r.queue_len - self.c3_workers))
            t, ts = ns_sample(r.service_ns, self.unit)
            rt, rs = ns_sample(max(0, c.done_ns - c.sent_ns), self.unit)
            st[0], st[2], st[3] = ewma(st[0], q, w), ewma(st[2], t, w), ewma(st[3], rt, w)
            self.saturated[(SAT_Q if qs else 0) | (SAT_T if ts else 0) | (SAT_R if rs else 0)] \
                += 1

    def result(self, replies, targets):
        return {"selections": {f"{a}:{p}": n for (a, p), n in zip(targets, self.selections)},
                "n": self.c3_n, "n_effective": n_value(self.n_code),
                "workers": self.c3_workers, "selectors": self.c3_selectors,
                "time_unit_us": unit_us(self.unit), "ewma": ewma_weight(self.ewma_w),
                "saturated": saturation_shares(self.saturated)}


SCHEMES = {s.name: s for s in (NetRS, ClientC3)}
