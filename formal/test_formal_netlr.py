"""SymbiYosys jobs for NetLR's ack counting (pytest -m formal); see formal/props_netlr.py and
formal/README.md.

| job | mode | what (parameters) |
| --- | --- | --- |
| netlr_ack | k-induction, k=8 | NetLR's program ``nl`` as built (``classify`` -> ``admit`` -> the ``nl.slots`` read-modify-write -> ``decide``, chained as the data path chains stages; 2 slots, full 64-bit fp / 32-bit seq / 8-bit rid): against a reference ack *set* per slot (rids, not positions), over any packets (writes, acks, stale / duplicated / forged / untrusted acks, reads, others) and a live mask changing between any two packets: a trusted ack passes (no drop reason) exactly when it commits, i.e. when the slot's ack set then covers every replica live in its view of the group; ``commit`` likewise; the slot cells equal the reference (fp, seq, ack bitmap = the set by member position) |
| netlr_tail | BMC, latency + 1 (complete: feed-forward) | the stages after ``decide``: an ack leaves with ``meta.drop`` = its input drop, or untrusted, or a drop reason: a committed ack goes on, every other ack is dropped |
| netlr_ack_cover | cover, 10 | a commit on the third counted ack after a duplicate; a commit by a duplicate ack after a liveness change; a write that re-takes its slot after an ack, then commits |

``test_formal_netlr_mutation``: each mutant of the program (built in memory from a copy of
program.py, ``props_netlr.patched_make``) fails with a counterexample (BMC to the depth its
shortest counterexample needs): the ``netlr_ack`` mutants on the commit assertions alone
(the slot-cell invariant left out), ``tail_absorbed`` on ``netlr_tail``.
Jobs write into build/formal/<job>/.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import convert_harness, run_sby                 # noqa: E402
from props_netlr import NetlrAckProps, NetlrTailProps, patched_make   # noqa: E402


# name: (harness factory, mode, depth)
JOBS = {
    "netlr_ack": (NetlrAckProps, "prove", 8),
    "netlr_tail": (NetlrTailProps, "bmc", 6),
    "netlr_ack_cover": (NetlrAckProps, "cover", 10),
}


@pytest.mark.formal
@pytest.mark.parametrize("job", list(JOBS))
def test_formal_netlr(job):
    make, mode, depth = JOBS[job]
    path = convert_harness(job, make())
    assert run_sby(job, path, "top", mode=mode, depth=depth, engine="smtbmc yices")


# mutant: (edits to program.py, BMC depth reaching the counterexample[, harness]) -- netlr_ack
# unless a harness is named
MUTANTS = {
    # the brief's ack *count* instead of the bitmap: a duplicated ack counts twice
    "count": ([("nacks = oacks | abit", "nacks = oacks + 1"),
               ("commit = (nacks & live) == live", "commit = nacks >= nread"),
               ("done = ((oacks | abit) & live) == live", "done = (oacks + 1) >= nread")], 9),
    # an ack of a member that is not live (a joining replica) sets its bit
    "nonlive_ack": ([("hits = [(rid == members[8 * i:8 * i + 8]) & live[i] for i in range(M)]",
                      "hits = [(rid == members[8 * i:8 * i + 8]) for i in range(M)]")], 9),
    # the slot is not freed on a commit: a duplicated ack commits (reaches the client) again
    "no_free": ([("a_new = Mux(commit, Cat(Const(0, 64), oseq, rid, Const(0, 8)),",
                  "a_new = Mux(commit, Cat(ofp, oseq, rid, Const(0, 8)),")], 9),
    # a write that re-takes its slot keeps the earlier write's acks
    "keep_acks": ([("w_new = Cat(fp, seq, Mux(ofp == fp, orid, first), Const(0, 8))",
                    "w_new = Cat(fp, seq, Mux(ofp == fp, orid, first), oacks)")], 10),
    # the program before the fix: an ack with fp 0 matches a free slot and commits
    "fp0_ack": ([("Set(ok_ack, ack & ghit & any_hit & (fp != 0))",
                  "Set(ok_ack, ack & ghit & any_hit)")], 7),
    # netlr_tail: an absorbed ack is not dropped (reaches the client before its commit)
    "tail_absorbed": ([("| collide | stale | absorbed | ignored | refused",
                        "| collide | stale | ignored | refused")], 6, NetlrTailProps),
}


@pytest.mark.formal
@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_formal_netlr_mutation(mutant):
    """A wrong program fails netlr_ack (with a counterexample, not an error)."""
    edits, depth, *harness = MUTANTS[mutant]
    props = harness[0] if harness else NetlrAckProps
    name = f"mut_netlr_{mutant}"
    kw = {} if harness else {"cells": False}     # caught by the commit assertions alone
    path = convert_harness(name, props(make=patched_make(*edits), **kw))
    with pytest.raises(AssertionError, match=r"\[FAIL"):
        run_sby(name, path, "top", mode="bmc", depth=depth, engine="smtbmc yices")
