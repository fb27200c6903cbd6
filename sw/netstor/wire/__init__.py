"""Wire formats of netstor: one registry of every header after UDP
(:mod:`netstor.wire.registry`), scapy layers built from it (:mod:`netstor.wire.layers`) and a
generated Wireshark/tshark Lua dissector (:mod:`netstor.wire.dissector`, committed output
``netstor.lua``). Register a new header with one :func:`register` call in ``registry.py``."""

from .registry import HEADERS, HeaderSpec, make_spec, register, register_program

__all__ = ["HEADERS", "HeaderSpec", "make_spec", "register", "register_program"]
