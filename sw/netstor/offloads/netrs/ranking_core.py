"""The NetRS ranking core: ``hls/ranking.x`` (DSLX) -> XLS (``xls-python``) -> pipelined Verilog.

Build step::

    text, info = ranking_verilog()          # build/hls/ranking.v (+ ranking.json), cached

DSLX -> ``xls.convert_dslx_to_ir`` -> ``xls.optimize_ir`` -> ``Package.schedule_and_codegen(
generator='pipeline', pipeline_stages=STAGES, delay_model=DELAY_MODEL, flop_inputs=True,
flop_outputs=True, reset='rst', input_valid_signal='input_valid',
output_valid_signal='output_valid')``. The result is cached under ``build/hls/`` by the
SHA-256 of the source, the options and the XLS version.

Latency: with flopped inputs and outputs the pipeline is ``stages + 1`` registers deep. The
number is read back from the generated Verilog (the ``input_valid`` -> ``output_valid``
register chain, :func:`schedule_latency`) and returned in ``info["latency"]``;
:data:`LATENCY` is the documented constant for the default schedule (tests check they agree).

DSLX tests: the wheel ships neither ``interpreter_main`` nor a DSLX test runner in its C API.
:func:`run_dslx_tests` therefore turns every ``#[test]`` function into a plain function,
lowers the module to IR (``convert_dslx_to_ir``, unoptimised) and runs each test function in
XLS' IR interpreter: a failed ``assert_eq`` is an IR ``assert`` and aborts the interpretation
with the DSLX source position. :func:`evaluate` runs the optimised IR of ``rank`` (the IR the
Verilog is generated from) in XLS' JIT, for comparing against the Python reference
(``netstor.offloads.netrs.ranking``).

:class:`RankingCore` wraps the generated module for Amaranth (``Instance``).
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import re
import time
from pathlib import Path

from amaranth.hdl import ClockSignal, Instance, Module, ResetSignal, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from netstor.paths import NoCheckout, build_dir, repo_root

try:                        # the DSLX source and the XLS build live in a checkout
    ROOT = repo_root()
    SOURCE = ROOT / "hls" / "ranking.x"
    BUILD = build_dir("hls")
except NoCheckout:          # a wheel install: the core's reference and wrapper work, no build
    ROOT = SOURCE = BUILD = None

DSLX_MODULE = "ranking"
TOP_FN = "rank"
MODULE = "xls_ranking"
#: pipeline stages handed to the XLS scheduler (see hls/README.md for the choice)
STAGES = 10
#: XLS delay model used to balance the stages ("unit", "asap7" and "sky130" ship in the wheel)
DELAY_MODEL = "asap7"
#: cycles from ``input_valid`` (with its operands) to ``output_valid`` (with the result), for
#: the default schedule: input flops + (STAGES - 1) stage registers + output flops
LATENCY = STAGES + 1
#: bump when the build options below change meaning (invalidates build/hls)
BUILD_VERSION = 2

CLOCK, RESET, VALID_IN, VALID_OUT, OUTPUT = "clk", "rst", "input_valid", "output_valid", "out"

# per-selection inputs (names and widths of the DSLX parameters = Verilog ports)
NR = 8
SCORE_W = 53
OUT_W = 1 + 3 + SCORE_W
INPUTS = {"algo": 2, "avail": 8, "n": 8, "rr": 3, "rnd": 16, "q": 16 * NR, "os": 8 * NR,
          "t": 16 * NR, "r": 16 * NR}


def _xls():
    import xls
    return xls


def xls_version():
    try:
        from importlib.metadata import version
        return version("xls-python")
    except Exception:           # pragma: no cover
        return "unknown"


def source_text(path: Path = SOURCE) -> str:
    return Path(path).read_text()


# ------------------------------------------------------------------------------ IR

def ir_text(src: str | None = None) -> str:
    """Unoptimised IR of the DSLX module (test functions are not lowered)."""
    src = source_text() if src is None else src
    return _xls().convert_dslx_to_ir(src, str(SOURCE), DSLX_MODULE)


def top_name() -> str:
    return _xls().mangle_dslx_name(DSLX_MODULE, TOP_FN)


@functools.lru_cache(maxsize=4)
def _optimized_ir(src: str) -> str:
    return _xls().optimize_ir(ir_text(src), top_name())


def optimized_ir(src: str | None = None) -> str:
    """Optimised IR of ``rank`` (what the Verilog is generated from)."""
    return _optimized_ir(source_text() if src is None else src)


# ------------------------------------------------------------------------------ DSLX tests

_TEST_RE = re.compile(r"#\[test\]\s*\n(\s*)fn\s+(\w+)")


def dslx_test_names(src: str | None = None):
    src = source_text() if src is None else src
    return [m.group(2) for m in _TEST_RE.finditer(src)]


def run_dslx_tests(src: str | None = None):
    """Run every ``#[test]`` function of the DSLX source; returns ``{name: None | error}``.

    Each test becomes a public function (same line numbers, so messages point into
    ranking.x), the module is lowered to IR and the test's implicit-token form
    (``__itok__<module>__<name>(token, activated)``) is interpreted; ``assert_eq`` failures
    abort with ``Assertion failure via assert_eq @ ranking.x:<line>``.
    """
    xls = _xls()
    src = source_text() if src is None else src
    names = dslx_test_names(src)
    plain = _TEST_RE.sub(lambda m: f"\n{m.group(1)}pub fn {m.group(2)}", src)
    pkg = xls.parse_ir_package(xls.convert_dslx_to_ir(plain, str(SOURCE), DSLX_MODULE))
    fns = {f.get_name(): f for f in pkg.get_functions()}
    results = {}
    for name in names:
        itok = f"__itok__{DSLX_MODULE}__{name}"
        try:
            if itok in fns:
                fns[itok].interpret([xls.Value.make_token(), xls.Value.make_true()])
            else:           # a test without any assertion has no token form
                fns[f"__{DSLX_MODULE}__{name}"].interpret([])
            results[name] = None
        except RuntimeError as e:
            results[name] = str(e)
    return results


# ------------------------------------------------------------------------------ evaluation

class IrEvaluator:
    """The optimised IR of ``rank`` in XLS' JIT (or interpreter): ports dict -> 57-bit int."""

    def __init__(self, src: str | None = None, jit: bool = True):
        xls = _xls()
        self.xls = xls
        pkg = xls.parse_ir_package(optimized_ir(src))
        self._pkg = pkg
        self.fn = pkg.get_function(top_name())
        self.jit = self.fn.to_jit() if jit else None

    def __call__(self, ports) -> int:
        xls = self.xls
        args = [xls.parse_typed_value(f"bits[{w}]:{int(ports[k]) & ((1 << w) - 1):#x}")
                for k, w in INPUTS.items()]
        v = self.jit.run(args) if self.jit is not None else self.fn.interpret(args)
        s = v.to_string()                         # "bits[57]:0x..." (or a decimal form)
        return int(s.split(":", 1)[1].replace("_", ""), 0)


