"""Program descriptions are validated with precise errors, and the built-ins are consistent."""
import pytest

from netstor.elements import Compute, Hash, RegisterOp, Table
from netstor.lang import Program, Action, Set, Pipeline, F, Const, APP_BYTES
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
    assert [p["name"] for p in s["programs"]] == ["l3", "prim", "nc", "rs", "nl", "xi", "nice"]
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
        p.header([("x", APP_BYTES * 8 + 16)])


def test_header_fills_whole_window():
    """A 26-byte offload header and a 16-byte key fill the 42-byte window: fields are placed
    from its top (byte 0 = the most significant bits of ``app``), the key in its last 16 bytes."""
    assert APP_BYTES == 42
    p = Program("full", udp_port=1)
    p.header([("hdr", 26 * 8), ("key", 16 * 8)])
    assert p.header_bytes == 42
    assert p.header_views() == [("full.hdr", 128, 208), ("full.key", 0, 128)]


def test_stages_follow_bit_level_dependencies():
    """Hand-worked schedule: read after write and write after write start a new stage, write
    after read may share the reader's stage, views are their bits of ``app``, and programs
    with UDP ports never depend on each other (but do on programs without one)."""
    base = Program("base")
    m1, m2 = base.meta("m1", 8), base.meta("m2", 8)
    base.add(Compute("a", [Set(m1, F.ipv4.ttl)]))                   # stage 0
    base.add(Compute("b", [Set(F.ipv4.ttl, 3)]))                    # WAR on ttl: with a
    base.add(Compute("c", [Set(m2, m1 + 1)]))                       # RAW on m1: after a
    base.add(Compute("d", [Set(m1, 0)]))                            # WAW on m1: after a
    x = Program("x", udp_port=1000)
    hx = x.header([("f", 16), ("g", 16)])
    x.add(Compute("e", [Set(hx["f"], m2)]))                         # RAW on m2: after c
    x.add(Compute("h", [Set(hx["g"], 1)]))                          # depends on nothing
    y = Program("y", udp_port=1001)
    hy = y.header([("k", 8), ("rest", 24)])                         # k = x.f's high bits
    y.add(Compute("i", [Set(hy["k"], 1)]))                          # exclusive with x.e
    y.add(Compute("j", [Set(F.meta.drop, hy["k"] == 0)]))           # RAW on y.k: after i
    z = Program("z")                                                # no UDP port
    mz = z.meta("mz", 1)
    z.add(Compute("l", [Set(mz, F.app[0:8] == 0)]))                 # reads all of app:
    pl = Pipeline([base, x, y, z])
    got = [[e.qualname for e in st] for st in pl.stages()]
    assert got == [["base.a", "base.b", "x.h", "y.i"], ["base.c", "base.d", "y.j"], ["x.e"],
                   ["z.l"]]                                         # after x.e and y.i
    # views are bit ranges of app (byte 0 = the most significant); selected is a read
    rd, wr = pl.access(y.elements[0])
    A = APP_BYTES * 8
    assert wr == {("app", A - 8, A)} and ("meta.hdr_type", 0, 4) in rd
    assert pl.access(x.elements[0])[1] == {("app", A - 16, A)}
    assert pl.access(z.elements[0])[0] == {("app", 0, A)}         # a slice reads its field
    # every element of x and y carries `selected`; base's and z's do not
    assert all(f"selected({e.program.name})" in repr(e.when) for e in x.elements + y.elements)
    assert not any("selected" in repr(e.when) for e in base.elements + z.elements)
