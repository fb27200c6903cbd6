"""IngressArbiter under cocotb + Verilator (testbench: sim/cocotb_arbiter.py).

Each case builds into build/sim/arbiter_<case>/.
"""

import pytest
from amaranth.hdl import Cat, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from netstor.sim.harness import elaborate, run_cocotb
from netstor.gateware.arbiter import IngressArbiter
from netstor.gateware.axis import LEN_WIDTH, PORT_WIDTH
from netstor.gateware.packet_buffer import PacketBuffer


class ArbiterTop(wiring.Component):
    """n back-pressured PacketBuffers -> IngressArbiter, flattened to AXI-Stream names."""

    def __init__(self, n, data_width, user_width, depth_beats):
        self.n, self.dw, self.uw = n, data_width, user_width
        self.bufs = [PacketBuffer(data_width=data_width, user_width=user_width,
                                  depth_beats=depth_beats, max_packets=4, backpressure=True,
                                  error_bit=False) for _ in range(n)]
        self.arb = IngressArbiter(n, data_width=data_width, user_width=user_width)
        dw, uw = data_width, user_width
        members = {}
        for k in range(n):
            members.update({
                f"s{k}_axis_tdata": In(dw), f"s{k}_axis_tkeep": In(dw // 8),
                f"s{k}_axis_tvalid": In(1), f"s{k}_axis_tready": Out(1),
                f"s{k}_axis_tlast": In(1), f"s{k}_axis_tuser": In(uw),
            })
        members.update({
            "m_axis_tdata": Out(dw), "m_axis_tkeep": Out(dw // 8), "m_axis_tvalid": Out(1),
            "m_axis_tready": In(1), "m_axis_tlast": Out(1), "m_axis_tuser": Out(uw),
            "m_axis_len": Out(LEN_WIDTH), "m_axis_port": Out(PORT_WIDTH),
            "arb_valid": Out(n), "arb_ready": Out(n), "arb_last": Out(n),
        })
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.arb = arb = self.arb
        for k, b in enumerate(self.bufs):
            m.submodules[f"buf{k}"] = b
            s = lambda f: getattr(self, f"s{k}_axis_{f}")
            m.d.comb += [
                b.i.payload.data.eq(s("tdata")), b.i.payload.keep.eq(s("tkeep")),
                b.i.payload.last.eq(s("tlast")), b.i.payload.user.eq(s("tuser")),
                b.i.valid.eq(s("tvalid")), s("tready").eq(b.i.ready),
            ]
            wiring.connect(m, b.o, arb.i[k])
        m.d.comb += [
            self.arb_valid.eq(Cat(arb.i[k].valid for k in range(self.n))),
            self.arb_ready.eq(Cat(arb.i[k].ready for k in range(self.n))),
            self.arb_last.eq(Cat(arb.i[k].payload.last for k in range(self.n))),
            self.m_axis_tdata.eq(arb.o.payload.data), self.m_axis_tkeep.eq(arb.o.payload.keep),
            self.m_axis_tlast.eq(arb.o.payload.last), self.m_axis_tuser.eq(arb.o.payload.user),
            self.m_axis_len.eq(arb.o.payload.len), self.m_axis_port.eq(arb.o.payload.port),
            self.m_axis_tvalid.eq(arb.o.valid), arb.o.ready.eq(self.m_axis_tready),
        ]
        return m


# name: (n, data_width, user_width, depth_beats, testbench args)
CASES = {
    # the pipeline's view: output always ready, heavy load, so the wait bound is reached
    "n3_w64_ready": (3, 64, 4, 256, dict(ARB_NPKT=40, ARB_MAXLEN=600, ARB_IN_IDLE=0.0,
                                           ARB_OUT_STALL=0.0, ARB_EXPECT_TIGHT=1, ARB_SEED=1)),
    # idle gaps on the inputs, random back-pressure on the output (handshake exercised)
    "n4_w64_stall": (4, 64, 3, 256, dict(ARB_NPKT=30, ARB_MAXLEN=1500, ARB_IN_IDLE=0.3,
                                           ARB_OUT_STALL=0.3, ARB_SEED=2)),
    # many short packets from 5 inputs: grants on consecutive cycles
    "n5_w64_short": (5, 64, 2, 64, dict(ARB_NPKT=40, ARB_MAXLEN=40, ARB_IN_IDLE=0.1,
                                          ARB_OUT_STALL=0.0, ARB_EXPECT_TIGHT=1, ARB_SEED=3)),
    # Corundum width: 512-bit, 17-bit TX tuser; 1-beat packets back to back
    "n2_w512": (2, 512, 17, 64, dict(ARB_NPKT=40, ARB_MAXLEN=1500, ARB_IN_IDLE=0.2,
                                       ARB_OUT_STALL=0.1, ARB_SEED=4)),
}


@pytest.mark.cocotb
@pytest.mark.parametrize("case", list(CASES))
def test_arbiter(case):
    n, dw, uw, depth, tb = CASES[case]
    top = ArbiterTop(n, dw, uw, depth)
    env = {"ARB_N": n, "ARB_DW": dw, "ARB_UW": uw, **tb}
    run_cocotb(f"arbiter_{case}", "cocotb_arbiter", toplevel="arbiter_top",
               verilog_text=elaborate(top, "arbiter_top"),
               extra_env={k: str(v) for k, v in env.items()},
               build_args=["--output-split", "0"])


def test_arbiter_rejects_bad_args():
    for bad in (0, 17, 2.5):
        with pytest.raises(ValueError):
            IngressArbiter(bad, data_width=64, user_width=1)
