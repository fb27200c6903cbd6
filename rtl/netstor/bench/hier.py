"""The whole core synthesised hierarchically: every distinct module of ``netstor_core`` once.

Why not flattened: ``synth_xilinx -flatten`` on the whole core (8.4 MB of Verilog, 63 modules)
is one WebAssembly Yosys process (one core, a 4 GiB address space, no cache). Measured on an idle
core (``yosys -t``, commit 6087d09): reading and ``proc`` take ~1 min, but each ``opt`` of the
flat design runs its fixpoint loop 40-55 times (``opt`` in ``prepare``: 43 and 55 iterations,
~250 s each; the one in ``coarse``: 40+ iterations), because ``opt_dff`` turns a flip-flop with
a constant input into a constant and the next flip-flop of a chain only in the next iteration:
constant bits ride the delay lines and the 13 stages' PHV registers one register per iteration,
and every iteration walks the whole design (~5 s each, 1.6 GB). Under the CI the process got
~13 % of a core, so the earlier run was still in the memory passes after 85 min. Per module
those chains are short (a module's opt converges in a few iterations), the runs are cached by
their Verilog and two run at a time.

What is done instead (the usual out-of-context flow of an EDA engineer): the generated Verilog is
split into its modules (Amaranth writes one module per instance, so nothing is shared by two
parents); for each module ``M`` a design is built of ``M``'s text and a ``(* blackbox *)`` stub
of each module it instantiates (its port declarations only), ``M`` renamed ``bench_mod`` and its
children ``bench_mod.<child>``. Modules whose text is then identical (``inbuf0..4``,
``dp_out0..3``, ``outq0/1``, ...) are one Yosys run (the cache key is the SHA-256 of that text).
Each run is the bench's standard ``synth_xilinx -family xcup -flatten -noiopad -noclkbuf`` (the
flatten only folds a module's own functions; the stubs stay cells). Whole-core figures: the sum
over modules of (instances x resources); logic depth: the deepest module, where a child's
instance ends and starts paths like a register, and a module's ports start and end paths.

Depth across module boundaries: every module's mapped netlist is joined into one graph (each
child instance's ports tied to its parent's nets, :func:`stitched_depth`) and the same walk is
run on it, so a path from a register in one module through glue logic into another module is
counted whole (``depth.across_boundaries``; ``depth.lut_levels`` is the larger of it and the
deepest module).

What this misses, compared with a flat run:

* **LUT merging across a boundary**: each module was mapped alone, so the LUTs of a path that
  crosses a boundary are the ones mapped on each side; a flat mapping could pack the last LUT
  of one side with the first of the other. The joined depth is an upper bound for such paths.
* **optimisation across a boundary**: a constant or unused port is not propagated, so logic fed
  by a constant input, or driving an output nobody reads (e.g. PHV fields no later stage uses,
  carried by every stage register), is kept. The sum therefore over-counts somewhat; it never
  under-counts logic that the design has.
"""
from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path

TOP_NAME = "bench_mod"

_MOD_RE = re.compile(r"^(\(\*[^\n]*\*\)\n)*module\s+(\\\S+|[A-Za-z_][\w$]*)\s*\(", re.M)


def split_modules(text):
    """``{module name (without the Verilog escape): module text}`` in file order (attribute
    lines right before ``module`` stay with it)."""
    out = {}
    starts = [(m.start(), m.group(2)) for m in _MOD_RE.finditer(text)]
    for i, (s, name) in enumerate(starts):
        e = text.index("\nendmodule", s) + len("\nendmodule")
        out[_bare(name)] = text[s:e] + "\n"
        if i + 1 < len(starts):
            assert e <= starts[i + 1][0], name
    return out


def _bare(name):
    return name[1:] if name.startswith("\\") else name


def _esc(name):
    """The Verilog spelling of a module name (escaped when it is not a simple identifier)."""
    return name if re.fullmatch(r"[A-Za-z_][\w$]*", name) else "\\" + name + " "


