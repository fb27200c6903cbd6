"""Golden model of the netstor data plane (pure Python, cycle-free).

See :mod:`netstor.model.dataplane` (the interpreter, the reference),
:mod:`netstor.model.compiled` (the same data plane generated as Python code, ``docs/model.md``)
and ``docs/dataplane-spec.md``.
"""
from .dataplane import DataplaneModel, Output, MAX_FRAME, ones_add, ipv4_header_checksum
from .compiled import CompiledModel

__all__ = ["DataplaneModel", "CompiledModel", "Output", "MAX_FRAME", "ones_add",
           "ipv4_header_checksum"]
