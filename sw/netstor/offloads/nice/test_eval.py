"""NICE in the cluster simulator against independent formulas: a 1 MB get over 1 Gb/s cables
takes exactly the frames' serialisation plus the switch's passes; each scheme's put crosses the
cables as many times as its message flow says (hand-counted); the NOOB primary moves R times
a secondary's bytes, NICE's the same; the put times' ratios at 1 MB are the whole-transfer
counts; NICE's program in the compiled model decides like the reference rules; the failure
timeline (hiding after 2 time-out reports, or after 3 missed heartbeats; rejoin) loses no
acknowledged put; the evaluation hook writes the issue's summary keys (figure 10's
load-balancing key among them; its own tests: ``test_lb.py``)."""
from __future__ import annotations

import json

import pytest

from netstor.cluster.switch import BASE_CYCLES, CLOCK_NS
from netstor.offloads.nice import eval as neval
from netstor.offloads.nice.header import FRAG_DATA
from netstor.offloads.nice.sim import (NiceRun, failure_run, frame_len, key_pool, latency_run,
                                       model_available, wire_ns)

LINK_NS = 500                          # NiceRun's default cable latency


def _pass_ns(frame):
    """The switch's pass: the frame's 64-byte beats + the fixed cycles, at 4 ns a cycle."""
    return (-(-frame // 64) + BASE_CYCLES) * CLOCK_NS


def _free(scheme, kind, size, *, replicas=3, consistency="pb", n=2, switch="ref"):
    """A closed-loop run with every CPU cost zero (only the network's time)."""
    keys = key_pool(n, 7)
    run = NiceRun(scheme, consistency=consistency, replicas=replicas, switch=switch,
                  ops=[[(kind, k, size, None) for k in keys]], cost_scale=0.0, seed=7)
    if kind == "get":
        for k in keys:
            for m in run.replicas_of(run.part_of(k)):
                run.nodes[m - 1].store[k] = (1, 0, 0, size)
    run.run()
    return run


def test_a_1mb_get_takes_its_frames_serialisation():
    size = 1 << 20
    run = _free("nice", "get", size, n=1)
    got = run.op_times()[0]
    req = frame_len(0)
    frags = [frame_len(min(FRAG_DATA, size - i * FRAG_DATA)) for i in range(-(-size // FRAG_DATA))]
    # the request: client cable, switch, node cable; the reply: the node's cable sends the 749
    # fragments back to back, each crosses the switch (store and forward) and queues on the
    # client's cable behind the one before
    t = wire_ns(req) + LINK_NS + _pass_ns(req) + wire_ns(req) + LINK_NS
    sent = t
    client_free = 0
    for f in frags:
        sent += wire_ns(f)
        start = max(sent + LINK_NS + _pass_ns(f), client_free)
        client_free = start + wire_ns(f)
    expect = client_free + LINK_NS
    assert len(frags) == 749 and abs(got - expect) <= 2
    assert 8.9e6 < got < 9.1e6             # ~1 MB / 1 Gb/s + headers


@pytest.mark.parametrize("scheme,consistency,hops", [
    # NICE: client->switch, 3 copies, 2 PUT_ACKs (2 cables each), TS to the switch and 3
    # copies, 2 TS_ACKs, PUT_REPLY
    ("nice", "pb", 1 + 3 + 4 + 1 + 3 + 4 + 2),
    # NOOB-RAC primary-backup: client->primary, 2 copies, 2 acks, reply
    ("rac", "pb", 2 + 4 + 4 + 2),
    # + 2PC: prepare, votes, commit, acks
    ("rac", "2pc", 2 + 4 + 4 + 4 + 4 + 2),
    # RAG: via the gateway (one more application hop: 2 more cables)
    ("rag", "pb", 4 + 4 + 4 + 2),
])
def test_cable_crossings_per_put(scheme, consistency, hops):
    run = _free(scheme, "put", 4, consistency=consistency, n=3)
    frames = sum(link.frames for link in run.net.links())
    assert frames == 3 * hops
    assert all(t is not None for t in run.op_times())


def test_rog_takes_two_extra_hops_unless_the_random_node_is_the_primary():
    run = _free("rog", "put", 4, n=12)
    frames = sum(link.frames for link in run.net.links())
    hits = sum(run.random_node(0, req) == run.primary_of(run.part_of(k))
               for req, k in zip(range(1, 13), key_pool(12, 7)))
    assert frames == 12 * (2 + 2 + 2 + 4 + 4 + 2) - 2 * hits


def test_primary_moves_r_times_a_secondarys_bytes():
    for R in (3, 5):
        pb = latency_run("rac", "put", 65536, n=2, replicas=R)
        nc = latency_run("nice", "put", 65536, n=2, replicas=R)
        r_pb = pb["primary_bytes_per_op"] / pb["secondary_bytes_per_op"]
        r_nc = nc["primary_bytes_per_op"] / nc["secondary_bytes_per_op"]
        assert R - 0.05 < r_pb < R + 0.05
        assert 0.99 < r_nc < 1.05


def test_1mb_put_times_are_the_whole_transfer_counts():
    t = {s: sum(_free(s, "put", 1 << 20, n=1).op_times()) for s in ("nice", "rac", "rag")}
    one = t["nice"]
    # NICE: one transfer (the switch copies); RAC: in + 2 copies on the primary's cable; RAG:
    # one more whole-object hop
    assert 9.0e6 < one < 9.2e6
    assert 2.98 < t["rac"] / one < 3.02 and 3.97 < t["rag"] / one < 4.03


@pytest.mark.skipif(not model_available(), reason="NICE's program / config not there")
def test_program_in_the_model_decides_like_the_reference():
    for kind, size in (("get", 4), ("put", 4), ("put", 100_000), ("get", 100_000)):
        a = latency_run("nice", kind, size, n=4, switch="model")
        b = latency_run("nice", kind, size, n=4, switch="ref")
        assert a["model"].startswith("CompiledModel") and b["model"] == "RefNice"
        for k in ("mean_us", "link_bytes_per_op", "primary_bytes_per_op", "frames", "events"):
            assert a[k] == b[k], (kind, size, k)
    kw = dict(duration_s=3.0, fail_s=1.0, rejoin_s=2.0, rate=40.0, heartbeat_s=0.05,
              ack_timeout_s=0.03, retry_s=0.1, timeout_s=0.1, bin_s=0.25)
    fa, fb = failure_run(switch="model", **kw), failure_run(switch="ref", **kw)
    for k in ("puts", "gets", "unavailable_s", "forwarded_gets", "acked_puts", "aborts"):
        assert fa[k] == fb[k], k


def test_failure_hidden_after_reports_or_missed_heartbeats_and_nothing_lost():
    kw = dict(duration_s=4.0, fail_s=1.0, rejoin_s=3.0, rate=60.0, heartbeat_s=0.1,
              ack_timeout_s=0.05, retry_s=0.1, timeout_s=0.1, bin_s=0.1)
    r = failure_run(**kw)
    ev = {e["event"]: e for e in r["events"]}
    assert ev["failed"]["detail"][1] == "timeouts"
    # hidden after the second put's PUT_ACK wait: at least one wait after the failure
    t_hide = ev["failed"]["t_s"]
    assert kw["fail_s"] + kw["ack_timeout_s"] <= t_hide < kw["fail_s"] + 0.3
    assert t_hide - 0.01 <= kw["fail_s"] + r["unavailable_s"] < t_hide + 0.1
    assert r["aborts"] >= 2 and r["forwarded_gets"] > 0
    assert ev["rejoin"]["t_s"] == kw["rejoin_s"] and ev["rejoined"]["t_s"] > kw["rejoin_s"]
    assert ev["rejoined"]["objects_fetched"] > 0
    assert r["acked_puts"] > 150 and r["acked_puts_lost"] == 0
    assert r["acked_puts_under_replicated"] == 0
    # heartbeats only: node k beats at k b / 15 + j b; the service checks at j b and declares a
    # node whose last beat is more than 3 b old
    h = failure_run(report_timeouts=False, **kw)
    ev = {e["event"]: e for e in h["events"]}
    assert ev["failed"]["detail"][1] == "heartbeats"
    b, node = kw["heartbeat_s"], ev["failed"]["detail"][0]
    phase = (node - 1) * b / 15
    last = phase + int((kw["fail_s"] - phase) / b) * b
    check = (int((last + 3 * b) / b + 1e-9) + 1) * b
    assert ev["failed"]["t_s"] == pytest.approx(check, abs=1e-6)
    assert h["unavailable_s"] > r["unavailable_s"] and h["acked_puts_lost"] == 0


def test_evaluation_hook_writes_the_issue_keys(tmp_path):
    from netstor.evaluation.runner import make_executor, run_tasks
    from netstor.offloads import get
    ev = get("nice").hook("evaluation")
    ts = ev.tasks("smoke", 1)
    assert len({t.key for t in ts}) == len(ts)
    results, _ = run_tasks(ts, make_executor("serial"), progress=False)
    sec = ev.summarise(results, tmp_path, scale="smoke")
    s = sec.summary
    assert {"put_speedup_vs_rog", "put_speedup_vs_rag", "put_speedup_vs_rac",
            "put_time_growth_r1_to_r9", "unavailable_s", "acked_puts_lost"} <= set(s)
    # 64 KB at the smoke scale: ROG > RAG > RAC > 1
    assert s["put_speedup_vs_rog"] > s["put_speedup_vs_rag"] > s["put_speedup_vs_rac"] > 1.2
    assert s["acked_puts_lost"] == 0 and 0 < s["unavailable_s"] < 1.0
    res = json.loads((tmp_path / "nice.json").read_text())
    assert res["costs_now"]["rx_frag_us"] > 0
    assert (tmp_path / "nice.png").stat().st_size > 10_000
    assert "| put: NICE faster than NOOB-ROG |" in sec.markdown
    # figure 10 (smoke: R = 3, 5 at 4 B and 16 KB): its own key; NICE's gets all at the
    # secondaries; at 16 KB primary-only's cable carries every reply: NICE finishes sooner
    lb = s["load_balancing_fig10"]
    assert lb["replicas"] == [3, 5] and lb["failed"] == 0
    assert lb["nice_gets"] > 0 and lb["nice_gets_at_primary"] == 0
    assert lb["speedup_vs_primary_only"]["16384"] > 1.2
    assert lb["growth_primary_only"]["16384"] > lb["growth_nice"]["16384"]
    assert "| load balancing (fig 10): NICE faster than NOOB-RAC primary-only |" in sec.markdown
    assert res["lb"]["gets_per_replica"]["pb"]["4"]["get_only"][0][1:] == [0, 0]