def children(mod_text, names):
    """``[(child module, instance name)]`` instantiated in ``mod_text`` (``names``: the
    design's modules)."""
    out = []
    for m in re.finditer(r"^  (\\\S+|[A-Za-z_][\w$]*)\s+(\\\S+|[A-Za-z_][\w$]*)\s*\(",
                         mod_text, re.M):
        t = _bare(m.group(1))
        if t in names:
            out.append((t, _bare(m.group(2))))
    return out


def stub(mod_text):
    """A ``(* blackbox *)`` module with ``mod_text``'s ports only."""
    body = mod_text[mod_text.index("module"):]
    head_end = body.index(";") + 1
    head = body[:head_end]
    if re.search(r"\b(input|output|inout)\b", head):          # ANSI header (xls_ranking)
        return "(* blackbox *)\n" + head + "\nendmodule\n"
    decls = re.findall(r"^\s+(?:input|output|inout)\b[^;]*;", body[head_end:], re.M)
    return "(* blackbox *)\n" + head + "\n" + "\n".join(decls) + "\nendmodule\n"


def instance_counts(mods, top):
    """How many times each module occurs under ``top`` (through every path)."""
    kids = {n: children(t, mods) for n, t in mods.items()}
    count = {}

    def walk(n, k):
        count[n] = count.get(n, 0) + k
        for c, _ in kids[n]:
            walk(c, k)
    walk(top, 1)
    return count, kids


def _rename(text, old, new):
    """Replace module name ``old`` (and ``old.<child>``) by ``new`` in Verilog ``text``."""
    if re.fullmatch(r"[A-Za-z_][\w$]*", old):
        text = re.sub(r"(?<![\w$\\.])" + re.escape(old) + r"(?![\w$.])", new, text)
    # escaped names: "\old " and "\old.child "
    return re.sub(re.escape("\\" + old) + r"(?=[ .])", lambda _m: "\\" + new, text)


def module_design(name, mods, kids):
    """The Verilog synthesised for module ``name``: its text renamed ``bench_mod`` and a
    black-box stub per child (renamed alike). Returns ``(text, [stub module names])``."""
    parts = [mods[name]]
    boxes = []
    for c, _ in kids[name]:
        parts.append(stub(mods[c]))
        boxes.append(c)
    text = "\n".join(parts)
    text = _rename(text, name, TOP_NAME)
    box_names = []
    for c in boxes:
        bn = TOP_NAME + c[len(name):] if c.startswith(name + ".") else c
        box_names.append(bn)
    # top names: make the top a plain identifier so `synth_xilinx -top bench_mod` finds it
    text = text.replace("\\" + TOP_NAME + " ", TOP_NAME + " ", 1)
    return normalise(text, name), box_names


def normalise(text, name):
    """Names that differ between copies of one configuration: Amaranth's per-module dummy
    register (``dump_module$<n>``) and signal names prefixed with the instance's own name
    (``dp_out0_phv`` vs ``dp_out1_phv``), so identical copies give identical text."""
    text = re.sub(r"dump_module\$\d+", "dump_module$0", text)
    leaf = name.rsplit(".", 1)[-1]
    if re.fullmatch(r"[A-Za-z_]\w*", leaf):
        text = re.sub(r"(?<![\w$])" + re.escape(leaf) + r"(?=[_.])", "self", text)
    return text


def design_key(text):
    return hashlib.sha256(text.encode()).hexdigest()[:20]


#: Amaranth's auto-numbered names (``\\port$37058$0 ``: a signal that crosses a module boundary
#: without a name of its own); the numbers come from one counter over the whole elaboration,
#: so a change anywhere renumbers them in modules that did not change
_AUTO_NAME = re.compile(r"\\(port\$\d+\$\d+) ")

PORT_INDEX = "port_index.json"


def port_numbering(text):
    """``(text with every auto-numbered name renamed by its order of first occurrence,
    [the bare names in that order])``: two designs that differ only in that numbering give
    the same text (see :func:`synth_hier`'s equivalents)."""
    order = {}

    def sub(m):
        return f"\\port$#{order.setdefault(m.group(1), len(order))} "
    return _AUTO_NAME.sub(sub, text), list(order)


