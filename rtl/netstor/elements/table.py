"""``Table``: exact (hashed, multi-way), ternary (TCAM) or LPM match; on a hit the entry's
action runs with the entry's parameters, on a miss the default action (run-time settable).

Gateware (match and action separated: the match yields an entry, the action word sits in RAM):

* exact, latency 3: c0 an H3 slot per way addresses that way's RAM (``ways`` RAMs of
  ``valid | key | action | params``, the RAM's address register is the stage's); c1 the ways'
  keys are compared, registered; c2 the first way that hits (else the default action) runs its
  action, registered. The host shares each way RAM's second port (a write in one cycle).
  Way ``w``'s slot is ``h3_slot(key, w, low_identity=True)`` (:mod:`netstor.gateware.h3`: the
  key's low ``log2 depth`` bits XOR an independent random GF(2) hash of the other bits per
  way, so keys that collide in one way do not collide in the others and the driver can move
  entries between ways, cuckoo hashing; ids 0..size-1 fill the table exactly).
* ternary / LPM of more than :data:`FLOP_ENTRIES` entries, latency ``L + 2``: the RAM TCAM
  (:class:`netstor.gateware.tcam.Tcam`, key cut into ``tcam_chunk``-bit chunks, one bitmap RAM
  per chunk, AND, a pipelined lowest-index priority tree of fan-in 8) yields the lowest
  matching index after ``L`` = 1 + (tree levels - 1) cycles; the index addresses the action
  RAM; the action (or the default) runs, registered. A host write rewrites the entry's bitmap
  bits through the RAMs' second port (two read-modify-write passes over the ``2**tcam_chunk``
  addresses: clear, then set; the action RAM is written between them), so it never stalls a
  lookup and takes ~``4 * 2**tcam_chunk`` cycles; a lookup sees the old entry, no entry or the
  new entry, never a mix (formal/props_table.py).
* LPM of at least :data:`LPM_HASH_MIN` entries (slots), latency 4 up to 32 banks, ``3 + tree
  stages`` beyond (6 at 64): hash banks (:class:`netstor.gateware.lpm.LpmHash`):
  ``lpm_banks`` banks of ``size / lpm_banks`` slots in RAM, each serving the prefix length in
  its run-time register ``<table>.lengths``, probed in parallel, the longest hit wins (up to
  32 banks in one registered stage: a flip-flop per bank pair says which bank's length wins,
  so no length compare sits on the lookup path; beyond, a pipelined max tree); the entry
  word carries its action. The host (driver) expands prefix lengths
  no bank holds into the next held length (:mod:`netstor.driver.tables`). The host writes an entry in one cycle (second RAM port), so a lookup sees the entry
  as it was or as it is after the write. Address = ``bank * depth + slot``, slot =
  ``lpm_slot(key & prefix mask, bank)`` (an H3 hash per bank; the driver places routes).
* ternary / LPM of at most :data:`FLOP_ENTRIES` entries (the trust guard's), latency 2: entries
  in flip-flops compared in parallel, the match vector registered, the lowest matching
  address's action runs, registered; a host write lands in one cycle.

Entry words (the spec's "Entry encodings"): exact ``valid | key | action | params``;
ternary/LPM ``valid | value | mask | action | params`` (bit 0 first). Counters
``<table>.hit`` / ``.miss`` count lookups whose ``when`` held.
"""
from __future__ import annotations

import collections

from amaranth.hdl import Array, Cat, Const, Mux, Signal
from amaranth.lib import data
from amaranth.lib.memory import Memory

from netstor.gateware.h3 import H3Slots, h3_hw, h3_slot
from netstor.gateware.kit import HwEnv, apply_sets, or_tree, phv_signal
from netstor.gateware.lpm import LpmHash, lpm_slot, prefix_mask
from netstor.gateware.tcam import Tcam
from netstor.lang.element import Element
from netstor.lang.expr import Cat as ECat, Param, as_expr
from netstor.lang.program import action_id

__all__ = ["Table", "LPM_HASH_MIN", "LPM_BANKS"]

#: LPM tables of at least this many entries use hash banks (:mod:`netstor.gateware.lpm`);
#: smaller ones the RAM TCAM (or flip-flops at 16 or fewer)
LPM_HASH_MIN = 512
#: hash banks of an LPM table unless ``lpm_banks`` says otherwise
LPM_BANKS = 32


def _mask(w):
    return (1 << w) - 1


def _expr_name(e):
    return getattr(e, "name", repr(e))


