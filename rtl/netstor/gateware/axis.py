"""AXI-Stream beat layouts shared by the data-plane blocks (no hardware of its own).

A stream port is ``stream.Signature(layout)`` with one of these ``data.StructLayout`` payloads
(fields listed LSB first, as ``StructLayout`` packs them)::

    beat_layout: | data (W) | keep (W/8) | last (1) | user (U) |
    pkt_layout:  | data (W) | keep (W/8) | last (1) | user (U) | len (14) |
    arb_layout:  | data (W) | keep (W/8) | last (1) | user (U) | len (14) | port (4) |

Byte order is AXI-Stream's: byte ``k`` of a beat is ``data[8k+7:8k]`` and is present when
``keep[k]`` is set. ``len`` is the frame length ``L`` in bytes and ``user`` the frame's
``tuser``; both are held constant on every beat of a packet. ``port`` is the input number an
arbiter took the packet from.
"""

import functools

from amaranth.hdl import Value
from amaranth.lib import data, stream

__all__ = ["LEN_WIDTH", "PORT_WIDTH", "beat_layout", "pkt_layout", "arb_layout",
           "axis_signature", "keep_count", "beats_for_len", "checked_init"]

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


def axis_signature(layout):
    """The stream signature carrying ``layout`` (valid/ready handshake)."""
    return stream.Signature(layout)


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
