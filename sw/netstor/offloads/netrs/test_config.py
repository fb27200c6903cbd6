"""A placement plan as real data-plane entries: the ``netrs:`` section expands into the
program's tables, and a k=4 fat tree of golden models (one per switch, 4 wire ports, each
configured through the netstor config format with :func:`plan_configs`) carries requests
from every client to its planned RSNode, which selects the replica the ranking reference
predicts; responses update the state that the next selection uses; DRS groups go to the
backup replica unselected."""
from __future__ import annotations

import ipaddress
import struct
from fractions import Fraction
from math import floor

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from netstor.api import Device
from netstor.config import ConfigError
from netstor.offloads.netrs import ranking as R
from netstor.model.dataplane import DataplaneModel
from netstor.offloads.netrs.config import (device_ports, expand_section, host_mac, plan_configs,
                                  ring_replica_groups, server_ids)
from netstor.offloads.netrs.header import M_DRS, M_MON, M_REQ, M_RESP, NETRS_UDP_PORT, RsRequest, f
from netstor.offloads.netrs.program import GROUPS
from netstor.offloads.netrs.placement import Plan, paper_instance, solve_with_drs, tor_based_plan
from netstor.offloads.netrs.rules import assign_rsnode_ids
from netstor.programs import default_pipeline
from netstor.proto import Header, Op

K = 4


@pytest.fixture(scope="module")
def schema4():
    from netstor.build import build_core
    return build_core(default_pipeline(K)).schema


class Fabric:
    """Every switch of the fat tree a golden model configured with its config."""

    def __init__(self, topo, configs, schema):
        self.topo = topo
        self.models = {}
        for sw, cfg in configs.items():
            m = DataplaneModel(default_pipeline(K))
            Device.open("model", schema=schema, model=m).apply(cfg)
            self.models[sw] = m

    def send(self, host, frame, arrival=0):
        """Deliver ``frame`` sent by ``host``: ``[(host reached, frame, [(switch, mf at
        ingress), ...])]``."""
        topo = self.topo
        tor = topo.hosts[host].tor
        todo = [(tor, device_ports(topo, tor).index(host), frame, [])]
        out = []
        for _ in range(64):
            if not todo:
                return out
            dev, port, fr, path = todo.pop()
            path = path + [(dev, _mf(fr))]
            for o in self.models[dev].process(fr, port, arrival=arrival):
                assert o.port < K, f"{dev}: to the host port {o.port}"
                nxt = device_ports(topo, dev)[o.port]
                if nxt in topo.hosts:
                    assert Ether(o.frame).dst == host_mac(topo, nxt)
                    out.append((nxt, o.frame, path))
                else:
                    todo.append((nxt, device_ports(topo, nxt).index(dev), o.frame, path))
        raise AssertionError("forwarding loop")


def _mf(frame):
    p = Ether(frame)
    if UDP not in p or p[UDP].dport != NETRS_UDP_PORT:
        return None
    return int.from_bytes(bytes(p[UDP].payload)[2:8], "big")


def request(topo, client, backup, rgid, avail=0xFF, req_id=1):
    c = topo.hosts[client]
    return bytes(Ether(src=host_mac(topo, client), dst="02:4e:52:ff:ff:ff")
                 / IP(src=c.ip, dst=topo.hosts[backup].ip, ttl=64)
                 / UDP(sport=NETRS_UDP_PORT, dport=NETRS_UDP_PORT)
                 / (RsRequest(rgid=rgid, avail=avail).pack()
                    + Header(op=Op.GET, key=7, req_id=req_id).pack()))


def response(topo, server, client, h, sid, q, t_ns):
    hdr = struct.pack("!H6sIIHHHI", h["rid"], M_RESP.to_bytes(6, "big"), h["rv"], 0, 8, sid,
                      q, t_ns)
    return bytes(Ether(src=host_mac(topo, server), dst="02:4e:52:ff:ff:ff")
                 / IP(src=topo.hosts[server].ip, dst=topo.hosts[client].ip, ttl=64)
                 / UDP(sport=NETRS_UDP_PORT, dport=NETRS_UDP_PORT) / (hdr + b"reply"))


