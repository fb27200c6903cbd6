"""The one-screen summary of ``make bench``; every figure is read from the JSON results."""
from __future__ import annotations


def _fmt(v, nd=3):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}f}".rstrip("0").rstrip(".") if nd else f"{v:.0f}"
    return str(v)


def pipeline_lines(pipe):
    L = pipe["header_path_latency"]["datapath_latency_cycles"]
    lm = pipe["latency_model"]
    lines = [
        f"Header path (datapath.latency): {L} cycles = {L * 4} ns at 250 MHz (constant by "
        f"construction; schema says {pipe['header_path_latency']['schema_latency_cycles']})",
        f"Port-to-port latency = (B-1) buffer store-and-forward + {lm['PB']} buffer out + "
        f"{lm['ARB']} arbiter + {L} header path + {lm['EQ']} egress queue = B + "
        f"{lm['constant_part']} cycles (B = beats per frame)",
    ]
    by = {}
    for r in pipe["runs"]:
        by.setdefault(r["case"], {})[r["size_requested"]] = r
    sizes = sorted({r["size_requested"] for r in pipe["runs"]})
    hdr = (" size  B | l3: pkt/clk  B/clk lat(min-max) model | prim: bytes pkt/clk lat |"
           " 250MHz Mpps Gb/s %100G | 322MHz Mpps %100G | mixed(2 in): pkt/clk beats/clk drop")
    lines.append(hdr)
    for s in sizes:
        l3 = by.get("l3", {}).get(s)
        pr = by.get("prim", {}).get(s)
        mx = by.get("mixed", {}).get(s)
        row = f"{s:5d} "
        f = l3["flows"][0] if l3 else None
        if f:
            lr = f.get("line_rate", {})
            row += (f"{f['beats_per_frame']:3d} | {_fmt(f.get('pkts_per_clock'), 4):>10} "
                    f"{_fmt(f.get('bytes_per_clock'), 1):>6} {f['latency_min']}-{f['latency_max']}"
                    f"{'':>3}{f['latency_predicted']:>4} |")
        else:
            row += "  - |" + " " * 33 + "|"
        g = pr["flows"][0] if pr else None
        if g:
            row += (f" {g['frame_bytes']:5d} {_fmt(g.get('pkts_per_clock'), 4):>7} "
                    f"{g['latency_min']}-{g['latency_max']} |")
        else:
            row += " " * 20 + "|"
        if f and lr:
            a, b = lr["sync_250"], lr["direct_322"]
            row += (f" {a['mpps']:7.1f} {a['line_gbps']:5.1f} {a['vs_100g'] * 100:5.1f}% |"
                    f" {b['mpps']:7.1f} {b['vs_100g'] * 100:5.1f}% |")
        else:
            row += " " * 25 + "|" + " " * 19 + "|"
        if mx and "aggregate" in mx:
            ag = mx["aggregate"]
            sent = sum(x["sent"] for x in mx["flows"])
            drop = sum(x["dropped"] for x in mx["flows"])
            row += (f" {_fmt(ag['pkts_per_clock'], 4):>7} {_fmt(ag['beats_per_clock'], 3):>5} "
                    f"{drop}/{sent}")
        lines.append(row)
    lines.append("  (Gb/s = Ethernet line rate incl. 20 B preamble+IFG per frame; the AXI-Stream "
                 "frame excludes the 4 B FCS)")
    if pipe.get("errors"):
        lines.append("ERRORS: " + "; ".join(pipe["errors"][:4]))
    return lines


def synth_lines(syn):
    lines = []
    t = syn["total"]
    sh = t["share_of_xcu250_pct"]
    who = "whole core" if t.get("source") == "whole_core" else "sum of blocks (core not run)"
    wc = syn.get("whole_core", {})
    secs = wc.get("yosys_seconds")
    lines.append(
        f"Resources, {who}: LUT {t['LUT']:,} ({sh['LUT']:.2f}% of XCU250), FF {t['FF']:,} "
        f"({sh['FF']:.2f}%), BRAM36 {_fmt(t['BRAM36_equiv'], 1)} ({t['RAMB36']} RAMB36 + "
        f"{t['RAMB18']} RAMB18, {sh['BRAM']:.2f}%), URAM {t['URAM']}, DSP {t['DSP']}; "
        f"logic depth {t['lut_levels']} LUT levels"
        + (f"; Yosys {secs:.0f} s{' (cached)' if wc.get('cached') else ''}" if secs else ""))
    lines.append(" block (instances)              LUT      FF  BRAM36  depth(LUT lv)  yosys s")
    for key, r in syn["blocks"].items():
        if not r.get("ok"):
            lines.append(f" {key:<30} failed: {r.get('error', '')[:40]}")
            continue
        lines.append(f" {key + ' (' + str(r.get('instances_in_core', 1)) + ')':<30}"
                     f"{r['LUT']:>6,} {r['FF']:>7,} {_fmt(r['BRAM36_equiv'], 1):>7} "
                     f"{r['depth']['lut_levels']:>6} {r['yosys_seconds']:>12}"
                     + (" c" if r.get("cached") else ""))
    s = syn["sum_of_blocks"]
    lines.append(f" {'sum x instances':<30}{s['LUT']:>6,} {s['FF']:>7,} "
                 f"{_fmt(s['BRAM36_equiv'], 1):>7} {s['lut_levels']:>6}")
    return lines


def summary_text(pipe, syn, index):
    lines = [f"netstor bench ({index.get('git', '?')}; {index.get('seconds', 0) / 60:.1f} min): "
             f"whole netstor_core, 512-bit, sync taps at 250 MHz"]
    if pipe:
        lines += pipeline_lines(pipe)
        lines += ["Findings: " + f for f in pipe.get("findings", [])]
    if syn:
        lines += synth_lines(syn)
    lines.append("Details: pipeline.json, synth.json, bench.json")
    return "\n".join(lines)
