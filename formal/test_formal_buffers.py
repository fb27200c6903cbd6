"""SymbiYosys jobs for PacketBuffer, EgressQueue and IngressArbiter (pytest -m formal).

| job | mode | what |
| --- | --- | --- |
| pb_handshake[_bp] | k-induction | ``o`` stream rules, one drop pulse at a time, ``i.ready`` rule |
| pb_conservation[_bp] | BMC, 20 cycles | frames in = out + drops + stored, every cycle; ``last`` on beat ``ceil(len/bpb)``; ``14 <= len <= max_frame`` |
| pb_cover | cover, 20 cycles | each drop reason and a full buffer draining are reachable in 20 cycles |
| eq_handshake | k-induction | ``o`` stream rules, ``i.ready == 1`` |
| eq_admission | k-induction | occupancy <= depth; an admitted packet's beats always find room |
| arbiter_n3 / _n4 | k-induction | ``o`` stream rules, packet atomicity (inputs and output port), bounded wait <= n-1 packets |

Jobs write into build/formal/<job>/.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import convert_harness, run_sby                       # noqa: E402
from props_arbiter import ArbiterProps                              # noqa: E402
from props_packet_buffer import EgressQueueProps, PacketBufferProps  # noqa: E402

JOBS = {
    "pb_handshake": (lambda: PacketBufferProps("handshake", backpressure=False), "prove", 4),
    "pb_handshake_bp": (lambda: PacketBufferProps("handshake", backpressure=True), "prove", 4),
    "pb_conservation": (lambda: PacketBufferProps("conservation", backpressure=False),
                        "bmc", 20),
    "pb_conservation_bp": (lambda: PacketBufferProps("conservation", backpressure=True),
                           "bmc", 20),
    "pb_cover": (lambda: PacketBufferProps("conservation", backpressure=False), "cover", 20),
    "eq_handshake": (lambda: EgressQueueProps("handshake"), "prove", 4),
    "eq_admission": (lambda: EgressQueueProps("admission"), "prove", 4),
    "arbiter_n3": (lambda: ArbiterProps(3), "prove", 4),
    "arbiter_n4": (lambda: ArbiterProps(4), "prove", 4),
}


@pytest.mark.formal
@pytest.mark.parametrize("job", list(JOBS))
def test_formal_buffers(job):
    make, mode, depth = JOBS[job]
    path = convert_harness(job, make())
    assert run_sby(job, path, "top", mode=mode, depth=depth, engine="smtbmc yices")
