"""The package's layers point one way, and no two of its parts import each other.

The import graph is read from the source (every ``import`` statement, top-level or inside a
function, tests excluded), so a circle hidden in a function-local import is found too.

Parts are the package's folders (``netstor.lang``, ``netstor.gateware``, ...; every offload is
a part of its own), ranked by ``LAYERS``: a module may import its own part and parts of lower
rank, never a higher one. Offloads sit on top; generic parts reach them only through the
registry (``netstor.offloads``), which imports them by name at run time.
"""
from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

from netstor.paths import repo_root

#: rank of each part, lowest first; parts of equal rank must not import each other
LAYERS = [
    ["netstor.paths", "netstor.apitoken", "netstor.wire.header", "netstor.wire.checksum"],
    ["netstor.offload"],
    ["netstor.offloads"],
    ["netstor.lang"],
    ["netstor.gateware", "netstor.model"],
    ["netstor.elements"],
    ["netstor.programs"],
    ["netstor.build", "netstor.driver", "netstor.proto", "netstor.hls", "netstor.lincheck"],
    ["netstor.sim"],
    ["netstor.bench"],
    ["netstor.wire", "netstor.config"],
    ["netstor.api"],
    ["netstor.compiler"],
    ["netstor.agent"],
    ["netstor.testbed", "netstor.controller"],
    ["netstor.cluster"],
    ["netstor.cli", "netstor.experiments", "netstor.evaluation"],
    ["netstor.offloads.*"],
]


def _rank(part):
    for i, layer in enumerate(LAYERS):
        if part in layer:
            return i
    if part.startswith("netstor.offloads."):
        return len(LAYERS) - 1
    raise KeyError(part)


def _roots():
    """The three folders the package is laid over (setup.py)."""
    return [repo_root() / top / "netstor" for top in ("rtl", "sim", "sw")]


def _modules():
    """``{module name: path}`` of every non-test module of the package."""
    out = {}
    for root in _roots():
        for f in root.rglob("*.py"):
            rel = f.relative_to(root.parent).with_suffix("")
            if rel.name.startswith(("test_", "cocotb_")) or rel.name == "conftest":
                continue
            name = ".".join(rel.parts)
            if name.endswith(".__init__"):
                name = name[: -len(".__init__")]
            out[name] = f
    return out


def part_of(mod):
    """The part a module belongs to: the most specific ``LAYERS`` entry that prefixes it; an
    offload's modules are the part ``netstor.offloads.<name>``."""
    parts = mod.split(".")
    if len(parts) >= 3 and parts[1] == "offloads":
        return ".".join(parts[:3])
    best = None
    for layer in LAYERS:
        for p in layer:
            if (mod == p or mod.startswith(p + ".")) and (best is None or len(p) > len(best)):
                best = p
    return best or ".".join(parts[:2])


def _imports(name, path):
    tree = ast.parse(path.read_text(), str(path))
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            yield mod, node.lineno
            for a in node.names:              # `from netstor.x import y` where y is a module
                yield f"{mod}.{a.name}", node.lineno


def import_edges():
    mods = _modules()
    edges = []
    for name, path in mods.items():
        for target, line in _imports(name, path):
            if target in mods and target != name:
                edges.append((name, target, f"{path}:{line}"))
    return edges


def test_no_circle_between_parts():
    graph = {}
    for a, b, _ in import_edges():
        pa, pb = part_of(a), part_of(b)
        if pa != pb:
            graph.setdefault(pa, set()).add(pb)
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as e:
        # the sorter reports the circle as node <- predecessor; print it as "imports"
        pytest.fail("parts import each other in a circle: "
                    + " -> ".join(reversed(e.args[1])))


def test_layers_point_one_way():
    bad = []
    for a, b, where in import_edges():
        pa, pb = part_of(a), part_of(b)
        if pa == pb:
            continue
        if _rank(pb) >= _rank(pa):
            bad.append(f"{where}: {a} ({pa}) imports {b} ({pb})")
    assert not bad, "imports against the layers:\n" + "\n".join(sorted(bad))


def test_the_checker_sees_a_circle(tmp_path):
    """The graph reader finds function-local and relative imports (a known-bad case)."""
    f = tmp_path / "netstor" / "x" / "__init__.py"
    f.parent.mkdir(parents=True)
    f.write_text("def f():\n    from ..y import z\n    import netstor.lang.expr\n")
    got = [t for t, _ in _imports("netstor.x", f)]
    assert "netstor.y" in got and "netstor.y.z" in got and "netstor.lang.expr" in got
