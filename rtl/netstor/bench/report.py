"""The one-screen summary of ``make bench``; every figure is read from the JSON results."""
from __future__ import annotations

import textwrap

WIDTH = 120


def _wrap(text, indent="  "):
    return textwrap.wrap(text, WIDTH, subsequent_indent=indent)


def _fmt(v, nd=3):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}f}".rstrip("0").rstrip(".") if nd else f"{v:.0f}"
    return str(v)


def pipeline_lines(pipe):
    L = pipe["header_path_latency"]["datapath_latency_cycles"]
    lm = pipe["latency_model"]
    parts = lm.get("L_parts")
    lines = [
        f"Header path (datapath.latency): {L} cycles = {L * 4} ns at 250 MHz (constant by "
        f"construction; schema says {pipe['header_path_latency']['schema_latency_cycles']})"
        + (f"; {lm['copies']} core" if lm.get("copies") else ""),
    ]
    if parts:
        lines += _wrap("  = " + " + ".join(f"{w} {c}" for w, c in parts.items()), "    ")
    lines += [
        f"Port to port = (B-1) store-and-forward + {lm['PB']} buffer + {lm['ARB']} arbiter + "
        f"{L} header path + {lm['EQ']} egress queue = B + {lm['constant_part']} cycles "
        f"(B = ceil(size/64))",
    ]
    by = {}
    for r in pipe["runs"]:
        by.setdefault(r["case"], {})[r["size_requested"]] = r
    sizes = sorted({r["size_requested"] for r in pipe["runs"]})
    lines.append("  size   B |  l3: pkt/clk  B/clk lat | prim: bytes pkt/clk lat |"
                 " 250MHz Mpps %100G | 322MHz Mpps %100G | 100G Mpps | mixed: pkt/clk drops")

    def lat(f):
        return (str(f["latency_min"]) if f["latency_min"] == f["latency_max"]
                else f"{f['latency_min']}-{f['latency_max']}")
    for s in sizes:
        l3 = by.get("l3", {}).get(s)
        pr = by.get("prim", {}).get(s)
        mx = by.get("mixed", {}).get(s)
        f = l3["flows"][0] if l3 else None
        g = pr["flows"][0] if pr else None
        row = f"{s:6d} {(f or g or {}).get('beats_per_frame', 0):3d} |"
        row += (f" {_fmt(f.get('pkts_per_clock'), 4):>11} {_fmt(f.get('bytes_per_clock'), 1):>6}"
                f" {lat(f):>3} |" if f else " " * 23 + "|")
        row += (f" {g['frame_bytes']:11d} {_fmt(g.get('pkts_per_clock'), 4):>7} {lat(g):>3} |"
                if g else " " * 24 + "|")
        lr = (f or g or {}).get("line_rate")
        if lr:
            a, b = lr["sync_250"], lr["direct_322"]
            row += (f" {a['mpps']:11.1f} {a['vs_100g'] * 100:4.0f}% |"
                    f" {b['mpps']:11.1f} {b['vs_100g'] * 100:4.0f}% | {lr['100g_max_mpps']:9.1f} |")
        if mx and "aggregate" in mx:
            ag = mx["aggregate"]
            sent = sum(x["sent"] for x in mx["flows"])
            drop = sum(x["dropped"] for x in mx["flows"])
            row += f" {_fmt(ag['pkts_per_clock'], 4):>14} {drop}/{sent}"
        lines.append(row)
    single = [r["flows"][0] for r in pipe["runs"] if r["case"] in ("l3", "prim")]
    if single and all(x["latency_min"] == x["latency_max"] == x["latency_predicted"]
                      for x in single):
        lines.append("  every single-input latency equals the model B + "
                     f"{lm['constant_part']} exactly (min = max); Mpps/%100G from the l3 row, "
                     "mixed = 2 wire inputs at once (aggregate)")
    lines.append("  %100G: Mpps / 100GbE's Mpps at that size (frame + 20 B preamble/IFG; the "
                 "AXI-Stream frame excludes the 4 B FCS)")
    if pipe.get("errors"):
        lines.append("ERRORS: " + "; ".join(pipe["errors"][:4]))
    return lines


