"""``python -m netstor.build rtl --out build/rtl``: generate the application block.

Writes, only when their text changed (so downstream Verilator builds are reused):

* ``netstor_core.v``: the Amaranth data plane (module ``netstor_core``);
* ``mqnic_app_block.v``: Corundum's application block wrapper around it;
* ``schema.json``: the host schema (registers, counters, memories, tables, programs);
* ``xls_ranking.v``: the XLS ranking core, when a program uses a ``Rank`` element (the board
  build and the simulations take every ``.v`` file of the directory).
"""
from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path


def build_core(pipeline=None, *, extra=(), **kw):
    """The core of ``pipeline`` (default: the default bitstream's programs, plus the offloads
    outside it named in ``extra``, by registry name). The ``copies="ports"`` core (a build
    option) has no payload path: by default it is built without the offloads whose program
    has a payload element (:func:`netstor.programs.payload_offloads`)."""
    from netstor.programs import default_pipeline, payload_offloads
    from netstor.gateware.core import NetstorCore
    if pipeline is not None and extra:
        raise ValueError("build_core: give a pipeline or extra offloads, not both")
    if pipeline is None:
        drop = payload_offloads(extra) if kw.get("copies") == "ports" else ()
        pipeline = default_pipeline(extra=extra, exclude=drop)
    return NetstorCore(pipeline, **kw)


@contextlib.contextmanager
def zero_memories_uninitialised():
    """Within the block, Amaranth's Verilog leaves out the ``initial`` block of a memory whose
    initial contents are all zero.

    Amaranth gives every memory an initial value; ours are declared ``init=[]`` (zeros). Written
    out, a zero memory becomes one ``initial`` assignment per word: NetLR's 128K-slot table alone
    was 131,072 lines (the core's Verilog 8.4 -> 19.1 MB) and about 70 % of the time it took to
    generate. Without the block the contents are the same everywhere the Verilog goes: the
    Verilator builds run with ``--x-initial 0`` (``netstor.sim.harness``), and block RAM and
    UltraRAM power up cleared on the Alveo cards' UltraScale+ parts (UltraRAM cannot be
    initialised at all). Memories with non-zero contents (e.g. a GF table) keep their block.
    Only :func:`core_verilog` uses it; the formal jobs, whose proofs start from the declared
    contents, do not."""
    from amaranth.back import rtlil
    emit = rtlil.ModuleEmitter.emit_memory

    def emit_memory(self, cell_idx, cell):
        if any(cell.init):
            emit(self, cell_idx, cell)

    rtlil.ModuleEmitter.emit_memory = emit_memory
    try:
        yield
    finally:
        rtlil.ModuleEmitter.emit_memory = emit


def core_verilog(core):
    from amaranth.back import verilog
    with zero_memories_uninitialised():
        return verilog.convert(core, name="netstor_core", emit_src=False)


def extra_verilog(core):
    """Verilog the core instantiates besides its own (an element kind's cores, e.g. the XLS
    ranking core of a Rank element): ``{file name: text}``."""
    out = {}
    for e in core.pipeline.elements + core.pipeline.egress_elements:
        out.update(e.extra_verilog())
    return out


def write_if_changed(path: Path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
        return True
    return False


def generate(out: Path, extra=()):
    core = build_core(extra=extra)
    files = {
        "netstor_core.v": core_verilog(core),
        "schema.json": json.dumps(core.schema, indent=1, sort_keys=True) + "\n",
    }
    from netstor.build.corundum import mqnic_app_block_verilog
    files["mqnic_app_block.v"] = mqnic_app_block_verilog({"PORT_COUNT": core.P})
    files.update(extra_verilog(core))
    changed = [n for n, t in files.items() if write_if_changed(out / n, t)]
    return core, changed


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.build")
    ap.add_argument("what", choices=["rtl"])
    ap.add_argument("--out", default="build/rtl")
    ap.add_argument("--extra", default="",
                    help="comma-separated registry names of offloads outside the default "
                         "bitstream to build in too (`make rtl RTL_EXTRA=...`)")
    a = ap.parse_args(argv)
    extra = tuple(x for x in a.extra.split(",") if x)
    try:
        core, changed = generate(Path(a.out), extra)
    except KeyError as e:
        ap.error(str(e.args[0]))
    progs = ", ".join(p.name for p in core.pipeline.programs)
    print(f"netstor: {a.out}: programs {progs}; header-path latency {core.datapath.latency} cycles; "
          f"{len(core.schema.get('memories', []))} memories, "
          f"{len(core.schema.get('counters', []))} counters; "
          f"{'rewrote ' + ', '.join(changed) if changed else 'up to date'}")

