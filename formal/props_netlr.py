"""Formal harnesses for NetLR's ack counting (``netstor.offloads.netlr.program``): the slot
cell's read-modify-write and the commit, on the stages the program elaborates into.

``NetlrAckProps`` (jobs ``netlr_ack``, ``netlr_ack_cover``). NetLR's program ``nl`` is built by
``make_netlr`` (2 slots; full widths: fp 64, seq 32, rid 8, 8 member positions) and its ingress
stages (``Pipeline.stages()``) are elaborated and chained exactly as
:class:`~netstor.gateware.datapath.Datapath` chains them (``build_stage`` one after another,
one :class:`~netstor.gateware.csr.CsrBuilder`): ``classify`` (the op) -> ``admit`` (the ack's
member position ``abit``, ``ok_wr``/``ok_rd``/``ok_ack``) -> ``slots`` (the 112-bit cell
``fp | seq | rid | acks``: one pipelined read-modify-write per packet, forwarding between
back-to-back packets of one slot) -> ``decide`` (``commit``, ``stale``, ``absorbed``,
``ignored``, ...). Left out, with what stands in for them:

* the trust table (stage 0 beside ``classify``): its output ``nl.m.trusted`` is a free input
  per packet (the ``trust`` job proves the guard itself);
* the group table ``nl.groups`` (stage 1): the harness writes its action's fields per packet
  as the controller's entry gives them (config.py ``plan``): a hit for groups 0 and 1, a miss
  for every other group; ``members`` = the group's rids by position (``MEMBERS``: distinct in
  a group, the two groups share every rid at other positions); ``used`` (the positions the
  configuration fills) a constant per group the solver picks; ``live``: free per packet, any
  subset of the used positions (any sequence of failures and rejoins, a change between any
  two packets); ``nread`` = the number of live positions; ``mcast``, ``reads``, ``gidx`` free;
* ``seq``/``rr`` (stage 3): a write's ``seq`` is then a free header field (any sequence
  numbers, repeats included: more general than the global counter); ``ridx`` stays 0 (reads
  only).

The members are constants rather than free: every use of a rid in the program and in the
reference is an equality test (or a copy), so the proof holds for every assignment of
distinct rids with the same pattern of sharing between the groups (renaming rids maps runs
to runs); with the members free the same job was too slow (minutes per BMC step).

Inputs, every cycle: ``valid`` and the whole PHV are free (any header: writes, acks with any
``fp``/``seq``/``rid`` -- stale, duplicated, from non-members, from members not live, with fp
0 --, reads, other programs' packets, ``meta.recirc_count`` free), except that the program
metadata ``nl.m.*`` other than ``trusted`` are 0 (the parser clears them). The slot bank's
host port is idle (the controller never writes a slot).

**Assumed** (the protocol's): a write or ack whose ``fp`` equals the fingerprint of the
write a slot holds carries that write's ``group`` (fingerprint and group are both functions
of the key, docs/netlr.md); reset low after the start.

Reference (written here from the protocol, not from the program's expressions): per slot the
write it holds (``ref_fp``, 0 = none, ``ref_seq``, ``ref_group``) and its ack set
``ref_acked``: a *set of replica ids* (a vector indexed by rid, not by member position).
Applied per packet in arrival order in the slot bank's write slot (its input
``+ RegisterOp.LATENCY``), with ``live`` = the set of rids at the group's live positions as
the packet saw the table, ``trusted`` = ``nl.m.trusted`` or a recirculated pass:

* a *write* (selected, ``op`` WRITE, group hit, trusted, ``fp != 0``, some live replica) to a
  slot holding nothing or the same ``fp``: the slot holds ``(fp, seq, group)``, ack set
  empty;
* an *ack* (selected, ``op`` WRITE_REPLY, group hit, trusted, ``rid`` in ``live``) while the
  slot holds a write (``ref_fp != 0``) with this ``fp`` and ``seq``: ``rid`` joins the ack
  set; when the ack set then covers ``live``, the write *commits*: the slot holds nothing
  again. Every other packet changes nothing.

Asserted, every cycle:

1. *Commit* (at the ``decide`` stage's output, for every WRITE_REPLY of ``nl``): a trusted
   ack has no drop reason (``group_hit`` set, ``stale``/``absorbed``/``ignored``/``collide``/
   ``refused`` clear) exactly when it commits in the reference, i.e. only when every replica
   live in that packet's view of the group is in the slot's ack set (distinct rids: a
   duplicated ack never counts twice; an ack of a replica not live when it acked never
   counts; a stale, other-fp, other-seq, fp-0, non-member or untrusted ack never counts);
   ``commit`` and trusted equals the reference's commit (what ``nl.commits`` counts); an ack
   is never ``ok_wr``/``ok_rd``/``collide``/``refused`` (the interface ``netlr_tail``
   assumes);
2. *Slot cells* (the inductive invariant): each cell's ``fp`` is the reference's; while it
   holds a write, its ``seq`` is the reference's and its ack bitmap bit ``i`` is set exactly
   when the group's member at used position ``i`` is in the ack set, which holds members of
   the group only.

``NetlrTailProps`` (job ``netlr_tail``): the stages after ``decide`` turn those flags into
``meta.drop`` (a committed, trusted ack goes on to the client, every other ack is dropped).
Together: a WRITE_REPLY reaches the client exactly when it commits in the reference.

Covers (``netlr_ack_cover``): a commit on the third counted ack after a duplicate; a commit
by a duplicate ack after a liveness change (a replica removed after the others acked); a
write that re-takes its slot (same ``fp``, new ``seq``) after an ack, then commits.
"""

