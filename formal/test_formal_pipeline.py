"""SymbiYosys jobs for the rest of the pipeline (pytest -m formal); see formal/README.md.

| job | mode | what (parameters) |
| --- | --- | --- |
| reg_add | k-induction, k=8 | RegisterOp ``bank[i] += 1`` (result new), pipelined read-modify-write (3 cycles, forwarding, host on the write port) vs an abstract array in write-slot order: results, memory every cycle, host r/w, slot request and bounded host wait (width 4, depth 4, index 3 bits) |
| reg_cas | k-induction, k=8 | RegisterOp compare-and-swap, conditional write (result old) (width 4, depth 3, index 3 bits) |
| reg_filter | k-induction, k=8 | NetClone's response filter (the program's update/drop expressions): RegisterOp vs abstract array, and drops of any sequence number S never exceed its passes (width 4, depth 3, index 3 bits) |
| reg_*_cover | cover, 12 / 14 | back-to-back same-index packets, host write landing between two packets to one index, host read, a request served after slot_request |
| tm / tm_g3_r7 | k-induction, k=6 | TrafficManager copies, rids, counters, conservation, recirc bound (4 outputs, rid 16; 4 groups, max_recirc 2 / 3 groups (not a power of 2), max_recirc 7) |
| tm_equiv[_g3_r7] | k-induction, k=6 | TrafficManager + copy registers == the pre-refactor inline TM logic of Datapath._build (same parameters as tm / tm_g3_r7) |
| tm_cover | cover, 8 | multicast of 3 copies (+ clone), recirc limit, bad port, fresh table entry |
| txcpl | k-induction, k=4 | TxCompletions ``m_cpl`` stream rules (2 ports, tag 2, ts 2, FIFO depth 2 / 4) |
| axil | k-induction, k=8 | AxiLiteCsr B/R rules, one response per request, bounded waits, indirect request stable (2 regs, 1 counter, 1 memory) |
| delay_cN | k-induction, k=N+3 | DelayLine ``o`` = ``i`` delayed N (width 3; N = 0, 3, 4 registers; 5, 7, 9 memory ring) |

Jobs write into build/formal/<job>/.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import convert_harness, run_sby                 # noqa: E402
from props_delay import DelayProps                          # noqa: E402
from props_handshake import AxiLiteProps, TxCplProps        # noqa: E402
from props_register import RegisterProps                    # noqa: E402
from props_tm import TmProps                                # noqa: E402
from props_tm_equiv import TmEquivProps                     # noqa: E402

# name: (harness factory, mode, depth, platform)
JOBS = {
    "reg_add": (lambda: RegisterProps("add", width=4, depth=4, index_width=3), "prove", 8, None),
    "reg_cas": (lambda: RegisterProps("cas", width=4, depth=3, index_width=3), "prove", 8, None),
    "reg_filter": (lambda: RegisterProps("filter", width=4, depth=3, index_width=3),
                   "prove", 8, None),
    "reg_filter_cover": (lambda: RegisterProps("filter", width=4, depth=3, index_width=3),
                         "cover", 14, None),
    "reg_add_cover": (lambda: RegisterProps("add", width=4, depth=4, index_width=3),
                      "cover", 12, None),
    "reg_cas_cover": (lambda: RegisterProps("cas", width=4, depth=3, index_width=3),
                      "cover", 12, None),
    "tm": (lambda: TmProps(n_outputs=4, mcast_groups=4, max_recirc=2), "prove", 6, None),
    "tm_g3_r7": (lambda: TmProps(n_outputs=4, mcast_groups=3, max_recirc=7),
                 "prove", 6, None),
    "tm_cover": (lambda: TmProps(n_outputs=4, mcast_groups=4, max_recirc=2), "cover", 8, None),
    "tm_equiv": (lambda: TmEquivProps(n_outputs=4, mcast_groups=4, max_recirc=2),
                 "prove", 6, None),
    "tm_equiv_g3_r7": (lambda: TmEquivProps(n_outputs=4, mcast_groups=3, max_recirc=7),
                       "prove", 6, None),
    "txcpl": (lambda: TxCplProps(n_ports=2, tag_width=2, ts_width=2, depth=2),
              "prove", 4, "formal"),
    "txcpl_d4": (lambda: TxCplProps(n_ports=2, tag_width=2, ts_width=2, depth=4),
                 "prove", 4, "formal"),
    "txcpl_cover": (lambda: TxCplProps(n_ports=2, tag_width=2, ts_width=2, depth=2),
                    "cover", 8, "formal"),
    "axil": (lambda: AxiLiteProps(bready_gap=2, rready_gap=2, ack_gap=3), "prove", 8, None),
    "axil_cover": (lambda: AxiLiteProps(bready_gap=2, rready_gap=2, ack_gap=3),
                   "cover", 12, None),
}
for _n in (0, 3, 4, 5, 7, 9):
    JOBS[f"delay_c{_n}"] = (lambda n=_n: DelayProps(width=3, cycles=n), "prove", _n + 3, None)
JOBS["delay_cover"] = (lambda: DelayProps(width=3, cycles=7), "cover", 10, None)


@pytest.mark.formal
@pytest.mark.parametrize("job", list(JOBS))
def test_formal_pipeline(job):
    make, mode, depth, platform = JOBS[job]
    path = convert_harness(job, make(), platform=platform)
    assert run_sby(job, path, "top", mode=mode, depth=depth, engine="smtbmc yices")
