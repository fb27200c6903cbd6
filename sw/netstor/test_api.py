"""The host API and configuration files on the golden model (the same code reaches the RTL in
sim/cocotb_core.py::test_host_api and a card through the mapped-file transport)."""
import random

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from netstor.api import Device, TableFullError, parse_uint, load_schema
from netstor.config import ConfigError, load_config, register_section
from netstor.driver.schema_view import SchemaPipeline
from netstor.driver.tables import TableWriter
from netstor.model.dataplane import DataplaneModel
from netstor.programs import default_pipeline


@pytest.fixture(scope="module")
def schema():
    from netstor.build import build_core
    return build_core().schema


@pytest.fixture
def model():
    return DataplaneModel(default_pipeline())


@pytest.fixture
def dev(schema, model):
    return Device.open("model", schema=schema, model=model)


def frame(dst, sport=1000, dport=2000, src="10.0.0.1"):
    return bytes(Ether(src="02:00:00:00:00:aa", dst="02:00:00:00:00:bb")
                 / IP(src=src, dst=dst, ttl=64) / UDP(sport=sport, dport=dport) / Raw(bytes(26)))


def test_schema_view_encodes_like_the_program_descriptions(schema):
    """TableWriter driven by schema.json alone writes the same words as TableWriter driven by
    the Python program objects (random operations on every table kind)."""
    rng = random.Random(7)
    a, b = TableWriter(default_pipeline()), TableWriter(SchemaPipeline(schema))
    for i in range(300):
        kind = rng.randrange(5)
        try:
            if kind == 0:
                args = ("l3.routes", rng.getrandbits(8) << 24, 8, "route",
                        {"port": rng.randrange(4), "dmac": rng.getrandbits(48), "smac": 1})
                wa, wb = a.lpm_add(*args), b.lpm_add(*args)
            elif kind == 1:
                args = ("prim.ops", [rng.randrange(256)], "forward", {"port": rng.randrange(16)})
                wa, wb = a.exact_add(*args), b.exact_add(*args)
            elif kind == 2:
                args = ("prim.acl", [rng.getrandbits(32), rng.getrandbits(16)],
                        [rng.getrandbits(32), 0xFFFF], "deny", None, rng.randrange(16))
                wa, wb = a.ternary_add(*args), b.ternary_add(*args)
            elif kind == 3:
                args = (rng.randrange(1, 16), [(p, rng.getrandbits(16)) for p in range(4)
                                               if rng.random() < 0.5])
                wa, wb = a.mcast_set(*args), b.mcast_set(*args)
            else:
                args = ("prim.copy_tag", "tag_copy", {"tag": rng.getrandbits(16)})
                wa, wb = a.set_default(*args), b.set_default(*args)
        except TableFullError:
            with pytest.raises(TableFullError):
                b.exact_add(*args) if kind == 1 else b.lpm_add(*args)
            continue
        assert wa == wb


def test_parse_uint():
    assert parse_uint("10.1.2.3", 32) == 0x0A010203
    assert parse_uint("02:00:00:00:01:ff", 48) == 0x0200000001FF
    assert parse_uint("0x1F", 8) == 31 and parse_uint(7, 3) == 7
    with pytest.raises(ValueError, match="does not fit in 4 bits"):
        parse_uint(16, 4, "port")
    with pytest.raises(ValueError, match="not a number"):
        parse_uint("ten", 8)
    with pytest.raises(TypeError):
        parse_uint(True, 8)
    with pytest.raises(ValueError, match="negative"):
        parse_uint(-1, 8)


