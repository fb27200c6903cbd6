"""Golden model of the netstor data plane (pure Python, cycle-free).

See :mod:`netstor.model.dataplane` and ``docs/dataplane-spec.md``.
"""
from .dataplane import DataplaneModel, Output, MAX_FRAME, ones_add, ipv4_header_checksum

__all__ = ["DataplaneModel", "Output", "MAX_FRAME", "ones_add", "ipv4_header_checksum"]
