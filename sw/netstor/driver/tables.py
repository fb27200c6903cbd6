"""Table entry encoders: turn intent ("route 10.0.0.0/8 out of port 1") into memory writes.

Every method returns a list of ``(memory name, address, word)`` writes in the order they must
be applied; the same writes drive the hardware (through a CSR client) and the golden model
(:class:`netstor.model.DataplaneModel`), see :func:`apply_writes`. Words follow the spec's
"Entry encodings" (``docs/dataplane-spec.md``), LSB first:

==================== ==============================================================
exact table          ``valid(1) | key(kw) | action(ab) | params(pw)``, address
                     ``way * depth + slot``, ``slot = h3_slot(key, way, kw, log2 depth,
                     low_identity=True)`` (gateware.h3: an independent hash per way)
ternary / LPM table  ``valid(1) | value(kw) | mask(kw) | action(ab) | params(pw)``,
                     address = priority (0 wins)
hashed LPM table     the same word at address ``bank * depth + slot``, ``slot =
                     lpm_slot(prefix, bank, kw, depth)`` (gateware.lpm), in a bank whose
                     ``T.lengths`` word is ``enable(1) | length`` of the prefix
``T.default``        ``action(ab) | params(pw)``
register bank        ``value(width)``
``tm.mcast``         ``ports(2P) | rid[0](16) | rid[1](16) | ...``, address = group
``tm.groups``        ``n(5) | 16 x (port(4) | rid(16))``, address = group
==================== ==============================================================

A :class:`TableWriter` keeps a shadow of what *it* has written (to pick free exact slots and to
keep LPM tables sorted); it does not read the device back, so one writer should own a table.

An exact key goes to the first way whose slot for it is free, else keys move between their
ways to free one (cuckoo hashing, breadth first, at most :data:`EXACT_MOVES` moves, each key
written to its new slot before its old slot is overwritten, so a lookup finds every key
throughout the insert).

LPM tables of 512+ entries are hashed (``Table.lpm_hashed``, ``ways`` = banks > 1): a route goes
to the first bank of its length whose slot for it is free, else routes of its length move
between their banks to free one (cuckoo hashing, at most :data:`CUCKOO_MOVES` moves, each
written to its new slot before its old slot is reused), else to an unused bank, which is first
given the route's length (``T.lengths``); a bank whose last route is deleted is released (its
length word cleared). So a lookup sees every other route throughout an update.

Prefix expansion (hashed LPM tables). The banks hold a set of *held* lengths (the lengths of
the banks in use; or a fixed set, ``TableWriter(..., lpm_lengths={table: lengths})``). A
route of a length ``L`` that is not held, when no free bank may take ``L`` (every bank in use,
or ``L`` not in the fixed set), is expanded into the next held length ``H > L``: the
``2**(H - L)`` prefixes of length ``H`` under it. The entry of prefix ``q`` of held length
``H`` (previous held length ``H0``) is always the longest route of a length in ``(H0, H]``
that covers ``q`` (controlled prefix expansion): so an expansion never replaces a longer real
route, and deleting a route brings back what it covered (a shorter route's expansion, or
nothing). Since a route's bucket (the least held length ``>= L``) grows with ``L``, the
longest held length that hits gives the longest route that matches. When a free bank takes a
new held length ``L``, the routes of lengths ``(H0, L]`` move from the next held length's
bucket into it (their entries there are written first, then the old ones removed), so every
lookup gives the table's answer before or after the update. The writer keeps the routes as
given (:meth:`TableWriter.lpm_routes`); a writer that loads a table from the device
(:meth:`TableWriter.load_shadow`) sees its entries as routes (expansions included).
"""

from __future__ import annotations

from netstor.gateware.h3 import H3Slots
from netstor.gateware.lpm import lpm_slot

__all__ = ["TableWriter", "TableFullError", "apply_writes", "apply_writes_async"]


def _mask(w):
    return (1 << w) - 1


#: copies per group in the copy-list format (``tm.groups``: ``n(5) | 16 x (port(4) | rid(16))``)
GROUP_COPIES = 16


class TableFullError(Exception):
    """No free slot for a key (exact: every way's slot taken; ternary/LPM: no free entry)."""

    def __init__(self, table, key, detail=""):
        self.table, self.key = table, key
        super().__init__(f"table {table} is full: no room for key {key!r}"
                         + (f" ({detail})" if detail else ""))


def apply_writes(target, writes):
    """Apply ``writes`` to anything with ``mem_write(name, addr, word)`` (model, CSR client)."""
    for mem, addr, word in writes:
        target.mem_write(mem, addr, word)


async def apply_writes_async(target, writes):
    """:func:`apply_writes` for a target whose ``mem_write`` is a coroutine (cocotb)."""
    for mem, addr, word in writes:
        await target.mem_write(mem, addr, word)


def _check_uint(what, v, width):
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{what} must be an int, got {v!r}")
    if v < 0 or v >> width:
        raise ValueError(f"{what} = {v:#x} does not fit in {width} bits"
                         if v >= 0 else f"{what} = {v} is negative")


