"""Formal harnesses for the deparser's checksums (:class:`netstor.gateware.deparser.DeparsePrep`).

The proof is split in two so that every job takes seconds (a SAT solver finds identities
modulo 65535 between differently shaped adder networks very hard; it handles sums of the same
terms and small modular lemmas well):

**The block** (:class:`DeparserChecksumProps`): the prep is built as
:class:`~netstor.gateware.deparser.Deparser` builds it (``DeparsePrep(pipeline, name).build(m,
valid, phv, orig, extra)``), for a pipeline with the L3 program (the prep reads only platform
fields; programs only add metadata it never looks at), but into a :class:`CombModule`: its
``sync`` statements become ``comb``, so the 4-cycle pipeline is one combinational function of
the inputs, the one :class:`DeparserPipelineEquiv` proves the registered block computes
``PREP_LATENCY`` cycles later. Its result is the 128-byte rewrite window ``wdata`` and its
byte mask ``wmask``. Inputs, all free: ``valid``, the whole PHV and the original field values
``orig`` (``parser.orig_layout``), with the environment the parser and the language
guarantee: ``ipv4.ver_ihl`` and ``ipv4.proto`` are read-only (equal to the original bytes),
``udp_valid`` implies ``ipv4_valid`` and protocol 17, ``ipv4_valid`` implies ``ihl >= 5``.
Nothing is assumed about the incoming checksums. The frame's new bytes are read out of the
window (``wdata`` where ``wmask`` is set, else the original byte) at the offsets the spec gives
(L3 at 14, or 18 after a VLAN tag; UDP at ``L3 + 4*ihl``, every ``ihl`` 5..15). Reference: RFC
1624 eqn. 3 written here from the RFC, ``HC' = ~(~HC + sum(~m + m'))`` as a ones'-complement
sum (the plain integer sum folded twice by the harness's own fold), over the words the
deparser may change, the integer terms added in the block's grouping (integer addition, no
truncation: the grouping only spares the solver an associativity proof). Asserted:

* ``ipv4`` job: for ``ipv4_valid``, the checksum bytes are written and equal RFC 1624 over
  the words version/IHL+TOS, identification, TTL+protocol, source and destination; TOS,
  identification, TTL and the addresses are the PHV's; version/IHL, total length,
  flags/fragment offset and protocol bytes keep their values; no options byte is written;
* ``udp`` job: for ``udp_valid``, the checksum bytes are written; a zero checksum stays 0;
  otherwise it equals RFC 1624 over source, destination (pseudo header), the ports and, when
  ``hdr_type != 0``, the app bytes inside the datagram (``8 + j < udp.len``, each word's
  missing byte as 0: the block's per-byte flags are asserted equal to that rule), with 0 sent
  as 0xFFFF (RFC 768); the ports are the PHV's, the length is kept;
* ``udp_app`` job (the block's checksum folds replaced by free inputs: the placement does not
  depend on their values): with ``hdr_type != 0`` the 42 app bytes of every placement are
  written from the PHV, without it none is written.

**The arithmetic** (:class:`ChecksumLemmas`, no gateware): for all 16-bit words, with ``R``
the ones' sum of the words an update does not touch:

* ``L1``: an RFC 1624 update of one word of a header whose checksum verifies
  (``R +' o +' c == 0xFFFF``) gives a checksum that verifies (``R +' n +' c' == 0xFFFF``);
* ``L2``: and one that does not verify still does not;

  (L1-L3 exclude words that are all 0, whose ones' sum is the positive zero 0x0000: neither
  an IPv4 header, version 4, nor a UDP pseudo header, protocol 17, is all 0; with them L1 and
  L2 fail, e.g. ``R = n = 0``: ``c' = 0`` does not verify);
* ``L3``: ``c'`` equals the full recomputation ``~(R +' n)`` (the spec's IPv4 rule), except
  when ``R +' n`` is the negative zero 0xFFFF and ``c'`` the other zero: see the job's
  ``ipv4_zero`` cover below;
* ``L4``: ones' addition is associative and the folded wide sum equals the word-by-word sum
  (three words), so an update of several words is several one-word updates, and the block's
  single sum equals the spec's word-by-word rule;
* ``L5``: an unchanged word (``~o +' o``) leaves the UDP checksum as sent (after the 0 ->
  0xFFFF rule) unchanged, so the app words outside the datagram (unchanged by the programs,
  whose headers lie inside it) may take part, as they do in the block;
* ``L6``: a sum containing ``~w +' w'`` with ``w``, ``w'`` sharing their high byte is never
  +0 (shown for 4 terms).

From the block to the spec (by hand, from the jobs): the block writes RFC 1624 over all the
words it may change (``ipv4``/``udp`` jobs). Ones' sums are the sums modulo 65535 (L4), so for
a verifying incoming header the written checksum and the spec's full recomputation are
congruent (L1/L3 per word, L4 to combine the words) and can differ only as 0x0000 against
0xFFFF. The full recomputation is 0xFFFF only for an all-zero header; RFC 1624's result is
0xFFFF only when its sum is +0, impossible because version/IHL is read-only (L6 with the
TOS word). So for IPv4 the block equals the spec's full recomputation; for UDP the 0 -> 0xFFFF
rule makes the two zeros one (L5), and the block equals the spec's word-by-word rule (L4).
The one case where RFC 1624 and a full recomputation differ is reachable in the lemma's free
words (cover job ``checksum_lemmas_cover``): it needs every word of the header to be
0xFFFF/0, not an IPv4 header.

The proof that the block equals the full recomputation directly (one job) did not finish in 10
minutes: identities modulo 65535 between adder networks of different shapes are hard for the
SAT solver; sums of the same terms are not.
"""

