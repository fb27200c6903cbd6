"""An offload's side of the storage agents: the header it puts before a storage request and
before a storage reply, for the server (:class:`ServerCodec`) and the client engine.

``netstor-server`` opens one extra UDP socket per registered offload that has a codec (flag
``--<offload>-port``, default the offload's UDP port, 0 = off; an unavailable default port
turns the offload off with a warning) and hands every datagram on it to the codec; the storage
request behind the header is served by the same workers as plain ones, and the reply goes
back behind the codec's reply header. The client engine (:class:`netstor.agent.client.Engine`)
takes a codec to unwrap replies.
"""
from __future__ import annotations

__all__ = ["ServerCodec"]


class ServerCodec:
    """Base of an offload's codec. Counters the server keeps for it: ``<prefix>_received``
    (datagrams on its socket, also in ``received``), ``<prefix>_replies``, ``<prefix>_dropped``
    (not a request of this offload; also in ``dropped``), and ``extra_counters``."""

    #: the offload's name (``--<name>-port``)
    name = ""
    #: counter prefix
    prefix = ""
    #: UDP port the server listens on by default
    default_port = 0
    #: more counters :meth:`admit` (or :meth:`serve`) may name
    extra_counters = ()
    #: True: the codec serves its datagrams itself (:meth:`serve`): a protocol of its own,
    #: not a storage request behind a header
    serves = False

    def serve(self, server, sock, data, addr):
        """Serve one datagram (only when :attr:`serves`), in the offload socket's receiver
        thread: ``server`` (:class:`netstor.agent.server.Server`) gives ``env`` (its LMDB
        environment), ``server_id`` and ``count(name)``; answer on ``sock``."""
        raise NotImplementedError

    # ---- server side -----------------------------------------------------------------------
    def split_request(self, data):
        """``(header, storage request bytes)`` of a datagram, or None when it is not a request
        of this offload (the server drops and counts it)."""
        raise NotImplementedError

    def admit(self, header, pending, workers):
        """None to serve the request, or the name of the counter that records why it is
        dropped (``pending``: requests queued or in service; called under the server's
        lock)."""
        return None

    def reply_header(self, header, server_id, load, service_ns):
        """The header before the storage reply to ``header``'s request: ``load`` = requests a
        new request would wait behind once this reply is sent; ``service_ns`` = this
        request's service time (0 for BUSY / BAD_REQUEST answers)."""
        raise NotImplementedError

    # ---- client side -----------------------------------------------------------------------
    def split_reply(self, data):
        """``(header, storage reply bytes)`` of a reply datagram, or None when it does not
        carry this offload's reply header (then it is a plain storage reply)."""
        return None
