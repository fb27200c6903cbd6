"""Test support for offloads.

:func:`served_model`: a golden model of a pipeline serving its control window on a Unix
socket, as ``netstor switch`` / ``serve-model`` do (for the tests of an offload's CLI hook).

A small offload outside the default bitstream, for the tests of what the generic layers do
with one (``bitstream=False``: ``default_pipeline(extra=...)``, ``make rtl RTL_EXTRA=...``,
the bench of the elements such an offload adds). Every built-in offload is in the bitstream,
so these tests register this one through ``NETSTOR_OFFLOADS``.

``outside_offload(tmp_path, monkeypatch)`` writes the package ``toyx`` (program ``tx`` on UDP
port 7499: an exact table choosing the egress port by a header field, an egress table writing
a field per copy) and registers it; :func:`forget` unregisters it again.
"""
from __future__ import annotations

import contextlib
import json
import sys
import textwrap
from types import SimpleNamespace

NAME, PROGRAM, UDP_PORT = "toyx", "tx", 7499

_INIT = '''
from netstor.offload import Offload

OFFLOAD = Offload(name="toyx", title="a toy offload outside the bitstream", udp_port=7499,
                  program="toyx.program:make", bitstream=False)
'''

_PROGRAM = '''
from netstor.elements import Table
from netstor.lang import Action, F, Program, Set


def make(n_ports=2):
    p = Program("tx", udp_port=7499)
    h = p.header([("op", 8), ("tag", 8), ("pad", 16)])
    forward = Action("forward", {"port": 4}, lambda a: [Set(F.meta.egress_port, a.port)])
    p.add(Table("route", kind="exact", key=[h["op"]], size=16, ways=2, actions=[forward],
                when=p.selected))
    tag = Action("tag", {"tag": 8}, lambda a: [Set(h["tag"], a.tag)])
    p.add_egress(Table("copy", kind="exact", key=[F.meta.rid], size=16, ways=2,
                       actions=[tag], when=p.selected))
    return p
'''


def outside_offload(tmp_path, monkeypatch):
    """Register ``toyx`` (written under ``tmp_path``) for the rest of the test."""
    pkg = tmp_path / NAME
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent(_INIT))
    (pkg / "program.py").write_text(textwrap.dedent(_PROGRAM))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("NETSTOR_OFFLOADS", NAME)
    from netstor import offloads
    offloads.reset()


def forget():
    """Unregister ``toyx`` (call after the monkeypatch is undone, or let the fixture do it)."""
    from netstor import offloads
    offloads.reset()
    for m in [m for m in sys.modules if m.split(".")[0] == NAME]:
        del sys.modules[m]


@contextlib.contextmanager
def served_model(d, pipeline):
    """A golden model of ``pipeline`` (copy-list multicast) serving its control window at
    ``d/sw.sock``, its schema written to ``d/schema.json``; yields a namespace with
    ``target`` (``unix:...``), ``schema`` (the path), ``dev`` (a host-API device on it),
    ``model`` and ``server`` (whose ``lock`` the model's owner takes)."""
    from netstor.api import Device
    from netstor.build import build_core
    from netstor.driver.remote import WindowServer
    from netstor.driver.transports import ModelTransport
    from netstor.model.dataplane import DataplaneModel
    schema = build_core(pipeline).schema
    (d / "schema.json").write_text(json.dumps(schema))
    model = DataplaneModel(pipeline, groups="list")
    srv = WindowServer(ModelTransport(model, schema), str(d / "sw.sock")).start()
    target = f"unix:{d / 'sw.sock'}"
    dev = Device.open(target, schema=schema)
    try:
        yield SimpleNamespace(target=target, schema=d / "schema.json", dev=dev, model=model,
                              server=srv)
    finally:
        dev.close()
        srv.stop()
