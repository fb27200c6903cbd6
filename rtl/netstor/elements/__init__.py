"""The element kinds a program is made of, one module each (see
:mod:`netstor.lang.element` for what a kind provides):

============== ==============================================================================
``Table``       exact (hashed, multi-way), ternary (TCAM) or LPM match, action with parameters
``RegisterOp``  one read-modify-write of one cell of a ``RegisterBank`` per packet
``Hash``        CRC-32 of chosen fields into a field
``Compute``     plain assignments (per-packet logic without state)
``Rank``        the best of up to 8 replicas by a pipelined ranking core
``GFAccumulate`` payload: GF(2^8) multiply/XOR-accumulate of the packet's data (XORInc)
``GFScale``     payload, egress: the copy's data times a GF(2^8) coefficient
============== ==============================================================================

A new kind is a new module here (or anywhere: nothing looks kinds up by name).
"""
from netstor.lang.program import RegisterBank

from .compute import Compute
from .gf import GFAccumulate, GFScale
from .hash import Hash
from .rank import Rank
from .register import RegisterOp
from .table import Table

__all__ = ["Table", "RegisterBank", "RegisterOp", "Hash", "Compute", "Rank", "GFAccumulate",
           "GFScale"]