def plan(core_text, top="netstor_core"):
    """``[{"modules": [names], "instances": n, "verilog": text, "boxes": [...]}]``: one entry
    per distinct module design (identical designs merged, instance counts summed), largest
    Verilog first (the longest runs start first)."""
    mods = split_modules(core_text)
    count, kids = instance_counts(mods, top)
    by_key = {}
    for name in mods:
        if name not in count:
            continue
        text, boxes = module_design(name, mods, kids)
        k = design_key(text)
        e = by_key.setdefault(k, {"modules": [], "instances": 0, "verilog": text,
                                  "boxes": boxes, "key": k})
        e["modules"].append(name)
        e["instances"] += count[name]
    return sorted(by_key.values(), key=lambda e: -len(e["verilog"]))


def script_abc(top):
    """The bench's script with ABC's classic LUT mapper (``abc -luts``, the LUT costs
    ``synth_xilinx`` gives ``abc9``) in place of ``abc9``: used only for a module on which
    ``abc9``'s re-integration hits Yosys 0.70's ``count_id(wire->name) == 0`` assertion (seen on
    the data path's glue module, whose outputs are mostly its inputs and its children's ports
    wired through). Same passes as ``synth_xilinx``'s ``map_luts``/``finalize`` otherwise."""
    return (f"read_verilog -sv design.v\n"
            f"synth_xilinx -family xcup -top {top} -flatten -noiopad -noclkbuf -run :map_luts\n"
            f"opt_expr -mux_undef -noclkinv\n"
            f"abc -luts 2:2,3,6:5,10,20\n"
            f"clean\n"
            f"xilinx_srl -fixed -minlen 3\n"
            f"techmap -map +/xilinx/lut_map.v -map +/xilinx/cells_map.v -D LUT_WIDTH=6\n"
            f"xilinx_dffopt\n"
            f"opt_lut_ins -tech xilinx\n"
            f"clean\n"
            f"blackbox =A:whitebox\n"
            f"tee -q -o stat.json stat -json\n"
            f"write_json netlist.json\n")


ABC9_BUG = "count_id(wire->name) == 0"

_KEEP = ("LUT", "LUT_logic", "LUT_as_memory", "LUT_as_srl", "FF", "RAMB36", "RAMB18",
         "BRAM36_equiv", "URAM", "DSP", "CARRY")


