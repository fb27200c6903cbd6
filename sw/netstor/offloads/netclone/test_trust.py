"""Issue 11's NetClone reproducers on the golden model and the compiled model: forged replies
from a port the configuration does not trust are dropped and counted and change no state;
the same replies from a trusted port still act (so the attack is real, and the guard is what
stops it)."""
import pytest

from netstor.api import Device
from netstor.model.compiled import CompiledModel
from netstor.model.dataplane import DataplaneModel
from netstor.programs import default_pipeline
from netstor.offloads.netclone.program import CLONE_ORIGINAL, CLONE_COPY
from netstor.offloads.netclone.test_model import CLIENT, config, parse, reply, request

CLIENT_PORT, SERVER_PORT = 0, 1


@pytest.fixture(scope="module")
def schema():
    from netstor.build import build_core
    return build_core().schema


def switch(cls, schema, trusted):
    model = cls(default_pipeline())
    dev = Device.open("model", schema=schema, model=model)
    cfg = config()
    cfg["programs"] = {"nc": {"trusted_ports": trusted}}
    dev.apply(cfg)
    return model, dev


def cloned_request(model):
    out = model.process(request(10), CLIENT_PORT)
    orig, copy = sorted((parse(o.frame) for o in out), key=lambda h: h["clone"])
    assert (orig["clone"], copy["clone"]) == (CLONE_ORIGINAL, CLONE_COPY)
    return orig, copy


def nc_state(dev):
    return {b: dev.bank(b).read_range() for b in ("nc.filter", "nc.filtered", "nc.load1",
                                                  "nc.load2", "nc.seq")}


def forged(h, server_id, load=0):
    """A reply the attacker (on the client side) makes up for request header ``h``: seq and
    fidx are predictable (a counter and its CRC)."""
    return reply(h, server_id, load)


@pytest.mark.parametrize("cls", [DataplaneModel, CompiledModel])
def test_forged_replies_cannot_poison_the_filter(cls, schema):
    """Reproducer: two forged replies, each just before a genuine one, made the filter drop
    both genuine replies of a cloned request (the client got none). From the untrusted
    client port they are dropped and counted; the client gets the faster genuine reply."""
    model, dev = switch(cls, schema, [SERVER_PORT])
    orig, copy = cloned_request(model)
    before = nc_state(dev)
    assert model.process(forged(orig, 1), CLIENT_PORT) == []
    assert nc_state(dev) == before
    first = model.process(reply(copy, 2, 0), SERVER_PORT)           # genuine, faster
    assert [o.port for o in first] == [CLIENT_PORT]
    assert parse(first[0].frame)["dst"] == CLIENT[0]
    assert model.process(forged(copy, 2), CLIENT_PORT) == []
    assert model.process(reply(orig, 1, 0), SERVER_PORT) == []       # the slower: filtered
    assert dev.bank("nc.filtered").read(0) == 1
    assert dev.counters("nc.trust.")["nc.trust.miss"] == 2


@pytest.mark.parametrize("cls", [DataplaneModel, CompiledModel])
def test_the_filter_attack_works_from_a_trusted_port(cls, schema):
    """The same four packets with the client port trusted too: both genuine replies are
    dropped (the attack the guard prevents)."""
    model, dev = switch(cls, schema, "any")
    orig, copy = cloned_request(model)
    delivered = []
    for frame, port in ((forged(orig, 1), CLIENT_PORT), (reply(copy, 2, 0), SERVER_PORT),
                        (forged(copy, 2), CLIENT_PORT), (reply(orig, 1, 0), SERVER_PORT)):
        delivered.append(len(model.process(frame, port)))
    assert delivered == [1, 0, 1, 0]             # only the forged ones reach the client
    assert dev.counters("nc.trust.")["nc.trust.miss"] == 0


@pytest.mark.parametrize("cls", [DataplaneModel, CompiledModel])
def test_a_forged_load_report_is_dropped(cls, schema):
    """Reproducer: one forged reply set ``nc.load1[1]`` (and load2) to 65535 and the
    group's requests stopped going to server 1. From the untrusted port: dropped, counted,
    the loads stay 0 and cloning to server 1 goes on; from the trusted port the same reply
    sets the load (and the group then uses server 2 only)."""
    model, dev = switch(cls, schema, [SERVER_PORT])
    orig, _ = cloned_request(model)
    bomb = forged({**orig, "clone": 0}, 1, load=65535)
    assert model.process(bomb, CLIENT_PORT) == []
    assert dev.bank("nc.load1").read(1) == dev.bank("nc.load2").read(1) == 0
    assert dev.counters("nc.trust.")["nc.trust.miss"] == 1
    o2, c2 = cloned_request(model)                           # both still idle: cloned
    assert (o2["server_id"], c2["server_id"]) == (1, 2)
    assert len(model.process(bomb, SERVER_PORT)) == 1        # trusted: acts
    assert dev.bank("nc.load1").read(1) == dev.bank("nc.load2").read(1) == 65535
    out = model.process(request(10), CLIENT_PORT)            # policy 1: least loaded
    assert [parse(o.frame)["server_id"] for o in out] == [2]


@pytest.mark.parametrize("cls", [DataplaneModel, CompiledModel])
def test_unconfigured_netclone_writes_no_state(cls, schema):
    """Without a ``programs.nc`` section nothing of NetClone is trusted: requests and
    replies are dropped and counted, no bank changes."""
    model = cls(default_pipeline())
    dev = Device.open("model", schema=schema, model=model)
    cfg = config()
    del cfg["programs"]
    dev.apply(cfg)
    before = nc_state(dev)
    h = {"group": 10, "seq": 1, "fidx": 5, "clone": 1}
    assert model.process(request(10), CLIENT_PORT) == []
    for port in (0, 1, 2, 3):
        assert model.process(reply(h, 1, 65535), port) == []
    assert nc_state(dev) == before
    assert dev.counters("nc.trust.")["nc.trust.miss"] == 5
