"""cocotb testbench for EgressQueue (run by sim/test_packet_buffer.py).

A lean driver of our own presents gapless packets with ``len`` (cocotbext-axi cannot drive the
``len`` sideband), with random idle cycles between packets only (the queue assumes gapless
packets). cocotbext-axi's AxiStreamSink takes the output with random back-pressure. Every
cycle, a Python model of the admission rule (free beats = depth - written + transferred,
admit iff ceil(len/bpb) <= free) predicts the ``drop_full`` pulse exactly.
"""

import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamSink


def pause_gen(rng, prob):
    while True:
        yield rng.random() < prob


@cocotb.test()
async def egress_queue(dut):
    dw = int(os.environ["EQ_DW"])
    uw = int(os.environ["EQ_UW"])
    depth = int(os.environ["EQ_DEPTH"])
    npkt = int(os.environ["EQ_NPKT"])
    stall = float(os.environ["EQ_OUT_STALL"])
    rng = random.Random(int(os.environ.get("EQ_SEED", "1")))
    bpb = dw // 8

    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
    sink.log.setLevel("WARNING")
    sink.set_pause_generator(pause_gen(rng, stall))
    dut.s_axis_tvalid.value = 0
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await RisingEdge(dut.clk)

    pkts = []
    for _ in range(npkt):
        length = rng.randint(1, int(depth * bpb * 0.6))
        pkts.append((bytes(rng.getrandbits(8) for _ in range(length)),
                     rng.getrandbits(uw), rng.choice([0, 0, 0, 1, 2])))
    beats = []       # (valid, data, keep, last, user, len, packet index, first)
    for k, (data, user, gap) in enumerate(pkts):
        beats += [None] * gap
        n = -(-len(data) // bpb)
        for b in range(n):
            chunk = data[b * bpb:(b + 1) * bpb]
            beats.append((int.from_bytes(chunk, "little"), (1 << len(chunk)) - 1,
                          int(b == n - 1), user, len(data), k, b == 0))

    written = xfers = 0
    predicted = {}          # packet -> admitted?
    pending_check = None    # packet whose first beat was presented last cycle
    errors = []
    out_pkts = []           # (len, user) per output packet, from the output beats
    in_pkt = prev_nonlast = False
    pos = 0
    idle_tail = 0
    while idle_tail < 4 * depth + 50:
        # Everything sampled or driven here belongs to the next rising edge.
        await FallingEdge(dut.clk)
        pulse = int(dut.drop_full.value)      # decision made at the previous rising edge
        if pending_check is not None:
            if pulse != (not predicted[pending_check]):
                errors.append(f"packet {pending_check}: drop_full={pulse}, "
                              f"model admits={predicted[pending_check]}")
            pending_check = None
        elif pulse:
            errors.append("drop_full pulse without a first beat the cycle before")
        assert int(dut.s_axis_tready.value) == 1
        # ---- the input beat of this cycle (lean driver) -------------------------------------
        beat = beats[pos] if pos < len(beats) else None
        if pos < len(beats):
            pos += 1
        else:
            idle_tail += 1
        if beat is None:
            dut.s_axis_tvalid.value = 0
        else:
            data, keep, last, user, length, k, first = beat
            dut.s_axis_tdata.value = data
            dut.s_axis_tkeep.value = keep
            dut.s_axis_tlast.value = last
            dut.s_axis_tuser.value = user
            dut.s_axis_len.value = length
            dut.s_axis_tvalid.value = 1
            if first:
                need = -(-length // bpb)
                predicted[k] = need <= depth - (written - xfers)
                pending_check = k
            if predicted[k]:
                written += 1
        # ---- the output side --------------------------------------------------------------
        ov, orr = int(dut.m_axis_tvalid.value), int(dut.m_axis_tready.value)
        if prev_nonlast and not ov:
            errors.append("bubble inside an output packet")
        prev_nonlast = False
        if ov and orr:
            xfers += 1
            length, user = int(dut.m_axis_len.value), int(dut.m_axis_tuser.value)
            if not in_pkt:
                out_pkts.append((length, user))
                in_pkt = True
            elif out_pkts[-1] != (length, user):
                errors.append("len/user changed inside an output packet")
            if int(dut.m_axis_tlast.value):
                in_pkt = False
            else:
                prev_nonlast = True

    assert not errors, "\n".join(errors[:20])
    admitted = [k for k in range(npkt) if predicted[k]]
    dut._log.info("%d packets, %d admitted, %d dropped", npkt, len(admitted),
                  npkt - len(admitted))
    assert 0 < len(admitted) < npkt, "the case should both admit and drop"
    assert sink.count() == len(admitted), (sink.count(), len(admitted))
    for j, k in enumerate(admitted):
        rx = sink.recv_nowait()
        data, user, _ = pkts[k]
        assert bytes(rx.tdata) == data, f"packet {k}: data mismatch"
        assert out_pkts[j] == (len(data), user), (k, out_pkts[j], len(data), user)