def synth_lines(syn):
    lines = []
    t = syn["total"]
    sh = t["share_of_xcu250_pct"]
    who = "whole core" if t.get("source") == "core" else "sum of blocks (core not run)"
    wc = syn.get("core", {})
    secs = wc.get("yosys_seconds")
    lines += _wrap(
        f"Resources, {who}: LUT {t['LUT']:,} ({sh['LUT']:.2f}% of XCU250), FF {t['FF']:,} "
        f"({sh['FF']:.2f}%), BRAM36 {_fmt(t['BRAM36_equiv'], 1)} ({t['RAMB36']} RAMB36 + "
        f"{t['RAMB18']} RAMB18, {sh['BRAM']:.2f}%), URAM {t['URAM']}, DSP {t['DSP']}; "
        f"logic depth {t['lut_levels']} LUT levels"
        + (f"; Yosys {secs:.0f} s, peak {wc.get('peak_rss_mib', 0) / 1024:.1f} GiB"
           f"{' (cached)' if wc.get('cached') else ''}" if secs else ""))
    lim = syn.get("max_depth", {}).get("limit", 8)
    lines.append(f" {'block (instances in core)':<36}{'LUT':>7} {'FF':>7} {'BRAM36':>6} "
                 f"{'DSP':>4} {'LUT lv':>6}   yosys s")
    for key, r in syn["blocks"].items():
        name = f"{key} ({r.get('instances_in_core', 1)})"
        if not r.get("ok"):
            lines.append(f" {name:<36}failed: {str(r.get('error', ''))[:60]}")
            lines += uram_lines(r.get("uram"), lim)
            continue
        lv = r["depth"]["lut_levels"]
        how = ("= " + r["same_config_as"] if r.get("same_config_as")
               else f"{r['yosys_seconds']}" + (" c" if r.get("cached") else ""))
        cd = r["depth"].get("comb_dsp_cells")
        lines.append(f" {name:<36}{r['LUT']:>7,} {r['FF']:>7,} {_fmt(r['BRAM36_equiv'], 1):>6} "
                     f"{r['DSP']:>4} {lv:>4}{' !' if lv > lim else '  '}   {how}"
                     + (f"  [{cd} comb DSP, {r['depth'].get('lut_levels_through_comb_dsp')}"
                        f" lv + DSP]" if cd else ""))
        lines += uram_lines(r.get("uram"), lim)
    s = syn["sum_of_blocks"]
    lines.append(f" {'sum x instances':<36}{s['LUT']:>7,} {s['FF']:>7,} "
                 f"{_fmt(s['BRAM36_equiv'], 1):>6} {s['DSP']:>4} {s['lut_levels']:>4}")
    if wc.get("ok"):
        lines.append(f" {'whole core (netstor_core)':<36}{wc['LUT']:>7,} {wc['FF']:>7,} "
                     f"{_fmt(wc['BRAM36_equiv'], 1):>6} {wc['DSP']:>4} "
                     f"{wc['depth']['lut_levels']:>4}"
                     f"{' !' if wc['depth']['lut_levels'] > lim else '  '}   {secs}"
                     + (" c" if wc.get("cached") else ""))
    if wc.get("method") == "hierarchical":
        lines += hier_lines(wc)
    for vkey, label in (("core_lane", "copy-lane core (copies=lane)"),
                        ("core_ports", "ports core (copies=ports)")):
        wl = syn.get(vkey, {})
        if wl.get("ok"):
            lv = wl["depth"]["lut_levels"]
            lines.append(f" {label:<36}{wl['LUT']:>7,} {wl['FF']:>7,} "
                         f"{_fmt(wl['BRAM36_equiv'], 1):>6} {wl['DSP']:>4} {lv:>4}"
                         f"{' !' if lv > lim else '  '}   {wl.get('yosys_seconds')}"
                         f"  (URAM {wl['URAM']}; {wl.get('commit', '?')})")
            lines += hier_lines(wl)
        elif wl:
            lines += _wrap(f" {label}: not complete: {str(wl.get('error'))[:160]}")
    lines.append(f"  ! = above {lim} LUT levels (the 250 MHz rule of thumb); c = cached; "
                 f"'= x': same Verilog as block x (synthesised once)")
    for name, r in syn.get("standalone", {}).items():
        rows = ({name: r} if "LUT" in r or not r.get("ok", True) else
                {f"{name}.{k}": v for k, v in r.items() if isinstance(v, dict)})
        for rn, x in rows.items():
            if not x.get("ok", True):
                lines += _wrap(f" standalone {rn}: failed: {str(x.get('error'))[:100]}")
                continue
            lv = x.get("lut_levels", (x.get("depth") or {}).get("lut_levels", "-"))
            lines.append(f" standalone {rn}: LUT {x.get('LUT', 0):,} FF {x.get('FF', 0):,} "
                         f"BRAM36 {_fmt(x.get('BRAM36', x.get('BRAM36_equiv')), 1)} "
                         f"URAM {x.get('URAM', '-')} DSP {x.get('DSP', '-')} LUT lv {lv}"
                         + (" !" if isinstance(lv, int) and lv > lim else ""))
    for f in syn.get("findings", []):
        lines += _wrap("* " + f)
    return lines


