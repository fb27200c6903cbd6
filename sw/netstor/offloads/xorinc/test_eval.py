"""XORInc in the cluster simulator: the switch's own counters show k + 1 transfers per packet
position for NetRepair against 2k for conventional repair (r + 3 against 2r + 2 for updates);
NetRepair is as fast as a normal read and k times faster than conventional repair at a low
bottleneck bandwidth; every repaired / updated chunk equals galois' (an independent library);
the simulated switch gives exactly the interpreter's outputs on the same frames; the
evaluation hook writes the summary with the issue's keys."""
import json

import numpy as np
import pytest

from netstor.cluster.switch import cached_config_ops
from netstor.model.dataplane import DataplaneModel
from netstor.offloads.xorinc import eval as xieval
from netstor.offloads.xorinc.config import model_writes
from netstor.offloads.xorinc.sim import XorRun, galois_field, run_xor

P = 4          # packets of a 4 KiB chunk
CTL = 1        # control frames a node or helper gets per operation (REPAIR / READ / ACK)


def test_galois_reference_is_the_field_and_code_we_claim():
    GF = galois_field()
    assert int(GF(0x80) * GF(2)) == 0x1D           # x^8 = x^4 + x^3 + x^2 + 1
    from netstor.offloads.xorinc.sim import galois_parity
    d = np.random.default_rng(5).integers(0, 256, (3, 64), dtype=np.uint8)
    par = galois_parity(d, 2)
    # any 3 of the 5 chunks determine the stripe: solve for data from (d1, p0, p1) in galois
    G = GF(np.vstack([np.eye(3, dtype=np.uint8), np.asarray(xieval_cauchy(3, 2))]))
    rows = [1, 3, 4]
    sub = G[rows]
    chunks = GF(np.vstack([d[1], par[0], par[1]]))
    assert (np.asarray(np.linalg.inv(sub) @ chunks) == d).all()


def xieval_cauchy(k, r):
    from netstor.offloads.xorinc.sim import galois_cauchy
    return galois_cauchy(k, r)


@pytest.mark.parametrize("k", [3, 5])
def test_repair_traffic_from_switch_counters(k):
    ops = 4
    conv = run_xor("conv", k=k, r=2, mbps=1000, ops=ops)
    net = run_xor("netrepair", k=k, r=2, mbps=1000, ops=ops)
    for res in (conv, net):
        assert res["completed"] == ops and res["byte_mismatches"] == 0 and not res["stray"]
    # conventional: k requests in and out, k chunks in (helper -> switch) and out (-> client)
    assert conv["traffic"]["frames"] == ops * 2 * (k * CTL + k * P)
    # NetRepair: k requests in and out, k PARTs in, one REPAIRED out per packet position
    assert net["traffic"]["frames"] == ops * (2 * k * CTL + (k + 1) * P)
    assert net["engine"]["xi.engine.done"] == ops * P
    assert net["engine"]["xi.engine.absorbed"] == ops * P * (k - 1)
    data_conv = conv["traffic"]["frames"] - ops * 2 * k * CTL
    data_net = net["traffic"]["frames"] - ops * 2 * k * CTL
    assert (data_conv, data_net) == (ops * P * 2 * k, ops * P * (k + 1))


@pytest.mark.parametrize("r", [2, 4])
def test_update_traffic_from_switch_counters(r):
    ops = 4
    conv = run_xor("conv_update", k=3, r=r, mbps=1000, ops=ops)
    net = run_xor("netupdate", k=3, r=r, mbps=1000, ops=ops)
    for res in (conv, net):
        assert res["completed"] == ops and res["byte_mismatches"] == 0 and not res["stray"]
    acks = 2 * (r + 1)                 # one ACK per node and chunk, in and out
    # conventional: new data client -> data node (2 per packet), r deltas (2r per packet)
    assert conv["traffic"]["frames"] == ops * ((2 * r + 2) * P + acks)
    # NetUpdate: new in, its header on to the data node, old in, r + 1 deltas out
    assert net["traffic"]["frames"] == ops * ((r + 3) * P + P + acks)
    assert net["engine"]["xi.scale.scaled"] == ops * P * (r + 1)
    # the cue to the data node is its header only: the same small frame per packet, no data
    trig = net["traffic"]["bytes"] - ops * ((r + 3) * P * 1152 + acks * 128)
    per, rest = divmod(trig, ops * P)
    assert rest == 0 and 14 + 20 + 8 + 26 <= per < 128


