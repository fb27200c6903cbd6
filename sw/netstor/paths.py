"""Where the checkout and its build folder are: one place instead of ``parents[N]`` in every
module.

The package is installed in editable mode from a checkout (``make`` runs ``pip install -e .``),
so the checkout is found from this file; an installed wheel has no checkout, and only the parts
that need one (RTL generation, XLS builds, cocotb, the docs check) ask for it.

* ``NETSTOR_ROOT`` overrides the checkout (a wheel install pointed at a checkout).
* ``NETSTOR_BUILD`` overrides the build folder (default ``<checkout>/build``): two jobs that
  must not share Verilator builds give each its own.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path

__all__ = ["repo_root", "build_dir", "NoCheckout"]


class NoCheckout(RuntimeError):
    """The package runs from a wheel and the job needs the source checkout."""


def _is_root(d: Path) -> bool:
    return (d / "pyproject.toml").is_file() and (d / "rtl").is_dir() and (d / "hls").is_dir()


@functools.lru_cache(maxsize=None)
def repo_root() -> Path:
    """The checkout: ``NETSTOR_ROOT``, else the first folder above this file (an editable
    install) or above the working directory that holds ``pyproject.toml``, ``rtl/`` and
    ``hls/``."""
    env = os.environ.get("NETSTOR_ROOT")
    if env:
        return Path(env).resolve()
    for start in (Path(__file__).resolve(), Path.cwd().resolve()):
        for d in (start, *start.parents):
            if _is_root(d):
                return d
    raise NoCheckout("no netstor checkout found (set NETSTOR_ROOT to one): this job needs "
                     "the sources (rtl/, hls/), not only the installed package")


def build_dir(*parts) -> Path:
    """``<build>/<parts...>``; the build folder is ``NETSTOR_BUILD`` or ``<checkout>/build``."""
    env = os.environ.get("NETSTOR_BUILD")
    base = Path(env).resolve() if env else repo_root() / "build"
    return base.joinpath(*parts)
