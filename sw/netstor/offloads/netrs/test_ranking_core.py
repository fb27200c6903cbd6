"""The ranking core (hls/ranking.x): DSLX tests, XLS build, lint, IR vs the Python reference,
fixed point vs real-valued C3, the Amaranth wrapper.

The cocotb run of the generated Verilog is sim/test_hls_ranking.py.
"""
import random
import subprocess
import sys
from pathlib import Path

import pytest

from netstor.offloads.netrs import ranking_core as hls
from netstor.offloads.netrs import ranking as R
from netstor.paths import build_dir
from netstor.sim import harness



@pytest.fixture(scope="module")
def build():
    return hls.ranking_verilog()


@pytest.fixture(scope="module")
def ir():
    return hls.IrEvaluator()


# ------------------------------------------------------------------------------ DSLX tests

def test_dslx_tests_pass():
    res = hls.run_dslx_tests()
    assert len(res) >= 6, res
    failed = {k: v for k, v in res.items() if v is not None}
    assert not failed, failed


def test_dslx_test_runner_reports_failures():
    """The runner is not vacuous: a wrong expectation fails with its source position."""
    src = hls.source_text()
    bad = src.replace("u16:16 + u16:40 + u16:96", "u16:16 + u16:40 + u16:97")
    assert bad != src
    res = hls.run_dslx_tests(bad)
    assert res["qhat_test"] is not None and "ranking.x" in res["qhat_test"], res
    assert all(v is None for k, v in res.items() if k != "qhat_test"), res


# ------------------------------------------------------------------------------ build

def test_build_info(build):
    text, info = build
    assert info["module"] == hls.MODULE and f"module {hls.MODULE}(" in text
    assert info["stages"] == hls.STAGES and info["delay_model"] == hls.DELAY_MODEL
    # the documented latency is the schedule's (input flops + stage registers + output flops)
    assert info["latency"] == hls.LATENCY == hls.STAGES + 1
    assert hls.schedule_latency(text) == hls.LATENCY
    want = {"clk": ["input", 1], "rst": ["input", 1], "input_valid": ["input", 1],
            "output_valid": ["output", 1], "out": ["output", hls.OUT_W]}
    want.update({k: ["input", w] for k, w in hls.INPUTS.items()})
    assert info["ports"] == want
    assert hls.INPUTS == R.INPUTS and hls.OUT_W == R.OUT_W and hls.SCORE_W == R.SCORE_W
    # cached on the second call, same text
    text2, info2 = hls.ranking_verilog()
    assert info2["cached"] and text2 == text
    assert (build_dir("hls") / "ranking.v").read_text() == text


def test_other_schedules_have_their_own_latency(tmp_path):
    text, info = hls.ranking_verilog(3, build_dir=tmp_path)
    assert info["latency"] == 4 and hls.schedule_latency(text) == 4


