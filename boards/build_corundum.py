#!/usr/bin/env python3
"""Add netstor to a Corundum checkout as its application block and build a bitstream.

    python boards/build_corundum.py --board AU250 --corundum-dir ~/corundum [--dry-run]

What it does (paths relative to ``$CORUNDUM_DIR/fpga``):

1. Takes netstor's generated Verilog from ``--rtl-dir`` (default ``build/rtl``, made by
   ``make rtl``): ``mqnic_app_block.v`` (the wrapper; generated here from
   ``netstor.build.corundum`` if missing), ``netstor_core.v`` and any other ``*.v`` there (for
   instance the XLS ranking core). Checks that the wrapper declares ``mqnic_app_block`` with
   the requested APP_ID and that its port count matches the board's ``IF_COUNT*PORTS_PER_IF``.
2. Copies them (``--link``: symlinks) into ``app/<name>/rtl/``, the place Corundum keeps
   applications (``mqnic/Alveo/fpga_100g/app`` is Corundum's symlink to ``../../../app``).
3. Creates the build directory ``mqnic/Alveo/fpga_100g/fpga_<BOARD>_app_<name>/`` the way
   Corundum's ``fpga_<BOARD>_app_dma_bench`` twin differs from the plain ``fpga_<BOARD>`` one:
   the plain ``Makefile`` plus ``SYN_FILES += app/<name>/rtl/...`` for our files, and the plain
   ``config.tcl`` with ``APP_ENABLE=1`` and our ``APP_ID`` (DDR stays disabled: netstor does not
   use it, unlike dma_bench). A ``netstor_build.json`` records what went in (with hashes).
4. Runs Corundum's ``make`` there (Vivado on ``PATH``), unless ``--dry-run``, which stops after
   writing the files and prints the command it would run.

Only the Python standard library is needed (plus ``netstor`` when the wrapper must be
generated). Nothing in Corundum's tree is modified except the two new directories.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_APP_ID = 0x4E530001
#: Boards with a Corundum Alveo 100G build directory (fpga/mqnic/Alveo/fpga_100g/fpga_<BOARD>).
BOARDS = ("AU200", "AU250", "AU280", "AU50", "AU55N", "VCU1525")
FPGA_100G = Path("fpga") / "mqnic" / "Alveo" / "fpga_100g"


class BuildError(Exception):
    pass


def _tcl_param(text: str, name: str):
    m = re.search(rf'^\s*dict set params {name}\s+"?([^"\s]+)"?\s*$', text, re.M)
    return m.group(1) if m else None


def _set_tcl_param(text: str, name: str, value: str) -> str:
    pattern = rf'^(\s*dict set params {name}\s+).*$'
    if not re.search(pattern, text, re.M):
        raise BuildError(f"config.tcl has no 'dict set params {name} ...' line to change")
    return re.sub(pattern, lambda m: f'{m.group(1)}"{value}"', text, count=1, flags=re.M)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def collect_rtl(rtl_dir: Path, app_id: int) -> list[Path]:
    """The Verilog files to add, wrapper first; generates the wrapper if it is missing."""
    wrapper = rtl_dir / "mqnic_app_block.v"
    core = rtl_dir / "netstor_core.v"
    if not core.exists():
        raise BuildError(f"{core} is missing: run 'make rtl' in {REPO} first")
    if not wrapper.exists():
        from netstor.build.corundum import mqnic_app_block_verilog
        wrapper.write_text(mqnic_app_block_verilog({"app_id": app_id}))
    if not re.search(r"^\s*module\s+mqnic_app_block\b", wrapper.read_text(), re.M):
        raise BuildError(f"{wrapper} does not declare module mqnic_app_block")
    if not re.search(r"^\s*module\s+netstor_core\b", core.read_text(), re.M):
        raise BuildError(f"{core} does not declare module netstor_core")
    others = sorted(p for p in rtl_dir.glob("*.v") if p not in (wrapper, core))
    return [wrapper, core, *others]


def wrapper_facts(wrapper: Path):
    text = wrapper.read_text()
    app = re.search(r"APP_ID == 32'h([0-9A-Fa-f]{8})", text)
    ports = re.search(r"\(PORT_COUNT == (\d+)\)", text)
    if not app or not ports:
        raise BuildError(f"{wrapper}: not a netstor wrapper (no APP_ID / PORT_COUNT check found)")
    return int(app.group(1), 16), int(ports.group(1))


def prepare(board: str, corundum_dir: Path, rtl_dir: Path, *, name: str = "netstor",
            app_id: int = DEFAULT_APP_ID, link: bool = False, force: bool = False) -> Path:
    """Write the app and build directories; returns the build directory."""
    if board not in BOARDS:
        raise BuildError(f"unknown board {board!r}; known: {', '.join(BOARDS)}")
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise BuildError(f"app name {name!r} must be lower-case letters, digits and '_'")
    top = corundum_dir / FPGA_100G
    base = top / f"fpga_{board}"
    for need in (base / "Makefile", base / "config.tcl", top / "common" / "vivado.mk"):
        if not need.exists():
            raise BuildError(f"{need} not found: is {corundum_dir} a Corundum checkout?")
    if not (top / "app").exists():
        raise BuildError(f"{top / 'app'} not found (Corundum links it to ../../../app)")

    files = collect_rtl(rtl_dir, app_id)
    wrapper_app_id, wrapper_ports = wrapper_facts(files[0])
    if wrapper_app_id != app_id:
        raise BuildError(f"wrapper checks APP_ID 32'h{wrapper_app_id:08X}, build asks for "
                         f"32'h{app_id:08X}: regenerate the RTL or pass --app-id")

    config = (base / "config.tcl").read_text()
    try:
        board_ports = int(_tcl_param(config, "IF_COUNT")) * int(_tcl_param(config, "PORTS_PER_IF"))
    except (TypeError, ValueError):
        raise BuildError(f"{base / 'config.tcl'}: cannot read IF_COUNT / PORTS_PER_IF") from None
    if board_ports != wrapper_ports:
        raise BuildError(f"{board} has {board_ports} port(s) but netstor_core was generated for "
                         f"{wrapper_ports}: generate a {board_ports}-port core first")

    # -- app directory (fpga/app/<name>/rtl) ----------------------------------------------------
    app_rtl = (top / "app").resolve() / name / "rtl"
    app_rtl.mkdir(parents=True, exist_ok=True)
    for f in files:
        dst = app_rtl / f.name
        if dst.is_symlink() or dst.exists():
            dst.unlink()
        if link:
            dst.symlink_to(f.resolve())
        else:
            shutil.copyfile(f, dst)

    # -- build directory ------------------------------------------------------------------------
    build = top / f"fpga_{board}_app_{name}"
    if build.exists() and not force and not (build / "netstor_build.json").exists():
        raise BuildError(f"{build} exists and was not made by this script (use --force)")
    build.mkdir(exist_ok=True)

    makefile = (base / "Makefile").read_text()
    lines = makefile.splitlines()
    syn = [i for i, ln in enumerate(lines) if re.match(r"\s*SYN_FILES\s*\+?=", ln)]
    if not syn:
        raise BuildError(f"{base / 'Makefile'} has no SYN_FILES lines")
    ours = ["", f"# netstor application block (added by boards/build_corundum.py)"]
    ours += [f"SYN_FILES += app/{name}/rtl/{f.name}" for f in files]
    lines[syn[-1] + 1:syn[-1] + 1] = ours
    header = [f"# Generated by netstor boards/build_corundum.py from ../fpga_{board}/Makefile:",
              "# the same build plus the netstor application block.", ""]
    (build / "Makefile").write_text("\n".join(header + lines) + "\n")

    config = _set_tcl_param(config, "APP_ENABLE", "1")
    config = _set_tcl_param(config, "APP_ID", f"32'h{app_id:08X}")
    header = (f"# Generated by netstor boards/build_corundum.py from ../fpga_{board}/config.tcl\n"
              f"# with APP_ENABLE=1 and netstor's APP_ID 32'h{app_id:08X}.\n\n")
    (build / "config.tcl").write_text(header + config)

    manifest = {
        "board": board,
        "base_build_dir": f"fpga_{board}",
        "app_name": name,
        "app_id": f"32'h{app_id:08X}",
        "ports": wrapper_ports,
        "files": [{"name": f.name, "sha256": _sha256(f)} for f in files],
        "linked": link,
    }
    (build / "netstor_build.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return build


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--board", required=True, choices=BOARDS)
    ap.add_argument("--corundum-dir", default=os.environ.get("CORUNDUM_DIR"),
                    help="Corundum checkout (default: $CORUNDUM_DIR)")
    ap.add_argument("--rtl-dir", default=str(REPO / "build" / "rtl"))
    ap.add_argument("--name", default="netstor", help="app name (fpga/app/<name>)")
    ap.add_argument("--app-id", default=f"0x{DEFAULT_APP_ID:08X}", type=lambda s: int(s, 0))
    ap.add_argument("--link", action="store_true", help="symlink the RTL instead of copying it")
    ap.add_argument("--force", action="store_true", help="reuse an existing build directory")
    ap.add_argument("--dry-run", action="store_true",
                    help="write the app and build directories, do not run make")
    ap.add_argument("--target", default="", help="make target (default: Corundum's default, fpga.bit)")
    a = ap.parse_args(argv)
    if not a.corundum_dir:
        ap.error("--corundum-dir or $CORUNDUM_DIR is required")
    try:
        build = prepare(a.board, Path(a.corundum_dir).expanduser(), Path(a.rtl_dir),
                        name=a.name, app_id=a.app_id, link=a.link, force=a.force)
    except BuildError as e:
        print(f"build_corundum: error: {e}", file=sys.stderr)
        return 1
    cmd = ["make", "-C", str(build)] + ([a.target] if a.target else [])
    print(f"build_corundum: {a.board}: build directory {build}")
    if a.dry_run:
        print("build_corundum: dry run; would run: " + " ".join(cmd))
        return 0
    if shutil.which("vivado") is None:
        print("build_corundum: error: vivado is not on PATH (source Vivado's settings64.sh)",
              file=sys.stderr)
        return 1
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main())
