"""Corundum application-block wrapper: writes netstor's ``mqnic_app_block`` Verilog.

Corundum's ``mqnic_core`` instantiates a module named ``mqnic_app_block`` (instance
``app_block_inst``) when the build sets ``APP_ENABLE=1``, overriding its parameters by name and
connecting every port by name. :func:`mqnic_app_block_verilog` writes that module for netstor:
the same parameter names (with the template's defaults) and the same ports, and inside it

* the data plane (the Amaranth-generated ``netstor_core``) on the **sync taps** (core clock,
  250 MHz on Alveo): wire RX ``s_axis_sync_rx`` and host TX ``s_axis_sync_tx`` in, wire TX
  ``m_axis_sync_tx`` and host RX ``m_axis_sync_rx`` out, plus the sync TX completion tap, whose
  filtering the core does (:mod:`netstor.gateware.tx_completion`);
* the AXI-Lite application control window (BAR2) into the core's control block, with the
  address narrowed or zero-extended to the core's width (``AXIL_APP_CTRL_ADDR_WIDTH`` larger
  than the core's: the upper address bits are ignored, so the register map repeats);
* the direct and interface taps passed straight through (``s_*`` -> ``m_*``, completions too);
* everything else tied off so that nothing in Corundum waits on us: no AXI-Lite master or DMA
  requests (valid 0, response ready 1), the DMA RAM accepts every write command (and reports it
  done in the same cycle) and answers every read command in the cycle it is accepted with
  zeros, no DDR/HBM traffic, no statistics, ``gpio_out = 0``, ``jtag_tdo = jtag_tdi``.

Configuration checks happen at elaboration: each failed check instantiates a module that does
not exist and whose name says what is wrong (``netstor_config_error_<what>``), which Vivado,
Verilator and Icarus all reject, while a passing check elaborates to nothing.

``APP_ID`` is :data:`APP_ID` = ``32'h4E530001`` ("NS", application 1). The Linux driver
registers the auxiliary device ``mqnic.app_4e530001`` for it; the board build puts the same
value in ``config.tcl``.

The port list is checked in CI against ``boards/corundum/app_block_ports.json`` (a record of
Corundum's interface kept separately from this generator).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping

__all__ = ["APP_ID", "CoreConfig", "TEMPLATE_PARAMETERS", "app_block_ports", "core_port_list",
           "mqnic_app_block_verilog"]

#: netstor's Corundum application ID: ASCII "NS" and application number 1.
APP_ID = 0x4E530001


@dataclass(frozen=True)
class CoreConfig:
    """What the generated ``netstor_core`` was elaborated with (fixed at generate time)."""
    n_ports: int = 2               # P: network ports (PORT_COUNT)
    data_width: int = 512          # AXIS_SYNC_DATA_WIDTH
    tx_user_width: int = 17        # AXIS_SYNC_TX_USER_WIDTH = TX_TAG_WIDTH + 1
    rx_user_width: int = 97        # AXIS_SYNC_RX_USER_WIDTH = PTP_TS_WIDTH + 1
    ts_width: int = 96             # PTP_TS_WIDTH
    tag_width: int = 16            # TX_TAG_WIDTH
    axil_addr_width: int = 24      # core's s_axil address bits
    axil_data_width: int = 32
    app_id: int = APP_ID
    core_module: str = "netstor_core"

    # ``CoreConfig.coerce`` also takes Corundum's names for these fields (see _CORUNDUM_ALIASES).

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "core_module":
                if not (isinstance(v, str) and v.isidentifier()):
                    raise ValueError(f"core_module must be a Verilog identifier, not {v!r}")
                continue
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"{f.name} must be an int, not {v!r}")
            if f.name == "app_id":
                if not 0 <= v < 2 ** 32:
                    raise ValueError(f"app_id must fit 32 bits, not {v:#x}")
            elif v < 1:
                raise ValueError(f"{f.name} must be positive, not {v}")
        if self.data_width % 8:
            raise ValueError(f"data_width must be a multiple of 8, not {self.data_width}")
        if self.tx_user_width != self.tag_width + 1:
            raise ValueError("tx_user_width must be tag_width + 1 (Corundum TX tuser: flag, tag)")

    @classmethod
    def coerce(cls, params) -> "CoreConfig":
        if params is None:
            return cls()
        if isinstance(params, cls):
            return params
        if isinstance(params, Mapping):
            known = {f.name for f in dataclasses.fields(cls)}
            kw = {}
            for key, value in params.items():
                field = _CORUNDUM_ALIASES.get(key, key)
                if field not in known:
                    raise ValueError(f"unknown CoreConfig key {key!r}; known: {sorted(known)} "
                                     f"or Corundum names {sorted(_CORUNDUM_ALIASES)}")
                if field in kw and kw[field] != value:
                    raise ValueError(f"{key!r} given twice with different values")
                kw[field] = value
            # Corundum derives the user widths from the tag and timestamp widths.
            if "tag_width" in kw and "tx_user_width" not in kw:
                kw["tx_user_width"] = kw["tag_width"] + 1
            if "ts_width" in kw and "rx_user_width" not in kw:
                kw["rx_user_width"] = kw["ts_width"] + 1
            return cls(**kw)
        raise TypeError(f"params must be None, a CoreConfig or a mapping, not {type(params).__name__}")


#: Corundum parameter names accepted by :meth:`CoreConfig.coerce` in place of field names.
_CORUNDUM_ALIASES = {
    "PORT_COUNT": "n_ports",
    "AXIS_SYNC_DATA_WIDTH": "data_width",
    "AXIS_SYNC_TX_USER_WIDTH": "tx_user_width",
    "AXIS_SYNC_RX_USER_WIDTH": "rx_user_width",
    "PTP_TS_WIDTH": "ts_width",
    "TX_TAG_WIDTH": "tag_width",
    "APP_ID": "app_id",
}


# ---------------------------------------------------------------------------------------------
# Corundum's parameter list: (section, [(name, template default), ...]).
# ---------------------------------------------------------------------------------------------

def _user(mem):
    out = []
    for ch in ("AW", "W", "B", "AR", "R"):
        out += [(f"AXI_{mem}_{ch}USER_ENABLE", "0"), (f"AXI_{mem}_{ch}USER_WIDTH", "1")]
    return out


TEMPLATE_PARAMETERS = [
    ("Structural configuration", [
        ("IF_COUNT", "1"), ("PORTS_PER_IF", "1"), ("SCHED_PER_IF", "PORTS_PER_IF"),
        ("PORT_COUNT", "IF_COUNT*PORTS_PER_IF")]),
    ("Clock configuration", [
        ("CLK_PERIOD_NS_NUM", "4"), ("CLK_PERIOD_NS_DENOM", "1")]),
    ("PTP configuration", [
        ("PTP_CLK_PERIOD_NS_NUM", "4"), ("PTP_CLK_PERIOD_NS_DENOM", "1"), ("PTP_TS_WIDTH", "96"),
        ("PTP_PORT_CDC_PIPELINE", "0"), ("PTP_PEROUT_ENABLE", "0"), ("PTP_PEROUT_COUNT", "1")]),
    ("Interface configuration", [
        ("PTP_TS_ENABLE", "1"), ("TX_TAG_WIDTH", "16"), ("MAX_TX_SIZE", "9214"),
        ("MAX_RX_SIZE", "9214")]),
    ("RAM configuration (DDR)", [
        ("DDR_CH", "1"), ("DDR_ENABLE", "0"), ("DDR_GROUP_SIZE", "1"),
        ("AXI_DDR_DATA_WIDTH", "256"), ("AXI_DDR_ADDR_WIDTH", "32"),
        ("AXI_DDR_STRB_WIDTH", "(AXI_DDR_DATA_WIDTH/8)"), ("AXI_DDR_ID_WIDTH", "8"),
        *_user("DDR"),
        ("AXI_DDR_MAX_BURST_LEN", "256"), ("AXI_DDR_NARROW_BURST", "0"),
        ("AXI_DDR_FIXED_BURST", "0"), ("AXI_DDR_WRAP_BURST", "0")]),
    ("RAM configuration (HBM)", [
        ("HBM_CH", "1"), ("HBM_ENABLE", "0"), ("HBM_GROUP_SIZE", "1"),
        ("AXI_HBM_DATA_WIDTH", "256"), ("AXI_HBM_ADDR_WIDTH", "32"),
        ("AXI_HBM_STRB_WIDTH", "(AXI_HBM_DATA_WIDTH/8)"), ("AXI_HBM_ID_WIDTH", "8"),
        *_user("HBM"),
        ("AXI_HBM_MAX_BURST_LEN", "256"), ("AXI_HBM_NARROW_BURST", "0"),
        ("AXI_HBM_FIXED_BURST", "0"), ("AXI_HBM_WRAP_BURST", "0")]),
    ("Application configuration", [
        ("APP_ID", "32'h12340001"), ("APP_CTRL_ENABLE", "1"), ("APP_DMA_ENABLE", "1"),
        ("APP_AXIS_DIRECT_ENABLE", "1"), ("APP_AXIS_SYNC_ENABLE", "1"),
        ("APP_AXIS_IF_ENABLE", "1"), ("APP_STAT_ENABLE", "1"),
        ("APP_GPIO_IN_WIDTH", "32"), ("APP_GPIO_OUT_WIDTH", "32")]),
    ("DMA interface configuration", [
        ("DMA_ADDR_WIDTH", "64"), ("DMA_IMM_ENABLE", "0"), ("DMA_IMM_WIDTH", "32"),
        ("DMA_LEN_WIDTH", "16"), ("DMA_TAG_WIDTH", "16"), ("RAM_SEL_WIDTH", "4"),
        ("RAM_ADDR_WIDTH", "16"), ("RAM_SEG_COUNT", "2"),
        ("RAM_SEG_DATA_WIDTH", "256*2/RAM_SEG_COUNT"),
        ("RAM_SEG_BE_WIDTH", "RAM_SEG_DATA_WIDTH/8"),
        ("RAM_SEG_ADDR_WIDTH", "RAM_ADDR_WIDTH-$clog2(RAM_SEG_COUNT*RAM_SEG_BE_WIDTH)"),
        ("RAM_PIPELINE", "2")]),
    ("AXI-Lite slave (application control from the host, BAR2)", [
        ("AXIL_APP_CTRL_DATA_WIDTH", "32"), ("AXIL_APP_CTRL_ADDR_WIDTH", "16"),
        ("AXIL_APP_CTRL_STRB_WIDTH", "(AXIL_APP_CTRL_DATA_WIDTH/8)")]),
    ("AXI-Lite master (control of the NIC)", [
        ("AXIL_CTRL_DATA_WIDTH", "32"), ("AXIL_CTRL_ADDR_WIDTH", "16"),
        ("AXIL_CTRL_STRB_WIDTH", "(AXIL_CTRL_DATA_WIDTH/8)")]),
    ("Ethernet, direct taps (MAC clocks)", [
        ("AXIS_DATA_WIDTH", "512"), ("AXIS_KEEP_WIDTH", "AXIS_DATA_WIDTH/8"),
        ("AXIS_TX_USER_WIDTH", "TX_TAG_WIDTH + 1"),
        ("AXIS_RX_USER_WIDTH", "(PTP_TS_ENABLE ? PTP_TS_WIDTH : 0) + 1"),
        ("AXIS_RX_USE_READY", "0")]),
    ("Ethernet, sync taps (core clock)", [
        ("AXIS_SYNC_DATA_WIDTH", "AXIS_DATA_WIDTH"),
        ("AXIS_SYNC_KEEP_WIDTH", "AXIS_SYNC_DATA_WIDTH/8"),
        ("AXIS_SYNC_TX_USER_WIDTH", "AXIS_TX_USER_WIDTH"),
        ("AXIS_SYNC_RX_USER_WIDTH", "AXIS_RX_USER_WIDTH")]),
    ("Ethernet, interface taps", [
        ("AXIS_IF_DATA_WIDTH", "AXIS_SYNC_DATA_WIDTH*2**$clog2(PORTS_PER_IF)"),
        ("AXIS_IF_KEEP_WIDTH", "AXIS_IF_DATA_WIDTH/8"),
        ("AXIS_IF_TX_ID_WIDTH", "12"),
        ("AXIS_IF_RX_ID_WIDTH", "PORTS_PER_IF > 1 ? $clog2(PORTS_PER_IF) : 1"),
        ("AXIS_IF_TX_DEST_WIDTH", "$clog2(PORTS_PER_IF)+4"),
        ("AXIS_IF_RX_DEST_WIDTH", "8"),
        ("AXIS_IF_TX_USER_WIDTH", "AXIS_SYNC_TX_USER_WIDTH"),
        ("AXIS_IF_RX_USER_WIDTH", "AXIS_SYNC_RX_USER_WIDTH")]),
    ("Statistics counters", [
        ("STAT_ENABLE", "1"), ("STAT_INC_WIDTH", "24"), ("STAT_ID_WIDTH", "12")]),
]


# ---------------------------------------------------------------------------------------------
# Corundum's port list: (section, [(direction, width expression or None for 1 bit, name)]).
# ---------------------------------------------------------------------------------------------

def _axil(prefix, slave, addr_w, data_w, strb_w):
    fwd, back = ("input", "output") if slave else ("output", "input")
    sig = [
        (fwd, addr_w, "awaddr"), (fwd, "3", "awprot"), (fwd, None, "awvalid"), (back, None, "awready"),
        (fwd, data_w, "wdata"), (fwd, strb_w, "wstrb"), (fwd, None, "wvalid"), (back, None, "wready"),
        (back, "2", "bresp"), (back, None, "bvalid"), (fwd, None, "bready"),
        (fwd, addr_w, "araddr"), (fwd, "3", "arprot"), (fwd, None, "arvalid"), (back, None, "arready"),
        (back, data_w, "rdata"), (back, "2", "rresp"), (back, None, "rvalid"), (fwd, None, "rready"),
    ]
    return [(d, w, prefix + n) for d, w, n in sig]


def _dma(ch):
    rd, rs = f"m_axis_{ch}_dma_read_desc_", f"s_axis_{ch}_dma_read_desc_status_"
    wr, ws = f"m_axis_{ch}_dma_write_desc_", f"s_axis_{ch}_dma_write_desc_status_"
    out = [("output", "DMA_ADDR_WIDTH", rd + "dma_addr"), ("output", "RAM_SEL_WIDTH", rd + "ram_sel"),
           ("output", "RAM_ADDR_WIDTH", rd + "ram_addr"), ("output", "DMA_LEN_WIDTH", rd + "len"),
           ("output", "DMA_TAG_WIDTH", rd + "tag"), ("output", None, rd + "valid"),
           ("input", None, rd + "ready"),
           ("input", "DMA_TAG_WIDTH", rs + "tag"), ("input", "4", rs + "error"),
           ("input", None, rs + "valid"),
           ("output", "DMA_ADDR_WIDTH", wr + "dma_addr"), ("output", "RAM_SEL_WIDTH", wr + "ram_sel"),
           ("output", "RAM_ADDR_WIDTH", wr + "ram_addr"), ("output", "DMA_IMM_WIDTH", wr + "imm"),
           ("output", None, wr + "imm_en"), ("output", "DMA_LEN_WIDTH", wr + "len"),
           ("output", "DMA_TAG_WIDTH", wr + "tag"), ("output", None, wr + "valid"),
           ("input", None, wr + "ready"),
           ("input", "DMA_TAG_WIDTH", ws + "tag"), ("input", "4", ws + "error"),
           ("input", None, ws + "valid")]
    return out


def _dma_ram(ch):
    r, S = f"{ch}_dma_ram_", "RAM_SEG_COUNT"
    return [("input", f"{S}*RAM_SEL_WIDTH", r + "wr_cmd_sel"),
            ("input", f"{S}*RAM_SEG_BE_WIDTH", r + "wr_cmd_be"),
            ("input", f"{S}*RAM_SEG_ADDR_WIDTH", r + "wr_cmd_addr"),
            ("input", f"{S}*RAM_SEG_DATA_WIDTH", r + "wr_cmd_data"),
            ("input", S, r + "wr_cmd_valid"), ("output", S, r + "wr_cmd_ready"),
            ("output", S, r + "wr_done"),
            ("input", f"{S}*RAM_SEL_WIDTH", r + "rd_cmd_sel"),
            ("input", f"{S}*RAM_SEG_ADDR_WIDTH", r + "rd_cmd_addr"),
            ("input", S, r + "rd_cmd_valid"), ("output", S, r + "rd_cmd_ready"),
            ("output", f"{S}*RAM_SEG_DATA_WIDTH", r + "rd_resp_data"),
            ("output", S, r + "rd_resp_valid"), ("input", S, r + "rd_resp_ready")]


def _axis(prefix, slave, lanes, data_w, keep_w, user_w, sideband=()):
    fwd, back = ("input", "output") if slave else ("output", "input")
    out = [(fwd, f"{lanes}*{data_w}", prefix + "tdata"), (fwd, f"{lanes}*{keep_w}", prefix + "tkeep"),
           (fwd, lanes, prefix + "tvalid"), (back, lanes, prefix + "tready"),
           (fwd, lanes, prefix + "tlast")]
    out += [(fwd, f"{lanes}*{w}", prefix + n) for n, w in sideband]
    out.append((fwd, f"{lanes}*{user_w}", prefix + "tuser"))
    return out


def _cpl(prefix, slave, lanes):
    fwd, back = ("input", "output") if slave else ("output", "input")
    return [(fwd, f"{lanes}*PTP_TS_WIDTH", prefix + "ts"), (fwd, f"{lanes}*TX_TAG_WIDTH", prefix + "tag"),
            (fwd, lanes, prefix + "valid"), (back, lanes, prefix + "ready")]


def _taps(kind, lanes, dw, kw, tx_uw, rx_uw, tx_side=(), rx_side=()):
    return (_axis(f"s_axis_{kind}_tx_", True, lanes, dw, kw, tx_uw, tx_side)
            + _axis(f"m_axis_{kind}_tx_", False, lanes, dw, kw, tx_uw, tx_side)
            + _cpl(f"s_axis_{kind}_tx_cpl_", True, lanes)
            + _cpl(f"m_axis_{kind}_tx_cpl_", False, lanes)
            + _axis(f"s_axis_{kind}_rx_", True, lanes, dw, kw, rx_uw, rx_side)
            + _axis(f"m_axis_{kind}_rx_", False, lanes, dw, kw, rx_uw, rx_side))


def _axi_mem(mem):
    ch, X, p = f"{mem.upper()}_CH", f"AXI_{mem.upper()}_", f"m_axi_{mem}_"
    out = [("input", ch, f"{mem}_clk"), ("input", ch, f"{mem}_rst")]
    for a in ("aw", "ar"):
        out += [("output", f"{ch}*{X}ID_WIDTH", p + a + "id"),
                ("output", f"{ch}*{X}ADDR_WIDTH", p + a + "addr"),
                ("output", f"{ch}*8", p + a + "len"), ("output", f"{ch}*3", p + a + "size"),
                ("output", f"{ch}*2", p + a + "burst"), ("output", ch, p + a + "lock"),
                ("output", f"{ch}*4", p + a + "cache"), ("output", f"{ch}*3", p + a + "prot"),
                ("output", f"{ch}*4", p + a + "qos"),
                ("output", f"{ch}*{X}{a.upper()}USER_WIDTH", p + a + "user"),
                ("output", ch, p + a + "valid"), ("input", ch, p + a + "ready")]
        if a == "aw":
            out += [("output", f"{ch}*{X}DATA_WIDTH", p + "wdata"),
                    ("output", f"{ch}*{X}STRB_WIDTH", p + "wstrb"), ("output", ch, p + "wlast"),
                    ("output", f"{ch}*{X}WUSER_WIDTH", p + "wuser"), ("output", ch, p + "wvalid"),
                    ("input", ch, p + "wready"),
                    ("input", f"{ch}*{X}ID_WIDTH", p + "bid"), ("input", f"{ch}*2", p + "bresp"),
                    ("input", f"{ch}*{X}BUSER_WIDTH", p + "buser"), ("input", ch, p + "bvalid"),
                    ("output", ch, p + "bready")]
        else:
            out += [("input", f"{ch}*{X}ID_WIDTH", p + "rid"),
                    ("input", f"{ch}*{X}DATA_WIDTH", p + "rdata"), ("input", f"{ch}*2", p + "rresp"),
                    ("input", ch, p + "rlast"), ("input", f"{ch}*{X}RUSER_WIDTH", p + "ruser"),
                    ("input", ch, p + "rvalid"), ("output", ch, p + "rready")]
    out.append(("input", ch, f"{mem}_status"))
    return out


def app_block_ports():
    """Corundum's ``mqnic_app_block`` ports: ``[(section, [(direction, width, name), ...])]``.

    ``width`` is a Verilog expression for the vector width, or ``None`` for a single bit.
    """
    PC, IC = "PORT_COUNT", "IF_COUNT"
    return [
        ("Clock and reset (core clock; 250 MHz on Alveo)",
         [("input", None, "clk"), ("input", None, "rst")]),
        ("AXI-Lite slave: application control from the host (BAR2)",
         _axil("s_axil_app_ctrl_", True, "AXIL_APP_CTRL_ADDR_WIDTH", "AXIL_APP_CTRL_DATA_WIDTH",
               "AXIL_APP_CTRL_STRB_WIDTH")),
        ("AXI-Lite master: control of the NIC (tied off)",
         _axil("m_axil_ctrl_", False, "AXIL_CTRL_ADDR_WIDTH", "AXIL_CTRL_DATA_WIDTH",
               "AXIL_CTRL_STRB_WIDTH")),
        ("DMA descriptors, control channel (tied off)", _dma("ctrl")),
        ("DMA descriptors, data channel (tied off)", _dma("data")),
        ("DMA RAM, control channel (minimal RAM model: accepts all, reads zeros)", _dma_ram("ctrl")),
        ("DMA RAM, data channel (minimal RAM model: accepts all, reads zeros)", _dma_ram("data")),
        ("PTP (unused)",
         [("input", None, n) for n in ("ptp_clk", "ptp_rst", "ptp_sample_clk", "ptp_td_sd",
                                       "ptp_pps", "ptp_pps_str", "ptp_sync_locked")]
         + [("input", "PTP_TS_WIDTH", "ptp_sync_ts_rel"), ("input", None, "ptp_sync_ts_rel_step"),
            ("input", "PTP_TS_WIDTH", "ptp_sync_ts_tod"), ("input", None, "ptp_sync_ts_tod_step"),
            ("input", None, "ptp_sync_pps"), ("input", None, "ptp_sync_pps_str")]
         + [("input", "PTP_PEROUT_COUNT", f"ptp_perout_{n}") for n in ("locked", "error", "pulse")]),
        ("Ethernet, direct taps (per-port MAC clocks; passed through)",
         [("input", PC, "direct_tx_clk"), ("input", PC, "direct_tx_rst")]
         + _axis("s_axis_direct_tx_", True, PC, "AXIS_DATA_WIDTH", "AXIS_KEEP_WIDTH", "AXIS_TX_USER_WIDTH")
         + _axis("m_axis_direct_tx_", False, PC, "AXIS_DATA_WIDTH", "AXIS_KEEP_WIDTH", "AXIS_TX_USER_WIDTH")
         + _cpl("s_axis_direct_tx_cpl_", True, PC) + _cpl("m_axis_direct_tx_cpl_", False, PC)
         + [("input", PC, "direct_rx_clk"), ("input", PC, "direct_rx_rst")]
         + _axis("s_axis_direct_rx_", True, PC, "AXIS_DATA_WIDTH", "AXIS_KEEP_WIDTH", "AXIS_RX_USER_WIDTH")
         + _axis("m_axis_direct_rx_", False, PC, "AXIS_DATA_WIDTH", "AXIS_KEEP_WIDTH", "AXIS_RX_USER_WIDTH")),
        ("Ethernet, sync taps (core clock; the netstor data plane)",
         _taps("sync", PC, "AXIS_SYNC_DATA_WIDTH", "AXIS_SYNC_KEEP_WIDTH",
               "AXIS_SYNC_TX_USER_WIDTH", "AXIS_SYNC_RX_USER_WIDTH")),
        ("Ethernet, interface taps (core clock; passed through)",
         _taps("if", IC, "AXIS_IF_DATA_WIDTH", "AXIS_IF_KEEP_WIDTH",
               "AXIS_IF_TX_USER_WIDTH", "AXIS_IF_RX_USER_WIDTH",
               tx_side=(("tid", "AXIS_IF_TX_ID_WIDTH"), ("tdest", "AXIS_IF_TX_DEST_WIDTH")),
               rx_side=(("tid", "AXIS_IF_RX_ID_WIDTH"), ("tdest", "AXIS_IF_RX_DEST_WIDTH")))),
        ("DDR AXI masters (tied off)", _axi_mem("ddr")),
        ("HBM AXI masters (tied off)", _axi_mem("hbm")),
        ("Statistics increments (tied off)",
         [("output", "STAT_INC_WIDTH", "m_axis_stat_tdata"), ("output", "STAT_ID_WIDTH", "m_axis_stat_tid"),
          ("output", None, "m_axis_stat_tvalid"), ("input", None, "m_axis_stat_tready")]),
        ("GPIO and JTAG (tied off; JTAG bypass)",
         [("input", "APP_GPIO_IN_WIDTH", "gpio_in"), ("output", "APP_GPIO_OUT_WIDTH", "gpio_out"),
          ("input", None, "jtag_tdi"), ("output", None, "jtag_tdo"),
          ("input", None, "jtag_tms"), ("input", None, "jtag_tck")]),
    ]


# ---------------------------------------------------------------------------------------------
# Verilog writer
# ---------------------------------------------------------------------------------------------

def _range(width):
    return "" if width is None else f"[{width}-1:0]"


def _sync_core_ports():
    """The sync-tap signals the core takes, by suffix (same names on both sides)."""
    names = []
    for d in ("s", "m"):
        names += [f"{d}_axis_sync_tx_{s}" for s in ("tdata", "tkeep", "tvalid", "tready", "tlast", "tuser")]
        names += [f"{d}_axis_sync_tx_cpl_{s}" for s in ("ts", "tag", "valid", "ready")]
        names += [f"{d}_axis_sync_rx_{s}" for s in ("tdata", "tkeep", "tvalid", "tready", "tlast", "tuser")]
    return names


def _passthrough(kind, has_side):
    lines = []
    side = ("tid", "tdest") if has_side else ()
    for dirn in ("tx", "rx"):
        for s in ("tdata", "tkeep", "tvalid", "tlast", *side, "tuser"):
            lines.append(f"assign m_axis_{kind}_{dirn}_{s} = s_axis_{kind}_{dirn}_{s};")
        lines.append(f"assign s_axis_{kind}_{dirn}_tready = m_axis_{kind}_{dirn}_tready;")
        if dirn == "tx":
            for s in ("ts", "tag", "valid"):
                lines.append(f"assign m_axis_{kind}_tx_cpl_{s} = s_axis_{kind}_tx_cpl_{s};")
            lines.append(f"assign s_axis_{kind}_tx_cpl_ready = m_axis_{kind}_tx_cpl_ready;")
    return lines


def _checks(cfg: CoreConfig):
    """(error-module suffix, Verilog condition that must hold, explanation)."""
    P = cfg.n_ports
    return [
        (f"APP_ID_must_be_32h{cfg.app_id:08X}", f"APP_ID == 32'h{cfg.app_id:08X}",
         "the build's APP_ID (config.tcl) is netstor's"),
        (f"PORT_COUNT_must_be_{P}", f"PORT_COUNT == {P}",
         "the core was generated for this many ports"),
        ("PORT_COUNT_must_be_IF_COUNT_times_PORTS_PER_IF", "PORT_COUNT == IF_COUNT*PORTS_PER_IF",
         "Corundum's own relation"),
        (f"AXIS_DATA_WIDTH_must_be_{cfg.data_width}", f"AXIS_DATA_WIDTH == {cfg.data_width}",
         "100G datapath width"),
        (f"AXIS_SYNC_DATA_WIDTH_must_be_{cfg.data_width}",
         f"AXIS_SYNC_DATA_WIDTH == {cfg.data_width} && AXIS_SYNC_KEEP_WIDTH == {cfg.data_width // 8}",
         "the core's stream width"),
        (f"AXIS_SYNC_TX_USER_WIDTH_must_be_{cfg.tx_user_width}",
         f"AXIS_SYNC_TX_USER_WIDTH == {cfg.tx_user_width}", "TX tuser = {tag, flag}"),
        (f"AXIS_SYNC_RX_USER_WIDTH_must_be_{cfg.rx_user_width}",
         f"AXIS_SYNC_RX_USER_WIDTH == {cfg.rx_user_width}", "RX tuser = {timestamp, error}"),
        (f"PTP_TS_WIDTH_must_be_{cfg.ts_width}", f"PTP_TS_WIDTH == {cfg.ts_width}",
         "completion timestamp width"),
        (f"TX_TAG_WIDTH_must_be_{cfg.tag_width}", f"TX_TAG_WIDTH == {cfg.tag_width}",
         "completion tag width"),
        (f"AXIL_APP_CTRL_DATA_WIDTH_must_be_{cfg.axil_data_width}",
         f"AXIL_APP_CTRL_DATA_WIDTH == {cfg.axil_data_width} && "
         f"AXIL_APP_CTRL_STRB_WIDTH == {cfg.axil_data_width // 8}", "control registers are 32-bit"),
        ("APP_AXIS_SYNC_ENABLE_must_be_1", "APP_AXIS_SYNC_ENABLE == 1",
         "with the sync tap bypassed the data plane would see no traffic"),
        ("APP_CTRL_ENABLE_must_be_1", "APP_CTRL_ENABLE == 1",
         "the host programs the data plane through the control window"),
    ]


def mqnic_app_block_verilog(params=None) -> str:
    """Verilog text of netstor's ``mqnic_app_block`` (see the module docstring).

    ``params``: ``None`` (the Alveo 100G core: 2 ports, 512-bit), a :class:`CoreConfig`, or a
    mapping of :class:`CoreConfig` field names to values.
    """
    cfg = CoreConfig.coerce(params)
    A = cfg.axil_addr_width
    L: list[str] = []
    w = L.append

    w("// Generated by netstor.corundum.mqnic_app_block_verilog(); do not edit.")
    w("//")
    w("// netstor data plane as Corundum's application block (mqnic_app_block).")
    w(f"// APP_ID 32'h{cfg.app_id:08X}; core '{cfg.core_module}' built for {cfg.n_ports} ports,")
    w(f"// {cfg.data_width}-bit streams, TX tuser {cfg.tx_user_width}, RX tuser {cfg.rx_user_width},"
      f" {A}-bit control address.")
    w("//   sync taps            -> netstor core (wire RX + host TX in, wire TX + host RX out)")
    w("//   s_axil_app_ctrl      -> netstor core control registers")
    w("//   direct and IF taps   -> passed straight through")
    w("//   everything else      -> tied off (nothing in Corundum waits on this block)")
    w("")
    w("`resetall")
    w("`timescale 1ns / 1ps")
    w("`default_nettype none")
    w("")
    w("// Most of Corundum's parameters do not matter to this block; keep lint quiet about them.")
    w("// verilator lint_off UNUSEDPARAM")
    w("module mqnic_app_block #")
    w("(")
    flat = [(sec, n, d) for sec, items in TEMPLATE_PARAMETERS for n, d in items]
    last_sec = None
    for i, (sec, name, default) in enumerate(flat):
        if sec != last_sec:
            if last_sec is not None:
                w("")
            w(f"    // {sec}")
            last_sec = sec
        comma = "," if i < len(flat) - 1 else ""
        w(f"    parameter {name} = {default}{comma}")
    w(")")
    w("(")
    sections = app_block_ports()
    nports = sum(len(p) for _, p in sections)
    k = 0
    for si, (sec, ports) in enumerate(sections):
        if si:
            w("")
        w(f"    // {sec}")
        for d, width, name in ports:
            k += 1
            comma = "," if k < nports else ""
            decl = f"{d:<6} wire {_range(width)}"
            w(f"    {decl:<48} {name}{comma}")
    w(");")
    w("// verilator lint_on UNUSEDPARAM")
    w("")

    # -- checks -----------------------------------------------------------------------------
    w("/*")
    w(" * Configuration checks. A failing check instantiates a module that does not exist; the")
    w(" * tool's 'module not found' error names the problem. Passing checks elaborate to nothing.")
    w(" */")
    w("generate")
    for i, (suffix, cond, why) in enumerate(_checks(cfg)):
        w(f"    // {why}")
        w(f"    if (!({cond})) begin : check_{i}_{suffix.split('_must_')[0].lower()}")
        w(f"        netstor_config_error_{suffix} config_error ();")
        w("    end")
    w("endgenerate")
    w("")

    # -- control window ---------------------------------------------------------------------
    w("/*")
    w(f" * AXI-Lite control window: the core decodes {A} address bits. A narrower window is")
    w(" * zero-extended; of a wider one the upper bits are ignored (the register map repeats).")
    w(" */")
    w(f"wire [{A - 1}:0] core_axil_awaddr;")
    w(f"wire [{A - 1}:0] core_axil_araddr;")
    w("generate")
    w(f"    if (AXIL_APP_CTRL_ADDR_WIDTH > {A}) begin : axil_addr_narrow")
    w(f"        assign core_axil_awaddr = s_axil_app_ctrl_awaddr[{A - 1}:0];")
    w(f"        assign core_axil_araddr = s_axil_app_ctrl_araddr[{A - 1}:0];")
    w(f"        wire unused_axil_addr_high = &{{1'b0, s_axil_app_ctrl_awaddr[AXIL_APP_CTRL_ADDR_WIDTH-1:{A}],")
    w(f"                                       s_axil_app_ctrl_araddr[AXIL_APP_CTRL_ADDR_WIDTH-1:{A}]}};")
    w(f"    end else if (AXIL_APP_CTRL_ADDR_WIDTH == {A}) begin : axil_addr_same")
    w("        assign core_axil_awaddr = s_axil_app_ctrl_awaddr;")
    w("        assign core_axil_araddr = s_axil_app_ctrl_araddr;")
    w("    end else begin : axil_addr_widen")
    w(f"        assign core_axil_awaddr = {{{{({A}-AXIL_APP_CTRL_ADDR_WIDTH){{1'b0}}}}, s_axil_app_ctrl_awaddr}};")
    w(f"        assign core_axil_araddr = {{{{({A}-AXIL_APP_CTRL_ADDR_WIDTH){{1'b0}}}}, s_axil_app_ctrl_araddr}};")
    w("    end")
    w("endgenerate")
    w("")

    # -- core instance ----------------------------------------------------------------------
    w("/*")
    w(" * The data plane. Lane p of every vector is bits [p*W +: W], as Corundum packs arrays.")
    w(" */")
    w(f"{cfg.core_module} core (")
    conns = [("clk", "clk"), ("rst", "rst")]
    for s in ("awaddr", "araddr"):
        conns.append((f"s_axil_{s}", f"core_axil_{s}"))
    for s in ("awprot", "awvalid", "awready", "wdata", "wstrb", "wvalid", "wready", "bresp",
              "bvalid", "bready", "arprot", "arvalid", "arready", "rdata", "rresp", "rvalid",
              "rready"):
        conns.append((f"s_axil_{s}", f"s_axil_app_ctrl_{s}"))
    conns.sort(key=lambda c: _AXIL_ORDER.index(c[0]) if c[0] in _AXIL_ORDER else -1)
    conns += [(n, n) for n in _sync_core_ports()]
    for i, (port, sig) in enumerate(conns):
        comma = "," if i < len(conns) - 1 else ""
        w(f"    .{port}({sig}){comma}")
    w(");")
    w("")

    # -- pass-through -----------------------------------------------------------------------
    w("/*")
    w(" * Direct taps (MAC clock domains) and interface taps: passed straight through.")
    w(" */")
    L.extend(_passthrough("direct", False))
    w("")
    L.extend(_passthrough("if", True))
    w("")

    # -- tie-offs ---------------------------------------------------------------------------
    w("/*")
    w(" * Unused interfaces. Masters never request (valid 0) and always accept responses;")
    w(" * the DMA RAMs behave as an always-ready memory that reads zeros, so a stray DMA")
    w(" * operation towards this block completes instead of hanging the DMA engine.")
    w(" */")
    for s, v in (("awaddr", "0"), ("awprot", "0"), ("awvalid", "1'b0"), ("wdata", "0"),
                 ("wstrb", "0"), ("wvalid", "1'b0"), ("bready", "1'b1"), ("araddr", "0"),
                 ("arprot", "0"), ("arvalid", "1'b0"), ("rready", "1'b1")):
        w(f"assign m_axil_ctrl_{s} = {v};")
    w("")
    for ch in ("ctrl", "data"):
        for s in ("dma_addr", "ram_sel", "ram_addr", "len", "tag"):
            w(f"assign m_axis_{ch}_dma_read_desc_{s} = 0;")
        w(f"assign m_axis_{ch}_dma_read_desc_valid = 1'b0;")
        for s in ("dma_addr", "ram_sel", "ram_addr", "imm", "imm_en", "len", "tag"):
            w(f"assign m_axis_{ch}_dma_write_desc_{s} = 0;")
        w(f"assign m_axis_{ch}_dma_write_desc_valid = 1'b0;")
        w("")
        r = f"{ch}_dma_ram_"
        w(f"// {ch} DMA RAM: every write is accepted and done at once; a read command is")
        w("// accepted exactly when its (zero) response is, one response per command.")
        w(f"assign {r}wr_cmd_ready = {{RAM_SEG_COUNT{{1'b1}}}};")
        w(f"assign {r}wr_done = {r}wr_cmd_valid;")
        w(f"assign {r}rd_cmd_ready = {r}rd_resp_ready;")
        w(f"assign {r}rd_resp_valid = {r}rd_cmd_valid;")
        w(f"assign {r}rd_resp_data = 0;")
        w("")
    for mem in ("ddr", "hbm"):
        CH = f"{mem.upper()}_CH"
        p = f"m_axi_{mem}_"
        for a in ("aw", "ar"):
            for s in ("id", "addr", "len", "size", "burst", "lock", "cache", "prot", "qos", "user"):
                w(f"assign {p}{a}{s} = 0;")
            w(f"assign {p}{a}valid = {{{CH}{{1'b0}}}};")
        for s in ("wdata", "wstrb", "wlast", "wuser"):
            w(f"assign {p}{s} = 0;")
        w(f"assign {p}wvalid = {{{CH}{{1'b0}}}};")
        w(f"assign {p}bready = {{{CH}{{1'b1}}}};")
        w(f"assign {p}rready = {{{CH}{{1'b1}}}};")
        w("")
    w("assign m_axis_stat_tdata = 0;")
    w("assign m_axis_stat_tid = 0;")
    w("assign m_axis_stat_tvalid = 1'b0;")
    w("assign gpio_out = 0;")
    w("assign jtag_tdo = jtag_tdi;")
    w("")

    # -- unused inputs ----------------------------------------------------------------------
    used = {"clk", "rst", "jtag_tdi"} | {n for n in _sync_core_ports()}
    used |= {f"s_axil_app_ctrl_{s}" for s in ("awaddr", "araddr", "awprot", "awvalid", "wdata",
                                              "wstrb", "wvalid", "bready", "arprot", "arvalid",
                                              "rready")}
    for kind in ("direct", "if"):
        for _, _, n in _taps(kind, "", "", "", "", "", (("tid", ""), ("tdest", "")),
                             (("tid", ""), ("tdest", ""))):
            if kind == "direct" and n.endswith(("_tid", "_tdest")):
                continue
            used.add(n)
    for ch in ("ctrl", "data"):
        r = f"{ch}_dma_ram_"
        used |= {r + "wr_cmd_valid", r + "rd_resp_ready", r + "rd_cmd_valid"}
    unused = [n for _, ports in sections for d, _, n in ports if d == "input" and n not in used]
    w("// Inputs this block ignores (named so that lint knows it is deliberate).")
    w("wire unused_inputs = &{1'b0,")
    for i in range(0, len(unused), 4):
        chunk = ", ".join(unused[i:i + 4])
        w(f"    {chunk}" + ("," if i + 4 < len(unused) else ""))
    w("};")
    w("")
    w("endmodule")
    w("")
    w("`resetall")
    return "\n".join(L) + "\n"


_AXIL_ORDER = ["clk", "rst"] + [f"s_axil_{s}" for s in (
    "awaddr", "awprot", "awvalid", "awready", "wdata", "wstrb", "wvalid", "wready", "bresp",
    "bvalid", "bready", "araddr", "arprot", "arvalid", "arready", "rdata", "rresp", "rvalid",
    "rready")]


def core_port_list(cfg=None) -> list[tuple[str, str, int]]:
    """``netstor_core``'s expected ports ``(name, direction, width)`` for ``cfg``."""
    c = CoreConfig.coerce(cfg)
    P = c.n_ports
    out = [("clk", "input", 1), ("rst", "input", 1)]
    axil = {"awaddr": ("input", c.axil_addr_width), "awprot": ("input", 3), "awvalid": ("input", 1),
            "awready": ("output", 1), "wdata": ("input", c.axil_data_width),
            "wstrb": ("input", c.axil_data_width // 8), "wvalid": ("input", 1),
            "wready": ("output", 1), "bresp": ("output", 2), "bvalid": ("output", 1),
            "bready": ("input", 1), "araddr": ("input", c.axil_addr_width), "arprot": ("input", 3),
            "arvalid": ("input", 1), "arready": ("output", 1), "rdata": ("output", c.axil_data_width),
            "rresp": ("output", 2), "rvalid": ("output", 1), "rready": ("input", 1)}
    out += [(f"s_axil_{k}", d, wd) for k, (d, wd) in axil.items()]
    stream = {"tdata": c.data_width, "tkeep": c.data_width // 8, "tvalid": 1, "tready": 1, "tlast": 1}
    for d in ("s", "m"):
        fwd, back = ("input", "output") if d == "s" else ("output", "input")
        for k, wd in stream.items():
            out.append((f"{d}_axis_sync_tx_{k}", back if k == "tready" else fwd, P * wd))
        out.append((f"{d}_axis_sync_tx_tuser", fwd, P * c.tx_user_width))
        for k, wd in (("ts", c.ts_width), ("tag", c.tag_width), ("valid", 1), ("ready", 1)):
            out.append((f"{d}_axis_sync_tx_cpl_{k}", back if k == "ready" else fwd, P * wd))
        for k, wd in stream.items():
            out.append((f"{d}_axis_sync_rx_{k}", back if k == "tready" else fwd, P * wd))
        out.append((f"{d}_axis_sync_rx_tuser", fwd, P * c.rx_user_width))
    return out



