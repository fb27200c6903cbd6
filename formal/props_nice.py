"""Formal harnesses for NICE's failure hiding (``netstor.offloads.nice.program``): a packet
to a hidden node is never delivered to it.

The block: the two elements of NICE's program that turn a vring lookup into a destination,
built by ``make_nice`` (the program as it ships, with ``nodes=8``: exact tables of 4 ways x 2
slots, the full widths: 16-bit node ids and rids, 148/144-bit action parameters) and
elaborated as :class:`~netstor.gateware.datapath.Datapath` elaborates them
(:func:`~netstor.gateware.stages.build_stage`, one
:class:`~netstor.gateware.csr.CsrBuilder`):

* ``NiceGetProps`` (jobs ``nice_hidden_get``, ``nice_hidden_get_cover``): the ingress stage
  of ``part`` and ``unmapped`` (the computes beside ``nice.divisions``; the divisions table
  itself is left out: its result is a free input) followed by the stage of ``nice.nodes``
  (exact on ``Mux(dhit, dnode, primary)``, action ``node(ip, mac, smac, port, dport)``, miss:
  the default action ``drop``);
* ``NiceCopyProps`` (jobs ``nice_hidden_copies``, ``nice_hidden_copies_cover``): the egress
  element ``nice.copies`` (exact on ``meta.rid``, ``copy(ip, mac, smac, dport)``, miss:
  ``drop``), on the PHV of one copy.

**The LPM results are free.** Everything upstream of the block -- ``nice.rings``,
``nice.unicast`` / ``nice.multicast`` (partition, primary, copy-list group), the
``nice.divisions`` replica, the copy list's ``(port, rid)`` (the traffic manager) -- arrives
as a free PHV every cycle: ``ring``, ``uhit``, ``primary``, ``dhit``, ``dnode``, ``mhit``,
``mcopy``, ``meta.rid``, the client's ``ipv4.dst`` / ``eth.dst`` and every other field are
any value, including the hidden node's id and address (a mapping the controller has not yet
rewritten, a stale copy list, a vring address equal to a node's). The only constraint
(ingress): ``mcopy == mhit`` (the multicast action sets both; the parser clears both).

**The hidden node X** is a pair of free constants: its id ``x_id`` (16 bits: the nodes
table's key, the copy's rid) and its IPv4 address ``x_ip``.

**The tables are written by a free host** every cycle (``req``, ``we``, ``addr``,
``wdata`` of ``nice.nodes`` / ``nice.copies``: any word at any address at any time, X's
entries included: X may be live, fail, come back). A table is *clean* in a cycle when none of
its words (read straight from the way RAMs) is valid with

* an action other than the table's two (``node``/``copy`` and ``drop``; the driver encodes
  only declared actions),
* key ``x_id`` and an action other than ``drop`` (X's entry not deleted), or
* the ``node``/``copy`` action with ip ``x_ip`` (another id rewriting to X's address).

That is what the metadata service's writes for hiding X leave (``config.entries``: a
``down`` node's ``nice.nodes`` / ``nice.copies`` entries are deleted, node IPs are distinct;
the diff writes the deletions last, so the table is clean once the batch is applied). An
invalid word may hold anything (a deleted entry's stale key and parameters included).

**Assumed:** the tables' default actions are not written (``<table>.default`` host ports
idle: the default is the program's ``drop``; the controller never changes it); reset low
after the start; elements of other programs do not act on NICE packets (the pipeline's
program selection, ``selected(nice)``). Read from ``Datapath``, not proved here: the traffic
manager carries a packet's PHV to its copies changing only ``meta.egress_port`` and
``meta.rid`` (the ``tm`` job proves which copies are made), and a copy leaving egress with
``meta.drop`` set is not sent.

**Asserted** (every cycle, at the block's output, for a packet of NICE's program,
``meta.hdr_type`` = NICE's) -- *checked* = the table was clean in every cycle the packet
spent in the table's stage (its lookup and its action; a packet that read the table before
the hiding writes landed is outside, and the cover shows one leaving for X):

``nice_hidden_get``:

* (a) a vring packet (``ring`` 1 or 2) that is not a multicast copy (``mcopy`` clear) and
  leaves not dropped has ``ipv4.dst != x_ip``;
* (b) a unicast packet mapped to X (``uhit`` and the protocol's choice, the division's
  replica if ``dhit`` else the primary, equal to ``x_id``) leaves dropped;
* ``valid`` out = ``valid`` in, 4 cycles later.

``nice_hidden_copies``:

* (a') a NICE copy (``mcopy``) that leaves not dropped has ``ipv4.dst != x_ip``;
* (b') a copy for X (``meta.rid == x_id``) leaves dropped;
* (c') any other packet (not NICE's, or not a copy: a unicast vring packet checked by
  ``nice_hidden_get``) leaves the element with its ``ipv4.dst`` and ``meta.drop`` unchanged;
  ``valid`` out = ``valid`` in, 3 cycles later.

Together (with the traffic manager carrying the PHV): once the hiding writes are applied no
unicast get or put/TS copy leaves the switch's NICE path addressed to X, and one the
mappings still send to X is dropped (``nice.nodes.miss`` / ``nice.copies.miss``) rather than
sent elsewhere, whatever the LPM tables and copy lists still say.

Covers: a get rewritten to a live node; a get mapped to X dropped after X's entry (valid,
``node``, X's address) was deleted; a get that read X's entry before the deletion leaving
addressed to X (why the window matters); the same three for copies.

**The other order** (``mode="unmapped"``, job ``nice_unmapped_get``): the metadata service's
diff rewrites the mappings first and deletes X's entries last, so between the two X is in no
mapping while its ``nice.nodes`` entry is still valid. Here the ring and division tables
name X no more -- assumed at the nodes stage's input: no NICE packet with ``uhit`` has the
chosen node ``x_id`` -- and *clean* allows X's own entry (valid, key ``x_id``, X's address):
it only excludes an entry of another id with ip ``x_ip`` and undeclared actions. Asserted:
(a) as above ((b) is then vacuous). This needs the exact match to compare the whole key
(mutant ``nodes_key_truncated``). The same for copies (rids never ``x_id``) is built
(``NiceCopyProps(mode="unmapped")``) but not a job: yices did not finish its base case or
induction in 10 minutes (k = 4, 5, 6) although the gets' version passes in seconds.
"""