from amaranth.hdl import Assert, Assume, Const, Cover, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In

from netstor.elements import RegisterOp
from netstor.gateware.csr import CsrBuilder
from netstor.gateware.stages import build_stage
from netstor.lang.program import Pipeline
from netstor.offloads.netlr.header import OP_WRITE, OP_WRITE_REPLY
from common import delay as _delay
from props_packet_buffer import _started

__all__ = ["NetlrAckProps", "NetlrTailProps", "patched_make"]

#: the members' rids by position (distinct in a group; the groups overlap at other positions)
MEMBERS = ((1, 2, 3, 4, 5, 6, 7, 8), (8, 7, 6, 5, 4, 3, 2, 1))
NGROUPS = 2                 # groups 0 and 1 hit in the harness's group table


RIDS = 16                   # the members' rids are < RIDS (packets carry any 8-bit rid)
RB = (RIDS - 1).bit_length()


def _onehot(m, rid, name):
    """The set {rid} (a RIDS-bit vector by rid; empty for rid >= RIDS: no member's rid)."""
    s = Signal(RIDS, name=name)
    m.d.comb += s.eq(Mux(rid < RIDS, Const(1, RIDS) << rid[:RB], 0))
    return s


class NetlrAckProps(wiring.Component):
    def __init__(self, slots=2, make=None, members=MEMBERS, cells=True):
        self.members = members
        self.cells = cells          # assert 2. (the mutation runs leave it out: BMC needs
        #                             only 1., the client-visible property)
        if make is None:
            from netstor.offloads.netlr.program import make_netlr as make
        self.prog = make(n_ports=2, slots=slots, groups=4, rids=4)
        self.pl = Pipeline([self.prog], n_ports=2, guarded=True)
        self.slots = slots
        phv_w = data.StructLayout(self.pl.phv.layout()).size
        super().__init__({
            "valid": In(1), "phv": In(phv_w), "live": In(8), "mcast": In(12),
            "reads": In(64), "gidx": In(2),
            "used0": In(8), "used1": In(8),
        })

    def elaborate(self, platform):
        m = Module()
        pl, prog = self.pl, self.prog
        csr = CsrBuilder()
        started = _started(m)
        layout = data.StructLayout(pl.phv.layout())
        fields, views = pl.phv.fields, pl.phv.views

        def fld(phv, n):
            if n in fields:
                return phv[fields[n].key]
            base, lo, w = views[n]
            return phv[base][lo:lo + w]

        phv_in = Signal(layout)
        m.d.comb += phv_in.eq(self.phv)
        for n in fields:
            if n.startswith("nl.m.") and n != "nl.m.trusted":
                m.d.comb += Assume(fld(phv_in, n) == 0)        # the parser clears them

        # ---- the controller's constants: members and used positions of groups 0, 1 ---------
        members = [Const(sum(r << 8 * i for i, r in enumerate(ms)), 64) for ms in self.members]
        used = [self.used0, self.used1]
        for k, sig in enumerate(used):
            prev = Signal(len(sig), name=f"const{k}_prev")
            m.d.sync += prev.eq(sig)
            m.d.comb += Assume(~started | (sig == prev))
        for ms in self.members:             # the configuration's rule (config.py: plan)
            assert len(ms) == 8 and len(set(ms)) == 8 and all(0 <= r < RIDS for r in ms), ms

        # ---- the stages, chained as Datapath chains them -----------------------------------
        stages = pl.stages()
        names = [[e.name for e in st] for st in stages]
        assert names[0] == ["trust", "classify"] and names[1] == ["groups"], names
        assert names[3] == ["seq", "rr"] and names[4] == ["slots"], names
        v, p, t = self.valid, phv_in, 0
        v, p, lat = build_stage(m, [stages[0][1]], pl, v, p, csr, prefix="i0")
        t += lat
        t_inj = t
        # the group table's action, as the controller's entry gives it
        grp = fld(phv_in, "nl.group")
        grp_t = _delay(m, grp, t_inj, "grp_inj")
        g1 = grp_t[0]
        hit = grp_t < NGROUPS
        mem_g = Mux(g1, members[1], members[0])
        used_g = Mux(g1, used[1], used[0])
        m.d.comb += Assume(~hit | ((self.live & ~used_g) == 0))
        nlive = sum(self.live[i] for i in range(8))
        p2 = Signal(layout, name="phv_groups")
        m.d.comb += [p2.eq(p),
                     fld(p2, "nl.m.group_hit").eq(hit), fld(p2, "nl.m.mcast").eq(self.mcast),
                     fld(p2, "nl.m.live").eq(self.live), fld(p2, "nl.m.members").eq(mem_g),
                     fld(p2, "nl.m.reads").eq(self.reads), fld(p2, "nl.m.nread").eq(nlive),
                     fld(p2, "nl.m.gidx").eq(self.gidx)]
        p = p2
        t_slots = None
        slot_stage = None
        for idx in range(2, len(stages)):
            if idx == 3:
                continue
            if idx == 4:
                t_slots, slot_stage = t, idx
            v, p, lat = build_stage(m, stages[idx], pl, v, p, csr, prefix=f"i{idx}")
            t += lat
            if "decide" in names[idx]:
                break
        v_out, phv_out, total = v, p, t
        mem = m.submodules[f"i{slot_stage}_nl_slots_mem"]
        cells = []
        for s in range(self.slots):
            rp = mem.read_port(domain="comb")
            m.d.comb += rp.addr.eq(s)
            cells.append(rp.data)

        # ---- the packet's fields, delayed to the slot bank's write slot -------------------
        W = t_slots + RegisterOp.LATENCY
        sel_in = fld(phv_in, "meta.hdr_type") == prog.hdr_type
        tr_in = fld(phv_in, "nl.m.trusted") | (fld(phv_in, "meta.recirc_count") != 0)
        vw = _delay(m, self.valid, W, "v")
        sel = _delay(m, sel_in, W, "sel")
        op = _delay(m, fld(phv_in, "nl.op"), W, "op")
        fp = _delay(m, fld(phv_in, "nl.fp"), W, "fp")
        seq = _delay(m, fld(phv_in, "nl.seq"), W, "seq")
        rid = _delay(m, fld(phv_in, "nl.rid"), W, "rid")
        slot = _delay(m, fld(phv_in, "nl.slot"), W, "slot")
        group = _delay(m, grp, W, "group")
        trusted = _delay(m, tr_in, W, "trusted")
        live = _delay(m, self.live, W - t_inj, "live")
        sb = max(1, (self.slots - 1).bit_length())
        sidx = slot[:sb]

        # ---- reference ---------------------------------------------------------------------
        S = self.slots
        ref_fp = [Signal(64, name=f"ref_fp{s}") for s in range(S)]
        ref_seq = [Signal(32, name=f"ref_seq{s}") for s in range(S)]
        ref_group = [Signal(16, name=f"ref_group{s}") for s in range(S)]
        ref_acked = [Signal(RIDS, name=f"ref_acked{s}") for s in range(S)]

        def rid_set(g_bit, mask):
            """The set (vector by rid) of group g's members at positions in mask."""
            acc = Const(0, RIDS)
            for i in range(8):
                mi = Mux(g_bit, members[1][8 * i:8 * i + 8], members[0][8 * i:8 * i + 8])
                acc = acc | Mux(mask[i], Const(1, RIDS) << mi[:RB], Const(0, RIDS))
            sig = Signal(RIDS)
            m.d.comb += sig.eq(acc)
            return sig

        whit = group < NGROUPS
        live_set = rid_set(group[0], live)
        cur_fp, cur_seq, cur_group, cur_acked = (Signal(64), Signal(32), Signal(16),
                                                 Signal(RIDS))
        for s in range(S):
            with m.If(sidx == s):
                m.d.comb += [cur_fp.eq(ref_fp[s]), cur_seq.eq(ref_seq[s]),
                             cur_group.eq(ref_group[s]), cur_acked.eq(ref_acked[s])]
        rbit = _onehot(m, rid, "rid_bit")
        is_write = Signal()
        is_ack = Signal()
        m.d.comb += [
            is_write.eq(vw & sel & (op == OP_WRITE) & whit & trusted & (fp != 0) & (live != 0)),
            is_ack.eq(vw & sel & (op == OP_WRITE_REPLY) & whit & trusted
                      & ((live_set & rbit) != 0)),
        ]
        holds = cur_fp != 0
        # the protocol's assumption: a packet with the held write's fp carries its group
        m.d.comb += Assume(~(vw & sel & ((op == OP_WRITE) | (op == OP_WRITE_REPLY)) & holds
                             & (fp == cur_fp)) | (group == cur_group))
        takes = is_write & (~holds | (cur_fp == fp))
        counts = is_ack & holds & (fp == cur_fp) & (seq == cur_seq)
        new_acked = Signal(RIDS)
        m.d.comb += new_acked.eq(cur_acked | rbit)
        ref_commit = Signal()
        m.d.comb += ref_commit.eq(counts & ((live_set & ~new_acked) == 0))
        for s in range(S):
            with m.If(sidx == s):
                with m.If(takes):
                    m.d.sync += [ref_fp[s].eq(fp), ref_seq[s].eq(seq), ref_group[s].eq(group),
                                 ref_acked[s].eq(0)]
                with m.Elif(ref_commit):
                    m.d.sync += [ref_fp[s].eq(0), ref_acked[s].eq(0)]
                with m.Elif(counts):
                    m.d.sync += ref_acked[s].eq(new_acked)

        # ---- 2. the slot cells -----------------------------------------------------------
        for s in range(S if self.cells else 0):
            c = cells[s]
            cfp, cseq, cacks = c[0:64], c[64:96], c[104:112]
            gb = ref_group[s][0]
            members_of = rid_set(gb, Mux(gb, used[1], used[0]))
            m.d.comb += Assert(cfp == ref_fp[s])
            with m.If(ref_fp[s] != 0):
                m.d.comb += [Assert(cseq == ref_seq[s]),
                             Assert((ref_acked[s] & ~members_of) == 0)]
                for i in range(8):
                    mi = Mux(gb, members[1][8 * i:8 * i + 8], members[0][8 * i:8 * i + 8])
                    ui = Mux(gb, used[1][i], used[0][i])
                    m.d.comb += Assert(cacks[i] == (ui & ref_acked[s].bit_select(mi[:RB], 1)))

        # ---- 1. the commit, at the decide stage's output -----------------------------------
        D = total - W
        assert D >= 0
        commit_o = _delay(m, ref_commit, D, "ref_commit")
        v_o = _delay(m, self.valid, total, "v_all")
        reply_o = _delay(m, vw & sel & (op == OP_WRITE_REPLY), D, "reply")
        trusted_o = _delay(m, trusted, D, "trusted_o")
        fo = lambda n: fld(phv_out, n)                       # noqa: E731
        # the decision at the decide stage's output: a trusted ack passes (no drop reason)
        # exactly when it commits; netlr_tail maps these flags to meta.drop
        passes = (fo("nl.m.group_hit") & ~fo("nl.m.stale") & ~fo("nl.m.absorbed")
                  & ~fo("nl.m.ignored") & ~fo("nl.m.collide") & ~fo("nl.m.refused"))
        m.d.comb += [
            Assert(v_out == v_o),
            Assert(~(v_o & reply_o & trusted_o) | (passes == commit_o)),
            Assert(~(v_o & reply_o) | ((fo("nl.m.commit") & trusted_o) == commit_o)),
            # the interface netlr_tail assumes: an ack is neither a write nor a read
            Assert(~(v_o & reply_o) | ~(fo("nl.m.ok_wr") | fo("nl.m.ok_rd")
                                        | fo("nl.m.collide") | fo("nl.m.refused"))),
        ]

        # ---- covers ------------------------------------------------------------------------
        # acks counted so far for the held write (the cover's own bookkeeping)
        n_counted = Signal(3)
        dup = Signal()
        livechg = Signal()
        retake = Signal()
        live_p = Signal(RIDS)
        with m.If(takes & (sidx == 0)):
            m.d.sync += [n_counted.eq(0), dup.eq(0), livechg.eq(0),
                         retake.eq(holds & (cur_fp == fp) & (n_counted != 0))]
        with m.Elif(counts & (sidx == 0)):
            m.d.sync += [n_counted.eq(n_counted + 1), live_p.eq(live_set),
                         dup.eq(dup | ((cur_acked & rbit) != 0)),
                         livechg.eq(livechg | ((n_counted != 0) & (live_p != live_set)))]
        m.d.comb += [
            Cover(started & ref_commit & (sidx == 0) & dup & (n_counted == 2)),
            Cover(started & ref_commit & (sidx == 0) & ((cur_acked & rbit) != 0)
                  & (n_counted != 0) & (live_p != live_set)),
            Cover(started & ref_commit & (sidx == 0) & retake),
        ]
        self.latency = (t_inj, t_slots, W, total)
        return m



