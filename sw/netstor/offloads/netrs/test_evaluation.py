"""NetRS's make-eval section at the smoke scale (a 4-ary fat tree): every scheme runs, the
NetRS switches select (their banks and counters say so), the device's selections are the
ranking core's reference on the state the pass read, the float C3 agrees on most of them, the
saturated share comes from the switches' banks, and a run is a pure function of its seed."""
from __future__ import annotations

import json

from netstor.evaluation.runner import make_executor, run_tasks
from netstor.offloads.netrs.evaluation import EVALUATION, SCHEMES, run
from netstor.offloads.netrs.formats import saturation_shares


def test_smoke_section(tmp_path):
    tasks = EVALUATION.tasks("smoke", 1)
    assert {t.kwargs["label"] for t in tasks} == set(SCHEMES)
    results, _ = run_tasks(tasks, make_executor("serial"), progress=False)
    by = {r["label"]: r for r in results.values()}
    n = tasks[0].kwargs["requests"]
    for lab, r in by.items():
        assert r["measured"] == n - n // 10, lab
        assert r["unknown_mac"] == 0 and r["hosts_dropped"] == 0 and r["stray_replies"] == 0
    # every NetRS request was selected by an RSNode and its response learnt from there
    for lab in ("NetRS-ToR", "NetRS-ILP", "NetRS-ADP"):
        x = by[lab]["netrs"]
        assert x["ranking"] == "switch"
        assert x["selections_in_switch"] == n and x["replies"]["selected"] == n
        assert sum(x["samples_bank"]) == n and x["noreplica"] == 0
        assert x["saturated"] == saturation_shares(x["samples_bank"])
    assert by["NetRS-ToR"]["netrs"]["placement"]["tiers"] == {"tor": by["NetRS-ToR"]["netrs"]
                                                                ["placement"]["rsnodes"]}
    assert by["NetRS-ILP"]["netrs"]["placement"]["proven_optimal"]
    # the float ablation selected instead of the device, at the same RSNodes
    fl = by["NetRS-ILP (float)"]["netrs"]
    assert fl["selections_in_switch"] == 0 and fl["float"]["selections"] == n
    assert fl["placement"] == by["NetRS-ILP"]["netrs"]["placement"]
    # the device's picks are the reference's; the float C3 on the same state agrees mostly
    audit = by["NetRS-ILP"]["netrs"]["audit"]
    assert audit["selections"] == n and audit["reference_equals_device"] == n
    assert 0.9 * n <= audit["float_equals_device"] <= n
    # common random numbers: the same offered load and requests for every scheme
    assert len({(r["rate_rps"], r["requests"], r["seed"]) for r in by.values()}) == 1
    # the clairvoyant scheme serves fewer requests in slow intervals than client C3
    assert by["Oracle"]["slow_share"] < by["CliRS"]["slow_share"]
    assert by["CliRS-R95"]["clirs-r95"]["hedged"] == by["CliRS-R95"]["duplicates"]

    sec = EVALUATION.summarise(results, tmp_path, scale="smoke")
    s = sec.summary
    for key in ("requests_measured", "repeats", "saturated_share", "ilp_vs_clirs_mean_pct",
                "ilp_vs_clirs_mean_ci95", "ilp_vs_clirs_p99_pct", "ilp_vs_clirs_p99_ci95"):
        assert key in s
    cells = [sum(by[lab]["netrs"]["samples_bank"][i] for lab in
                 ("NetRS-ToR", "NetRS-ILP", "NetRS-ADP")) for i in range(8)]
    assert s["saturated_share"] == saturation_shares(cells)["any"] <= 0.01
    assert s["requests_measured"] == n - n // 10 and s["repeats"] == 1
    expect = 100 * (by["NetRS-ILP"]["mean_us"] - by["CliRS"]["mean_us"]) / by["CliRS"]["mean_us"]
    assert abs(s["ilp_vs_clirs_mean_pct"] - expect) < 0.06
    assert (tmp_path / "netrs.png").stat().st_size > 10_000
    assert json.loads((tmp_path / "netrs.json").read_text())["summary"]["runs"] == len(tasks)
    assert "| NetRS-ILP |" in sec.markdown and "rs.samples" in sec.markdown

    # a run is a pure function of its arguments: the runs above took their switches' models
    # from earlier runs (reset, the process's pool); this one builds fresh ones
    from netstor.cluster import switch
    switch._POOL.clear()
    kw = next(t.kwargs for t in tasks if t.kwargs["label"] == "NetRS-ILP")
    again = run(**kw)
    strip = lambda r: {k: v for k, v in r.items() if k != "perf"}  # noqa: E731
    assert strip(again) == strip(by["NetRS-ILP"])