def test_netrepair_as_fast_as_a_normal_read_and_k_times_conventional():
    t = {s: run_xor(s, k=3, r=2, mbps=50, ops=16)["time_ns"]
         for s in ("normal", "conv", "rp", "netrepair")}
    assert 2.8 < t["conv"] / t["netrepair"] < 3.1
    assert 0.99 < t["netrepair"] / t["normal"] < 1.02
    assert t["netrepair"] < t["rp"]          # the chain adds a hop's serialisation per slice
    u = {s: run_xor(s, k=3, r=2, mbps=50, ops=16)["time_ns"]
         for s in ("conv_update", "netupdate")}
    assert 1.6 < u["conv_update"] / u["netupdate"] < 2.1


def test_every_lost_position_is_repaired_byte_exact():
    k, r = 5, 3
    n = k + r
    for scheme in ("netrepair", "conv", "rp"):
        res = run_xor(scheme, k=k, r=r, mbps=1000, ops=2 * n, blocks=n, lost=range(n),
                      rotate=False, window=4, seed=7, check_checksums=True)
        assert res["completed"] == 2 * n and not res["hosts_dropped"]
        assert (res["chunks_checked"], res["byte_mismatches"]) == (2 * n, 0)
    res = run_xor("netupdate", k=k, r=r, mbps=1000, ops=k, blocks=k, lost=range(k),
                  rotate=False, seed=8, check_checksums=True)
    assert (res["completed"], res["chunks_checked"], res["byte_mismatches"]) == (k, k, 0)
    assert not res["hosts_dropped"]


def test_a_wrong_repair_would_be_caught():
    run = XorRun("netrepair", k=3, r=2, mbps=1000, ops=2)
    run.run()
    run.client.results[0] = run.client.results[0].copy()
    run.client.results[0][17] ^= 1
    assert run.check() == (2, 1)


@pytest.mark.parametrize("scheme", ["netrepair", "netupdate"])
def test_switch_equals_the_interpreter_on_its_frames(scheme):
    run = XorRun(scheme, k=3, r=2, mbps=1000, ops=4, trace=10_000)
    res = run.run()
    assert res["byte_mismatches"] == 0
    sw = run.switch
    ref = DataplaneModel(sw.pipeline, groups="list")
    writes, regs = cached_config_ops(run.config)
    _, xi = model_writes(sw.pipeline, run.net_agent.xi_section)
    for mem, addr, word in list(writes) + list(xi):
        ref.mem_write(mem, addr, word)
    for name, value in regs:
        ref.reg_write(name, value)
    assert len(sw.trace) == res["traffic"]["frames_in"]
    for (t, port, frame, arrival), outs in zip(sw.trace, sw.trace_out):
        exp = ref.process(frame, port, arrival=arrival)
        assert [(o.port, o.frame) for o in exp] == [(q, f) for _, q, f in outs]
    assert ref.counters() == sw.counters()


def test_evaluation_hook_writes_the_issue_keys(tmp_path):
    from netstor.evaluation.runner import make_executor, run_tasks
    from netstor.offloads import get
    ev = get("xorinc").hook("evaluation")
    ts = ev.tasks("smoke", 1)
    assert len({t.key for t in ts}) == len(ts)
    results, _ = run_tasks(ts, make_executor("serial"), progress=False)
    sec = ev.summarise(results, tmp_path, scale="smoke")
    s = sec.summary
    assert set(s) == {"repair_time_conv_over_net", "repair_time_net_over_normal_read",
                      "update_time_conv_over_net", "repair_traffic_reduction_pct",
                      "update_traffic_reduction_pct", "stripes_checked", "byte_mismatches"}
    assert set(s["repair_traffic_reduction_pct"]) == {"3", "5"}
    assert set(s["update_traffic_reduction_pct"]) == {"2", "4"}
    assert s["byte_mismatches"] == 0
    assert s["stripes_checked"] == sum(t.kwargs["ops"] for t in ts
                                       if t.kwargs["group"] != "check")
    # more helpers, more traffic saved (counted, not computed)
    red = s["repair_traffic_reduction_pct"]
    assert 0 < red["3"] < red["5"] < 50
    ured = s["update_traffic_reduction_pct"]
    assert 0 < ured["2"] < ured["4"] < 40
    assert s["repair_time_conv_over_net"] > 2.5
    res = json.loads((tmp_path / "xorinc.json").read_text())
    assert res["incomplete_runs"] == 0
    mc = res["model_check"]
    assert set(mc) == {"netrepair", "netupdate"}
    assert all(v["frames"] > 100 and v["mismatches"] == 0 and v["counters_equal"]
               for v in mc.values())
    assert (tmp_path / "xorinc.png").stat().st_size > 10_000
    assert "| Mb/s | Conv | RP | NetRepair | Normal read |" in sec.markdown
