"""Program descriptions are validated with precise errors, and the built-ins are consistent."""
import pytest

from netstor.lang import (Program, Action, Set, Table, RegisterOp, Hash, Compute, Pipeline, F,
                          Const)
from netstor.lang.schema import program_schema
from netstor.programs import default_pipeline


def test_default_pipeline_elaborates_as_description():
    pl = default_pipeline()
    names = [e.qualname for e in pl.elements]
    assert names[0] == "l3.classify" and "prim.ops" in names
    s = program_schema(pl)
    assert s["tables"]["l3.routes"]["kind"] == "lpm"
    assert s["tables"]["prim.ops"]["ways"] == 4
    assert s["tables"]["prim.copy_tag"]["egress"] is True
    assert [p["name"] for p in s["programs"]] == ["l3", "prim", "nc", "rs"]
    assert s["programs"][1]["hdr_type"] == 1


def test_read_only_fields_cannot_be_set():
    p = Program("bad")
    p.add(Compute("c", [Set(F.ipv4.total_len, 5)]))
    with pytest.raises(ValueError, match="read-only"):
        Pipeline([p])


def test_one_rmw_per_bank():
    p = Program("twice")
    b = p.bank("b", width=8, depth=4)
    p.add(RegisterOp.add("x", b, Const(0, 2)))
    p.add(RegisterOp.add("y", b, Const(1, 2)))
    with pytest.raises(ValueError, match="one RMW per packet per bank"):
        Pipeline([p])


def test_table_arguments():
    a = Action("a")
    with pytest.raises(ValueError, match="kind"):
        Table("t", kind="hash", key=[F.ipv4.dst], actions=[a], size=4)
    with pytest.raises(ValueError, match="ways"):
        Table("t", kind="exact", key=[F.ipv4.dst], actions=[a], size=12, ways=4)
    with pytest.raises(ValueError, match="exactly one key"):
        Table("t", kind="lpm", key=[F.ipv4.dst, F.ipv4.src], actions=[a], size=4)
    with pytest.raises(ValueError, match="default"):
        Table("t", kind="ternary", key=[F.ipv4.dst], actions=[a], size=4,
              default=Action("other"))


def test_action_params_checked():
    a = Action("fwd", {"port": 4}, lambda p: [Set(F.meta.egress_port, p.port)])
    assert a.pack_params({"port": 3}) == 3
    with pytest.raises(ValueError, match="does not fit"):
        a.pack_params({"port": 16})
    with pytest.raises(KeyError):
        a.pack_params({"nope": 1})


def test_egress_cannot_redirect():
    p = Program("eg")
    p.add_egress(Compute("c", [Set(F.meta.egress_port, 1)]))
    with pytest.raises(ValueError, match="cannot set"):
        Pipeline([p])


def test_header_must_fit_window():
    p = Program("big", udp_port=1)
    with pytest.raises(ValueError, match="multiple of 16"):
        p.header([("x", 8)])
    with pytest.raises(ValueError, match="at most"):
        p.header([("x", 272)])
