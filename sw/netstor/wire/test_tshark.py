"""End to end: frames built by scapy, dissected by tshark with the generated Lua dissector,
every field compared with what the independent encoders (netstor.proto.Header, a
hand-computed byte vector) put on the wire.

Needs tshark (``make test`` installs it through ``make sysdeps``); set
NETSTOR_ALLOW_NO_TSHARK=1 to skip instead of failing where it cannot be installed.
"""

import os
import random
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

from netstor import proto
from netstor.programs import primitives
from netstor.wire import make_spec
from netstor.wire.dissector import DEFAULT_OUT, generate

CLIENT, SERVER = ("10.0.0.1", 40000), ("10.0.0.2", proto.STORAGE_UDP_PORT)


def _tshark():
    exe = shutil.which("tshark")
    if exe is None:
        if os.environ.get("NETSTOR_ALLOW_NO_TSHARK") == "1":
            pytest.skip("tshark not installed (NETSTOR_ALLOW_NO_TSHARK=1)")
        pytest.fail("tshark is not installed: `make test` installs it (target `sysdeps`: "
                    "apt-get install tshark), or install Wireshark's tshark yourself; set "
                    "NETSTOR_ALLOW_NO_TSHARK=1 to skip this test", pytrace=False)
    version = subprocess.run([exe, "-v"], capture_output=True, text=True).stdout
    if "with Lua" not in version:
        pytest.fail(f"this tshark was built without Lua support:\n{version}", pytrace=False)
    return exe


def _frame(src, dst, payload):
    return (Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src=src[0], dst=dst[0])
            / UDP(sport=src[1], dport=dst[1]) / payload)


def _dissect(tmp_path, frames, scripts):
    exe = _tshark()
    cap = tmp_path / "cap.pcap"
    wrpcap(str(cap), frames)
    cmd = [exe, "-n", "-r", str(cap), "-T", "pdml"]
    for s in scripts:
        cmd += ["-X", f"lua_script:{s}"]
    # a private HOME: no personal preferences or Lua plugins (a copy of netstor.lua there would
    # register the protocols twice)
    env = dict(os.environ, HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / ".config"))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    # as root tshark warns 'Running as user "root" ...'; Debian's init.lua sets
    # run_user_scripts_when_superuser = true so -X lua_script still runs
    noise = [ln for ln in r.stderr.splitlines() if ln.strip() and "could be dangerous" not in ln]
    assert r.returncode == 0 and not noise, f"{cmd} failed ({r.returncode}):\n{r.stderr}"
    packets = ET.fromstring(r.stdout).findall("packet")
    assert len(packets) == len(frames)
    out = []
    for p in packets:
        fields = {}
        for el in p.iter():
            if el.tag in ("field", "proto") and el.get("name"):
                fields.setdefault(el.get("name"), []).append(el)
        out.append(fields)
    return out


def _num(fields, name):
    els = fields.get(name)
    assert els and len(els) == 1, f"{name}: {els}"
    return int(els[0].get("show"), 0)


def _experts(fields):
    return [e.get("show") for e in fields.get("_ws.expert.message", [])]


def test_tshark_dissects_every_header(tmp_path):
    rng = random.Random(0x5EED)
    w = dict(proto.FIELDS)
    headers = []
    for op in proto.Op.NAMES:                       # every request, every reply x status
        headers.append(proto.Header(op=op, flags=rng.choice([0, proto.FLAG_CLONE])))
        for st in proto.Status.NAMES:
            headers.append(proto.Header(op=op | proto.REPLY, status=st))
    for h in headers:
        for n in ("key", "req_id", "server_id", "queue_len", "service_ns", "seq"):
            setattr(h, n, rng.getrandbits(w[n]))
        h.value = rng.randbytes(rng.choice([0, 1, 13, 200]))
    headers[0].key, headers[1].key = (1 << 64) - 1, 1 << 63
    frames = [_frame(SERVER, CLIENT, h.pack()) if h.is_reply else
              _frame(CLIENT, SERVER, h.pack()) for h in headers]

    prim_bytes = bytes.fromhex("03 81 beef 00000007 80000001 00000002 ffffffff 01 00 0b0b")
    prim_fields = dict(op=3, flags=0x81, tag=0xBEEF, count=7, value=0x80000001, expect=2,
                       result=0xFFFFFFFF, hops=1, pad=0, bridge_lo=0x0B0B)
    prim_port = ("10.0.0.1", primitives.PRIM_UDP_PORT)
    frames.append(_frame(("10.0.0.3", 50000), prim_port, prim_bytes + b"xyz"))
    good = proto.Header(op=proto.Op.GET, key=5, req_id=6).pack()
    frames.append(_frame(CLIENT, SERVER, good[:10]))                   # truncated
    frames.append(_frame(("10.0.0.3", 50000), prim_port, prim_bytes[:5]))  # truncated prim
    frames.append(_frame(CLIENT, SERVER, b"XX" + good[2:]))            # bad magic
    frames.append(_frame(CLIENT, SERVER, good[:14] + b"\x00\x09" + good[16:] + b"ab"))

    # a bit-packed header (the generator's masks), from a scratch spec loaded beside the file
    bits = make_spec("netstor_bits", 9998, [("a", 4), ("b", 12), ("c", 1), ("d", 7),
                                            ("e", 8)], enums={"a": {3: "THREE"}})
    (tmp_path / "bits.lua").write_text(generate([bits]))
    frames.append(_frame(CLIENT, ("10.0.0.2", 9998), bytes([0x3A, 0xBC, 0xD5, 0x7F])))

    got = _dissect(tmp_path, frames, [DEFAULT_OUT, tmp_path / "bits.lua"])

    for h, f in zip(headers, got):
        assert _num(f, "netstor.magic") == proto.MAGIC
        assert _num(f, "netstor.ver") == proto.VERSION
        for n in ("op", "status", "flags", "server_id", "req_id", "queue_len", "service_ns",
                  "key", "seq"):
            assert _num(f, f"netstor.{n}") == getattr(h, n), n
        assert _num(f, "netstor.value_len") == len(h.value)
        op_name = proto.Op.NAMES[h.op & ~proto.REPLY] + (" reply" if h.is_reply else "")
        assert f["netstor.op"][0].get("showname") == f"op: {op_name} (0x{h.op:02x})"
        assert f["netstor.status"][0].get("showname") == (
            f"status: {proto.Status.NAMES[h.status]} ({h.status})")
        if h.value:
            assert bytes.fromhex(f["netstor.value"][0].get("value")) == h.value
        else:
            assert "netstor.value" not in f
        assert not _experts(f) and "_ws.malformed" not in f
    rest = got[len(headers):]

    prim = rest[0]
    for n, v in prim_fields.items():
        assert _num(prim, f"netstor_prim.{n}") == v, n
    assert prim["netstor_prim.op"][0].get("showname") == "op: MAX (3)"
    assert bytes.fromhex(prim["netstor_prim.data"][0].get("value")) == b"xyz"
    assert "netstor" not in prim

    trunc = rest[1]
    assert _num(trunc, "netstor.op") == proto.Op.GET and "netstor.req_id" not in trunc
    assert _experts(trunc) == ["truncated netstor header: 10 of 32 bytes"]
    assert "_ws.malformed" in trunc and "netstor.malformed.short" in trunc

    ptrunc = rest[2]
    assert _num(ptrunc, "netstor_prim.tag") == 0xBEEF and "netstor_prim.count" not in ptrunc
    assert _experts(ptrunc) == ["truncated netstor_prim header: 5 of 24 bytes"]

    bad_magic = rest[3]
    assert _num(bad_magic, "netstor.key") == 5
    assert _experts(bad_magic) == [f"bad magic {0x5858} (expected 0x4e53)"]

    bad_len = rest[4]
    assert _num(bad_len, "netstor.value_len") == 9
    assert _experts(bad_len) == ["value_len 9 but 2 bytes follow the header"]
    assert bytes.fromhex(bad_len["netstor.value"][0].get("value")) == b"ab"

    b = rest[5]
    assert [_num(b, f"netstor_bits.{n}") for n in "abcde"] == [3, 0xABC, 1, 0x55, 0x7F]
    assert b["netstor_bits.a"][0].get("showname").startswith("0011 .... = a: THREE (3)")