class NetlrTailProps(wiring.Component):
    """The stages after ``decide`` (``write_out``, the replicas table, the counters;
    ``read_rid``, ``drop``; ``untrusted``), chained as the data path chains them, with a free
    PHV at their input (what ``decide`` hands on). For a WRITE_REPLY of ``nl`` (``op`` 3,
    ``ack`` set, ``rd``/``wr``/``ok_wr``/``ok_rd``/``collide``/``refused`` clear: the
    interface ``netlr_ack`` asserts at the decide stage's output), asserted at the output:
    ``meta.drop`` = its input ``meta.drop``, or not trusted (``nl.m.trusted`` and a first
    pass), or a drop reason (``group_hit`` clear, ``stale``, ``absorbed``, ``ignored``): a
    committed ack (no reason) goes on, every other ack is dropped. Feed-forward: BMC to the
    stages' latency + 1 covers every input."""

    def __init__(self, slots=2, make=None):
        if make is None:
            from netstor.offloads.netlr.program import make_netlr as make
        self.prog = make(n_ports=2, slots=slots, groups=4, rids=4)
        self.pl = Pipeline([self.prog], n_ports=2, guarded=True)
        phv_w = data.StructLayout(self.pl.phv.layout()).size
        super().__init__({"valid": In(1), "phv": In(phv_w)})

    def elaborate(self, platform):
        m = Module()
        pl, prog = self.pl, self.prog
        csr = CsrBuilder()
        _started(m)
        layout = data.StructLayout(pl.phv.layout())
        fields, views = pl.phv.fields, pl.phv.views

        def fld(phv, n):
            if n in fields:
                return phv[fields[n].key]
            base, lo, w = views[n]
            return phv[base][lo:lo + w]

        phv_in = Signal(layout)
        m.d.comb += phv_in.eq(self.phv)
        stages = pl.stages()
        names = [[e.name for e in st] for st in stages]
        first = [i for i, n in enumerate(names) if "decide" in n][0] + 1
        assert "drop" in names[-2] and names[-1] == ["untrusted"], names
        v, p, t = self.valid, phv_in, 0
        for idx in range(first, len(stages)):
            v, p, lat = build_stage(m, stages[idx], pl, v, p, csr, prefix=f"t{idx}")
            t += lat
        self.latency = t
        fi = lambda n: fld(phv_in, n)                        # noqa: E731
        ack_in = (self.valid & (fi("meta.hdr_type") == prog.hdr_type)
                  & (fi("nl.op") == OP_WRITE_REPLY) & fi("nl.m.ack") & ~fi("nl.m.rd")
                  & ~fi("nl.m.wr") & ~fi("nl.m.ok_wr") & ~fi("nl.m.ok_rd")
                  & ~fi("nl.m.collide") & ~fi("nl.m.refused"))
        trusted = fi("nl.m.trusted") | (fi("meta.recirc_count") != 0)
        reason = (~fi("nl.m.group_hit") | fi("nl.m.stale") | fi("nl.m.absorbed")
                  | fi("nl.m.ignored"))
        want = fi("meta.drop") | ~trusted | reason
        ack_o = _delay(m, ack_in, t, "ack")
        want_o = _delay(m, want, t, "want")
        v_o = _delay(m, self.valid, t, "v")
        m.d.comb += [Assert(v == v_o),
                     Assert(~ack_o | (fld(p, "meta.drop") == want_o)),
                     Cover(ack_o & ~fld(p, "meta.drop"))]
        return m


def patched_make(*edits):
    """``make_netlr`` from a copy of ``netstor/offloads/netlr/program.py`` with each
    ``(old, new)`` text replaced (each ``old`` must occur exactly once): mutants for the
    mutation checks, built in memory, never written to the tree."""
    import importlib
    import inspect
    import types
    mod = importlib.import_module("netstor.offloads.netlr.program")
    src = inspect.getsource(mod)
    for old, new in edits:
        if src.count(old) != 1:
            raise ValueError(f"mutation anchor found {src.count(old)} times: {old!r}")
        src = src.replace(old, new)
    m = types.ModuleType("netstor.offloads.netlr._program_mutant")
    m.__package__ = "netstor.offloads.netlr"
    m.__file__ = mod.__file__
    exec(compile(src, mod.__file__ + " (mutant)", "exec"), m.__dict__)
    return m.make_netlr