import contextlib

from amaranth.hdl import Assert, Assume, Cat, Const, Cover, Module, Mux, ResetSignal, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In

from netstor.gateware import deparser
from netstor.gateware.deparser import DeparsePrep, PREP_LATENCY
from netstor.gateware.parser import orig_layout
from netstor.lang import APP_BYTES
from netstor.lang.program import Pipeline
from netstor.programs.l3 import make_l3

__all__ = ["DeparserChecksumProps", "DeparserPipelineEquiv", "ChecksumLemmas", "ones_sum",
           "CombModule"]

NW = APP_BYTES // 2         # app window words


def ones_sum(words):
    """Ones'-complement sum of 16-bit values: the plain sum, folded twice (end-around carry).
    0x0000 only when every word is 0x0000."""
    total = Const(0, 32)
    for w in words:
        total = (total + Cat(w[:16], Const(0, 16)))[:32]
    f1 = total[:16] + total[16:32]          # <= 17 bits
    f2 = f1[:16] + f1[16:]                  # no carry left after the second fold
    return f2[:16]


def _word(hi, lo):
    return Cat(lo, hi)


def _be(value, n):
    """Bytes of ``value`` in wire order."""
    return [value[8 * (n - 1 - k):8 * (n - k)] for k in range(n)]


def _words(byte_list):
    return [_word(byte_list[2 * k], byte_list[2 * k + 1]) for k in range(len(byte_list) // 2)]


def _inv(w):
    return (~w)[:16]


class _Domains:
    """``m.d`` with ``sync`` sent to ``comb`` (see :class:`CombModule`)."""

    def __init__(self, d):
        object.__setattr__(self, "_d", d)

    def __getattr__(self, name):
        return getattr(self._d, "comb" if name == "sync" else name)

    def __setattr__(self, name, value):
        setattr(self._d, "comb" if name == "sync" else name, value)


class CombModule:
    """A stand-in for a ``Module`` that a block's ``build(m, ...)`` writes into: every
    ``m.d.sync`` statement becomes ``m.d.comb``, so the block's registers become wires and its
    pipeline one combinational function of the inputs (the block's logic between its
    registers, composed)."""

    def __init__(self, m):
        self._m = m
        self.d = _Domains(m.d)

    def __getattr__(self, name):
        return getattr(self._m, name)


@contextlib.contextmanager
def _folds_free(free):
    """While building: the block's checksum folds (``deparser.ones_sum_fold``) return the free
    16-bit words ``free`` (harness inputs, any value every cycle) instead of their sums."""
    words = iter(free)
    saved = deparser.ones_sum_fold
    deparser.ones_sum_fold = lambda m, total, name: next(words)
    try:
        yield
    finally:
        deparser.ones_sum_fold = saved


class DeparserChecksumProps(wiring.Component):
    """``check``: ``"ipv4"``, ``"udp"`` (the UDP checksum, ports, length) or ``"udp_app"``
    (the app window's bytes, with the block's two checksum folds free values). ``comb``: the
    block built with its registers as wires (:class:`CombModule`) and the harness's delays 0."""

    def __init__(self, check, n_ports=2, comb=True):
        assert check in ("ipv4", "udp", "udp_app")
        self.check, self.comb = check, comb
        self.pl = Pipeline([make_l3(n_ports)], n_ports=n_ports)
        phv_w = data.StructLayout(self.pl.phv.layout()).size
        super().__init__({"valid": In(1), "phv": In(phv_w), "orig": In(orig_layout().size),
                          "free": In(32)})

    def elaborate(self, platform):
        m = Module()
        pl = self.pl
        layout = data.StructLayout(pl.phv.layout())
        phv_in = Signal(layout)
        orig_in = Signal(orig_layout())
        m.d.comb += [phv_in.eq(self.phv), orig_in.eq(self.orig), Assume(~ResetSignal())]
        fin = lambda n: phv_in[pl.phv.fields[n].key]      # noqa: E731

        # ---- environment (the parser's and the language's guarantees) ----------------------
        m.d.comb += [
            Assume(fin("ipv4.ver_ihl") == orig_in.ver_ihl_tos[8:16]),
            Assume(fin("ipv4.proto") == orig_in.ttl_proto[0:8]),
            Assume(~fin("meta.udp_valid") | (fin("meta.ipv4_valid")
                                             & (fin("ipv4.proto") == 17))),
            Assume(~fin("meta.ipv4_valid") | (fin("ipv4.ver_ihl")[0:4] >= 5)),
        ]

        # ---- the block ----------------------------------------------------------------------
        prep = DeparsePrep(pl, "dp")
        free = [self.free[:16], self.free[16:]] if self.check == "udp_app" else []
        with _folds_free(free) if free else contextlib.nullcontext():
            v_out, wdata, wmask, _ = prep.build(CombModule(m) if self.comb else m, self.valid,
                                                phv_in, orig_in, Const(0, 1))
        # the block's in-datagram flags equal the spec's rule, on the input of every cycle
        ulen_in = fin("udp.len")
        for j, b in enumerate(prep.dmask):
            m.d.comb += Assert(b == (ulen_in > 8 + j))
        dmask_in = Cat(*prep.dmask)

        # ---- the inputs, delayed by the harness's own registers ----------------------------
        def delay(value, name):
            for k in range(0 if self.comb else PREP_LATENCY):
                r = Signal.like(value, name=f"{name}_d{k + 1}")
                m.d.sync += r.eq(value)
                value = r
            return value

        valid = delay(self.valid, "valid")
        phv = delay(phv_in, "phv")
        orig = delay(orig_in, "orig")
        dmask = delay(dmask_in, "dmask")
        f = lambda n: phv[pl.phv.fields[n].key]           # noqa: E731
        m.d.comb += Assert(v_out == valid)

        vlan, ipv4, udp = f("meta.vlan_valid"), f("meta.ipv4_valid"), f("meta.udp_valid")
        hdr = f("meta.hdr_type") != 0
        ihl = f("ipv4.ver_ihl")[0:4]

        def window(offsets, originals, name):
            """The frame's new bytes at ``offsets`` (``[(condition, first offset)]``, one
            condition true): the window's byte where its mask is set, else the original;
            and whether every one of them is masked."""
            out, mks = [], []
            sel = Cat(*[c for c, _ in offsets])
            for i, orig_b in enumerate(originals):
                b, mk = Signal(8, name=f"{name}_b{i}"), Signal(name=f"{name}_m{i}")
                with m.Switch(sel):
                    for j, (_, off) in enumerate(offsets):
                        with m.Case(1 << j):
                            m.d.comb += [b.eq(Mux(wmask[off + i],
                                                  wdata[8 * (off + i):8 * (off + i) + 8],
                                                  orig_b)),
                                         mk.eq(wmask[off + i])]
                out.append(b)
                mks.append(mk)
            return out, Cat(*mks).all()

        def term(old, new):                 # RFC 1624: ~m + m' (an integer, no truncation)
            return _inv(old) + new

        def ones_fold(total):
            """The ones'-complement value of a non-negative integer sum: folded twice
            (written here, not the block's fold)."""
            total = Cat(total, Const(0, 32 - len(total)))
            f1 = total[:16] + total[16:32]
            f2 = f1[:16] + f1[16:]
            return f2[:16]

        ip_orig = (_be(orig.ver_ihl_tos, 2) + _be(f("ipv4.total_len"), 2) + _be(orig.ident, 2)
                   + _be(f("ipv4.flags_frag"), 2) + _be(orig.ttl_proto, 2)
                   + _be(orig.ip_csum, 2) + _be(orig.ip_src, 4) + _be(orig.ip_dst, 4))
        # the bytes the spec writes, from the PHV (``None``: kept)
        ip_want = ([None, f("ipv4.tos"), None, None] + _be(f("ipv4.ident"), 2)
                   + [None, None, f("ipv4.ttl"), None, None, None]
                   + _be(f("ipv4.src"), 4) + _be(f("ipv4.dst"), 4))
        l3s = [(vlan == 0, 14), (vlan == 1, 18)]
        ip_new_b, _ = window(l3s, ip_orig, "ip")
        _, ipc_masked = window([(c, o + 10) for c, o in l3s], _be(orig.ip_csum, 2), "ipc")
        w_old, w_new = _words(ip_orig), _words(ip_new_b)
        # the words the deparser may change, old (as received) and new (from the PHV)
        ip_pairs = [(orig.ver_ihl_tos, Cat(f("ipv4.tos"), f("ipv4.ver_ihl"))),
                    (orig.ident, f("ipv4.ident")),
                    (orig.ttl_proto, Cat(f("ipv4.proto"), f("ipv4.ttl"))),
                    (orig.ip_src[16:], f("ipv4.src")[16:]), (orig.ip_src[:16], f("ipv4.src")[:16]),
                    (orig.ip_dst[16:], f("ipv4.dst")[16:]), (orig.ip_dst[:16], f("ipv4.dst")[:16])]
        case = valid & ipv4
        # non-vacuity (cover job): a rewritten header after a VLAN tag with options
        m.d.comb += Cover(case & vlan & (ihl == 7) & (w_new[4] != w_old[4])
                          & (w_new[6] != w_old[6]) & (w_new[5] != w_old[5]))
        if self.check == "ipv4":
            ref = _inv(ones_fold(sum(term(o, n) for o, n in ip_pairs) + _inv(orig.ip_csum)))
            m.d.comb += Assert(~case | (ipc_masked & (w_new[5] == ref)))
            for i, want in enumerate(ip_want):
                if i in (10, 11):
                    continue
                m.d.comb += Assert(~case | (ip_new_b[i] == (ip_orig[i] if want is None
                                                            else want)))
            for vl, l3 in ((0, 14), (1, 18)):        # options are never written
                for h in range(6, 16):
                    for i in range(l3 + 20, l3 + 4 * h):
                        m.d.comb += Assert(~(case & (vlan == vl) & (ihl == h)) | ~wmask[i])
            return m

        # ---- UDP --------------------------------------------------------------------------
        ucase = case & udp
        l4_orig = (_be(orig.sport, 2) + _be(orig.dport, 2) + _be(f("udp.len"), 2)
                   + _be(orig.udp_csum, 2) + _be(orig.app, APP_BYTES))
        us = [((vlan == vl) & (ihl == h), l3 + 4 * h)
              for vl, l3 in ((0, 14), (1, 18)) for h in range(5, 16)]
        l4_new_b, _ = window(us, l4_orig, "l4")
        udc_b, udc_masked = window([(c, o + 6) for c, o in us], _be(orig.udp_csum, 2), "udc")
        u_old, u_new = _words(l4_orig), _words(l4_new_b)
        csum_in, csum_out = u_old[3], _word(*udc_b)
        # the app words inside the datagram (bytes beyond it read as 0, on both sides)
        def app_word_list(app):
            byts = _be(app, APP_BYTES)
            byts = [b & dmask[j].replicate(8) for j, b in enumerate(byts)]
            return list(reversed(_words(byts)))  # the block's order: the last word first
        udp_pairs = ip_pairs[3:] + [(orig.sport, f("udp.sport")), (orig.dport, f("udp.dport"))]
        app_pairs = list(zip(app_word_list(orig.app), app_word_list(f("app"))))
        # the integer sum in the block's grouping (APP_GROUP app words a group): integer addition
        # with no truncation, so the grouping changes nothing but the solver's work
        # (each group zero-extended to 20 bits, the block's register width: no change of
        # value, but the same adder shapes in A2, which Yosys then merges)
        G = deparser.APP_GROUP
        groups = [sum(term(o, n) for o, n in app_pairs[k:k + G])
                  for k in range(0, len(app_pairs), G)]
        groups = [Cat(g, Const(0, max(0, 20 - len(g)))) for g in groups]
        total = (sum(term(o, n) for o, n in udp_pairs) + _inv(csum_in)
                 + Mux(hdr, sum(groups), 0))
        c = _inv(ones_fold(total))
        ref = Mux(csum_in == 0, 0, Mux(c == 0, 0xFFFF, c))
        if self.check == "udp":
            m.d.comb += Assert(~ucase | (udc_masked & (csum_out == ref)))
        m.d.comb += [
            Cover(ucase & hdr & vlan & (ihl == 6) & (csum_in != 0) & (csum_out != csum_in)
                  & (u_new[4 + NW - 1] != u_old[4 + NW - 1])),
            Cover(ucase & (csum_in != 0) & (csum_out == 0xFFFF)),
            Cover(ucase & hdr & (f("udp.len") == 8 + 19) & (csum_in != 0)
                  & (l4_new_b[8 + 18] != l4_orig[8 + 18]) & (l4_new_b[8 + 19] != l4_orig[8 + 19])),
        ]
        # ports from the PHV, the length never written; the app bytes from the PHV with a
        # program's header, else unchanged
        for i, want in enumerate(_be(f("udp.sport"), 2) + _be(f("udp.dport"), 2)):
            m.d.comb += Assert(~ucase | (l4_new_b[i] == want))
        for i in (4, 5):
            m.d.comb += Assert(~ucase | (l4_new_b[i] == l4_orig[i]))
        if self.check == "udp_app":
            # with a program's header the app bytes are written from the PHV, else not written
            # (each placement on its own: no mux in the harness)
            app_b = _be(f("app"), APP_BYTES)
            for cond, u in us:
                at = ucase & cond
                for i in range(APP_BYTES):
                    o = u + 8 + i
                    m.d.comb += Assert(~at | Mux(hdr, wmask[o] & (wdata[8 * o:8 * o + 8]
                                                                  == app_b[i]), ~wmask[o]))
        return m


class DeparserPipelineEquiv(wiring.Component):
    """The registered block equals its combinational form (:class:`CombModule`, what the
    checksum jobs prove) on the inputs of ``PREP_LATENCY`` cycles before: ``valid`` always,
    ``wdata``/``wmask``/``extra`` whenever ``valid``. For every input (no environment)."""

    def __init__(self, n_ports=2):
        self.pl = Pipeline([make_l3(n_ports)], n_ports=n_ports)
        phv_w = data.StructLayout(self.pl.phv.layout()).size
        super().__init__({"valid": In(1), "phv": In(phv_w), "orig": In(orig_layout().size),
                          "extra": In(8)})

    def elaborate(self, platform):
        m = Module()
        pl = self.pl
        layout = data.StructLayout(pl.phv.layout())
        phv_in, orig_in = Signal(layout), Signal(orig_layout())
        m.d.comb += [phv_in.eq(self.phv), orig_in.eq(self.orig), Assume(~ResetSignal())]
        v1, wd1, wm1, x1 = DeparsePrep(pl, "dp").build(m, self.valid, phv_in, orig_in,
                                                       self.extra)
        ins = Cat(self.valid, phv_in.as_value(), orig_in.as_value(), self.extra)
        for k in range(PREP_LATENCY):
            r = Signal.like(ins, name=f"in_d{k + 1}")
            m.d.sync += r.eq(ins)
            ins = r
        pos, parts = 0, []
        for w in (1, len(phv_in.as_value()), len(orig_in.as_value()), 8):
            parts.append(ins[pos:pos + w])
            pos += w
        v2, wd2, wm2, x2 = DeparsePrep(pl, "dq").build(
            CombModule(m), parts[0], data.View(layout, parts[1]),
            data.View(orig_layout(), parts[2]), parts[3])
        m.d.comb += [Assert(v1 == v2),
                     Assert(~v1 | ((wd1 == wd2) & (wm1 == wm2) & (x1 == x2)))]
        return m


class ChecksumLemmas(wiring.Component):
    """The arithmetic lemmas L1-L5 of the module docstring over free 16-bit words (no
    gateware; a combinational check, any mode)."""

    def __init__(self):
        super().__init__({"r": In(16), "o": In(16), "n": In(16), "c": In(16),
                          "a": In(16), "b": In(16), "x": In(16)})

    def elaborate(self, platform):
        m = Module()
        r, o, n, c, a, b, x = self.r, self.o, self.n, self.c, self.a, self.b, self.x
        m.d.comb += Assume(~ResetSignal())
        c_new = _inv(ones_sum([_inv(c), _inv(o), n]))             # RFC 1624 eqn. 3
        valid_old = ones_sum([r, o, c]) == 0xFFFF
        valid_new = ones_sum([r, n, c_new]) == 0xFFFF
        # a ones' sum is +0 (0x0000) only when every word is 0: never the case for an IPv4
        # header (version 4) nor for a UDP pseudo header (protocol 17); excluded below
        zero_old = ones_sum([r, o, c]) == 0
        zero_new = ones_sum([r, n]) == 0
        m.d.comb += [
            Assert(~valid_old | valid_new | zero_new),                 # L1
            Assert(valid_old | ~valid_new | zero_old),                 # L2
        ]
        full = _inv(ones_sum([r, n]))                                  # L3
        negzero = ones_sum([r, n]) == 0xFFFF
        m.d.comb += Assert(~valid_old | zero_new | (c_new == full)
                           | (negzero & (c_new == 0xFFFF)))
        m.d.comb += Cover(valid_old & negzero & (c_new == 0xFFFF))     # the excluded case
        m.d.comb += [                                                   # L4
            Assert(ones_sum([ones_sum([a, b]), x]) == ones_sum([a, ones_sum([b, x])])),
            Assert(ones_sum([a, b, x]) == ones_sum([ones_sum([a, b]), x])),
            Assert(ones_sum([a, b]) == ones_sum([b, a])),
        ]

        def udp_out(s):                                                 # ~s, 0 sent as 0xFFFF
            v = _inv(s)
            return Mux(v == 0, 0xFFFF, v)
        m.d.comb += Assert(udp_out(ones_sum([a, _inv(o), o])) == udp_out(a))      # L5
        # L6: a sum with the pair (~w, w') of a word whose high byte is kept (version/IHL
        # is read-only) is never +0, so RFC 1624 never yields 0xFFFF for an IPv4 header
        m.d.comb += Assert((a[8:16] != b[8:16]) | (ones_sum([_inv(a), b, x, r]) != 0))
        return m