def _hdr(frame):
    b = bytes(Ether(frame)[UDP].payload)
    rid, mf, rv = struct.unpack("!H6sI", b[:12])
    return {"rid": rid, "mf": int.from_bytes(mf, "big"), "rv": rv,
            "dst": Ether(frame)[IP].dst}


class Ref:
    """Independent re-statement of an RSNode's selection state (spec: the module doc of
    ``netstor.offloads.netrs.program``): per server q, os, t, r; per group a round-robin pointer
    that is also C3's tie-break start; the choice from ``netstor.offloads.netrs.ranking.rank``."""

    def __init__(self):
        self.state, self.ptr = {}, {}

    def pick(self, dev, rgid, sids):
        st = [self.state.setdefault((dev, s), [0, 0, 0, 0]) for s in sids]
        key = (dev, rgid & (GROUPS - 1))
        rr = self.ptr.get(key, 0)
        self.ptr[key] = (rr + 1) % len(sids)
        found, idx, _ = R.rank(R.C3, (1 << len(sids)) - 1, [R.Replica(*x) for x in st],
                               n=1, rr=rr)
        assert found
        self.state[(dev, sids[idx])][1] = min(255, st[idx][1] + 1)
        return idx

    def reply(self, dev, sid, q, t_ns, rt_ns, unit_us, weight):
        """A reply: service time ``t_ns``, response time ``rt_ns`` (a whole number of
        1.024 us ticks here), in the group's unit (UQ12.4, capped), EWMA weight ``weight``."""
        st = self.state[(dev, sid)]
        unit_ns = Fraction(unit_us) * 1000

        def sample(x):
            return min(0xFFFF, floor(16 * x))
        ew = lambda o, x: o + floor((x - o) * Fraction(weight))         # noqa: E731
        st[0], st[1] = ew(st[0], sample(q)), max(0, st[1] - 1)
        st[2], st[3] = ew(st[2], sample(t_ns / unit_ns)), ew(st[3], sample(rt_ns / unit_ns))


def _setup(schema, plan_kind, **settings):
    inst = paper_instance(K, seed=1)
    if plan_kind == "tor":
        plan = tor_based_plan(inst)
    else:
        plan = solve_with_drs(inst)[0].plan.copy()
    clients = {h for g in inst.groups.values() for h in g.hosts}
    rgroups = ring_replica_groups([h for h in inst.topo.hosts if h not in clients])
    configs = plan_configs(inst, plan, rgroups, **settings)
    return inst, plan, rgroups, Fabric(inst.topo, configs, schema)


@pytest.mark.parametrize("plan_kind", ["tor", "ilp"])
def test_every_client_reaches_its_rsnode_and_a_replica(schema4, plan_kind):
    inst, plan, rgroups, fab = _setup(schema4, plan_kind)
    topo = inst.topo
    ids = assign_rsnode_ids(topo)
    sid = server_ids({s for g in rgroups.values() for s in g})
    assert plan.assignment, "the plan places RSNodes"
    tiers = set()
    ref = Ref()
    for g, grp in sorted(inst.groups.items()):
        for client in grp.hosts:
            for rgid, members in sorted(rgroups.items()):
                backup = members[-1]
                ((host, fr, path),) = fab.send(client, request(topo, client, backup, rgid))
                h = _hdr(fr)
                if g in plan.drs:
                    assert host == backup and h["mf"] == f(M_DRS)
                    continue
                rsnode = topo.operators[plan.assignment[g]]
                tiers.add(rsnode.tier)
                # the request is a client request up to the RSNode, selected after it
                at = [d for d, mf in path if mf == M_REQ]
                assert path[len(at)][0] != rsnode.switch if len(at) < len(path) else True
                assert at[-1] == rsnode.switch, (g, path)
                assert all(mf == f(M_RESP) for _, mf in path[len(at):])
                assert h["mf"] == f(M_RESP) and h["rid"] == ids[rsnode.name]
                # no replies yet (t = 0: equal C3 scores): the reference's tie-break
                idx = ref.pick(rsnode.switch, rgid, [sid[m] for m in members])
                assert host == members[idx], (g, rgid)
                assert h["dst"] == topo.hosts[host].ip
    if plan_kind == "ilp":
        assert tiers & {0, 1}, "the ILP plan uses an RSNode above the ToRs"


