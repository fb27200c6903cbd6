"""The golden model: the whole netstor data plane in pure Python, without cycles.

It executes the same program descriptions (:mod:`netstor.lang`) as the gateware, following
``docs/dataplane-spec.md`` (normative) step by step, and it is the scoreboard of every hardware
test. It was written from the spec alone, not from the gateware.

State is addressed exactly like the hardware's control plane (raw entry words, see the spec's
"Entry encodings"):

================================= ============================= =====================
memory                            depth                         reset
================================= ============================= =====================
``<prog>.<table>``                ``size`` (exact: way*depth+s) 0 (invalid)
``<prog>.<table>.default``        1                             declared default
``<prog>.<bank>``                 bank depth                    0
``tm.mcast``                      ``pipeline.mcast_groups``     0 (empty group)
``tm.groups`` (``groups="list"``) ``pipeline.mcast_groups``     0 (empty group)
================================= ============================= =====================

Registers: ``parser.udp_port.<prog>`` (16 bits) for every program with a storage header.

Counters (the hardware uses the same names): ``in<k>.pkts``, ``in<k>.bytes``,
``in<k>.drop_runt``, ``in<k>.drop_oversize``, ``in<k>.drop_error`` (k = 0..2P),
``parser.err.<name>``, ``tm.drop``, ``tm.mcast_empty``, ``tm.bad_port``, ``tm.recirc_limit``,
``out<q>.pkts``, ``out<q>.bytes`` (q = 0..2P-1), ``<prog>.<table>.hit`` / ``.miss`` (counted
only when the table's ``when`` is true), ``<prog>.<op>.index_oob``.

Usage::

    m = DataplaneModel(default_pipeline())
    m.mem_write("l3.routes", 0, word)            # or writes from netstor.driver.tables
    outs = m.process(frame, ingress_port=0)       # [Output(port, frame, user), ...]
"""

from __future__ import annotations

from dataclasses import dataclass

from netstor.lang import PARSE_ERRORS, APP_BYTES

from .replication import GROUP_BITS, group_copies, truncate_frame

__all__ = ["DataplaneModel", "Output", "MAX_FRAME", "ones_add", "ipv4_header_checksum"]

#: largest frame (bytes, without FCS) the ingress buffers accept
MAX_FRAME = 9216
#: smallest frame: an Ethernet header
MIN_FRAME = 14

ETH_P_8021Q = 0x8100
ETH_P_IPV4 = 0x0800
IPPROTO_UDP = 17

_ERR_CODE = {name: code for code, name in PARSE_ERRORS.items()}


def _mask(w):
    return (1 << w) - 1


def ones_add(a, b):
    """16-bit ones' complement addition with end-around carry."""
    s = a + b
    return (s & 0xFFFF) + (s >> 16)


def _ones_sum(words, start=0):
    s = start
    for w in words:
        s = ones_add(s, w)
    return s


def _words(buf):
    return [(buf[i] << 8) | buf[i + 1] for i in range(0, len(buf) - 1, 2)]


def ipv4_header_checksum(header: bytes) -> int:
    """Checksum field value for an IPv4 header (its checksum bytes are treated as 0)."""
    h = bytearray(header)
    h[10:12] = b"\0\0"
    return ~_ones_sum(_words(h)) & 0xFFFF


@dataclass
class Output:
    """One frame leaving the data plane: output ``port`` (0..P-1 wire TX, P..2P-1 host RX)."""
    port: int
    frame: bytes
    user: int = 0