def test_lpm_by_name_forwards_and_reads_back(dev, model):
    routes = dev.table("l3.routes")
    routes.add("10.1.0.0/16", "route", port=1, dmac="0a:00:00:00:00:01", smac="02:00:00:00:00:99")
    routes.add("10.1.2.0/24", "drop")
    out = model.process(frame("10.1.9.9"), 0)
    assert [o.port for o in out] == [1]
    assert out[0].frame[:6] == bytes.fromhex("0a0000000001") and out[0].frame[22] == 63
    assert model.process(frame("10.1.2.9"), 0) == []                 # longer prefix: drop
    e = routes.get("10.1.0.0/16")
    assert (e["prefix"], e["prefix_len"], e["action"]) == (0x0A010000, 16, "route")
    assert e["params"] == {"port": 1, "dmac": 0x0A0000000001, "smac": 0x020000000099}
    assert [x["prefix_len"] for x in routes.dump()] == [24, 16]      # longest first
    routes.modify("10.1.2.0/24", "to_host")
    assert routes.get("10.1.2.0/24")["action"] == "to_host"
    routes.delete("10.1.2.0/24")
    assert routes.get("10.1.2.0/24") is None and len(routes.dump()) == 1
    with pytest.raises(KeyError, match="no route"):
        routes.delete("10.1.2.0/24")
    with pytest.raises(KeyError, match="no entry"):
        routes.modify("10.9.0.0/16", "drop")


def test_precise_errors(dev):
    routes = dev.table("l3.routes")
    with pytest.raises(KeyError, match="no table 'l3.route'.*l3.routes"):
        dev.table("l3.route")
    with pytest.raises(KeyError, match="no action 'forward'.*route"):
        routes.add("10.0.0.0/8", "forward")
    with pytest.raises(ValueError, match="port.*does not fit in 4 bits"):
        routes.add("10.0.0.0/8", "route", port=16, dmac=0, smac=0)
    with pytest.raises(ValueError, match="needs parameter"):
        routes.add("10.0.0.0/8", "route", port=1)
    with pytest.raises(KeyError, match="no parameter"):
        routes.add("10.0.0.0/8", "drop", port=1)
    with pytest.raises(ValueError, match="prefix length 33"):
        routes.add("10.0.0.0/33", "drop")
    with pytest.raises(ValueError, match="bits set beyond"):
        routes.add("10.0.0.1/8", "drop")
    with pytest.raises(ValueError, match="needs a length"):
        routes.add("10.0.0.0", "drop")
    acl = dev.table("prim.acl")
    with pytest.raises(ValueError, match="1 part.*the key has 2"):
        acl.add([1], "deny", mask=[1], priority=0)
    with pytest.raises(ValueError, match="mask= and priority="):
        acl.add([1, 2], "deny")
    with pytest.raises(ValueError, match="priority 16 out of range"):
        acl.add([1, 2], "deny", mask=[1, 1], priority=16)
    with pytest.raises(ValueError, match="index 256 out of range"):
        dev.bank("prim.cells").write(256, 1)
    with pytest.raises(ValueError, match="does not fit in 32 bits"):
        dev.bank("prim.cells").write(0, 1 << 32)
    with pytest.raises(KeyError, match="no register bank"):
        dev.bank("cells")
    with pytest.raises(ValueError, match="does not fit in 16 bits"):
        dev.reg_write("parser.udp_port.prim", 70000)
    with pytest.raises(ValueError, match="port 4 out of range"):
        dev.mcast_set(1, [(4, 0)])


def test_full_tables_say_so(dev):
    routes = dev.table("l3.routes")
    for i in range(64):
        routes.add((i << 24, 8), "drop")
    with pytest.raises(TableFullError, match="l3.routes is full"):
        routes.add("200.0.0.0/8", "drop")
    ops = dev.table("prim.ops")
    added = 0
    with pytest.raises(TableFullError, match="prim.ops is full"):
        for k in range(256):
            ops.add(k, "forward", port=1)
            added += 1
    assert 16 <= added <= 64 and len(ops.dump()) == added


