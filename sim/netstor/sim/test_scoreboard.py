"""The drop-aware scoreboard accepts exactly the outputs that are in-order subsequences of the
predictions with the counted drops, and rejects reordering, corruption, duplicates, extra
frames and drops the counters do not report (hand-built cases)."""
from netstor.sim.scoreboard import DropScoreboard


def _frames(tag, n, length=64):
    return [bytes([tag, i]) + bytes(length - 2) for i in range(n)]


def _board(got, drop_full, streams=None, model=None, drop_stale=None):
    """Output 0: stream A = a0..a4 (64 B), stream B = b0..b2 (100 B); ``got`` lists
    ``(stream, index)``; ``drop_full`` the counter."""
    a, b = _frames(1, 5), _frames(2, 3, 100)
    sb = DropScoreboard(1)
    for f in a:
        sb.predict(0, (0, 0), f, 0)
    for f in b:
        sb.predict(0, (1, 0), f, 0)
    src = {"a": a, "b": b}
    for s, i in got:
        sb.receive(0, src[s][i] if isinstance(i, int) else i, 0)
    n = len(got)
    recv_bytes = sum(len(src[s][i]) if isinstance(i, int) else len(i) for s, i in got)
    hw = {"out0.drop_full": drop_full, "out0.pkts": n, "out0.bytes": recv_bytes}
    if drop_stale is not None:
        hw["out0.drop_stale"] = drop_stale
    model = model or {"out0.pkts": 8, "out0.bytes": 5 * 64 + 3 * 100}
    return sb.check(hw, model)


def test_interleaved_in_order_with_counted_drops_passes():
    got = [("b", 0), ("a", 0), ("a", 2), ("b", 2), ("a", 3), ("a", 4)]   # a1, b1 dropped
    r = _board(got, drop_full=2)
    assert r["mismatches"] == []
    row = r["outputs"][0]
    assert (row["matched"], row["dropped_seen"], row["dropped_bytes"]) == (6, 2, 164)


def test_tail_drops_count():
    r = _board([("a", 0), ("b", 0)], drop_full=6)
    assert r["mismatches"] == []


def test_uncounted_missing_frame_fails():
    got = [("a", 0), ("a", 2), ("a", 3), ("a", 4), ("b", 0), ("b", 1), ("b", 2)]
    r = _board(got, drop_full=0)
    assert any("missing but out0.drop_full = 0" in m for m in r["mismatches"])


def test_reordered_within_a_stream_fails():
    got = [("a", 1), ("a", 0), ("a", 2), ("a", 3), ("a", 4), ("b", 0), ("b", 1), ("b", 2)]
    r = _board(got, drop_full=1)      # a0 after a1: a0 is "dropped" and then unmatched
    assert any("matches no prediction" in m for m in r["mismatches"])


def test_corrupted_and_extra_frames_fail():
    bad = bytearray(_frames(1, 5)[3])
    bad[40] ^= 1
    got = [("a", 0), ("a", 1), ("a", 2), ("a", bytes(bad)), ("a", 4), ("b", 0), ("b", 1),
           ("b", 2)]
    r = _board(got, drop_full=1)
    assert any("matches no prediction" in m for m in r["mismatches"])
    dup = [("a", 0), ("a", 0), ("a", 1), ("a", 2), ("a", 3), ("a", 4), ("b", 0), ("b", 1),
           ("b", 2)]
    assert _board(dup, drop_full=0)["mismatches"]


def test_counter_disagreements_fail():
    got = [("a", 0), ("a", 1), ("a", 2), ("a", 3), ("a", 4), ("b", 0), ("b", 1), ("b", 2)]
    assert _board(got, drop_full=0)["mismatches"] == []
    r = _board(got, drop_full=0, model={"out0.pkts": 9, "out0.bytes": 5 * 64 + 3 * 100})
    assert any("model out0.pkts" in m for m in r["mismatches"])
    r = _board(got, drop_full=0, model={"out0.pkts": 8, "out0.bytes": 5 * 64 + 3 * 100 + 1})
    assert any("bytes" in m for m in r["mismatches"])


def test_stale_copies_are_counted_drops():
    """The copy-lane core: a copy never sent because its packet went stale in the lane's
    store (``out<q>.drop_stale``) counts as a drop beside ``drop_full``; the sum must match."""
    got = [("b", 0), ("a", 0), ("a", 2), ("b", 2), ("a", 3), ("a", 4)]   # a1, b1 missing
    r = _board(got, drop_full=1, drop_stale=1)
    assert r["mismatches"] == []
    assert (r["outputs"][0]["drop_full"], r["outputs"][0]["drop_stale"]) == (1, 1)
    r = _board(got, drop_full=0, drop_stale=1)
    assert any("out0.drop_full = 0 + drop_stale = 1" in m for m in r["mismatches"])
    r = _board(got, drop_full=2, drop_stale=1)
    assert any("missing but" in m for m in r["mismatches"])


