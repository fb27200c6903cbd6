"""``RegisterOp``: one read-modify-write of one cell of a register bank per packet.

Gateware: a pipelined read-modify-write over 3 cycles, one packet per clock, on a RAM with
two ports (a true dual-port BRAM/URAM, no extra copy for the host):

* port A (read only) reads the packet's cell; port B writes the packets' new values and serves
  the host (read or write) in the cycles no packet needs it.

A packet entering in cycle t (s0):

* s0 ``t``: the index addresses port A (the RAM's address register);
* s1 ``t+1``: the RAM's output latch. The RAM read missed the writes port B makes in cycles
  t, t+1, t+2; in t+2 they sit in the write slot W and two history registers H1, H2 (index,
  data, write flag). Their indexes are compared with the packet's here, and the newest of
  a host write (W's occupant in t+2) and H1, H2 (W and H1 now) that hits is chosen here too:
  registered into one forwarded word ``fwd`` and its flag;
* s2 ``t+2`` (C): the RAM's output register; ``old`` = W's packet value if that packet
  writes the cell (flag registered in s1 from the packet then in C), else ``fwd`` if flagged, else the RAM word: one 6-input LUT per bit, all
  its inputs registers (the one-cycle loop W -> that LUT -> ``update`` -> W);
  ``update(old)``, ``write``, the result field; registered into W and the output PHV;
* s3 ``t+3`` (W): port B writes the new value; the PHV leaves (latency 3).

So every packet sees every earlier packet's write (also back to back on one cell, one per
clock) and the RAM equals the golden model applied in packet order, a host access ordered at
the cycle it uses port B.

Host access (:class:`~netstor.gateware.csr.MemoryPort`): port B, in a cycle no acting packet
needs it. A request is taken when the packet in C (the one that would write next cycle) does
not act; it is performed in W the next cycle (a write; a read's data is on port B the cycle
after) and acked the cycle after that: 2 cycles from ``req`` in an idle pipeline (the packet
path of a bank has no second read port and needs none). While packets act on the bank every
clock there is no free port cycle (port A reads and port B writes every clock), so after
``HOST_PATIENCE`` (8) cycles the bank pulses :attr:`RegisterOp.slot_request` (again every
``HOST_RETRY`` cycles while the request waits); the data path answers with an ingress bubble
(``IngressArbiter.hold``: no new packet granted that cycle; a packet in progress is not cut, and
its later beats are bubbles of the header path anyway). The bubble reaches the bank's C stage
D cycles later, D = 2 (the data path's register on ``hold``, the arbiter) + the parser's 4 + the
latencies of the stages before the bank's + 2. Worst case from ``req`` to ``ack``:
HOST_PATIENCE + D + 2 cycles, at most 8 + 65 + 2 = 75 cycles (< 0.3 us at 250 MHz) with the header path's 64-cycle budget; one
bubble (one packet-clock) per starved host access.
"""
from __future__ import annotations

from amaranth.hdl import Mux, Signal
from amaranth.lib import data
from amaranth.lib.memory import Memory

from netstor.gateware.kit import HwEnv, target
from netstor.lang.element import Element
from netstor.lang.expr import Const, Old, as_expr
from netstor.lang.program import RegisterBank

__all__ = ["RegisterOp", "RegisterBank"]


