"""A switch of the simulated cluster: our data plane, run by a model object with the golden
model's API (``process(frame, ingress_port, arrival=) -> [Output(port, frame, user)]``,
``mem_write``, ``reg_write``, ``counters``), configured by the host's own configuration files.

* **Model.** ``model_class`` (default :func:`default_model_class`: the compiled model
  ``netstor.model.compiled.CompiledModel`` when it is importable, else the interpreter
  ``netstor.model.dataplane.DataplaneModel``), built on ``pipeline`` (default: the default
  bitstream's, ``netstor.programs.default_pipeline()``, 2 wire ports).
* **Configuration.** :meth:`SwitchNode.configure` takes a configuration (dict or YAML/TOML/JSON
  path, :mod:`netstor.config` format with the offloads' sections) and applies exactly the
  control-plane writes the test-bed switch applies (:func:`netstor.compiler.config_ops`:
  recorded while the host API configures a scratch model; :func:`netstor.driver.tables.apply_writes`).
* **Timing** (the device, ``docs/dataplane-spec.md`` and the README's architecture): the
  pipeline takes one 64-byte beat per cycle of its 250 MHz clock, so a frame of
  ``beats = ceil(len / 64)`` occupies the input for ``beats`` cycles (frames queue behind each
  other); its outputs leave ``beats + BASE_CYCLES`` cycles after it entered (the build's header-path
  latency + 5: 68 with the copy lane's 63-cycle header path). The hardware ``arrival``
  timestamp is the virtual time in 250 MHz cycles, modulo 2^32.
* **Recirculation.** When the model can defer recirculated passes (``model.deferred``, see
  :meth:`netstor.model.dataplane.DataplaneModel.run_deferred`), a recirculated copy re-enters the
  pipeline when its first pass leaves it and its outputs leave one pass later, as on the device;
  a model without that runs them inline (all outputs at the first pass's time).
* **Ports.** Output ``q < P`` goes out of wire port ``q`` (its link, or the link to the frame's
  destination MAC when the port leads to a segment, see :mod:`netstor.cluster.net`); outputs to
  the host ports (``q >= P``: the card's host) are counted in ``to_host`` and go no further.
* **Trace.** ``trace=N`` records the first ``N`` input frames: ``(t_ns, ingress_port, frame,
  arrival_cycles)`` in :attr:`SwitchNode.trace` and their outputs ``(t_ns, port, frame)`` in
  :attr:`SwitchNode.trace_out` (same index, recirculated outputs included), for replay on the
  model or on the RTL (:meth:`SwitchNode.trace_json`).
"""
from __future__ import annotations

import functools
import json

from netstor.compiler import config_ops
from netstor.config import load_config
from netstor.driver.tables import apply_writes
from netstor.model.dataplane import DataplaneModel

from .net import Node

__all__ = ["SwitchNode", "default_model_class", "CLOCK_NS", "BASE_CYCLES", "pass_cycles",
           "cached_config_ops"]

#: the data plane's clock period (250 MHz)
CLOCK_NS = 4


def _base_cycles():
    """The default bitstream's fixed cycles on top of a frame's beats: its header path
    (``latency_cycles`` in the build's schema) + 5 (input buffer 3 after its store-and-forward
    beats - 1, arbiter 1, egress queue 2): the port-to-port latency ``make bench`` measures."""
    from netstor.api import load_schema
    return int(load_schema()["latency_cycles"]) + 5


#: fixed cycles of a pass on top of the frame's beats (68 with the copy lane's 63-cycle header
#: path; 46 before issue 12's timing work)
BASE_CYCLES = _base_cycles()


def pass_cycles(frame_len):
    """Cycles from a frame entering the pipeline to its outputs leaving: beats +
    :data:`BASE_CYCLES`."""
    return (frame_len + 63) // 64 + BASE_CYCLES


def default_model_class():
    """The compiled model when it is there, else the interpreter (the golden model)."""
    try:
        from netstor.model.compiled import CompiledModel
    except ImportError:
        return DataplaneModel
    return CompiledModel


@functools.lru_cache(maxsize=1024)     # more than the 320 switches of a 16-ary fat tree
def _config_ops_json(text):
    writes, regs = config_ops(json.loads(text))
    return tuple(writes), tuple(regs)


def cached_config_ops(cfg):
    """:func:`netstor.compiler.config_ops` of a configuration dict, cached by its content (a
    fat tree configures hundreds of switches, many alike)."""
    if not isinstance(cfg, dict):
        cfg = load_config(cfg)
    return _config_ops_json(json.dumps(cfg, sort_keys=True))


#: released models per (model class, pipeline identity), see SwitchNode.release
_POOL = {}


@functools.lru_cache(maxsize=8)
def _default_pipeline(n_ports):
    from netstor.programs import default_pipeline
    return default_pipeline(n_ports)


