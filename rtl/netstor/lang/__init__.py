"""Program-description language: PHV layout, expressions, programs, pipelines and the element
protocol (no hardware). The element kinds themselves are in :mod:`netstor.elements`."""
from .expr import Expr, Const, Field, Param, Old, Mux, Cat
from .phv import Phv, PhvField, APP_BYTES, WINDOW_BYTES, PARSE_ERRORS
from .element import Element
from .program import Program, Action, Set, RegisterBank, Pipeline, hash_crc32, F