def evaluate(vectors, src: str | None = None, jit: bool = True):
    ev = IrEvaluator(src, jit)
    return [ev(p) for p in vectors]


# ------------------------------------------------------------------------------ Verilog

def schedule_latency(verilog: str, out: str = VALID_OUT, inp: str = VALID_IN) -> int:
    """Registers on the valid chain from ``inp`` to ``out`` in XLS' pipeline Verilog."""
    assigns = dict(re.findall(r"^\s*assign\s+(\w+)\s*=\s*(\w+)\s*;", verilog, re.M))
    regs = dict(re.findall(r"^\s*(\w+)\s*<=\s*(\w+)\s*;", verilog, re.M))
    sig, n, seen = assigns.get(out, out), 0, set()
    while sig != inp:
        if sig in seen:
            raise ValueError(f"valid chain loops at {sig}")
        seen.add(sig)
        if sig in regs:
            sig, n = regs[sig], n + 1
        elif sig in assigns:
            sig = assigns[sig]
        else:
            raise ValueError(f"valid chain broken at {sig}")
    return n


def module_ports(verilog: str, module: str):
    """``{name: (direction, width)}`` from the module header."""
    m = re.search(rf"module\s+{re.escape(module)}\s*\((.*?)\);", verilog, re.S)
    if not m:
        raise ValueError(f"module {module} not found")
    ports = {}
    for d, hi, lo, name in re.findall(
            r"(input|output)\s+wire\s+(?:\[(\d+):(\d+)\]\s*)?(\w+)", m.group(1)):
        ports[name] = (d, int(hi) - int(lo) + 1 if hi else 1)
    return ports


