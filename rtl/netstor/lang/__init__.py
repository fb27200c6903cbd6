"""Program-description language: PHV layout, expressions, tables, registers (no hardware)."""
from .expr import Expr, Const, Field, Param, Old, Mux, Cat
from .phv import Phv, PhvField, APP_BYTES, WINDOW_BYTES, PARSE_ERRORS
from .program import (Program, Action, Set, Table, RegisterBank, RegisterOp, Hash, Compute,
                      Rank, Pipeline, hash_crc32, F)