def test_exact_ternary_banks_mcast_counters(dev, model):
    dev.table("prim.ops").add(1, "forward", port=1)
    assert dev.table("prim.ops").get(1)["params"] == {"port": 1}
    assert dev.table("prim.ops").get(2) is None
    acl = dev.table("prim.acl")
    acl.add(["10.0.0.9", 0], "deny", mask=["255.255.255.255", 0], priority=0)
    e = acl.get(0)
    assert e["value"] == [0x0A000009, 0] and e["mask"] == [0xFFFFFFFF, 0]
    acl.modify(0, "allow")
    assert acl.get(0)["action"] == "allow" and acl.get(0)["value"] == [0x0A000009, 0]
    acl.delete(0)
    assert acl.dump() == []
    cells = dev.bank("prim.cells")
    cells.write(5, 1234)
    assert cells.read(5) == 1234 == model.mem_read("prim.cells", 5)
    assert cells.read_range(4, 3) == [0, 1234, 0]
    cells.clear()
    assert cells.read(5) == 0
    dev.mcast_set(3, [(0, 5), (2, 6)])
    assert dev.mcast_get(3) == [(0, 5), (2, 6)] and dev.mcast_dump() == {3: [(0, 5), (2, 6)]}
    dev.mcast_set(3, [])
    assert dev.mcast_dump() == {}
    model.process(frame("10.9.9.9"), 0)
    assert dev.counters("in0.")["in0.pkts"] == 1
    dev.clear_counters("in0.")
    assert dev.counters("in0.")["in0.pkts"] == 0
    routes = dev.table("l3.routes")
    routes.set_default("drop")
    assert routes.get_default() == {"action": "drop", "params": {}}
    routes.reset_default()
    assert routes.get_default()["action"] == "to_host"


def test_new_process_continues_from_device_state(schema, model):
    """A second Device (a CLI process, a restarted controller) reads the tables back and
    keeps them consistent: no duplicate exact entries, LPM order kept."""
    d1 = Device.open("model", schema=schema, model=model)
    d1.table("l3.routes").add("10.0.0.0/8", "drop")
    d1.table("l3.routes").add("10.1.0.0/16", "to_host")
    d1.table("prim.ops").add(7, "forward", port=2)
    d2 = Device.open("model", schema=schema, model=model)
    d2.table("prim.ops").add(7, "forward", port=3)          # update in place, same slot
    assert [e["params"] for e in d2.table("prim.ops").dump()] == [{"port": 3}]
    d2.table("l3.routes").add("10.1.2.0/24", "drop")
    assert [e["prefix_len"] for e in d2.table("l3.routes").dump()] == [24, 16, 8]
    d2.table("l3.routes").delete("10.0.0.0/8")
    assert [e["prefix_len"] for e in d1.table("l3.routes").dump()] == [24, 16]
    d2.table("l3.routes").clear()
    assert d2.table("l3.routes").dump() == []


def test_batch_is_all_or_nothing(dev, model):
    with pytest.raises(ValueError):
        with dev.batch():
            dev.table("l3.routes").add("10.0.0.0/8", "drop")
            dev.table("l3.routes").add("10.1.0.0/16", "route", port=99, dmac=0, smac=0)
    assert dev.table("l3.routes").dump() == []
    with dev.batch():
        dev.table("l3.routes").add("10.0.0.0/8", "drop")
        assert model.mem_read("l3.routes", 0) == 0                   # not yet written
    assert dev.table("l3.routes").get("10.0.0.0/8")["action"] == "drop"


CONFIG_YAML = """
registers:
  parser.udp_port.prim: 0x5EEE
tables:
  l3.routes:
    default: {action: drop}
    entries:
      - {prefix: 10.77.1.1/32, action: route,
         params: {port: 1, dmac: "02:00:00:00:01:01", smac: "02:00:00:00:ff:01"}}
      - {prefix: 10.77.0.0/16, action: to_host}
  prim.ops:
    entries:
      - {key: 1, action: forward, params: {port: 1}}
  prim.acl:
    entries:
      - {priority: 2, value: [10.0.0.9, 0], mask: [255.255.255.255, 0], action: deny}
banks:
  prim.cells: {0: 5, 3: 7}
mcast:
  1: [[0, 1], [1, 2]]
"""

CONFIG_TOML = """
[registers]
"parser.udp_port.prim" = 0x5EEE

[tables."l3.routes"]
default = {action = "drop"}
entries = [
  {prefix = "10.77.1.1/32", action = "route", params = {port = 1, dmac = "02:00:00:00:01:01", smac = "02:00:00:00:ff:01"}},
  {prefix = "10.77.0.0/16", action = "to_host"},
]

[tables."prim.ops"]
entries = [{key = 1, action = "forward", params = {port = 1}}]

[tables."prim.acl"]
entries = [{priority = 2, value = ["10.0.0.9", 0], mask = ["255.255.255.255", 0], action = "deny"}]

[banks."prim.cells"]
0 = 5
3 = 7

[mcast]
1 = [[0, 1], [1, 2]]
"""