@pytest.mark.parametrize("unit_us, weight", [("65.536", "1/8"), ("1.024", "1/2"),
                                              ("4194.304", "1/128")])
def test_responses_update_the_state_the_next_selection_uses(schema4, unit_us, weight):
    """ToR RSNodes (the response passes them on its way back): after a slow reply from slot
    0 (300 ms: beyond the 65.536 us unit's 268 ms, saturated) the reference state makes slot
    1 the C3 choice, and the data plane agrees; the same with the finest unit (everything
    but the quick service times saturates) and the coarsest with the lightest weight."""
    inst, plan, rgroups, fab = _setup(schema4, "tor", time_unit_us=float(unit_us),
                                      ewma=weight)
    topo = inst.topo
    sid = server_ids({s for g in rgroups.values() for s in g})
    g = next(g for g in sorted(inst.groups) if g in plan.assignment)
    client = inst.groups[g].hosts[0]
    rgid, members = sorted(rgroups.items())[0]
    dev = topo.operators[plan.assignment[g]].switch
    ref = Ref()
    picks = []
    for step in range(8):
        idx = ref.pick(dev, rgid, [sid[m] for m in members])
        ((host, fr, path),) = fab.send(client, request(topo, client, members[0], rgid,
                                                       req_id=step), arrival=step << 12)
        assert host == members[idx], (step, ref.state)
        picks.append(idx)
        # the server answers: slow for slot 0, quick for the others
        q, t = (3, 300_000_000) if host == members[0] else (0, 1000)
        h = _hdr(fr)
        now = (step << 12) + (40 << 8) + 17
        ((back, bfr, bpath),) = fab.send(host, response(topo, host, client, h, sid[host], q, t),
                                         arrival=now)
        assert back == client and _hdr(bfr)["mf"] == M_MON
        assert dev in [d for d, _ in bpath]
        ref.reply(dev, sid[host], q, t, 40 * 1024, unit_us, weight)
        # the state copies in the data plane hold what the reference holds
        for s_ in members:
            cell = fab.models[dev].mem_read("rs.st0", sid[s_])
            assert [cell & 0xFFFF, (cell >> 16) & 0xFF, (cell >> 24) & 0xFFFF, cell >> 40] \
                == ref.state[(dev, sid[s_])]
    # the slow server was avoided after its reply: not a plain rotation
    assert picks.count(0) < picks.count(1) + picks.count(2) - 1, picks
    # the samples learnt from, by saturation (bit 1: t, bit 2: r): the slow replies' service
    # times saturate in the 65.536 us and 1.024 us units; response times only in 1.024 us
    cells = [fab.models[dev].mem_read("rs.samples", k) for k in range(8)]
    slow = picks.count(0)
    want = {"65.536": {0: 8 - slow, 2: slow}, "1.024": {0: 8 - slow, 2: slow},
            "4194.304": {0: 8}}[unit_us]
    assert cells == [want.get(k, 0) for k in range(8)], cells


def test_drs_group_goes_to_the_backup_replica(schema4):
    inst, plan, rgroups, _ = _setup(schema4, "tor")
    g = sorted(plan.assignment)[0]
    plan = plan.copy()
    del plan.assignment[g]
    plan.drs.add(g)
    fab = Fabric(inst.topo, plan_configs(inst, plan, rgroups), schema4)
    client = inst.groups[g].hosts[0]
    rgid, members = sorted(rgroups.items())[1]
    ((host, fr, _),) = fab.send(client, request(inst.topo, client, members[2], rgid))
    assert host == members[2] and _hdr(fr)["mf"] == f(M_DRS) and _hdr(fr)["rid"] == 0xFFFF