def uram_lines(u, lim=8):
    """The row under a block with a large register bank: its ``-uram`` run (``"uram"``)."""
    if not u:
        return []
    if not u.get("ok"):
        return _wrap(f"   {'-uram':<34}failed: {str(u.get('error', ''))[:60]}", "     ")
    lv = u["depth"]["lut_levels"]
    how = f"{u['yosys_seconds']}" + (" c" if u.get("cached") else "")
    banks = ", ".join(f"{b['bank']} {b['depth']}x{b['width']}" for b in u.get("banks", []))
    return [f"   {'-uram':<34}{u['LUT']:>7,} {u['FF']:>7,} {_fmt(u['BRAM36_equiv'], 1):>6} "
            f"{u['DSP']:>4} {lv:>4}{' !' if lv > lim else '  '}   {how}  URAM288 {u['URAM']} "
            f"({banks}; Yosys' no-cascade model: "
            f"{u.get('uram_expected', {}).get('yosys_no_cascade', '-')})"]


def hier_lines(wc, top=8):
    """The whole core's hierarchical run: how it was done, its largest modules, depth."""
    d = wc.get("depth", {})
    xb = d.get("across_boundaries", {})
    lines = _wrap(
        f"  whole core{' (' + wc['commit'] + ')' if wc.get('commit') else ''}, hierarchically: "
        f"{wc.get('modules_distinct')} distinct modules "
        f"({wc.get('modules_instances')} instances) each synthesised once with its children "
        f"as black boxes, summed x instances; Yosys {wc.get('yosys_seconds', 0) / 60:.0f} min "
        f"(sum of the runs' wall times); deepest module {d.get('module')} at "
        f"{d.get('lut_levels_within_modules', d.get('lut_levels'))} LUT levels; across module "
        f"boundaries (mapped netlists joined): {xb.get('lut_levels', '-')} LUT levels"
        + (f" ({xb.get('path_cell_types')}; through {' -> '.join(xb.get('path_modules') or [])})"
           if xb.get("path_cell_types") else "")
        + (f", not joined: {', '.join(xb['modules_not_joined'])}"
           if xb.get("modules_not_joined") else ""), "    ")
    if wc.get("failed"):
        lines += _wrap("  NOT synthesised: " + ", ".join(f["module"] for f in wc["failed"]),
                       "    ")
    for name, m in list(wc.get("modules", {}).items())[:top]:
        lines.append(f"    {name.replace('netstor_core.', ''):<32}{m['LUT']:>8,} {m['FF']:>7,} "
                     f"{_fmt(m['BRAM36_equiv'], 1):>6} {m['DSP']:>4} {m['lut_levels']:>4}"
                     f"   x{m['instances']}  {m.get('yosys_seconds')} s")
    return lines


def summary_text(pipe, syn, index, extra=()):
    lines = [f"netstor bench ({index.get('git', '?')}; {index.get('seconds', 0) / 60:.1f} min): "
             f"whole netstor_core, 512-bit, sync taps at 250 MHz"]
    if pipe:
        lines += pipeline_lines(pipe)
        for f in pipe.get("findings", []):
            lines += _wrap("* " + f)
    if syn:
        lines += synth_lines(syn)
    for x in extra:                            # e.g. exact_load.json's summary line
        lines += _wrap(x)
    lines.append("Details: pipeline.json, synth.json, bench.json")
    return "\n".join(lines)