def synth_hier(core_text, out: Path, *, jobs=1, timeout=None, cached_only=False, log=print,
               max_verilog_bytes=None, only=None):
    """Synthesise every distinct module of ``core_text`` (see the module docstring) and sum
    them. ``max_verilog_bytes``: run only designs up to that size (the rest are reported as
    not run; with the cache, a later full run reuses what was done). ``only``: module names.
    Returns the ``"core"`` entry of synth.json."""
    from concurrent.futures import ThreadPoolExecutor
    from . import synth as S

    t0 = time.perf_counter()
    entries = plan(core_text)
    cache = out / "synth_cache"
    work = out / "synth_work" / "core_hier"

    index_file = cache / PORT_INDEX
    try:
        index = json.loads(index_file.read_text()) if index_file.exists() else {}
    except ValueError:
        index = {}
    new_index = {}

    def cached(e):
        for ys in (None, script_abc(TOP_NAME)):
            r = S.run_yosys(e["verilog"], TOP_NAME, work, cache_dir=cache, cached_only=True,
                            boxes=e["boxes"], ys=ys)
            if r.get("ok"):
                return dict(r, recipe="abc (abc9 hit a Yosys assertion on this module)") if ys else r
        return None

    def equivalent(e, norm_key, names):
        """A cached result of a design equal to ``e`` up to the auto-numbered names, with
        ``port_rename`` (its netlist's names -> ``e``'s) for the stitched depth."""
        x = index.get(norm_key)
        if not x or len(x["names"]) != len(names):
            return None
        f = cache / f"{TOP_NAME}-{x['key']}.json"
        if not f.exists():
            return None
        r = json.loads(f.read_text())
        if not r.get("ok"):
            return None
        return dict(r, cached=True, equivalent_of=x["key"],
                    port_rename={a: b for a, b in zip(x["names"], names) if a != b})

    def one(e):
        name = e["modules"][0]
        if (max_verilog_bytes and len(e["verilog"]) > max_verilog_bytes) or (
                only and not set(only) & set(e["modules"])):
            return e, {"ok": False, "error": "not run (size/selection limit)"}
        wd = work / name.replace("netstor_core.", "").replace(".", "_")
        norm, names = port_numbering(e["verilog"])
        norm_key = design_key(norm)
        r = cached(e) or equivalent(e, norm_key, names)
        if r is None:
            r = S.run_yosys(e["verilog"], TOP_NAME, wd, timeout=timeout, cache_dir=cache,
                            cached_only=cached_only, boxes=e["boxes"])
        if r.get("ok") and "equivalent_of" not in r:
            new_index[norm_key] = {"key": r["verilog_sha256"], "names": names}
        if not r.get("ok") and not cached_only:
            logtext = (wd / "yosys.log").read_text(errors="replace") if (
                wd / "yosys.log").exists() else ""
            if ABC9_BUG in logtext or ABC9_BUG in r.get("error", ""):
                r = S.run_yosys(e["verilog"], TOP_NAME, wd, timeout=timeout, cache_dir=cache,
                                boxes=e["boxes"], ys=script_abc(TOP_NAME))
                r["recipe"] = "abc (abc9 hit a Yosys assertion on this module)"
                if r.get("ok"):
                    new_index[norm_key] = {"key": r["verilog_sha256"], "names": names}
        elif not r.get("ok") and cached_only:
            r2 = S.run_yosys(e["verilog"], TOP_NAME, wd, cache_dir=cache, cached_only=True,
                             boxes=e["boxes"], ys=script_abc(TOP_NAME))
            if r2.get("ok"):
                r = dict(r2, recipe="abc (abc9 hit a Yosys assertion on this module)")
        log(f"netstor.bench: core module {name} (x{e['instances']}): " + (
            f"LUT {r['LUT']} FF {r['FF']} BRAM36 {r['BRAM36_equiv']} URAM {r['URAM']} DSP "
            f"{r['DSP']} depth {r['depth']['lut_levels']} ("
            + ("cached" if r.get("cached") else f"{r.get('yosys_seconds')} s") + ")"
            if r.get("ok") else str(r.get("error"))[:160])
            + (" (= a cached design up to auto-numbered names)" if r.get("equivalent_of") else ""))
        return e, r

    if jobs > 1:
        with ThreadPoolExecutor(jobs) as ex:
            done = list(ex.map(one, entries))
    else:
        done = [one(e) for e in entries]
    if new_index:
        cache.mkdir(parents=True, exist_ok=True)
        index.update(new_index)
        index_file.write_text(json.dumps(index) + "\n")
    return summarise_hier(done, time.perf_counter() - t0, cache=cache)