def _state(dev):
    return ({t: dev.table(t).dump() for t in dev.table_names}, dev.registers(),
            dev.mcast_dump(), dev.bank("prim.cells").read_range(0, 4),
            dev.table("l3.routes").get_default())


def test_yaml_and_toml_configs_give_the_same_device(tmp_path, schema):
    (tmp_path / "c.yaml").write_text(CONFIG_YAML)
    (tmp_path / "c.toml").write_text(CONFIG_TOML)
    states = []
    for name in ("c.yaml", "c.toml"):
        m = DataplaneModel(default_pipeline())
        d = Device.open("model", schema=schema, model=m)
        summary = d.apply(tmp_path / name)
        assert summary["entries"] == 4 and summary["mcast"] == 1 and summary["banks"] == 2
        states.append(_state(d))
        out = m.process(frame("10.77.1.1"), 0)
        assert [o.port for o in out] == [1] and out[0].frame[:6] == bytes.fromhex("020000000101")
        assert m.process(frame("10.99.0.1"), 0) == []                  # default: drop
    assert states[0] == states[1]
    assert states[0][1] == {"parser.udp_port.prim": 0x5EEE, "parser.udp_port.nc": 7431,
                            "parser.udp_port.rs": 7432, "parser.udp_port.nl": 7460,
                            "parser.udp_port.xi": 7450, "parser.udp_port.nice": 7470}


def test_config_is_declarative_and_validated_first(tmp_path, dev, model):
    dev.table("l3.routes").add("10.5.0.0/16", "drop")                 # not in the file
    dev.apply(load_config_text(tmp_path, CONFIG_YAML))
    assert [e["prefix_len"] for e in dev.table("l3.routes").dump()] == [32, 16]
    assert dev.table("l3.routes").get("10.5.0.0/16") is None
    before = _state(dev)
    bad = CONFIG_YAML.replace("port: 1, dmac", "port: 17, dmac")
    with pytest.raises(ConfigError, match=r"tables.l3.routes.entries\[0\]: .*port.*4 bits"):
        dev.apply(load_config_text(tmp_path, bad))
    assert _state(dev) == before                                     # nothing written
    for text, msg in [("tables: {l3.routes: {entries: [{prefix: 10.0.0.0/8}]}}", "missing"),
                      ("tables: {l3.routes: {entries: [{key: 1, action: drop}]}}", "unknown"),
                      ("tables: {nope: {}}", "no table"),
                      ("frobnicate: 1", "unknown section"),
                      ("banks: {prim.cells: {x: 1}}", "not an integer"),
                      ("mcast: {0: []}", "out of range"),
                      ("registers: {nope: 1}", "no register")]:
        with pytest.raises(ConfigError, match=msg):
            dev.apply(load_config_text(tmp_path, text))
    assert _state(dev) == before
    summary = dev.apply(load_config_text(tmp_path, CONFIG_YAML.replace("0x5EEE", "0x5EEF")),
                        dry_run=True)
    assert summary["writes"] > 0 and _state(dev) == before


def test_config_sections_plug_in(dev):
    seen = []
    register_section("test_offload", lambda d, v, dry: seen.append((v, dry)))
    try:
        dev.apply({"test_offload": {"x": 1}})
        assert seen == [({"x": 1}, False)]
    finally:
        from netstor import config
        config._SECTIONS.pop("test_offload")


def test_config_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "x.ini").write_text("")
    with pytest.raises(ConfigError, match="unknown configuration format") as e:
        load_config(tmp_path / "x.ini")
    assert str(e.value).count("x.ini") == 1         # the path once, not prefixed twice
    (tmp_path / "bad.yaml").write_text("tables: [")
    with pytest.raises(ConfigError, match="bad.yaml"):
        load_config(tmp_path / "bad.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(tmp_path / "list.yaml")


def test_load_schema_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="make rtl"):
        load_schema(tmp_path / "none.json")


_n = [0]


def load_config_text(tmp_path, text):
    _n[0] += 1
    p = tmp_path / f"cfg{_n[0]}.yaml"
    p.write_text(text)
    return p


