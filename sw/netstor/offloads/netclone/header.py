"""The NetClone header between UDP and the storage message, for the agents (layout and
constants: the data-plane program ``netstor.offloads.netclone.program``)."""
from __future__ import annotations

import struct
from typing import NamedTuple

__all__ = ["NETCLONE_UDP_PORT", "OP_REQ", "OP_REPLY", "CLONE_NONE", "CLONE_ORIGINAL",
           "CLONE_COPY", "POLICY_RANDOM", "POLICY_LEAST_LOADED", "NC_LEN", "NcHeader",
           "split"]

from netstor.offloads.netclone.program import (NETCLONE_UDP_PORT, OP_REQ, OP_REPLY, CLONE_NONE,  # noqa: F401
                                       CLONE_ORIGINAL, CLONE_COPY, POLICY_RANDOM,
                                       POLICY_LEAST_LOADED, SERVERS)
_FMT = struct.Struct("!BBHIHHHH")
NC_LEN = _FMT.size          # 16


class NcHeader(NamedTuple):
    op: int
    clone: int = CLONE_NONE
    group: int = 0
    seq: int = 0
    server_id: int = 0
    load: int = 0
    fidx: int = 0
    rsvd: int = 0

    def pack(self) -> bytes:
        return _FMT.pack(*self)

    @classmethod
    def unpack(cls, data) -> "NcHeader":
        if len(data) < NC_LEN:
            raise ValueError(f"{len(data)} bytes: shorter than the {NC_LEN}-byte NetClone header")
        return cls(*_FMT.unpack_from(data))

    def reply(self, server_id, load) -> "NcHeader":
        """The reply header: op REPLY, clone/group/seq/fidx echoed, our id and load."""
        return self._replace(op=OP_REPLY, server_id=server_id & 0xFFFF,
                             load=min(max(0, load), 0xFFFF))


def split(data):
    """``(NcHeader, rest)`` of a NetClone datagram; raises ``ValueError`` if too short."""
    return NcHeader.unpack(data), data[NC_LEN:]
