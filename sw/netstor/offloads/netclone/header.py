"""The NetClone header, declared once: the 16 bytes between UDP and the storage message
(drawn in :mod:`.program`). The data-plane program's header view, the agents' pack/unpack
(:class:`NcHeader`), the scapy layer and the Wireshark dissector (:func:`wire`) all come from
``HEADER``. Light: the agents import it without the gateware."""
from __future__ import annotations

from netstor.wire.header import Header

__all__ = ["NETCLONE_UDP_PORT", "OP_REQ", "OP_REPLY", "CLONE_NONE", "CLONE_ORIGINAL",
           "CLONE_COPY", "POLICY_RANDOM", "POLICY_LEAST_LOADED", "SERVERS", "HEADER", "NC_LEN",
           "NcHeader", "split", "wire"]

NETCLONE_UDP_PORT = 7431
OP_REQ, OP_REPLY = 1, 2
CLONE_NONE, CLONE_ORIGINAL, CLONE_COPY = 0, 1, 2
POLICY_RANDOM, POLICY_LEAST_LOADED = 0, 1
SERVERS = 64             # server ids 0..63

HEADER = Header("netclone", [("op", 8), ("clone", 8), ("group", 16), ("seq", 32),
                             ("server_id", 16), ("load", 16), ("fidx", 16), ("rsvd", 16)])
NC_LEN = HEADER.size     # 16


class NcHeader(HEADER.tuple_class("_NcHeader", {"clone": CLONE_NONE})):
    """One NetClone header (``pack()``, ``NcHeader.unpack(data)``)."""
    __slots__ = ()

    def reply(self, server_id, load) -> "NcHeader":
        """The reply header: op REPLY, clone/group/seq/fidx echoed, our id and load."""
        return self._replace(op=OP_REPLY, server_id=server_id & 0xFFFF,
                             load=min(max(0, load), 0xFFFF))


def split(data):
    """``(NcHeader, rest)`` of a NetClone datagram; raises ``ValueError`` if too short."""
    return NcHeader.unpack(data), data[NC_LEN:]


def wire(register):
    """Declare the header to the wire registry (scapy layer, dissector)."""
    register("netstor_netclone", NETCLONE_UDP_PORT, HEADER.fields,
             enums={"op": {OP_REQ: "REQ", OP_REPLY: "REPLY"},
                    "clone": {CLONE_NONE: "none", CLONE_ORIGINAL: "original",
                              CLONE_COPY: "clone"}},
             hex_fields=("fidx",), info=("op", "clone", "group", "seq", "server_id"),
             title="NetClone (request cloning)")
