"""Prefix expansion of hashed LPM tables (driver): the table as the golden model probes it
(``_lpm_probe``, what the gateware computes) must give, for every key (all 4,096 12-bit keys,
after every third operation and after the last; sampled keys after every one), the
longest-prefix match of a brute-force scan over the routes installed so far; adds and deletes interleaved,
random nested and overlapping prefixes, with a fixed set of held lengths and with banks
taken while they last. Between the writes of one add or delete every key answers as the
table before or as the table after it (never a third answer)."""
from __future__ import annotations

import random

import pytest

from netstor.driver.tables import LPM_EXPAND_MAX, TableFullError, TableWriter
from netstor.elements import Table
from netstor.elements.table import _lpm_probe
from netstor.lang import Pipeline, Program, Set
from netstor.lang.program import Action

KW = 12


def _table(size, banks, kw=KW):
    p = Program("t")
    k, nh = p.meta("k", kw), p.meta("nh", 16)
    t = p.add(Table("r", kind="lpm", key=[k], size=size, lpm_banks=banks,
                    actions=[Action("route", {"nh": 16}, lambda a: [Set(nh, a.nh)])]))
    return Pipeline([p]), t


def brute(routes, key, kw=KW):
    """Longest-prefix match by scanning the route list: ``routes`` is ``[(prefix, len,
    value)]``; the value of the longest route whose top ``len`` bits equal the key's."""
    best, best_len = None, -1
    for prefix, plen, value in routes:
        if (key >> (kw - plen)) == (prefix >> (kw - plen)) and plen > best_len:
            best, best_len = value, plen
    return best


class Dev:
    """The table's memories as the device holds them, written one word at a time."""

    def __init__(self, t):
        self.t = t
        self.words, self.lengths = [0] * t.size, [0] * t.ways

    def write(self, w):
        mem, addr, word = w
        (self.lengths if mem.endswith(".lengths") else self.words)[addr] = word

    def lookup(self, key):
        e = _lpm_probe(self.t, self.words, self.lengths, key)
        return None if e is None else e >> self.t.action_bits


def _random_route(rng, routes, kw=KW):
    """A new route, often nested in or around an existing one."""
    plen = rng.randint(0, kw)
    if routes and rng.random() < 0.6:
        base, blen, _ = rng.choice(routes)
        if rng.random() < 0.7:                 # inside it (or the same length: a sibling)
            plen = rng.randint(blen, kw)
            pre = base | (rng.getrandbits(kw) & ((1 << (kw - blen)) - 1))
        else:                                  # a shorter one around it
            plen = rng.randint(0, blen)
            pre = base
        pre &= ((1 << plen) - 1) << (kw - plen)
    else:
        pre = rng.getrandbits(kw) & (((1 << plen) - 1) << (kw - plen))
    return pre, plen


