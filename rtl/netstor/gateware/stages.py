"""Match-action stages elaborated from program elements.

Every element becomes a fixed-latency pipeline section that accepts one PHV per clock and never
stalls (there is no ready: the pipeline is a shift of ``(valid, phv)`` pairs). ``build_element``
returns ``(valid_out, phv_out, latency)``.

=============== ======= ==========================================================================
element          cycles  structure
=============== ======= ==========================================================================
Compute          1       parallel assignments, registered
Hash             1       CRC-32 as an XOR matrix (affine over GF(2)), registered
Table exact      2       c0: per-way CRC slot -> BRAM read; c1: compare keys, pick first hit
                         way (or the default action), run the action, register
Table ternary/   2       c0: all entries compared in parallel (entries in flip-flops), match
LPM                      vector registered; c1: priority encode, action, register
RegisterOp       2       c0: index -> read port (transparent for the write port);
                         c1: update(old), write, result; so packet n+1 always sees packet n's
                         write (no lost update at one access per clock)
Rank             L + 1   the XLS ranking core (``netstor.hls.RankingCore``, L = its pipeline
                         latency, 8 today) fed from the PHV; the PHV waits in an L-deep shift
                         register; the results are merged and registered
=============== ======= ==========================================================================

Independent elements share a stage (:meth:`netstor.lang.Pipeline.stages`, elaborated by
:func:`build_stage`): the stage takes as long as its slowest element.

Host access (through :class:`netstor.gateware.csr.MemoryPort`): table entries are written in one
cycle into the entry memory (an entry is one word, so a lookup sees either the old or the new
entry, never a mix). Register banks take a host write in a cycle in which no packet writes the
bank; a host read uses a separate read port.
"""

from __future__ import annotations

from amaranth.hdl import Signal, Module, Cat, Const, Mux, Array
from amaranth.lib import data
from amaranth.lib.memory import Memory

from netstor.lang.program import Table, RegisterOp, Hash, Compute, Rank, hash_crc32

__all__ = ["HwEnv", "build_element", "build_stage", "crc_matrix_hw"]


class HwEnv:
    """Expression environment over a PHV view (see :mod:`netstor.lang.expr`)."""

    def __init__(self, pipeline, phv, params=None, old=None):
        self.pipeline, self.phv, self.params, self._old = pipeline, phv, params or {}, old

    def field(self, name):
        fields = self.pipeline.phv.fields
        if name in fields:
            return self.phv[fields[name].key]
        base, lo, w = self.pipeline.phv.views[name]
        return self.phv[base][lo:lo + w]

    def param(self, name):
        return self.params[name]

    def old(self):
        if self._old is None:
            raise ValueError("Old() used outside a register update")
        return self._old


def target(pipeline, phv, name):
    return HwEnv(pipeline, phv).field(name)


def apply_sets(m, pipeline, sets, src, dst, env):
    """``dst`` gets each ``Set`` of ``sets`` (RHS evaluated in ``env`` over ``src``)."""
    for s in sets:
        t = target(pipeline, dst, s.field.name)
        v = s.value.hw(env)
        m.d.comb += t.eq(v[:len(t)] if len(v) > len(t) else v)


def crc_matrix_hw(value, width, seed=0):
    """``hash_crc32(value, width, seed)`` as XOR logic (the CRC is affine in the input bits for
    a fixed length, so each output bit is the XOR of a fixed subset of input bits, plus a
    constant)."""
    c0 = hash_crc32(0, width, seed)
    cols = [hash_crc32(1 << i, width, seed) ^ c0 for i in range(width)]
    bits = []
    for o in range(32):
        terms = [value[i] for i in range(width) if (cols[i] >> o) & 1]
        b = Const((c0 >> o) & 1, 1)
        for t in terms:
            b = b ^ t
        bits.append(b)
    return Cat(*bits)


