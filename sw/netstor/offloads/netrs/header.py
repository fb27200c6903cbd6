"""The NetRS header between UDP and the storage message, declared once: the agents, the wire
tools (:func:`wire`) and the data-plane program (:data:`PROGRAM_VIEW`) all take it from here.

Two layouts (paper 5.1), both big-endian, told apart by the 48-bit magic field ``mf``:

* request, 15 bytes: ``rid`` (16, RSNode id: 0 from the client, the ToR fills it), ``mf``
  (48), ``rv`` (32, retaining value: 0 from the client, set by the RSNode at selection:
  timestamp, the group's time unit and EWMA weight, :mod:`.formats`), ``rgid`` (16, replica
  group), ``avail`` (8, bit k = slot k of the group may be chosen). ``mf``: ``M_REQ`` from
  the client, ``f(M_RESP)`` after the RSNode selected, ``f(M_DRS)`` after degraded replica
  selection.
* response, 26 bytes: ``rid``, ``mf``, ``rv`` (echoed), ``sm`` (32, source marker: 0 from
  the server, the ToR fills it), ``ssl`` (16, = 8, the length of the server status), then the
  server status: ``ss_sid`` (16, server id), ``ss_q`` (16, queue length, integer count,
  saturated at 0xFFFF), ``ss_t`` (32, service time of this request in nanoseconds, saturated
  at 0xFFFFFFFF = 4.29 s). ``mf``: ``M_RESP`` / ``M_DRS`` from the server (``f^-1`` of the
  request's), ``M_MON`` after the RSNode (or a ToR) saw it.

Differences from the paper's widths: RV is 4 bytes, not 2 (a 16-bit timestamp wraps: at
67.1 ms in 1.024 us ticks, and it leaves no room for the group's unit and weight the response
needs); the server status (variable length in the paper, SSL says how long) is 8 bytes.

Server ids. The paper leaves the server status's content and length to the selection
algorithm (SS is variable, SSL gives its length); ours is 8 bytes with a 16-bit server id, so
the wire carries ids 0..65,535 and no longer status is needed for more servers. The data
plane keeps per-server state, and has ``rs.servers`` entries and replica-group slots, for ids
below ``SERVERS`` = 2^``SID_BITS`` = 1,024 (10 bits through the program: the group's slots,
the chosen id carried across recirculation, the state index); a response with a larger id is
not learnt from. Configurations number servers from 1 (``config.server_ids``: a storage agent
left at its default id 0 cannot pollute a real server's state), so a plan holds up to 1,023
servers. (Before: 6 bits, 64 ids, 63 servers.)
"""
from __future__ import annotations

from typing import NamedTuple

from netstor.wire.header import Header

NETRS_UDP_PORT = 7432
MASK48 = (1 << 48) - 1
M_REQ, M_RESP, M_MON, M_DRS = 0x4E5253524551, 0x4E5253525350, 0x4E52534D4F4E, 0x4E5253445253
DRS_RID = 0xFFFF
SID_BITS = 10             # server ids in the data plane: 0 .. SERVERS - 1
SERVERS = 1 << SID_BITS
NR = 8                   # replicas per group


def f(m):
    """The magic of a request after selection (``f`` is XOR with all ones: an involution)."""
    return m ^ MASK48

__all__ = ["NETRS_UDP_PORT", "SID_BITS", "SERVERS", "NR", "M_REQ", "M_RESP", "M_MON", "M_DRS",
           "DRS_RID", "f", "f_inv",
           "REQ_LEN", "RESP_LEN", "SSL", "REQ_FIELDS", "RESP_FIELDS", "COMMON_FIELDS",
           "HEADER", "RsRequest", "RsResponse", "kind", "KIND_NAMES", "ns_to_ss_t", "PROGRAM_VIEW",
           "wire",
           "REQUEST_MAGICS", "RESPONSE_MAGICS"]

COMMON_FIELDS = [("rid", 16), ("mf", 48), ("rv", 32)]
REQ_FIELDS = COMMON_FIELDS + [("rgid", 16), ("avail", 8)]
RESP_FIELDS = COMMON_FIELDS + [("sm", 32), ("ssl", 16), ("ss_sid", 16), ("ss_q", 16),
                               ("ss_t", 32)]
