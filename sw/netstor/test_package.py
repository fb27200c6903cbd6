"""netstor is a real package: ``pip wheel .`` builds it with every module of the three source
folders, its metadata declares the dependencies and the console scripts, and the scripts the
editable install put on the virtualenv's PATH run."""
from __future__ import annotations

import email
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from netstor.paths import repo_root

ROOT = repo_root()
SCRIPTS = {"netstor": "netstor.cli:main", "netstor-server": "netstor.agent.server:main",
           "netstor-load": "netstor.agent.load:main"}


def _source_modules():
    """``netstor/...py`` paths the wheel must hold: every module under rtl/, sim/ and sw/'s
    ``netstor`` folders (tests included: they are part of the package folders)."""
    out = set()
    for top in ("rtl", "sim", "sw"):
        base = ROOT / top
        for f in (base / "netstor").rglob("*.py"):
            if "__pycache__" not in f.parts:
                out.add(f.relative_to(base).as_posix())
    return out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "-q", "-w", str(out), str(ROOT)], capture_output=True, text=True,
                       cwd=out)
    assert r.returncode == 0, r.stdout + r.stderr
    (whl,) = out.glob("netstor-*.whl")
    return zipfile.ZipFile(whl)


def test_wheel_holds_every_module(wheel):
    names = set(wheel.namelist())
    missing = sorted(_source_modules() - names)
    assert not missing, f"modules missing from the wheel: {missing}"
    assert "netstor/wire/netstor.lua" in names            # package data (generated dissector)


def test_wheel_metadata(wheel):
    meta_name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    meta = email.message_from_bytes(wheel.read(meta_name))
    requires = {r.split(";")[0].split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip()
                .lower() for r in meta.get_all("Requires-Dist")}
    # what the host and the gateware import at run time
    for dep in ("amaranth", "pyyaml", "lmdb", "scapy", "highspy", "xls-python", "numpy", "tqdm"):
        assert dep in requires, dep
    ep_name = next(n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt"))
    text = wheel.read(ep_name).decode()
    for script, target in SCRIPTS.items():
        assert f"{script} = {target}" in text


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_console_scripts_run(script):
    exe = Path(sys.executable).with_name(script)
    assert exe.exists(), f"{exe}: not installed (the Makefile runs `pip install -e .`)"
    r = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "usage:" in r.stdout