def _or_tree(values):
    """OR of ``values`` as a balanced tree (depth log2(n), not n)."""
    values = list(values)
    while len(values) > 1:
        values = [values[i] | values[i + 1] if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


def _phv_signal(pipeline, name):
    return Signal(data.StructLayout(pipeline.phv.layout()), name=name)


def build_element(m, e, pipeline, valid_in, phv_in, csr, *, prefix):
    """Elaborate element ``e``; returns ``(valid_out, phv_out, latency)``."""
    if isinstance(e, Compute):
        return _compute(m, e, pipeline, valid_in, phv_in, prefix)
    if isinstance(e, Hash):
        return _hash(m, e, pipeline, valid_in, phv_in, prefix)
    if isinstance(e, Table):
        return _table(m, e, pipeline, valid_in, phv_in, csr, prefix)
    if isinstance(e, RegisterOp):
        return _register(m, e, pipeline, valid_in, phv_in, csr, prefix)
    if isinstance(e, Rank):
        return _rank(m, e, pipeline, valid_in, phv_in, prefix)
    raise TypeError(f"unknown element {e!r}")


def build_stage(m, elements, pipeline, valid_in, phv_in, csr, *, prefix):
    """Elaborate the elements of one stage (:meth:`netstor.lang.Pipeline.stages`) side by
    side on the same input; returns ``(valid_out, phv_out, latency)``, latency = the slowest
    element's. The slowest element's output is the base; every other element's written
    fields wait for it in short delay lines and replace the base's bits when that element's
    condition held (so of two elements of exclusive programs writing the same field, the one
    that acted wins; for the others it makes no difference)."""
    if len(elements) == 1:
        return build_element(m, elements[0], pipeline, valid_in, phv_in, csr,
                             prefix=f"{prefix}_{elements[0].program.name}_{elements[0].name}")
    env = HwEnv(pipeline, phv_in)
    built = []
    for e in elements:
        pre = f"{prefix}_{e.program.name}_{e.name}"
        when = Signal(name=f"{pre}_act")
        m.d.comb += when.eq(e.when.hw(env).any())
        v, p, lat = build_element(m, e, pipeline, valid_in, phv_in, csr, prefix=pre)
        built.append((e, when, v, p, lat, pre))
    L = max(b[4] for b in built)
    base = max(range(len(built)), key=lambda i: built[i][4])
    _, _, valid_out, base_phv, _, _ = built[base]
    out = _phv_signal(pipeline, f"{prefix}_out")
    m.d.comb += out.eq(base_phv)
    for i, (e, when, _, p, lat, pre) in enumerate(built):
        if i == base:
            continue
        names = pipeline.writes(e)
        if not names:
            continue
        act = when
        for k in range(L):                    # the condition, to the end of the stage
            nw = Signal(name=f"{pre}_act{k}")
            m.d.sync += nw.eq(act)
            act = nw
        vals = [target(pipeline, p, n) for n in names]
        for k in range(L - lat):              # the written fields, to the end of the stage
            nv = [Signal(len(v), name=f"{pre}_w{k}_{j}") for j, v in enumerate(vals)]
            m.d.sync += [a.eq(b) for a, b in zip(nv, vals)]
            vals = nv
        with m.If(act):
            m.d.comb += [target(pipeline, out, n).eq(v) for n, v in zip(names, vals)]
    return valid_out, out, L


def _rank(m, e, pipeline, valid_in, phv_in, prefix):
    from netstor.hls import RankingCore
    core = RankingCore()
    m.submodules[f"{prefix}_core"] = core
    env = HwEnv(pipeline, phv_in)
    W = e.WIDTHS

    def val(x, w):
        v = x.hw(env)
        return v[:w] if len(v) > w else v

    packed = {k: [] for k in W}
    for i in range(e.N):
        rep = e.replicas[i] if i < len(e.replicas) else None
        for k, x in zip(W, rep or [Const(0, 1)] * 4):
            packed[k].append(val(x, W[k]) if rep else Const(0, W[k]))
    when = Signal(name=f"{prefix}_when")
    m.d.comb += [
        when.eq(e.when.hw(env).any()),
        core.valid_in.eq(valid_in),
        core.algo.eq(val(e.algo, 2)),
        core.avail.eq(val(e.avail, 8) & ((1 << len(e.replicas)) - 1)),
        core.n.eq(val(e.n, 8)), core.rr.eq(val(e.rr, 3)), core.rnd.eq(val(e.rnd, 16)),
    ] + [getattr(core, k).eq(Cat(*packed[k])) for k in W]
    # the PHV and `when` wait for the core
    v, p, w = valid_in, phv_in, when
    for k in range(core.latency):
        nv, np_, nw = (Signal(name=f"{prefix}_v{k}"), _phv_signal(pipeline, f"{prefix}_p{k}"),
                       Signal(name=f"{prefix}_w{k}"))
        m.d.sync += [nv.eq(v), np_.eq(p), nw.eq(w)]
        v, p, w = nv, np_, nw
    nxt = _phv_signal(pipeline, f"{prefix}_next")
    m.d.comb += nxt.eq(p)
    with m.If(w):
        outs = [(e.found, core.found), (e.index, core.index)]
        if e.score is not None:
            outs.append((e.score, core.score))
        for f, sig in outs:
            t = target(pipeline, nxt, f.name)
            m.d.comb += t.eq(sig[:len(t)])
    valid_out, phv_out = Signal(name=f"{prefix}_valid"), _phv_signal(pipeline, f"{prefix}_phv")
    m.d.sync += [valid_out.eq(v), phv_out.eq(nxt)]
    return valid_out, phv_out, core.latency + 1


def _compute(m, e, pipeline, valid_in, phv_in, prefix):
    nxt = _phv_signal(pipeline, f"{prefix}_next")
    env = HwEnv(pipeline, phv_in)
    m.d.comb += nxt.eq(phv_in)
    with m.If(e.when.hw(env).any()):
        apply_sets(m, pipeline, e.sets, phv_in, nxt, env)
    valid_out, phv_out = Signal(name=f"{prefix}_valid"), _phv_signal(pipeline, f"{prefix}_phv")
    m.d.sync += [valid_out.eq(valid_in), phv_out.eq(nxt)]
    return valid_out, phv_out, 1


def _hash(m, e, pipeline, valid_in, phv_in, prefix):
    env = HwEnv(pipeline, phv_in)
    value = Cat(*[f.hw(env)[:f.width] for f in e.fields])
    crc = crc_matrix_hw(value, e.in_width, e.seed)
    nxt = _phv_signal(pipeline, f"{prefix}_next")
    m.d.comb += nxt.eq(phv_in)
    with m.If(e.when.hw(env).any()):
        t = target(pipeline, nxt, e.dst.name)
        m.d.comb += t.eq(crc[:len(t)])
    valid_out, phv_out = Signal(name=f"{prefix}_valid"), _phv_signal(pipeline, f"{prefix}_phv")
    m.d.sync += [valid_out.eq(valid_in), phv_out.eq(nxt)]
    return valid_out, phv_out, 1


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


def _table(m, e, pipeline, valid_in, phv_in, csr, prefix):
    ab, pw, kw = e.action_bits, e.param_width, e.key_width
    env = HwEnv(pipeline, phv_in)
    key = Signal(kw, name=f"{prefix}_key")
    m.d.comb += key.eq(Cat(*[k.hw(env)[:k.width] for k in e.key]))
    when = Signal(name=f"{prefix}_when")
    m.d.comb += when.eq(e.when.hw(env).any())
    d_action, d_params = _default_regs(m, e, csr, prefix)

    # stage 1 registers
    v1, phv1 = Signal(name=f"{prefix}_v1"), _phv_signal(pipeline, f"{prefix}_phv1")
    when1, key1 = Signal(name=f"{prefix}_when1"), Signal(kw, name=f"{prefix}_key1")
    m.d.sync += [v1.eq(valid_in), phv1.eq(phv_in), when1.eq(when), key1.eq(key)]
    hit = Signal(name=f"{prefix}_hit")
    action = Signal(ab, name=f"{prefix}_action")
    params = Signal(pw, name=f"{prefix}_params")

    if e.kind == "exact":
        ew = 1 + kw + ab + pw
        depth, ways = e.depth, e.ways
        port = csr.memory(e.qualname, ew, e.size,
                          doc=f"{e.qualname}: exact, {ways} ways x {depth}; "
                              f"valid | key({kw}) | action({ab}) | params({pw})",
                          kind="exact", table=e.qualname, ways=ways)
        sbits = max(1, (depth - 1).bit_length())
        rd_host = []
        hits, entries = [], []
        for w in range(ways):
            mem = Memory(shape=ew, depth=depth, init=[])
            m.submodules[f"{prefix}_way{w}"] = mem
            wp = mem.write_port()
            rp = mem.read_port()
            hp = mem.read_port()
            slot = crc_matrix_hw(key, kw, seed=w)[:sbits] if depth > 1 else Const(0, 1)
            m.d.comb += [rp.addr.eq(slot), rp.en.eq(1)]
            hit_addr = port.addr[sbits:] == w if ways > 1 else Const(1, 1)
            m.d.comb += [
                wp.addr.eq(port.addr[:sbits]), wp.data.eq(port.wdata),
                wp.en.eq(port.req & port.we & ~port.ack & hit_addr),
                hp.addr.eq(port.addr[:sbits]), hp.en.eq(1),
            ]
            rd_host.append(hp.data)
            ent = rp.data
            hits.append(ent[0] & (ent[1:1 + kw] == key1))
            entries.append(ent)
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
        # first hit way wins
        m.d.comb += [hit.eq(0), action.eq(0), params.eq(0)]
        for w in reversed(range(ways)):
            with m.If(hits[w]):
                m.d.comb += [hit.eq(1), action.eq(entries[w][1 + kw:1 + kw + ab]),
                             params.eq(entries[w][1 + kw + ab:])]
    else:
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
        match1 = Signal(n, name=f"{prefix}_match1")
        m.d.sync += match1.eq(match)
        m.d.sync += port.ack.eq(port.req & ~port.ack)
        m.d.comb += port.rdata.eq(ents[port.addr])
        with m.If(port.req & port.we & ~port.ack):
            m.d.sync += ents[port.addr].eq(port.wdata)
        # the entries' action words are registered too, so c1 sees them aligned with match1
        acts1 = [Signal(ab + pw, name=f"{prefix}_act1_{i}") for i in range(n)]
        for i in range(n):
            m.d.sync += acts1[i].eq(ents[i][1 + 2 * kw:])
        # lowest matching address wins: isolate the lowest set bit (x & -x, a carry chain),
        # then an AND-OR tree of depth log(n) instead of an n-deep priority chain
        first = Signal(n, name=f"{prefix}_first")
        m.d.comb += first.eq(match1 & (~match1 + 1)[:n])
        sel = _or_tree([Mux(first[i], acts1[i], 0) for i in range(n)])
        m.d.comb += [hit.eq(match1.any()), action.eq(sel[:ab]), params.eq(sel[ab:])]

    sel_action = Signal(ab, name=f"{prefix}_sel_action")
    sel_params = Signal(pw, name=f"{prefix}_sel_params")
    m.d.comb += [sel_action.eq(Mux(hit, action, d_action)),
                 sel_params.eq(Mux(hit, params, d_params))]
    with m.If(~when1):
        m.d.comb += sel_action.eq(0)
    nxt = _phv_signal(pipeline, f"{prefix}_next")
    _run_action(m, e, pipeline, phv1, nxt, sel_action, sel_params)
    hit_ctr = csr.counter(f"{e.qualname}.hit", doc=f"lookups of {e.qualname} that hit")
    miss_ctr = csr.counter(f"{e.qualname}.miss", doc=f"lookups of {e.qualname} that missed")
    m.d.comb += [hit_ctr.eq(v1 & when1 & hit), miss_ctr.eq(v1 & when1 & ~hit)]
    valid_out, phv_out = Signal(name=f"{prefix}_valid"), _phv_signal(pipeline, f"{prefix}_phv")
    m.d.sync += [valid_out.eq(v1), phv_out.eq(nxt)]
    return valid_out, phv_out, 2


def _register(m, e, pipeline, valid_in, phv_in, csr, prefix):
    bank = e.bank
    ib, w = bank.index_bits, bank.width
    env = HwEnv(pipeline, phv_in)
    index_full = e.index.hw(env)
    when = Signal(name=f"{prefix}_when")
    in_range = Signal(name=f"{prefix}_in_range")
    m.d.comb += [when.eq(e.when.hw(env).any() & valid_in),
                 in_range.eq(index_full.as_unsigned() < bank.depth)]
    mem = Memory(shape=w, depth=bank.depth, init=[])
    m.submodules[f"{prefix}_mem"] = mem
    wp = mem.write_port()
    rp = mem.read_port(transparent_for=(wp,))
    hp = mem.read_port()
    m.d.comb += [rp.addr.eq(index_full[:ib]), rp.en.eq(1)]

    v1, phv1 = Signal(name=f"{prefix}_v1"), _phv_signal(pipeline, f"{prefix}_phv1")
    act1, idx1 = Signal(name=f"{prefix}_act1"), Signal(ib, name=f"{prefix}_idx1")
    m.d.sync += [v1.eq(valid_in), phv1.eq(phv_in), act1.eq(when & in_range),
                 idx1.eq(index_full[:ib])]
    oob = csr.counter(f"{e.qualname}.index_oob",
                      doc=f"{e.qualname}: accesses with index >= {bank.depth} (not performed)")
    m.d.comb += oob.eq(when & ~in_range)

    old = rp.data
    env1 = HwEnv(pipeline, phv1, old=old)
    new = Signal(w, name=f"{prefix}_new")
    m.d.comb += new.eq(e.update.hw(env1))
    do_write = Signal(name=f"{prefix}_write")
    m.d.comb += do_write.eq(act1 & e.write.hw(env1).any())

    port = csr.memory(bank.qualname, w, bank.depth,
                      doc=f"register bank {bank.qualname}: {bank.depth} x {w} bits",
                      kind="register", bank=bank.qualname)
    host_write = Signal(name=f"{prefix}_host_write")
    m.d.comb += host_write.eq(port.req & port.we & ~port.ack & ~do_write)
    m.d.comb += [
        wp.en.eq(do_write | host_write),
        wp.addr.eq(Mux(do_write, idx1, port.addr)),
        wp.data.eq(Mux(do_write, new, port.wdata)),
        hp.addr.eq(port.addr), hp.en.eq(1),
        port.rdata.eq(hp.data),
    ]
    rpend = Signal(name=f"{prefix}_host_rpend")
    m.d.sync += port.ack.eq(0)
    with m.If(host_write):
        m.d.sync += port.ack.eq(1)
    with m.If(port.req & ~port.we & ~port.ack):
        m.d.sync += rpend.eq(~rpend)
        with m.If(rpend):
            m.d.sync += port.ack.eq(1)

    nxt = _phv_signal(pipeline, f"{prefix}_next")
    m.d.comb += nxt.eq(phv1)
    if e.result is not None:
        with m.If(act1):
            t = target(pipeline, nxt, e.result.name)
            m.d.comb += t.eq(old if e.returns == "old" else new)
    valid_out, phv_out = Signal(name=f"{prefix}_valid"), _phv_signal(pipeline, f"{prefix}_phv")
    m.d.sync += [valid_out.eq(v1), phv_out.eq(nxt)]
    return valid_out, phv_out, 2
