"""Package layout for setuptools: ``netstor`` is one package whose subpackages live in the
project's fixed top-level folders (``rtl/``, ``sim/``, ``sw/``; see pyproject.toml). Every
folder with Python modules below ``<top>/netstor`` is the subpackage of the same dotted name;
modules directly in ``netstor`` live in ``sw/netstor``. Everything else is in pyproject.toml."""
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
TOPS = ("rtl", "sim", "sw")


def layout():
    package_dir = {"netstor": "sw/netstor"}
    for top in TOPS:
        base = HERE / top / "netstor"
        for d in sorted(p for p in base.rglob("*") if p.is_dir()):
            if d.name == "__pycache__" or not any(d.glob("*.py")):
                continue
            name = ".".join(("netstor",) + d.relative_to(base).parts)
            rel = d.relative_to(HERE).as_posix()
            if package_dir.setdefault(name, rel) != rel:
                raise SystemExit(f"setup.py: package {name} is both in {package_dir[name]} "
                                 f"and in {rel}")
        stray = [] if top == "sw" else [f.name for f in base.glob("*.py")
                                        if not f.name.startswith("test_")]
        if stray:
            raise SystemExit(f"setup.py: {top}/netstor/ holds modules {stray}; modules of "
                             f"`netstor` itself live in sw/netstor")
    return package_dir


PACKAGE_DIR = layout()
setup(packages=sorted(PACKAGE_DIR), package_dir=PACKAGE_DIR)