class Table(Element):
    """A match table: ``kind`` exact (``ways``-way hashed), ternary (TCAM: value/mask, lowest
    address wins) or LPM (one key field; the host keeps longer prefixes at lower addresses);
    ``key`` expressions (concatenated, first lowest); ``actions``; ``size`` entries; an
    optional ``default`` action (with ``default_params``) on a miss, settable at run time."""
    KINDS = ("exact", "ternary", "lpm")
    egress_ok = True
    is_table = True

    def __init__(self, name, *, kind, key, actions, size, default=None, default_params=None,
                 ways=4, when=None, tcam_chunk=5, lpm_banks=None):
        super().__init__(name, when)
        if not 1 <= tcam_chunk <= 12:
            raise ValueError(f"table {name}: tcam_chunk must be 1..12 bits")
        #: key bits per RAM of the ternary/LPM match engine (5: 32-word LUTRAM, 9: BRAM)
        self.tcam_chunk = tcam_chunk
        if kind not in self.KINDS:
            raise ValueError(f"table {name}: kind must be one of {self.KINDS}, got {kind!r}")
        self.kind = kind
        self.key = [as_expr(k) for k in (key if isinstance(key, (list, tuple)) else [key])]
        if not self.key:
            raise ValueError(f"table {name}: empty key")
        if kind == "lpm" and len(self.key) != 1:
            raise ValueError(f"table {name}: an LPM table has exactly one key field")
        self.actions = list(actions)
        if not self.actions:
            raise ValueError(f"table {name}: no actions")
        names = [a.name for a in self.actions]
        if len(set(names)) != len(names):
            raise ValueError(f"table {name}: duplicate action names")
        if size <= 0:
            raise ValueError(f"table {name}: size must be positive")
        if kind == "exact":
            if ways <= 0 or size % ways or (size // ways) & (size // ways - 1):
                raise ValueError(f"table {name}: exact tables need size = ways * 2**n")
            self.ways = ways
        elif kind == "lpm" and size >= LPM_HASH_MIN:
            # hash banks: ``ways`` is the number of banks (each one prefix length at a time)
            banks = LPM_BANKS if lpm_banks is None else lpm_banks
            if not 2 <= banks <= 256 or size % banks or (size // banks) & (size // banks - 1) \
                    or size // banks < 2:
                raise ValueError(f"table {name}: an LPM table of {LPM_HASH_MIN}+ entries is "
                                 "hashed: size = lpm_banks * 2**n (n >= 1), 2 <= lpm_banks <= 256")
            self.ways = banks
        else:
            if lpm_banks is not None:
                raise ValueError(f"table {name}: lpm_banks is for LPM tables of "
                                 f"{LPM_HASH_MIN}+ entries")
            self.ways = 1
        self.size = size
        if default is not None and default not in self.actions:
            raise ValueError(f"table {name}: default action must be one of its actions")
        self.default = default
        self.default_params = dict(default_params or {})

    @property
    def lpm_hashed(self):
        """An LPM table in hash banks (:data:`LPM_HASH_MIN` entries or more): addresses are
        ``bank * depth + slot``; the banks' prefix lengths sit in memory ``<table>.lengths``."""
        return self.kind == "lpm" and self.ways > 1

    @property
    def length_bits(self):
        """Width of a bank's length field (``<table>.lengths`` is ``enable(1) | length``)."""
        return max(1, self.key_width.bit_length())

    @property
    def key_width(self):
        return sum(k.width for k in self.key)

    @property
    def depth(self):
        """Entries per way."""
        return self.size // self.ways

    @property
    def param_width(self):
        return max([a.param_width for a in self.actions] + [1])

    @property
    def action_bits(self):
        # action id 0 means "no action"; ids 1..n are the actions in declaration order
        return max(1, len(self.actions).bit_length())

    def action_id(self, name):
        return action_id(self.qualname, self.actions, name)

    @property
    def slot_bits(self):
        """Bits of a slot within a way (exact tables): ``log2(depth)``."""
        return (self.depth - 1).bit_length()

    def way_index(self, key_value, way):
        """Slot of ``key_value`` in ``way`` (exact tables): the way's H3 hash
        (:func:`netstor.gateware.h3.h3_slot`, index = way)."""
        return h3_slot(key_value, way, self.key_width, self.slot_bits, low_identity=True)

    def pack_key(self, values):
        """Pack key component values (list, in key order) into one integer (first lowest)."""
        if len(values) != len(self.key):
            raise ValueError(f"table {self.qualname}: key has {len(self.key)} part(s), "
                             f"got {len(values)}")
        word, shift = 0, 0
        for k, v in zip(self.key, values):
            v = int(v)
            if v < 0 or v >> k.width:
                raise ValueError(f"table {self.qualname}: key value {v} does not fit in "
                                 f"{k.width} bits")
            word |= v << shift
            shift += k.width
        return word

    @property
    def bench_key(self):
        return f"table_{self.kind}"

    @property
    def bench_label(self):
        return f"{super().bench_label} ({self.kind}, {self.size} entries)"

    # ---- language ----------------------------------------------------------------------------
    def reads(self):
        return list(self.key) + [s.value for a in self.actions for s in a.sets]

    def writes(self):
        return [s.field for a in self.actions for s in a.sets]

    def set_items(self):
        return [s for a in self.actions for s in a.sets]

    def schema(self, pipeline):
        return {
            "kind": self.kind,
            "egress": any(self is e for e in pipeline.egress_elements),
            "key": [{"expr": _expr_name(k), "width": k.width} for k in self.key],
            "key_width": self.key_width,
            "size": self.size,
            "ways": self.ways,
            "depth": self.depth,
            "action_bits": self.action_bits,
            "param_width": self.param_width,
            "actions": [{"name": a.name, "id": self.action_id(a.name),
                         "params": [{"name": p, "width": w} for p, w in a.params.items()]}
                        for a in self.actions],
            "default": self.default.name if self.default else None,
            "hash": ("H3: slot bit j = parity(key & M(way, j)), M = splitmix64(way * 2**16 + j) "
                     "mod 2**kw (64-bit chunk c of wider keys: splitmix64(c * 2**32 + way * "
                     "2**16 + j)) with its low log2(depth) bits replaced by bit j"
                     if self.kind == "exact"
                     else "H3: slot bit j = parity(key & prefix mask(bank length) & "
                     "M(bank, j)), M = splitmix64(bank * 2**16 + j) mod 2**kw"
                     if self.lpm_hashed else None),
        }

    # ---- golden model ------------------------------------------------------------------------
    @property
    def entry_width(self):
        kw = self.key_width
        return 1 + (kw if self.kind == "exact" else 2 * kw) + self.action_bits + self.param_width

    def model_memories(self):
        reset = 0
        if self.default is not None:
            reset = self.action_id(self.default.name) | (
                self.default.pack_params(self.default_params) << self.action_bits)
        mems = [(self.qualname, self.size, self.entry_width, 0),
                (f"{self.qualname}.default", 1, self.action_bits + self.param_width, reset)]
        if self.lpm_hashed:
            mems.append((f"{self.qualname}.lengths", self.ways, 1 + self.length_bits, 0))
        return mems

    def model_counters(self):
        return [f"{self.qualname}.hit", f"{self.qualname}.miss"]

    def evaluate(self, model, phv, env):
        _lookup(model, self, phv, env)

    # ---- compiled model ----------------------------------------------------------------------
    def compile(self, cg):
        _compile(cg, self)

    # ---- gateware ----------------------------------------------------------------------------
    def elaborate(self, m, pipeline, valid_in, phv_in, csr, *, prefix):
        return _build(m, self, pipeline, valid_in, phv_in, csr, prefix)


def _lookup(model, t, phv, env):
    key, shift = 0, 0
    for k in t.key:
        key |= (k.eval(env) & _mask(k.width)) << shift
        shift += k.width
    kw, ab = t.key_width, t.action_bits
    mem = model.memory(t.qualname)
    entry = None
    if t.kind == "exact":
        # spec: "hit if an entry with valid and key == pack(key) exists". Reading: the
        # entry must sit at the key's slot in its way (the encoding's placement rule),
        # as a hashed lookup finds it; ways are tried from 0, the first match wins.
        for way in range(t.ways):
            addr = way * t.depth + t.way_index(key, way)
            w = mem.words[addr]
            if w & 1 and (w >> 1) & _mask(kw) == key:
                entry = w >> (1 + kw)
                break
    elif t.lpm_hashed:
        entry = _lpm_probe(t, mem.words, model.memory(f"{t.qualname}.lengths").words, key)
    else:
        for w in mem.words:
            if not w & 1:
                continue
            value, mask = (w >> 1) & _mask(kw), (w >> (1 + kw)) & _mask(kw)
            if key & mask == value & mask:
                entry = w >> (1 + 2 * kw)
                break
    if entry is None:
        model.count(f"{t.qualname}.miss")
        entry = model.memory(f"{t.qualname}.default").words[0]
    else:
        model.count(f"{t.qualname}.hit")
    aid, pword = entry & _mask(ab), entry >> ab
    if aid == 0 or aid > len(t.actions):
        return          # 0: no action; an id beyond the last action (a bad word from
        # the host; the spec does not define it) does nothing either
    action = t.actions[aid - 1]
    env.params = action.unpack_params(pword)
    writes = [(s.field.name, s.value.eval(env)) for s in action.sets]
    env.params = {}
    model.assign(phv, writes)


def _lpm_probe(t, words, lengths, key):
    """Hashed LPM (spec): every enabled bank ``b`` of length ``L`` holds at most one
    candidate, the word at its slot ``lpm_slot(key & pm(L), b)``; it hits
    when valid, its mask is ``pm(L)`` and ``key & pm(L) == value & pm(L)``. The hit of the
    longest length wins, the lowest bank on a tie. Returns the entry part or None."""
    kw, depth, lb = t.key_width, t.depth, t.length_bits
    km = _mask(kw)
    best, best_len = None, -1
    for b in range(t.ways):
        lw = lengths[b]
        if not lw & 1:
            continue
        length = (lw >> 1) & _mask(lb)
        if length <= best_len:
            continue
        pm = prefix_mask(length, kw)
        w = words[b * depth + lpm_slot(key & pm, b, kw, depth)]
        if w & 1 and (w >> (1 + kw)) & km == pm and ((w >> 1) ^ key) & pm == 0:
            best, best_len = w >> (1 + 2 * kw), length
    return best


#: keys a compiled table remembers (slots of an exact table, results of a ternary/LPM one)
#: before it forgets them all
CACHE_KEYS = 1 << 14
_MISS = object()


def _exact_slots(t):
    """``(cache, slots)``: ``slots(key)`` -> the key's address in every way (the hashed
    placement :func:`_lookup` probes), remembered in ``cache`` (a pure function of the key:
    never stale)."""
    depth, sbits = t.depth, t.slot_bits
    h3 = H3Slots(t.key_width, sbits, t.ways, low_identity=True)
    fields = [(way * depth, way * sbits, depth - 1) for way in range(t.ways)]
    cache = {}

    def slots(key):
        x = h3.packed(key)
        out = tuple(base + (x >> sh & m) for base, sh, m in fields)
        if len(cache) >= CACHE_KEYS:
            cache.clear()
        cache[key] = out
        return out
    return cache, slots


def _scanner(t, words):
    """``(cache, scan, invalidate)`` for a ternary/LPM table: ``scan(key)`` -> the entry part
    (action | params) of the lowest valid entry that matches, or None, from the list of valid
    entries (rebuilt after a host write) and remembered in ``cache`` until the next write."""
    kw = t.key_width
    km = (1 << kw) - 1
    state = [None]
    cache = {}

    def invalidate():
        state[0] = None
        cache.clear()

    def scan(key):
        valid = state[0]
        if valid is None:
            valid = state[0] = [(((w >> 1) & km) & ((w >> (1 + kw)) & km),
                                 (w >> (1 + kw)) & km, w >> (1 + 2 * kw))
                                for w in words if w & 1]
        ent = None
        for value, mask, entry in valid:
            if key & mask == value:
                ent = entry
                break
        if len(cache) >= CACHE_KEYS:
            cache.clear()
        cache[key] = ent
        return ent
    return cache, scan, invalidate


def _compile(cg, t):
    """What :func:`_lookup` does, as straight-line code (see :meth:`Element.compile`)."""
    kw, ab = t.key_width, t.action_bits
    key = cg.tmp("key")
    cg.emit(f"{key} = {cg.expr(ECat(*t.key))}")
    words = cg.words(t.qualname)
    ent = cg.tmp("ent")
    if t.kind == "exact":
        cache, slots = _exact_slots(t)
        sl = cg.tmp("slots")
        cg.emit(f"{sl} = {cg.const(cache, 'slots_' + t.qualname)}.get({key})")
        with cg.block(f"if {sl} is None:"):
            cg.emit(f"{sl} = {cg.const(slots, 'slotfn_' + t.qualname)}({key})")
        w = cg.tmp("w")

        def probe(way):            # ways from 0: the first match wins
            cg.emit(f"{w} = {words}[{sl}[{way}]]")
            with cg.block(f"if {w} & 1 and ({w} >> 1) & {hex((1 << kw) - 1)} == {key}:"):
                cg.emit(f"{ent} = {w} >> {1 + kw}")
            with cg.block("else:"):
                if way + 1 < t.ways:
                    probe(way + 1)
                else:
                    cg.emit(f"{ent} = None")
        probe(0)
    elif t.lpm_hashed:
        words_l, lens_l = (cg.model.memory(t.qualname).words,
                           cg.model.memory(f"{t.qualname}.lengths").words)

        def probe(k):
            return _lpm_probe(t, words_l, lens_l, k)
        cg.emit(f"{ent} = {cg.const(probe, 'probe_' + t.qualname)}({key})")
    else:
        cache, scan, invalidate = _scanner(t, cg.model.memory(t.qualname).words)
        cg.on_write(t.qualname, invalidate)
        miss = cg.const(_MISS, "MISS")
        cg.emit(f"{ent} = {cg.const(cache, 'results_' + t.qualname)}.get({key}, {miss})")
        with cg.block(f"if {ent} is {miss}:"):
            cg.emit(f"{ent} = {cg.const(scan, 'scan_' + t.qualname)}({key})")
    with cg.block(f"if {ent} is None:"):
        cg.count(f"{t.qualname}.miss")
        cg.emit(f"{ent} = {cg.words(t.qualname + '.default')}[0]")
    with cg.block("else:"):
        cg.count(f"{t.qualname}.hit")
    aid = cg.tmp("aid")
    cg.emit(f"{aid} = {ent} & {hex((1 << ab) - 1)}")
    # 0: no action; an id beyond the last action does nothing either
    for i, a in enumerate(t.actions):
        with cg.block(f"{'if' if i == 0 else 'elif'} {aid} == {i + 1}:"):
            uses = collections.Counter(r.name for s in a.sets for r in s.value.refs()
                                       if isinstance(r, Param))
            params, shift = {}, 0
            for p, pw in a.params.items():
                src = f"(({ent} >> {ab + shift}) & {hex((1 << pw) - 1)})"
                if uses[p] == 1:               # read once: in place
                    params[p] = src
                elif uses[p]:
                    params[p] = cg.tmp(p)
                    cg.emit(f"{params[p]} = {src}")
                shift += pw
            with cg.scope(params=params):
                cg.assign([(s.field.name, s.value) for s in a.sets])


def _run_action(m, e, pipeline, phv, nxt, action_id, params_word):
    """Drive ``nxt`` = ``phv`` with the action ``action_id`` applied (0 = no action)."""
    m.d.comb += nxt.eq(phv)
    with m.Switch(action_id):
        for i, a in enumerate(e.actions):
            with m.Case(i + 1):
                params, shift = {}, 0
                for p, w in a.params.items():
                    params[p] = params_word[shift:shift + w]
                    shift += w
                apply_sets(m, pipeline, a.sets, phv, nxt, HwEnv(pipeline, phv, params))


def _default_regs(m, e, csr, prefix):
    """The table's default action (run-time settable through memory ``<table>.default``)."""
    ab, pw = e.action_bits, e.param_width
    init_id = e.action_id(e.default.name) if e.default else 0
    init_params = e.default.pack_params(e.default_params) if e.default else 0
    dflt = Signal(ab + pw, init=init_id | (init_params << ab), name=f"{prefix}_default")
    port = csr.memory(f"{e.qualname}.default", ab + pw, 1,
                      doc=f"default action of {e.qualname}: action({ab}) | params({pw})",
                      kind="default", table=e.qualname)
    m.d.comb += port.rdata.eq(dflt)
    m.d.sync += port.ack.eq(port.req & ~port.ack)
    with m.If(port.req & port.we & ~port.ack):
        m.d.sync += dflt.eq(port.wdata)
    return dflt[:ab], dflt[ab:]


def _delay(m, sig, n, name, *, reset_less=True):
    """``sig`` delayed by ``n`` clocks (a register chain; ``sig`` itself when ``n`` is 0)."""
    for k in range(n):
        shape = sig.shape() if not isinstance(sig, data.View) else sig.shape()
        d = Signal(shape, name=f"{name}_d{k + 1}", reset_less=reset_less)
        m.d.sync += d.eq(sig)
        sig = d
    return sig


def _finish(m, e, pipeline, csr, prefix, v, phv, when, hit, action, params, d_action,
            d_params):
    """Last stage: the entry's action (hit) or the default one (miss) on ``phv``, counters,
    registered outputs."""
    ab, pw = e.action_bits, e.param_width
    sel_action = Signal(ab, name=f"{prefix}_sel_action")
    sel_params = Signal(pw, name=f"{prefix}_sel_params")
    m.d.comb += [sel_action.eq(Mux(hit, action, d_action)),
                 sel_params.eq(Mux(hit, params, d_params))]
    with m.If(~when):
        m.d.comb += sel_action.eq(0)
    nxt = phv_signal(pipeline, f"{prefix}_next")
    _run_action(m, e, pipeline, phv, nxt, sel_action, sel_params)
    hit_ctr = csr.counter(f"{e.qualname}.hit", doc=f"lookups of {e.qualname} that hit")
    miss_ctr = csr.counter(f"{e.qualname}.miss", doc=f"lookups of {e.qualname} that missed")
    m.d.comb += [hit_ctr.eq(v & when & hit), miss_ctr.eq(v & when & ~hit)]
    valid_out = Signal(name=f"{prefix}_valid")
    phv_out = Signal(data.StructLayout(pipeline.phv.layout()), name=f"{prefix}_phv",
                     reset_less=True)
    m.d.sync += [valid_out.eq(v), phv_out.eq(nxt)]
    return valid_out, phv_out


def _build(m, e, pipeline, valid_in, phv_in, csr, prefix):
    ab, pw, kw = e.action_bits, e.param_width, e.key_width
    env = HwEnv(pipeline, phv_in)
    key = Signal(kw, name=f"{prefix}_key")
    m.d.comb += key.eq(Cat(*[k.hw(env)[:k.width] for k in e.key]))
    when = Signal(name=f"{prefix}_when")
    m.d.comb += when.eq(e.when.hw(env).any())
    d_action, d_params = _default_regs(m, e, csr, prefix)
    if e.kind == "exact":
        return _build_exact(m, e, pipeline, valid_in, phv_in, csr, prefix, key, when,
                            d_action, d_params)
    if e.lpm_hashed:
        return _build_lpm_hash(m, e, pipeline, valid_in, phv_in, csr, prefix, key, when,
                               d_action, d_params)
    if e.size <= FLOP_ENTRIES:
        return _build_ternary_ff(m, e, pipeline, valid_in, phv_in, csr, prefix, key, when,
                                 d_action, d_params)
    return _build_ternary(m, e, pipeline, valid_in, phv_in, csr, prefix, key, when,
                          d_action, d_params)


#: ternary/LPM tables of at most this many entries keep their entries in flip-flops (a
#: parallel compare is smaller than the RAM engine's fixed cost; the trust guard's 8 entries)
FLOP_ENTRIES = 16


def _build_lpm_hash(m, e, pipeline, valid_in, phv_in, csr, prefix, key, when, d_action,
                    d_params):
    """A large LPM table: the hash-bank engine (:class:`netstor.gateware.lpm.LpmHash`) gives
    the longest hit's action word after ``L`` cycles (registered); its action (hit) or the
    default one runs, registered (``L + 1``). Host: entry writes land in one cycle (acked the
    next), entry reads take 3; ``<table>.lengths`` is a register file (one cycle)."""
    ab, pw, kw = e.action_bits, e.param_width, e.key_width
    ew = 1 + 2 * kw + ab + pw
    banks, depth = e.ways, e.depth
    port = csr.memory(e.qualname, ew, e.size,
                      doc=f"{e.qualname}: lpm, {banks} hash banks x {depth}, longest prefix "
                          f"wins; valid | value({kw}) | mask({kw}) | action({ab}) | params({pw})",
                      kind="lpm", table=e.qualname, ways=banks)
    lport = csr.memory(f"{e.qualname}.lengths", 1 + e.length_bits, banks,
                       doc=f"prefix length of each hash bank of {e.qualname}: "
                           f"enable(1) | length({e.length_bits})",
                       kind="lpm_lengths", table=e.qualname)
    eng = LpmHash(m, banks=banks, depth=depth, kw=kw, pw=ab + pw, key=key,
                  prefix=f"{prefix}_lpm")
    L = eng.latency
    # entries: a write lands in the request's first cycle, acked the next; a read has its
    # word (a register) two cycles after the address
    busy = Signal(2, name=f"{prefix}_host_busy")
    m.d.comb += [eng.wr_addr.eq(port.addr), eng.wr_data.eq(port.wdata),
                 eng.rd_addr.eq(port.addr), port.rdata.eq(eng.rd_data),
                 eng.wr_en.eq(port.req & port.we & (busy == 0) & ~port.ack)]
    m.d.sync += port.ack.eq(0)
    with m.If(port.req & ~port.ack):
        with m.If(port.we | (busy == 2)):
            m.d.sync += [port.ack.eq(1), busy.eq(0)]
        with m.Else():
            m.d.sync += busy.eq(busy + 1)
    # lengths: a register file
    m.d.comb += [eng.len_addr.eq(lport.addr), eng.len_wdata.eq(lport.wdata),
                 eng.len_we.eq(lport.req & lport.we & ~lport.ack), lport.rdata.eq(eng.len_rdata)]
    m.d.sync += lport.ack.eq(lport.req & ~lport.ack)
    vL = _delay(m, valid_in, L, f"{prefix}_v", reset_less=False)
    phvL = _delay(m, phv_in, L, f"{prefix}_phv")
    whenL = _delay(m, when, L, f"{prefix}_when")
    vo, po = _finish(m, e, pipeline, csr, prefix, vL, phvL, whenL, eng.hit, eng.payload[:ab],
                     eng.payload[ab:], d_action, d_params)
    return vo, po, L + 1


def _build_ternary_ff(m, e, pipeline, valid_in, phv_in, csr, prefix, key, when, d_action,
                      d_params):
    """A small ternary/LPM table in flip-flops. c0: every entry is compared in parallel and
    the match vector registered; c1: the lowest matching entry (a carry chain and an AND-OR
    tree) runs its action, registered. Latency 2. The host writes an entry in one cycle."""
    ab, pw, kw = e.action_bits, e.param_width, e.key_width
    n = e.size
    ew = 1 + 2 * kw + ab + pw
    port = csr.memory(e.qualname, ew, n,
                      doc=f"{e.qualname}: {e.kind}, {n} entries, lowest address wins; "
                          f"valid | value({kw}) | mask({kw}) | action({ab}) | params({pw})",
                      kind=e.kind, table=e.qualname)
    ents = Array(Signal(ew, name=f"{prefix}_ent{i}") for i in range(n))
    match = Signal(n, name=f"{prefix}_match")
    for i in range(n):
        ent = ents[i]
        value, mask = ent[1:1 + kw], ent[1 + kw:1 + 2 * kw]
        m.d.comb += match[i].eq(ent[0] & (((key ^ value) & mask) == 0))
    match1 = Signal(n, name=f"{prefix}_match1", reset_less=True)
    m.d.sync += match1.eq(match)
    m.d.sync += port.ack.eq(port.req & ~port.ack)
    m.d.comb += port.rdata.eq(ents[port.addr])
    with m.If(port.req & port.we & ~port.ack):
        m.d.sync += ents[port.addr].eq(port.wdata)
    # the entries' action words are registered too, so c1 sees them aligned with match1
    acts1 = [Signal(ab + pw, name=f"{prefix}_act1_{i}", reset_less=True) for i in range(n)]
    for i in range(n):
        m.d.sync += acts1[i].eq(ents[i][1 + 2 * kw:])
    # lowest matching address wins: isolate the lowest set bit (x & -x), then an AND-OR tree
    first = Signal(n, name=f"{prefix}_first")
    m.d.comb += first.eq(match1 & (~match1 + 1)[:n])
    sel = or_tree([Mux(first[i], acts1[i], 0) for i in range(n)])
    v1 = _delay(m, valid_in, 1, f"{prefix}_v", reset_less=False)
    phv1, when1 = _delay(m, phv_in, 1, f"{prefix}_phv"), _delay(m, when, 1, f"{prefix}_when")
    vo, po = _finish(m, e, pipeline, csr, prefix, v1, phv1, when1, match1.any(), sel[:ab],
                     sel[ab:], d_action, d_params)
    return vo, po, 2


def _build_exact(m, e, pipeline, valid_in, phv_in, csr, prefix, key, when, d_action, d_params):
    """c0: an H3 slot per way addresses that way's RAM (the RAM's address register); c1: the
    ways' keys are compared, registered; c2: the first way that hits (else the default) runs
    its action, registered. Latency 3. The host shares each way's second port (a write lands
    in one cycle; a read has its data the next)."""
    ab, pw, kw = e.action_bits, e.param_width, e.key_width
    ew = 1 + kw + ab + pw
    depth, ways = e.depth, e.ways
    port = csr.memory(e.qualname, ew, e.size,
                      doc=f"{e.qualname}: exact, {ways} ways x {depth}; "
                          f"valid | key({kw}) | action({ab}) | params({pw})",
                      kind="exact", table=e.qualname, ways=ways)
    sbits = max(1, (depth - 1).bit_length())
    v1, phv1 = _delay(m, valid_in, 1, f"{prefix}_v", reset_less=False), \
        _delay(m, phv_in, 1, f"{prefix}_phv")
    when1, key1 = _delay(m, when, 1, f"{prefix}_when"), _delay(m, key, 1, f"{prefix}_key")
    rd_host, hits, ents = [], [], []
    for w in range(ways):
        mem = Memory(shape=ew, depth=depth, init=[])
        m.submodules[f"{prefix}_way{w}"] = mem
        rp = mem.read_port()
        hp = mem.read_port()
        wp = mem.write_port()
        slot = h3_hw(key, w, kw, sbits, low_identity=True) if depth > 1 else Const(0, 1)
        m.d.comb += rp.addr.eq(slot)
        hit_addr = port.addr[sbits:] == w if ways > 1 else Const(1, 1)
        haddr = port.addr[:sbits]
        m.d.comb += [
            wp.addr.eq(haddr), wp.data.eq(port.wdata),
            wp.en.eq(port.req & port.we & ~port.ack & hit_addr),
            hp.addr.eq(haddr),
        ]
        rd_host.append(hp.data)
        ent = rp.data
        h = Signal(name=f"{prefix}_hit2_{w}")
        a = Signal(ab + pw, name=f"{prefix}_act2_{w}", reset_less=True)
        m.d.sync += [h.eq(ent[0] & (ent[1:1 + kw] == key1)), a.eq(ent[1 + kw:])]
        hits.append(h)
        ents.append(a)
    # host access: writes land in one cycle; reads have the data one cycle after the address
    pend = Signal(name=f"{prefix}_host_pend")
    m.d.sync += pend.eq(port.req & ~pend & ~port.ack)
    m.d.sync += port.ack.eq(0)
    with m.If(pend):
        m.d.sync += port.ack.eq(1)
    way_sel = port.addr[sbits:] if ways > 1 else Const(0, 1)
    m.d.comb += port.rdata.eq(Array(rd_host)[way_sel])
    with m.If(port.ack):
        m.d.sync += pend.eq(0)
    v2 = _delay(m, v1, 1, f"{prefix}_v1", reset_less=False)
    phv2, when2 = _delay(m, phv1, 1, f"{prefix}_phv1"), _delay(m, when1, 1, f"{prefix}_when1")
    # first hit way wins
    hit = Signal(name=f"{prefix}_hit")
    sel = Signal(ab + pw, name=f"{prefix}_sel")
    m.d.comb += [hit.eq(Cat(*hits).any()), sel.eq(0)]
    for w in reversed(range(ways)):
        with m.If(hits[w]):
            m.d.comb += sel.eq(ents[w])
    vo, po = _finish(m, e, pipeline, csr, prefix, v2, phv2, when2, hit, sel[:ab], sel[ab:],
                     d_action, d_params)
    return vo, po, 3


def _build_ternary(m, e, pipeline, valid_in, phv_in, csr, prefix, key, when, d_action,
                   d_params):
    """Ternary and LPM: the match engine (:class:`netstor.gateware.tcam.Tcam`) yields the
    lowest matching entry's index after ``L`` cycles; the index addresses the action RAM
    (``L + 1``); the entry's action (hit) or the default one runs, registered (``L + 2``)."""
    ab, pw, kw = e.action_bits, e.param_width, e.key_width
    n = e.size
    ew = 1 + 2 * kw + ab + pw
    port = csr.memory(e.qualname, ew, n,
                      doc=f"{e.qualname}: {e.kind}, {n} entries, lowest address wins; "
                          f"valid | value({kw}) | mask({kw}) | action({ab}) | params({pw})",
                      kind=e.kind, table=e.qualname)
    tc = Tcam(m, n=n, kw=kw, key=key, chunk=e.tcam_chunk, prefix=f"{prefix}_tcam")
    L = tc.latency
    # the entries' value/mask (host read-back) and action words, each in a RAM
    vm = Memory(shape=1 + 2 * kw, depth=n, init=[])
    act = Memory(shape=ab + pw, depth=n, init=[])
    m.submodules[f"{prefix}_vm"] = vm
    m.submodules[f"{prefix}_act"] = act
    arp = act.read_port()
    m.d.comb += arp.addr.eq(tc.index)
    vm_r, vm_w = vm.read_port(), vm.write_port()
    act_r, act_w = act.read_port(), act.write_port()
    wr = port.req & port.we
    m.d.comb += [
        tc.upd_req.eq(wr), tc.upd_index.eq(port.addr), tc.upd_valid.eq(port.wdata[0]),
        tc.upd_value.eq(port.wdata[1:1 + kw]), tc.upd_mask.eq(port.wdata[1 + kw:1 + 2 * kw]),
        vm_r.addr.eq(port.addr), vm_w.addr.eq(port.addr), vm_w.data.eq(port.wdata[:1 + 2 * kw]),
        act_r.addr.eq(port.addr), act_w.addr.eq(port.addr), act_w.data.eq(port.wdata[1 + 2 * kw:]),
        vm_w.en.eq(wr & tc.upd_mid), act_w.en.eq(wr & tc.upd_mid),
    ]
    rack = Signal(name=f"{prefix}_host_rack")
    m.d.sync += rack.eq(port.req & ~port.we & ~rack)
    m.d.comb += [port.ack.eq(rack | (wr & tc.upd_done)), port.rdata.eq(Cat(vm_r.data, act_r.data))]
    vL = _delay(m, valid_in, L + 1, f"{prefix}_v", reset_less=False)
    phvL = _delay(m, phv_in, L + 1, f"{prefix}_phv")
    whenL = _delay(m, when, L + 1, f"{prefix}_when")
    hitL = _delay(m, tc.hit, 1, f"{prefix}_hit")
    vo, po = _finish(m, e, pipeline, csr, prefix, vL, phvL, whenL, hitL, arp.data[:ab],
                     arp.data[ab:], d_action, d_params)
    return vo, po, L + 2