from amaranth.hdl import Assert, Assume, Cat, Cover, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In

from netstor.gateware.csr import CsrBuilder
from netstor.gateware.stages import build_element, build_stage
from netstor.lang.program import Pipeline
from common import delay as _delay
from props_packet_buffer import _started

__all__ = ["NiceGetProps", "NiceCopyProps", "patched_make", "patched_table_build",
           "HARNESS_SIZES"]

#: make_nice's sizes here: the LPM tables are not elaborated (512: the hashed minimum)
HARNESS_SIZES = dict(subgroups=512, divisions=512, nodes=8, ring_banks=2, division_banks=2)


def _window(m, c, n, name):
    """At cycle t + n: ``c`` held in every cycle t .. t + n - 1."""
    acc = c
    for k in range(n):
        r = Signal(name=f"{name}_w{k}")
        m.d.sync += r.eq(acc)
        acc = (r & c) if k < n - 1 else r
    return acc


class _HiddenBase(wiring.Component):
    """Common part: the program, the free host port of one exact table, X, cleanliness."""
    TABLE = None            # "nodes" / "copies"
    REWRITE = None          # the table's rewrite action

    def __init__(self, make=None, build=None, mode="deleted"):
        if mode not in ("deleted", "unmapped"):
            raise ValueError(mode)
        self.mode = mode
        if make is None:
            from netstor.offloads.nice.program import make_nice as make
        self.prog = make(n_ports=2, **HARNESS_SIZES)
        self.pl = Pipeline([self.prog], n_ports=2)
        self.build = build          # a table-element builder (mutants of table.py) or None
        phv_w = data.StructLayout(self.pl.phv.layout()).size
        e = self._element()
        self.ew = 1 + e.key_width + e.action_bits + e.param_width
        aw = max(1, (e.size - 1).bit_length())
        super().__init__({
            "valid": In(1), "phv": In(phv_w),
            "x_id": In(16), "x_ip": In(32),
            "h_req": In(1), "h_we": In(1), "h_addr": In(aw), "h_wdata": In(self.ew),
        })

    def _element(self):
        for st in list(self.pl.stages()) + list(self.pl.egress_stages()):
            for e in st:
                if e.name == self.TABLE:
                    return e
        raise LookupError(self.TABLE)

    def _fld(self, phv, n):
        fields, views = self.pl.phv.fields, self.pl.phv.views
        if n in fields:
            return phv[fields[n].key]
        base, lo, w = views[n]
        return phv[base][lo:lo + w]

    def _table(self, m, e, v, p, csr, prefix):
        if self.build is None:
            return build_element(m, e, self.pl, v, p, csr, prefix=prefix)
        return self.build(m, e, self.pl, v, p, csr, prefix)

    def _host_and_clean(self, m, e, csr, prefix, started):
        """Drive the table's host ports; returns the cycle's ``clean`` and ``xword``
        (some valid word names X: key x_id with the rewrite, or ip x_ip)."""
        ports = {mi.name: mi.port for mi in csr.memories}
        port, dport = ports[e.qualname], ports[f"{e.qualname}.default"]
        m.d.comb += [port.req.eq(self.h_req), port.we.eq(self.h_we),
                     port.addr.eq(self.h_addr), port.wdata.eq(self.h_wdata),
                     dport.req.eq(0)]
        # the default action stays the program's (port idle): an invariant for the induction
        init = 0
        if e.default is not None:
            init = e.action_id(e.default.name) | (
                e.default.pack_params(e.default_params) << e.action_bits)
        m.d.comb += Assert(dport.rdata == init)
        # X: constants the solver picks
        for sig in (self.x_id, self.x_ip):
            prev = Signal(len(sig), name=f"{sig.name}_prev")
            m.d.sync += prev.eq(sig)
            m.d.comb += Assume(~started | (sig == prev))
        kw, ab = e.key_width, e.action_bits
        rw, dr = e.action_id(self.REWRITE), e.action_id("drop")
        bad = []
        named = []
        for w in range(e.ways):
            mem = m.submodules[f"{prefix}_way{w}"]
            for a in range(e.depth):
                rp = mem.read_port(domain="comb")
                m.d.comb += rp.addr.eq(a)
                word = rp.data
                valid, key = word[0], word[1:1 + kw]
                act = word[1 + kw:1 + kw + ab]
                ip = word[1 + kw + ab:1 + kw + ab + 32]
                b = Signal(name=f"bad_w{w}_{a}")
                x = Signal(name=f"xword_w{w}_{a}")
                if self.mode == "deleted":      # X's entry gone, no other entry to X.ip
                    names_x = (key == self.x_id) | (ip == self.x_ip)
                else:                           # X's own entry may stay; no other to X.ip
                    names_x = (key != self.x_id) & (ip == self.x_ip)
                m.d.comb += [
                    x.eq(valid & (act == rw) & ((key == self.x_id) | (ip == self.x_ip))),
                    b.eq(valid & (((act != rw) & (act != dr)) | ((act == rw) & names_x))),
                ]
                bad.append(b)
                named.append(x)
        clean, xword = Signal(name="clean"), Signal(name="xword")
        m.d.comb += [clean.eq(Cat(*bad) == 0), xword.eq(Cat(*named) != 0)]
        return clean, xword


    def _covers(self, m, started, pkt_o, to_x_o, chk, drop, dst, dst_in_o, seen_x_o, clean,
                xin):
        """Non-vacuity (``*_cover`` jobs)."""
        rewritten = pkt_o & chk & ~drop & (dst != dst_in_o)
        if self.mode == "deleted":
            m.d.comb += [
                Cover(started & rewritten),                     # to a live node
                Cover(started & to_x_o & chk & drop & seen_x_o),  # X deleted, then dropped
                # read X's entry before the deletion landed: out to X (outside the window)
                Cover(started & pkt_o & ~chk & ~drop & (dst == self.x_ip) & clean),
            ]
        else:
            m.d.comb += [
                # to a live node while X's entry (valid, X's address) is still in the table
                Cover(started & rewritten & xin),
                # another id's entry rewriting to X.ip, then corrected: a packet that read it
                # leaves to X (outside the window)
                Cover(started & pkt_o & ~chk & ~drop & (dst == self.x_ip) & clean),
            ]