def _hashed(t):
    """A hashed LPM table (``Table.lpm_hashed``; from a schema: an LPM table with banks)."""
    return t.kind == "lpm" and t.ways > 1


#: route moves a hashed LPM insert may make (cuckoo hashing) before it takes a new bank
CUCKOO_MOVES = 4

#: key moves an exact insert may make (cuckoo hashing) before the table is full
EXACT_MOVES = 6


def _free_path(first, moves, is_free, max_moves):
    """Breadth-first search of a cuckoo chain: the shortest ``[a0, ..., ak]``, ``k <=
    max_moves``, ``a0`` in ``first``, ``a(i+1)`` in ``moves(a(i))`` (where the entry at
    ``a(i)`` may go), ``is_free(ak)``; None if there is none. ``first`` itself is not tested
    for a free slot."""
    parent = dict.fromkeys(first)
    frontier = list(first)
    for _ in range(max_moves):
        nxt = []
        for a in frontier:
            for a2 in moves(a):
                if a2 in parent:
                    continue
                parent[a2] = a
                if is_free(a2):
                    path = [a2]
                    while parent[path[-1]] is not None:
                        path.append(parent[path[-1]])
                    return path[::-1]
                nxt.append(a2)
        frontier = nxt
    return None


class ExactShadow(dict):
    """Shadow of an exact table: ``key -> address`` (a dict), plus ``at`` (address -> key) and
    ``word`` (address -> the entry word written there), so entries can move between ways."""

    def __init__(self, items=(), words=None):
        super().__init__(items)
        self.at = {a: k for k, a in self.items()}
        self.word = dict(words or {})

    def put(self, key, addr, word):
        self[key] = addr
        self.at[addr] = key
        self.word[addr] = word

    def drop(self, key):
        addr = self.pop(key)
        del self.at[addr]
        self.word.pop(addr, None)
        return addr

    def cuckoo_path(self, slots, key, max_moves=EXACT_MOVES):
        """Shortest chain ``[a0, ..., ak]`` (breadth first, ``k <= max_moves``): ``a0`` is one
        of ``key``'s slots, the key at ``a(i)`` has ``a(i+1)`` among its slots (``slots(key)``:
        its address in every way), ``ak`` is free. ``[a0]`` when a slot is free; None if no
        chain exists."""
        first = slots(key)
        for a in first:
            if a not in self.at:
                return [a]
        # a key whose word is unknown cannot be rewritten elsewhere: it does not move
        return _free_path(first, lambda a: (slots(self.at[a]) if self.word.get(a) is not None
                                            else ()),
                          lambda a: a not in self.at, max_moves)

    def insert(self, slots, key, word, max_moves=EXACT_MOVES):
        """Place a new ``key`` (its entry ``word``) along :meth:`cuckoo_path`; returns the
        ``(address, word)`` writes, the last moved key first and ``key`` last, or None (full:
        nothing changed)."""
        path = self.cuckoo_path(slots, key, max_moves)
        if path is None:
            return None
        out = []
        for i in range(len(path) - 1, 0, -1):
            src, dst = path[i - 1], path[i]
            k, w = self.at[src], self.word.get(src)
            self.put(k, dst, w)
            out.append((dst, w))
        self.put(key, path[0], word)
        out.append((path[0], word))
        return out


#: an empty slot of a hashed LPM table's shadow (matches no ``(prefix, len)``)
_FREE = (None, None, 0, 0)


