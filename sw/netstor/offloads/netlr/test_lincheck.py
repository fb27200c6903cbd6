"""The linearizability checker (porcupine behind lincheck/main.go) on hand-made histories:
known-bad ones it must reject (with the key), known-good ones it must accept; and the count of
acknowledged writes lost. Each history is small enough to check by hand: the comments say why
it is (not) linearizable."""
from __future__ import annotations


import pytest

from netstor import lincheck
from netstor.lincheck import LincheckUnavailable, acked_writes_lost, check


def _go_present():
    try:
        lincheck.go_binary()
        return True
    except LincheckUnavailable:
        return False


# skipped only when there is no Go toolchain at all; a failing build is a failure
pytestmark = pytest.mark.skipif(not _go_present(), reason="no Go toolchain (`go` absent)")


def W(client, key, value, call, ret):
    return {"client": client, "op": "write", "key": key, "value": value, "call": call,
            "return": ret}


def R(client, key, value, call, ret):
    return {"client": client, "op": "read", "key": key, "value": value, "call": call,
            "return": ret}


# ---- known bad -----------------------------------------------------------------------------
def test_stale_read_after_acked_write():
    # w(a=1) acked at 10, w(a=2) acked at 30; a read starting at 40 returns 1: stale
    h = [W(0, "a", "1", 0, 10), W(0, "a", "2", 20, 30), R(1, "a", "1", 40, 50),
         W(2, "b", "x", 0, 100), R(2, "b", "x", 110, 120)]           # b is fine
    rep = check(h)
    assert not rep["ok"] and rep["result"] == "Illegal"
    assert rep["violations"] == 1 and rep["key"] == "a" and rep["bad_keys"] == ["a"]
    assert rep["operations"] == 5 and rep["partitions"] == 2


def test_acked_write_lost():
    # w(k=v1) acked at 10; every later read sees nothing (the initial state)
    h = [W(0, "k", "v1", 0, 10), R(1, "k", None, 20, 30), R(2, "k", None, 40, 50)]
    rep = check(h)
    assert not rep["ok"] and rep["key"] == "k"
    lost = acked_writes_lost(h)
    assert lost["acked_writes"] == 1 and lost["lost"] == 1


def test_acked_write_lost_to_an_older_value():
    # v1 then v2, both acked in order; the final read shows v1 again: v2 was lost
    h = [W(0, "k", "v1", 0, 10), W(0, "k", "v2", 20, 30), R(1, "k", "v1", 40, 50)]
    assert check(h)["violations"] == 1
    lost = acked_writes_lost(h)
    assert lost["lost"] == 1 and lost["lost_ops"][0]["value"] == "v2"


def test_two_reads_out_of_order():
    # a write of 1 concurrent with both reads (0..100); read A (10..20) sees 1, read B
    # (30..40) starts after A returned and sees the old value 0: no order fits
    h = [W(0, "x", "0", -20, -10), W(1, "x", "1", 0, 100), R(2, "x", "1", 10, 20),
         R(3, "x", "0", 30, 40)]
    rep = check(h)
    assert not rep["ok"] and rep["key"] == "x"
    # the same reads the other way round are fine (the write lands between them)
    h[2], h[3] = R(2, "x", "0", 10, 20), R(3, "x", "1", 30, 40)
    assert check(h)["ok"]


def test_read_of_a_value_never_written():
    assert not check([W(0, "a", "1", 0, 10), R(1, "a", "7", 20, 30)])["ok"]


def test_pending_write_cannot_be_undone():
    # a pending write that a read saw must stay visible: read 1 then read None is illegal
    h = [W(0, "p", "1", 0, None), R(1, "p", "1", 10, 20), R(1, "p", None, 30, 40)]
    rep = check(h)
    assert not rep["ok"] and rep["pending_writes"] == 1