class NiceGetProps(_HiddenBase):
    """Ingress: ``part`` + ``unmapped``, then ``nice.nodes`` (see the module docstring)."""
    TABLE, REWRITE = "nodes", "node"

    def elaborate(self, platform):
        m = Module()
        pl = self.pl
        csr = CsrBuilder()
        started = _started(m)
        fld = self._fld
        phv_in = Signal(data.StructLayout(pl.phv.layout()))
        m.d.comb += phv_in.eq(self.phv)
        fi = lambda n: fld(phv_in, n)                        # noqa: E731
        m.d.comb += Assume(fi("nice.m.mcopy") == fi("nice.m.mhit"))

        stages = pl.stages()
        names = [[e.name for e in st] for st in stages]
        assert names[2] == ["part", "unmapped", "divisions"] and names[3] == ["nodes"], names
        v, p, t1 = build_stage(m, stages[2][:2], pl, self.valid, phv_in, csr, prefix="c")
        e = stages[3][0]
        if self.mode == "unmapped":
            # the ring and division tables name X no more: no packet's chosen node is X
            # (stated at the nodes stage's input, where the lookup key is formed)
            fc = lambda n: fld(p, n)                     # noqa: E731
            m.d.comb += Assume(~((fc("meta.hdr_type") == self.prog.hdr_type) & fc("nice.m.uhit")
                                 & (Mux(fc("nice.m.dhit"), fc("nice.m.dnode"),
                                        fc("nice.m.primary")) == self.x_id)))
        v, p, lat = self._table(m, e, v, p, csr, "n")
        total = t1 + lat
        assert (t1, lat) == (1, 3), (t1, lat)
        clean, xword = self._host_and_clean(m, e, csr, "n", started)
        chk = _window(m, clean, lat, "clean")          # the packet's cycles in the stage

        sel = fi("meta.hdr_type") == self.prog.hdr_type
        ring = fi("nice.m.ring")
        vring = sel & ((ring == 1) | (ring == 2))
        chosen = Mux(fi("nice.m.dhit"), fi("nice.m.dnode"), fi("nice.m.primary"))
        to_x = sel & fi("nice.m.uhit") & (chosen == self.x_id)
        v_o = _delay(m, self.valid, total, "v")
        vring_o = _delay(m, vring, total, "vring")
        to_x_o = _delay(m, to_x, total, "to_x")
        uni_o = _delay(m, sel & fi("nice.m.uhit"), total, "uni")
        dst_in_o = _delay(m, fi("ipv4.dst"), total, "dst_in")
        fo = lambda n: fld(p, n)                             # noqa: E731
        drop, dst, mcopy = fo("meta.drop"), fo("ipv4.dst"), fo("nice.m.mcopy")
        m.d.comb += [
            Assert(v == v_o),
            Assert(~(v_o & chk & vring_o & ~mcopy & ~drop) | (dst != self.x_ip)),
            Assert(~(v_o & chk & to_x_o) | drop),
        ]
        xin = _delay(m, xword, lat, "xin")      # X's entry in the table at the lookup
        # covers: a get to a live node; X's entry present, then deleted, then a get to X
        # dropped; a get that read X's entry just before the deletion, out to X
        seen_x = Signal(name="seen_x")
        with m.If(xword):
            m.d.sync += seen_x.eq(1)
        seen_x_o = _delay(m, seen_x, total, "seen_x")
        self._covers(m, started, v_o & uni_o, to_x_o, chk, drop, dst, dst_in_o, seen_x_o,
                     clean, xin)
        self.latency = total
        return m