def _packets_board(got, hw_extra):
    """Two outputs, packets 0..3, each a copy on output 0 (64 B) and on output 1 (100 B),
    named by ``predict(..., packet=k)``; ``got``: the packets whose copy arrived, per output."""
    f = {0: _frames(1, 4), 1: _frames(2, 4, 100)}
    sb = DropScoreboard(2)
    for k in range(4):
        for q in (0, 1):
            sb.predict(q, (0, 0), f[q][k], 0, packet=k)
    hw, model = dict(hw_extra), {}
    for q in (0, 1):
        for k in got[q]:
            sb.receive(q, f[q][k], 0)
        hw[f"out{q}.pkts"] = len(got[q])
        hw[f"out{q}.bytes"] = sum(len(f[q][k]) for k in got[q])
        model[f"out{q}.pkts"] = 4
        model[f"out{q}.bytes"] = 4 * len(f[q][0])
    return sb.check(hw, model)


def test_refused_packets_are_the_whole_missing_ones():
    """``tm.overflow``: a refused packet makes no copy; its copies on every output are missing
    and no per-output counter counts them. Packet 2 whole-missing with tm.overflow = 1 passes;
    without the counter it fails; a packet missing on one output only is no refused packet."""
    r = _packets_board({0: [0, 1, 3], 1: [0, 1, 3]}, {"tm.overflow": 1})
    assert r["mismatches"] == [] and r["refused_packets"] == [2]
    assert r["outputs"][0]["refused"] == 1 and r["outputs"][1]["dropped_seen"] == 0
    r = _packets_board({0: [0, 1, 3], 1: [0, 1, 3]}, {})
    assert any("missing but out0.drop_full = 0" in m for m in r["mismatches"])
    r = _packets_board({0: [0, 1, 3], 1: [0, 1, 2, 3]}, {"tm.overflow": 1})
    assert any("tm.overflow = 1 but 0 packets lost every copy" in m for m in r["mismatches"])
    # one refused and one copy dropped at a full queue: both accounted
    r = _packets_board({0: [0, 3], 1: [0, 1, 3]}, {"tm.overflow": 1, "out0.drop_full": 1})
    assert r["mismatches"] == []


def test_stale_recirculation_copy_fails():
    got = [("a", 0), ("a", 1), ("a", 2), ("a", 3), ("a", 4), ("b", 0), ("b", 1), ("b", 2)]
    a, b = _frames(1, 5), _frames(2, 3, 100)
    sb = DropScoreboard(1)
    for f in a:
        sb.predict(0, (0, 0), f, 0)
    for f in b:
        sb.predict(0, (1, 0), f, 0)
    for s, i in got:
        sb.receive(0, (a if s == "a" else b)[i], 0)
    hw = {"out0.pkts": 8, "out0.bytes": 620}
    model = {"out0.pkts": 8, "out0.bytes": 620}
    assert sb.check(hw, model)["mismatches"] == []
    r = sb.check({**hw, "tm.recirc_stale": 1}, model)
    assert any("tm.recirc_stale = 1" in m for m in r["mismatches"])


def test_engine_refusals_hand_computed():
    """FIFO of 2, prefetch credit 1, lists of 3 copies, descriptors in cycles 0..7: by hand
    (level, read, landing, prefetch, current copies left per cycle), 0, 1, 2 enter, 3 and 4
    find the FIFO full, the first list becomes current in cycle 4 (its first copy in cycle 5,
    the engine's 5-cycle latency), the FIFO's head is issued in cycle 5, so 5 is refused (the
    level is still 2 in cycle 5), 6 enters, 7 is refused."""
    from netstor.sim.scoreboard import engine_refusals
    assert engine_refusals(range(8), 3, fifo_depth=2, prefetch=1) == [3, 4, 5, 7]
    # never full: nothing refused; only the differences of the arrival cycles matter
    assert engine_refusals(range(100, 140, 4), 3, fifo_depth=2, prefetch=1) == []
    assert engine_refusals([x + 7 for x in range(8)], 3, fifo_depth=2, prefetch=1) == [3, 4, 5, 7]
    # copies of 2 beats (the lane takes one every 2 cycles), a descriptor every 2 cycles, 2
    # copies per list: by hand, the first list is current in cycle 4 and its copies leave in
    # 5 and 7, the second's in 9 and 11 ...; 4 (cycle 8) and 6 (cycle 12) find the FIFO full
    assert engine_refusals(range(0, 16, 2), 2, beats=2, fifo_depth=2, prefetch=1) == [4, 6]
    # steady state of a full FIFO: one descriptor enters per list served (every 4 cycles)
    ref = engine_refusals(range(400), 4)
    kept = [k for k in range(400) if k not in set(ref)]
    first = ref[0]
    assert all(b - a == 4 for a, b in zip(kept[first:], kept[first + 1:]))
