"""``netstor nice view CONFIG`` (NICE's ``cli`` hook, run through ``netstor.cli.main``, the
console script's entry) on a configuration with a failed node, handoffs, a joining node and a
pending member: every row checked against the membership rules of ``docs/nice.md`` read off the
file by hand; bad files exit 2 with one line naming the file. ``nice view --device`` on a
model switch serving its control window: the tables read back match the config after
``apply`` and the metadata service's state after it fails a node."""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys

import pytest

from netstor import cli
from netstor.offloads.nice import metadata

CONFIG = """\
nice:
  smac: "02:00:00:00:ff:01"
  nodes:
    0: {ip: 10.0.1.1, mac: "02:00:00:00:01:01", port: 1}
    1: {ip: 10.0.1.2, mac: "02:00:00:00:01:02", port: 1}
    2: {ip: 10.0.1.3, mac: "02:00:00:00:01:03", port: 1}
    3: {ip: 10.0.1.4, mac: "02:00:00:00:01:04", port: 1}
    4: {ip: 10.0.1.5, mac: "02:00:00:00:01:05", port: 1}
    5: {ip: 10.0.1.6, mac: "02:00:00:00:01:06", port: 1}
  partitions:
    0: [0, 1, 2]
    1: [2, 3, 0]
    2: [1, 4, 3]
    3: [3, 0, 5]
  clients: [10.0.0.0/24]
  down: [2]
  joining: [4]
  handoff: {0: {2: 3}, 1: {2: 1}, 2: {4: 0}}
  pending: {3: [5]}
"""

# By hand from CONFIG (docs/nice.md, "Membership rules"): 2 is down (in no mapping; its
# handoffs stand in), 4 is joining (put set only, its handoff 0 in both rings), 5 is pending in
# partition 3 (put set only there).
ROLES = {0: "live", 1: "live", 2: "down", 3: "live", 4: "joining", 5: "live"}
PARTS = {  # p: (primary, members, get ring, put set, handoffs, pending)
    0: (0, [0, 1, 2], [0, 1, 3], [0, 1, 3], {2: 3}, []),
    1: (3, [2, 3, 0], [1, 3, 0], [1, 3, 0], {2: 1}, []),       # the down primary's place
    2: (1, [1, 4, 3], [1, 0, 3], [1, 4, 0, 3], {4: 0}, []),
    3: (3, [3, 0, 5], [3, 0], [3, 0, 5], {}, [5]),
}


@pytest.fixture
def config(tmp_path):
    p = tmp_path / "ring.yaml"
    p.write_text(CONFIG)
    return p


def _rows(out):
    nodes = {int(m[1]): (m[2], m[3]) for m in
             re.finditer(r"^  node +(\d+) (\S+) +(\S+) ", out, re.M)}
    parts = {}
    for m in re.finditer(r"^  part +(\d+) primary (\S+) members (\[[^]]*\]) get (\[[^]]*\]) "
                         r"put (\[[^]]*\])(?: handoff (\{[^}]*\}))?(?: pending (\[[^]]*\]))? "
                         r"divisions (\d+)$", out, re.M):
        parts[int(m[1])] = (int(m[2]), json.loads(m[3]), json.loads(m[4]), json.loads(m[5]),
                            ast.literal_eval(m[6]) if m[6] else {}, json.loads(m[7] or "[]"), int(m[8]))
    return nodes, parts