def summarise_hier(done, wall, cache: Path | None = None, top="netstor_core"):
    """The ``"core"`` entry from ``[(plan entry, run_yosys result)]``."""
    from . import synth as S
    cells = {}
    modules = {}
    failed = []
    deepest = None
    seg = {"from_in": (0, None), "to_out": (0, None), "in_to_out": (0, None)}
    yosys_s = 0.0
    for e, r in done:
        name = e["modules"][0]
        if not r.get("ok"):
            failed.append({"module": name, "error": str(r.get("error"))[:300]})
            continue
        n = e["instances"]
        for k, v in r["cells"].items():
            if k.startswith(TOP_NAME) or k in [b.lstrip("\\") for b in e["boxes"]]:
                continue                       # a child's instance: counted as its module
            cells[k] = cells.get(k, 0) + n * v
        d = r["depth"]
        if deepest is None or d["lut_levels"] > deepest[1]["lut_levels"]:
            deepest = (name, d)
        ps = d.get("port_segments", {})
        for k in seg:
            if ps.get(k, 0) > seg[k][0]:
                seg[k] = (ps[k], name)
        yosys_s += r.get("yosys_seconds") or 0
        modules[name] = {"same_as": e["modules"][1:], "instances": n,
                         **{k: r[k] for k in _KEEP if k in r},
                         "lut_levels": d["lut_levels"], "port_segments": ps,
                         "path_from": d.get("path_from", [])[:2],
                         "path_to": d.get("path_to", [])[:2],
                         "comb_dsp_cells": d.get("comb_dsp_cells", 0),
                         "yosys_seconds": r.get("yosys_seconds"),
                         "peak_rss_mib": r.get("peak_rss_mib"),
                         "pass_seconds": r.get("pass_seconds", {}),
                         "cached": r.get("cached", False),
                         **({"recipe": r["recipe"]} if r.get("recipe") else {}),
                         **({"equivalent_of": r["equivalent_of"]} if r.get("equivalent_of")
                            else {})}
    tot = S.summarise(cells)
    out = {"ok": not failed, "method": "hierarchical", "cells": cells, **tot,
           **({"error": f"{len(failed)} of {len(done)} modules not synthesised: "
               + ", ".join(f["module"] for f in failed)[:300]} if failed else {}),
           "modules_distinct": len(done), "modules_instances": sum(e["instances"] for e, _ in done),
           "failed": failed, "yosys_seconds": round(yosys_s, 1), "wall_seconds": round(wall, 1),
           "peak_rss_mib": max((m.get("peak_rss_mib") or 0 for m in modules.values()),
                               default=None),
           "modules": dict(sorted(modules.items(), key=lambda kv: -kv[1]["LUT"]))}
    if deepest:
        out["depth"] = {"lut_levels": deepest[1]["lut_levels"], "module": deepest[0],
                        "path_from": deepest[1].get("path_from", [])[:2],
                        "path_to": deepest[1].get("path_to", [])[:2],
                        "path_cell_types": deepest[1].get("path_cell_types"),
                        "max_cells": deepest[1].get("max_cells"),
                        "comb_dsp_cells": sum(m["comb_dsp_cells"] * m["instances"]
                                              for m in modules.values()),
                        "boundary_bound": {
                            "lut_levels": seg["to_out"][0] + seg["from_in"][0],
                            "to_out": list(seg["to_out"]), "from_in": list(seg["from_in"]),
                            "note": "upper bound on a path that crosses one module "
                                    "boundary: the deepest path into any output port plus "
                                    "the deepest from any input port (paths that pass "
                                    "through a module port to port, in_to_out, chain further)"},
                        "in_to_out_max": list(seg["in_to_out"])}
        if cache is not None:
            try:
                st = stitched_depth(done, cache, top)
            except Exception as ex:            # noqa: BLE001 - reported, not fatal
                st = {"error": repr(ex)[:300]}
            out["depth"]["across_boundaries"] = {
                k: st.get(k) for k in ("lut_levels", "max_cells", "path_cell_types", "path_modules",
                                       "comb_dsp_cells", "cells_joined",
                                       "modules_not_joined", "comb_loops", "error")
                if k in st}
            if "lut_levels" in st and not st.get("modules_not_joined"):
                out["depth"]["lut_levels_within_modules"] = out["depth"]["lut_levels"]
                out["depth"]["lut_levels"] = max(st["lut_levels"], out["depth"]["lut_levels"])
    return out


