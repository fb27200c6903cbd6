"""A rack in the simulator: deterministic per seed, common random numbers across schemes,
the switch inside the simulator equal to the model run directly on the same frames, timeouts
kept in the samples."""
import pytest

from netstor.cluster.frames import parse_udp, udp_frame, verify_checksums
from netstor.cluster.rack import RackRun
from netstor.cluster.scheme import SimScheme, storage_request
from netstor.cluster.switch import SwitchNode, cached_config_ops, pass_cycles
from netstor.cluster.trace import make_trace
from netstor.model.dataplane import DataplaneModel
from netstor.programs import default_pipeline
from netstor.proto import Op, STORAGE_UDP_PORT

KW = dict(clients=2, servers=3, workers=2, service="exp:25", rate_rps=100_000,
          requests=3000, seed=4, timeout_us=2000, link_ns=500)


class BothOfPair(SimScheme):
    """Plain requests to two servers (a test scheme: its own server choice per request)."""
    name = "both"

    def setup(self, run):
        super().setup(run)
        self.ips = [s.host.ip for s in run.servers]

    def send(self, client, rid, i):
        a = int(client.picks[i] * len(self.ips))
        for s in (a, (a + 1) % len(self.ips)):
            client.host.send(self.ips[s], self.client_port, STORAGE_UDP_PORT,
                             storage_request(Op.GET, client.keys[i], rid))


def _strip(r):
    return {k: v for k, v in r.items() if k != "perf"}


def test_same_seed_same_result_other_seed_other_result():
    a = _strip(RackRun("direct", **KW).run())
    b = _strip(RackRun("direct", **KW).run())
    c = _strip(RackRun("direct", **dict(KW, seed=5)).run())
    assert a == b
    assert a["p99_us"] != c["p99_us"]
    assert a["measured"] == 2700 and a["timeouts"] == 0 and a["duplicates"] == 0


def test_common_random_numbers_across_schemes():
    """The same arrivals and, for a request served at a server in both schemes, the same
    service time there, whatever else the schemes do."""
    runs = {}
    for scheme in ("direct", BothOfPair()):
        run = RackRun(scheme, **KW)
        for s in run.servers:
            s.log = []
        run.run()
        runs[run.scheme.name] = run
    d, b = runs["direct"], runs["both"]
    for cd, cb in zip(d.clients, b.clients):
        assert (cd.arrivals == cb.arrivals).all() and cd.picks == cb.picks
    common = 0
    for sd, sb in zip(d.servers, b.servers):
        ld = {rid: t for rid, _, t in sd.log}
        lb = {rid: t for rid, _, t in sb.log}
        both = set(ld) & set(lb)
        common += len(both)
        assert all(ld[r] == lb[r] for r in both)
        # the second copies are new work the direct run never drew
        assert len(lb) > len(ld)
    assert common == 3000                 # every request's first server is the same


@pytest.mark.parametrize("model_class", [DataplaneModel, None])
def test_switch_in_the_simulator_equals_the_model_run_directly(model_class):
    run = RackRun("direct", **dict(KW, requests=400, model_class=model_class, trace=10_000,
                                   check_checksums=True))
    res = run.run()
    sw = run.switch
    assert len(sw.trace) == 800 and res["timeouts"] == 0
    assert not res["hosts_dropped"]               # every frame reached a socket, checksums ok
    ref = DataplaneModel(sw.pipeline)
    writes, regs = cached_config_ops(run.config)
    for mem, addr, word in writes:
        ref.mem_write(mem, addr, word)
    for (t, port, frame, arrival), outs in zip(sw.trace, sw.trace_out):
        assert arrival == (t // 4) & 0xFFFF_FFFF
        exp = ref.process(frame, port, arrival=arrival)
        assert [(o.port, o.frame) for o in exp] == [(q, f) for _, q, f in outs]
        for t_out, q, f in outs:                   # the device's latency: beats + BASE_CYCLES
            assert t_out == t + 4 * pass_cycles(len(frame))
            assert verify_checksums(f) and parse_udp(f).ttl == 63
    assert ref.counters() == sw.counters()
    js = sw.trace_json()
    assert bytes.fromhex(js[0]["frame"]) == sw.trace[0][2] and js[0]["outputs"]


def test_pipeline_input_takes_one_beat_per_cycle():
    """Two frames reaching the switch at the same nanosecond: the second enters when the
    first's beats have gone in; both leave beats + the build's header-path latency + 5 cycles
    (input buffer 3, arbiter 1, egress queue 2; 45 with the 40-cycle header path) after they
    entered."""
    from netstor.api import load_schema
    base = load_schema()["latency_cycles"] + 5
    run = RackRun("direct", **dict(KW, requests=2, trace=10))
    c0, s0 = run.hosts["c0"], run.hosts["s0"]
    frame = udp_frame(run.switch.macs[0], c0.mac, c0.ip, s0.ip, 1, STORAGE_UDP_PORT,
                      storage_request(Op.GET, 1, 0) + bytes(100))
    run.sim.at(0, run.switch.receive, frame, 0)
    run.sim.at(0, run.switch.receive, frame, 0)
    run.sim.run()
    beats = (len(frame) + 63) // 64
    assert [t for t, *_ in run.switch.trace] == [0, 4 * beats]
    assert [o[0][0] for o in run.switch.trace_out] == [4 * (beats + base), 4 * (2 * beats + base)]


def test_timeouts_stay_in_the_samples():
    """Overload (one slow worker): requests without a reply in time count as the timeout."""
    r = RackRun("direct", **dict(KW, servers=1, workers=1, rate_rps=200_000,
                                 timeout_us=300)).run()
    assert r["timeouts"] > 1000
    assert r["n"] == r["measured"] == 2700
    assert r["p99_us"] == pytest.approx(300.0)
    assert r["throughput_rps"] < 50_000               # one worker: 40k/s at most


def test_switch_nodes_refuse_bad_ports():
    run = RackRun("direct", **dict(KW, requests=2))
    with pytest.raises(ValueError):
        SwitchNode(run.net, "x", {5: bytes(6)})


def test_trace_file_replays_on_a_fresh_model():
    tr = make_trace("direct", requests=30)
    m = DataplaneModel(default_pipeline(tr["n_ports"]))
    for mem, addr, word in tr["writes"]:
        m.mem_write(mem, addr, word)
    for name, value in tr["regs"]:
        m.reg_write(name, value)
    assert len(tr["frames"]) == 60
    for f in tr["frames"]:
        outs = m.process(bytes.fromhex(f["frame"]), f["port"], arrival=f["arrival"])
        assert [(o.port, o.frame.hex()) for o in outs] == \
            [(o["port"], o["frame"]) for o in f["outputs"]]
