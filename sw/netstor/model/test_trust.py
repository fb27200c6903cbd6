"""The trust guard (netstor.elements.trust) on the golden model and the compiled model: the
unconfigured default data plane lets no packet write state (the issue's reproducer: two
packets to the primitives' port wrote ``prim.cells``), a configured one only packets from the
trusted ports and sources; the rest are dropped and counted in ``<prog>.trust.miss``. The
``programs:`` configuration section and its validation."""
import struct

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from netstor.api import Device
from netstor.config import ConfigError
from netstor.model.compiled import CompiledModel
from netstor.model.dataplane import DataplaneModel
from netstor.programs import default_pipeline
from netstor.programs.primitives import OP_CAS, OP_FORWARD, OP_MAX, PRIM_UDP_PORT

MODELS = [DataplaneModel, CompiledModel]


@pytest.fixture(scope="module")
def schema():
    from netstor.build import build_core
    return build_core().schema


def open_model(cls, schema, config=None):
    model = cls(default_pipeline())
    dev = Device.open("model", schema=schema, model=model)
    if config is not None:
        dev.apply(config)
    return model, dev


def prim(op, tag=0, value=0, expect=0, src="10.0.0.9"):
    hdr = struct.pack("!BBHIIIIBBH", op, 0, tag, 0, value, expect, 0, 0, 0, 0)
    return bytes(Ether(src="02:00:00:00:00:09", dst="02:00:00:00:ff:01")
                 / IP(src=src, dst="10.0.0.1") / UDP(sport=1000, dport=PRIM_UDP_PORT)
                 / Raw(hdr))


def state(dev, banks=("prim.cells", "prim.flows")):
    return {b: dev.bank(b).read_range() for b in banks}


@pytest.mark.parametrize("cls", MODELS)
def test_unconfigured_primitives_write_no_state(cls, schema):
    """Reproducer: on the unconfigured default data plane two packets to the primitives'
    port set ``prim.cells[1]`` to 0xBAD and then raised it by MAX. Now both are dropped,
    counted, and no bank of the program changes."""
    model, dev = open_model(cls, schema)
    before = state(dev)
    for port in (0, 1, 2, 3):                      # every wire port and host TX queue
        assert model.process(prim(OP_CAS, tag=1, value=0xBAD, expect=0), port) == []
        assert model.process(prim(OP_MAX, tag=1, value=0xFFFF), port) == []
    assert state(dev) == before
    assert dev.counters("prim.trust.")["prim.trust.miss"] == 8
    assert dev.counters("prim.trust.")["prim.trust.hit"] == 0
    assert model.counter("tm.drop") == 8


@pytest.mark.parametrize("cls", MODELS)
def test_trusted_port_writes_untrusted_port_is_dropped(cls, schema):
    cfg = {"programs": {"prim": {"trusted_ports": [1]}},
           "tables": {"prim.ops": {"entries": [
               {"key": OP_CAS, "action": "forward", "params": {"port": 0}}]}}}
    model, dev = open_model(cls, schema, cfg)
    before = state(dev)
    assert model.process(prim(OP_CAS, tag=1, value=0xBAD), 0) == []      # port 0: untrusted
    assert model.process(prim(OP_CAS, tag=1, value=0xBAD), 3) == []      # host1: untrusted
    assert state(dev) == before and dev.counters("prim.trust.")["prim.trust.miss"] == 2
    (out,) = model.process(prim(OP_CAS, tag=1, value=0xBAD), 1)          # trusted
    assert out.port == 0
    assert dev.bank("prim.cells").read(1) == 0xBAD
    assert sum(dev.bank("prim.flows").read_range()) == 1
    assert dev.counters("prim.trust.")["prim.trust.hit"] == 1


@pytest.mark.parametrize("cls", MODELS)
def test_trusted_sources_and_host_ports(cls, schema):
    cfg = {"programs": {"prim": {"trusted_ports": [0, "host1"],
                                 "trusted_sources": ["10.1.0.0/16", "10.9.9.9/32"]}},
           "tables": {"prim.ops": {"entries": [
               {"key": OP_MAX, "action": "forward", "params": {"port": 1}}]}}}
    model, dev = open_model(cls, schema, cfg)
    assert len(dev.table("prim.trust").dump()) == 4 + 1          # 2 ports x 2 prefixes + requests
    cases = [(0, "10.1.2.3", True), (0, "10.9.9.9", True), (0, "10.9.9.8", False),
             (0, "10.2.0.1", False), (1, "10.1.2.3", False), (3, "10.1.2.3", True),
             (2, "10.1.2.3", False)]
    cell = 0
    for port, src, ok in cases:
        value = cell + 1
        out = model.process(prim(OP_MAX, tag=cell, value=value, src=src), port)
        assert (len(out) == 1) == ok, (port, src)
        assert dev.bank("prim.cells").read(cell) == (value if ok else 0), (port, src)
        cell += 1
    assert dev.counters("prim.trust.")["prim.trust.miss"] == 4