class RegisterOp(Element):
    """Read-modify-write of ``bank[index]``: ``new = update(Old)``; ``result`` (optional field)
    receives the old or new value (``returns="old"|"new"``). ``write`` (expression, default 1)
    gates the write; a cell is never written when ``when`` is false. An index beyond the bank
    is not performed and counted (``<op>.index_oob``)."""

    def __init__(self, name, bank, *, index, update, result=None, returns="new", write=1,
                 when=None):
        super().__init__(name, when)
        if not isinstance(bank, RegisterBank):
            raise TypeError(f"register op {name}: bank must be a RegisterBank")
        if returns not in ("old", "new"):
            raise ValueError(f"register op {name}: returns must be 'old' or 'new'")
        self.bank = bank
        self.index = as_expr(index)
        old = Old(bank.width)
        self.update = as_expr(update(old) if callable(update) else update)
        self.result = result
        self.returns = returns
        self.write = as_expr(write)

    #: set by the gateware: a one-cycle pulse when a host request has waited HOST_PATIENCE
    #: cycles for a slot (and every HOST_RETRY cycles after while it waits)
    slot_request = None

    def slot_request_signal(self, prefix):
        self.slot_request = Signal(name=f"{prefix}_slot_req")
        return self.slot_request

    # the classic operations, for convenience
    @classmethod
    def add(cls, name, bank, index, amount=1, **kw):
        return cls(name, bank, index=index, update=lambda old: old + amount, **kw)

    @classmethod
    def read(cls, name, bank, index, **kw):
        return cls(name, bank, index=index, update=lambda old: old, write=0, returns="old",
                   **kw)

    @classmethod
    def write_value(cls, name, bank, index, value, **kw):
        return cls(name, bank, index=index, update=lambda old: value, returns="old", **kw)

    @property
    def bench_key(self):
        return "register_op"

    def reads(self):
        return [self.index, self.update, self.write]

    def writes(self):
        return [self.result] if self.result is not None else []

    def banks(self):
        return [self.bank]

    # ---- golden model ----------------------------------------------------------------------
    def model_counters(self):
        return [f"{self.qualname}.index_oob"]

    def evaluate(self, model, phv, env):
        bank = model.memory(self.bank.qualname)
        i = self.index.eval(env)
        if i >= bank.depth:
            model.count(f"{self.qualname}.index_oob")
            return
        old = bank.words[i]
        env.old_value = old
        write = self.write.eval(env)
        new = old
        if write or (self.result is not None and self.returns == "new"):  # else unused: skip
            new = self.update.eval(env) & ((1 << self.bank.width) - 1)
        env.old_value = None
        if write:
            bank.words[i] = new
        if self.result is not None:
            model.assign(phv, [(self.result.name, old if self.returns == "old" else new)])

    def compile(self, cg):
        words = cg.words(self.bank.qualname)
        depth, bw = self.bank.depth, self.bank.width
        i = cg.tmp("i")
        cg.emit(f"{i} = {cg.expr(self.index)}")
        if self.index.width > (depth - 1).bit_length() or depth & (depth - 1):
            with cg.block(f"if {i} >= {depth}:"):
                cg.count(f"{self.qualname}.index_oob")
            body = cg.block("else:")
        else:                            # every index value is inside the bank
            body = cg.block("if True:")
        with body:
            old = cg.tmp("old")
            cg.emit(f"{old} = {words}[{i}]")
            with cg.scope(old=old):
                if isinstance(self.write, Const):
                    write = "True" if self.write.value else None
                else:
                    write = cg.tmp("wr")
                    cg.emit(f"{write} = {cg.cond(self.write)}")
                upd = cg.expr(self.update)
                if self.update.width > bw:
                    upd = f"({upd} & {hex((1 << bw) - 1)})"
                if self.result is not None and self.returns == "new":
                    new = cg.tmp("new")
                    cg.emit(f"{new} = {upd}")
                    if write == "True":
                        cg.emit(f"{words}[{i}] = {new}")
                    elif write is not None:
                        with cg.block(f"if {write}:"):
                            cg.emit(f"{words}[{i}] = {new}")
                    cg.assign([(self.result.name, (new, bw))])
                else:
                    if write == "True":
                        cg.emit(f"{words}[{i}] = {upd}")
                    elif write is not None:
                        with cg.block(f"if {write}:"):
                            cg.emit(f"{words}[{i}] = {upd}")
                    if self.result is not None:
                        cg.assign([(self.result.name, (old, bw))])

    # ---- gateware --------------------------------------------------------------------------
    #: the element's latency in cycles (see the module docstring for the stages)
    LATENCY = 3
    #: cycles a host request may wait for a free slot before the bank pulses
    #: :attr:`slot_request` (the data path answers it with an ingress bubble) ...
    HOST_PATIENCE = 8
    #: ... and again every HOST_RETRY cycles while it still waits (longer than the bubble's
    #: way from the arbiter to the bank, so one request costs one bubble)
    HOST_RETRY = 128

    def elaborate(self, m, pipeline, valid_in, phv_in, csr, *, prefix):
        return _elaborate_rmw(self, m, pipeline, valid_in, phv_in, csr, prefix)


