"""``lpm_lengths`` of a hashed LPM table where tables are configured: a configuration's
``tables.T.lpm_lengths`` and the CLI's ``--lpm-lengths T=L,...``. The table's answer (the
golden model's probe of the words and bank lengths the device holds, as the gateware computes
it) must be the longest-prefix match of a brute-force scan over the configured routes, for
every key, while the banks hold only the configured lengths."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from netstor.api import Device
from netstor.config import ConfigError
from netstor.elements import Table
from netstor.elements.table import _lpm_probe
from netstor.lang import Pipeline, Program, Set
from netstor.lang.program import Action
from netstor.model.dataplane import DataplaneModel

KW = 12


def _pipeline():
    p = Program("t")
    k, nh = p.meta("k", KW), p.meta("nh", 16)
    act = [Action("route", {"nh": 16}, lambda a: [Set(nh, a.nh)])]
    big = p.add(Table("r", kind="lpm", key=[k], size=512, lpm_banks=4, actions=act))
    p.add(Table("s", kind="lpm", key=[k], size=16, actions=act))     # a RAM TCAM
    return Pipeline([p]), big


@pytest.fixture(scope="module")
def built():
    from netstor.build import build_core
    pl, big = _pipeline()
    return pl, big, build_core(pl).schema


def _route(prefix, plen, nh):
    return {"prefix": f"{prefix:#x}/{plen}", "action": "route", "params": {"nh": nh}}


def _masked(key, plen, nh):
    return key & ~((1 << (KW - plen)) - 1), plen, nh


#: nested and overlapping routes of lengths 0..12 (prefix, length, next hop): each route's
#: prefix is the top bits of the key given
ROUTES = [_masked(*r) for r in [
    (0x000, 0, 1), (0x9A5, 1, 2), (0x9A5, 3, 3), (0x9A5, 5, 4), (0x9A5, 7, 5), (0x9A5, 10, 6),
    (0x9A5, 12, 7), (0x123, 2, 8), (0x123, 6, 9), (0x123, 12, 10), (0xFFE, 4, 11),
    (0xFFE, 8, 12), (0xFFE, 11, 13)]]


def _brute(routes, key):
    best, best_len = None, -1
    for prefix, plen, nh in routes:
        if (key >> (KW - plen)) == (prefix >> (KW - plen)) and plen > best_len:
            best, best_len = nh, plen
    return best


def _table_answers(model, t):
    words = [model.mem_read(t.qualname, a) for a in range(t.size)]
    lengths = [model.mem_read(f"{t.qualname}.lengths", b) for b in range(t.ways)]
    out = []
    for key in range(1 << KW):
        e = _lpm_probe(t, words, lengths, key)
        out.append(None if e is None else e >> t.action_bits)
    return out, lengths


def _held(lengths):
    """The lengths the banks hold (a bank's length word: ``len << 1 | valid``)."""
    return sorted({w >> 1 for w in lengths if w & 1})


def test_config_lpm_lengths_fix_the_held_lengths(built):
    pl, t, schema = built
    model = DataplaneModel(pl)
    dev = Device.open("model", schema=schema, model=model)
    cfg = {"tables": {"t.r": {"lpm_lengths": [4, 8, 12],
                              "entries": [_route(*r) for r in ROUTES]}}}
    dev.apply(cfg)
    answers, lengths = _table_answers(model, t)
    assert _held(lengths) == [4, 8, 12]
    assert answers == [_brute(ROUTES, k) for k in range(1 << KW)]
    # the same configuration again (replace: the routes as given, not their expansions),
    # from this process and from a new one that reads the table back
    dev.apply(cfg)
    Device.open("model", schema=schema, model=model).apply(cfg)
    assert _table_answers(model, t) == (answers, lengths)
    # fewer routes: the others are removed, what they covered comes back
    fewer = ROUTES[:4] + ROUTES[7:9]
    dev.apply({"tables": {"t.r": {"lpm_lengths": [4, 8, 12],
                                  "entries": [_route(*r) for r in fewer]}}})
    answers, lengths = _table_answers(model, t)
    assert answers == [_brute(fewer, k) for k in range(1 << KW)]
    assert set(_held(lengths)) <= {4, 8, 12}


def test_without_lpm_lengths_the_routes_do_not_fit(built):
    """The contrast: without ``lpm_lengths`` (any length while banks last) the first four
    lengths (0, 1, 3, 5, in the order given) take the four banks, /7 finds none, and the
    configuration is refused whole (nothing written)."""
    from netstor.config import ConfigTableFull
    pl, t, schema = built
    model = DataplaneModel(pl)
    dev = Device.open("model", schema=schema, model=model)
    with pytest.raises(ConfigTableFull) as e:
        dev.apply({"tables": {"t.r": {"entries": [_route(*r) for r in ROUTES]}}})
    assert "tables.t.r.entries[4]" in str(e.value) and "held: [0, 1, 3, 5]" in str(e.value)
    answers, lengths = _table_answers(model, t)
    assert _held(lengths) == [] and set(answers) == {None}


def test_config_lpm_lengths_errors_change_nothing(built):
    pl, t, schema = built
    model = DataplaneModel(pl)
    dev = Device.open("model", schema=schema, model=model)
    for spec, words in [
            ({"t.s": {"lpm_lengths": [4, 12]}}, "tables.t.s.lpm_lengths: table t.s: lpm_lengths "
                                                "is for hashed LPM tables"),
            ({"t.r": {"lpm_lengths": [4, 13]}}, "tables.t.r.lpm_lengths: table t.r: lpm_lengths"),
            ({"t.r": {"lpm_lengths": "4,12"}}, "must be a list"),
            ({"t.r": {"lpm_lengths": []}}, "at least one"),
            ({"t.r": {"lpm_lenghts": [4]}}, "unknown field(s) ['lpm_lenghts']")]:
        with pytest.raises(ConfigError) as e:
            dev.apply({"tables": spec})
        assert words in str(e.value)
    # a dry run leaves the writer's lengths as they were; so does a failed apply
    dev.apply({"tables": {"t.r": {"lpm_lengths": [6, 12]}}}, dry_run=True)
    with pytest.raises(ConfigError):
        dev.apply({"tables": {"t.r": {"lpm_lengths": [6, 12],
                                      "entries": [_route(0, 0, 1), {"prefix": "x"}]}}})
    dev.apply({"tables": {"t.r": {"entries": [_route(0x800, 3, 3)]}}})
    assert _held(_table_answers(model, t)[1]) == [3]
    # lengths the banks hold now must be among the new set: re-planned only after a clear
    with pytest.raises(ConfigError) as e:
        dev.apply({"tables": {"t.r": {"lpm_lengths": [4, 12], "entries": []}}})
    assert "hold lengths [3] not in lpm_lengths [4, 12]; clear the table first" in str(e.value)
    dev.table("t.r").clear()
    dev.apply({"tables": {"t.r": {"lpm_lengths": [4, 12],
                                  "entries": [_route(0x800, 3, 3)]}}})
    answers, lengths = _table_answers(model, t)
    assert _held(lengths) == [4]
    assert answers == [_brute([(0x800, 3, 3)], k) for k in range(1 << KW)]


def test_cli_lpm_lengths(built, tmp_path):
    """``netstor --lpm-lengths`` in separate processes against one served model."""
    from netstor.driver.remote import WindowServer
    from netstor.driver.transports import ModelTransport
    pl, t, schema = built
    sf = tmp_path / "schema.json"
    sf.write_text(json.dumps(schema))
    model = DataplaneModel(pl)
    sock = tmp_path / "m.sock"
    srv = WindowServer(ModelTransport(model, schema), str(sock)).start()
    env = {**os.environ, "NETSTOR_SCHEMA": str(sf)}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "netstor.cli", "--device", f"unix:{sock}",
                               *args], capture_output=True, text=True, env=env, timeout=120)
    try:
        # every process reads the table back and sees expanded entries as routes (the driver
        # documents it), so an expanded route is added last, after the held lengths' routes
        some = [_masked(0x9A5, 4, 2), _masked(0x9A5, 8, 3), _masked(0x9A5, 12, 4),
                _masked(0x123, 8, 5), _masked(0x9A5, 6, 6), _masked(0x123, 2, 7)]
        for prefix, plen, nh in some:
            r = run("--lpm-lengths", "t.r=4,8,12", "table", "add", "t.r",
                    f"{prefix:#x}/{plen}", "route", f"nh={nh}")
            assert r.returncode == 0, r.stderr
        answers, lengths = _table_answers(model, t)
        assert _held(lengths) == [4, 8, 12]
        assert answers == [_brute(some, k) for k in range(1 << KW)]
        r = run("--lpm-lengths", "t.r", "info")
        assert r.returncode == 2 and "expected TABLE=LENGTH,LENGTH" in r.stderr
        r = run("--lpm-lengths", "t.s=4,12", "info")
        assert r.returncode == 1 and "hashed LPM tables" in r.stderr
        r = run("--lpm-lengths", "t.r=3,12", "info")
        assert r.returncode == 1 and "clear the table first" in r.stderr
    finally:
        srv.stop()