def test_section_expands_to_table_entries():
    exp = expand_section({"marker": {"pod": 2, "rack": 3}, "rsnodes": [5],
                          "traffic_groups": [{"prefix": "10.0.0.0/24", "tg": 1, "rsnode": 5},
                                             {"prefix": "10.0.0.9/32", "rsnode": "drs"}],
                          "replica_groups": [{"id": 7, "servers": [1, 2, 3], "algo": "lor",
                                              "n": 4}]})
    assert exp["banks"] == {"rs.marker": {0: (2 << 16) | 3}}
    assert exp["tables"]["rs.local"]["entries"] == [{"key": 5, "action": "local"}]
    tg = exp["tables"]["rs.tgroups"]["entries"]
    assert tg[1]["params"] == {"rid": 0xFFFF, "tg": 0}
    (rg,) = exp["tables"]["rs.rgroups"]["entries"]
    assert rg["key"] == 7 and rg["params"]["mask"] == 0b111 and rg["params"]["algo"] == 1
    assert [rg["params"][f"s{k}"] for k in range(8)] == [1, 2, 3, 0, 0, 0, 0, 0]
    # defaults: n as given (below 128), 65.536 us (code 6), weight 1/8 (shift 3)
    assert (rg["params"]["n"], rg["params"]["unit"], rg["params"]["ewma"]) == (4, 6, 3)


@pytest.mark.parametrize("given, want", [
    ({"n": 500, "time_unit_us": 262.144, "ewma": "1/16"}, (0x9F, 8, 4)),
    ({"n": 127, "time_unit_us": "1.024", "ewma": 1}, (127, 0, 0)),
    ({"n": 31744, "time_unit_us": 4194.304, "ewma": 0.0078125}, (255, 12, 7)),
    ({"n": 0, "time_unit_us": 16.384, "ewma": "0.25"}, (0, 4, 2)),
])
def test_group_settings_expand_to_codes(given, want):
    """Settings to the codes the data plane holds: n = 500 -> 0x9F (496, the nearest);
    262.144 us = 1.024 << 8; 1/16 = 2^-4; the extremes of every range."""
    exp = expand_section({"replica_groups": [{"id": 1, "servers": [4], **given}]})
    (rg,) = exp["tables"]["rs.rgroups"]["entries"]
    assert (rg["params"]["n"], rg["params"]["unit"], rg["params"]["ewma"]) == want


@pytest.mark.parametrize("sec, msg", [
    ({"bogus": 1}, "unknown field"),
    ({"rsnodes": ["drs"]}, "not an RSNode"),
    ({"replica_groups": [{"id": 1, "servers": list(range(1, 10))}]}, "1..8"),
    ({"replica_groups": [{"id": 1, "servers": [1], "algo": "best"}]}, "not one of"),
    ({"servers": [{"id": 1024, "ip": "1.2.3.4", "mac": 1, "smac": 2, "port": 1}]}, "0..1023"),
    ({"replica_groups": [{"id": 1, "servers": [1, 1024]}]}, r"servers\[1\]: 1024 .*0\.\.1023"),
    ({"traffic_groups": [{"prefix": "10.0.0.1/33", "rsnode": 1}]}, "prefix"),
    ({"traffic_groups": [{"prefix": "10.0.0.0/24", "rsnode": 1, "tg": 16}]}, "0..15"),
    ({"replica_groups": [{"id": 1, "servers": [1], "n": 31745}]},
     r"replica_groups\[0\]\.n: 31745 is out of range 0\.\.31744"),
    ({"replica_groups": [{"id": 1, "servers": [1], "n": -1}]}, r"\.n: -1 is out of range"),
    ({"replica_groups": [{"id": 1, "servers": [1], "time_unit_us": 60}]},
     r"replica_groups\[0\]\.time_unit_us: 60 us is not a time unit .*1\.024, 2\.048"),
    ({"replica_groups": [{"id": 1, "servers": [1], "time_unit_us": 8388.608}]},
     r"time_unit_us: 8388\.608 us is not a time unit .*4194\.3"),
    ({"replica_groups": [{"id": 1, "servers": [1], "time_unit_us": "fast"}]},
     r"time_unit_us: 'fast' is not a number"),
    ({"replica_groups": [{"id": 1, "servers": [1], "ewma": 0.3}]},
     r"replica_groups\[0\]\.ewma: 0\.3 is not an EWMA weight .*1/128"),
    ({"replica_groups": [{"id": 1, "servers": [1], "ewma": "1/256"}]}, r"\.ewma: '1/256'"),
    ({"replica_groups": [{"id": 1, "servers": [1], "ewma": True}]}, r"\.ewma: True"),
    ({"replica_groups": [{"id": 1, "servers": [1], "weight": 0.5}]}, r"unknown field.*weight"),
    ({"replica_groups": [{"id": 1, "servers": [1, 2]},
                         {"id": 2, "servers": [2, 3], "time_unit_us": 16.384}]},
     r"replica_groups\[1\]: server 2 is also in group 1 \(netrs.replica_groups\[0\]\) with "
     r"time_unit_us 65\.536 and ewma 1/8, here 16\.384 and 1/8"),
    ({"replica_groups": [{"id": 1, "servers": [5], "ewma": "1/4"},
                         {"id": 2, "servers": [6, 5]}]},
     r"replica_groups\[1\]: server 5 is also in group 1 .* ewma 1/4, here 65\.536 and 1/8"),
])
def test_section_errors_name_the_place(sec, msg):
    with pytest.raises(ConfigError, match=msg):
        expand_section(sec)


