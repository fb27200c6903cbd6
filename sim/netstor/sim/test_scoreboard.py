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
