"""The offload registry: THE place an offload is added.

``BUILTIN`` lists the offloads of the default bitstream, in pipeline order. Others come from
installed distributions (entry-point group ``netstor.offloads``, each entry naming a module
with an ``OFFLOAD``) and from the environment (``NETSTOR_OFFLOADS``: comma-separated module
names, appended in that order). Every generic layer asks :func:`offloads` and names none.
"""
from __future__ import annotations

import functools
import importlib
import os
from importlib.metadata import entry_points

from netstor.offload import Offload

__all__ = ["BUILTIN", "offloads", "get", "reset"]

#: the default bitstream's offloads, in pipeline order (one line per offload)
BUILTIN = [
    "netstor.offloads.netclone",
    "netstor.offloads.netrs",
    "netstor.offloads.netlr",
    "netstor.offloads.xorinc",
    "netstor.offloads.nice",
]


def _load(module):
    mod = importlib.import_module(module)
    off = getattr(mod, "OFFLOAD", None)
    if not isinstance(off, Offload):
        raise TypeError(f"offload module {module} has no OFFLOAD = netstor.offload.Offload(...)")
    return off


def _modules():
    mods = list(BUILTIN)
    for ep in entry_points(group="netstor.offloads"):
        mods.append(ep.value)
    mods += [m.strip() for m in os.environ.get("NETSTOR_OFFLOADS", "").split(",") if m.strip()]
    return list(dict.fromkeys(mods))


@functools.lru_cache(maxsize=None)
def _all():
    out, names, ports = [], {}, {}
    for module in _modules():
        off = _load(module)
        if off.name in names:
            raise ValueError(f"offload name {off.name!r} of {module} is taken by "
                             f"{names[off.name]}")
        if off.udp_port in ports:
            raise ValueError(f"offload {off.name}: UDP port {off.udp_port} is taken by "
                             f"{ports[off.udp_port]}")
        names[off.name], ports[off.udp_port] = module, off.name
        out.append(off)
    return tuple(out)


def offloads():
    """Every registered :class:`~netstor.offload.Offload`, in pipeline order."""
    return _all()


def get(name):
    for off in _all():
        if off.name == name:
            return off
    raise KeyError(f"no offload {name!r}; registered: {[o.name for o in _all()]}")


def reset():
    """Forget the loaded registry (tests that change ``NETSTOR_OFFLOADS``)."""
    _all.cache_clear()