def test_section_applies_through_the_config_and_bad_values_write_nothing():
    d = Device.open("model", model=DataplaneModel(default_pipeline()))
    d.apply({"netrs": {"marker": 0x10002, "rsnodes": [3],
                       "servers": [{"id": 1, "ip": "10.77.1.10", "mac": "02:00:00:00:01:0a",
                                    "smac": "02:00:00:00:ff:01", "port": 1}]}})
    assert d.bank("rs.marker").read(0) == 0x10002
    assert [e["key"] for e in d.table("rs.local").dump()] == [[3]]
    with pytest.raises(ConfigError, match="netrs"):
        d.apply({"netrs": {"rsnodes": [4], "servers": [{"id": 2, "ip": "10.77.1.11",
                                                        "mac": 1, "smac": 2, "port": 17}]}})
    assert [e["key"] for e in d.table("rs.local").dump()] == [[3]]


def test_1023_servers_and_groups_fit_one_device(schema4):
    """Server ids are 10 bits (header.SID_BITS): a plan numbers up to 1,023 servers (1..1023;
    0 stays an unconfigured agent's id), not 1,024; one device takes a section with all of
    them and 1,023 ring groups (rs.servers and rs.rgroups: 1,024 entries, 4 hashed ways),
    and reads back the entries it was given (the driver's slots, hashed on the 10-bit id)."""
    hosts = [f"s{i:04d}" for i in range(1023)]
    ids = server_ids(hosts)
    assert sorted(ids.values()) == list(range(1, 1024))
    with pytest.raises(ValueError, match="1024 servers: NetRS server ids are below 1024"):
        server_ids(hosts + ["s9999"])
    ring = ring_replica_groups(hosts)
    assert len(ring) == 1023
    sec = {"servers": [{"id": ids[h], "ip": f"10.{ids[h] >> 8}.{ids[h] & 0xFF}.1",
                        "mac": 0x020000000000 + ids[h], "smac": 2, "port": 1} for h in hosts],
           "replica_groups": [{"id": g, "servers": [ids[h] for h in m]}
                              for g, m in ring.items()]}
    m = DataplaneModel(default_pipeline(K))
    dev = Device.open("model", schema=schema4, model=m)
    dev.apply({"netrs": sec})
    got = {e["key"][0]: e for e in dev.table("rs.servers").dump()}
    assert sorted(got) == list(range(1, 1024))
    assert got[1000]["params"]["ip"] == int(ipaddress.IPv4Address("10.3.232.1"))
    groups = {e["key"][0]: e["params"] for e in dev.table("rs.rgroups").dump()}
    assert len(groups) == 1023
    assert [groups[1021][f"s{k}"] for k in range(3)] == [1022, 1023, 1]