def test_tshark_dissects_netrs_by_magic(tmp_path):
    """NetRS: the layout follows the magic field (request 15 bytes, response 26); the
    storage message behind it is dissected by the netstor dissector. Bytes hand-computed."""
    from netstor.offloads.netrs import header as rs
    port = ("10.0.0.9", rs.NETRS_UDP_PORT)
    inner = proto.Header(op=proto.Op.GET, key=77, req_id=0x01020304).pack()
    req = bytes.fromhex("0000 4e5253524551 00000000 0102 05")                # M_REQ
    sel = bytes.fromhex("0003 b1adacadacaf 00001234 0102 05")                # f(M_RESP)
    resp = bytes.fromhex("0003 4e5253525350 00001234 00000000 0008 0007 0009 00000040")
    mon = bytes.fromhex("0003 4e52534d4f4e 00001234 00010002 0008 0007 0009 0042aaff")
    unknown = bytes.fromhex("0000 010203040506 00000000 aa")
    frames = [_frame(port, port, req + inner), _frame(port, port, sel + inner),
              _frame(port, port, resp + inner), _frame(port, port, mon),
              _frame(port, port, unknown), _frame(port, port, resp[:17])]
    got = _dissect(tmp_path, frames, [DEFAULT_OUT])
    g_req, g_sel, g_resp, g_mon, g_unk, g_short = got
    for g, kind in ((g_req, "request"), (g_sel, "selected request")):
        assert g["netstor_netrs.kind"][0].get("show") == kind
        assert _num(g, "netstor_netrs.rgid") == 0x0102 and _num(g, "netstor_netrs.avail") == 5
        assert "netstor_netrs.sm" not in g
        assert _num(g, "netstor.key") == 77 and _num(g, "netstor.req_id") == 0x01020304
        assert not _experts(g)
    assert _num(g_sel, "netstor_netrs.rid") == 3 and _num(g_sel, "netstor_netrs.rv") == 0x1234
    assert _num(g_req, "netstor_netrs.mf") == rs.M_REQ and _num(g_sel, "netstor_netrs.mf") == \
        rs.f(rs.M_RESP)
    for g, kind, sm, t in ((g_resp, "response", 0, 0x40),
                           (g_mon, "monitored response", 0x10002, 0x0042AAFF)):
        assert g["netstor_netrs.kind"][0].get("show") == kind
        assert [_num(g, f"netstor_netrs.{n}") for n in ("sm", "ssl", "ss_sid", "ss_q", "ss_t")] \
            == [sm, 8, 7, 9, t]
        assert "netstor_netrs.rgid" not in g and not _experts(g)
    assert _num(g_resp, "netstor.key") == 77 and "netstor" not in g_mon
    assert _experts(g_unk) == ["unknown mf 0x010203040506"]
    assert bytes.fromhex(g_unk["netstor_netrs.data"][0].get("value")) == b"\xaa"
    assert _experts(g_short) == ["truncated netstor_netrs header: 17 of 26 bytes"]
    assert _num(g_short, "netstor_netrs.sm") == 0 and "netstor_netrs.ss_sid" not in g_short