class _LpmSlots(list):
    """Shadow of a hashed LPM table: one ``(prefix, len, action id, params)`` per address
    (:data:`_FREE` when empty; ``len`` is the bank's held length), each bank's length (None:
    unused), its entry count and where each entry sits; ``routes``: the routes as given,
    ``(prefix, len) -> (action id, params)``, expansions not included; ``fixed``: the held
    lengths allowed (None: any). A list, so code that indexes LPM shadows by address keeps
    working. Changes between :meth:`begin` and :meth:`commit` can be undone
    (:meth:`rollback`)."""

    def __init__(self, t, fixed=None):
        super().__init__([_FREE] * t.size)
        self.kw, self.depth = t.key_width, t.depth
        self.bank_len = [None] * t.ways
        self.used = [0] * t.ways
        self.where = {}
        self.routes = {}
        self.fixed = None if fixed is None else frozenset(fixed)
        self._undo = None

    # ---- undo log
    def begin(self):
        self._undo = []

    def commit(self):
        self._undo = None

    def rollback(self):
        undo, self._undo = self._undo, None
        for f in reversed(undo):
            f()

    def _log(self, f):
        if self._undo is not None:
            self._undo.append(f)

    def set_route(self, key, val):
        old = self.routes.get(key)
        self.routes[key] = val
        self._log(lambda: self.routes.__setitem__(key, old) if old is not None
                  else self.routes.pop(key))

    def del_route(self, key):
        old = self.routes.pop(key)
        self._log(lambda: self.routes.__setitem__(key, old))

    def set_bank(self, b, length):
        old = self.bank_len[b]
        self.bank_len[b] = length
        self._log(lambda: self.bank_len.__setitem__(b, old))

    # ---- placement
    def held(self):
        """The held lengths, ascending."""
        return sorted({n for n in self.bank_len if n is not None})

    def slot(self, bank, prefix):
        return bank * self.depth + lpm_slot(prefix, bank, self.kw, self.depth)

    def cuckoo_path(self, banks, prefix, max_moves=CUCKOO_MOVES):
        """Shortest chain ``[a0, a1, ..., ak]`` (breadth first, ``k <= max_moves``): ``a0`` is
        ``prefix``'s slot in one of ``banks``, the route at ``a(i)`` can move to ``a(i+1)`` (its
        slot in another of ``banks``), ``ak`` is free. None if there is none."""
        if len(banks) < 2:
            return None
        return _free_path([self.slot(b, prefix) for b in banks],
                          lambda a: [self.slot(b, self[a][0]) for b in banks
                                     if b != a // self.depth],
                          lambda a: self[a] is _FREE, max_moves)

    def put(self, addr, entry):
        old = self[addr]
        if old is not _FREE:
            del self.where[old[:2]]
            self.used[addr // self.depth] -= 1
        self[addr] = entry
        self.used[addr // self.depth] += 1
        self.where[entry[:2]] = addr
        self._log(lambda: self._restore(addr, old))

    def take(self, addr):
        old = self[addr]
        del self.where[old[:2]]
        self[addr] = _FREE
        b = addr // self.depth
        self.used[b] -= 1
        self._log(lambda: self._restore(addr, old))
        return b

    def _restore(self, addr, entry):
        cur = self[addr]
        if cur is not _FREE:
            del self.where[cur[:2]]
            self.used[addr // self.depth] -= 1
        self[addr] = entry
        if entry is not _FREE:
            self.used[addr // self.depth] += 1
            self.where[entry[:2]] = addr

    def free_room(self, length):
        """Free slots a bucket of held ``length`` could still use: its banks' and the
        unused banks' (an upper bound: a slot taken by hashing may not be reachable)."""
        return sum(self.depth - self.used[b] for b, n in enumerate(self.bank_len)
                   if n == length or n is None)


#: at most this many entries for one route's expansion (2**(H - L)); beyond, the route is
#: refused (TableFullError) rather than written as a long burst of entries
LPM_EXPAND_MAX = 1 << 16


class TableWriter:
    """Encoders for the tables, default actions, register banks and multicast groups of
    ``pipeline`` (a :class:`netstor.lang.Pipeline`)."""

    def __init__(self, pipeline, lpm_lengths=None):
        """``lpm_lengths``: ``{table: lengths}``, the prefix lengths the banks of a hashed LPM
        table may hold (other lengths are expanded into the next longer one, see the module
        docstring; it must include the longest route length used); tables not named hold any
        length while banks last."""
        self.pipeline = pipeline
        self._lpm_fixed = dict(lpm_lengths or {})
        self.tables = {t.qualname: t for t in pipeline.tables}
        self.banks = {b.qualname: b for b in pipeline.banks}
        self._exact = {n: ExactShadow() for n, t in self.tables.items()
                       if t.kind == "exact"}   # key -> addr (and the words, for moves)
        self._h3 = {}
        self._ternary = {n: {} for n, t in self.tables.items() if t.kind == "ternary"}
        unknown = set(self._lpm_fixed) - {n for n, t in self.tables.items() if _hashed(t)}
        if unknown:
            raise ValueError(f"lpm_lengths: no hashed LPM table(s) {sorted(unknown)}")
        self._lpm = {n: (_LpmSlots(t, self._lpm_fixed.get(n)) if _hashed(t) else [])
                     for n, t in self.tables.items() if t.kind == "lpm"}

    def set_lpm_lengths(self, table, lengths):
        """Fix the prefix lengths the banks of hashed LPM ``table`` may hold from now on
        (``None``: any length while banks last); routes of other lengths are expanded into
        the next longer one, so the set must reach the longest route length used. The lengths
        the table's banks hold now must be among them (a table is re-planned by clearing it
        first)."""
        t = self._table(table, "lpm")
        if not _hashed(t):
            raise ValueError(f"table {table}: lpm_lengths is for hashed LPM tables (banks); "
                             f"this one is a {t.size}-entry TCAM")
        if lengths is not None:
            if isinstance(lengths, (str, bytes)) or not hasattr(lengths, "__iter__"):
                raise ValueError(f"table {table}: lpm_lengths must be a list of prefix lengths")
            lengths = list(lengths)
            bad = [n for n in lengths if not isinstance(n, int) or isinstance(n, bool)
                   or not 0 <= n <= t.key_width]
            if bad or not lengths:
                raise ValueError(f"table {table}: lpm_lengths {lengths}: prefix lengths "
                                 f"0..{t.key_width}, at least one")
            lengths = frozenset(lengths)
        slots = self._lpm[table]
        held = set(slots.held())
        if lengths is not None and not held <= lengths:
            raise ValueError(f"table {table}: its banks hold lengths {sorted(held - lengths)} "
                             f"not in lpm_lengths {sorted(lengths)}; clear the table first")
        if lengths is None:
            self._lpm_fixed.pop(table, None)
        else:
            self._lpm_fixed[table] = lengths
        slots.fixed = lengths

    # ---- helpers -------------------------------------------------------------------------------
    def _table(self, name, kind=None):
        t = self.tables.get(name)
        if t is None:
            raise KeyError(f"no table {name!r}; tables are {sorted(self.tables)}")
        if kind is not None and t.kind != kind:
            raise ValueError(f"table {name} is a {t.kind} table, not {kind}")
        return t

    def _action(self, t, action, params):
        """``(action id, packed params)``; every parameter must be given and fit."""
        if action is None:
            if params:
                raise ValueError(f"table {t.qualname}: 'no action' takes no parameters")
            return 0, 0
        aid = t.action_id(action)     # KeyError naming the table's actions
        a = t.actions[aid - 1]
        params = dict(params or {})
        unknown = sorted(set(params) - set(a.params))
        if unknown:
            raise KeyError(f"table {t.qualname}: action {action} has no parameter(s) {unknown} "
                           f"(it has {list(a.params)})")
        missing = [p for p in a.params if p not in params]
        if missing:
            raise ValueError(f"table {t.qualname}: action {action} needs parameter(s) {missing}")
        for p, w in a.params.items():
            _check_uint(f"table {t.qualname}: action {action} parameter {p}", params[p], w)
        return aid, a.pack_params(params)

    def _pack(self, t, values, what):
        if not isinstance(values, (list, tuple)):
            raise TypeError(f"table {t.qualname}: {what} must be a list of key parts")
        if len(values) != len(t.key):
            raise ValueError(f"table {t.qualname}: {what} has {len(values)} part(s), the key "
                             f"has {len(t.key)}")
        word, shift = 0, 0
        for i, (k, v) in enumerate(zip(t.key, values)):
            _check_uint(f"table {t.qualname}: {what} part {i}", v, k.width)
            word |= v << shift
            shift += k.width
        return word

    def _ternary_word(self, t, value, mask, aid, pword):
        kw = t.key_width
        return (1 | value << 1 | mask << (1 + kw) | aid << (1 + 2 * kw)
                | pword << (1 + 2 * kw + t.action_bits))

    # ---- exact ---------------------------------------------------------------------------------
    def _exact_slots_fn(self, t):
        """``slots(packed key)`` -> its address in every way, way 0 first."""
        fn = self._h3.get(t.qualname)
        if fn is None:
            depth, sbits = t.depth, (t.depth - 1).bit_length()
            h3 = H3Slots(t.key_width, sbits, t.ways, low_identity=True)

            def fn(k):
                return [w * depth + s for w, s in enumerate(h3(k))]
            self._h3[t.qualname] = fn
        return fn

    def exact_slots(self, table, key):
        """Addresses the key may occupy, one per way, way 0 first."""
        t = self._table(table, "exact")
        return self._exact_slots_fn(t)(self._pack(t, key, "key"))

    def exact_add(self, table, key, action, params=None):
        """Add (or update) ``key``: the key's own slot if present, else the first way whose
        slot is free, else moves (cuckoo, :class:`ExactShadow`): the moved keys' writes come
        first, each to a free slot or to one whose key has already moved on."""
        t = self._table(table, "exact")
        k = self._pack(t, key, "key")
        aid, pword = self._action(t, action, params)
        word = 1 | k << 1 | aid << (1 + t.key_width) | pword << (1 + t.key_width + t.action_bits)
        shadow = self._exact[table]
        if not isinstance(shadow, ExactShadow):     # a plain dict (an older saved shadow)
            shadow = self._exact[table] = ExactShadow(shadow)
        addr = shadow.get(k)
        if addr is not None:
            shadow.put(k, addr, word)
            return [(table, addr, word)]
        out = shadow.insert(self._exact_slots_fn(t), k, word)
        if out is None:
            raise TableFullError(table, list(key), "every way's slot is taken and no chain "
                                 f"of {EXACT_MOVES} moves frees one")
        return [(table, a, w) for a, w in out]

    def exact_delete(self, table, key):
        t = self._table(table, "exact")
        k = self._pack(t, key, "key")
        shadow = self._exact[table]
        if k not in shadow:
            raise KeyError(f"table {table}: no entry with key {list(key)!r}")
        addr = shadow.drop(k) if isinstance(shadow, ExactShadow) else shadow.pop(k)
        return [(table, addr, 0)]

    # ---- ternary -------------------------------------------------------------------------------
    def ternary_add(self, table, value, mask, action, params=None, priority=0):
        """Entry at address ``priority`` (0 = highest); replaces what was there."""
        t = self._table(table, "ternary")
        v = self._pack(t, value, "value")
        m = self._pack(t, mask, "mask")
        if isinstance(priority, bool) or not isinstance(priority, int) \
                or not 0 <= priority < t.size:
            raise ValueError(f"table {table}: priority {priority} out of range 0..{t.size - 1}")
        aid, pword = self._action(t, action, params)
        self._ternary[table][priority] = (v, m)
        return [(table, priority, self._ternary_word(t, v, m, aid, pword))]

    def ternary_delete(self, table, priority):
        self._table(table, "ternary")
        if self._ternary[table].pop(priority, None) is None:
            raise KeyError(f"table {table}: no entry at priority {priority!r}")
        return [(table, priority, 0)]

    # ---- LPM -----------------------------------------------------------------------------------
    def _prefix(self, t, prefix, prefix_len):
        kw = t.key_width
        _check_uint(f"table {t.qualname}: prefix", prefix, kw)
        if isinstance(prefix_len, bool) or not isinstance(prefix_len, int) \
                or not 0 <= prefix_len <= kw:
            raise ValueError(f"table {t.qualname}: prefix length {prefix_len!r} out of range "
                             f"0..{kw}")
        mask = _mask(prefix_len) << (kw - prefix_len)
        if prefix & ~mask:
            raise ValueError(f"table {t.qualname}: prefix {prefix:#x}/{prefix_len} has bits "
                             "set beyond its length")
        return mask

    def _lpm_writes(self, t, entries, lo, hi):
        """Writes for shadow entries ``lo..hi-1`` at their addresses."""
        out = []
        for addr in range(lo, hi):
            if addr < len(entries):
                prefix, plen, aid, pword = entries[addr]
                mask = _mask(plen) << (t.key_width - plen)
                out.append((t.qualname, addr, self._ternary_word(t, prefix, mask, aid, pword)))
            else:
                out.append((t.qualname, addr, 0))
        return out

    def lpm_add(self, table, prefix, prefix_len, action, params=None):
        """Add (or update) a route; entries stay sorted longest prefix first. Returns every
        write, the shifted entries last-first so that a lookup never misses a route that is
        present before and after the update. (Hashed tables: one write, two when the route
        takes a new bank; see the module docstring.)"""
        t = self._table(table, "lpm")
        mask = self._prefix(t, prefix, prefix_len)
        aid, pword = self._action(t, action, params)
        entries = self._lpm[table]
        new = (prefix, prefix_len, aid, pword)
        if isinstance(entries, _LpmSlots):
            return self._lpm_hash_add(t, entries, new, mask)
        for i, e in enumerate(entries):
            if e[:2] == (prefix, prefix_len):
                entries[i] = new
                return self._lpm_writes(t, entries, i, i + 1)
        if len(entries) >= t.size:
            raise TableFullError(table, f"{prefix:#x}/{prefix_len}",
                                 f"all {t.size} entries used")
        pos = len(entries)
        for i, e in enumerate(entries):
            if e[1] < prefix_len:
                pos = i
                break
        entries.insert(pos, new)
        # move the tail down from the end (each route stays present at some address)
        return list(reversed(self._lpm_writes(t, entries, pos, len(entries))))

    def _lpm_hash_add(self, t, slots, new, mask):
        prefix, plen, aid, pword = new
        slots.begin()
        try:
            slots.set_route((prefix, plen), (aid, pword))
            out = []
            held = slots.held()
            # the length the route's bucket should have: its own, or with a fixed set the
            # least allowed length >= it; a free bank takes it if it is not held yet (with
            # banks taken as lengths come, one is kept while a longer length is held)
            want = plen if slots.fixed is None else \
                min((n for n in slots.fixed if n >= plen), default=None)
            if want is not None and want not in held and None in slots.bank_len \
                    and (slots.fixed is not None or not any(h > want for h in held)
                         or self._lpm_spare(t, slots)):
                out += self._lpm_hold(t, slots, want)
            out += self._lpm_refresh_route(t, slots, prefix, plen)
        except TableFullError:
            slots.rollback()
            raise
        slots.commit()
        return out

    @staticmethod
    def _lpm_spare(t, slots):
        """A new held length may take a free bank when it leaves one for growth (or when
        only one held length exists)."""
        return slots.bank_len.count(None) >= 2 or len(slots.held()) < 2

    def _lpm_bucket(self, slots, plen):
        """``(lo, h)``: the held length ``h`` whose entries carry routes of ``plen`` (the
        least held length ``>= plen``), ``lo`` the held length before it (-1: none)."""
        lo = -1
        for h in slots.held():
            if h >= plen:
                return lo, h
            lo = h
        return lo, None

    def _lpm_want(self, slots, q, lo, h):
        """The entry that prefix ``q`` of held length ``h`` should hold: the longest route
        of a length in ``(lo, h]`` that covers it, as ``(q, h, aid, params)``, or None."""
        kw = slots.kw
        for n in range(h, lo, -1):
            r = slots.routes.get((q & (_mask(n) << (kw - n)), n))
            if r is not None:
                return (q, h, r[0], r[1])
        return None

    @staticmethod
    def _lpm_under(kw, prefix, plen, h):
        """The prefixes of length ``h >= plen`` under ``prefix/plen``."""
        step = 1 << (kw - h)
        return range(prefix, prefix + (step << (h - plen)), step)

    @staticmethod
    def _lpm_count(slots, h):
        return sum(u for u, n in zip(slots.used, slots.bank_len) if n == h)

    def _lpm_refresh_route(self, t, slots, prefix, plen):
        """Bring every entry under route ``prefix/plen`` in its bucket to what it should be."""
        lo, h = self._lpm_bucket(slots, plen)
        if h is None:
            raise TableFullError(t.qualname, f"{prefix:#x}/{plen}",
                                 f"no bank holds /{plen} or a longer length and no bank may "
                                 f"take /{plen} (held: {slots.held()}, {t.ways} banks)")
        n = 1 << (h - plen)
        if n > 1 and (n > LPM_EXPAND_MAX or n > self._lpm_count(slots, h) + slots.free_room(h)):
            raise TableFullError(t.qualname, f"{prefix:#x}/{plen}",
                                 f"its expansion into /{h} takes {n} entries")
        out = []
        for q in self._lpm_under(slots.kw, prefix, plen, h):
            out += self._lpm_refresh(t, slots, q, lo, h)
        return out

    def _lpm_refresh(self, t, slots, q, lo, h):
        """Writes that bring the entry of prefix ``q`` of held length ``h`` to
        :meth:`_lpm_want` (none if it is already there)."""
        want = self._lpm_want(slots, q, lo, h)
        addr = slots.where.get((q, h))
        if addr is not None:
            if want == slots[addr]:
                return []
            if want is not None:                   # update in place: one atomic word
                slots.put(addr, want)
                return [(t.qualname, addr, self._lpm_word(t, want))]
            b = slots.take(addr)
            out = [(t.qualname, addr, 0)]
            if slots.used[b] == 0:                 # the bank is empty: release it
                slots.set_bank(b, None)
                out.append((f"{t.qualname}.lengths", b, 0))
            return out
        if want is None:
            return []
        return self._lpm_place(t, slots, want)

    def _lpm_word(self, t, e):
        return self._ternary_word(t, e[0], _mask(e[1]) << (t.key_width - e[1]), e[2], e[3])

    def _lpm_place(self, t, slots, new):
        """Writes that place entry ``new`` (not present) in a bank of its length: its free
        slot, else a cuckoo chain, else an unused bank."""
        prefix, plen = new[:2]
        word = self._lpm_word(t, new)
        mine = [b for b in range(t.ways) if slots.bank_len[b] == plen]
        for b in mine:
            a = slots.slot(b, prefix)
            if slots[a] is _FREE:
                slots.put(a, new)
                return [(t.qualname, a, word)]
        path = slots.cuckoo_path(mine, prefix)
        if path is not None:
            # make-before-break: the last route of the chain moves first, each move copies a
            # route to its free slot before the next write overwrites its old one, so every
            # route is present throughout (a copy answers like the original: same word)
            out = []
            for src, dst in reversed(list(zip(path, path[1:]))):
                e = slots[src]
                slots.take(src)
                slots.put(dst, e)
                out.append((t.qualname, dst, self._lpm_word(t, e)))
            slots.put(path[0], new)
            out.append((t.qualname, path[0], word))
            return out
        for b in range(t.ways):
            if slots.bank_len[b] is None:          # an unused bank takes the length first
                slots.set_bank(b, plen)
                a = slots.slot(b, prefix)
                slots.put(a, new)
                return [(f"{t.qualname}.lengths", b, 1 | plen << 1), (t.qualname, a, word)]
        raise TableFullError(t.qualname, f"{prefix:#x}/{plen}",
                             f"no bank of length {plen} has its slot free and all "
                             f"{t.ways} banks are in use")

    def _lpm_hold(self, t, slots, plen):
        """A free bank takes length ``plen`` (not held yet): the routes of lengths ``(lo,
        plen]`` move from the next held length's bucket into the new one, new entries first,
        then the old ones are brought to what the next bucket should now hold."""
        lo, hi = self._lpm_bucket(slots, plen)
        b = slots.bank_len.index(None)
        slots.set_bank(b, plen)
        out = [(f"{t.qualname}.lengths", b, 1 | plen << 1)]
        moved = sorted(r for r in slots.routes if lo < r[1] <= plen)
        for prefix, n in moved:
            out += self._lpm_refresh_route(t, slots, prefix, n)
        if hi is not None:
            for prefix, n in moved:
                if 1 << (hi - n) > LPM_EXPAND_MAX:     # never installed there (the new route)
                    continue
                for q in self._lpm_under(slots.kw, prefix, n, hi):
                    if (q, hi) in slots.where:
                        out += self._lpm_refresh(t, slots, q, plen, hi)
        return out

    def lpm_delete(self, table, prefix, prefix_len):
        t = self._table(table, "lpm")
        self._prefix(t, prefix, prefix_len)
        entries = self._lpm[table]
        if isinstance(entries, _LpmSlots):
            if (prefix, prefix_len) not in entries.routes:
                raise KeyError(f"table {table}: no route {prefix:#x}/{prefix_len}")
            # the route's entries become what covers them without it (a shorter route's
            # expansion, or nothing; emptied banks are released)
            entries.begin()
            try:
                entries.del_route((prefix, prefix_len))
                out = self._lpm_refresh_route(t, entries, prefix, prefix_len)
            except TableFullError:
                entries.rollback()
                raise
            entries.commit()
            return out
        for i, e in enumerate(entries):
            if e[:2] == (prefix, prefix_len):
                del entries[i]
                return self._lpm_writes(t, entries, i, len(entries) + 1)
        raise KeyError(f"table {table}: no route {prefix:#x}/{prefix_len}")

    def lpm_routes(self, table):
        """The routes of an LPM table as given: ``{(prefix, prefix_len): (action name,
        params)}`` (a hashed table's expansions are not routes)."""
        t = self._table(table, "lpm")
        ent = self._lpm[table]
        items = (ent.routes.items() if isinstance(ent, _LpmSlots)
                 else (((p, n), (a, w)) for p, n, a, w in ent))
        return {k: (t.actions[a - 1].name if a else None,
                    t.actions[a - 1].unpack_params(w) if a else {}) for k, (a, w) in items}

    def lpm_addresses(self, table, prefix, prefix_len):
        """Addresses of the entries route ``prefix/prefix_len`` gave (its own, or those of its
        expansion that it still decides); [] if there is no such route."""
        ent = self._lpm[self._table(table, "lpm").qualname]
        if not isinstance(ent, _LpmSlots):
            return [i for i, e in enumerate(ent) if e[:2] == (prefix, prefix_len)]
        if (prefix, prefix_len) not in ent.routes:
            return []
        lo, h = self._lpm_bucket(ent, prefix_len)
        if h is None or h - prefix_len > 16:
            return []
        return [ent.where[(q, h)] for q in self._lpm_under(ent.kw, prefix, prefix_len, h)
                if (q, h) in ent.where and self._lpm_source(ent, q, lo, h) == prefix_len]

    def _lpm_source(self, slots, q, lo, h):
        """Length of the route that decides entry ``q`` of held length ``h`` (None)."""
        kw = slots.kw
        for n in range(h, lo, -1):
            if (q & (_mask(n) << (kw - n)), n) in slots.routes:
                return n
        return None

    def lpm_entries(self, table):
        """Shadow of an LPM table: ``[(prefix, prefix_len, action name, params)]`` by address."""
        t = self._table(table, "lpm")
        return [(p, n, t.actions[a - 1].name if a else None,
                 t.actions[a - 1].unpack_params(w) if a else {})
                for p, n, a, w in self._lpm[table] if n is not None]

    # ---- defaults, multicast, registers --------------------------------------------------------
    def set_default(self, table, action, params=None):
        """The miss action of ``table`` (``action=None``: no action)."""
        t = self._table(table)
        aid, pword = self._action(t, action, params)
        return [(f"{table}.default", 0, aid | pword << t.action_bits)]

    def mcast_set(self, group, members):
        """Multicast group ``group`` (1..mcast_groups-1; 0 means unicast) sends one copy to each
        ``(port, rid)`` of ``members``; an empty list empties the group."""
        P2 = 2 * self.pipeline.n_ports
        n = self.pipeline.mcast_groups
        if isinstance(group, bool) or not isinstance(group, int) or not 1 <= group < n:
            raise ValueError(f"multicast group {group!r} out of range 1..{n - 1}")
        ports, word = 0, 0
        for m in members:
            try:
                port, rid = m
            except (TypeError, ValueError):
                raise TypeError(f"multicast group {group}: members are (port, rid) pairs, "
                                f"got {m!r}") from None
            if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < P2:
                raise ValueError(f"multicast group {group}: port {port!r} out of range "
                                 f"0..{P2 - 1}")
            if ports >> port & 1:
                raise ValueError(f"multicast group {group}: port {port} listed twice")
            _check_uint(f"multicast group {group}: rid of port {port}", rid, 16)
            ports |= 1 << port
            word |= rid << (P2 + 16 * port)
        return [("tm.mcast", group, ports | word)]

    def mcast_list_set(self, group, copies):
        """Copy-list multicast (``tm.groups``, the replication engine's format,
        ``netstor.model.replication``): group ``group`` makes the ``(port, rid)`` copies of
        ``copies`` in order, at most 16, any number on one port; ``[]`` empties it."""
        P2 = 2 * self.pipeline.n_ports
        n = self.pipeline.mcast_groups
        if isinstance(group, bool) or not isinstance(group, int) or not 1 <= group < n:
            raise ValueError(f"multicast group {group!r} out of range 1..{n - 1}")
        copies = list(copies)
        if len(copies) > GROUP_COPIES:
            raise ValueError(f"multicast group {group}: {len(copies)} copies, at most "
                             f"{GROUP_COPIES}")
        word = len(copies)
        for i, m in enumerate(copies):
            try:
                port, rid = m
            except (TypeError, ValueError):
                raise TypeError(f"multicast group {group}: copies are (port, rid) pairs, "
                                f"got {m!r}") from None
            if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < P2:
                raise ValueError(f"multicast group {group}: port {port!r} out of range "
                                 f"0..{P2 - 1}")
            _check_uint(f"multicast group {group}: rid of copy {i}", rid, 16)
            word |= (port | rid << 4) << (5 + 20 * i)
        return [("tm.groups", group, word)]

    def bank_write(self, bank, index, value):
        b = self.banks.get(bank)
        if b is None:
            raise KeyError(f"no register bank {bank!r}; banks are {sorted(self.banks)}")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < b.depth:
            raise ValueError(f"register bank {bank}: index {index!r} out of range "
                             f"0..{b.depth - 1}")
        _check_uint(f"register bank {bank}: value", value, b.width)
        return [(bank, index, value)]

    # ---- shadow from the device ----------------------------------------------------------------
    def load_shadow(self, table, words):
        """Replace the shadow of ``table`` by what the device holds: ``words`` is the table's
        raw entries, one per address, as read back. Lets a new writer (a CLI process, a
        restarted controller) take over a table another writer filled."""
        t = self._table(table)
        if len(words) != t.size:
            raise ValueError(f"table {table}: {len(words)} words for {t.size} entries")
        kw = t.key_width
        if t.kind == "exact":
            self._exact[table] = ExactShadow(
                {(w >> 1) & _mask(kw): a for a, w in enumerate(words) if w & 1},
                {a: w for a, w in enumerate(words) if w & 1})
        elif t.kind == "ternary":
            self._ternary[table] = {a: ((w >> 1) & _mask(kw), (w >> (1 + kw)) & _mask(kw))
                                    for a, w in enumerate(words) if w & 1}
        elif _hashed(t):
            slots = _LpmSlots(t, self._lpm_fixed.get(table))
            for a, w in enumerate(words):
                if not w & 1:
                    continue
                m = (w >> (1 + kw)) & _mask(kw)
                plen = bin(m).count("1")
                prefix = (w >> 1) & _mask(kw)
                b = a // t.depth
                if m != _mask(plen) << (kw - plen) or prefix & ~m:
                    raise ValueError(f"table {table}: entry {a} is not a prefix")
                if slots.bank_len[b] not in (None, plen) or slots.slot(b, prefix) != a \
                        or (prefix, plen) in slots.where:
                    raise ValueError(f"table {table}: entry {a} ({prefix:#x}/{plen}) is not "
                                     "where this writer places it")
                slots.bank_len[b] = plen
                rest = w >> (1 + 2 * kw)
                ent = (prefix, plen, rest & _mask(t.action_bits), rest >> t.action_bits)
                slots.put(a, ent)
                slots.routes[(prefix, plen)] = ent[2:]
            self._lpm[table] = slots
        else:
            entries = []
            for a, w in enumerate(words):
                if not w & 1:
                    break          # the writer keeps LPM entries packed from address 0
                m = (w >> (1 + kw)) & _mask(kw)
                plen = bin(m).count("1")
                if m != _mask(plen) << (kw - plen):
                    raise ValueError(f"table {table}: entry {a} has mask {m:#x}, not a prefix")
                rest = w >> (1 + 2 * kw)
                entries.append(((w >> 1) & _mask(kw), plen, rest & _mask(t.action_bits),
                                rest >> t.action_bits))
            if any(w & 1 for w in words[len(entries):]):
                raise ValueError(f"table {table}: valid entries after a hole; this writer keeps "
                                 "LPM entries packed from address 0 (clear the table first)")
            self._lpm[table] = entries

    # ---- decoding ------------------------------------------------------------------------------
    def decode_entry(self, table, word):
        """A raw word of ``table`` (or of ``"<table>.default"``) as a dict, for dumps."""
        default = table.endswith(".default") and table not in self.tables
        t = self._table(table[:-len(".default")] if default else table)
        kw, ab = t.key_width, t.action_bits
        if default:
            entry, out = word, {}
        else:
            out = {"valid": bool(word & 1)}
            if t.kind == "exact":
                out["key"] = self._unpack(t, (word >> 1) & _mask(kw))
                entry = word >> (1 + kw)
            else:
                v, m = (word >> 1) & _mask(kw), (word >> (1 + kw)) & _mask(kw)
                out["value"], out["mask"] = self._unpack(t, v), self._unpack(t, m)
                if t.kind == "lpm":
                    plen = bin(m).count("1")
                    if m == _mask(plen) << (kw - plen):
                        out["prefix"], out["prefix_len"] = v, plen
                entry = word >> (1 + 2 * kw)
        aid = entry & _mask(ab)
        out["action_id"] = aid
        if 1 <= aid <= len(t.actions):
            a = t.actions[aid - 1]
            out["action"], out["params"] = a.name, a.unpack_params(entry >> ab)
        else:
            out["action"], out["params"] = None, {}
        return out

    @staticmethod
    def _unpack(t, word):
        parts = []
        for k in t.key:
            parts.append(word & _mask(k.width))
            word >>= k.width
        return parts
