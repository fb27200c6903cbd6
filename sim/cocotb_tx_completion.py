"""cocotb tests of netstor.gateware.tx_completion.TxCompletions (run by sim/test_corundum_top.py).

The testbench drives the component directly, one cycle at a time: inputs are written at the
falling edge and sampled by the design at the next rising edge; every output the testbench
reacts to (``*_ready``, ``m_cpl_*``) depends on registered state only, so it is read at the
falling edge before the inputs change, and the combinational counter pulses are read after
the inputs settle (``ReadOnly``).

Model per port:

* host packets get tags from a counter; each is either sent to the wire on its own port
  (``tx_start`` with ``tx_own=1``) or gets a synthesised completion (``synth``);
* other wire packets (``tx_own=0``) carry tags that deliberately collide with host tags;
* a MAC model completes every started packet in order after a random delay, with a unique
  timestamp;
* the host side applies random back-pressure (``m_cpl_ready``).

Checked: each host packet gets exactly one completion with its tag; forwarded completions keep
the MAC's timestamp and arrive in start order; synthesised ones have ts=0 and arrive in synth
order; no completion of a not-own packet reaches the host; the output payload is stable while
stalled; the counter pulses add up.
"""
import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

N_PORTS = int(os.environ.get("TXC_PORTS", "2"))
TAG_W = int(os.environ.get("TXC_TAG_WIDTH", "16"))
TS_W = int(os.environ.get("TXC_TS_WIDTH", "96"))
DEPTH = int(os.environ.get("TXC_DEPTH", "8"))


def lane(value, p, width):
    return (value >> (p * width)) & ((1 << width) - 1)


def pack(values, width):
    out = 0
    for p, v in enumerate(values):
        out |= (v & ((1 << width) - 1)) << (p * width)
    return out


def u(sig):
    return int(sig.value)


async def reset(dut):
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    for name in ("tx_start", "tx_own", "tx_tag", "synth", "synth_tag", "s_cpl_ts", "s_cpl_tag",
                 "s_cpl_valid", "m_cpl_ready"):
        getattr(dut, name).value = 0
    dut.rst.value = 1
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    await FallingEdge(dut.clk)


class Port:
    def __init__(self, p, rng):
        self.p = p
        self.rng = rng
        self.next_tag = rng.randrange(1 << TAG_W)
        self.expect_fwd = []      # (tag, ts) of own packets, in start order
        self.expect_syn = []      # tags of synthesised completions, in synth order
        self.mac = []             # [due_cycle, own, tag]
        self.ts_seq = p << 64     # unique timestamps per port
        self.got_fwd = []
        self.got_syn = []
        self.not_own_ts = set()
        self.counts = dict(forwarded=0, swallowed=0, synthesised=0, unexpected=0, tag_mismatch=0)
        self.host_tags = 0
        self.prev_out = None      # (valid, ts, tag, ready) last cycle

    def host_tag(self):
        t = self.next_tag
        self.next_tag = (self.next_tag + 1) % (1 << TAG_W)
        self.host_tags += 1
        return t