#: the program's view of both layouts: the common part, 32 bits that are the request's
#: group/availability or the response's source marker, then the response's server status
PROGRAM_VIEW = COMMON_FIELDS + [("x", 32)] + RESP_FIELDS[len(COMMON_FIELDS) + 1:]
SSL = 8
SS_T_MAX = 0xFFFF_FFFF

#: magic value -> (name, layout): what a packet with that magic is
KIND_NAMES = {M_REQ: ("request", "request"), f(M_RESP): ("selected request", "request"),
              f(M_DRS): ("DRS request", "request"), M_RESP: ("response", "response"),
              M_MON: ("monitored response", "response"), M_DRS: ("DRS response", "response")}
#: the header, declared once: the common part, then the layout the magic ``mf`` selects
HEADER = Header("netrs", COMMON_FIELDS, selector="mf", variants=[
    (m, name, (REQ_FIELDS if lay == "request" else RESP_FIELDS)[len(COMMON_FIELDS):])
    for m, (name, lay) in KIND_NAMES.items()])
_REQ, _RESP = HEADER.layout(M_REQ), HEADER.layout(M_RESP)
REQ_LEN, RESP_LEN = _REQ.size, _RESP.size          # 15, 26
REQUEST_MAGICS = tuple(m for m, (_, lay) in KIND_NAMES.items() if lay == "request")
RESPONSE_MAGICS = tuple(m for m, (_, lay) in KIND_NAMES.items() if lay == "response")


def f_inv(m):
    """The inverse of ``f`` (``f`` is an involution: XOR with all ones)."""
    return m ^ MASK48


def kind(mf):
    """``(name, layout)`` of a magic value; ``(None, None)`` for an unknown one."""
    return KIND_NAMES.get(mf, (None, None))


def ns_to_ss_t(ns):
    """A service time in nanoseconds as the ``ss_t`` field (saturated at 0xFFFFFFFF)."""
    return max(0, min(SS_T_MAX, int(ns)))


def _mf(b):
    return int.from_bytes(b, "big")


class RsRequest(NamedTuple):
    rgid: int
    avail: int = 0xFF
    rid: int = 0
    mf: int = M_REQ
    rv: int = 0

    def pack(self) -> bytes:
        return _REQ.pack((self.rid, self.mf, self.rv, self.rgid, self.avail))

    @classmethod
    def unpack(cls, data) -> "RsRequest":
        if len(data) < REQ_LEN:
            raise ValueError(f"{len(data)} bytes: shorter than the {REQ_LEN}-byte NetRS "
                             "request header")
        rid, mf, rv, rgid, avail = _REQ.unpack(data)
        return cls(rgid=rgid, avail=avail, rid=rid, mf=mf, rv=rv)

    def response(self, server_id, queue_len, service_ns) -> "RsResponse":
        """The server's response header: rid and rv echoed, ``mf = f^-1(mf)``, sm 0, ssl 8,
        the status (queue length saturated at 0xFFFF, service time in ns saturated at
        0xFFFFFFFF)."""
        return RsResponse(rid=self.rid, mf=f_inv(self.mf), rv=self.rv, sm=0, ssl=SSL,
                          ss_sid=server_id & 0xFFFF, ss_q=max(0, min(0xFFFF, queue_len)),
                          ss_t=ns_to_ss_t(service_ns))


class RsResponse(NamedTuple):
    rid: int
    mf: int
    rv: int
    sm: int = 0
    ssl: int = SSL
    ss_sid: int = 0
    ss_q: int = 0
    ss_t: int = 0

    def pack(self) -> bytes:
        return _RESP.pack(self)

    @classmethod
    def unpack(cls, data) -> "RsResponse":
        if len(data) < RESP_LEN:
            raise ValueError(f"{len(data)} bytes: shorter than the {RESP_LEN}-byte NetRS "
                             "response header")
        return cls(*_RESP.unpack(data))


def peek_mf(data):
    """The magic field of a NetRS datagram (None when shorter than the common 12 bytes)."""
    return _mf(data[2:8]) if len(data) >= 12 else None


def wire(register):
    """Declare the header to the wire registry: the layout chosen by the magic, the storage
    message dissected behind it."""
    register("netstor_netrs", NETRS_UDP_PORT, HEADER.fields, reply_sport=True,
             selector=HEADER.selector, variants=HEADER.variants,
             hex_fields=("mf", "sm"), info=("rid", "rgid", "avail", "ss_sid", "ss_q", "ss_t"),
             inner="netstor", title="NetRS (in-network replica selection)")