def _codegen(stages, delay_model, module_name, src):
    xls = _xls()
    pkg = xls.parse_ir_package(optimized_ir(src))     # fresh package: codegen mutates it
    res = pkg.schedule_and_codegen(
        generator="pipeline", top=top_name(), module_name=module_name,
        pipeline_stages=stages, delay_model=delay_model,
        flop_inputs=True, flop_outputs=True, reset=RESET, reset_active_low=False,
        reset_asynchronous=False, reset_data_path=False,
        input_valid_signal=VALID_IN, output_valid_signal=VALID_OUT,
        add_invariant_assertions=False, use_system_verilog=False)
    return _lint_pragmas(res.get_verilog_text())


def _lint_pragmas(text):
    """Wrap the declarations of XLS' product wires (those assigned from one of its ``umul``
    functions) in ``verilator lint_off UNUSEDSIGNAL``: every fixed-point product is floored
    (``>> 4`` or ``>> 8``), so its low bits are unused by design (Verilator -Wall would flag
    exactly those). Nothing else is touched."""
    products = set(re.findall(r"^\s*assign\s+(\w+)\s*=\s*umul\w*\(", text, flags=re.M))

    def wrap(m):
        if m.group(3) not in products and "umul" not in m.group(3):
            return m.group(0)
        return (f"{m.group(1)}/* verilator lint_off UNUSEDSIGNAL */ {m.group(2)} "
                f"/* verilator lint_on UNUSEDSIGNAL */")
    return re.sub(r"^(\s*)(wire\s+\[\d+:0\]\s+(\w+);)$", wrap, text, flags=re.M)


