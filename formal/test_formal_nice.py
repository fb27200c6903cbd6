"""SymbiYosys jobs for NICE's failure hiding (pytest -m formal): a packet to a hidden node is
never delivered to it; see formal/props_nice.py (property, assumptions) and formal/README.md.

| job | mode | what (parameters) |
| --- | --- | --- |
| nice_hidden_get | k-induction, k=6 | ingress ``part`` + ``unmapped`` -> ``nice.nodes`` (4 ways x 2, 16-bit ids, as ``make_nice`` builds it), LPM results and the whole PHV free, free host writes: with the table clean of X while the packet is in the nodes stage, a vring packet (not a multicast copy) never leaves undropped with ``ipv4.dst`` = X's address, and a get mapped to X (division replica, else primary) is dropped |
| nice_hidden_copies | k-induction, k=6 | egress ``nice.copies``: likewise for every NICE copy (a copy for rid X dropped, no copy out to X's address); other packets untouched |
| nice_hidden_get_cover, nice_hidden_copies_cover | cover, 8 | a rewrite to a live node; a packet for X dropped after X's entry was deleted; a packet that read X's entry before the deletion, out to X |
| nice_unmapped_get | k-induction, k=5 | the other order of the hiding writes: the ring and division tables name X no more (no get's chosen node is X) while X's own ``nice.nodes`` entry may still be there (the diff deletes last): no vring packet leaves undropped to X's address, given no *other* entry rewrites to it (k=6: the base case stalls in yices) |
| nice_unmapped_get_cover | cover, 8 | a get rewritten to a live node while X's entry is in the table; a get out to X that read another id's entry naming X.ip before it was corrected |

``test_formal_nice_mutation``: each mutant (program.py or the exact-table gateware, patched in
memory) fails with a counterexample (BMC). Jobs write into build/formal/<job>/.
"""

import sys
from functools import partial
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import convert_harness, run_sby                 # noqa: E402
from props_nice import (NiceCopyProps, NiceGetProps, patched_make,   # noqa: E402
                        patched_table_build)

# name: (harness factory, mode, depth)
JOBS = {
    "nice_hidden_get": (NiceGetProps, "prove", 6),
    "nice_hidden_copies": (NiceCopyProps, "prove", 6),
    "nice_hidden_get_cover": (NiceGetProps, "cover", 8),
    "nice_hidden_copies_cover": (NiceCopyProps, "cover", 8),
    "nice_unmapped_get": (lambda: NiceGetProps(mode="unmapped"), "prove", 5),
    "nice_unmapped_get_cover": (lambda: NiceGetProps(mode="unmapped"), "cover", 8),
}


@pytest.mark.formal
@pytest.mark.parametrize("job", list(JOBS))
def test_formal_nice(job):
    make, mode, depth = JOBS[job]
    path = convert_harness(job, make())
    assert run_sby(job, path, "top", mode=mode, depth=depth, engine="smtbmc yices")


_NODES_DROP = ('                default=drop, when=uhit))',
               '                when=uhit))')
_COPIES_DROP = ('                       default=drop, when=mcopy))',
                '                       when=mcopy))')
_VALID = ('m.d.sync += [h.eq(ent[0] & (ent[1:1 + kw] == key1)), a.eq(ent[1 + kw:])]',
          'm.d.sync += [h.eq(ent[1:1 + kw] == key1), a.eq(ent[1 + kw:])]')

_KEY = (_VALID[0], 'm.d.sync += [h.eq(ent[0] & (ent[1:kw] == key1[:kw - 1])), a.eq(ent[1 + kw:])]')

# mutant: (harness, program edits, table.py edits, BMC depth)
MUTANTS = {
    # nice.nodes without its default drop: a get still mapped to the hidden node misses and
    # goes on unrewritten (to the vnode address, on whatever port it carries)
    "nodes_no_drop": (NiceGetProps, [_NODES_DROP], [], 6),
    # nice.copies without its default drop: a copy for a hidden replica (a copy list not yet
    # rewritten) is emitted
    "copies_no_drop": (NiceCopyProps, [_COPIES_DROP], [], 5),
    # the exact match ignores the entry's valid bit: a deleted (stale) node entry is used
    "nodes_stale_entry": (NiceGetProps, [], [_VALID], 6),
    "copies_stale_entry": (NiceCopyProps, [], [_VALID], 5),
    # the exact match ignores the key's top bit: with the mappings rewritten, a lookup of a
    # live node hits the hidden node's entry still in the table (nice_unmapped_get)
    "nodes_key_truncated": (partial(NiceGetProps, mode="unmapped"), [], [_KEY], 6),
}


@pytest.mark.formal
@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_formal_nice_mutation(mutant):
    """A wrong program or table fails the proof's assertions (a counterexample, not an
    error)."""
    props, prog_edits, table_edits, depth = MUTANTS[mutant]
    name = f"mut_nice_{mutant}"
    kw = {}
    if prog_edits:
        kw["make"] = patched_make(*prog_edits)
    if table_edits:
        kw["build"] = patched_table_build(*table_edits)
    path = convert_harness(name, props(**kw))
    with pytest.raises(AssertionError, match=r"\[FAIL"):
        run_sby(name, path, "top", mode="bmc", depth=depth, engine="smtbmc yices")