@pytest.mark.parametrize("cls", MODELS)
def test_recirculated_pass_is_trusted(cls, schema):
    """A trusted packet's recirculated pass (ingress = the recirculation input) runs."""
    from netstor.programs.primitives import OP_RECIRC
    cfg = {"programs": {"prim": {"trusted_ports": [0]}},
           "tables": {"prim.ops": {"entries": [
               {"key": OP_RECIRC, "action": "recirculate", "params": {"port": 1}}]}}}
    model, dev = open_model(cls, schema, cfg)
    (out,) = model.process(prim(OP_RECIRC), 0)
    assert out.port == 1 and out.frame[42 + 20] == 1                    # prim.hops = 1
    assert model.process(prim(OP_RECIRC), 1) == []
    assert dev.counters("prim.trust.")["prim.trust.miss"] == 1


def test_other_traffic_still_forwarded_unconfigured(schema):
    """The unconfigured data plane forwards: a plain UDP frame from wire port 0 goes to the
    host, as before; the trust tables are not even looked up."""
    model, dev = open_model(DataplaneModel, schema)
    f = bytes(Ether() / IP(src="10.0.0.9", dst="10.0.0.1") / UDP(sport=1, dport=2) / Raw(b"x"))
    (out,) = model.process(f, 0)
    assert out.port == 2
    assert all(v == 0 for k, v in dev.counters().items() if ".trust." in k)


def test_reconfigure_replaces_entries(schema):
    model, dev = open_model(DataplaneModel, schema,
                            {"programs": {"prim": {"trusted_ports": [0, 1]}}})
    assert len(dev.table("prim.trust").dump()) == 3
    dev.apply({"programs": {"prim": {"trusted_ports": [], "request_ports": [1]}}})
    assert [e["value"] for e in dev.table("prim.trust").dump()] == [[0, 1, 0]]
    assert model.process(prim(OP_CAS, tag=0, value=5), 1) == []         # prim: all reports
    assert dev.bank("prim.cells").read(0) == 0


@pytest.mark.parametrize("spec, msg", [
    ({"trusted_ports": [2]}, "programs.prim: trusted_ports[0]: 2 is not a port"),
    ({"trusted_ports": ["host2"]}, "is not a port"),
    ({"trusted_ports": [True]}, "is not a port"),
    ({"trusted_ports": 1}, "expected a list of ports or 'any'"),
    ({"trusted_ports": [0, 0]}, "listed twice"),
    ({}, "missing trusted_ports"),
    ({"trusted_ports": [0], "trusted_port": [1]}, "unknown field(s) ['trusted_port']"),
    ({"trusted_ports": [0], "trusted_sources": ["10.0.0.1/8"]}, "host bits set"),
    ({"trusted_ports": [0], "trusted_sources": ["10.0.0.0/33"]}, "trusted_sources[0]"),
    ({"trusted_ports": [0], "trusted_sources": []}, "non-empty list"),
    ({"trusted_ports": [0], "request_ports": "all"}, "request_ports"),
    ({"trusted_ports": [0, 1, "host0", "host1"],
      "trusted_sources": ["10.0.0.0/8", "11.0.0.0/8"]}, "do not fit prim.trust's 8"),
])
def test_programs_section_validation(schema, spec, msg):
    model, dev = open_model(DataplaneModel, schema)
    with pytest.raises(ConfigError) as e:
        dev.apply({"programs": {"prim": spec}})
    assert msg in str(e.value)
    assert dev.table("prim.trust").dump() == []                          # nothing written


def test_programs_section_unknown_program(schema):
    model, dev = open_model(DataplaneModel, schema)
    with pytest.raises(ConfigError, match=r"programs.l3: program 'l3' has no trust guard; "
                                          r"programs with one: \['nc', 'nl', 'prim', 'rs', 'xi'\]"):
        dev.apply({"programs": {"l3": {"trusted_ports": [0]}}})


def test_guarded_pipeline_requires_a_guard():
    from netstor.elements import RegisterOp
    from netstor.lang import Pipeline, Program
    p = Program("t")
    p.add(RegisterOp.add("n", p.bank("b", width=8, depth=2), 0))
    Pipeline([p])                                    # test pipelines may go without
    with pytest.raises(ValueError, match="program t has register banks but no guard"):
        Pipeline([p], guarded=True)


def test_every_bank_writer_is_gated():
    """Every element of the default programs that updates a bank runs only when trusted,
    and the guard's table runs before it and its drop after every other element."""
    pl = default_pipeline()
    for p in pl.programs:
        if not p.banks:
            continue
        assert p.elements[0].qualname == f"{p.name}.trust"
        assert p.elements[-1].qualname == f"{p.name}.untrusted"
        for e in p.elements:
            if e.banks():
                assert f"{p.name}.m.trusted" in {r.name for r in e.when.refs()
                                                 if hasattr(r, "name")}, e.qualname
    banks = {b.qualname for e in pl.elements for b in e.banks()}
    # 29 written by packets (NetLR's 9 among them) + rs.marker (read only)
    assert len(banks) == 30
