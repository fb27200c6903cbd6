"""``bench_core.analyse`` on hand-made records (no simulator): the figures of the whole-core
XORInc benchmark from per-frame edge numbers, computed here by hand."""
from __future__ import annotations

import pytest

from netstor.offloads.xorinc import bench_core

CNT = {"in1.drop_full": 0, "gf.mismatch": 0}


def _run(size, chunk, inputs, outputs, *, stalls=0, unexpected=0, counters=CNT):
    return {"size": size, "chunk": chunk, "k": 2, "r": 1, "repairs": 1, "completed": True,
            "input_stalls": stalls, "inputs": inputs, "outputs": outputs,
            "unexpected": unexpected, "counters": dict(counters)}


# 64/128: op 5, two helpers (src 0 then src 1), two 3-beat PARTs each, back to back from edge
# 10; REPAIRED of off 0 and 1 leave 70 edges after the completing PART's first beat
CLEAN = _run(64, 128,
             [[10, 12, 64, 5, 0, 0], [13, 15, 64, 5, 1, 0],
              [16, 18, 64, 5, 0, 1], [19, 21, 64, 5, 1, 1]],
             [[86, 88, 5, 0, 64, 0], [89, 91, 5, 1, 64, 0]])
# 1024/1024: three helpers, 18-beat PARTs; the REPAIRED (after the third) has 3 bad bytes
BAD = _run(1024, 1024,
           [[100, 117, 1024, 7, 0, 0], [118, 135, 1024, 7, 0, 1], [136, 153, 1024, 7, 0, 2]],
           [[220, 237, 7, 0, 1024, 3]])
# 64/64: the input waited one edge between the PARTs; the REPAIRED never came, one stray frame
LOST = _run(64, 64, [[300, 302, 64, 9, 0, 0], [304, 306, 64, 9, 0, 1]], [],
            stalls=1, unexpected=1, counters={"in1.drop_full": 1, "gf.mismatch": 0})


def test_clean_run():
    fig = bench_core.analyse({"runs": [CLEAN], "config": {"k": 2, "r": 1}})
    assert fig["bytes_per_clock"] == {"64/128": round(256 / 12, 4)}          # 21.3333
    assert fig["bus_limit_bytes_per_clock"] == {"64/128": round(64 / 3, 4)}
    assert fig["input_beats_per_clock"] == {"64/128": 1.0}
    assert fig["input_stalls"] == 0 and fig["dropped_at_input"] == 0
    assert fig["latency_cycles"] == {"64/128": 70}          # 86 - 16 and 89 - 19
    assert fig["latency_cycles_max"] == {"64/128": 70}
    assert fig["repaired_bytes"] == {"64/128": 128}
    assert fig["repaired_bytes_per_clock"] == {"64/128": round(128 / 6, 4)}   # edges 86..91
    assert fig["frames"] == {"contributions_in": 4, "repaired_out": 2, "repaired_expected": 2,
                             "repaired_missing": 0, "unexpected_out": 0}
    assert fig["byte_mismatches"] == 0
    assert bench_core.ok(fig)
    line = bench_core.summary_line(fig)
    assert "\n" not in line and "64/128 21.3333" in line and "0 byte mismatches" in line


def test_bad_and_missing_runs():
    fig = bench_core.analyse({"runs": [CLEAN, BAD, LOST]})
    assert fig["bytes_per_clock"] == {"64/128": 21.3333, "1024/1024": round(3072 / 54, 4),
                                      "64/64": round(128 / 7, 4)}
    assert fig["input_beats_per_clock"]["64/64"] == round(6 / 7, 4)
    # the completing contribution is the last to arrive (src 2, first beat at edge 136)
    assert fig["latency_cycles"] == {"64/128": 70, "1024/1024": 84, "64/64": None}
    assert fig["input_stalls"] == 1 and fig["input_stalls_by_size"]["64/64"] == 1
    assert fig["dropped_at_input"] == 1
    assert fig["frames"] == {"contributions_in": 9, "repaired_out": 3, "repaired_expected": 4,
                             "repaired_missing": 1, "unexpected_out": 1}
    # 3 wrong bytes + the 64 bytes of the REPAIRED frame that never came
    assert fig["byte_mismatches"] == 67
    assert fig["runs"]["1024/1024"]["byte_mismatches"] == 3
    assert not bench_core.ok(fig)


def test_config_refuses_sizes_the_core_does_not_carry():
    assert bench_core.config()["runs"][0] == [64, 64]
    for bad in ((100, 1024), (2048, 4096), (64, 8192)):
        with pytest.raises(ValueError):
            bench_core.config([bad])
