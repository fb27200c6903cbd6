"""Payload elements: the GF(2^8) engine in the program language (XORInc, issue 13).

A program says what its payload does in the same description as its header logic:

* :class:`GFAccumulate` (ingress): the packet's chunk data (``length`` bytes from frame byte
  :data:`DATA_OFFSET`, whole 64-byte beats) is multiplied by ``coeff`` and XORed into the
  accumulation slots ``(op, off + i)``; the packet that completes its slots carries the
  result (its data rewritten), the others are reported (``status``) for the program to drop.
* :class:`GFScale` (egress, once per copy): the copy's data multiplied by ``coeff`` (the
  engine with ``need`` = 1: NetUpdate's per-parity delta).

Semantics: those of :class:`netstor.model.gf.Engine` (field 0x11D; slot ``(op, off)``,
``seen`` set of ``src``, ``need``, done / dup / bad, per-op generation and timeout), applied
beat by beat in packet order; the full text is in ``docs/xorinc.md`` ("The payload
element"). The golden model and the compiled model run them (state in model memories
addressed like the gateware's slot RAM: the same 541-bit slot word as
``netstor.gateware.gf_engine``). The gateware (:mod:`netstor.gateware.gf_path`): the
element's status in the header path from a control shadow of the slots, ``GFEngine`` on the
data beats in the frame path, the scale on each copy's beats in the copy lane (a core built
with these elements; XORInc is not in the default bitstream).

The data-at-byte-128 contract: a packet the element acts on must be IPv4 with IHL 5, no VLAN
tag, and at least ``128 + length`` bytes long; ``1 <= length <= max_beats * 64``, ``off +
beats <= chunk_beats``, ``op < n_ops``, ``src < 16``, ``1 <= need <= 31``. Anything else is
refused whole (nothing written; status :data:`ST_MISALIGNED` or :data:`ST_BAD`, counted). A
frame whose data the element rewrote leaves with UDP checksum 0 (no checksum, allowed over
IPv4): the engine does not recompute a payload checksum.
"""
from __future__ import annotations

from netstor.lang import F
from netstor.lang.element import Element
from netstor.lang.expr import as_expr
from netstor.model import gf

__all__ = ["GFAccumulate", "GFScale", "DATA_OFFSET", "BEAT", "ST_NONE", "ST_ABSORBED",
           "ST_DONE", "ST_DUP", "ST_BAD", "ST_MISALIGNED", "ST_SPLIT", "STATUS_NAMES",
           "SLOT_BITS", "slot_word", "slot_fields"]

#: frame byte where chunk data starts (beat 2 of the 64-byte beats)
DATA_OFFSET = 128
BEAT = gf.BEAT
#: frame offsets the contract fixes: Ethernet 14 + IPv4 20, the UDP checksum at 34 + 6
_UDP_CSUM = 40

# status values (the ``status`` field the element writes)
ST_NONE = 0          # the element did not run (its ``when`` was false)
ST_ABSORBED = 1      # added to its slots, none completed: the program drops the packet
ST_DONE = 2          # completed every slot it touched: its data is now the result
ST_DUP = 3           # a duplicate contribution (its src already seen in every slot): not added
ST_BAD = 4           # refused (op/off/src/need/length out of range): nothing written
ST_MISALIGNED = 5    # data not at frame byte 128 (VLAN, IPv4 options, frame too short)
ST_SPLIT = 6         # beats of one packet disagreed (some completed/duplicate, some not)
STATUS_NAMES = {ST_NONE: "none", ST_ABSORBED: "absorbed", ST_DONE: "done", ST_DUP: "dup",
                ST_BAD: "bad", ST_MISALIGNED: "misaligned", ST_SPLIT: "split"}

# the slot word (netstor.gateware.gf_engine): acc 512 | seen 16 | count 5 | gen 8
_ACC = (1 << 512) - 1
_SEEN_LO, _COUNT_LO, _GEN_LO = 512, 528, 533
GEN_BITS = 8
SLOT_BITS = _GEN_LO + GEN_BITS
# the per-op word: last beat's tick 32 | open slots 16 | generation 8
_OP_OPEN_LO, _OP_GEN_LO = 32, 48
OP_BITS = _OP_GEN_LO + GEN_BITS

#: ``_MUL[c]``: the 256-byte translation table of ``x -> c * x`` (from netstor.model.gf)
_MUL = tuple(bytes(row) for row in gf.mul_table())


def slot_word(acc: bytes, seen: int, count: int, gen: int) -> int:
    """A slot word from its parts (``acc``: 64 bytes, byte i at bits 8i..8i+7)."""
    return (int.from_bytes(acc, "little") | seen << _SEEN_LO | count << _COUNT_LO
            | gen << _GEN_LO)


