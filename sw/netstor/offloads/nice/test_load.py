"""``netstor-load --scheme nice`` end to end in the real-socket test bed (root): three
``netstor-server`` storage nodes (partition 0 on nodes 0, 1, 2) behind the model switch with
NICE's program (vrings, divisions over the client hosts, copy lists), the metadata service's
view pushed to them, and the load generator's CLI in a client host's namespace sending
open-loop gets and puts to the vnodes (:func:`.demo.run_load`).

Checked against what the run itself recorded (``--nice-ops``: every finished request) and
what the nodes hold after it, independently of the scheme's own accounting:

* counts add up: every request answered (no timeouts, no errors), GETs + PUTs = sent, one
  listed request per send; the switch saw one unicast-vring packet per GET and, per PUT,
  its fragments plus the primary's TS on the multicast vring;
* every acked PUT has its own timestamp per key; every GET's value is exactly the value of
  the acked PUT with the timestamp it reports (values are unique: each put's first 4 bytes
  are its NICE req), never older than a PUT acknowledged before the GET was sent, and
  NOT_FOUND only before any PUT of its key was acknowledged;
* after the run every node of the partition holds, per key, the newest acked PUT (timestamp
  and value byte for byte).
"""
import os
import tempfile

import pytest

from netstor.offloads.nice import demo
from netstor.offloads.nice.header import FRAG_DATA, n_frags
from netstor.offloads.nice.schemes import load_key
from netstor.testbed.rack import Rack

needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="the test bed needs root (network namespaces)")

CASES = {  # size, keys, write ratio, rate (/s)
    "64B": (64, 12, 0.4, 150.0),
    "1440B-2frags": (1440, 12, 0.4, 150.0),
    # two keys, mostly puts: puts of one key overlap (each in a req slot of its own)
    "hot-keys": (64, 2, 0.7, 250.0),
}


@needs_root
@pytest.mark.parametrize("case", list(CASES))
def test_load_scheme_through_the_model_switch(case):
    size, keys, write_ratio, rate = CASES[case]
    duration = 2.0
    with tempfile.TemporaryDirectory(prefix="netstor-nice-load-") as tmp, \
            Rack(2, 3, workdir=tmp) as rack:
        out = demo.run_load(rack, tmp, rate=rate, duration=duration, write_ratio=write_ratio,
                            value_size=size, keys=keys, zipf=0.99, seed=3)
    r, sw, stores = out["load"], out["switch"], out["stores"]
    ops = r["nice"]["ops"]
    gets = [o for o in ops if o["op"] == "GET"]
    puts = [o for o in ops if o["op"] == "PUT"]
    print({k: r[k] for k in ("sent", "replies", "timeouts", "errors", "rps", "latency_us")},
          r["nice"]["by_node"], {k: v for k, v in r["nice"].items()
                                 if k not in ("ops", "by_node")}, sw)
    # counts
    assert r["sent"] > 0.6 * rate * duration, r["sent"]
    assert r["timeouts"] == 0 and r["errors"] == {} and r["skipped"] == 0, r
    assert r["replies"] == r["sent"] == len(ops) == len(gets) + len(puts)
    assert r["by_op"]["GET"]["sent"] == len(gets) and r["by_op"]["PUT"]["sent"] == len(puts)
    assert abs(len(puts) - write_ratio * len(ops)) < 0.15 * len(ops)
    assert r["statuses"].get("OK", 0) + r["statuses"].get("NOT_FOUND", 0) == r["sent"]
    assert r["latency_us"]["p50"] is not None
    assert r["nice"]["aborts"] == r["nice"]["late"] == r["nice"]["foreign"] == 0
    frags = n_frags(size)
    assert (size > FRAG_DATA) == (frags == 2)
    assert sw["nice.unicast.hit"] == len(gets)
    # per put: its fragments and the primary's TS (NACKed fragments go unicast, not here)
    assert sw["nice.multicast.hit"] == len(puts) * (frags + 1)
    assert sw["nice.unicast.miss"] == sw["nice.multicast.miss"] == 0
    assert r["nice"]["resent"] == 0 or r["nice"]["nacks"] > 0
    # every reply matches what was stored
    acked = {}                             # (key, ts) -> the put
    by_key = {}
    for o in puts:
        assert o["status"] == "OK" and o["ts"] > 0, o
        assert (o["key"], o["ts"]) not in acked, ("two puts with one version", o)
        acked[(o["key"], o["ts"])] = o
        by_key.setdefault(o["key"], []).append(o)
    values = {}
    for o in gets:
        if o["status"] == "OK":
            values.setdefault((o["key"], o["ts"]), set()).add(o["value"])
    for o in gets:
        before = [p["ts"] for p in by_key.get(o["key"], []) if p["done_ns"] < o["sent_ns"]]
        if o["status"] == "NOT_FOUND":
            assert o["ts"] == 0 and not before, o
            continue
        put = acked.get((o["key"], o["ts"]))
        assert put is not None, ("a get returned a version no acked put wrote", o)
        v = bytes.fromhex(o["value"])
        assert len(v) == size and v[:4] == put["req"].to_bytes(4, "big"), (o, put)
        assert o["ts"] >= max(before, default=0), ("stale get", o)
    # one version, one value; and every value is the run's value with its put's stamp
    assert all(len(vs) == 1 for vs in values.values())
    tails = {bytes.fromhex(next(iter(vs)))[4:] for vs in values.values()}
    assert len(tails) <= 1
    # the nodes' stores hold the newest acked put of every key
    newest = {key: max(ps, key=lambda p: p["ts"]) for key, ps in by_key.items()}
    for node in (0, 1, 2):
        st = stores[node]
        assert set(st) == {load_key(k) for k in newest}, node
        for key, p in newest.items():
            ts, v = st[load_key(key)]
            assert ts == p["ts"] and v[:4] == p["req"].to_bytes(4, "big") and len(v) == size
            if tails:
                assert v[4:] == next(iter(tails))
    assert stores[0] == stores[1] == stores[2]
    # the client host's division: its gets went to one replica of the partition
    assert len(r["nice"]["by_node"]) == 1 and sum(r["nice"]["by_node"].values()) == len(gets)
    if case == "hot-keys":                  # overlapping puts of one key took other slots
        assert max(p["req"] >> 24 for p in puts) >= 1


@pytest.mark.parametrize("argv, needle", [
    (["--target", "10.10.0.7"], "not aligned to /16"),                  # not a ring base
    (["--target", "10.11.0.0"], "the same"),                            # = multicast ring
    (["--target", "10.10.0.0", "--nice-multicast", "10.11.0.x"], "10.11.0.x"),
    (["--target", "10.10.0.0,10.12.0.0"], "one --target"),
    (["--target", "10.10.0.0", "--nice-prefix", "40"], "40"),
])
def test_bad_rings_are_clear_errors(argv, needle, capsys):
    """A target that is not a ring base, rings that coincide, a bad multicast base or prefix:
    netstor-load exits 2 naming the problem (before any datagram reaches a node)."""
    from netstor.agent import load
    with pytest.raises(SystemExit) as e:
        load.main(["--scheme", "nice", "--requests", "1", "--timeout", "0.2", "--quiet",
                   *argv])
    assert e.value.code == 2
    assert needle in capsys.readouterr().err