class NiceCopyProps(_HiddenBase):
    """Egress: ``nice.copies`` on one copy's PHV (see the module docstring)."""
    TABLE, REWRITE = "copies", "copy"

    def elaborate(self, platform):
        m = Module()
        pl = self.pl
        csr = CsrBuilder()
        started = _started(m)
        fld = self._fld
        phv_in = Signal(data.StructLayout(pl.phv.layout()))
        m.d.comb += phv_in.eq(self.phv)
        fi = lambda n: fld(phv_in, n)                        # noqa: E731

        eg = pl.egress_stages()
        assert [[e.name for e in st] for st in eg] == [["copies"]], eg
        e = eg[0][0]
        v, p, lat = self._table(m, e, self.valid, phv_in, csr, "q")
        assert lat == 3, lat
        clean, xword = self._host_and_clean(m, e, csr, "q", started)
        chk = _window(m, clean, lat, "clean")

        sel = fi("meta.hdr_type") == self.prog.hdr_type
        copy = sel & fi("nice.m.mcopy")
        v_o = _delay(m, self.valid, lat, "v")
        copy_o = _delay(m, copy, lat, "copy")
        to_x = copy & (fi("meta.rid") == self.x_id)
        if self.mode == "unmapped":         # the copy lists name X no more
            m.d.comb += Assume(~to_x)
        to_x_o = _delay(m, to_x, lat, "to_x")
        drop_in_o = _delay(m, fi("meta.drop"), lat, "drop_in")
        dst_in_o = _delay(m, fi("ipv4.dst"), lat, "dst_in")
        fo = lambda n: fld(p, n)                             # noqa: E731
        drop, dst = fo("meta.drop"), fo("ipv4.dst")
        m.d.comb += [
            Assert(v == v_o),
            Assert(~(v_o & chk & copy_o & ~drop) | (dst != self.x_ip)),
            Assert(~(v_o & chk & to_x_o) | drop),
        ]
        if self.mode == "deleted":          # (c'), whatever the tables hold
            m.d.comb += Assert(~(v_o & ~copy_o) | ((dst == dst_in_o) & (drop == drop_in_o)))
        seen_x = Signal(name="seen_x")
        with m.If(xword):
            m.d.sync += seen_x.eq(1)
        seen_x_o = _delay(m, seen_x, lat, "seen_x")
        xin = _delay(m, xword, lat, "xin")
        self._covers(m, started, v_o & copy_o, to_x_o, chk, drop, dst, dst_in_o, seen_x_o,
                     clean, xin)
        self.latency = lat
        return m


def _patched_module(modname, edits, alias):
    import importlib
    import inspect
    import types
    mod = importlib.import_module(modname)
    src = inspect.getsource(mod)
    for old, new in edits:
        if src.count(old) != 1:
            raise ValueError(f"mutation anchor found {src.count(old)} times: {old!r}")
        src = src.replace(old, new)
    m = types.ModuleType(alias)
    m.__package__ = modname.rpartition(".")[0]
    m.__file__ = mod.__file__
    exec(compile(src, mod.__file__ + " (mutant)", "exec"), m.__dict__)
    return m


def patched_make(*edits):
    """``make_nice`` from a copy of ``netstor/offloads/nice/program.py`` with each ``(old,
    new)`` text replaced (each ``old`` exactly once): built in memory, never written to the
    tree."""
    return _patched_module("netstor.offloads.nice.program", edits,
                           "netstor.offloads.nice._program_mutant").make_nice


def patched_table_build(*edits):
    """The table elements' gateware builder (``netstor.elements.table._build``) from a copy
    of ``table.py`` with the edits applied (in memory)."""
    return _patched_module("netstor.elements.table", edits,
                           "netstor.elements._table_mutant")._build