def slot_fields(word: int):
    """``(acc bytes, seen, count, gen)`` of a slot word."""
    return ((word & _ACC).to_bytes(BEAT, "little"), (word >> _SEEN_LO) & 0xFFFF,
            (word >> _COUNT_LO) & 31, word >> _GEN_LO)


def _aligned(vlan_valid, ver_ihl, pkt_len, length):
    return not vlan_valid and (ver_ihl & 15) == 5 and pkt_len >= DATA_OFFSET + length


class GFAccumulate(Element):
    """The accumulate engine on the packet's data. Expressions (PHV fields, table
    parameters, constants): ``op`` (engine operation id), ``off`` (beat offset of the first
    data byte in the chunk), ``coeff`` (GF(2^8) multiplier), ``src`` (contributor index
    0..15, the duplicate check), ``need`` (contributions the result needs), ``length`` (data
    bytes in the packet). ``status``: the PHV field (>= 3 bits) it writes (``ST_*``).

    Size: ``n_ops`` operations of ``chunk_beats`` beats (64 x 64 = 64 ops of 4 KiB chunks),
    ``max_beats`` beats per packet. ``timeout``: ticks of ``meta.arrival`` after an op's last
    beat after which its open slots are freed (0: never); a run-time memory
    ``<prog>.<name>.timeout`` holds it.

    Model memories: ``.slots`` (``n_ops * chunk_beats`` slot words, address ``op *
    chunk_beats + off``), ``.ops`` (per op: last tick, open slots, generation), ``.timeout``
    (1 word), ``.expired`` (per op: the timeouts that freed it, 32 bits wrapping; the host
    may write it; the controller reads it and tells the requester, ``docs/xorinc.md``). Counters ``.beats``, ``.absorbed``, ``.done``, ``.dup``, ``.bad``,
    ``.misaligned``, ``.split`` (packets) and ``.timeouts`` (ops freed).
    """
    rewrites_payload = True
    COUNTERS = ("beats", "absorbed", "done", "dup", "bad", "misaligned", "split", "timeouts")

    def __init__(self, name, *, op, off, coeff, src, need, length, status, n_ops=64,
                 chunk_beats=64, max_beats=16, timeout=0, when=None):
        super().__init__(name, when)
        if status.width < 3:
            raise ValueError(f"{name}: status field needs >= 3 bits")
        if not (1 <= max_beats <= chunk_beats and n_ops >= 1 and 0 <= timeout < 1 << 32):
            raise ValueError(f"{name}: bad size (n_ops {n_ops}, chunk_beats {chunk_beats}, "
                             f"max_beats {max_beats}, timeout {timeout})")
        self.op, self.off, self.coeff = as_expr(op), as_expr(off), as_expr(coeff)
        self.src, self.need, self.length = as_expr(src), as_expr(need), as_expr(length)
        self.status = status
        self.n_ops, self.chunk_beats, self.max_beats = n_ops, chunk_beats, max_beats
        self.timeout = timeout

    # ---- language ------------------------------------------------------------------------------
    def _args(self):
        return [self.op, self.off, self.coeff, self.src, self.need, self.length,
                F.meta.vlan_valid, F.ipv4.ver_ihl, F.meta.pkt_len, F.meta.arrival]

    def reads(self):
        return self._args()

    def writes(self):
        return [self.status]

    @property
    def bench_key(self):
        return "gf_engine"

    # ---- model ---------------------------------------------------------------------------------
    def model_memories(self):
        q = self.qualname
        return [(f"{q}.slots", self.n_ops * self.chunk_beats, SLOT_BITS, 0),
                (f"{q}.ops", self.n_ops, OP_BITS, 0),
                (f"{q}.timeout", 1, 32, self.timeout),
                (f"{q}.expired", self.n_ops, 32, 0)]

    def model_counters(self):
        return [f"{self.qualname}.{c}" for c in self.COUNTERS]

    def _state(self, words):
        q = self.qualname
        return tuple(words(f"{q}.{m}") for m in ("slots", "ops", "timeout", "expired"))

    def evaluate(self, model, phv, env):
        st = self.run(self._state(lambda n: model.memory(n).words), model.count, model.frame,
                      *[x.eval(env) for x in self._args()])
        model.frame, status = st[0], st[1]
        model.assign(phv, [(self.status.name, status)])
        if status == ST_DONE:
            phv["udp.csum"] = 0

    def compile(self, cg):
        state = "(" + ", ".join(cg.const(w, "W_gf") for w in self._state(
            lambda n: cg.model._mem(n).words)) + ")"
        st = cg.tmp("gfst")
        args = ", ".join(cg.expr(x) for x in self._args())
        cg.emit(f"frame, {st} = {cg.const(self, 'gfacc')}.run({state}, M.count, frame, {args})")
        cg.assign([(self.status.name, (st, 3))])
        with cg.block(f"if {st} == {ST_DONE}:"):
            cg.emit(f"{cg.names['udp.csum']} = 0")

    def scan(self, model, now):
        """The core's timeout scanner in a model between packets: free (and count, in
        ``.timeouts`` and ``.expired``) every op with open slots whose last beat is more than
        the timeout older than ``now`` (ticks of ``meta.arrival``), as the next packet would.
        For a model that runs on a clock of its own (a switch around the model: an op whose
        contributions stop arriving is freed without a later packet, as in the core)."""
        self._expire(self._state(lambda n: model.memory(n).words), model.count,
                     now & 0xFFFFFFFF)

    def _expire(self, state, count, now):
        """Free every op with open slots whose last beat is more than the timeout old."""
        _slots, ops, tmo, expired = state
        t = tmo[0]
        if not t:
            return
        q = self.qualname
        for op, w in enumerate(ops):
            if (w >> _OP_OPEN_LO) & 0xFFFF and ((now - (w & 0xFFFFFFFF)) & 0xFFFFFFFF) > t:
                gen = ((w >> _OP_GEN_LO) + 1) % (1 << GEN_BITS)
                ops[op] = (gen << _OP_GEN_LO) | (w & 0xFFFFFFFF)
                expired[op] = (expired[op] + 1) & 0xFFFFFFFF
                count(f"{q}.timeouts")

    def run(self, state, count, frame, op, off, coeff, src, need, length, vlan_valid, ver_ihl,
            pkt_len, arrival):
        """One packet: ``(frame, status)`` (the frame with its data rewritten when done)."""
        q = self.qualname
        slots, ops, _tmo, _expired = state
        self._expire(state, count, arrival)
        if not _aligned(vlan_valid, ver_ihl, pkt_len, length):
            count(f"{q}.misaligned")
            return frame, ST_MISALIGNED
        nb = (length + BEAT - 1) // BEAT
        if not (1 <= length and nb <= self.max_beats and off + nb <= self.chunk_beats
                and op < self.n_ops and src < gf.SRC_MAX and 1 <= need <= gf.NEED_MAX):
            count(f"{q}.bad")
            return frame, ST_BAD
        ow = ops[op]
        opgen = ow >> _OP_GEN_LO
        opened = (ow >> _OP_OPEN_LO) & 0xFFFF
        mul = _MUL[coeff]
        base = op * self.chunk_beats + off
        data = bytes(frame[DATA_OFFSET:DATA_OFFSET + length]) + bytes(nb * BEAT - length)
        n_done = n_dup = 0
        results = []
        for i in range(nb):
            count(f"{q}.beats")
            w = slots[base + i]
            cnt = (w >> _COUNT_LO) & 31
            live = (w >> _GEN_LO) == opgen and cnt != 0
            if live:
                seen, acc = (w >> _SEEN_LO) & 0xFFFF, w & _ACC
            else:
                seen = acc = cnt = 0
            if seen >> src & 1:
                n_dup += 1
                results.append(None)
                continue
            acc ^= int.from_bytes(data[i * BEAT:(i + 1) * BEAT].translate(mul), "little")
            cnt += 1
            if cnt >= need:
                n_done += 1
                slots[base + i] = acc | opgen << _GEN_LO
                opened -= live
                results.append(acc)
            else:
                slots[base + i] = (acc | (seen | 1 << src) << _SEEN_LO | cnt << _COUNT_LO
                                   | opgen << _GEN_LO)
                opened += not live
                results.append(None)
        ops[op] = (opgen << _OP_GEN_LO) | (opened & 0xFFFF) << _OP_OPEN_LO | (arrival
                                                                             & 0xFFFFFFFF)
        if n_done == nb:
            out = bytearray(frame)
            res = b"".join(a.to_bytes(BEAT, "little") for a in results)
            out[DATA_OFFSET:DATA_OFFSET + length] = res[:length]
            out[_UDP_CSUM:_UDP_CSUM + 2] = b"\0\0"
            count(f"{q}.done")
            return bytes(out), ST_DONE
        if n_dup == nb:
            count(f"{q}.dup")
            return frame, ST_DUP
        if n_done == 0 and n_dup == 0:
            count(f"{q}.absorbed")
            return frame, ST_ABSORBED
        count(f"{q}.split")
        return frame, ST_SPLIT

    # ---- gateware ------------------------------------------------------------------------------
    #: set by :meth:`elaborate`: the signals the data path's engine takes (see
    #: :func:`netstor.gateware.gf_path.build_accumulate`), ``payload_tap_latency`` cycles after
    #: the element's input
    payload_tap = None
    payload_tap_latency = None

    def elaborate(self, m, pipeline, valid_in, phv_in, csr, *, prefix):
        """The header path's half: the status from a control shadow of the slots (latency
        3) and the timeout scanner (host memory ``.timeout``, counter ``.timeouts``); the
        data path (:class:`netstor.gateware.gf_path.GFIngress`, instantiated by the data path
        for a pipeline with this element) runs ``GFEngine`` on the data beats with the
        shadow's generation of the op. ``.expired`` is a host memory in the core too (the
        scanner's pulse counts into the op's word); ``.slots`` and ``.ops`` are model
        memories only (the core has no host view of the slots)."""
        from netstor.gateware.gf_path import build_accumulate
        return build_accumulate(self, m, pipeline, valid_in, phv_in, csr, prefix)


