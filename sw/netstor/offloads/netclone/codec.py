"""NetClone in the storage agents.

Server: requests arrive on the NetClone port behind the 16-byte header (``op`` REQ); the reply
goes back behind the NetClone reply header (op REPLY; clone, group, seq and fidx echoed;
``server_id`` this server's; ``load`` = requests a new request would wait behind once this
reply is sent, so 0 means "a new request starts at once", which the switch reads as idle). A
copy marked ``CLONE_COPY`` that arrives while no worker is free is dropped (``clones_dropped``),
as in the paper: the original is served anyway.

Client: replies behind a NetClone REPLY header are unwrapped (``Completion.head``).
"""
from __future__ import annotations

from netstor.agent.codec import ServerCodec
from netstor.proto import MAGIC

from .header import CLONE_COPY, NC_LEN, NETCLONE_UDP_PORT, OP_REPLY, OP_REQ, NcHeader

__all__ = ["NetCloneCodec"]


class NetCloneCodec(ServerCodec):
    name = "netclone"
    prefix = "nc"
    default_port = NETCLONE_UDP_PORT
    extra_counters = ("clones_dropped",)

    def split_request(self, data):
        if len(data) < NC_LEN or data[0] != OP_REQ:
            return None
        return NcHeader.unpack(data), data[NC_LEN:]

    def admit(self, header, pending, workers):
        if header.clone == CLONE_COPY and pending >= workers:
            return "clones_dropped"        # it would wait: the original is served anyway
        return None

    def reply_header(self, header, server_id, load, service_ns):
        return header.reply(server_id, load).pack()

    def split_reply(self, data):
        if len(data) > NC_LEN and data[0] == OP_REPLY and \
                int.from_bytes(data[NC_LEN:NC_LEN + 2], "big") == MAGIC:
            return NcHeader.unpack(data), data[NC_LEN:]
        return None