class SwitchNode(Node):
    def __init__(self, net, name, macs, *, pipeline=None, model_class=None, config=None,
                 trace=0):
        """``macs``: ``{wire port: MAC}`` of the switch's ports (the hosts' gateway MACs)."""
        super().__init__(net, name)
        self.pipeline = _default_pipeline(2) if pipeline is None else pipeline
        self.P = self.pipeline.n_ports
        for p, m in macs.items():
            if not 0 <= p < self.P:
                raise ValueError(f"switch {name}: port {p} outside 0..{self.P - 1}")
            self.macs[p] = bytes(m)
        cls = default_model_class() if model_class is None else model_class
        self.model_class = cls
        pool = _POOL.get((cls, id(self.pipeline)))
        self.model = pool.pop() if pool else cls(self.pipeline)
        self._defer = hasattr(self.model, "deferred") and hasattr(self.model, "run_deferred")
        if self._defer:
            self.model.deferred = []
        self.busy_until = 0          # the pipeline input is busy until then (ns)
        self.frames_in = self.to_host = self.recirc_passes = 0
        self.trace_limit = int(trace)
        self.trace, self.trace_out = [], []
        if config is not None:
            self.configure(config)

    # ---- control plane -------------------------------------------------------------------
    def configure(self, config):
        """Apply a configuration the way the test-bed switch does (see the module doc)."""
        if self.pipeline is not _default_pipeline(2):
            raise ValueError("configuration files describe the default bitstream (2 wire "
                             "ports, build/rtl/schema.json); give this pipeline's writes to "
                             "apply_ops instead")
        writes, regs = cached_config_ops(config)
        self.apply_ops(writes, regs)
        self.config = config        # what a trace's replay writes into the RTL

    def apply_ops(self, writes, regs=()):
        apply_writes(self.model, writes)
        for name, value in regs:
            self.model.reg_write(name, value)

    def counters(self):
        return self.model.counters()

    def release(self):
        """Give the model back to this process's pool, reset to its power-on state (memories,
        registers, counters; what the node or its users set on the instance removed): a later
        switch of the same pipeline and model class takes it instead of generating and
        compiling a model again (~30 ms each, 320 times for a 16-ary fat tree). The node has
        no model afterwards."""
        m, self.model = self.model, None
        if m is None or not hasattr(m, "reset"):
            return
        for attr in [a for a in vars(m) if a in ("process", "run_deferred")]:
            delattr(m, attr)
        m.deferred = None
        m.reset()
        _POOL.setdefault((self.model_class, id(self.pipeline)), []).append(m)

    # ---- data path -----------------------------------------------------------------------
    def receive(self, frame, port):
        now = self.sim.now
        if now < self.busy_until:            # the pipeline input is taking another frame
            self.sim.at(self.busy_until, self._enter, frame, port)
        else:
            self._enter(frame, port)

    def _enter(self, frame, port):
        now = self.sim.now
        if now < self.busy_until:
            self.sim.at(self.busy_until, self._enter, frame, port)
            return
        self.frames_in += 1
        cycles = pass_cycles(len(frame))
        self.busy_until = now + (cycles - BASE_CYCLES) * CLOCK_NS
        arrival = (now // CLOCK_NS) & 0xFFFF_FFFF
        idx = -1
        if len(self.trace) < self.trace_limit:
            idx = len(self.trace)
            self.trace.append((now, port, bytes(frame), arrival))
            self.trace_out.append([])
        model = self.model
        n0 = len(model.deferred) if self._defer else 0
        outs = model.process(frame, port, arrival=arrival)
        t_out = now + cycles * CLOCK_NS
        self._emit(outs, t_out, idx)
        if self._defer and len(model.deferred) > n0:
            for args in model.deferred[n0:]:
                self.sim.at(t_out, self._recirc, args, len(frame), idx)

    def _recirc(self, args, length, idx):
        """A recirculated pass re-enters the pipeline (its first pass has left)."""
        now = self.sim.now
        if now < self.busy_until:
            self.sim.at(self.busy_until, self._recirc, args, length, idx)
            return
        cycles = pass_cycles(length)
        self.busy_until = now + (cycles - BASE_CYCLES) * CLOCK_NS
        self.recirc_passes += 1
        model = self.model
        pending = model.deferred
        for k, a in enumerate(pending):
            if a is args:
                del pending[k]
                break
        # run this pass alone (a pass it recirculates in turn runs inline), keep the others
        model.deferred = [args]
        try:
            outs = model.run_deferred()
        finally:
            model.deferred = pending
        self._emit(outs, now + cycles * CLOCK_NS, idx)

    def _emit(self, outs, t, idx):
        P = self.P
        for o in outs:
            if idx >= 0:
                self.trace_out[idx].append((t, o.port, o.frame))
            if o.port < P:
                self.transmit(o.port, o.frame, t)
            else:
                self.to_host += 1

    # ---- trace ---------------------------------------------------------------------------
    def trace_json(self):
        """The trace as JSON-ready dicts (frames in hex)."""
        return [{"t_ns": t, "port": p, "arrival": a, "frame": f.hex(),
                 "outputs": [{"t_ns": to, "port": q, "frame": g.hex()} for to, q, g in outs]}
                for (t, p, f, a), outs in zip(self.trace, self.trace_out)]

    def stats(self):
        return {"frames_in": self.frames_in, "recirculated": self.recirc_passes,
                "to_host": self.to_host, "unknown_mac": self.unknown_mac}