def test_verilog_lints_clean(build, tmp_path):
    harness.setup_verilator_env()
    text, info = build
    v = tmp_path / f"{info['module']}.v"
    v.write_text(text)
    r = subprocess.run(["verilator", "--lint-only", "-Wall", "--top-module", info["module"],
                        str(v)], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "%Warning" not in r.stderr, r.stderr[-3000:]


# ------------------------------------------------------------------------------ IR = reference

def test_ir_matches_reference_random(ir):
    rng = random.Random(2024)
    seen = set()
    for _ in range(1000):
        p = R.random_inputs(rng)
        got, want = ir(p), R.rank_packed(p)
        assert got == want, (p, R.unpack_result(got), R.unpack_result(want))
        seen.add((p["algo"], R.unpack_result(want)[0]))
    assert seen >= {(a, 1) for a in range(4)} | {(0, 0)}


def _reps(**kw):
    return [R.Replica(**{k: (v[i] if isinstance(v, (list, tuple)) else v)
                         for k, v in kw.items()}) for i in range(R.NR)]


@pytest.mark.parametrize("algo", range(4))
def test_edge_cases(ir, algo):
    cases = []
    # no replica available: the defined "no replica" result
    for reps in (_reps(), _reps(q=0xFFFF, os=255, t=0xFFFF, r=0xFFFF)):
        cases.append(((0, 0, 0), R.pack_inputs(algo, 0, reps, n=7, rr=3, rnd=0xBEEF)))
    # all-equal states: C3/LOR/RR take the first available replica at or after rr
    eq = _reps(q=33, os=2, t=100, r=40)
    for rr in range(8):
        for avail in (0xFF, 0x81, 0x10, 0x6C):
            p = R.pack_inputs(algo, avail, eq, n=3, rr=rr, rnd=rr * 0x2F1D)
            f, idx, score = R.unpack_result(R.rank_packed(p))
            if algo != R.P2C:
                first = next(i for k in range(8) for i in [(rr + k) % 8] if avail >> i & 1)
                assert (f, idx) == (1, first)
            cases.append((None, p))
    # saturation: everything at the maximum, in every replica and in one of them
    mx = R.Replica(0xFFFF, 255, 0xFFFF, 0xFFFF)
    top = R.c3_score(0xFFFF, 255, 0xFFFF, 0xFFFF, 255)
    assert top < 1 << R.SCORE_W and top == ((0xFFFF ** 2 >> 4) * 0xFFFF >> 4) * 0xFFFF \
        // 16 + 0xFFFF
    for k in range(8):
        reps = [mx if i != k else R.Replica(0, 0, 16, 0) for i in range(R.NR)]
        cases.append((None, R.pack_inputs(algo, 0xFF, reps, n=255, rr=0, rnd=0xFFFF)))
    p = R.pack_inputs(algo, 0xFF, [mx] * R.NR, n=255, rr=5, rnd=0)
    if algo == R.C3:
        assert R.unpack_result(R.rank_packed(p)) == (1, 5, top)
    cases.append((None, p))
    # groups of 1..8 replicas (low bits of the bitmap), distinct states
    rng = random.Random(algo)
    for n_rep in range(1, 9):
        for _ in range(8):
            reps = [R.random_replica(rng) for _ in range(R.NR)]
            p = R.pack_inputs(algo, (1 << n_rep) - 1, reps, n=rng.randrange(256),
                              rr=rng.randrange(8), rnd=rng.getrandbits(16))
            f, idx, _ = R.unpack_result(R.rank_packed(p))
            assert f == 1 and idx < n_rep
            cases.append((None, p))
    for want, p in cases:
        got = ir(p)
        assert got == R.rank_packed(p), (p, R.unpack_result(got))
        if want is not None:
            assert R.unpack_result(got) == want


# ------------------------------------------------------------------------------ reference

def test_reference_algorithms_from_their_definitions():
    """The reference's picks against direct statements of each algorithm."""
    rng = random.Random(7)
    for _ in range(3000):
        p = R.random_inputs(rng)
        reps = [R.Replica((p["q"] >> 16 * i) & 0xFFFF, (p["os"] >> 8 * i) & 0xFF,
                          (p["t"] >> 16 * i) & 0xFFFF, (p["r"] >> 16 * i) & 0xFFFF)
                for i in range(8)]
        av = [i for i in range(8) if p["avail"] >> i & 1]
        f, idx, score = R.rank(p["algo"], p["avail"], reps, p["n"], p["rr"], p["rnd"])
        if not av:
            assert (f, idx, score) == (0, 0, 0)
            continue
        assert f == 1 and idx in av
        order = sorted(av, key=lambda i: (i - p["rr"]) % 8)     # cyclic from rr
        if p["algo"] == R.RR:
            assert (idx, score) == (order[0], 0)
        elif p["algo"] == R.LOR:
            best = min(reps[i].os for i in av)
            assert score == best and idx == next(i for i in order if reps[i].os == best)
        elif p["algo"] == R.C3:
            s = {i: R.c3_score(*[getattr(reps[i], k) for k in ("q", "os", "t", "r")], p["n"])
                 for i in av}
            best = min(s.values())
            assert score == best and idx == next(i for i in order if s[i] == best)
        else:       # P2C: two distinct random replicas, the one with fewer os (first on ties)
            k1, k2 = R.p2c_ranks(len(av), p["rnd"])
            a, b = av[k1], av[k2]
            assert (len(av) == 1 and a == b) or a != b
            want = b if reps[b].os < reps[a].os else a
            assert (idx, score) == (want, reps[want].os)


def test_n_code_is_the_nearest_representable_multiplier():
    """C3's n travels as an 8-bit code (the Rank element's n port is 8 bits): the values, as
    the format states them (0..127 themselves, then 16 mantissas per octave from 128), and
    n_code picks the nearest one (ties: the smaller) for every n up to 40,000."""
    values = list(range(128)) + [(16 + m) * 2 ** (e + 3) for e in range(8) for m in range(16)]
    assert [R.n_value(c) for c in range(256)] == values and values == sorted(values)
    assert R.N_MAX == values[-1] == 31744
    for n in range(40001):
        c = R.n_code(n)
        best = min(range(256), key=lambda k: (abs(values[k] - n), values[k]))
        assert c == best, n
        if n < 128:
            assert R.n_value(c) == n
        elif n <= R.N_MAX:
            assert abs(R.n_value(c) - n) / n <= 1 / 32, n
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError):
            R.n_code(bad)
    # a client count of 500 (the paper's default) and 700 (its sweep's top)
    assert (R.n_value(R.n_code(500)), R.n_value(R.n_code(700))) == (496, 704)


