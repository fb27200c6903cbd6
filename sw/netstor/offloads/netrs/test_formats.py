"""NetRS's number formats (:mod:`netstor.offloads.netrs.formats`), which the client-side C3,
the configuration and the evaluation use: hand-computed values, and the same samples and
EWMAs as the data plane (the golden model running the program) on random responses."""
import random

import pytest

from netstor.driver.tables import TableWriter, apply_writes
from netstor.lang import Pipeline
from netstor.model.dataplane import DataplaneModel
from netstor.offloads.netrs import formats as F
from netstor.offloads.netrs.header import M_RESP, NETRS_UDP_PORT, RsRequest, f
from netstor.offloads.netrs.program import make_netrs
from netstor.sim.frames import udp_frame


def test_hand_computed_values():
    # units: 1.024 us << u; saturation at 0xFFFF / 16 units
    assert [F.unit_us(u) for u in (0, 6, 12)] == [1.024, 65.536, 4194.304]
    assert F.saturation_us(0) == pytest.approx(4194.24) and \
        F.saturation_us(6) == pytest.approx(268_431.36)
    # the finest unit that holds 40 ms (4 ms with a 10x fluctuation): 16.384 us (67.1 ms)
    assert F.unit_for(40_000) == 4 and F.unit_for(4194.24) == 0 and F.unit_for(2e7) is None
    assert F.unit_code("65.536") == F.unit_code(65.536) == F.DEFAULT_UNIT == 6
    assert F.unit_code(1.024 * 2 ** 9) == 9          # float arithmetic, within 1e-9
    for bad in (60, 0, -1.024, "x", True, 8388.608):
        with pytest.raises(ValueError):
            F.unit_code(bad)
    assert [F.ewma_shift(x) for x in (1, "1/2", 0.125, "0.0078125")] == [0, 1, 3, 7]
    for bad in (0.3, 2, "1/256", True, None):
        with pytest.raises(ValueError):
            F.ewma_shift(bad)
    # RV: stamp = arrival >> 8 (24 bits), unit << 24, weight << 28
    assert F.rv_pack(0x1234_5678, 6, 3) == 0x3612_3456
    assert F.rv_unpack(0x3612_3456) == (0x12_3456, 6, 3)
    # 70 ms response (17.5e6 cycles) stamped at cycle 4096: 68,359 ticks
    rv = F.rv_pack(4096, 6, 3)
    assert F.r_sample(4096 + 17_500_000, rv) == (17089, False)
    assert F.r_sample(4096 + 17_500_000, F.rv_pack(4096, 0, 3)) == (0xFFFF, True)
    # across the 32-bit counter's wrap: 100 ticks
    assert F.r_sample(100 * 256 - 256, F.rv_pack(2 ** 32 - 256, 0, 0)) == (1600, False)
    assert F.t_sample(40_000_000, 6) == (9765, False) and F.t_sample(5_000_000, 0)[1]
    assert F.q_sample(4095) == (65520, False) and F.q_sample(4096) == (0xFFFF, True)
    assert [F.ewma(100, 200, w) for w in (0, 1, 3)] == [200, 150, 112]
    assert F.ewma(200, 100, 3) == 187              # floor(1500 / 8)
    # shares from rs.samples cells: 10 samples, 1 with q, 2 with r (one of them with t too)
    sh = F.saturation_shares([7, 1, 0, 0, 1, 0, 1])
    assert sh == {"samples": 10, "q": 0.1, "t": 0.1, "r": 0.2, "any": 0.3}
    assert F.saturation_shares([0] * 8)["r"] is None


def test_formats_predict_the_data_plane():
    """Random groups (unit, weight), responses from 1 us to seconds: the state and the
    rs.samples cells the program produces equal what formats' functions compute."""
    prog = make_netrs()
    model = DataplaneModel(Pipeline([prog]))
    tw = TableWriter(model.pipeline)
    rng = random.Random(3)
    sets = {}
    for g in range(8):
        sets[g + 1] = (rng.randrange(13), rng.randrange(8))
        ops = [tw.exact_add("rs.rgroups", [g], "replicas", {
            "algo": 0, "n": 1, "mask": 1, "unit": sets[g + 1][0], "ewma": sets[g + 1][1],
            "s0": g + 1, **{f"s{k}": 0 for k in range(1, 8)}})]
        for o in ops:
            apply_writes(model, o)
    for o in (tw.lpm_add("rs.tgroups", 0x0A000000, 8, "rsnode", {"rid": 5, "tg": 0}),
              tw.exact_add("rs.local", [5], "local"),
              # trust: responses and requests from every port (test_trust covers the guard)
              tw.ternary_add("rs.trust", [0, 0, 0], [0, 0, 0], "trusted", {}, 0)):
        apply_writes(model, o)
    state = {s: [0, 0, 0, 0] for s in sets}
    cells = [0] * 8
    frames = random.Random(4)
    for i in range(400):
        g = rng.randrange(8)
        sid = g + 1
        arrival = rng.getrandbits(32)
        req = RsRequest(rgid=g).pack()
        model.process(udp_frame(frames, 100, src="10.0.0.1", dst="10.0.1.1",
                                sport=NETRS_UDP_PORT, dport=NETRS_UDP_PORT,
                                payload=req + bytes(20)), 0, arrival=arrival)
        state[sid][1] = min(255, state[sid][1] + 1)          # the second pass: os + 1
        rv = F.rv_pack(arrival, *sets[sid])
        now = (arrival + rng.choice([rng.randrange(1 << 12), rng.randrange(1 << 30)])) \
            & 0xFFFF_FFFF
        q = rng.choice([0, 3, 5000])
        t_ns = rng.choice([rng.randrange(1 << 16), rng.randrange(1 << 27), 0xFFFF_FFFF])
        hdr = RsRequest(rgid=g, rid=5, mf=f(M_RESP), rv=rv).response(sid, q, t_ns).pack()
        model.process(udp_frame(frames, 100, src="10.0.1.1", dst="10.0.0.1",
                                sport=NETRS_UDP_PORT, dport=NETRS_UDP_PORT,
                                payload=hdr + bytes(20)), 1, arrival=now)
        unit, w = sets[sid]
        (sq, a), (st, b), (sr, c) = (F.q_sample(q), F.t_sample(t_ns, unit),
                                     F.r_sample(now, rv))
        s = state[sid]
        s[0], s[1], s[2], s[3] = (F.ewma(s[0], sq, w), max(0, s[1] - 1), F.ewma(s[2], st, w),
                                  F.ewma(s[3], sr, w))
        cells[(F.SAT_Q if a else 0) | (F.SAT_T if b else 0) | (F.SAT_R if c else 0)] += 1
        cell = model.mem_read("rs.st0", sid)
        assert [cell & 0xFFFF, cell >> 16 & 0xFF, cell >> 24 & 0xFFFF, cell >> 40] == s, i
    assert [model.mem_read("rs.samples", k) for k in range(8)] == cells
    assert sum(cells) == 400 and cells[0] and cells[7]
