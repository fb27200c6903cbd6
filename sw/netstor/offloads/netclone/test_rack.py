"""NetClone end to end in a small rack through the model switch (root): requests to idle
servers get cloned, the slower reply is filtered in the switch (bank ``nc.filtered``, read
through the switch's control socket), every request is answered exactly once at the client;
and the configuration builder on its own (no root)."""
import json
import os
import tempfile
from pathlib import Path

import pytest

from netstor.offloads.netclone.config import VIP, netclone_config, ordered_pairs
from netstor.testbed.rack import Rack

needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="the test bed needs root (network namespaces)")


def test_config_applies_and_names_every_pair():
    from netstor.testbed.switch import config_ops
    rack = Rack(1, 3)                       # not brought up: hosts only
    s = netclone_config(rack.hosts, rack.servers)
    assert s.pairs == ordered_pairs(3) and s.groups == list(range(6))
    assert s.server_ids == [1, 2, 3] and s.groups_arg == "0,1,2,3,4,5"
    t = s.config["tables"]
    assert {e["prefix"] for e in t["l3.routes"]["entries"]} >= {f"{VIP}/32", "10.77.0.10/32"}
    g = {e["key"]: (e["params"]["s1"], e["params"]["s2"]) for e in t["nc.groups"]["entries"]}
    assert g[0] == (1, 2) and g[5] == (3, 2)
    assert {e["key"]: e["params"]["ip"] for e in t["nc.servers"]["entries"]} == \
        {1: "10.77.1.10", 2: "10.77.1.11", 3: "10.77.1.12"}
    writes, _ = config_ops(s.config)        # the config loader accepts it
    assert writes
    with pytest.raises(ValueError):
        netclone_config(rack.hosts, rack.servers[:1])


@needs_root
def test_netclone_through_the_model_switch():
    from netstor.api import Device
    from netstor.offloads.netclone.compare import run_clients, start_servers
    from netstor.testbed.experiment import start_switch
    with tempfile.TemporaryDirectory(prefix="netstor-nc-test-") as tmp, \
            Rack(1, 2, workdir=tmp) as rack:
        tmp = Path(tmp)
        setup = netclone_config(rack.hosts, rack.servers)
        ctl = tmp / "switch.sock"
        stats = tmp / "switch.json"
        start_switch(rack, setup.config, tmp, stats_json=stats, control=ctl)
        servers = start_servers(rack, setup, tmp, "none", workers=1)
        # idle servers (no service delay, 100 req/s): nearly every request is cloned
        res = run_clients(rack, setup, "netclone", tmp, rate=100, duration=2.0)["c0"]
        dev = Device.open(f"unix:{ctl}")
        try:
            filtered = dev.bank("nc.filtered").read(0)
            seq = dev.bank("nc.seq").read(0)
            groups_hit = dev.counters("nc.groups")["nc.groups.hit"]
        finally:
            dev.close()
        for p in servers:
            p.stop()
        rack.stop_switch()
        st = json.loads(stats.read_text())
    sent = res["sent"]
    assert sent > 100 and res["replies"] == sent and res["timeouts"] == 0, res
    assert res["statuses"] == {"NOT_FOUND": sent}
    assert seq == groups_hit == sent                # one sequence number per request
    cloned = res["netclone"]["cloned_replies"]
    assert cloned > 0.8 * sent, res["netclone"]
    # every clone went out to the servers; the slower reply of a pair stayed in the switch
    p0, p1 = st["ports"]["0"], st["ports"]["1"]
    clones = p1["tx_frames"] - p0["rx_frames"]
    assert p0["rx_frames"] == sent and clones >= cloned
    assert p1["rx_frames"] - p0["tx_frames"] == filtered
    # exactly once at the client: every reply that reached it answered a different request
    assert p0["tx_frames"] == sent and res["engine"]["duplicates"] == 0
    assert res["engine"]["unmatched"] == 0
    # idle servers answer both copies, so nearly every clone pair is filtered (a copy may be
    # dropped by its server when busy, then the original passes alone)
    assert filtered > 0.8 * clones
    assert set(res["by_server"]) == {"1", "2"}