def test_documented_configurations_apply(schema):
    """Every YAML example in docs/host-software.md and README.md applies cleanly."""
    import re
    import yaml
    from netstor.paths import repo_root
    root = repo_root()
    blocks = []
    for doc in ("docs/host-software.md", "README.md"):
        blocks += re.findall(r"```yaml\n(.*?)```", (root / doc).read_text(), re.S)
    assert len(blocks) >= 3
    for b in blocks:
        d = Device.open("model", schema=schema, model=DataplaneModel(default_pipeline()))
        assert d.apply(yaml.safe_load(b))["writes"] > 0


# ---- copy-list multicast (the replication engine's tm.groups) -----------------------------------
@pytest.fixture(scope="module")
def list_schema(schema):
    """The default core's schema: its traffic manager holds copy lists (``tm.groups``, 325-bit
    words, :data:`netstor.model.replication.GROUP_BITS`)."""
    from netstor.model.replication import GROUP_BITS
    (mem,) = [m for m in schema["memories"] if m["name"] == "tm.groups"]
    assert mem["entry_width"] == GROUP_BITS and mem["depth"] == 4096
    return schema


@pytest.fixture(scope="module")
def bitmap_schema(schema):
    """A ``copies="ports"`` core's schema, as far as the multicast mode goes: ``tm.mcast``."""
    import copy
    s = copy.deepcopy(schema)
    (mem,) = [m for m in s["memories"] if m["name"] == "tm.groups"]
    mem.update(name="tm.mcast", entry_width=4 + 4 * 16, doc="multicast bitmaps")
    from netstor.driver.regs import schema_hash
    s["hash"] = schema_hash(s)
    return s


def test_mcast_copy_lists_api_and_config(list_schema, bitmap_schema, tmp_path):
    from netstor.model.replication import encode_group
    from netstor.programs.primitives import OP_MCAST
    from netstor.model.test_model import prim_frame, trust_everything
    m = trust_everything(DataplaneModel(default_pipeline(), groups="list"))
    dev = Device.open("model", schema=list_schema, model=m)
    assert dev.mcast_mode == "list"
    assert Device.open("model", schema=bitmap_schema, model=DataplaneModel(
        default_pipeline(), groups="bitmap")).mcast_mode == "bitmap"
    # order kept, a port listed three times, 16 copies at most (the word is the encoder's)
    copies = [(1, 7), (0, 9), (1, 8), (1, 7)]
    dev.mcast_set(5, copies)
    assert m.mem_read("tm.groups", 5) == encode_group(copies)
    assert dev.mcast_get(5) == copies and dev.mcast_dump() == {5: copies}
    # a dump of chosen groups reads only those, once each (7 is empty: read, not listed)
    reads, mem_read = [], dev.client.mem_read
    dev.client.mem_read = lambda mem, addr: reads.append((mem, addr)) or mem_read(mem, addr)
    assert dev.mcast_dump(groups=[7, 5, 5]) == {5: copies} and dev.mcast_dump([7]) == {}
    assert reads == [("tm.groups", 5), ("tm.groups", 7), ("tm.groups", 7)]
    dev.client.mem_read = mem_read
    dev.mcast_set(6, [[3, i] for i in range(16)])
    assert dev.mcast_get(6) == [(3, i) for i in range(16)]
    with pytest.raises(ValueError):
        dev.mcast_set(6, [(3, 0)] * 17)
    with pytest.raises(ValueError):
        dev.mcast_set(6, [(4, 0)])                   # not an output of a 2-port core
    # the data plane sends what the API wrote, in list order
    dev.table("prim.ops").add(OP_MCAST, "multicast", group=5)
    assert [o.port for o in m.process(prim_frame(OP_MCAST), 0)] == [1, 0, 1, 1]
    dev.mcast_set(5, [])
    assert m.mem_read("tm.groups", 5) == 0 and dev.mcast_dump() == {6: dev.mcast_get(6)}
    # a configuration file's mcast section writes copy lists too
    cfg = tmp_path / "c.yaml"
    cfg.write_text("mcast:\n  2: [[1, 1], [1, 2], [0, 3]]\n")
    assert dev.apply(cfg)["mcast"] == 1
    assert dev.mcast_get(2) == [(1, 1), (1, 2), (0, 3)]
