"""The XORInc header, declared once (protocol: ``docs/xorinc.md``).

Frame: Ethernet (14) / IPv4 (20, IHL 5, no VLAN) / UDP (8, port :data:`XORINC_UDP_PORT`) /
this 26-byte header / zero pad / chunk data from frame byte :data:`DATA_OFFSET` (128: beat 2
of the data plane's 64-byte beats). Up to :data:`MAX_DATA` (1,024) data bytes per packet; a
4 KiB chunk is 4 packets. ``off`` is the beat offset (64-byte units) of the packet's first data
byte in the chunk. The payload engine's operation id is ``opid`` (the controller gives each
client a range); coefficients never travel in the packet (switch tables keyed by ``code``,
``chunk``, ``src``).

The data plane's program takes ``HEADER.fields``; the agents :class:`XiHeader`,
:func:`frame_payload` / :func:`split`; the scapy layer and the dissector :func:`wire`. Light:
no gateware imports.
"""
from __future__ import annotations

from netstor.wire.header import Header

__all__ = ["XORINC_UDP_PORT", "HEADER", "XI_LEN", "XiHeader", "DATA_OFFSET", "UDP_DATA_OFFSET",
           "PAD", "MAX_DATA", "BEAT", "TYPES", "T_READ", "T_READ_REPLY", "T_REPAIR", "T_PART",
           "T_REPAIRED", "T_UPD_NEW", "T_UPD_OLD", "T_DELTA", "T_ACK", "T_TIMEOUT",
           "F_SHORT", "F_LAST", "F_ERROR", "frame_payload", "split", "wire"]

XORINC_UDP_PORT = 7450

# packet types
T_READ = 1          # client -> data node: read a chunk (normal read)
T_READ_REPLY = 2    # data node -> client: the chunk
T_REPAIR = 3        # client -> each of the k helpers: send your chunk for repair (NetRepair)
T_PART = 4          # helper -> switch: its chunk, a contribution to the repair (engine)
T_REPAIRED = 5      # switch -> requester: the repaired data (the completing PART, rewritten)
T_UPD_NEW = 6       # client -> switch: the new data of a chunk (NetUpdate, engine, coeff 1)
T_UPD_OLD = 7       # data node -> switch: the old data of that chunk (engine, coeff 1)
T_DELTA = 8         # switch -> data node / parity nodes: the delta (scaled per parity)
T_ACK = 9           # node -> requester: delta applied (or data stored)
T_TIMEOUT = 10      # switch -> requester: the operation timed out, its slots were freed
TYPES = {T_READ: "READ", T_READ_REPLY: "READ_REPLY", T_REPAIR: "REPAIR", T_PART: "PART",
         T_REPAIRED: "REPAIRED", T_UPD_NEW: "UPD_NEW", T_UPD_OLD: "UPD_OLD", T_DELTA: "DELTA",
         T_ACK: "ACK", T_TIMEOUT: "TIMEOUT"}

# flags (informative; the data plane does not act on them)
F_SHORT = 0x01      # the packet's data is shorter than a whole chunk part (last packet)
F_LAST = 0x02       # the chunk's last packet
F_ERROR = 0x80      # a node could not serve the request (no such stripe/chunk)

HEADER = Header("xorinc", [
    ("type", 8), ("flags", 8), ("opid", 16),
    ("stripe", 32),
    ("chunk", 8), ("src", 8), ("need", 8), ("code", 8),
    ("off", 16), ("len", 16),
    ("seq", 32),
    ("req_addr", 32), ("req_port", 16),
])
XI_LEN = HEADER.size                     # 26
BEAT = 64                                # bytes per data-plane beat
DATA_OFFSET = 128                        # frame byte where chunk data starts
UDP_DATA_OFFSET = DATA_OFFSET - 42       # 86: after Ethernet 14 + IPv4 20 + UDP 8
PAD = UDP_DATA_OFFSET - XI_LEN           # 60 zero bytes between the header and the data
MAX_DATA = 1024                          # data bytes per packet (16 beats)


class XiHeader(HEADER.tuple_class("_XiHeader")):
    """One XORInc header (``pack()``, ``XiHeader.unpack(data)``)."""
    __slots__ = ()


def frame_payload(header, data=b"") -> bytes:
    """The UDP payload of an XORInc packet: ``header`` (an :class:`XiHeader` or field dict),
    the zero pad, ``data`` (at most :data:`MAX_DATA` bytes), so that the data starts at frame
    byte :data:`DATA_OFFSET`."""
    if len(data) > MAX_DATA:
        raise ValueError(f"{len(data)} data bytes: more than {MAX_DATA} per packet")
    raw = header.pack() if hasattr(header, "pack") else HEADER.pack(**header)
    return raw + bytes(PAD) + bytes(data)


def split(payload):
    """``(XiHeader, data)`` of an XORInc UDP payload; data is ``len`` bytes from the data
    offset. Raises ``ValueError`` when the payload is too short for its header or its ``len``."""
    h = XiHeader.unpack(payload)
    if h.len and len(payload) < UDP_DATA_OFFSET + h.len:
        raise ValueError(f"{len(payload)} bytes: too short for {h.len} data bytes at "
                         f"offset {UDP_DATA_OFFSET}")
    return h, bytes(payload[UDP_DATA_OFFSET:UDP_DATA_OFFSET + h.len])


def wire(register):
    """Declare the header to the wire registry (scapy layer, dissector)."""
    register("netstor_xorinc", XORINC_UDP_PORT, HEADER.fields,
             enums={"type": TYPES}, hex_fields=("flags",),
             info=("type", "opid", "stripe", "chunk", "src", "off", "len"),
             title="XORInc (in-network erasure coding)")
