"""Parser: frame beats -> packet header vector (PHV), one packet per clock.

Implements the "Parser" section of ``docs/dataplane-spec.md``. It looks at the first 128 bytes
of the frame (the first two 512-bit beats), which always hold Ethernet, one optional 802.1Q
tag, IPv4 with up to 40 bytes of options, UDP and the ``APP_BYTES``-byte application window
(18 + 60 + 8 + 42 = 128 bytes at 42, the most the window allows: 128 - 86).

Ports (:class:`Parser`): ``i``, the arbiter's beat stream (:func:`~.axis.flow_signature` of
:func:`~.axis.arb_layout`: never stalled, beats of a packet on consecutive cycles); ``o``, the
PHV stream (:func:`~.axis.flow_signature` of the pipeline's PHV layout); ``orig``, the original
values of every field the deparser may rewrite (for its incremental checksum updates), valid
in the cycle the PHV is on ``o``.

Latency: the PHV of a packet is valid **5 cycles** after the packet's first beat
(``FIRST_TO_PHV``), whatever the packet's length; throughput one PHV per clock (a one-beat
packet every cycle gives a PHV every cycle).

Pipeline: R0 captures the first beat; at the next cycle the window is the first beat plus the
current input beat (the second beat, if the packet has one); R1 holds Ethernet/VLAN and the
bytes from L3 on; R2 holds the IPv4 fields, checksum partial sums and the UDP+app bytes
selected by IHL; R3 registers the checksum fold, the fragment/length checks and each program's
port and length match; R4 takes the decisions (errors, header type) and registers the PHV.
"""

from __future__ import annotations

from amaranth.hdl import Signal, Module, Cat, Const, Mux
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from netstor.lang.phv import APP_BYTES, PARSE_ERRORS

from .axis import flow_signature

__all__ = ["Parser", "FIRST_TO_PHV", "orig_layout"]

FIRST_TO_PHV = 5
#: bytes from the UDP header on that the parser reads (UDP 8 + the application window)
L4N = 8 + APP_BYTES
#: bytes from L3 on: IPv4 with 40 bytes of options, then L4N
L3N = 60 + L4N
if 18 + L3N > 128:
    raise ValueError(f"APP_BYTES {APP_BYTES}: VLAN + IPv4 with options + UDP + the application "
                     f"window ({18 + L3N} bytes) must fit the two-beat window (128 bytes), so "
                     "APP_BYTES <= 42")
ERR = {name: code for code, name in PARSE_ERRORS.items()}


def orig_layout():
    """Original values of the fields the deparser rewrites (for checksum updates)."""
    return data.StructLayout({
        "ver_ihl_tos": 16, "ident": 16, "ttl_proto": 16, "ip_src": 32, "ip_dst": 32,
        "ip_csum": 16, "sport": 16, "dport": 16, "udp_csum": 16, "app": APP_BYTES * 8,
    })


def _be(byte_list):
    """Big-endian value of a list of byte Values (first byte most significant)."""
    return Cat(*reversed(byte_list))


def _bytes(value, n):
    return [value[8 * i:8 * i + 8] for i in range(n)]