def test_p2c_choices_are_uniform():
    """Over all 2^16 random words, each ordered pair of distinct ranks is drawn equally often
    up to the 8-bit quantisation (for p available replicas)."""
    for p in range(2, 9):
        counts = {}
        for rnd in range(0, 1 << 16, 7):
            counts[R.p2c_ranks(p, rnd)] = counts.get(R.p2c_ranks(p, rnd), 0) + 1
        assert set(counts) == {(a, b) for a in range(p) for b in range(p) if a != b}
        assert max(counts.values()) / min(counts.values()) < 1.15, (p, counts)


# ------------------------------------------------------------------------------ precision

def test_fixed_point_c3_against_real_valued_c3():
    """Fixed-point C3 vs the real-valued formula on the same inputs (q_hat not saturated):
    the fixed score is never above the real one and below it by less than the documented
    bound; the fixed pick equals the real pick unless the real scores of the two are closer
    than that bound (then either is a correct C3 choice within the precision)."""
    rng = random.Random(11)
    picks = differ = 0
    rels = []
    for _ in range(4000):
        n = rng.choice([1, 1, 2, 4, 8, 16, 50, R.n_code(300), R.n_code(500)])
        n_rep = rng.randint(1, 8)
        reps = []
        for _ in range(n_rep):
            reps.append(R.Replica(q=rng.randrange(0, 40 * 16), os=rng.randrange(0, 8),
                                  t=rng.randrange(1, 4000 * 16 // 40),
                                  r=rng.randrange(0, 0xFFFF)))
        reps += [R.Replica()] * (8 - n_rep)
        avail = (1 << n_rep) - 1
        if any(R.c3_saturated(r.q, r.os, n) for r in reps[:n_rep]):
            continue
        for rep in reps[:n_rep]:
            real = R.c3_float(rep.q, rep.os, rep.t, rep.r, n)
            fixed = R.c3_score(rep.q, rep.os, rep.t, rep.r, n) / 16
            err = real - fixed
            assert -1e-9 * max(1, real) <= err < R.c3_error_bound(rep.q, rep.os, rep.t, rep.r, n)
            if real > 0:
                rels.append(err / real)
        f, idx, _ = R.rank(R.C3, avail, reps, n=n, rr=0)
        best = R.rank_c3_float(avail, reps, n=n)
        picks += 1
        if idx != best:
            differ += 1
            gap = (R.c3_float(*[getattr(reps[idx], k) for k in ("q", "os", "t", "r")], n)
                   - R.c3_float(*[getattr(reps[best], k) for k in ("q", "os", "t", "r")], n))
            assert 0 <= gap < R.c3_error_bound(*[getattr(reps[idx], k)
                                                 for k in ("q", "os", "t", "r")], n)
    assert picks > 3000
    assert differ / picks < 0.01, (differ, picks)
    rels.sort()
    # relative error: tiny for loaded replicas, up to a few % only near idle (q_hat ~ 1, where
    # q_hat^3 - 1 is small and the floors dominate); see hls/README.md
    assert rels[len(rels) // 2] < 1e-4 and rels[int(0.99 * len(rels))] < 2e-3, \
        (rels[len(rels) // 2], rels[int(0.99 * len(rels))])


# ------------------------------------------------------------------------------ Amaranth

def test_amaranth_wrapper_elaborates():
    from amaranth.back import verilog
    core = hls.RankingCore()
    assert core.latency == hls.LATENCY
    text = verilog.convert(core, name="ranking_wrap", emit_src=False)
    assert f"{hls.MODULE} xls (" in text or f"{hls.MODULE} xls(" in text
    for port in ("input_valid", "output_valid", "out", *hls.INPUTS):
        assert f".{port}(" in text, port


def test_bench_figures_without_yosys(monkeypatch, tmp_path):
    """bench_core.ranking_figures wiring (Yosys itself runs in `make bench`)."""
    from netstor.bench import synth
    from netstor.offloads.netrs import bench_core as bench_hls

    def fake(verilog, top, workdir, **kw):
        assert top == hls.MODULE and f"module {top}(" in verilog
        return {"ok": True, "LUT": 1, "FF": 2, "DSP": 3, "BRAM36_equiv": 0, "URAM": 0,
                "CARRY": 4, "share_of_xcu250_pct": {}, "yosys_seconds": 0, "cached": True,
                "depth": {"lut_levels": 5, "max_cells": 9, "path_cell_types": "LUT6",
                          "path_from": [], "path_to": []}}
    monkeypatch.setattr(synth, "run_yosys", fake)
    res = bench_hls.ranking_figures(tmp_path, log=lambda *a: None)
    assert res["latency_cycles"] == hls.LATENCY and res["pipeline_stages"] == hls.STAGES
    assert res["throughput_selections_per_clock"] == 1
    assert (res["LUT"], res["DSP"], res["logic_depth_lut_levels"]) == (1, 3, 5)
    assert res["within_lut_budget_250MHz"]


def test_dsp_register_check_on_hand_built_netlists(tmp_path):
    """bench_core.dsp_registers reads MREG/PREG and the cells around each DSP: a DSP between
    flip-flops counts as between registers, one fed through a LUT or feeding a LUT does not,
    one with MREG counts as internally registered; a DSP feeding a DSP's registered A counts."""
    import json
    from netstor.offloads.netrs.bench_core import dsp_registers

    def cell(t, conns, dirs, **params):
        return {"type": t, "parameters": {k: format(v, "032b") for k, v in params.items()},
                "port_directions": dirs, "connections": conns}
    ff = lambda d, q: cell("FDRE", {"D": [d], "Q": [q]}, {"D": "input", "Q": "output"})
    lut = lambda i, o: cell("LUT1", {"I0": [i], "O": [o]}, {"I0": "input", "O": "output"})
    dsp = lambda a, b, p, **r: cell("DSP48E2", {"A": [a], "B": [b], "P": [p]},
                                    {"A": "input", "B": "input", "P": "output"},
                                    **{k: r.get(k, 0) for k in ("AREG", "BREG", "CREG", "DREG",
                                                                  "MREG", "PREG")})
    cells = {
        # 1: ff(10) ff(11) -> dsp -> ff: between registers, no internal register
        "fa": ff(2, 10), "fb": ff(3, 11), "d1": dsp(10, 11, 12), "fp": ff(12, 13),
        # 2: ff -> LUT -> dsp -> ff: not between registers
        "l2": lut(10, 20), "d2": dsp(20, 11, 21), "fp2": ff(21, 22),
        # 3: ff -> dsp -> LUT: not between registers
        "d3": dsp(10, 11, 30), "l3": lut(30, 31),
        # 4: ff -> LUT -> dsp (MREG) -> LUT: internally registered, input side has logic
        "d4": dsp(20, 11, 40, MREG=1), "l4": lut(40, 41),
        # 5: ff -> dsp -> A of a dsp with AREG (-> ff): both between registers
        "d5": dsp(10, 11, 50), "d6": dsp(50, 11, 51, AREG=1, PREG=1), "fp6": ff(51, 52),
    }
    path = tmp_path / "n.json"
    path.write_text(json.dumps({"modules": {"top": {"cells": cells}}}))
    r = dsp_registers(path)
    assert r == {"dsp": 6, "dsp_internal_registers": 2, "dsp_without_internal_registers": 4,
                 "dsp_between_registers": 3}, r