def test_hedged_requests_after_the_p95():
    """CliRS-R95: once the p95 is known, a request still unanswered at its p95 gets a second
    copy to another replica of its group; the later reply is a duplicate."""
    from netstor.cluster.fattree import FatTreeRun
    fr = FatTreeRun("clirs-r95", scheme_options={"min_samples": 100, "refresh": 20}, k=4,
                    clients=6, servers=5, workers=2, service="fluct:4000:4:50",
                    rate_rps=0.8 * 5 * 2 / 4e-3, requests=2_000, seed=2, link_ns=30_000,
                    keys=(10**8, 0.99), timeout_us=5e6)
    sent = []
    orig = fr.scheme._send_to
    fr.scheme._send_to = lambda c, rid, i, s: (sent.append((rid, s)), orig(c, rid, i, s))
    r = fr.run()
    x = r["clirs-r95"]
    copies = {}
    for rid, s in sent:
        copies.setdefault(rid, []).append(s)
    twice = {rid: ss for rid, ss in copies.items() if len(ss) == 2}
    assert x["hedged"] == len(twice) == r["duplicates"] > 20
    assert all(a != b for a, b in twice.values())
    assert max(len(ss) for ss in copies.values()) == 2
    assert 0 < x["p95_us"] and r["timeouts"] == 0


def test_forward_table_fit_is_decided_by_the_loader():
    """``_forward_fits`` (the RSNode-id renumbering's test) says no when the entries do not
    fit the device's hashed rs.forward table (16 entries, 2 ways: 17 cannot) and yes for a few;
    a full table reaches it as the configuration loader's ConfigTableFull, not a traceback."""
    from netstor.offloads.netrs.sim_schemes import _forward_fits
    entry = {"port": 1, "dmac": "02:00:00:00:00:01", "smac": "02:00:00:00:00:02"}
    assert _forward_fits([dict(entry, rsnode=401 + i) for i in range(3)])
    assert not _forward_fits([dict(entry, rsnode=401 + i) for i in range(17)])


def test_fat_tree_beyond_63_servers():
    """70 servers (NetRS ids 1..70; the 6-bit ids stopped at 63) on an 8-ary fat tree, ToR
    RSNodes holding all 70 replica groups and servers: every request is selected by the
    device (the ranking core's reference on the cells the pass read, ``_Audit``, agrees on
    each), servers with ids of 64 and up among the choices, every response learnt from at
    the RSNodes, no frame lost. The interpreter model: its 80 switches build faster than
    compiled ones (~5 s of build and ~5 s of run on a free machine)."""
    from netstor.cluster.fattree import FatTreeRun
    from netstor.model.dataplane import DataplaneModel
    n = 200
    fr = FatTreeRun("netrs", scheme_options={"placement": "tor", "audit": True}, k=8,
                    clients=8, servers=70, workers=4, service="exp:4000",
                    rate_rps=0.5 * 70 * 4 / 4e-3, requests=n, seed=3, link_ns=30_000,
                    timeout_us=5e6, model_class=DataplaneModel)
    r = fr.run()
    x = r["netrs"]
    assert r["timeouts"] == 0 and r["switch"]["unknown_mac"] == 0
    assert x["selections_in_switch"] == n and x["replies"]["selected"] == n
    assert x["audit"]["selections"] == x["audit"]["reference_equals_device"] == n
    assert sum(x["samples_bank"]) == n and x["noreplica"] == 0
    picked = [s + 1 for _, _, s in fr.scheme.audits_done]       # the answering servers' ids
    assert len(picked) == n and sum(1 for s in picked if s >= 64) >= 5, picked
    assert max(len(c["netrs"].get("servers", [])) for c in fr.scheme.cfgs.values()) == 70
