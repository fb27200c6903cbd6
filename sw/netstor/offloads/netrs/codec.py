"""NetRS in the storage agents.

Server: requests arrive on the NetRS port behind the 13-byte request header; only the magics a
server receives are accepted (``f(M_RESP)`` after a selection, ``f(M_DRS)`` after degraded
selection: a bare ``M_REQ`` never passed an RSNode or a ToR, a response magic is not a request);
anything else is dropped (``rs_dropped``). The reply goes back behind the 22-byte response
header: ``rid`` and ``rv`` echoed, ``mf = f^-1(mf)``, ``sm`` 0 (the ToR fills it), ``ssl`` 8,
``ss_sid`` this server's id, ``ss_q`` the queue a new request would wait in, ``ss_t`` this
request's service time in nanoseconds (32 bits, saturated at 4.29 s; the RSNode converts it
to the replica group's unit).

Client: replies behind a NetRS response header are unwrapped (``Completion.head``).
"""
from __future__ import annotations

from netstor.agent.codec import ServerCodec
from netstor.proto import MAGIC

from .header import (M_DRS, M_RESP, NETRS_UDP_PORT, REQ_LEN, RESP_LEN, RESPONSE_MAGICS,
                     RsRequest, RsResponse, f)

__all__ = ["NetRSCodec"]

_SERVER_RECEIVES = (f(M_RESP), f(M_DRS))


class NetRSCodec(ServerCodec):
    name = "netrs"
    prefix = "rs"
    default_port = NETRS_UDP_PORT

    def split_request(self, data):
        if len(data) < REQ_LEN or int.from_bytes(data[2:8], "big") not in _SERVER_RECEIVES:
            return None
        return RsRequest.unpack(data), data[REQ_LEN:]

    def reply_header(self, header, server_id, load, service_ns):
        return header.response(server_id, load, service_ns).pack()

    def split_reply(self, data):
        if len(data) >= RESP_LEN + 2 and \
                int.from_bytes(data[2:8], "big") in RESPONSE_MAGICS and \
                int.from_bytes(data[RESP_LEN:RESP_LEN + 2], "big") == MAGIC:
            return RsResponse.unpack(data), data[RESP_LEN:]
        return None