def test_view_rows(config, capsys):
    assert cli.main(["nice", "view", str(config)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("NICE metadata: 6 nodes, 4 partitions")
    nodes, parts = _rows(out)
    assert {n: r for n, (_, r) in nodes.items()} == ROLES
    assert nodes[4][0] == "10.0.1.5"
    assert {p: v[:6] for p, v in parts.items()} == PARTS
    # one division per get-ring node of each partition (one client prefix)
    assert {p: v[6] for p, v in parts.items()} == {p: len(v[2]) for p, v in PARTS.items()}
    # entries: a node entry and a copy entry per node not down; 3 + 3 + 3 + 2 divisions; all
    # 256 /24 subgroups of each /16 ring mapped (every partition has a primary)
    assert re.search(r"entries nice.copies 5, nice.divisions 11, nice.multicast 256, "
                     r"nice.nodes 5, nice.rings 2, nice.unicast 256; copy lists 4", out), out
    # python -m netstor.offloads.nice.metadata prints the same view
    assert metadata.main([str(config)]) == 0
    again = capsys.readouterr().out
    assert _rows(again) == (nodes, parts)


def test_view_json_divisions(config, capsys):
    assert cli.main(["--json", "nice", "view", str(config)]) == 0
    snap = json.loads(capsys.readouterr().out)
    assert {int(n): v["role"] for n, v in snap["nodes"].items()} == ROLES
    for p, (prim, members, get, put, handoff, pending) in PARTS.items():
        v = snap["partitions"][str(p)]
        assert (v["primary"], v["members"], v["get"], v["put"], v["pending"]) == \
            (prim, members, get, put, pending)
        assert {int(m): h for m, h in v["handoff"].items()} == handoff
    # 10.0.0.0/24 cut among the get ring rotated by p mod k: the first of 3 takes a /25
    assert snap["partitions"]["0"]["divisions"] == \
        {"10.0.0.0/25": 0, "10.0.0.128/26": 1, "10.0.0.192/26": 3}
    assert snap["partitions"]["1"]["divisions"] == \
        {"10.0.0.0/25": 3, "10.0.0.128/26": 0, "10.0.0.192/26": 1}
    assert snap["partitions"]["3"]["divisions"] == {"10.0.0.0/25": 0, "10.0.0.128/25": 3}


@pytest.mark.parametrize("name, text, needle", [
    ("missing.yaml", None, "missing.yaml not found"),
    ("nonice.yaml", "tables: {}\n", "nonice.yaml: no nice: section"),
    ("broken.yaml", "nice: [\n", "broken.yaml:2"),
    ("nomac.yaml", "nice:\n  nodes: {0: {ip: 10.0.0.1, port: 1}}\n", "needs ip, mac and port"),
    ("badpart.yaml", CONFIG.replace("3: [3, 0, 5]", "3: [3, 0, 9]"), "badpart.yaml: nice:"),
    ("list.yaml", "- 1\n", "must be a mapping"),
])
def test_view_bad_input_exits_2(tmp_path, capsys, name, text, needle):
    f = tmp_path / name
    if text is not None:
        f.write_text(text)
    assert cli.main(["nice", "view", str(f)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("netstor: error: ") and err.count("\n") == 1 and needle in err, err
    assert metadata.main([str(f)]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_view_usage_errors(capsys):
    for argv in (["nice"], ["nice", "bogus"], ["nice", "view", "a.yaml", "b.yaml"]):
        with pytest.raises(SystemExit) as e:          # argparse's own
            cli.main(argv)
        assert e.value.code == 2
    capsys.readouterr()
    assert cli.main(["nice", "view"]) == 2
    assert capsys.readouterr().err == \
        "netstor: error: nice view: give CONFIG or --device TARGET\n"


def test_console_entry_in_a_process(config):
    """As ``python -m netstor.cli`` (the module run as __main__ still raises and catches one
    UsageError class)."""
    r = subprocess.run([sys.executable, "-m", "netstor.cli", "nice", "view", str(config)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and _rows(r.stdout)[1][2][:6] == PARTS[2], r.stderr
    r = subprocess.run([sys.executable, "-m", "netstor.cli", "nice", "view",
                        str(config.with_name("none.yaml"))], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "none.yaml not found" in r.stderr and not r.stdout


@pytest.fixture(scope="module")
def nice_switch(tmp_path_factory):
    """The default bitstream's golden model (NICE included) serving its control window."""
    from netstor.offloads.testing import served_model
    from netstor.programs import default_pipeline
    with served_model(tmp_path_factory.mktemp("nice_switch"), default_pipeline()) as sw:
        yield sw.target, sw.schema, sw.dev


def _device_rows(out):
    return {int(m[1]): (int(m[2]), json.loads(m[3]), int(m[4]), json.loads(m[5]))
            for m in re.finditer(r"^  part +(\d+) primary (\d+) put (\[[^]]*\]) divisions "
                                 r"(\d+) on (\[[^]]*\]) subgroups", out, re.M)}


SMALL = CONFIG.replace("  clients:", "  subgroup: 20\n  clients:")    # 16 subgroups


def test_view_device_reads_the_switch(nice_switch, config, capsys):
    """``netstor nice view --device unix:...`` reads the tables back: after ``apply`` it
    shows the rows the config gives (PARTS)."""
    target, schema, dev = nice_switch
    argv = ["--schema", str(schema), "nice", "view", "--device", target]
    config.write_text(SMALL)
    dev.apply(str(config))
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "5 nodes mapped, 4 partitions mapped" in out
    assert _device_rows(out) == {p: (prim, put, len(get), sorted(get))
                                 for p, (prim, _, get, put, _, _) in PARTS.items()}
    assert not re.search(r"^  node +2 ", out, re.M)                 # down: not mapped
    assert cli.main(argv + [str(config)]) == 2                      # CONFIG and --device
    assert "not both" in capsys.readouterr().err


def test_view_device_after_a_failure(nice_switch, config, capsys):
    """After the metadata service fails node 3 through the host API, ``--json nice view
    --device`` shows what the service's new state gives (promotions, handoffs, 3 unmapped)."""
    import time

    import yaml

    from netstor.offloads.nice.metadata import DeviceSink, Metadata
    target, schema, dev = nice_switch
    argv = ["--schema", str(schema), "nice", "view", "--device", target]
    config.write_text(SMALL)
    dev.apply(str(config))
    md = Metadata(yaml.safe_load(SMALL)["nice"], clock=time.monotonic)   # what apply wrote
    md.sink = DeviceSink(dev)                                             # from now on
    md.fail(3, "admin")
    st = md.state
    assert cli.main(["--json"] + argv) == 0
    snap = json.loads(capsys.readouterr().out)
    assert sorted(int(n) for n in snap["nodes"]) == [0, 1, 4, 5]
    rows = {int(p): (v["primary"], v["put"], sorted(set(v["divisions"].values())))
            for p, v in snap["partitions"].items()}
    assert rows == {p: (st.primary(p), st.put_set(p), sorted(st.get_set(p)))
                    for p in st.partitions}
    assert all(3 not in put and 3 not in ring for _, put, ring in rows.values())
    assert rows[1][0] == 0 and rows[3][0] == 0                      # promoted


def test_view_device_without_nice_tables(tmp_path, capsys):
    """A core built without NICE (``default_pipeline(exclude=("nice",))``): its schema has no
    NICE tables: exit 1, one line saying so."""
    from netstor.offloads.testing import served_model
    from netstor.programs import default_pipeline
    with served_model(tmp_path, default_pipeline(exclude=("nice",))) as sw:
        target = sw.target
        assert cli.main(["--schema", str(sw.schema), "nice", "view", "--device", target]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"netstor: error: device {target}: no NICE tables") and \
        err.count("\n") == 1, err
