"""An offload is one folder: a toy offload written into a temporary folder (header, program,
configuration section, server codec, load scheme) joins the default pipeline, the golden model,
the configuration format, the wire registry, the storage server and the load generator through
the registry alone, without a line of any generic module changed. And the generic modules name
no offload in their code."""
from __future__ import annotations

import ast
import importlib
import socket
import struct
import sys
import textwrap

import pytest

from netstor.paths import repo_root

TOY = {
    "__init__.py": '''
        from netstor.offload import Offload

        OFFLOAD = Offload(
            name="toy", title="toy counter", udp_port=7499,
            program="toyoff.program:make_toy", config_section="toyoff.config:apply",
            header="toyoff.header:HEADER", codec="toyoff.codec:ToyCodec",
            schemes="toyoff.schemes:SCHEMES")
        ''',
    "header.py": '''
        from netstor.wire.header import Header

        HEADER = Header("toy", [("op", 8), ("flag", 8), ("count", 16)])
        Toy = HEADER.tuple_class("Toy")
        ''',
    "program.py": '''
        from netstor.elements import RegisterOp
        from netstor.elements.trust import guard
        from netstor.lang import Program

        from .header import HEADER

        def make_toy(n_ports=2):
            """Counts the packets of each op (bank toy.counts) and writes the count into the
            packet's ``count`` field; L3 routes the packet."""
            p = Program("toy", udp_port=7499)
            h = p.header(HEADER.fields)
            guard(p)                  # every packet updates the counts: trusted ports only
            counts = p.bank("counts", width=16, depth=16)
            p.add(RegisterOp.add("count", counts, h["op"][0:4], result=h["count"]))
            return p
        ''',
    "config.py": '''
        def apply(dev, value, dry_run):
            """``toy: {start: {op: n}}``: preset the counters."""
            for op, n in (value.get("start") or {}).items():
                dev.bank("toy.counts").write(int(op), int(n))
        ''',
    "codec.py": '''
        from netstor.agent.codec import ServerCodec

        from .header import HEADER, Toy

        class ToyCodec(ServerCodec):
            name, prefix, default_port = "toy", "toy", 7499

            def split_request(self, data):
                if len(data) < HEADER.size or data[0] != 1:
                    return None
                return Toy.unpack(data), data[HEADER.size:]

            def reply_header(self, header, server_id, load, service_ns):
                return header._replace(op=2, flag=server_id & 0xFF,
                                       count=max(0, load)).pack()

            def split_reply(self, data):
                if len(data) >= HEADER.size and data[0] == 2:
                    return Toy.unpack(data), data[HEADER.size:]
                return None
        ''',
    "schemes.py": '''
        from netstor.agent.schemes import Scheme

        from .codec import ToyCodec
        from .header import Toy

        class ToyScheme(Scheme):
            name, help, codec, port = "toy", "toy counter requests", ToyCodec(), 7499
            options = {"toy_flag": 0}

            def __init__(self, *a, **kw):
                super().__init__(*a, **kw)
                self.unwrapped = 0

            def send(self, eng, op, key, value, now_ns):
                eng.send(op, key, value, target=0, now_ns=now_ns,
                         head=Toy(1, self.toy_flag, 0).pack())

            def record(self, c):
                self.unwrapped += c.head is not None

            def result(self, replies, targets):
                return {"unwrapped": self.unwrapped}

        SCHEMES = {"toy": ToyScheme}
        ''',
}


@pytest.fixture
def toy(tmp_path, monkeypatch):
    pkg = tmp_path / "toyoff"
    pkg.mkdir()
    for name, text in TOY.items():
        (pkg / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("NETSTOR_OFFLOADS", "toyoff")
    from netstor import offloads
    offloads.reset()
    yield
    offloads.reset()
    for m in [m for m in sys.modules if m == "toyoff" or m.startswith("toyoff.")]:
        del sys.modules[m]


def _frame(op, count=0, dport=7499):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    payload = struct.pack("!BBH", op, 0, count) + b"storage message"
    return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:fe")
                 / IP(src="10.1.0.1", dst="10.2.0.7", ttl=64)
                 / UDP(sport=40000, dport=dport) / payload)


