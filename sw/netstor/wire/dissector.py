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


def _proto(spec: HeaderSpec):
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