class _Env:
    """The ``env`` object of :meth:`netstor.lang.Expr.eval`: PHV fields (and views into
    ``app``), the matched entry's parameters and a register's old value."""

    __slots__ = ("phv", "views", "params", "old_value", "where")

    def __init__(self, phv, views, where):
        self.phv, self.views, self.where = phv, views, where
        self.params, self.old_value = {}, None

    def field(self, name):
        v = self.views.get(name)
        if v is not None:
            base, lo, w = v
            return (self.phv[base] >> lo) & _mask(w)
        try:
            return self.phv[name]
        except KeyError:
            raise KeyError(f"{self.where}: no PHV field {name!r}") from None

    def param(self, name):
        try:
            return self.params[name]
        except KeyError:
            raise KeyError(f"{self.where}: no action parameter {name!r} here") from None

    def old(self):
        if self.old_value is None:
            raise ValueError(f"{self.where}: Old() used outside a register update")
        return self.old_value


class _Mem:
    __slots__ = ("name", "depth", "width", "reset", "words")

    def __init__(self, name, depth, width, reset=0):
        self.name, self.depth, self.width, self.reset = name, depth, width, reset
        self.words = [reset] * depth


class DataplaneModel:
    """A cycle-free model of the data plane of ``pipeline`` (a :class:`netstor.lang.Pipeline`)."""

    def __init__(self, pipeline, *, groups="list"):
        if groups not in ("bitmap", "list"):
            raise ValueError(f"groups must be 'bitmap' or 'list', not {groups!r}")
        self.pipeline = pipeline
        self.P = pipeline.n_ports
        #: multicast semantics: "list" (``tm.groups``: copy lists, :mod:`.replication`: the
        #: default core's replication engine) or "bitmap" (``tm.mcast``: one copy per port,
        #: the ``copies="ports"`` core's traffic manager)
        self.groups = groups
        self.deferred = None            # see run_deferred
        #: the frame of the packet (or copy) the elements run on: payload elements
        #: (``Element.rewrites_payload``) read it and replace it with the rewritten bytes
        self.frame = b""
        if pipeline.n_inputs > 16:
            raise ValueError("meta.ingress_port is 4 bits: at most 7 network ports")
        self._views = dict(pipeline.phv.views)
        self._widths = {n: f.width for n, f in pipeline.phv.fields.items()}
        for n, (_, _, w) in self._views.items():
            self._widths[n] = w
        self._mems: dict[str, _Mem] = {}
        self._regs: dict[str, list] = {}          # name -> [value, width, reset]
        self._tables = {t.qualname: t for t in pipeline.tables}
        elements = pipeline.elements + pipeline.egress_elements
        for e in elements:                       # each kind declares its own state
            for name, depth, width, reset in e.model_memories():
                self._add_mem(name, depth, width, reset)
        for b in pipeline.banks:
            self._add_mem(b.qualname, b.depth, b.width)
        if groups == "list":
            self._add_mem("tm.groups", pipeline.mcast_groups, GROUP_BITS)
        else:
            self._add_mem("tm.mcast", pipeline.mcast_groups, 2 * self.P + 16 * 2 * self.P)
        for p in pipeline.programs:
            if p.hdr_type is not None:
                self._regs[f"parser.udp_port.{p.name}"] = [p.udp_port, 16, p.udp_port]
        names = []
        for k in range(pipeline.n_inputs):
            names += [f"in{k}.pkts", f"in{k}.bytes", f"in{k}.drop_runt",
                      f"in{k}.drop_oversize", f"in{k}.drop_error"]
        names += [f"parser.err.{n}" for n in PARSE_ERRORS.values()]
        names += ["tm.drop", "tm.mcast_empty", "tm.bad_port", "tm.recirc_limit"]
        for q in range(pipeline.n_outputs):
            names += [f"out{q}.pkts", f"out{q}.bytes"]
        for e in elements:
            names += e.model_counters()
        self._counters = dict.fromkeys(names, 0)

    def _add_mem(self, name, depth, width, reset=0):
        if name in self._mems:
            raise ValueError(f"memory name {name!r} is used twice")
        self._mems[name] = _Mem(name, depth, width, reset)

    # ---- control plane ------------------------------------------------------------------------
    def reset(self):
        """Every memory, register and counter back to its reset value."""
        for m in self._mems.values():
            m.words = [m.reset] * m.depth
        for r in self._regs.values():
            r[0] = r[2]
        for k in self._counters:
            self._counters[k] = 0

    def _mem(self, name):
        try:
            return self._mems[name]
        except KeyError:
            raise KeyError(f"no memory {name!r}; memories are {sorted(self._mems)}") from None

    def memories(self):
        """``{name: (depth, width)}`` of every memory."""
        return {n: (m.depth, m.width) for n, m in self._mems.items()}

    def mem_write(self, name, addr, word):
        m = self._mem(name)
        if not (isinstance(addr, int) and 0 <= addr < m.depth):
            raise IndexError(f"memory {name}: address {addr!r} out of range 0..{m.depth - 1}")
        if not isinstance(word, int) or word < 0 or word >> m.width:
            raise ValueError(f"memory {name}: word {word!r} does not fit in {m.width} bits")
        m.words[addr] = word

    def mem_read(self, name, addr):
        m = self._mem(name)
        if not (isinstance(addr, int) and 0 <= addr < m.depth):
            raise IndexError(f"memory {name}: address {addr!r} out of range 0..{m.depth - 1}")
        return m.words[addr]

    def _reg(self, name):
        try:
            return self._regs[name]
        except KeyError:
            raise KeyError(f"no register {name!r}; registers are {sorted(self._regs)}") from None

    def reg_write(self, name, value):
        r = self._reg(name)
        if not isinstance(value, int) or value < 0 or value >> r[1]:
            raise ValueError(f"register {name}: value {value!r} does not fit in {r[1]} bits")
        r[0] = value

    def reg_read(self, name):
        return self._reg(name)[0]

    def counter(self, name) -> int:
        try:
            return self._counters[name]
        except KeyError:
            raise KeyError(f"no counter {name!r}") from None

    def counters(self) -> dict:
        return dict(self._counters)

    # the same names as netstor.driver.CsrClient, so controller code runs on either
    def counter_read(self, name) -> int:
        return self.counter(name)

    def counter_clear(self, name):
        self.counter(name)
        self._counters[name] = 0

    @property
    def register_names(self):
        return list(self._regs)

    @property
    def counter_names(self):
        return list(self._counters)

    @property
    def memory_names(self):
        return list(self._mems)

    # ---- parser --------------------------------------------------------------------------------
    def parse(self, frame, ingress_port, *, recirc_count=0, bridge=0, arrival=0) -> dict:
        """The PHV (``{dotted field name: int}``, views excluded) the parser produces."""
        P = self.P
        if not 0 <= ingress_port <= 2 * P:
            raise ValueError(f"ingress port {ingress_port} out of range 0..{2 * P}")
        L = len(frame)
        # bytes at or beyond L read as zero: the parser window is at most 18+60+8+APP_BYTES
        # = 128 bytes
        b = bytes(frame[:128]) + bytes(max(0, 128 - L))

        def be(lo, n):
            return int.from_bytes(b[lo:lo + n], "big")

        phv = dict.fromkeys(self.pipeline.phv.fields, 0)
        phv["eth.dst"], phv["eth.src"], phv["eth.type"] = be(0, 6), be(6, 6), be(12, 2)
        if phv["eth.type"] == ETH_P_8021Q and L >= 18:
            phv["meta.vlan_valid"] = 1
            phv["vlan.tci"], phv["vlan.type"] = be(14, 2), be(16, 2)
            l3, et = 18, phv["vlan.type"]
        else:
            l3 = 14
            et = 0 if phv["eth.type"] == ETH_P_8021Q else phv["eth.type"]
        ip = b[l3:l3 + 20]
        for name, off, n in (("ver_ihl", 0, 1), ("tos", 1, 1), ("total_len", 2, 2),
                             ("ident", 4, 2), ("flags_frag", 6, 2), ("ttl", 8, 1),
                             ("proto", 9, 1), ("csum", 10, 2), ("src", 12, 4),
                             ("dst", 16, 4)):
            phv[f"ipv4.{name}"] = int.from_bytes(ip[off:off + n], "big")
        ihl = phv["ipv4.ver_ihl"] & 15
        hl = 4 * max(ihl, 5)
        total_len = phv["ipv4.total_len"]
        err = None
        if et == ETH_P_IPV4:
            if phv["ipv4.ver_ihl"] >> 4 != 4:
                err = "ipv4_version"
            elif ihl < 5:
                err = "ipv4_ihl"
            elif L < l3 + 20 or total_len < 4 * ihl or l3 + total_len > L:
                err = "ipv4_length"
            elif _ones_sum(_words(b[l3:l3 + 4 * ihl])) != 0xFFFF:
                err = "ipv4_checksum"
        ipv4_valid = int(et == ETH_P_IPV4 and err is None)
        phv["meta.ipv4_valid"] = ipv4_valid
        u = l3 + hl
        phv["udp.sport"], phv["udp.dport"] = be(u, 2), be(u + 2, 2)
        phv["udp.len"], phv["udp.csum"] = be(u + 4, 2), be(u + 6, 2)
        phv["app"] = be(u + 8, APP_BYTES)
        if ipv4_valid and phv["ipv4.proto"] == IPPROTO_UDP:
            if phv["ipv4.flags_frag"] & 0x3FFF:
                err = "ipv4_fragment"
            elif phv["udp.len"] < 8 or phv["udp.len"] > total_len - 4 * ihl:
                err = "udp_length"
            else:
                phv["meta.udp_valid"] = 1
        phv["meta.parse_error"] = 0 if err is None else _ERR_CODE[err]
        if phv["meta.udp_valid"]:
            for p in self.pipeline.programs:
                if p.hdr_type is None:
                    continue
                if (phv["udp.dport"] == self._regs[f"parser.udp_port.{p.name}"][0]
                        and phv["udp.len"] >= 8 + p.header_bytes):
                    phv["meta.hdr_type"] = p.hdr_type
                    break
        phv["meta.ingress_port"] = ingress_port
        phv["meta.pkt_len"] = L & _mask(self._widths["meta.pkt_len"])
        phv["meta.recirc_count"] = recirc_count
        phv["meta.bridge"] = bridge & _mask(32)
        phv["meta.arrival"] = arrival & _mask(32)
        phv["meta.egress_port"] = self.pipeline.default_egress(ingress_port)
        return phv

    # ---- deparser ------------------------------------------------------------------------------
    def deparse(self, frame, phv) -> bytes:
        """``frame`` (the bytes the parser saw) rewritten from ``phv``; same length."""
        L = len(frame)
        out = bytearray(frame)

        def put(lo, n, value):
            for i, byte in enumerate(value.to_bytes(n, "big")):
                if lo + i < L:
                    out[lo + i] = byte

        put(0, 6, phv["eth.dst"])
        put(6, 6, phv["eth.src"])
        l3 = 14
        if phv["meta.vlan_valid"]:
            put(14, 2, phv["vlan.tci"])
            l3 = 18
        ihl = phv["ipv4.ver_ihl"] & 15
        u = l3 + 4 * max(ihl, 5)
        if phv["meta.ipv4_valid"]:
            put(l3 + 1, 1, phv["ipv4.tos"])
            put(l3 + 4, 2, phv["ipv4.ident"])
            put(l3 + 8, 1, phv["ipv4.ttl"])
            put(l3 + 12, 4, phv["ipv4.src"])
            put(l3 + 16, 4, phv["ipv4.dst"])
            hdr = bytes(out[l3:l3 + 4 * ihl])
            put(l3 + 10, 2, ipv4_header_checksum(hdr))
        if phv["meta.udp_valid"]:
            old = bytes(frame[l3 + 12:l3 + 20]) + bytes(frame[u:u + 4])
            put(u, 2, phv["udp.sport"])
            put(u + 2, 2, phv["udp.dport"])
            new = bytes(out[l3 + 12:l3 + 20]) + bytes(out[u:u + 4])
            if phv["meta.hdr_type"] != 0:
                # spec: the app bytes inside the UDP datagram (offsets < u + udp.len, which a
                # valid UDP header keeps <= L) take part, an odd count padded with a zero byte
                # (RFC 768); bytes beyond it (Ethernet padding, or past the frame's end) do
                # not. Bytes at offsets >= L are not written.
                a = u + 8
                n = max(0, min(APP_BYTES, int.from_bytes(frame[u + 4:u + 6], "big") - 8))
                pad = bytes(n & 1)
                old += bytes(frame[a:a + n]) + pad
                put(a, APP_BYTES, phv["app"])
                new += bytes(out[a:a + n]) + pad
            csum_in = int.from_bytes(frame[u + 6:u + 8], "big")
            if csum_in != 0:
                s = ~csum_in & 0xFFFF
                for wo, wn in zip(_words(old), _words(new)):
                    s = ones_add(ones_add(s, ~wo & 0xFFFF), wn)
                c = ~s & 0xFFFF
                put(u + 6, 2, c if c else 0xFFFF)
        return bytes(out)

    # ---- elements ------------------------------------------------------------------------------
    # what an element kind's ``evaluate`` uses (netstor.lang.element.Element.evaluate)
    def memory(self, name):
        """The memory ``name`` (``.words``: its cells, ``.depth``, ``.width``)."""
        return self._mems[name]

    def count(self, name, n=1):
        """Increment counter ``name``."""
        self._counters[name] += n

    def assign(self, phv, writes):
        """Apply ``[(field name, value)]`` (values already computed: parallel assignment).
        Two writes to the same bits in one element (undefined by the spec) apply in list
        order: the last one wins."""
        for name, value in writes:
            w = self._widths[name]
            value &= _mask(w)
            v = self._views.get(name)
            if v is None:
                phv[name] = value
            else:
                base, lo, _ = v
                phv[base] = (phv[base] & ~(_mask(w) << lo)) | (value << lo)

    def _run(self, elements, phv):
        ht = phv.get("meta.hdr_type")
        for e in elements:
            p = e.program
            if p is not None and p.udp_port is not None and p.hdr_type != ht:
                continue            # its `when` includes `selected` (Program.add): a shortcut
            env = _Env(phv, self._views, f"element {e.qualname}")
            if not e.when.eval(env):
                continue
            e.evaluate(self, phv, env)

    def view(self, phv, name):
        """Value of field or header view ``name`` in ``phv``."""
        return _Env(phv, self._views, "view").field(name)

    # ---- the whole data plane ------------------------------------------------------------------
    def process(self, frame, ingress_port, *, user=0, arrival=0) -> list:
        """Run one frame arriving on input ``ingress_port`` (0..P-1 wire RX, P..2P-1 host TX)
        through the data plane. Returns the output frames: the direct copies first (multicast
        copies in increasing port order, or in list order with ``groups="list"``), then the
        outputs of the recirculated copy, if any. A copy whose ``meta.truncate`` is set (a PHV
        field the language does not declare yet) leaves header-only
        (:func:`.replication.truncate_frame`)."""
        P = self.P
        if not (isinstance(ingress_port, int) and 0 <= ingress_port < 2 * P):
            raise ValueError(f"ingress port {ingress_port!r} out of range 0..{2 * P - 1} "
                             "(the recirculation input is internal)")
        return self._pass(bytes(frame), ingress_port, user, arrival, 0, 0)

    def _pass(self, frame, inp, user, arrival, recirc_count, bridge):
        P = self.P
        L = len(frame)
        # ingress buffer
        if L < MIN_FRAME:
            self.count(f"in{inp}.drop_runt")
            return []
        if L > MAX_FRAME:
            self.count(f"in{inp}.drop_oversize")
            return []
        if inp < P and user & 1:
            self.count(f"in{inp}.drop_error")
            return []
        self.count(f"in{inp}.pkts")
        self.count(f"in{inp}.bytes", L)
        # parser
        phv = self.parse(frame, inp, recirc_count=recirc_count, bridge=bridge, arrival=arrival)
        if phv["meta.parse_error"]:
            self.count(f"parser.err.{PARSE_ERRORS[phv['meta.parse_error']]}")
        # ingress elements (a payload element, ``rewrites_payload``, replaces ``self.frame``)
        self.frame = frame
        self._run(self.pipeline.elements, phv)
        frame = self.frame
        # traffic manager
        copies = []           # (port, rid)
        groups_list = self.groups == "list"
        to_recirc = False
        if phv["meta.drop"]:
            self.count("tm.drop")
        elif phv["meta.recirc"]:
            to_recirc = True
        else:
            group = phv["meta.mcast_group"]
            if group != 0 and groups_list:
                made, bad = [], 0
                if group < self.pipeline.mcast_groups:
                    made, bad = group_copies(self._mems["tm.groups"].words[group], 2 * P)
                if not made and not bad:
                    self.count("tm.mcast_empty")
                if bad:
                    self.count("tm.bad_port", bad)
                copies += made          # list order; a port may appear any number of times
            elif group != 0:
                ports = word = 0
                if group < self.pipeline.mcast_groups:
                    word = self._mems["tm.mcast"].words[group]
                    ports = word & _mask(2 * P)
                if ports == 0:
                    self.count("tm.mcast_empty")
                for q in range(2 * P):
                    if ports >> q & 1:
                        copies.append((q, (word >> (2 * P + 16 * q)) & 0xFFFF))
            elif phv["meta.egress_port"] >= 2 * P:
                self.count("tm.bad_port")
            else:
                copies.append((phv["meta.egress_port"], 0))
            # the clone copy does not depend on the unicast/multicast copies existing
            to_recirc = bool(phv["meta.clone"])
        outputs = []
        for q, rid in copies:
            cp = dict(phv)
            cp["meta.egress_port"], cp["meta.rid"] = q, rid
            # an egress element may set meta.drop (the language allows it); the spec gives it
            # no meaning after the traffic manager, so the copy is still sent
            self.frame = frame          # each copy's payload starts from the ingress result
            self._run(self.pipeline.egress_elements, cp)
            data = self.deparse(self.frame, cp)
            if cp.get("meta.truncate"):
                data = truncate_frame(data, cp)
            if q < P:       # wire TX: the host TX tuser when the packet came from host TX
                out_user = user if P <= inp < 2 * P else 0
            else:           # host RX: the wire RX tuser (error bit 0) when it came from wire RX
                out_user = (user & ~1) if inp < P else 0
            self.count(f"out{q}.pkts")
            self.count(f"out{q}.bytes", len(data))
            outputs.append(Output(q, data, out_user))
        if to_recirc:
            if recirc_count >= self.pipeline.max_recirc:
                self.count("tm.recirc_limit")
            else:
                data = self.deparse(frame, phv)
                # the recirculated pass has no tuser of its own: the spec passes tuser only
                # for packets that came from wire RX / host TX, and this pass came from the
                # recirculation input, so its outputs carry tuser 0
                args = (data, 2 * P, 0, arrival, recirc_count + 1, phv["meta.bridge"])
                if self.deferred is not None:
                    self.deferred.append(args)
                else:
                    outputs += self._pass(*args)
        return outputs

    def run_deferred(self) -> list:
        """With ``deferred`` a list (not None), recirculated passes wait there instead of
        running at once (as in hardware, where packets that arrive right after a recirculated
        one are processed before its second pass); this runs them, oldest first (with any
        pass they recirculate in turn), and returns their outputs."""
        outputs = []
        while self.deferred:
            outputs += self._pass(*self.deferred.pop(0))
        return outputs
