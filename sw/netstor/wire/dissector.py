"""Generate the Wireshark/tshark Lua dissector for every registered header.

    python -m netstor.wire.dissector [--out PATH]      # default: netstor.lua beside this file

Use it with ``tshark -X lua_script:sw/netstor/wire/netstor.lua ...`` (or copy it into
Wireshark's personal Lua plugins folder). Each header is its own protocol (``netstor``,
``netstor_prim``...) registered in the ``udp.port`` dissector table; fields filter as
``<proto>.<field>``; the bytes after the header are ``<proto>.<trailer>``. A datagram shorter
than the header, with a wrong constant (magic, version) or whose length field disagrees with
its length is shown with expert info of group "Malformed" (filter ``<proto>.malformed``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .registry import HEADERS, HeaderSpec

DEFAULT_OUT = Path(__file__).with_name("netstor.lua")

_UINT = {1: "uint8", 2: "uint16", 3: "uint24", 4: "uint32", 5: "uint64", 6: "uint64",
         7: "uint64", 8: "uint64"}


def _lua_str(s):
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _vs(enum):
    return "{ " + ", ".join(f"[{k}] = {_lua_str(v)}" for k, v in sorted(enum.items())) + " }"


def _layout(spec: HeaderSpec):
    """[(field, byte offset, byte count, bit offset in that range or None, width)]"""
    out = []
    for n, pos, w in spec.layout():
        if pos % 8 == 0 and w % 8 == 0:
            out.append((n, pos // 8, w // 8, None, w))
        else:
            first, last = pos // 8, (pos + w - 1) // 8
            out.append((n, first, last - first + 1, pos % 8, w))
    return out


def _field_defs(spec: HeaderSpec, layout):
    P = spec.name
    out = []
    for n, off, nb, bo, w in layout:
        base = "base.HEX" if n in spec.hex_fields else "base.DEC"
        args = [_lua_str(f"{P}.{n}"), _lua_str(n), base,
                f"vs.{n}" if n in spec.enums else "nil"]
        if bo is not None:
            mask = ((1 << w) - 1) << (nb * 8 - bo - w)
            args.append(f"0x{mask:x}")
        out.append(f"  f.{n} = ProtoField.{_UINT[nb]}({', '.join(args)})")
    return out


def _proto_variants(spec: HeaderSpec):
    """A header whose layout depends on a selector field (see ``make_spec``)."""
    P = spec.name
    lines = [f"-- {spec.title}: UDP port {spec.udp_port}, {spec.nbytes}-byte common part, "
             f"layout by {spec.selector}", "do"]
    a = lines.append
    a(f"  local proto = Proto({_lua_str(P)}, {_lua_str(spec.title)})")
    a("  local vs = {}")
    for fname, enum in spec.enums.items():
        a(f"  vs.{fname} = {_vs(enum)}")
    a("  local f = {}")
    common = _layout(spec)
    pos0 = spec.nbytes
    every = list(common)
    seen = {n for n, *_ in common}
    var_layouts = []
    for v, label, extra in spec.variants:
        lay, off = [], pos0
        for n, w in extra:
            lay.append((n, off, w // 8, None, w))
            off += w // 8
            if n not in seen:
                seen.add(n)
                every.append(lay[-1])
        var_layouts.append((v, label, lay, off))
    lines += _field_defs(spec, every)
    a(f"  f.kind = ProtoField.string({_lua_str(P + '.kind')}, \"kind\")")
    a(f"  f.{spec.trailer} = ProtoField.bytes({_lua_str(f'{P}.{spec.trailer}')}, "
      f"{_lua_str(spec.trailer)})")
    a("  proto.fields = { " + ", ".join(f"f.{n}" for n, *_ in every)
      + f", f.kind, f.{spec.trailer} }}")
    a(f"  local e_short = ProtoExpert.new({_lua_str(P + '.malformed.short')}, "
      f"{_lua_str(f'truncated {P} header')}, expert.group.MALFORMED, expert.severity.ERROR)")
    a(f"  local e_sel = ProtoExpert.new({_lua_str(P + '.malformed.' + spec.selector)}, "
      f"{_lua_str(f'unknown {spec.selector} in {P} header')}, expert.group.MALFORMED, "
      "expert.severity.ERROR)")
    a("  proto.experts = { e_short, e_sel }")
    a(f"  local COMMON = {pos0}")
    a("  -- field, byte offset, byte count, bit offset in those bytes (or false), width, name")
    a("  local common = {")
    for n, off, nb, bo, w in common:
        a(f"    {{ f.{n}, {off}, {nb}, {'false' if bo is None else bo}, {w}, {_lua_str(n)} }},")
    a("  }")
    sel = next(x for x in common if x[0] == spec.selector)
    sel_nb = sel[2]
    a(f"  -- {spec.selector} (as lower-case hex) -> kind, header length, fields")
    a("  local variants = {")
    for v, label, lay, end in var_layouts:
        a(f"    [{_lua_str(format(v, f'0{2 * sel_nb}x'))}] = {{ {_lua_str(label)}, {end}, {{")
        for n, off, nb, bo, w in lay:
            a(f"      {{ f.{n}, {off}, {nb}, false, {w}, {_lua_str(n)} }},")
        a("    } },")
    a("  }")
    a("  local function add(t, tvb, v, e, n, hdr)")
    a("    local fld, off, nb, bo, w, name = e[1], e[2], e[3], e[4], e[5], e[6]")
    a("    if off + nb > n then")
    a("      t:add_proto_expert_info(e_short, string.format("
      f"\"truncated {P} header: %d of %d bytes\", n, hdr))")
    a("      return false")
    a("    end")
    a("    local r = tvb(off, nb)")
    a("    t:add(fld, r)")
    a("    if bo then v[name] = r:bitfield(bo, w)")
    a("    elseif nb > 4 then v[name] = r:uint64()")
    a("    else v[name] = r:uint() end")
    a("    return true")
    a("  end")
    a("  function proto.dissector(tvb, pinfo, tree)")
    a("    local n = tvb:len()")
    a(f"    pinfo.cols.protocol = {_lua_str(P.upper())}")
    a("    local t = tree:add(proto, tvb(0, math.min(n, COMMON)))")
    a("    local v = {}")
    a("    for _, e in ipairs(common) do")
    a("      if not add(t, tvb, v, e, n, COMMON) then")
    a(f"        pinfo.cols.info:set(string.format(\"{P} [truncated: %d bytes]\", n))")
    a("        return n")
    a("      end")
    a("    end")
    a(f"    local key = string.lower(tvb({sel[1]}, {sel_nb}):bytes():tohex())")
    a("    local var = variants[key]")
    a("    if var == nil then")
    a(f"      t:add_proto_expert_info(e_sel, \"unknown {spec.selector} 0x\" .. key)")
    a(f"      pinfo.cols.info:set(\"{P} unknown {spec.selector} 0x\" .. key)")
    a(f"      if n > COMMON then t:add(f.{spec.trailer}, tvb(COMMON, n - COMMON)) end")
    a("      return n")
    a("    end")
    a(f"    t:add(f.kind, tvb({sel[1]}, {sel_nb}), var[1])")
    a("    t:set_len(math.min(n, var[2]))")
    a("    for _, e in ipairs(var[3]) do")
    a("      if not add(t, tvb, v, e, n, var[2]) then")
    a(f"        pinfo.cols.info:set(string.format(\"{P} %s [truncated: %d of %d bytes]\", "
      "var[1], n, var[2]))")
    a("        return n")
    a("      end")
    a("    end")
    a("    local info = { var[1] }")
    for n in spec.info:
        a(f"    if v.{n} ~= nil then info[#info + 1] = {_lua_str(n + '=')} .. tostring(v.{n}) end")
    a("    local text = table.concat(info, \" \")")
    a("    t:append_text(\" \" .. text)")
    a("    local rest = n - var[2]")
    if spec.inner:
        a(f"    local inner = Dissector.get({_lua_str(spec.inner)})")
        a("    if rest > 0 and inner ~= nil then")
        a("      inner:call(tvb(var[2]):tvb(), pinfo, tree)")
        a("      pinfo.cols.protocol = " + _lua_str(P.upper()))
        a("      pinfo.cols.info:set(text .. \" | \" .. tostring(pinfo.cols.info))")
        a("      return n")
        a("    end")
    a(f"    if rest > 0 then t:add(f.{spec.trailer}, tvb(var[2], rest)) end")
    a("    pinfo.cols.info:set(text)")
    a("    return n")
    a("  end")
    a(f"  DissectorTable.get(\"udp.port\"):add({spec.udp_port}, proto)")
    a("end")
    return "\n".join(lines) + "\n"


def _proto(spec: HeaderSpec):
    if spec.variants:
        return _proto_variants(spec)
    P = spec.name
    lines = [f"-- {spec.title}: UDP port {spec.udp_port}, {spec.nbytes}-byte header", "do"]
    a = lines.append
    a(f"  local proto = Proto({_lua_str(P)}, {_lua_str(spec.title)})")
    a("  local vs = {}")
    for fname, enum in spec.enums.items():
        a(f"  vs.{fname} = {_vs(enum)}")
    a("  local f = {}")
    layout = _layout(spec)
    for n, off, nb, bo, w in layout:
        base = "base.HEX" if n in spec.hex_fields else "base.DEC"
        args = [_lua_str(f"{P}.{n}"), _lua_str(n), base,
                f"vs.{n}" if n in spec.enums else "nil"]
        if bo is not None:
            mask = ((1 << w) - 1) << (nb * 8 - bo - w)
            args.append(f"0x{mask:x}")
        a(f"  f.{n} = ProtoField.{_UINT[nb]}({', '.join(args)})")
    a(f"  f.{spec.trailer} = ProtoField.bytes({_lua_str(f'{P}.{spec.trailer}')}, "
      f"{_lua_str(spec.trailer)})")
    a("  proto.fields = { " + ", ".join(f"f.{n}" for n, *_ in layout)
      + f", f.{spec.trailer} }}")
    experts = [("e_short", "short", f"truncated {P} header")]
    if spec.constants:
        experts.append(("e_const", "constant", f"unexpected constant in {P} header"))
    if spec.length_field:
        experts.append(("e_len", "length", f"{spec.length_field} disagrees with the datagram"))
    for var, what, text in experts:
        a(f"  local {var} = ProtoExpert.new({_lua_str(f'{P}.malformed.{what}')}, "
          f"{_lua_str(text)}, expert.group.MALFORMED, expert.severity.ERROR)")
    a("  proto.experts = { " + ", ".join(v for v, *_ in experts) + " }")
    a(f"  local HDR = {spec.nbytes}")
    a("  -- field, byte offset, byte count, bit offset in those bytes (or false), width, name")
    a("  local layout = {")
    for n, off, nb, bo, w in layout:
        a(f"    {{ f.{n}, {off}, {nb}, {'false' if bo is None else bo}, {w}, "
          f"{_lua_str(n)} }},")
    a("  }")
    a("  function proto.dissector(tvb, pinfo, tree)")
    a("    local n = tvb:len()")
    a(f"    pinfo.cols.protocol = {_lua_str(P.upper())}")
    a("    local t = tree:add(proto, tvb(0, math.min(n, HDR)))")
    a("    local v = {}")
    a("    for _, e in ipairs(layout) do")
    a("      local fld, off, nb, bo, w, name = e[1], e[2], e[3], e[4], e[5], e[6]")
    a("      if off + nb > n then")
    a("        t:add_proto_expert_info(e_short, string.format("
      f"\"truncated {P} header: %d of %d bytes\", n, HDR))")
    a(f"        pinfo.cols.info:set(string.format(\"{P} [truncated: %d of %d bytes]\", n, HDR))")
    a("        return n")
    a("      end")
    a("      local r = tvb(off, nb)")
    a("      t:add(fld, r)")
    a("      if bo then v[name] = r:bitfield(bo, w)")
    a("      elseif nb > 4 then v[name] = r:uint64()")
    a("      else v[name] = r:uint() end")
    a("    end")
    for n, c in spec.constants.items():
        a(f"    if v.{n} ~= {c} then")
        a(f"      t:add_proto_expert_info(e_const, string.format(\"bad {n} %s (expected "
          f"{c:#x})\", tostring(v.{n})))")
        a("    end")
    a("    local rest = n - HDR")
    if spec.length_field:
        L = spec.length_field
        a(f"    local want = v.{L}")
        a("    if want ~= rest then")
        a(f"      t:add_proto_expert_info(e_len, string.format(\"{L} %d but %d bytes follow "
          "the header\", want, rest))")
        a("    end")
        a("    local take = math.min(want, rest)")
    else:
        a("    local take = rest")
    a(f"    if take > 0 then t:add(f.{spec.trailer}, tvb(HDR, take)) end")
    # Info column
    a("    local info = {}")
    for i, n in enumerate(spec.info):
        if n in spec.enums:
            val = f"(vs.{n}[v.{n}] or tostring(v.{n}))"
        elif n in spec.hex_fields:
            val = (f"\"0x\" .. v.{n}:tohex()" if spec.width(n) > 32
                   else f"string.format(\"0x%x\", v.{n})")
        else:
            val = f"tostring(v.{n})"
        if not (i == 0 and n in spec.enums):      # a leading enum (the op) stands alone
            val = f"{_lua_str(n + '=')} .. {val}"
        a(f"    info[#info + 1] = {val}")
    a("    pinfo.cols.info:set(table.concat(info, \" \"))")
    a("    t:append_text(\" \" .. table.concat(info, \" \"))")
    a("    return n")
    a("  end")
    a(f"  DissectorTable.get(\"udp.port\"):add({spec.udp_port}, proto)")
    a("end")
    return "\n".join(lines) + "\n"


def generate(headers=None) -> str:
    """The Lua source for ``headers`` (default: every registered header)."""
    if headers is None:
        headers = HEADERS
    headers = list(headers.values() if isinstance(headers, dict) else headers)
    head = ("-- netstor Wireshark/tshark dissector. GENERATED by `python -m netstor.wire.dissector`"
            "\n-- from netstor.wire.registry: do not edit; regenerate instead.\n"
            "-- Use: tshark -X lua_script:netstor.lua ...  (or copy into Wireshark's Lua "
            "plugins folder)\n")
    return head + "".join("\n" + _proto(s) for s in headers)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m netstor.wire.dissector", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(DEFAULT_OUT),
                    help="where to write the Lua file ('-' for stdout; default %(default)s)")
    args = ap.parse_args(argv)
    text = generate()
    if args.out == "-":
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text)
        print(f"wrote {args.out} ({len(HEADERS)} headers: {', '.join(HEADERS)})")


if __name__ == "__main__":
    main()
