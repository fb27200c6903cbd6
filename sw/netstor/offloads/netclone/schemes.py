"""NetClone's load-generator schemes: ``netclone`` (NetClone requests to the service address:
the switch clones and filters) and the paper's baselines ``single`` (one server of a random
pair) and ``clone`` (client-side cloning: both servers of a pair, the first reply wins).
* ``single``: no cloning: the request goes to one server of a random group, chosen at random
  (groups are pairs of targets, ``--pairs I:J,...``, default every ordered pair).
* ``clone``: client-side cloning: the request goes to both servers of a random group, the
  first reply counts, the second is ignored (counted in ``engine.duplicates``).
* ``netclone``: the request goes as a NetClone request (group drawn uniformly from
  ``--groups``, e.g. ``0-11``) to the service address ``--target VIP[:7431]``; the engine binds
  ``--nc-bind-port`` (default 7431: the servers answer to the request's source port). The
  switch clones and filters; a duplicate that gets through is counted and ignored. The result
  gets ``netclone``: replies whose request was cloned (``cloned_replies``: the NetClone
  header's clone field is not 0) and the per-server share.
"""
from __future__ import annotations

from netstor.agent.schemes import Scheme

from .codec import NetCloneCodec
from .header import NETCLONE_UDP_PORT, OP_REQ, NcHeader

__all__ = ["SCHEMES", "parse_groups", "parse_pairs"]


def parse_groups(spec):
    """``"0-11"``, ``"3,5,7"`` or a list of ints -> list of group ids."""
    if isinstance(spec, (list, tuple)):
        out = [int(g) for g in spec]
    else:
        out = []
        for part in str(spec).split(","):
            part = part.strip()
            if not part:
                continue
            lo, sep, hi = part.partition("-")
            out.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    if not out or any(not 0 <= g <= 0xFFFF for g in out):
        raise ValueError(f"bad NetClone group list {spec!r}")
    return out


def parse_pairs(spec, n_targets):
    """``"0:1,1:0"`` or ``[(0, 1), ...]`` (target indexes) -> list of pairs; None = every
    ordered pair of distinct targets."""
    if spec is None:
        pairs = [(i, j) for i in range(n_targets) for j in range(n_targets) if i != j]
    elif isinstance(spec, str):
        pairs = [tuple(int(x) for x in p.split(":")) for p in spec.split(",") if p.strip()]
    else:
        pairs = [tuple(p) for p in spec]
    if not pairs or any(len(p) != 2 or not all(0 <= x < n_targets for x in p) or p[0] == p[1]
                        for p in pairs):
        raise ValueError(f"bad server pairs {spec!r} for {n_targets} target(s)")
    return pairs


class NetClone(Scheme):
    name = "netclone"
    help = "NetClone requests to the service address --target (the switch clones)"
    codec = NetCloneCodec()
    port = NETCLONE_UDP_PORT
    preload = False
    options = {"groups": None, "nc_bind_port": NETCLONE_UDP_PORT}

    def __init__(self, n_targets, rng, seed, **options):
        super().__init__(n_targets, rng, seed, **options)
        if self.groups is None:
            raise ValueError("scheme netclone needs the group ids (groups)")
        self.groups = parse_groups(self.groups)
        self.cloned = 0

    @property
    def bind_port(self):
        return self.nc_bind_port

    @classmethod
    def add_arguments(cls, p):
        p.add_argument("--groups", default=None, metavar="G[-H][,...]",
                       help="netclone: the group ids to draw from, e.g. 0-11")
        p.add_argument("--nc-bind-port", type=int, default=NETCLONE_UDP_PORT, metavar="PORT",
                       help=f"netclone: local UDP port (default {NETCLONE_UDP_PORT}; servers "
                            "answer to it)")

    def send(self, eng, op, key, value, now_ns):
        head = NcHeader(OP_REQ, group=self.rng.choice(self.groups)).pack()
        eng.send(op, key, value, target=0, now_ns=now_ns, head=head)

    def record(self, c):
        if c.reply is not None and c.head is not None and c.head.clone:
            self.cloned += 1

    def result(self, replies, targets):
        return {"cloned_replies": self.cloned,
                "cloned_fraction": round(self.cloned / max(1, replies), 4)}

    def config(self):
        return {"groups": self.groups}

    @classmethod
    def note(cls, r):
        nc = r.get("netclone") or {}
        return (f"{nc.get('cloned_fraction', 0):.0%} cloned, "
                f"{r['engine']['duplicates']} duplicates")


class _Pairs(Scheme):
    options = {"pairs": None}

    def __init__(self, n_targets, rng, seed, **options):
        super().__init__(n_targets, rng, seed, **options)
        self.pairs = parse_pairs(self.pairs, n_targets)

    @classmethod
    def add_arguments(cls, p):
        if not any("--pairs" in a.option_strings for a in p._actions):
            p.add_argument("--pairs", default=None, metavar="I:J[,I:J...]",
                           help="single/clone: server pairs as target indexes (default: "
                                "every ordered pair)")

    def config(self):
        return {"pairs": self.pairs}


class Single(_Pairs):
    name = "single"
    help = "one server of a random pair (no cloning)"

    def send(self, eng, op, key, value, now_ns):
        pair = self.rng.choice(self.pairs)
        eng.send(op, key, value, target=pair[self.rng.getrandbits(1)], now_ns=now_ns)


class Clone(_Pairs):
    name = "clone"
    help = "client-side cloning to both servers of a random pair"

    def send(self, eng, op, key, value, now_ns):
        a, b = self.rng.choice(self.pairs)
        eng.send(op, key, value, target=a, copies=(b,), now_ns=now_ns)

    @classmethod
    def note(cls, r):
        return f"{r['engine']['duplicates']} second replies ignored"


SCHEMES = {s.name: s for s in (Single, Clone, NetClone)}
