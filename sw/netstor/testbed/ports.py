"""The switch's wire ports on Linux interfaces: raw AF_PACKET sockets, the completion of
partial checksums (``CHECKSUM_PARTIAL`` frames from a veth), and a pcap writer for the frames
handed to host ports."""
from __future__ import annotations

import errno
import socket
import struct
import time

from netstor.wire.checksum import checksum, ones_sum

__all__ = ["PortSocket", "complete_checksum", "PcapWriter"]

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_AUXDATA = 8
TP_STATUS_CSUMNOTREADY = 8
PACKET_OUTGOING = 4
SO_TIMESTAMPNS = 35
_AUX = struct.Struct("=IIIHHHH")      # struct tpacket_auxdata


# ---- raw sockets ------------------------------------------------------------------------------
def _if_index(ifname):
    return socket.if_nametoindex(ifname)


class PortSocket:
    """One data-plane port on a Linux interface (AF_PACKET, ETH_P_ALL, non-blocking)."""

    def __init__(self, ifname, *, rcvbuf=4 << 20, timestamps=False):
        """``timestamps``: keep the kernel's receive time (ns, CLOCK_REALTIME) of every frame
        :meth:`recv_frames` returns in ``self.stamps`` (same order; 0 when missing)."""
        self.ifname = ifname
        self.timestamps = timestamps
        self.stamps = []
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, rcvbuf)
            s.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
            if timestamps:
                s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            s.bind((ifname, ETH_P_ALL))
            mreq = struct.pack("iHH8s", _if_index(ifname), PACKET_MR_PROMISC, 0, b"")
            s.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
            s.setblocking(False)
        except BaseException:
            s.close()
            raise
        self.sock = s

    def fileno(self):
        return self.sock.fileno()

    def recv_frames(self, max_frames=64):
        """Up to ``max_frames`` received frames (never our own transmissions), checksums
        completed; ``[]`` when nothing is pending."""
        out = []
        stamps = self.stamps = []
        anc_size = socket.CMSG_SPACE(_AUX.size) + (socket.CMSG_SPACE(16) if self.timestamps
                                                   else 0)
        for _ in range(max_frames):
            try:
                data, anc, _flags, addr = self.sock.recvmsg(65536, anc_size)
            except (BlockingIOError, InterruptedError):
                break
            if addr[2] == PACKET_OUTGOING:
                continue
            status = stamp = 0
            for level, typ, cdata in anc:
                if level == SOL_PACKET and typ == PACKET_AUXDATA and len(cdata) >= _AUX.size:
                    status = _AUX.unpack_from(cdata)[0]
                elif level == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS and len(cdata) >= 16:
                    sec, nsec = struct.unpack_from("=qq", cdata)
                    stamp = sec * 1_000_000_000 + nsec
            if self.timestamps:
                stamps.append(stamp)
            if status & TP_STATUS_CSUMNOTREADY:
                data = complete_checksum(data)
            out.append(data)
        return out

    def send(self, frame) -> bool:
        try:
            self.sock.send(frame)
            return True
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as e:
            if e.errno in (errno.ENOBUFS, errno.EMSGSIZE, errno.ENETDOWN, errno.ENXIO):
                return False
            raise

    def close(self):
        self.sock.close()


def complete_checksum(frame: bytes) -> bytes:
    """Fill in the full UDP/TCP checksum of an IPv4 frame whose checksum is partial (the
    kernel's ``CHECKSUM_PARTIAL``); other frames are returned unchanged."""
    l3 = 14
    et = struct.unpack_from("!H", frame, 12)[0] if len(frame) >= 14 else 0
    if et == 0x8100 and len(frame) >= 18:
        et = struct.unpack_from("!H", frame, 16)[0]
        l3 = 18
    if et != 0x0800 or len(frame) < l3 + 20:
        return frame
    ihl = (frame[l3] & 15) * 4
    total = struct.unpack_from("!H", frame, l3 + 2)[0]
    proto = frame[l3 + 9]
    frag = struct.unpack_from("!H", frame, l3 + 6)[0] & 0x3FFF
    l4 = l3 + ihl
    end = l3 + total
    if frag or end > len(frame) or ihl < 20:
        return frame
    off = {17: 6, 6: 16}.get(proto)
    if off is None or end < l4 + off + 2:
        return frame
    f = bytearray(frame)
    f[l4 + off:l4 + off + 2] = b"\0\0"
    pseudo = bytes(f[l3 + 12:l3 + 20]) + struct.pack("!BBH", 0, proto, end - l4)
    c = checksum(bytes(f[l4:end]), ones_sum(pseudo))
    if c == 0 and proto == 17:
        c = 0xFFFF
    struct.pack_into("!H", f, l4 + off, c)
    return bytes(f)


class PcapWriter:
    def __init__(self, path):
        self.f = open(path, "wb")
        self.f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))

    def write(self, frame):
        t = time.time()
        self.f.write(struct.pack("<IIII", int(t), int((t % 1) * 1e6), len(frame), len(frame)))
        self.f.write(frame)

    def close(self):
        self.f.close()