class GFScale(Element):
    """Egress (once per copy): the copy's data (``length`` bytes from frame byte 128)
    multiplied by ``coeff`` in GF(2^8): the engine with ``need`` = 1 and no slot state.
    Counters ``.scaled`` and ``.misaligned`` (the contract of the module docstring; a
    misaligned copy leaves unchanged). A scaled copy leaves with UDP checksum 0."""
    egress_ok = True
    rewrites_payload = True

    def __init__(self, name, *, coeff, length, max_bytes=16 * BEAT, when=None):
        super().__init__(name, when)
        self.coeff, self.length, self.max_bytes = as_expr(coeff), as_expr(length), max_bytes

    def _args(self):
        return [self.coeff, self.length, F.meta.vlan_valid, F.ipv4.ver_ihl, F.meta.pkt_len]

    def reads(self):
        return self._args()

    def model_counters(self):
        return [f"{self.qualname}.scaled", f"{self.qualname}.misaligned"]

    def evaluate(self, model, phv, env):
        model.frame, done = self.run(model.count, model.frame,
                                     *[x.eval(env) for x in self._args()])
        if done:
            phv["udp.csum"] = 0

    def compile(self, cg):
        st = cg.tmp("gfsc")
        args = ", ".join(cg.expr(x) for x in self._args())
        cg.emit(f"frame, {st} = {cg.const(self, 'gfscale')}.run(M.count, frame, {args})")
        with cg.block(f"if {st}:"):
            cg.emit(f"{cg.names['udp.csum']} = 0")

    def run(self, count, frame, coeff, length, vlan_valid, ver_ihl, pkt_len):
        """``(frame, scaled)``."""
        if not (_aligned(vlan_valid, ver_ihl, pkt_len, length) and length <= self.max_bytes):
            count(f"{self.qualname}.misaligned")
            return frame, False
        out = bytearray(frame)
        out[DATA_OFFSET:DATA_OFFSET + length] = bytes(
            frame[DATA_OFFSET:DATA_OFFSET + length]).translate(_MUL[coeff])
        out[_UDP_CSUM:_UDP_CSUM + 2] = b"\0\0"
        count(f"{self.qualname}.scaled")
        return bytes(out), True

    def hw_run(self, env):
        """The copy is scaled (the element acted and the data is at byte 128), on a PHV."""
        f = env.field
        length = self.length.hw(env)
        return (self.when.hw(env).any() & ~f("meta.vlan_valid").any()
                & (f("ipv4.ver_ihl")[:4] == 5) & (f("meta.pkt_len") >= length + 128)
                & (length <= self.max_bytes))

    def elaborate(self, m, pipeline, valid_in, phv_in, csr, *, prefix):
        """The header path's half (latency 0: a mux): UDP checksum 0 on a scaled copy, the counters.
        The bytes are multiplied on the copy's beats in front of the deparser
        (:class:`netstor.gateware.gf_path.GFScaleBeats`, placed by the data path, which reads
        ``coeff`` and ``length`` from the copy's PHV after the egress elements)."""
        from amaranth.hdl import Signal
        from netstor.gateware.kit import HwEnv, phv_signal, target
        env = HwEnv(pipeline, phv_in)
        act = Signal(name=f"{prefix}_act")
        run = Signal(name=f"{prefix}_run")
        m.d.comb += [act.eq(valid_in & self.when.hw(env).any()), run.eq(self.hw_run(env))]
        nxt = phv_signal(pipeline, f"{prefix}_next")
        m.d.comb += nxt.eq(phv_in)
        with m.If(run):
            m.d.comb += target(pipeline, nxt, "udp.csum").eq(0)
        q = self.qualname
        sc = csr.counter(f"{q}.scaled", doc=f"{q}: copies whose data was scaled")
        mis = csr.counter(f"{q}.misaligned", doc=f"{q}: copies not scaled (data not at 128)")
        ev_s, ev_m = Signal(name=f"{prefix}_ev_s"), Signal(name=f"{prefix}_ev_m")
        m.d.sync += [ev_s.eq(act & run), ev_m.eq(act & ~run)]
        m.d.comb += [sc.eq(ev_s), mis.eq(ev_m)]
        return valid_in, nxt, 0
