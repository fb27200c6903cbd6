"""The packet header vector (PHV): every field a program can read or write, laid out once.

No hardware dependencies: this module is used by the gateware, the golden model, the tests and
the host schema alike.

Byte order: every header field is big-endian on the wire (network order). A field of ``w`` bits
at byte offset ``o`` of its header holds the integer formed by the wire bytes ``o..`` read
most-significant byte first. In the PHV a field is an unsigned integer of ``w`` bits.

The parser fills fixed headers (``eth``, ``vlan``, ``ipv4``, ``udp``) and a 42-byte window
``app`` that starts right after the UDP header (42 = a 16-byte key after a 26-byte offload
header, e.g. NetRS's; it is the most the two-beat window holds behind a VLAN tag and 60 bytes of
IPv4: 18 + 60 + 8 + 42 = 128). Programs declare their storage header as
named fields inside ``app`` (see :class:`netstor.lang.program.HeaderLayout`); the window is a
union of all programs' headers and only the program whose UDP port matched
(``meta.hdr_type``) should read it.

Window layout of the header area (first 128 bytes of the frame)::

    0      12   (16)  14|18          +IHL*4      +8          +50
    | dst | src |vlan| type | IPv4 (20..60 B) | UDP (8 B) | app window (42 B) |

Writable fields are written back into the frame by the deparser; read-only fields (lengths,
protocol, version, checksums) are recomputed or preserved by it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PhvField", "HEADER_FIELDS", "META_FIELDS", "APP_BYTES", "WINDOW_BYTES",
           "HDR_TYPE_NONE", "PARSE_OK", "PARSE_ERRORS", "Phv"]

#: bytes of the application header window after the UDP header
APP_BYTES = 42
#: bytes of the frame the parser looks at (two 512-bit beats)
WINDOW_BYTES = 128

HDR_TYPE_NONE = 0

#: parse error codes (``meta.parse_error``); 0 means the layers marked valid parsed cleanly
PARSE_OK = 0
PARSE_ERRORS = {
    1: "ipv4_version",     # EtherType says IPv4 but version != 4
    2: "ipv4_ihl",         # IHL < 5
    3: "ipv4_checksum",    # header checksum does not verify
    4: "ipv4_length",      # total length < IHL*4 or larger than the frame
    5: "udp_length",       # UDP length < 8 or larger than the IPv4 payload
    6: "ipv4_fragment",    # a non-first fragment or more-fragments set: no UDP header to parse
}


@dataclass(frozen=True)
class PhvField:
    name: str            # dotted name, e.g. "ipv4.ttl"
    width: int
    writable: bool = True
    header: str | None = None    # header it belongs to ("eth", "vlan", "ipv4", "udp") or None
    offset: int | None = None    # byte offset inside its header (wire position), if any
    doc: str = ""

    @property
    def key(self):
        """Name usable as a Verilog/struct identifier."""
        return self.name.replace(".", "__")


def _hdr(header, fields):
    out, off = [], 0
    for name, width, writable in fields:
        out.append(PhvField(f"{header}.{name}", width, writable, header, off // 8))
        off += width
    return out


HEADER_FIELDS = (
    _hdr("eth", [("dst", 48, True), ("src", 48, True), ("type", 16, False)]) +
    _hdr("vlan", [("tci", 16, True), ("type", 16, False)]) +
    _hdr("ipv4", [("ver_ihl", 8, False), ("tos", 8, True), ("total_len", 16, False),
                  ("ident", 16, True), ("flags_frag", 16, False), ("ttl", 8, True),
                  ("proto", 8, False), ("csum", 16, False), ("src", 32, True),
                  ("dst", 32, True)]) +
    _hdr("udp", [("sport", 16, True), ("dport", 16, True), ("len", 16, False),
                 ("csum", 16, False)]) +
    [PhvField("app", APP_BYTES * 8, True, "app", 0,
              "application (storage) header window; programs name fields inside it")]
)

META_FIELDS = [
    PhvField("meta.ingress_port", 4, False, doc="input the packet came from (see Datapath)"),
    PhvField("meta.pkt_len", 14, False, doc="frame length in bytes (without FCS)"),
    PhvField("meta.recirc_count", 3, False, doc="times this packet was recirculated"),
    PhvField("meta.arrival", 32, False, doc="cycle counter when the packet entered the parser"),
    PhvField("meta.vlan_valid", 1, False),
    PhvField("meta.ipv4_valid", 1, False, doc="IPv4 header present and well-formed"),
    PhvField("meta.udp_valid", 1, False, doc="UDP header present and well-formed"),
    PhvField("meta.hdr_type", 4, False, doc="program whose UDP port matched (0: none)"),
    PhvField("meta.parse_error", 3, False, doc="see PARSE_ERRORS; 0 if none"),
    PhvField("meta.bridge", 32, True, doc="carried across recirculation, 0 on first pass"),
    PhvField("meta.egress_port", 4, True, doc="unicast output; initialised to the default path"),
    PhvField("meta.drop", 1, True, doc="drop the packet (counted per reason by the program)"),
    PhvField("meta.mcast_group", 12, True, doc="non-zero: replicate through this group "
             "(up to 4,096 groups)"),
    PhvField("meta.recirc", 1, True, doc="send to the recirculation path instead of egress"),
    PhvField("meta.clone", 1, True, doc="also send a copy to the recirculation path"),
    PhvField("meta.rid", 16, False, doc="egress only: the copy's replication id"),
    PhvField("meta.truncate", 1, True, doc="the copy leaves header-only (the copy-lane core's "
             "truncator; the bitmap core ignores it)"),
]


class Phv:
    """The full PHV of a pipeline: platform fields plus the programs' own metadata."""

    def __init__(self, user_meta=()):
        self.fields: dict[str, PhvField] = {}
        for f in list(HEADER_FIELDS) + list(META_FIELDS) + list(user_meta):
            if f.name in self.fields:
                raise ValueError(f"PHV field {f.name!r} declared twice")
            self.fields[f.name] = f
        self.views = {}   # dotted name -> (base field, lo bit, width) for views into `app`

    def add_view(self, name, base, lo, width):
        if name in self.fields or name in self.views:
            raise ValueError(f"PHV field {name!r} declared twice")
        self.views[name] = (base, lo, width)

    @property
    def width(self):
        return sum(f.width for f in self.fields.values())

    def layout(self):
        """``{key: width}`` in declaration order (for ``data.StructLayout``)."""
        return {f.key: f.width for f in self.fields.values()}
