"""Reference semantics of the replication engine (multicast copy lists) and of truncation.

A multicast group is an ordered list of up to :data:`MAX_COPIES` copies ``(port, rid)``; the
same port may appear any number of times (one copy per replica behind a ToR port). The group
memory ``tm.groups`` holds one word per group (:func:`encode_group`):

=========================== =====================================================
bits                        meaning
=========================== =====================================================
``[0, 5)``                  ``n``: number of copies (values above 16 count as 16)
``[5 + 20 i, 9 + 20 i)``    copy ``i``'s output port (``i < n``)
``[9 + 20 i, 25 + 20 i)``   copy ``i``'s rid
=========================== =====================================================

The packet is stored once; its copies leave in list order, one per clock (the gateware's
:class:`~netstor.gateware.traffic_manager.ReplicationEngine`). :func:`group_copies` gives the
copies a group word makes; a copy whose port is not an output is not made (counted
``tm.bad_port`` by the data plane), an empty group makes none (``tm.mcast_empty``).

Truncation (:func:`truncate_frame`): a copy whose ``meta.truncate`` is set leaves as a header-only
packet: the bytes the deparser writes (Ethernet, VLAN, IPv4 with options, UDP and, for a
program's packet, its ``APP_BYTES`` app window), the payload after them cut, the IPv4 total
length and header checksum, the UDP length and checksum (when it was not 0) fixed. A frame that
is not valid IPv4 leaves unchanged; so does a frame with nothing to cut (its IPv4 packet ends
at or before the header end; Ethernet padding after the IPv4 packet is kept).
"""

from __future__ import annotations

from netstor.lang import APP_BYTES

__all__ = ["MAX_COPIES", "COUNT_BITS", "PORT_BITS", "RID_BITS", "COPY_BITS", "GROUP_BITS",
           "encode_group", "decode_group", "group_copies", "truncate_frame", "header_end"]

#: copies per group
MAX_COPIES = 16
COUNT_BITS = 5
PORT_BITS = 4
RID_BITS = 16
COPY_BITS = PORT_BITS + RID_BITS
#: width of one ``tm.groups`` word
GROUP_BITS = COUNT_BITS + MAX_COPIES * COPY_BITS


def encode_group(copies) -> int:
    """The ``tm.groups`` word of the list ``copies`` (``[(port, rid), ...]``, at most 16)."""
    copies = list(copies)
    if len(copies) > MAX_COPIES:
        raise ValueError(f"a group holds at most {MAX_COPIES} copies, got {len(copies)}")
    word = len(copies)
    for i, (port, rid) in enumerate(copies):
        if not 0 <= port < 1 << PORT_BITS or not 0 <= rid < 1 << RID_BITS:
            raise ValueError(f"copy {i}: port {port} / rid {rid} out of range")
        word |= (port | rid << PORT_BITS) << (COUNT_BITS + COPY_BITS * i)
    return word


def decode_group(word) -> list:
    """Every ``(port, rid)`` the word lists, in order (ports not checked)."""
    n = min(word & ((1 << COUNT_BITS) - 1), MAX_COPIES)
    out = []
    for i in range(n):
        c = word >> (COUNT_BITS + COPY_BITS * i)
        out.append((c & ((1 << PORT_BITS) - 1), (c >> PORT_BITS) & ((1 << RID_BITS) - 1)))
    return out


def group_copies(word, n_outputs):
    """``(copies, bad)``: the copies made (in order) and how many list entries name a port
    ``>= n_outputs`` (not made)."""
    listed = decode_group(word)
    made = [(p, r) for p, r in listed if p < n_outputs]
    return made, len(listed) - len(made)


def _sum16(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = 0
    for i in range(0, len(data), 2):
        s += data[i] << 8 | data[i + 1]
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def header_end(frame: bytes, phv, app_bytes=APP_BYTES) -> int | None:
    """Offset where the headers the deparser writes end, or None (not valid IPv4).
    ``app_bytes``: the app window (``APP_BYTES``; another width only for block tests)."""
    if not phv["meta.ipv4_valid"]:
        return None
    l3 = 18 if phv["meta.vlan_valid"] else 14
    u = l3 + 4 * (phv["ipv4.ver_ihl"] & 15)
    if not phv["meta.udp_valid"]:
        return u
    return u + 8 + (app_bytes if phv["meta.hdr_type"] else 0)


def truncate_frame(frame: bytes, phv, app_bytes=APP_BYTES) -> bytes:
    """``frame`` (a deparsed copy; ``phv`` its PHV) as the header-only packet of the module
    docstring. Lengths and checksums are recomputed from scratch (not incrementally)."""
    end = header_end(frame, phv, app_bytes)
    if end is None:
        return bytes(frame)
    l3 = 18 if phv["meta.vlan_valid"] else 14
    ihl4 = 4 * (phv["ipv4.ver_ihl"] & 15)
    total = int.from_bytes(frame[l3 + 2:l3 + 4], "big")
    if end >= l3 + total:
        return bytes(frame)
    out = bytearray(frame[:end])
    out[l3 + 2:l3 + 4] = (end - l3).to_bytes(2, "big")
    out[l3 + 10:l3 + 12] = b"\0\0"
    out[l3 + 10:l3 + 12] = (~_sum16(bytes(out[l3:l3 + ihl4])) & 0xFFFF).to_bytes(2, "big")
    if phv["meta.udp_valid"]:
        u = l3 + ihl4
        ulen = end - u
        out[u + 4:u + 6] = ulen.to_bytes(2, "big")
        if out[u + 6:u + 8] != b"\0\0":
            out[u + 6:u + 8] = b"\0\0"
            pseudo = bytes(out[l3 + 12:l3 + 20]) + bytes([0, 17]) + ulen.to_bytes(2, "big")
            c = ~_sum16(pseudo + bytes(out[u:end])) & 0xFFFF
            out[u + 6:u + 8] = (c or 0xFFFF).to_bytes(2, "big")
    return bytes(out)