# ---- known good ----------------------------------------------------------------------------
def test_concurrent_overlapping_ops():
    # two overlapping writes; reads during them may see either, but once a read sees 2 a
    # later read may see 2 only if 2 is linearised last: 1 then 2
    h = [W(0, "a", "1", 0, 50), W(1, "a", "2", 10, 60), R(2, "a", None, 5, 8),
         R(3, "a", "1", 20, 30), R(4, "a", "2", 35, 45), R(5, "a", "2", 70, 80)]
    rep = check(h)
    assert rep["ok"] and rep["result"] == "Ok" and rep["violations"] == 0
    assert rep["operations"] == 6 and rep["partitions"] == 1
    assert acked_writes_lost(h)["lost"] == 0        # 1 superseded by 2, 2 read back


def test_pending_ops():
    # a write whose client never got an answer: it may take effect late (a read at 100 sees
    # it) or never; a pending read is left out
    h = [W(0, "a", "1", 0, 10), W(1, "a", "2", 20, None), R(2, "a", "1", 30, 40),
         R(2, "a", "2", 100, 110), R(3, "a", None, 5, None),
         W(4, "b", "z", 0, None), R(4, "b", None, 50, 60)]      # b's write never landed
    rep = check(h)
    assert rep["ok"]
    assert rep["pending_writes"] == 2 and rep["pending_reads"] == 1
    assert rep["operations"] == 6 and rep["partitions"] == 2
    lost = acked_writes_lost(h)
    assert lost == {"acked_writes": 1, "lost": 0, "lost_ops": []}


def test_many_clients_sequential_register():
    # a longer good history: 8 clients, 200 ops on 5 keys, each op in its own time slot
    # (so the one order is the time order), values unique
    h, state, t = [], {}, 0
    for i in range(200):
        key = f"k{i % 5}"
        if i % 3 == 0:
            h.append(W(i % 8, key, f"v{i}", t, t + 5))
            state[key] = f"v{i}"
        else:
            h.append(R(i % 8, key, state.get(key), t, t + 5))
        t += 10
    rep = check(h)
    assert rep["ok"] and rep["operations"] == 200 and rep["partitions"] == 5
    # and the same history with one read changed to an older value is rejected
    j = next(i for i, op in enumerate(h) if op["op"] == "read" and op["value"] is not None
             and i > 100)
    older = next(op["value"] for op in h[:j] if op["op"] == "write" and op["key"] ==
                 h[j]["key"] and op["value"] != h[j]["value"])
    h[j] = dict(h[j], value=older)
    rep = check(h)
    assert rep["violations"] == 1 and rep["key"] == h[j]["key"]


def test_bytes_and_float_seconds():
    # bytes keys/values go as hex; float timestamps are seconds
    h = [W(0, b"\x00key", b"\xff", 0.0, 0.001), R(1, b"\x00key", b"\xff", 0.002, 0.003)]
    assert check(h)["ok"]


def test_bad_input_is_an_error():
    with pytest.raises(ValueError, match="neither"):
        check([{"client": 0, "op": "cas", "key": "a", "value": "1", "call": 0,
                "return": 1}])


def test_recorder():
    rec = lincheck.Recorder()
    t = rec.call(0, "write", "a", "1")
    rec.ret(t)
    t = rec.call(1, "read", "a")
    rec.ret(t, "1")
    rec.call(2, "read", "a")                    # pending
    h = rec.history()
    assert [op["return"] is None for op in h] == [False, False, True]
    assert h[1]["value"] == "1" and h[0]["call"] <= h[0]["return"] <= h[1]["call"]
    rep = check(h)
    assert rep["ok"] and rep["pending_reads"] == 1


def test_build_is_cached():
    exe = lincheck.build()
    assert exe.is_file() and exe.parent.parent.name == "lincheck"
    assert lincheck.build() == exe


def test_command_line(tmp_path, capsys):
    from netstor.lincheck.__main__ import main
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_text(lincheck.to_jsonl([W(0, "a", "1", 0, 10), R(1, "a", "1", 20, 30)]))
    bad.write_text(lincheck.to_jsonl([W(0, "a", "1", 0, 10), R(1, "a", None, 20, 30)]))
    assert main([str(good)]) == 0 and '"ok": true' in capsys.readouterr().out
    html = tmp_path / "v.html"
    assert main([str(bad), "--html", str(html)]) == 1
    assert '"violations": 1' in capsys.readouterr().out and html.stat().st_size > 1000