def _elaborate_rmw(op, m, pipeline, valid_in, phv_in, csr, prefix):
    """The pipelined read-modify-write (stages in the module docstring)."""
    bank = op.bank
    ib, w = bank.index_bits, bank.width

    def data_reg(name, shape=1):            # data: no reset (lets SRLs and BRAM regs in)
        return Signal(shape, name=f"{prefix}_{name}", reset_less=True)

    def phv_reg(name):
        return Signal(data.StructLayout(pipeline.phv.layout()), name=f"{prefix}_{name}",
                      reset_less=True)

    def ctl(name):                          # control: valid/act/write flags, reset to 0
        return Signal(name=f"{prefix}_{name}")

    # ---- s0: the index addresses port A (packet read) ----------------------------------------
    env0 = HwEnv(pipeline, phv_in)
    index_full = op.index.hw(env0)
    when, in_range = ctl("when"), ctl("in_range")
    m.d.comb += [when.eq(op.when.hw(env0).any() & valid_in),
                 in_range.eq(index_full.as_unsigned() < bank.depth)]
    oob = csr.counter(f"{op.qualname}.index_oob",
                      doc=f"{op.qualname}: accesses with index >= {bank.depth} (not performed)")
    m.d.comb += oob.eq(when & ~in_range)

    mem = Memory(shape=w, depth=bank.depth, init=[])
    m.submodules[f"{prefix}_mem"] = mem
    wp = mem.write_port()                   # port B: packet write or host write ...
    bp = mem.read_port()                    # ... or host read (same address)
    rp = mem.read_port()                    # port A: packet read
    m.d.comb += [rp.addr.eq(index_full[:ib]), rp.en.eq(1)]

    # the W slot (s3): what port B does this cycle; H1, H2: what it did 1 and 2 cycles ago
    w_pwe = ctl("w_pwe")                    # a packet writes
    w_host, w_hwe = ctl("w_host"), ctl("w_hwe")   # a host access (a write if w_hwe)
    w_idx, w_new = data_reg("w_idx", ib), data_reg("w_new", w)
    port = csr.memory(bank.qualname, w, bank.depth,
                      doc=f"register bank {bank.qualname}: {bank.depth} x {w} bits",
                      kind="register", bank=bank.qualname)
    w_we = ctl("w_we")
    w_data = Signal(w, name=f"{prefix}_w_data")
    m.d.comb += [w_we.eq(w_pwe | (w_host & w_hwe)),
                 w_data.eq(Mux(w_host, port.wdata, w_new)),
                 wp.en.eq(w_we), wp.addr.eq(w_idx), wp.data.eq(w_data),
                 bp.addr.eq(w_idx),
                 # `~w_pwe` is implied (the host gets port B only in cycles without a packet
                 # write) but Yosys cannot see it: without it a URAM bank is built twice, as a
                 # URAM port does not read in a cycle it writes (128K x 64: 58 URAM288, not 29)
                 bp.en.eq(w_host & ~w_hwe & ~w_pwe)]
    h1_we, h2_we = ctl("h1_we"), ctl("h2_we")
    h1_idx, h2_idx = data_reg("h1_idx", ib), data_reg("h2_idx", ib)
    h1_data, h2_data = data_reg("h1_data", w), data_reg("h2_data", w)
    m.d.sync += [h1_we.eq(w_we), h1_idx.eq(w_idx), h1_data.eq(w_data),
                 h2_we.eq(h1_we), h2_idx.eq(h1_idx), h2_data.eq(h1_data)]

    # ---- s1: the RAM's output latch; the forwarding selects for s2 compared here ------------
    v1, act1, idx1, phv1 = ctl("v1"), ctl("act1"), data_reg("idx1", ib), phv_reg("phv1")
    m.d.sync += [v1.eq(valid_in), act1.eq(when & in_range), idx1.eq(index_full[:ib]),
                 phv1.eq(phv_in)]
    v2, act2, idx2, phv2 = ctl("v2"), ctl("act2"), data_reg("idx2", ib), phv_reg("phv2")

    # host slot: taken (for the next cycle's W slot) when the packet now in C does not act
    hbusy = ctl("host_busy")                # taken, waiting for req to drop
    take = ctl("host_take")
    m.d.comb += take.eq(port.req & ~hbusy & ~act2)
    with m.If(take):
        m.d.sync += hbusy.eq(1)
    with m.If(~port.req):
        m.d.sync += hbusy.eq(0)

    # The RAM read (at the end of s0) missed the writes of the W slot in cycles s0, s1, s2:
    # in s2 they are H2, H1 and W. W's occupant in s2 is the packet now in C, or a host
    # access taken now; H1's is W's now, H2's is H1's now. Compare their indexes now, and
    # choose now (registered into ``fwd``) the newest of the host write and H1, H2 that hits,
    # so that s2 has one registered data word and one registered flag besides the RAM word
    # and W's packet value.
    m_w = ctl("m_w")                        # W's packet in s2 writes and has our index
    hit_host, hit_1, hit_2 = ctl("hit_host"), ctl("hit_h1"), ctl("hit_h2")
    m.d.comb += [hit_host.eq(take & port.we & (port.addr == idx1)),
                 hit_1.eq(w_we & (w_idx == idx1)),
                 hit_2.eq(h1_we & (h1_idx == idx1))]
    use_fwd, fwd = ctl("use_fwd"), data_reg("fwd", w)
    pwe = ctl("pwe")                        # the packet in C writes (set in s2 below)
    m.d.sync += [m_w.eq(pwe & (idx2 == idx1)),
                 use_fwd.eq(hit_host | hit_1 | hit_2),
                 fwd.eq(Mux(hit_host, port.wdata, Mux(hit_1, w_data, h1_data)))]
    d2 = data_reg("rdata2", w)              # the RAM's output register
    m.d.sync += [v2.eq(v1), act2.eq(act1), idx2.eq(idx1), phv2.eq(phv1), d2.eq(rp.data)]

    # ---- s2 (C): old = newest of W, H1, H2, RAM; update(old) ---------------------------------
    # one LUT per bit (5 inputs, all registers: m_w, w_new, use_fwd, fwd, the RAM word);
    # the loop W -> that LUT -> update -> W
    older = Signal(w, name=f"{prefix}_older")
    m.d.comb += older.eq(Mux(use_fwd, fwd, d2))
    old = Signal(w, name=f"{prefix}_old")
    m.d.comb += old.eq(Mux(m_w, w_new, older))
    env2 = HwEnv(pipeline, phv2, old=old)
    new = Signal(w, name=f"{prefix}_new")
    m.d.comb += new.eq(op.update.hw(env2))
    m.d.comb += pwe.eq(act2 & op.write.hw(env2).any())
    nxt = Signal(data.StructLayout(pipeline.phv.layout()), name=f"{prefix}_next")
    m.d.comb += nxt.eq(phv2)
    if op.result is not None:
        with m.If(act2):
            t = target(pipeline, nxt, op.result.name)
            m.d.comb += t.eq(old if op.returns == "old" else new)

    # ---- s3 (W): port B writes; the result leaves ------------------------------------------
    v3, phv3 = ctl("valid"), phv_reg("phv")
    m.d.sync += [w_pwe.eq(pwe), w_host.eq(take), w_hwe.eq(port.we),
                 w_idx.eq(Mux(act2, idx2, port.addr)), w_new.eq(new),
                 v3.eq(v2), phv3.eq(nxt)]
    m.d.sync += port.ack.eq(w_host)         # a write landed / a read's data is on bp.data
    m.d.comb += port.rdata.eq(bp.data)

    # ---- bounded wait: after HOST_PATIENCE cycles the bank asks for a slot (a one-cycle
    # request, repeated every HOST_RETRY cycles while the request still waits) -------------
    period = max(op.HOST_RETRY, op.HOST_PATIENCE + 1)
    wait = Signal(range(period), name=f"{prefix}_host_wait")
    with m.If(port.req & ~hbusy):
        m.d.sync += wait.eq(Mux(wait == period - 1, 0, wait + 1))
    with m.Else():
        m.d.sync += wait.eq(0)
    req = op.slot_request_signal(prefix)
    m.d.comb += req.eq(port.req & ~hbusy & (wait == op.HOST_PATIENCE))
    op._dbg = dict(host_wait=wait, host_busy=hbusy)     # for formal harnesses (not ports)
    return v3, phv3, op.LATENCY