class Parser(wiring.Component):
    """Frame beats in (``i``), one PHV per packet out (``o``) with the original field values
    beside it (``orig``); see the module docstring. Declares the run-time UDP port register of
    every program with a storage header and one counter per parse error in ``csr``.

    Latency: ``FIRST_TO_PHV`` = 5 cycles from a packet's first beat on ``i`` to its PHV on
    ``o``. Throughput: one beat per clock in, one PHV per clock out.
    """

    def __init__(self, pipeline, beat_layout, csr):
        self.pipeline = pipeline
        self._csr = csr
        self._beat_layout = beat_layout
        super().__init__({
            "i": In(flow_signature(beat_layout)),
            "o": Out(flow_signature(data.StructLayout(pipeline.phv.layout()))),
            "orig": Out(orig_layout()),
        })
        # run-time UDP ports of the programs with a storage header
        self.udp_ports = {}
        for p in pipeline.programs:
            if p.hdr_type is not None:
                self.udp_ports[p.name] = csr.reg(
                    f"parser.udp_port.{p.name}", 16, "rw", p.udp_port,
                    doc=f"UDP destination port that selects program {p.name}")
        self.err_ctr = {name: csr.counter(f"parser.err.{name}",
                                          doc=f"frames with parse error {name}")
                        for name in ERR}

    def elaborate(self, platform):
        m = Module()
        pl = self.pipeline
        P = pl.n_ports
        i = self.i.payload
        i_valid = self.i.valid
        dw = len(i.data)
        nbytes = dw // 8

        # ---- R0: first beat ------------------------------------------------------------
        in_pkt = Signal()
        with m.If(i_valid):
            m.d.sync += in_pkt.eq(~i.last)
        first = i_valid & ~in_pkt

        def masked(d, keep):
            return Cat(*[Mux(keep[b], d[8 * b:8 * b + 8], 0) for b in range(len(keep))])

        arrival = Signal(32)
        m.d.sync += arrival.eq(arrival + 1)
        D = dict(reset_less=True)        # data registers: no reset (only valid does)
        s0_valid, w0, w0_last = Signal(), Signal(dw, **D), Signal(**D)
        s0_len, s0_port, s0_user = Signal(14, **D), Signal(4, **D), Signal(len(i.user), **D)
        s0_arrival = Signal(32, **D)
        m.d.sync += s0_valid.eq(first)
        with m.If(first):
            m.d.sync += [w0.eq(masked(i.data, i.keep)), w0_last.eq(i.last), s0_len.eq(i.len),
                         s0_port.eq(i.port), s0_user.eq(i.user), s0_arrival.eq(arrival)]
        second = Signal(dw)
        m.d.comb += second.eq(Mux(~w0_last & i_valid, masked(i.data, i.keep), 0))
        window = Cat(w0, second)
        B = _bytes(window, 2 * nbytes)
        if len(B) < 128:
            B = B + [Const(0, 8)] * (128 - len(B))

        # ---- R1: Ethernet, VLAN, bytes from L3 ------------------------------------------
        r1 = dict(valid=Signal(), len=Signal(14, **D), port=Signal(4, **D),
                  user=Signal(len(i.user), **D), arrival=Signal(32, **D),
                  eth_dst=Signal(48, **D), eth_src=Signal(48, **D), eth_type=Signal(16, **D),
                  vlan=Signal(**D), tci=Signal(16, **D), vtype=Signal(16, **D),
                  et=Signal(16, **D), l3=Signal(**D), l3b=Signal(L3N * 8, **D))
        eth_type = _be(B[12:14])
        is_vlan = (eth_type == 0x8100) & (s0_len >= 18)
        vtype = _be(B[16:18])
        et = Mux(is_vlan, vtype, Mux(eth_type == 0x8100, 0, eth_type))
        m.d.sync += [
            r1["valid"].eq(s0_valid), r1["len"].eq(s0_len), r1["port"].eq(s0_port),
            r1["user"].eq(s0_user), r1["arrival"].eq(s0_arrival),
            r1["eth_dst"].eq(_be(B[0:6])), r1["eth_src"].eq(_be(B[6:12])),
            r1["eth_type"].eq(eth_type), r1["vlan"].eq(is_vlan),
            r1["tci"].eq(Mux(is_vlan, _be(B[14:16]), 0)),
            r1["vtype"].eq(Mux(is_vlan, vtype, 0)), r1["et"].eq(et), r1["l3"].eq(is_vlan),
            r1["l3b"].eq(Mux(is_vlan, Cat(*B[18:18 + L3N]), Cat(*B[14:14 + L3N]))),
        ]

        # ---- R2: IPv4 fields, checksum partial sums, UDP/app bytes ------------------------
        L3 = _bytes(r1["l3b"], L3N)
        ver_ihl = L3[0]
        ihl = ver_ihl[0:4]
        hl_words = Mux(ihl < 5, 5, ihl)            # in 32-bit words
        words = [_be(L3[2 * k:2 * k + 2]) for k in range(30)]
        groups = [list(range(g, min(g + 5, 30))) for g in range(0, 30, 5)]
        r2 = dict(valid=Signal(), len=Signal(14, **D), port=Signal(4, **D),
                  user=Signal(len(i.user), **D), arrival=Signal(32, **D),
                  eth_dst=Signal(48, **D), eth_src=Signal(48, **D), eth_type=Signal(16, **D),
                  vlan=Signal(**D), tci=Signal(16, **D), vtype=Signal(16, **D),
                  is_ip=Signal(**D), ip=Signal(160, **D), l4=Signal(L4N * 8, **D),
                  err=Signal(3, **D), parts=[Signal(19, **D) for _ in groups], l3=Signal(**D),
                  ihl=Signal(4, **D))
        for g, idxs in zip(r2["parts"], groups):
            m.d.sync += g.eq(sum(Mux(k < 2 * ihl, words[k], 0) for k in idxs))
        total_len = _be(L3[2:4])
        l3off = Mux(r1["l3"], 18, 14)
        err = Signal(3)
        with m.If((ver_ihl >> 4) != 4):
            m.d.comb += err.eq(ERR["ipv4_version"])
        with m.Elif(ihl < 5):
            m.d.comb += err.eq(ERR["ipv4_ihl"])
        with m.Elif((r1["len"] < l3off + 20) | (total_len < (ihl << 2)) |
                    (l3off + total_len > r1["len"])):
            m.d.comb += err.eq(ERR["ipv4_length"])
        with m.Else():
            m.d.comb += err.eq(0)
        # UDP + app: L4N bytes at l3 + 4*hl_words (hl_words in 5..15)
        l4 = Signal(L4N * 8)
        with m.Switch(hl_words):
            for hw in range(5, 16):
                with m.Case(hw):
                    m.d.comb += l4.eq(Cat(*L3[4 * hw:4 * hw + L4N]))
        m.d.sync += [
            r2["valid"].eq(r1["valid"]), r2["len"].eq(r1["len"]), r2["port"].eq(r1["port"]),
            r2["user"].eq(r1["user"]), r2["arrival"].eq(r1["arrival"]),
            r2["eth_dst"].eq(r1["eth_dst"]), r2["eth_src"].eq(r1["eth_src"]),
            r2["eth_type"].eq(r1["eth_type"]), r2["vlan"].eq(r1["vlan"]),
            r2["tci"].eq(r1["tci"]), r2["vtype"].eq(r1["vtype"]),
            r2["is_ip"].eq(r1["et"] == 0x0800), r2["ip"].eq(Cat(*L3[0:20])),
            r2["l4"].eq(l4), r2["err"].eq(err), r2["l3"].eq(r1["l3"]), r2["ihl"].eq(ihl),
        ]

        # ---- R3: checksum fold and the length/port comparisons, registered ------------------
        IP = _bytes(r2["ip"], 20)
        L4 = _bytes(r2["l4"], L4N)
        total = Signal(22)
        m.d.comb += total.eq(sum(r2["parts"]))
        fold1 = Signal(17)
        m.d.comb += fold1.eq(total[:16] + total[16:])
        udp_len = _be(L4[4:6])
        r3 = {k: Signal.like(v, name=f"r3_{k}", reset_less=(k != "valid"))
              for k, v in r2.items() if k != "parts"}
        m.d.sync += [r3[k].eq(r2[k]) for k in r3]
        csum_ok = Signal(reset_less=True)
        frag = Signal(reset_less=True)
        udp_len_bad = Signal(reset_less=True)
        proto_udp = Signal(reset_less=True)
        m.d.sync += [
            csum_ok.eq((fold1[:16] + fold1[16]) == 0xFFFF),
            frag.eq((_be(IP[6:8]) & 0x3FFF) != 0),
            udp_len_bad.eq((udp_len < 8) | (udp_len > _be(IP[2:4]) - (r2["ihl"] << 2))),
            proto_udp.eq(IP[9] == 17),
        ]
        prog_hit = {}
        for p in pl.programs:
            if p.hdr_type is None:
                continue
            h = prog_hit[p.name] = Signal(name=f"r3_hit_{p.name}", reset_less=True)
            m.d.sync += h.eq((_be(L4[2:4]) == self.udp_ports[p.name]) &
                             (udp_len >= 8 + p.header_bytes))
        default_port = Signal(4, reset_less=True)
        with m.Switch(r2["port"]):
            for k in range(pl.n_inputs):
                with m.Case(k):
                    m.d.sync += default_port.eq(pl.default_egress(k))
        is_recirc = Signal(reset_less=True)
        m.d.sync += is_recirc.eq(r2["port"] == pl.recirc_input)
        r2 = r3

        # ---- R4: the decisions, build the PHV --------------------------------------------
        IP = _bytes(r2["ip"], 20)
        L4 = _bytes(r2["l4"], L4N)
        ip_err = Signal(3)
        m.d.comb += ip_err.eq(Mux(r2["err"] != 0, r2["err"],
                                  Mux(csum_ok, 0, ERR["ipv4_checksum"])))
        ipv4_valid = r2["is_ip"] & (ip_err == 0)
        proto = IP[9]
        flags_frag = _be(IP[6:8])
        ip_total = _be(IP[2:4])
        udp_len = _be(L4[4:6])
        dport = _be(L4[2:4])
        is_udp = ipv4_valid & proto_udp
        udp_err = Signal(3)
        with m.If(~is_udp):
            m.d.comb += udp_err.eq(0)
        with m.Elif(frag):
            m.d.comb += udp_err.eq(ERR["ipv4_fragment"])
        with m.Elif(udp_len_bad):
            m.d.comb += udp_err.eq(ERR["udp_length"])
        udp_valid = is_udp & (udp_err == 0)
        parse_error = Mux(r2["is_ip"], Mux(ip_err != 0, ip_err, udp_err), 0)

        hdr_type = Signal(4)
        m.d.comb += hdr_type.eq(0)
        for p in reversed(pl.programs):
            if p.hdr_type is None:
                continue
            with m.If(udp_valid & prog_hit[p.name]):
                m.d.comb += hdr_type.eq(p.hdr_type)

        phv = Signal(data.StructLayout(pl.phv.layout()))
        f = {fld.name: phv[fld.key] for fld in pl.phv.fields.values()}
        m.d.comb += [
            phv.eq(0),
            f["eth.dst"].eq(r2["eth_dst"]), f["eth.src"].eq(r2["eth_src"]),
            f["eth.type"].eq(r2["eth_type"]),
            f["vlan.tci"].eq(r2["tci"]), f["vlan.type"].eq(r2["vtype"]),
            f["ipv4.ver_ihl"].eq(IP[0]), f["ipv4.tos"].eq(IP[1]),
            f["ipv4.total_len"].eq(ip_total), f["ipv4.ident"].eq(_be(IP[4:6])),
            f["ipv4.flags_frag"].eq(flags_frag), f["ipv4.ttl"].eq(IP[8]),
            f["ipv4.proto"].eq(proto), f["ipv4.csum"].eq(_be(IP[10:12])),
            f["ipv4.src"].eq(_be(IP[12:16])), f["ipv4.dst"].eq(_be(IP[16:20])),
            f["udp.sport"].eq(_be(L4[0:2])), f["udp.dport"].eq(dport),
            f["udp.len"].eq(udp_len), f["udp.csum"].eq(_be(L4[6:8])),
            f["app"].eq(_be(L4[8:L4N])),
            f["meta.ingress_port"].eq(r2["port"]), f["meta.pkt_len"].eq(r2["len"]),
            f["meta.recirc_count"].eq(Mux(is_recirc, r2["user"][0:3], 0)),
            f["meta.bridge"].eq(Mux(is_recirc, r2["user"][3:35], 0)),
            f["meta.arrival"].eq(r2["arrival"]),
            f["meta.vlan_valid"].eq(r2["vlan"]), f["meta.ipv4_valid"].eq(ipv4_valid),
            f["meta.udp_valid"].eq(udp_valid), f["meta.hdr_type"].eq(hdr_type),
            f["meta.parse_error"].eq(parse_error), f["meta.egress_port"].eq(default_port),
        ]
        orig = Signal(orig_layout())
        m.d.comb += [
            orig.ver_ihl_tos.eq(_be(IP[0:2])), orig.ident.eq(_be(IP[4:6])),
            orig.ttl_proto.eq(_be(IP[8:10])), orig.ip_src.eq(_be(IP[12:16])),
            orig.ip_dst.eq(_be(IP[16:20])), orig.ip_csum.eq(_be(IP[10:12])),
            orig.sport.eq(_be(L4[0:2])), orig.dport.eq(dport), orig.udp_csum.eq(_be(L4[6:8])),
            orig.app.eq(_be(L4[8:L4N])),
        ]
        phv_r = Signal.like(phv, name="phv_r", reset_less=True)
        orig_r = Signal.like(orig, name="orig_r", reset_less=True)
        m.d.sync += [self.o.valid.eq(r2["valid"]), phv_r.eq(phv), orig_r.eq(orig)]
        m.d.comb += [self.o.payload.eq(phv_r), self.orig.eq(orig_r)]
        for name, code in ERR.items():
            m.d.comb += self.err_ctr[name].eq(r2["valid"] & (parse_error == code))
        return m