def stitched_depth(done, cache: Path, top="netstor_core"):
    """Logic depth *across* module boundaries: the mapped netlists of every module (from the
    cache) joined into one graph, each child instance's ports tied to the parent's nets, and
    the bench's depth walk run on it (:func:`netstor.bench.synth.module_depth`). Each module was
    mapped on its own, so a path that crosses a boundary has its LUTs on each side counted as
    mapped there (a flat mapping could merge a LUT or two across the boundary: this is an upper
    bound for those paths). Modules not synthesised stay black boxes."""
    from . import synth as S
    net_of = {}
    ren_of = {}                                # a module taken from an equivalent design:
    for e, r in done:                          # its netlist's auto names -> this design's
        if r.get("ok"):
            gz = cache / f"{TOP_NAME}-{r['verilog_sha256']}.netlist.json.gz"
            for name in e["modules"]:
                net_of[name] = gz
                ren_of[name] = r.get("port_rename") or {}
    loaded = {}
    parent = {}

    def find(b):
        while parent.get(b, b) != b:
            parent[b] = parent.get(parent[b], parent[b])
            b = parent[b]
        return b

    def union(a, b):
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[ra] = rb

    counter = [1000]
    cells_out = {}
    unresolved = []

    def inst(modname, path, portmap):
        gz = net_of.get(modname)
        if gz is None:
            unresolved.append(modname)
            return False
        if gz not in loaded:
            loaded[gz] = S.load_netlist_module(gz, TOP_NAME)
        mod = loaded[gz]
        ren = ren_of.get(modname, {})
        local = {}

        def g(b):
            if not isinstance(b, int):
                return b
            if b not in local:
                counter[0] += 1
                local[b] = counter[0]
            return local[b]
        if portmap is not None:
            for pname, pd in mod.get("ports", {}).items():
                outer = portmap.get(ren.get(pname, pname))
                if outer is None:
                    continue
                for bi, bo in zip(pd.get("bits", []), outer):
                    if isinstance(bi, int) and isinstance(bo, int):
                        union(g(bi), bo)
        else:
            top_ports = {ren.get(pn, pn): {"direction": pd["direction"],
                                           "bits": [g(b) for b in pd["bits"]]}
                         for pn, pd in mod.get("ports", {}).items()}
            cells_out["__ports__"] = top_ports
        for cname, c in mod.get("cells", {}).items():
            t = c["type"].lstrip("\\")
            conns = {ren.get(p, p): [g(b) for b in bits] for p, bits in c["connections"].items()}
            if t.startswith(TOP_NAME + ".") or t == "xls_ranking" or (
                    not t[:1].isupper() and "." in t):
                child = (modname + t[len(TOP_NAME):]) if t.startswith(TOP_NAME + ".") else t
                if inst(child, path + cname.lstrip("\\") + ".", conns):
                    continue
                unresolved_box = dict(c, connections=conns)
                cells_out[path + cname] = unresolved_box
                continue
            cells_out[path + cname] = {"type": c["type"], "connections": conns,
                                       "port_directions": c.get("port_directions", {}),
                                       "parameters": c.get("parameters", {})}
        return True

    inst(top, "", None)
    ports = cells_out.pop("__ports__", {})
    for c in cells_out.values():
        for p, bits in c["connections"].items():
            c["connections"][p] = [find(b) if isinstance(b, int) else b for b in bits]
    for pd in ports.values():
        pd["bits"] = [find(b) if isinstance(b, int) else b for b in pd["bits"]]
    boxes = {c["type"].lstrip("\\") for c in cells_out.values()
             if c["type"].lstrip("\\").startswith(TOP_NAME + ".")
             or c["type"].lstrip("\\") == "xls_ranking"}
    d = S.module_depth({"cells": cells_out, "ports": ports, "netnames": {}}, boxes,
                       full_chain=True)
    mods_on_path = []
    for c in d.pop("path_cells_all", []):
        cut = min([i for i in (c.find("$"), c.find("\\")) if i >= 0], default=len(c))
        m = c[:cut].rstrip(".") or top
        if not mods_on_path or mods_on_path[-1] != m:
            mods_on_path.append(m)
    d["path_modules"] = mods_on_path
    d["cells_joined"] = len(cells_out)
    d["modules_not_joined"] = sorted(set(unresolved))
    # where the deepest path runs: the instance paths of its cells are not kept by
    # module_depth; name the cells' modules instead
    return d
