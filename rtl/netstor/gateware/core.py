"""``netstor_core``: the data plane with Corundum's sync-tap port names, packed per port.

This is what the generated ``mqnic_app_block`` wrapper (``netstor.build.corundum``) instantiates. All
ports are in the core clock domain (``clk``/``rst``, 250 MHz on Alveo):

* ``s_axil_*``: the application control window (AXI-Lite, 24-bit address, 32-bit data);
* ``s_axis_sync_rx_*`` (wire RX, lane p at ``[p*W +: W]``), ``s_axis_sync_tx_*`` (host TX),
  ``m_axis_sync_tx_*`` (wire TX), ``m_axis_sync_rx_*`` (host RX);
* ``s_axis_sync_tx_cpl_*`` / ``m_axis_sync_tx_cpl_*``: TX completions from the MAC / to the
  host, filtered and completed by :class:`~netstor.gateware.tx_completion.TxCompletions`.

Why the sync taps: one clock domain for all ports and the host, so one pipeline sees every
packet and every table/register is shared without clock crossing. The cost (measured by
``make bench``): one 512-bit beat per 4 ns is 128 Gb/s of frame bus for both ports together.
"""

from __future__ import annotations

from amaranth.hdl import Signal, Module, Cat, Const
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .csr import CsrBuilder
from .datapath import Datapath, RX_USER, TX_USER
from .tx_completion import TxCompletions, TxStartGate

__all__ = ["NetstorCore", "APP_ID", "VERSION"]

APP_ID = 0x4E530001          # "NS" 0x0001; also the Corundum APP_ID (config.tcl)
VERSION = (0, 1)


