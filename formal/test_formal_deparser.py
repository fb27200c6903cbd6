"""SymbiYosys jobs for the deparser's checksums (pytest -m formal); see formal/README.md and the
harnesses in formal/props_deparser.py.

| job | mode | what |
| --- | --- | --- |
| checksum_lemmas | k-induction, k=1 (combinational) | RFC 1624 keeps a verifying checksum verifying and a failing one failing, equals the full recomputation but for 0x0000/0xFFFF, ones' addition associative, unchanged words leave the UDP checksum as sent, a kept high byte keeps the sum off +0 |
| checksum_lemmas_cover | cover 1 | the one case where RFC 1624 and the full recomputation differ is reachable in free words |
| deparser_ipv4 (opt-in) | BMC PREP_LATENCY+1 | DeparsePrep, every PHV and original fields, VLAN or not, ihl 5..15: the IPv4 checksum bytes are written and equal RFC 1624 eqn. 3 over the words the deparser may change; version/IHL, lengths, flags, protocol bytes unchanged; no options byte written |
| deparser_udp (opt-in) | BMC PREP_LATENCY+1 | DeparsePrep: the UDP checksum bytes are written and equal RFC 1624 over pseudo-header addresses, ports and (with a program's header) the 16 app words, 0 sent as 0xFFFF, a zero checksum kept 0; length and (without a program's header) app bytes unchanged |
| deparser_cover (opt-in) | cover PREP_LATENCY+1 | reachable: an IPv4 rewrite after a VLAN tag with options; a UDP rewrite with app words |

The block jobs (opt-in: ``NETSTOR_FORMAL_DEPARSER=1``) passed in seconds on the 2-cycle prep
(PREP_LATENCY = 2, the parent of commit d2362b0): solver 2 s (IPv4) and 5 s (UDP). On the 4-cycle prep being
built for timing (partial sums registered, one-hot placement) yices does not finish the same
BMC step in 10 minutes, so they are not in the default run; see formal/README.md.

BMC rather than k-induction: the prep is a feed-forward pipeline (its outputs in cycle t are a
function of the inputs of cycles t-PREP_LATENCY..t-1 only, and so are the harness's delayed
copies), so the outputs BMC checks at step PREP_LATENCY (depth PREP_LATENCY+1) from free
inputs are every output the block can produce.
"""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import convert_harness, run_sby                 # noqa: E402
from props_deparser import DeparserChecksumProps, ChecksumLemmas   # noqa: E402
from netstor.gateware.deparser import PREP_LATENCY          # noqa: E402

K = PREP_LATENCY + 1
# name: (harness factory, mode, depth, opt-in)
JOBS = {
    "checksum_lemmas": (ChecksumLemmas, "prove", 1, False),
    "checksum_lemmas_cover": (ChecksumLemmas, "cover", 1, False),
    "deparser_ipv4": (lambda: DeparserChecksumProps("ipv4"), "bmc", K, True),
    "deparser_udp": (lambda: DeparserChecksumProps("udp"), "bmc", K, True),
    "deparser_cover": (lambda: DeparserChecksumProps("udp"), "cover", K, True),
}


@pytest.mark.formal
@pytest.mark.parametrize("job", list(JOBS))
def test_formal_deparser(job):
    make, mode, depth, opt_in = JOBS[job]
    if opt_in and os.environ.get("NETSTOR_FORMAL_DEPARSER") != "1":
        pytest.skip("block job: minutes on the 4-cycle prep (NETSTOR_FORMAL_DEPARSER=1 runs it)")
    path = convert_harness(job, make())
    assert run_sby(job, path, "top", mode=mode, depth=depth, engine="smtbmc yices")
