"""AXI-Stream beat layouts shared by the data-plane blocks (no hardware of its own).

A stream port is ``stream.Signature(layout)`` with one of these ``data.StructLayout`` payloads
(fields listed LSB first, as ``StructLayout`` packs them)::

    beat_layout: | data (W) | keep (W/8) | last (1) | user (U) |
    pkt_layout:  | data (W) | keep (W/8) | last (1) | user (U) | len (14) |
    arb_layout:  | data (W) | keep (W/8) | last (1) | user (U) | len (14) | port (4) |
    frame_layout: arb_layout | first (1) | index (2) |

Byte order is AXI-Stream's: byte ``k`` of a beat is ``data[8k+7:8k]`` and is present when
``keep[k]`` is set. ``len`` is the frame length ``L`` in bytes and ``user`` the frame's
``tuser``; both are held constant on every beat of a packet. ``port`` is the input number an
arbiter took the packet from; ``first`` marks a packet's first beat and ``index`` counts its
beats (0, 1, 2, then 3 for every later one).

Three kinds of stream port:

* :func:`axis_signature`: valid/ready, the consumer may stall the producer;
* :func:`flow_signature`: the header path and the delayed frame, which never stall
  (``always_ready``: ``ready`` is the constant 1);
* :func:`tap_signature`: every member an input, to watch a stream someone else consumes
  (counters, completion bookkeeping); :func:`tap` wires one to the stream it watches.
"""

import functools

from amaranth.hdl import Value
from amaranth.lib import data, stream, wiring

__all__ = ["LEN_WIDTH", "PORT_WIDTH", "beat_layout", "pkt_layout", "arb_layout",
           "frame_layout", "axis_signature", "flow_signature", "tap_signature", "tap",
           "keep_count", "beats_for_len", "checked_init"]

#: Width of the ``len`` field: frames up to 16383 bytes.
LEN_WIDTH = 14
#: Width of the ``port`` field: up to 16 arbiter inputs.
PORT_WIDTH = 4


def _check(data_width, user_width):
    if not isinstance(data_width, int) or data_width < 8 or data_width % 8:
        raise ValueError(f"data_width must be a positive multiple of 8, not {data_width!r}")
    nbytes = data_width // 8
    if nbytes & (nbytes - 1):
        raise ValueError(f"data_width/8 must be a power of two, not {nbytes}")
    if not isinstance(user_width, int) or user_width < 1:
        raise ValueError(f"user_width must be a positive integer, not {user_width!r}")


def _fields(data_width, user_width):
    _check(data_width, user_width)
    return {"data": data_width, "keep": data_width // 8, "last": 1, "user": user_width}


def beat_layout(data_width=512, user_width=1):
    """One AXI-Stream beat: ``data``, ``keep``, ``last``, ``user``."""
    return data.StructLayout(_fields(data_width, user_width))


def pkt_layout(data_width=512, user_width=1):
    """A beat of a packet whose length is known: :func:`beat_layout` plus ``len`` (bytes)."""
    return data.StructLayout({**_fields(data_width, user_width), "len": LEN_WIDTH})


def arb_layout(data_width=512, user_width=1):
    """An arbiter's output beat: :func:`pkt_layout` plus ``port`` (input number)."""
    return data.StructLayout({**_fields(data_width, user_width), "len": LEN_WIDTH,
                              "port": PORT_WIDTH})


def frame_layout(data_width=512, user_width=1):
    """A beat of the delayed frame the deparsers rewrite: :func:`arb_layout` plus ``first``
    (the packet's first beat) and ``index`` (0, 1, 2, then 3 for any later beat)."""
    return data.StructLayout({**_fields(data_width, user_width), "len": LEN_WIDTH,
                              "port": PORT_WIDTH, "first": 1, "index": 2})


def axis_signature(layout):
    """The stream signature carrying ``layout`` (valid/ready handshake)."""
    return stream.Signature(layout)


def flow_signature(layout):
    """A stream that is never stalled (``always_ready``): the header path's ``(valid, PHV)``
    shift and the fixed-latency frame beside it."""
    return stream.Signature(layout, always_ready=True)


def tap_signature(layout):
    """Watching a stream of ``layout``: ``valid``, ``ready`` and ``payload``, all inputs."""
    return wiring.Signature({"valid": wiring.In(1), "ready": wiring.In(1),
                             "payload": wiring.In(layout)})


def tap(watcher, watched):
    """Statements driving ``watcher`` (a :func:`tap_signature` port) from the stream
    ``watched`` (add them to a module's ``comb`` domain)."""
    return [watcher.valid.eq(watched.valid), watcher.ready.eq(watched.ready),
            watcher.payload.eq(watched.payload)]


def keep_count(keep):
    """Number of bytes a beat carries: the popcount of ``keep`` (an Amaranth value)."""
    keep = Value.cast(keep)
    bits = [keep[k] for k in range(len(keep))]
    # balanced adder tree
    while len(bits) > 1:
        bits = [bits[k] + bits[k + 1] if k + 1 < len(bits) else bits[k]
                for k in range(0, len(bits), 2)]
    return bits[0]


def beats_for_len(length, bytes_per_beat):
    """``ceil(length / bytes_per_beat)`` for an Amaranth value ``length`` (power-of-two beats)."""
    shift = bytes_per_beat.bit_length() - 1
    return (Value.cast(length) + (bytes_per_beat - 1)) >> shift


def checked_init(init):
    """Decorate a component's ``__init__``: a rejected argument raises without Amaranth's
    "created but never used" warning for the half-built object."""
    @functools.wraps(init)
    def wrapper(self, *args, **kwargs):
        try:
            init(self, *args, **kwargs)
        except Exception:
            self._MustUse__silence = True
            raise
    return wrapper
