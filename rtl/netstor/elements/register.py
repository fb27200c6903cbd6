"""``RegisterOp``: one read-modify-write of one cell of a register bank per packet.

Gateware: 2 cycles. c0: the index addresses the read port (transparent for the write port);
c1: ``update(old)``, the write and the result. So packet n+1 always sees packet n's write
(no lost update at one access per clock). The host writes a bank in a cycle in which no packet
writes it, and reads it through a port of its own.
"""
from __future__ import annotations

from amaranth.hdl import Mux, Signal
from amaranth.lib.memory import Memory

from netstor.gateware.kit import HwEnv, phv_signal, target
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
    def elaborate(self, m, pipeline, valid_in, phv_in, csr, *, prefix):
        bank = self.bank
        ib, w = bank.index_bits, bank.width
        env = HwEnv(pipeline, phv_in)
        index_full = self.index.hw(env)
        when = Signal(name=f"{prefix}_when")
        in_range = Signal(name=f"{prefix}_in_range")
        m.d.comb += [when.eq(self.when.hw(env).any() & valid_in),
                     in_range.eq(index_full.as_unsigned() < bank.depth)]
        mem = Memory(shape=w, depth=bank.depth, init=[])
        m.submodules[f"{prefix}_mem"] = mem
        wp = mem.write_port()
        rp = mem.read_port(transparent_for=(wp,))
        hp = mem.read_port()
        m.d.comb += [rp.addr.eq(index_full[:ib]), rp.en.eq(1)]

        v1, phv1 = Signal(name=f"{prefix}_v1"), phv_signal(pipeline, f"{prefix}_phv1")
        act1, idx1 = Signal(name=f"{prefix}_act1"), Signal(ib, name=f"{prefix}_idx1")
        m.d.sync += [v1.eq(valid_in), phv1.eq(phv_in), act1.eq(when & in_range),
                     idx1.eq(index_full[:ib])]
        oob = csr.counter(f"{self.qualname}.index_oob",
                          doc=f"{self.qualname}: accesses with index >= {bank.depth} "
                              "(not performed)")
        m.d.comb += oob.eq(when & ~in_range)

        old = rp.data
        env1 = HwEnv(pipeline, phv1, old=old)
        new = Signal(w, name=f"{prefix}_new")
        m.d.comb += new.eq(self.update.hw(env1))
        do_write = Signal(name=f"{prefix}_write")
        m.d.comb += do_write.eq(act1 & self.write.hw(env1).any())

        port = csr.memory(bank.qualname, w, bank.depth,
                          doc=f"register bank {bank.qualname}: {bank.depth} x {w} bits",
                          kind="register", bank=bank.qualname)
        host_write = Signal(name=f"{prefix}_host_write")
        m.d.comb += host_write.eq(port.req & port.we & ~port.ack & ~do_write)
        m.d.comb += [
            wp.en.eq(do_write | host_write),
            wp.addr.eq(Mux(do_write, idx1, port.addr)),
            wp.data.eq(Mux(do_write, new, port.wdata)),
            hp.addr.eq(port.addr), hp.en.eq(1),
            port.rdata.eq(hp.data),
        ]
        rpend = Signal(name=f"{prefix}_host_rpend")
        m.d.sync += port.ack.eq(0)
        with m.If(host_write):
            m.d.sync += port.ack.eq(1)
        with m.If(port.req & ~port.we & ~port.ack):
            m.d.sync += rpend.eq(~rpend)
            with m.If(rpend):
                m.d.sync += port.ack.eq(1)

        nxt = phv_signal(pipeline, f"{prefix}_next")
        m.d.comb += nxt.eq(phv1)
        if self.result is not None:
            with m.If(act1):
                t = target(pipeline, nxt, self.result.name)
                m.d.comb += t.eq(old if self.returns == "old" else new)
        valid_out, phv_out = Signal(name=f"{prefix}_valid"), phv_signal(pipeline, f"{prefix}_phv")
        m.d.sync += [valid_out.eq(v1), phv_out.eq(nxt)]
        return valid_out, phv_out, 2
