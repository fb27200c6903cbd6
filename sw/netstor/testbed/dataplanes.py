"""The data planes the test-bed switch forwards through: the golden model in this process
(optionally serving its control window on a Unix socket) or the RTL in Verilator.

The model is the compiled one (:class:`netstor.model.compiled.CompiledModel`, the same data
plane ~10x faster) unless ``model="interpreter"`` or the environment says
``NETSTOR_MODEL=interpreter`` (the reference :class:`~netstor.model.DataplaneModel`)."""
from __future__ import annotations

import os
import threading
import time

from netstor.api import load_schema
from netstor.driver.remote import WindowServer
from netstor.driver.tables import apply_writes
from netstor.driver.transports import ModelTransport
from netstor.model.compiled import CompiledModel
from netstor.model.dataplane import DataplaneModel
from netstor.programs import default_pipeline

__all__ = ["ModelDataplane", "MODELS"]

_monotonic_ns = time.monotonic_ns

#: the golden model's two executions of the pipeline
MODELS = {"compiled": CompiledModel, "interpreter": DataplaneModel}


class ModelDataplane:
    """The golden model as the switch's data plane."""
    kind = "model"

    def __init__(self, writes=(), regs=(), *, control=None, schema=None, model=None,
                 pipeline=None, groups=None):
        """``control``: serve the model's control window at this Unix socket path (device
        ``unix:PATH`` for ``netstor --device`` and the controller). ``model``: ``"compiled"``
        (default) or ``"interpreter"``; None: ``$NETSTOR_MODEL``, else compiled.
        ``pipeline``: default ``default_pipeline()``; ``groups``: the model's multicast
        groups (``"list"``: copy lists; default the model's)."""
        model = model or os.environ.get("NETSTOR_MODEL") or "compiled"
        if model not in MODELS:
            raise ValueError(f"model {model!r}: one of {sorted(MODELS)}")
        self.model_kind = model
        self.pipeline = pipeline or default_pipeline()
        self.P = self.pipeline.n_ports
        self.model = MODELS[model](self.pipeline, **({"groups": groups} if groups else {}))
        self._process = self.model.process
        apply_writes(self.model, writes)
        for name, value in regs:
            self.model.reg_write(name, value)
        self.lock = threading.Lock()
        self.server = None
        if control:
            self.server = WindowServer(ModelTransport(self.model, load_schema(schema)),
                                       control, self.lock).start()

    def process(self, frame, port):
        # the arrival timestamp a card would give: its 250 MHz core clock (32 bits); NetRS
        # times responses with it
        arrival = (_monotonic_ns() >> 2) & 0xFFFF_FFFF
        with self.lock:
            outs = self._process(frame, port, arrival=arrival)
        return [(o.port, o.frame) for o in outs]

    def counters(self):
        with self.lock:
            return self.model.counters()

    def close(self):
        if self.server:
            self.server.stop()
            self.server = None
