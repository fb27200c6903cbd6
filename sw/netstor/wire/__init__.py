"""Wire formats of netstor: headers declared once (:mod:`netstor.wire.header`), one registry of
every header after UDP (:mod:`netstor.wire.registry`: the storage protocol, the built-in
programs', and each offload's through its ``wire`` hook), scapy layers built from it
(:mod:`netstor.wire.layers`) and a generated Wireshark/tshark Lua dissector
(:mod:`netstor.wire.dissector`, committed output ``netstor.lua``).

The registry is loaded on first use (``netstor.wire.HEADERS`` ...), not when the package is:
an offload's header module imports :mod:`netstor.wire.header`, and the registry imports the
offloads' headers."""

__all__ = ["HEADERS", "HeaderSpec", "make_spec", "register", "register_program"]


def __getattr__(name):
    if name in __all__:
        from . import registry
        return getattr(registry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
