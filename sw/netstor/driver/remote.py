"""A control window shared over a Unix socket: the device ``unix:PATH``.

A process that owns a data plane which other processes cannot map (the golden model inside
``netstor switch`` or ``netstor serve-model``) serves its control window with
:class:`WindowServer`; the CLI, the controller and tests reach it with
:class:`SocketTransport`, so the same host code runs against it as against a card.

Wire protocol (one request, one reply, in order, on a stream socket): a request is 9 bytes,
``op`` (``b"R"`` or ``b"W"``), ``offset`` (u32 LE), ``value`` (u32 LE, 0 for reads); the reply
is 5 bytes, ``status`` (0 ok, 1 bad offset: unaligned or outside the 16 MiB window, 2 bad op) and ``value`` (u32 LE, the word read).
Accesses from all connections are serialised with one lock, so each 32-bit access is atomic
with respect to the data plane owner (which takes the same lock around packet processing).
"""

from __future__ import annotations

import os
import socket
import socketserver
import struct
import threading

__all__ = ["SocketTransport", "WindowServer", "RemoteError"]

_REQ = struct.Struct("<cII")
_REP = struct.Struct("<BI")


class RemoteError(RuntimeError):
    """The window server refused an access."""


def _recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("window server closed the connection")
        buf += chunk
    return buf


class SocketTransport:
    """``read32``/``write32`` through a :class:`WindowServer` at ``path``."""

    def __init__(self, path, timeout=10.0):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            self.sock.close()
            raise ConnectionError(f"no data plane serves a control window at {path} ({e}); "
                                  "start `netstor switch --control PATH` or "
                                  "`netstor serve-model --control PATH`") from None

    def _call(self, op, offset, value=0):
        if offset < 0 or offset & 3 or offset >> 32:
            raise ValueError(f"offset {offset:#x} is not a 32-bit aligned window offset")
        self.sock.sendall(_REQ.pack(op, offset, value & 0xFFFF_FFFF))
        status, v = _REP.unpack(_recv_exact(self.sock, _REP.size))
        if status:
            raise RemoteError(f"window server refused {op.decode()} {offset:#x} (status "
                              f"{status})")
        return v

    def read32(self, offset):
        return self._call(b"R", offset)

    def write32(self, offset, value):
        self._call(b"W", offset, value)

    def close(self):
        self.sock.close()


class WindowServer:
    """Serve ``transport`` (anything with ``read32``/``write32``) at Unix socket ``path``;
    ``lock`` serialises accesses with the owner's own use of the data plane."""

    def __init__(self, transport, path, lock=None, size=1 << 24):
        self.transport, self.path, self.size = transport, str(path), size
        self.lock = lock or threading.Lock()
        if os.path.exists(self.path):
            os.unlink(self.path)
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                s = self.request
                while True:
                    try:
                        req = _recv_exact(s, _REQ.size)
                    except (ConnectionError, OSError):
                        return
                    op, offset, value = _REQ.unpack(req)
                    status, out = 0, 0
                    try:
                        with outer.lock:
                            if offset >= outer.size or offset & 3:
                                status = 1
                            elif op == b"R":
                                out = outer.transport.read32(offset)
                            elif op == b"W":
                                outer.transport.write32(offset, value)
                            else:
                                status = 2
                    except (ValueError, IndexError, KeyError):
                        status = 1
                    try:
                        s.sendall(_REP.pack(status, out & 0xFFFF_FFFF))
                    except OSError:
                        return

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        self.server = Server(self.path, Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="window-server",
                                       daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