def test_toy_offload_joins_pipeline_model_and_config(toy):
    from netstor.api import Device
    from netstor.build import build_core
    from netstor.model.dataplane import DataplaneModel
    from netstor.programs import default_pipeline
    pl = default_pipeline()
    assert [p.name for p in pl.programs][-1] == "toy"
    assert pl.programs[-1].udp_port == 7499
    model = DataplaneModel(pl)
    dev = Device.open("model", schema=build_core(pl).schema, model=model)
    dev.apply({"tables": {"l3.routes": {"entries": [
                  {"prefix": "10.2.0.0/16", "action": "route",
                   "params": {"port": 1, "dmac": "02:00:00:00:00:07",
                              "smac": "02:00:00:00:00:fe"}}]}},
               "toy": {"start": {3: 40}}})
    assert model.process(_frame(3), 0) == []        # not trusted yet: dropped, counted
    assert dev.counters("toy.trust.")["toy.trust.miss"] == 1
    dev.apply({"programs": {"toy": {"trusted_ports": [0]}}})
    counts = []
    for op in (3, 3, 5, 3):
        (out,) = model.process(_frame(op), 0)
        assert out.port == 1                       # routed by L3 (routed_by_l3)
        counts.append(struct.unpack_from("!H", out.frame, 14 + 20 + 8 + 2)[0])
    assert counts == [41, 42, 1, 43]               # the independent count, from the preset
    assert dev.bank("toy.counts").read(3) == 43


def test_toy_offload_on_the_wire(toy, tmp_path):
    """In a fresh process (the registry and the scapy bindings are made once per process)."""
    import os
    import subprocess
    code = textwrap.dedent(f"""
        import struct
        from scapy.layers.l2 import Ether
        from netstor.wire import HEADERS
        from netstor.wire.layers import layer_for
        from netstor.test_offload_seam import _frame
        assert HEADERS["netstor_toy"].fields == (("op", 8), ("flag", 8), ("count", 16))
        L = layer_for("netstor_toy")
        pkt = Ether(_frame(1, count=9))
        assert pkt.haslayer(L) and pkt[L].count == 9 and pkt[L].op == 1, pkt.show(dump=True)
        print("ok")
        """)
    env = dict(os.environ, PYTHONPATH=str(tmp_path), NETSTOR_OFFLOADS="toyoff")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_toy_offload_served_and_loaded(toy, tmp_path):
    from netstor.agent.load import run_load
    from netstor.agent.server import Server
    with Server(tmp_path / "db", bind="127.0.0.1", port=0, workers=1, server_id=5,
                sync=False, toy_port=0) as srv:
        port = srv.offload_address("toy")[1]
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(2)
        s.sendto(b"\x09" + bytes(30), ("127.0.0.1", port))    # not a toy request: dropped
        r = run_load(f"127.0.0.1:{port}", requests=20, scheme="toy", toy_flag=1, seed=3)
        s.close()
        st = srv.stats()
    assert r["replies"] == r["sent"] == 20 and r["toy"] == {"unwrapped": 20}
    assert r["by_server"] == {"5": r["by_server"]["5"]}
    assert st["toy_received"] == 21 and st["toy_replies"] == 20 and st["toy_dropped"] == 1


def _code_names(path):
    """Identifiers and non-docstring string constants of a module (not comments/docs)."""
    tree = ast.parse(path.read_text())
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docs.add(id(body[0].value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            yield node.id
        elif isinstance(node, ast.Attribute):
            yield node.attr
        elif isinstance(node, ast.alias):
            yield node.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docs:
            yield node.value


#: names that are ordinary words there, not an offload of that name (the bench's process
#: priority, os.nice, is not the NICE offload)
_ORDINARY = {"rtl/netstor/bench/synth.py": {"nice", "NETSTOR_BENCH_NICE"}}


def test_generic_modules_name_no_offload():
    from netstor.offloads import offloads
    names = [o.name for o in offloads()]
    root = repo_root()
    bad = []
    for top in ("rtl", "sim", "sw"):
        for f in (root / top / "netstor").rglob("*.py"):
            rel = f.relative_to(root).as_posix()
            if "/offloads/" in rel or f.name.startswith("test_"):
                continue
            for n in _code_names(f):
                if n in _ORDINARY.get(rel, ()):
                    continue
                hit = [o for o in names if o in n.lower()]
                if hit:
                    bad.append(f"{rel}: {n!r}")
    assert not bad, "generic modules that name an offload:\n" + "\n".join(sorted(set(bad)))