def ranking_verilog(stages: int = STAGES, *, delay_model: str = DELAY_MODEL,
                    module_name: str = MODULE, build_dir: Path = BUILD, force: bool = False):
    """``(verilog_text, info)`` of the pipelined ranking core (cached in ``build_dir``).

    ``info``: module, stages, delay_model, latency (cycles, from the generated Verilog),
    throughput (selections per clock), ports ``{name: [direction, width]}``, clock/reset/valid
    port names, output layout, source and XLS version, compile seconds, cached flag.
    """
    src = source_text()
    opts = dict(stages=stages, delay_model=delay_model, module=module_name,
                build_version=BUILD_VERSION, xls=xls_version())
    key = hashlib.sha256((src + "\0" + json.dumps(opts, sort_keys=True)).encode()).hexdigest()
    stem = "ranking" if (stages, delay_model, module_name) == (STAGES, DELAY_MODEL, MODULE) \
        else f"ranking_{module_name}_s{stages}_{delay_model}"
    build_dir = Path(build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    vpath, jpath = build_dir / f"{stem}.v", build_dir / f"{stem}.json"
    with open(build_dir / f".{stem}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and vpath.exists() and jpath.exists():
            info = json.loads(jpath.read_text())
            if info.get("key") == key:
                info["cached"] = True
                return vpath.read_text(), info
        t0 = time.perf_counter()
        text = _codegen(stages, delay_model, module_name, src)
        secs = time.perf_counter() - t0
        ports = module_ports(text, module_name)
        info = {
            "key": key, "module": module_name, "source": str(SOURCE.relative_to(ROOT)),
            "source_sha256": hashlib.sha256(src.encode()).hexdigest(),
            "xls_version": opts["xls"], "stages": stages, "delay_model": delay_model,
            "latency": schedule_latency(text), "throughput_per_clock": 1,
            "clock": CLOCK, "reset": RESET + " (synchronous, active high)",
            "valid_in": VALID_IN, "valid_out": VALID_OUT, "output": OUTPUT,
            "ports": {k: list(v) for k, v in ports.items()},
            "output_layout": {"score": [0, SCORE_W], "index": [SCORE_W, 3],
                              "found": [SCORE_W + 3, 1]},
            "compile_seconds": round(secs, 3), "verilog": str(vpath.relative_to(ROOT))
            if vpath.is_relative_to(ROOT) else str(vpath),
        }
        for p, data in ((vpath, text), (jpath, json.dumps(info, indent=1) + "\n")):
            tmp = p.with_suffix(p.suffix + f".tmp{os.getpid()}")
            tmp.write_text(data)
            tmp.replace(p)
        info["cached"] = False
        return text, info


# ------------------------------------------------------------------------------ Amaranth

class RankingCore(wiring.Component):
    """The XLS ranking pipeline as an Amaranth component (an ``Instance`` of ``xls_ranking``).

    One selection per clock: raise ``valid_in`` with the request fields; ``LATENCY`` cycles
    later ``valid_out`` rises with ``found``, ``index`` and ``score`` (no back-pressure: the
    pipeline always advances). Field formats: hls/README.md. The Verilog of the instantiated
    module is ``self.verilog`` (added to the platform's files when a platform is given;
    otherwise pass it to the simulator/synthesis alongside the Amaranth output).
    """

    def __init__(self, *, stages: int = STAGES, domain: str = "sync"):
        self.verilog, self.info = ranking_verilog(stages)
        self.latency = self.info["latency"]
        self.module_name = self.info["module"]
        self._domain = domain
        members = {"valid_in": In(1)}
        members.update({k: In(w) for k, w in INPUTS.items()})
        members.update({"valid_out": Out(1), "found": Out(1), "index": Out(3),
                        "score": Out(SCORE_W)})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        out = Signal(OUT_W, name="xls_out")
        m.submodules.xls = Instance(
            self.module_name,
            i_clk=ClockSignal(self._domain), i_rst=ResetSignal(self._domain),
            i_input_valid=self.valid_in,
            **{f"i_{k}": getattr(self, k) for k in INPUTS},
            o_output_valid=self.valid_out, o_out=out)
        m.d.comb += [self.score.eq(out[:SCORE_W]), self.index.eq(out[SCORE_W:SCORE_W + 3]),
                     self.found.eq(out[SCORE_W + 3])]
        if platform is not None and hasattr(platform, "add_file"):
            platform.add_file(f"{self.module_name}.v", self.verilog)
        return m


class XlsRanking:
    """The ranking core as the ``core`` of a :class:`netstor.elements.Rank` element: the XLS
    pipeline in gateware, the bit-exact Python reference (:mod:`.ranking`) in the model."""

    name = MODULE

    def component(self):
        """A fresh :class:`RankingCore` (its ``latency`` is the pipeline depth)."""
        return RankingCore()

    def reference(self, algo, avail, replicas, *, n, rr, rnd):
        """``(found, index, score)`` for up to 8 ``(q, os, t, r)`` replicas."""
        from .ranking import Replica, rank
        return rank(algo, avail, [Replica(*r) for r in replicas], n=n, rr=rr, rnd=rnd)

    def verilog(self):
        """``{file name: text}`` of the instantiated module."""
        text, info = ranking_verilog()
        return {f"{info['module']}.v": text}


#: the core NetRS's program runs
XLS_RANKING = XlsRanking()