def _run(rng, t, tw, ops, check_every_write_keys=48):
    dev = Dev(t)
    routes = {}                                 # (prefix, len) -> value
    full = expanded = rebucketed = 0
    held = set()
    for i in range(ops):
        before = dict(routes)
        if routes and rng.random() < 0.35:
            pre, plen = rng.choice(sorted(routes))
            ws = tw.lpm_delete(t.qualname, pre, plen)
            del routes[(pre, plen)]
        else:
            pre, plen = _random_route(rng, [(p, n, v) for (p, n), v in routes.items()])
            val = rng.getrandbits(16)
            try:
                ws = tw.lpm_add(t.qualname, pre, plen, "route", {"nh": val})
            except TableFullError:
                full += 1
                continue
            routes[(pre, plen)] = val
        held0 = held
        held = {h for h in tw._lpm[t.qualname].bank_len if h is not None}
        expanded += any(n not in held for _, n in routes)
        # a length newly held while shorter routes sat expanded in a longer bucket: their
        # entries moved into it
        for n in held - held0:
            above = [h for h in held0 if h > n]
            rebucketed += bool(above) and any(max((h for h in held0 if h < n), default=-1)
                                              < m < n for _, m in before)
        old = [(p, n, v) for (p, n), v in before.items()]
        new = [(p, n, v) for (p, n), v in routes.items()]
        # keys around the change and a few others, checked after every single write
        span = 1 << (KW - plen)
        keys = [pre + rng.randrange(span) for _ in range(check_every_write_keys // 2)] + \
            [rng.getrandbits(KW) for _ in range(check_every_write_keys // 2)]
        want = {k: (brute(old, k), brute(new, k)) for k in keys}
        for w in ws:
            dev.write(w)
            for k in keys:
                assert dev.lookup(k) in want[k], (i, hex(k), w)
        # every key after every third operation and after the last
        if i % 3 == 0 or i == ops - 1:
            for k in range(1 << KW):
                assert dev.lookup(k) == brute(new, k), (i, hex(k))
        assert {k: v[1]["nh"] for k, v in tw.lpm_routes(t.qualname).items()} == routes
    return routes, full, expanded, rebucketed


def test_expansion_into_fixed_lengths_matches_brute_force():
    """Held lengths {3, 6, 9, 12}: every other length is expanded (a /0 into 8 entries of /3,
    a /7 into 4 of /9, ...)."""
    pl, t = _table(512, 8)
    tw = TableWriter(pl, lpm_lengths={t.qualname: (3, 6, 9, 12)})
    rng = random.Random(1)
    routes, full, expanded, _ = _run(rng, t, tw, 200)
    assert len(routes) > 25 and expanded > 150 and full == 0
    assert {h for h in tw._lpm[t.qualname].bank_len if h is not None} <= {3, 6, 9, 12}


@pytest.mark.parametrize("banks,seed", [(4, 2), (8, 3)])
def test_expansion_when_banks_run_out_matches_brute_force(banks, seed):
    """Banks taken by lengths as they come while they last (one kept for a longer length or
    growth); then new lengths are expanded into the next held one, and a bank freed later is
    taken by a new length, moving the shorter routes' entries into it."""
    pl, t = _table(512, banks)
    tw = TableWriter(pl)
    rng = random.Random(seed)
    routes, full, expanded, rebucketed = _run(rng, t, tw, 200)
    # (full: a length longer than every held one once every bank is in use)
    assert len(routes) > 8 and expanded > 50


def test_expansion_never_overwrites_a_longer_route_and_delete_restores():
    """Hand-computed: held {4, 8, 12}; 0xA0/8 -> 1; 0xA00/2 -> 2 (expanded into /4: 0x8,
    0x9, 0xA, 0xB of /4) and 0xA4/6 -> 3 (expanded into /8: 0xA4..0xA7)."""
    pl, t = _table(512, 4)
    tw = TableWriter(pl, lpm_lengths={t.qualname: (4, 8, 12)})
    dev = Dev(t)

    def do(ws):
        for w in ws:
            dev.write(w)
        return ws

    do(tw.lpm_add(t.qualname, 0xA00, 8, "route", {"nh": 1}))
    ws = do(tw.lpm_add(t.qualname, 0x800, 2, "route", {"nh": 2}))
    assert sorted(a for m, a, _ in ws if m == t.qualname) == \
        sorted(tw.lpm_addresses(t.qualname, 0x800, 2))
    assert len(tw.lpm_addresses(t.qualname, 0x800, 2)) == 4
    ws = do(tw.lpm_add(t.qualname, 0xA40, 6, "route", {"nh": 3}))
    # 0xA4/8 .. 0xA7/8 written (4 entries), 0xA0/8 (the real /8) untouched
    assert len([w for w in ws if w[0] == t.qualname]) == 4
    want = {0xA05: 1, 0xA12: 2, 0xA45: 3, 0xA7F: 3, 0xA80: 2, 0x805: 2, 0xBFF: 2, 0xC00: None,
            0x7FF: None}
    assert {k: dev.lookup(k) for k in want} == want
    # deleting the /8 restores the /2's expansion under it; deleting the /6 restores it too
    do(tw.lpm_delete(t.qualname, 0xA00, 8))
    assert dev.lookup(0xA05) == 2 and dev.lookup(0xA45) == 3
    ws = do(tw.lpm_delete(t.qualname, 0xA40, 6))
    assert dev.lookup(0xA45) == 2
    # the /8 bank now holds only /2 expansions ... and deleting the /2 empties the table and
    # releases every bank
    do(tw.lpm_delete(t.qualname, 0x800, 2))
    assert all(w == 0 for w in dev.words) and dev.lengths == [0] * t.ways
    assert tw._lpm[t.qualname].routes == {}


def test_failed_add_changes_nothing():
    """A route that cannot be placed (its expansion needs more slots than the table has;
    a length longer than any held one with no bank free) raises and leaves the shadow as it
    was, so the next writes are still right."""
    pl, t = _table(512, 4)          # 4 banks of 128
    tw = TableWriter(pl, lpm_lengths={t.qualname: (12,)})
    for i in range(6):
        tw.lpm_add(t.qualname, 0x100 * i + 7, 12, "route", {"nh": i})
    slots = tw._lpm[t.qualname]

    def state():
        return (list(slots), list(slots.bank_len), list(slots.used), dict(slots.where),
                dict(slots.routes))
    snap = state()
    with pytest.raises(TableFullError, match="expansion"):
        tw.lpm_add(t.qualname, 0, 2, "route", {"nh": 99})     # 1,024 entries: refused at once
    assert state() == snap
    with pytest.raises(TableFullError, match="banks are in use"):
        tw.lpm_add(t.qualname, 0, 3, "route", {"nh": 99})     # 512: placed until no slot
    assert state() == snap
    assert tw.lpm_add(t.qualname, 0x800, 4, "route", {"nh": 9})   # 256 entries fit
    # banks as lengths come: /8, /2, /3 take one each, /12 (longer than every held one)
    # the last; a /5 is then expanded into /8 (and gone again when deleted)
    pl2, t2 = _table(512, 4)
    tw2 = TableWriter(pl2)
    for n in (8, 2, 3, 12):
        tw2.lpm_add(t2.qualname, 0, n, "route", {"nh": n})
    slots = tw2._lpm[t2.qualname]
    before = (list(slots), list(slots.bank_len), dict(slots.routes))
    for pre in range(0x080, 0x1000, 0x080):  # the first /5 whose 8 entries fit the /8 bank
        try:
            tw2.lpm_add(t2.qualname, pre, 5, "route", {"nh": 5})
            break
        except TableFullError:               # a slot taken: nothing changed
            assert (list(slots), list(slots.bank_len), dict(slots.routes)) == before
    assert sorted(slots.bank_len) == [2, 3, 8, 12]
    assert len(tw2.lpm_addresses(t2.qualname, pre, 5)) == 8
    tw2.lpm_delete(t2.qualname, pre, 5)
    assert (list(slots), list(slots.bank_len), dict(slots.routes)) == before
    # /12 routes until the /12 bank has no slot for one: that add changes nothing
    for k in range(1, 1 << 12):
        snap = (list(slots), list(slots.bank_len), list(slots.used), dict(slots.routes))
        try:
            tw2.lpm_add(t2.qualname, k, 12, "route", {"nh": 1})
        except TableFullError as e:
            assert "banks are in use" in str(e)
            assert (list(slots), list(slots.bank_len), list(slots.used),
                    dict(slots.routes)) == snap
            break
    else:
        raise AssertionError("the /12 bank never filled")
    assert LPM_EXPAND_MAX >= 1 << 12


def test_a_freed_bank_takes_a_new_length_and_the_shorter_routes_move_into_it():
    """Hand-made: banks as lengths come, 4 banks. /12, /8, /4 take a bank each (the 4th is
    kept); a /6 is expanded into /8 (3 entries: the 4th is the /8's) and a /10 into /12. Deleting the /4 frees its
    bank; a /7 then takes it, and the /6 moves from /8 (4 entries) into /7 (2 entries). After
    every write each key answers as the table before or after the operation."""
    pl, t = _table(512, 4)
    tw = TableWriter(pl)
    slots = tw._lpm[t.qualname]
    dev = Dev(t)
    routes = {}

    def op(pre, plen, val=None):
        before = [(p, n, v) for (p, n), v in routes.items()]
        if val is None:
            ws = tw.lpm_delete(t.qualname, pre, plen)
            del routes[(pre, plen)]
        else:
            ws = tw.lpm_add(t.qualname, pre, plen, "route", {"nh": val})
            routes[(pre, plen)] = val
        after = [(p, n, v) for (p, n), v in routes.items()]
        for w in ws:
            dev.write(w)
            for k in range(0, 1 << KW, 3):
                assert dev.lookup(k) in (brute(before, k), brute(after, k)), (hex(k), w)
        for k in range(1 << KW):
            assert dev.lookup(k) == brute(after, k), hex(k)
        return ws

    op(0xA5C, 12, 1)
    op(0xA50, 8, 2)
    op(0xA00, 4, 3)
    assert sorted(h for h in slots.bank_len if h is not None) == [4, 8, 12]
    op(0xA40, 6, 4)
    assert len(tw.lpm_addresses(t.qualname, 0xA40, 6)) == 3      # 0xA4, 0xA6, 0xA7 (0xA5: /8)
    op(0xA58, 10, 5)
    assert len(tw.lpm_addresses(t.qualname, 0xA58, 10)) == 4     # 0xA58..0xA5B of /12
    assert slots.bank_len.count(None) == 1
    op(0xA00, 4)                                                  # frees the /4 bank
    assert slots.bank_len.count(None) == 2
    ws = op(0xA40, 7, 6)                                         # /7 held: the /6 moves
    assert sorted(h for h in slots.bank_len if h is not None) == [7, 8, 12]
    addrs = tw.lpm_addresses(t.qualname, 0xA40, 6)
    assert len(addrs) == 1 and slots[addrs[0]][:2] == (0xA60, 7)  # 0xA4/7 is the /7 route's
    assert not any(slots[a][1] == 8 and slots[a][2:] == (1, 4) for a in range(t.size))
    # the new bank's length is written before its entries, the /6's /8 entries go last
    lw = [i for i, w in enumerate(ws) if w[0].endswith(".lengths")]
    assert lw == [0] and ws[-1][2] == 0