class NetstorCore(wiring.Component):
    """The exported top (see the module docstring for its ports, which are flat on purpose:
    the generated ``mqnic_app_block`` wrapper instantiates it by these names). Composes the
    :class:`~.datapath.Datapath`, the control block (:class:`~.csr.AxiLiteCsr`), the TX
    completion tracker (:class:`~.tx_completion.TxCompletions`) and one
    :class:`~.tx_completion.TxStartGate` per wire TX port, and unpacks/packs each port's
    lane of Corundum's vectors.

    Latency: the data path's (``datapath.latency`` cycles header path, plus buffering);
    the gates add none. Throughput: one 512-bit beat per clock through the pipeline.
    """

    def __init__(self, pipeline, *, addr_width=24, **datapath_kw):
        self.pipeline = pipeline
        P = self.P = pipeline.n_ports
        self.csr = CsrBuilder(addr_width=addr_width)
        self.datapath = Datapath(pipeline, self.csr, **datapath_kw)
        self.cpl_ctr = {}
        for p in range(P):
            for what in ("forwarded", "swallowed", "synthesised", "unexpected", "tag_mismatch"):
                self.cpl_ctr[(p, what)] = self.csr.counter(
                    f"cpl{p}.{what}", doc=f"port {p} TX completions: {what}")
        from netstor.lang.schema import program_schema
        extra = program_schema(pipeline)
        extra["latency_cycles"] = self.datapath.latency
        self.ctrl, self.schema = self.csr.build(app_id=APP_ID, version=VERSION,
                                                schema_extra=extra)
        D, K = 512, 64
        members = {}
        members.update({
            "s_axil_awaddr": In(addr_width), "s_axil_awprot": In(3), "s_axil_awvalid": In(1),
            "s_axil_awready": Out(1), "s_axil_wdata": In(32), "s_axil_wstrb": In(4),
            "s_axil_wvalid": In(1), "s_axil_wready": Out(1), "s_axil_bresp": Out(2),
            "s_axil_bvalid": Out(1), "s_axil_bready": In(1), "s_axil_araddr": In(addr_width),
            "s_axil_arprot": In(3), "s_axil_arvalid": In(1), "s_axil_arready": Out(1),
            "s_axil_rdata": Out(32), "s_axil_rresp": Out(2), "s_axil_rvalid": Out(1),
            "s_axil_rready": In(1),
        })
        for name, uw in (("sync_tx", TX_USER), ("sync_rx", RX_USER)):
            for direction, pre in ((In, "s"), (Out, "m")):
                o = Out if direction is In else In
                members.update({
                    f"{pre}_axis_{name}_tdata": direction(P * D),
                    f"{pre}_axis_{name}_tkeep": direction(P * K),
                    f"{pre}_axis_{name}_tvalid": direction(P),
                    f"{pre}_axis_{name}_tready": o(P),
                    f"{pre}_axis_{name}_tlast": direction(P),
                    f"{pre}_axis_{name}_tuser": direction(P * uw),
                })
        for direction, pre in ((In, "s"), (Out, "m")):
            o = Out if direction is In else In
            members.update({
                f"{pre}_axis_sync_tx_cpl_ts": direction(P * 96),
                f"{pre}_axis_sync_tx_cpl_tag": direction(P * 16),
                f"{pre}_axis_sync_tx_cpl_valid": direction(P),
                f"{pre}_axis_sync_tx_cpl_ready": o(P),
            })
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        P, D, K = self.P, 512, 64
        dp = self.datapath
        m.submodules.datapath = dp
        m.submodules.ctrl = self.ctrl
        for name in ("awaddr", "awprot", "awvalid", "wdata", "wstrb", "wvalid", "bready",
                     "araddr", "arprot", "arvalid", "rready"):
            m.d.comb += getattr(self.ctrl, f"s_axil_{name}").eq(getattr(self, f"s_axil_{name}"))
        for name in ("awready", "wready", "bresp", "bvalid", "arready", "rdata", "rresp",
                     "rvalid"):
            m.d.comb += getattr(self, f"s_axil_{name}").eq(getattr(self.ctrl, f"s_axil_{name}"))

        def lane(sig, p, w):
            return sig[p * w:(p + 1) * w]

        # inputs: wire RX p -> in p; host TX p -> in P+p
        for k in range(2 * P):
            name, p, uw = ("sync_rx", k, RX_USER) if k < P else ("sync_tx", k - P, TX_USER)
            src = getattr(dp, f"in{k}")
            m.d.comb += [
                src.valid.eq(getattr(self, f"s_axis_{name}_tvalid")[p]),
                getattr(self, f"s_axis_{name}_tready")[p].eq(src.ready),
                src.payload.data.eq(lane(getattr(self, f"s_axis_{name}_tdata"), p, D)),
                src.payload.keep.eq(lane(getattr(self, f"s_axis_{name}_tkeep"), p, K)),
                src.payload.last.eq(getattr(self, f"s_axis_{name}_tlast")[p]),
                src.payload.user.eq(lane(getattr(self, f"s_axis_{name}_tuser"), p, uw)),
            ]
        cpl = TxCompletions(P)
        m.submodules.tx_cpl = cpl
        # outputs: out q -> wire TX q; out P+q -> host RX q
        for q in range(2 * P):
            name, p, uw = ("sync_tx", q, TX_USER) if q < P else ("sync_rx", q - P, RX_USER)
            o = getattr(dp, f"out{q}")
            if q < P:
                # hold a packet's first beat until the completion tracker can record it
                gate = m.submodules[f"wire_tx{p}_gate"] = TxStartGate(data_width=D,
                                                                    tx_user=TX_USER)
                wiring.connect(m, o, gate.i)
                m.d.comb += [cpl.tx_start[p].eq(gate.start), cpl.tx_own[p].eq(gate.own),
                             cpl.tx_tag[p].eq(gate.tag),
                             gate.start_ready.eq(cpl.tx_start_ready[p])]
                o = gate.o
            m.d.comb += [
                o.ready.eq(getattr(self, f"m_axis_{name}_tready")[p]),
                getattr(self, f"m_axis_{name}_tvalid")[p].eq(o.valid),
                lane(getattr(self, f"m_axis_{name}_tdata"), p, D).eq(o.payload.data),
                lane(getattr(self, f"m_axis_{name}_tkeep"), p, K).eq(o.payload.keep),
                getattr(self, f"m_axis_{name}_tlast")[p].eq(o.payload.last),
                lane(getattr(self, f"m_axis_{name}_tuser"), p, uw).eq(o.payload.user[:uw]),
            ]
        for (p, what), ctr in self.cpl_ctr.items():
            m.d.comb += ctr.eq(getattr(cpl, f"cnt_{what}")[p])
        for p in range(P):
            m.d.comb += [
                cpl.synth[p].eq(dp.synth[p].valid),
                cpl.synth_tag[p].eq(dp.synth[p].payload),
                dp.synth[p].ready.eq(cpl.synth_ready[p]),
                cpl.s_cpl_ts[p].eq(lane(self.s_axis_sync_tx_cpl_ts, p, 96)),
                cpl.s_cpl_tag[p].eq(lane(self.s_axis_sync_tx_cpl_tag, p, 16)),
                cpl.s_cpl_valid[p].eq(self.s_axis_sync_tx_cpl_valid[p]),
                self.s_axis_sync_tx_cpl_ready[p].eq(cpl.s_cpl_ready[p]),
                lane(self.m_axis_sync_tx_cpl_ts, p, 96).eq(cpl.m_cpl_ts[p]),
                lane(self.m_axis_sync_tx_cpl_tag, p, 16).eq(cpl.m_cpl_tag[p]),
                self.m_axis_sync_tx_cpl_valid[p].eq(cpl.m_cpl_valid[p]),
                cpl.m_cpl_ready[p].eq(self.m_axis_sync_tx_cpl_ready[p]),
            ]
        return m
