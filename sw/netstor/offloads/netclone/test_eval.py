"""NetClone in the cluster simulator: the switch inside the simulator runs the NetClone
program exactly as the interpreter does on the same frames (recirculated clones included);
the four schemes see common random numbers; cloning, filtering and the coordinator behave as
described; the evaluation writes its JSON and plot."""
import json

import pytest

from netstor.cluster.frames import parse_udp
from netstor.cluster.rack import RackRun
from netstor.cluster.switch import cached_config_ops, pass_cycles
from netstor.model.dataplane import DataplaneModel
from netstor.offloads.netclone import eval as nceval
from netstor.offloads.netclone.header import CLONE_COPY, CLONE_ORIGINAL, NcHeader

KW = dict(clients=2, servers=6, workers=15, service=None, requests=1500, seed=3,
          timeout_us=5000, link_ns=1000, gbps=100.0)


def _kw(load, **over):
    svc = nceval.service("exp")
    return dict(KW, service=svc, rate_rps=load * nceval.capacity_rps("exp"), **over)


@pytest.mark.parametrize("model_class", [DataplaneModel, None])
def test_switch_equals_the_interpreter_on_netclone_frames(model_class):
    run = RackRun("netclone", **_kw(0.3, requests=300, model_class=model_class, trace=5000,
                                    check_checksums=True))
    res = run.run()
    sw = run.switch
    assert sw.recirc_passes > 250 and not res["hosts_dropped"]
    ref = DataplaneModel(sw.pipeline)
    writes, regs = cached_config_ops(run.config)
    for mem, addr, word in writes:
        ref.mem_write(mem, addr, word)
    clones = 0
    for (t, port, frame, arrival), outs in zip(sw.trace, sw.trace_out):
        exp = ref.process(frame, port, arrival=arrival)
        assert [(o.port, o.frame) for o in exp] == [(q, f) for _, q, f in outs]
        one = 4 * pass_cycles(len(frame))
        if len(outs) == 2:             # a cloned request: the copy leaves one pass later
            clones += 1
            # (the recirculated pass may wait a few cycles for frames entering before it)
            assert outs[0][0] - t == one and 2 * one <= outs[1][0] - t < 3 * one
            heads = [NcHeader.unpack(parse_udp(f).payload) for _, _, f in outs]
            assert [h.clone for h in heads] == [CLONE_ORIGINAL, CLONE_COPY]
            assert heads[0].seq == heads[1].seq != 0
    assert clones == sw.recirc_passes
    assert ref.counters() == sw.counters()
    for name in ("nc.filter", "nc.load1", "nc.load2", "nc.seq", "nc.filtered"):
        depth = ref.memories()[name][0]
        assert [ref.mem_read(name, i) for i in range(depth)] == \
            [sw.model.mem_read(name, i) for i in range(depth)]


def test_schemes_share_arrivals_and_service_draws():
    runs = {}
    for name, (scheme, options) in nceval.SCHEMES.items():
        run = RackRun(scheme, scheme_options=options, **_kw(0.02))
        for s in run.servers:
            s.log = []
        run.run()
        runs[name] = run
    base = runs["none"]
    logs = {n: [{rid: t for rid, _, t in s.log} for s in r.servers] for n, r in runs.items()}
    for name, run in runs.items():
        for a, b in zip(base.clients, run.clients):
            assert (a.arrivals == b.arrivals).all() and a.picks == b.picks
        same = sum(1 for k in range(6) for rid, t in logs[name][k].items()
                   if logs["none"][k].get(rid) == t)
        differ = sum(1 for k in range(6) for rid, t in logs[name][k].items()
                     if rid in logs["none"][k] and logs["none"][k][rid] != t)
        assert differ == 0
        if name in ("cclone",):
            assert same == 1500        # its first copy goes where `none` sends the request


def test_netclone_clones_when_idle_and_filters_the_slower_reply():
    r = RackRun("netclone", **_kw(0.05)).run()
    nc = r["netclone"]
    assert r["timeouts"] == 0 and nc["duplicates_at_clients"] == 0
    # at 5 % load the candidates are nearly always idle: almost every request is cloned
    assert nc["cloned_fraction"] > 0.95
    # every clone's reply either was filtered or never existed (dropped at a busy server)
    clones = r["switch"]["recirculated"]
    assert nc["filtered_in_switch"] + nc["clones_dropped_at_servers"] == clones
    none = RackRun("direct", **_kw(0.05)).run()
    # two independent service draws: the tail of the faster one is shorter
    assert r["p99_us"] < 0.7 * none["p99_us"]


def test_laedge_coordinator_keeps_one_request_per_server():
    run = RackRun("laedge", scheme_options={"slots": 1}, **_kw(0.03))
    co = run.scheme.coord
    after_send, send = [], co._to

    def watched(s, payload):
        send(s, payload)
        after_send.append(co.out[s])
    co._to = watched
    res = run.run()
    c = res["laedge"]
    assert c["requests"] == 1500 and c["relayed"] == 1500 - res["timeouts"]
    assert res["duplicates"] == 0
    assert c["cloned"] > 0 and c["second_replies_dropped"] <= c["cloned"]
    # never more than one outstanding request per server (the authors' coordinator)
    assert max(after_send) == 1 and len(after_send) == 1500 + c["cloned"]
    assert co.out == [0] * 6 and not co.queue


def test_eval_writes_json_and_plot(tmp_path):
    out = tmp_path / "nc.json"
    rc = nceval.main(["--out", str(out), "--preset", "smoke", "--dists", "exp",
                      "--loads", "0.05,0.5", "--requests", "800", "--jobs", "1",
                      "--no-progress"])
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["loads"] == [0.05, 0.5]
    assert set(res["p99_us"]) == {"none", "cclone", "laedge", "netclone"}
    assert all(len(v) == 2 for v in res["p99_us"].values())
    assert res["dists"]["exp"]["schemes"]["netclone"]["p99_ci95"][0][0] is not None
    assert res["setup"]["model_check_frames"] > 500
    assert (tmp_path / "nc.png").stat().st_size > 10_000


def test_evaluation_hook_tasks_and_summary(tmp_path):
    from netstor.evaluation.runner import make_executor, run_tasks
    from netstor.offloads import get
    ev = get("netclone").hook("evaluation")
    ts = ev.tasks("smoke", 1)
    assert len({t.key for t in ts}) == len(ts) == 6
    results, _ = run_tasks(ts, make_executor("serial"), progress=False)
    sec = ev.summarise(results, tmp_path, scale="smoke")
    assert sec.name == "netclone" and sec.figures == ["netclone.png"]
    s = sec.summary
    assert s["loads"] == nceval.PRESETS["smoke"]["loads"]
    assert set(s["p99_us"]) == {"none", "cclone", "laedge", "netclone"}
    assert "| load |" in sec.markdown
    assert json.loads((tmp_path / "netclone.json").read_text())["p99_us"] == s["p99_us"]
    # the same tasks on a pool give the same numbers (results depend on the seeds only)
    again, _ = run_tasks(ts, make_executor("local", 2), progress=False)
    strip = {k: {n: {m: v for m, v in x.items() if m != "perf"}
                 for n, x in r["results"].items()} for k, r in again.items()}
    assert strip == {k: {n: {m: v for m, v in x.items() if m != "perf"}
                         for n, x in r["results"].items()} for k, r in results.items()}
