"""Formal harnesses for the deparser's checksums (:class:`netstor.gateware.deparser.DeparsePrep`).

The proof is split in two so that every job takes seconds (a SAT solver finds identities
modulo 65535 between differently shaped adder networks very hard; it handles sums of the same
terms and small modular lemmas well):

**The block** (:class:`DeparserChecksumProps`): the prep is built exactly as
:class:`~netstor.gateware.deparser.Deparser` builds it (``DeparsePrep(pipeline, name).build(m,
valid, phv, orig, extra)``), for a pipeline with the L3 program (the prep reads only platform
fields; programs only add metadata it never looks at). Its result, ``PREP_LATENCY`` cycles
later, is the 128-byte rewrite window ``wdata`` and its byte mask ``wmask``. Inputs, every
cycle, all free: ``valid``, the whole PHV and the original field values ``orig``
(``parser.orig_layout``), with the environment the parser and the language guarantee:
``ipv4.ver_ihl`` and ``ipv4.proto`` are read-only (equal to the original bytes), ``udp_valid``
implies ``ipv4_valid`` and protocol 17, ``ipv4_valid`` implies ``ihl >= 5``. Nothing is
assumed about the incoming checksums. The frame's new bytes are read out of the window
(``wdata`` where ``wmask`` is set, else the original byte) at the offsets the spec gives (L3 at
14, or 18 after a VLAN tag; UDP at ``L3 + 4*ihl``, every ``ihl`` 5..15). Reference: RFC 1624
eqn. 3 written here from the RFC, ``HC' = ~(~HC + sum(~m + m'))`` as a ones'-complement sum
(:func:`ones_sum`: the plain sum of the 16-bit words, folded twice), over the words the
deparser may change. Asserted ``PREP_LATENCY`` cycles after a valid input:

* ``ipv4`` job: ``valid`` comes out with the same delay; for ``ipv4_valid``, the checksum
  bytes are written and equal RFC 1624 over the words version/IHL+TOS, identification,
  TTL+protocol, source and destination; version/IHL, total length, flags/fragment offset and
  protocol bytes keep their values; no options byte is written;
* ``udp`` job: for ``udp_valid``, the checksum bytes are written; a zero checksum stays 0;
  otherwise it equals RFC 1624 over source, destination (pseudo header), the ports and, when
  ``hdr_type != 0``, the 16 app words, with 0 sent as 0xFFFF (RFC 768).

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

from amaranth.hdl import Assert, Assume, Cat, Const, Cover, Module, Mux, ResetSignal, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In

from netstor.gateware.deparser import DeparsePrep, PREP_LATENCY
from netstor.gateware.parser import orig_layout
from netstor.lang import APP_BYTES
from netstor.lang.program import Pipeline
from netstor.programs.l3 import make_l3

__all__ = ["DeparserChecksumProps", "ChecksumLemmas", "ones_sum"]

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


class DeparserChecksumProps(wiring.Component):
    """``check``: ``"ipv4"`` or ``"udp"`` (see the module docstring)."""

    def __init__(self, check, n_ports=2):
        assert check in ("ipv4", "udp")
        self.check = check
        self.pl = Pipeline([make_l3(n_ports)], n_ports=n_ports)
        phv_w = data.StructLayout(self.pl.phv.layout()).size
        super().__init__({"valid": In(1), "phv": In(phv_w), "orig": In(orig_layout().size)})

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
        v_out, wdata, wmask, _ = prep.build(m, self.valid, phv_in, orig_in, Const(0, 1))

        # ---- the inputs, delayed by the harness's own registers ----------------------------
        def delay(value, name):
            for k in range(PREP_LATENCY):
                r = Signal.like(value, name=f"{name}_d{k + 1}")
                m.d.sync += r.eq(value)
                value = r
            return value

        valid = delay(self.valid, "valid")
        phv = delay(phv_in, "phv")
        orig = delay(orig_in, "orig")
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

        ip_orig = (_be(orig.ver_ihl_tos, 2) + _be(f("ipv4.total_len"), 2) + _be(orig.ident, 2)
                   + _be(f("ipv4.flags_frag"), 2) + _be(orig.ttl_proto, 2)
                   + _be(orig.ip_csum, 2) + _be(orig.ip_src, 4) + _be(orig.ip_dst, 4))
        l3s = [(vlan == 0, 14), (vlan == 1, 18)]
        ip_new_b, _ = window(l3s, ip_orig, "ip")
        _, ipc_masked = window([(c, o + 10) for c, o in l3s], _be(orig.ip_csum, 2), "ipc")
        w_old, w_new = _words(ip_orig), _words(ip_new_b)
        case = valid & ipv4
        # non-vacuity (cover job): a rewritten header after a VLAN tag with options
        m.d.comb += Cover(case & vlan & (ihl == 7) & (w_new[4] != w_old[4])
                          & (w_new[6] != w_old[6]) & (w_new[5] != w_old[5]))
        if self.check == "ipv4":
            changed = (0, 2, 4, 6, 7, 8, 9)          # word indices the deparser may change
            c_in = w_old[5]
            ref = _inv(ones_sum([_inv(c_in)] + [t for i in changed
                                                for t in (_inv(w_old[i]), w_new[i])]))
            m.d.comb += Assert(~case | (ipc_masked & (w_new[5] == ref)))
            for i in (0, 2, 3, 6, 7, 9):             # version/IHL, lengths, flags, protocol
                m.d.comb += Assert(~case | (ip_new_b[i] == ip_orig[i]))
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
        _, udc_masked = window([(c, o + 6) for c, o in us], _be(orig.udp_csum, 2), "udc")
        u_old, u_new = _words(l4_orig), _words(l4_new_b)
        csum_in, csum_out = u_old[3], u_new[3]
        terms = [_inv(csum_in)]
        for wo, wn in zip(w_old[6:10] + u_old[:2], w_new[6:10] + u_new[:2]):
            terms += [_inv(wo), wn]
        for k in range(NW):
            wo, wn = u_old[4 + k], u_new[4 + k]
            terms += [Mux(hdr, _inv(wo), 0), Mux(hdr, wn, 0)]
        c = _inv(ones_sum(terms))
        ref = Mux(csum_in == 0, 0, Mux(c == 0, 0xFFFF, c))
        m.d.comb += Assert(~ucase | (udc_masked & (csum_out == ref)))
        m.d.comb += [
            Cover(ucase & hdr & vlan & (ihl == 6) & (csum_in != 0) & (csum_out != csum_in)
                  & (u_new[4 + NW - 1] != u_old[4 + NW - 1])),
            Cover(ucase & (csum_in != 0) & (csum_out == 0xFFFF)),
        ]
        # the length field is never written; without a program's header the app bytes aren't
        for i in (4, 5):
            m.d.comb += Assert(~ucase | (l4_new_b[i] == l4_orig[i]))
        for i in range(8, 8 + APP_BYTES):
            m.d.comb += Assert(~(ucase & ~hdr) | (l4_new_b[i] == l4_orig[i]))
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
