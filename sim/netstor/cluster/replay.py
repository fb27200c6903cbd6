"""Short simulator traces replayed on the RTL (Verilator, the shared whole-core build): the
simulated switch and the gateware must produce the same frames for the same inputs.

:func:`replay_on_rtl` runs a rack (or a small fat tree) with a scheme for a few dozen
requests (a switch records its inputs and outputs, :mod:`netstor.cluster.trace`), then the
cocotb test :mod:`netstor.sim.cocotb_replay` writes the trace's configuration into the RTL, feeds the frames at
their arrival stamps and compares every output byte for byte.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

from netstor.sim.core_build import run_core

from .scheme import sim_schemes
from .trace import make_fattree_trace, make_trace

__all__ = ["replay_on_rtl", "replay_case", "start_ns_for", "cases"]


def cases():
    """``{scheme: replay_on_rtl keyword arguments}``: every simulator scheme that declares how
    its switch configuration is traced (``SimScheme.replay``); the others' configuration is
    one of these (client-side schemes put plain routed traffic through ``direct``'s)."""
    return {name: dict(cls.replay) for name, cls in sorted(sim_schemes().items())
            if cls.replay is not None}


def start_ns_for(n_ops):
    """When the clients may start so the first frame comes after the RTL's reset and its
    ``n_ops`` configuration writes (each a handful of AXI-Lite words at 16 ns; 200 ns per
    write leaves room). Kept short: every idle cycle costs the cocotb replay Python time."""
    return 4_000 + 200 * n_ops


def replay_on_rtl(scheme, *, requests=40, load=0.3, seed=1, scheme_options=None,
                  topology="rack", service="exp:2", check=True):
    """Trace ``scheme`` on a simulated rack (``topology="rack"``) or on the busiest switch of
    a 4-ary fat tree (``"fattree"``) and replay it on the RTL: the cocotb test's result
    (``frames``, ``outputs``, ``mismatches``, ...). Raises ``AssertionError`` on a mismatch
    (``check=False``: returns the result with its mismatches when the test wrote one).
    The service time is short (``exp:2``, 2 us) so the trace is dense: every simulated
    nanosecond is a quarter of a clock cycle the replay must step through cocotb."""
    make = {"rack": make_trace, "fattree": make_fattree_trace}[topology]
    kw = dict(requests=requests, load=load, seed=seed, scheme_options=scheme_options,
              service=service)
    probe = make(scheme, **kw)
    trace = make(scheme, **kw,
                 start_ns=start_ns_for(len(probe["writes"]) + len(probe["regs"])))
    with tempfile.TemporaryDirectory(prefix="netstor-replay-") as d:
        tpath, rpath = Path(d) / "trace.json", Path(d) / "result.json"
        tpath.write_text(json.dumps(trace))
        failure = None
        try:
            run_core("netstor.sim.cocotb_replay", "test_replay",
                     extra_env={"NETSTOR_REPLAY": str(tpath),
                                "NETSTOR_REPLAY_RESULT": str(rpath)},
                     run_name=f"replay-{scheme}-{topology}-{seed}")
        except AssertionError as e:
            failure = e
        result = json.loads(rpath.read_text()) if rpath.exists() else None
    if result is None or (failure is not None and check):
        raise AssertionError(f"replay of {scheme}: {failure or 'the cocotb test wrote no result'}")
    result["scheme"] = trace["scheme"]
    result["switch"] = trace.get("switch")
    return result


def replay_case(scheme, requests=30, seed=1):
    """One of :func:`cases` replayed, its mismatches reported rather than raised (the
    evaluation's platform section)."""
    return replay_on_rtl(scheme, requests=requests, seed=seed, check=False, **cases()[scheme])
