"""SymbiYosys jobs for the deparser's checksums and window (pytest -m formal); see formal/README.md
and the harnesses in formal/props_deparser.py.

| job | mode | what |
| --- | --- | --- |
| checksum_lemmas | k-induction, k=1 (combinational) | RFC 1624 keeps a verifying checksum verifying and a failing one failing, equals the full recomputation but for 0x0000/0xFFFF, ones' addition associative, unchanged words leave the UDP checksum as sent, a kept high byte keeps the sum off +0 |
| checksum_lemmas_cover | cover 1 | the one case where RFC 1624 and the full recomputation differ is reachable in free words |
| deparser_ipv4 | BMC 1, the block combinational | DeparsePrep, every PHV and original fields, VLAN or not, ihl 5..15: the IPv4 checksum bytes are written and equal RFC 1624 eqn. 3 over the words the deparser may change; TOS, ident, TTL, addresses written from the PHV; version/IHL, lengths, flags, protocol bytes unchanged; no options byte written |
| deparser_udp | BMC 1, the block combinational | the UDP checksum bytes are written and equal RFC 1624 over pseudo-header addresses, ports and (with a program's header) the app bytes inside the datagram (``8 + j < udp.len``; the block's flags equal that), 0 sent as 0xFFFF, a zero checksum kept 0; ports written from the PHV, length unchanged |
| deparser_udp_app | BMC 1, the block combinational, its checksum folds free | every placement's 42 app bytes: written from the PHV with a program's header, not written without |
| deparser_pipeline | BMC PREP_LATENCY+1 | the registered block equals its combinational form on the inputs of PREP_LATENCY cycles before (valid always; window, mask, extra when valid), for every input |
| deparser_cover | cover 1 | reachable: an IPv4 rewrite after a VLAN tag with options; a UDP rewrite with app words; an odd datagram ending inside the window with its last app bytes rewritten |

Why split so (every job takes seconds; the one-piece BMC of the 4-cycle prep did not finish in
10 minutes): in a BMC unrolling every register is a fresh solver variable tied to the previous
step by an equality, and yices in incremental mode does not substitute those, so the block's
adder trees (over step-0 inputs) and the harness's reference (over its delayed copies) were two
unrelated circuits to the solver. Built combinationally (``CombModule``: the block's ``sync``
statements as ``comb``, the harness's delays 0), the block and the reference are functions of
the same input variables and Yosys merges the adders they share; ``deparser_pipeline`` then
ties the registered block to that function (two identical circuits, one pipelined: 5 steps).
The reference adds the same integer terms in the block's grouping (integer addition with no
truncation: the grouping changes nothing but the solver's work) and folds with its own code.

``test_formal_deparser_mutation``: the jobs catch a block whose app words ignore the mask of
their low byte (``deparser_udp``), whose fold drops the end-around carry of its first
step (``deparser_ipv4``; its last step's carry is never set for sums of at most 23 bits, so
dropping that one is an equivalent mutant), and whose checksum fold is registered one cycle more than the rest
(``deparser_pipeline``).
"""

import contextlib
import sys
from pathlib import Path

import pytest
from amaranth.hdl import Cat, Signal

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import convert_harness, run_sby                 # noqa: E402
from props_deparser import (DeparserChecksumProps, DeparserPipelineEquiv,  # noqa: E402
                            ChecksumLemmas)
from netstor.gateware import deparser                       # noqa: E402
from netstor.gateware.deparser import PREP_LATENCY          # noqa: E402

K = PREP_LATENCY + 1
# name: (harness factory, mode, depth)
JOBS = {
    "checksum_lemmas": (ChecksumLemmas, "prove", 1),
    "checksum_lemmas_cover": (ChecksumLemmas, "cover", 1),
    "deparser_ipv4": (lambda: DeparserChecksumProps("ipv4"), "bmc", 1),
    "deparser_udp": (lambda: DeparserChecksumProps("udp"), "bmc", 1),
    "deparser_udp_app": (lambda: DeparserChecksumProps("udp_app"), "bmc", 1),
    "deparser_pipeline": (DeparserPipelineEquiv, "bmc", K),
    "deparser_cover": (lambda: DeparserChecksumProps("udp"), "cover", 1),
}


@pytest.mark.formal
@pytest.mark.parametrize("job", list(JOBS))
def test_formal_deparser(job):
    make, mode, depth = JOBS[job]
    path = convert_harness(job, make())
    assert run_sby(job, path, "top", mode=mode, depth=depth, engine="smtbmc yices")


def _app_words_lo_unmasked(app, dmask):
    ones = [Signal(init=1) for _ in dmask]
    words = _APP_WORDS(app, dmask)
    full = _APP_WORDS(app, ones)
    return [Cat(f[:8], w[8:]) for w, f in zip(words, full)]


def _fold_once(m, total, name):
    return (total[:16] + total[16:])[:16]          # the first fold's carry dropped


def _fold_one_cycle_late(m, total, name):
    r = Signal(16, name=f"{name}_late")
    m.d.sync += r.eq(_FOLD(m, total, name))
    return r


_APP_WORDS, _FOLD = deparser.app_words, deparser.ones_sum_fold
MUTANTS = {
    "app_lo_unmasked": ("app_words", _app_words_lo_unmasked, "deparser_udp"),
    "fold_once": ("ones_sum_fold", _fold_once, "deparser_ipv4"),
    "fold_one_cycle_late": ("ones_sum_fold", _fold_one_cycle_late, "deparser_pipeline"),
}


@contextlib.contextmanager
def _patched(attr, value):
    saved = getattr(deparser, attr)
    setattr(deparser, attr, value)
    try:
        yield
    finally:
        setattr(deparser, attr, saved)


@pytest.mark.formal
@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_formal_deparser_mutation(mutant):
    """A wrong block fails its job (with a counterexample, not an error)."""
    attr, value, job = MUTANTS[mutant]
    make, mode, depth = JOBS[job]
    with _patched(attr, value):
        path = convert_harness(f"mut_{mutant}", make())
    with pytest.raises(AssertionError, match=r"\[FAIL"):
        run_sby(f"mut_{mutant}", path, "top", mode=mode, depth=depth, engine="smtbmc yices")