async def run_random(dut, cycles, p_start, p_own, p_synth, p_ready, seed, drain=True):
    rng = random.Random(seed)
    ports = [Port(p, rng) for p in range(N_PORTS)]
    cycle = 0
    total = cycles + (4000 if drain else 0)
    while cycle < total:
        generating = cycle < cycles
        tx_ready = u(dut.tx_start_ready)
        syn_ready = u(dut.synth_ready)
        m_valid = u(dut.m_cpl_valid)
        m_ts = u(dut.m_cpl_ts)
        m_tag = u(dut.m_cpl_tag)
        start = own = syn = cval = ready = 0
        tags, syn_tags, c_ts, c_tag = [0] * N_PORTS, [0] * N_PORTS, [0] * N_PORTS, [0] * N_PORTS
        for pt in ports:
            p = pt.p
            # output side: stability while stalled, then this cycle's handshake
            v, ts, tag = (m_valid >> p) & 1, lane(m_ts, p, TS_W), lane(m_tag, p, TAG_W)
            if pt.prev_out is not None and pt.prev_out[0] and not pt.prev_out[3]:
                assert v and (ts, tag) == pt.prev_out[1:3], \
                    f"port {p}: m_cpl changed while stalled at cycle {cycle}"
            r = 1 if (rng.random() < p_ready or not generating) else 0
            ready |= r << p
            if v and r:
                if ts == 0:
                    pt.got_syn.append(tag)
                else:
                    assert ts not in pt.not_own_ts, f"port {p}: not-own completion leaked (ts {ts:#x})"
                    pt.got_fwd.append((tag, ts))
            pt.prev_out = (v, ts, tag, r)
            # wire TX: start a packet
            if generating and (tx_ready >> p) & 1 and rng.random() < p_start:
                start |= 1 << p
                if rng.random() < p_own:
                    own |= 1 << p
                    tags[p] = pt.host_tag()
                    pt.mac.append([cycle + rng.randrange(2, 40), True, tags[p]])
                else:
                    # a packet the data plane sent: its tuser tag may equal any host tag
                    tags[p] = rng.choice([pt.next_tag, (pt.next_tag - 1) % (1 << TAG_W),
                                          rng.randrange(1 << TAG_W)])
                    pt.mac.append([cycle + rng.randrange(2, 40), False, tags[p]])
            # host packet with no completion of its own
            if generating and (syn_ready >> p) & 1 and rng.random() < p_synth:
                syn |= 1 << p
                syn_tags[p] = pt.host_tag()
                pt.expect_syn.append(syn_tags[p])
            # MAC: complete the oldest packet once it is due (in order, one per packet)
            if pt.mac and pt.mac[0][0] <= cycle:
                _, is_own, tag = pt.mac.pop(0)
                pt.ts_seq += 1
                cval |= 1 << p
                c_ts[p], c_tag[p] = pt.ts_seq, tag
                if is_own:
                    pt.expect_fwd.append((tag, pt.ts_seq))
                else:
                    pt.not_own_ts.add(pt.ts_seq)
        dut.tx_start.value = start
        dut.tx_own.value = own
        dut.tx_tag.value = pack(tags, TAG_W)
        dut.synth.value = syn
        dut.synth_tag.value = pack(syn_tags, TAG_W)
        dut.s_cpl_valid.value = cval
        dut.s_cpl_ts.value = pack(c_ts, TS_W)
        dut.s_cpl_tag.value = pack(c_tag, TAG_W)
        dut.m_cpl_ready.value = ready
        await ReadOnly()
        assert u(dut.s_cpl_ready) == (1 << N_PORTS) - 1, "s_cpl_ready must always be high"
        for name in ("forwarded", "swallowed", "synthesised", "unexpected", "tag_mismatch"):
            bits = u(getattr(dut, f"cnt_{name}"))
            for pt in ports:
                pt.counts[name] += (bits >> pt.p) & 1
        await FallingEdge(dut.clk)
        cycle += 1
        if not generating and all(not pt.mac and len(pt.got_fwd) == len(pt.expect_fwd)
                                  and len(pt.got_syn) == len(pt.expect_syn) for pt in ports):
            break
    for pt in ports:
        p = pt.p
        assert not pt.mac, f"port {p}: MAC model still has packets"
        assert pt.got_fwd == pt.expect_fwd, f"port {p}: forwarded completions differ"
        assert pt.got_syn == pt.expect_syn, f"port {p}: synthesised completions differ"
        host = sorted(t for t, _ in pt.got_fwd) + sorted(pt.got_syn)
        assert len(host) == pt.host_tags, f"port {p}: {len(host)} completions for {pt.host_tags} host packets"
        assert pt.counts["forwarded"] == len(pt.expect_fwd)
        assert pt.counts["synthesised"] == len(pt.expect_syn)
        assert pt.counts["swallowed"] == len(pt.not_own_ts)
        assert pt.counts["unexpected"] == 0 and pt.counts["tag_mismatch"] == 0
        dut._log.info(f"port {p}: {len(pt.expect_fwd)} forwarded, {len(pt.expect_syn)} synthesised, "
                      f"{len(pt.not_own_ts)} swallowed")
    return ports


@cocotb.test()
async def random_mix(dut):
    """Random own/not-own packets, synth events and host back-pressure."""
    await reset(dut)
    await run_random(dut, cycles=3000, p_start=0.5, p_own=0.5, p_synth=0.2, p_ready=0.7, seed=1)


@cocotb.test()
async def heavy_backpressure(dut):
    """Host side mostly stalled: tx_start_ready / synth_ready must throttle, nothing is lost."""
    await reset(dut)
    await run_random(dut, cycles=3000, p_start=0.9, p_own=0.7, p_synth=0.5, p_ready=0.1, seed=2)


@cocotb.test()
async def saturating(dut):
    """Every cycle: a packet start, a synth event, the host always ready."""
    await reset(dut)
    await run_random(dut, cycles=2000, p_start=1.0, p_own=0.5, p_synth=1.0, p_ready=1.0, seed=3)


@cocotb.test()
async def unexpected_and_mismatch(dut):
    """A completion with no record is dropped and counted; a wrong tag on an own record is
    forwarded (record order wins) and counted."""
    await reset(dut)
    # unexpected completion on port 0, nothing outstanding
    dut.s_cpl_valid.value = 1
    dut.s_cpl_ts.value = 0x1234
    dut.s_cpl_tag.value = 7
    dut.m_cpl_ready.value = (1 << N_PORTS) - 1
    await ReadOnly()
    assert u(dut.cnt_unexpected) & 1
    await FallingEdge(dut.clk)
    dut.s_cpl_valid.value = 0
    for _ in range(3):
        await FallingEdge(dut.clk)
        assert u(dut.m_cpl_valid) == 0, "an unexpected completion reached the host"
    # own record with tag 5, MAC answers tag 6
    dut.tx_start.value = 1
    dut.tx_own.value = 1
    dut.tx_tag.value = 5
    await FallingEdge(dut.clk)
    dut.tx_start.value = 0
    await FallingEdge(dut.clk)
    dut.s_cpl_valid.value = 1
    dut.s_cpl_ts.value = 0x55
    dut.s_cpl_tag.value = 6
    await ReadOnly()
    assert u(dut.cnt_tag_mismatch) & 1 and u(dut.cnt_forwarded) & 1
    await FallingEdge(dut.clk)
    dut.s_cpl_valid.value = 0
    assert u(dut.m_cpl_valid) & 1
    assert lane(u(dut.m_cpl_tag), 0, TAG_W) == 6 and lane(u(dut.m_cpl_ts), 0, TS_W) == 0x55
