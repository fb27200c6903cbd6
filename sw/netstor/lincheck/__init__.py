"""Linearizability checks of key-value histories: porcupine (the Go library,
github.com/anishathalye/porcupine, pinned in ``go.mod``, hashes in ``go.sum``) behind a small
Go program (``main.go``: a read/write register per key, the history partitioned by key).

:func:`check` builds the program on first use into ``<build>/lincheck/<source hash>/`` (``go
build`` with ``GOPATH``/``GOCACHE`` inside ``<build>/lincheck``, ``GOFLAGS=-mod=mod``: the
module comes from the Go module proxy, nothing is installed by hand; cached by the hash of the
sources and the Go version; a file lock keeps parallel test workers to one build) and runs it.

A history is a list of operations (dicts, or :class:`Recorder` entries)::

    {"client": 0, "op": "write", "key": "k1", "value": "v7", "call": 1000, "return": 2500}
    {"client": 1, "op": "read",  "key": "k1", "value": "v7", "call": 1200, "return": 1900}

``value`` of a read is what it returned (None: the key held nothing, its initial state);
``return`` None marks a pending operation (no answer): a pending write may have taken effect
any time after its call, a pending read is left out. Keys and values are compared for
equality only (bytes are passed as hex). Timestamps: integers on one clock; a history with
float timestamps is taken as seconds (converted to integer nanoseconds).

:func:`acked_writes_lost` counts acknowledged writes whose value vanished (see there).

Go missing: :class:`LincheckUnavailable` (a ``RuntimeError``) with the reason; tests that need
the checker skip on it only when ``go`` itself is absent.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from netstor.paths import build_dir

__all__ = ["check", "build", "go_binary", "LincheckUnavailable", "Recorder",
           "acked_writes_lost", "to_jsonl", "SOURCES"]

HERE = Path(__file__).resolve().parent
SOURCES = ("main.go", "go.mod", "go.sum")
BUILD_TIMEOUT = 600


class LincheckUnavailable(RuntimeError):
    """The checker cannot be built here (no Go toolchain, or the module proxy unreachable)."""


def go_binary() -> str:
    """The ``go`` command: ``NETSTOR_GO``, else ``go`` on PATH, else /usr/local/go/bin/go."""
    for cand in (os.environ.get("NETSTOR_GO"), shutil.which("go"), "/usr/local/go/bin/go"):
        if cand and os.access(cand, os.X_OK):
            return cand
    raise LincheckUnavailable("the Go toolchain is missing (no `go` on PATH, no "
                              "/usr/local/go/bin/go; set NETSTOR_GO): the linearizability "
                              "checker is a Go program on porcupine")


def _go_env(root: Path) -> dict:
    env = dict(os.environ)
    env.update(GOPATH=str(root / "gopath"), GOCACHE=str(root / "gocache"),
               GOMODCACHE=str(root / "gopath" / "pkg" / "mod"),
               GOFLAGS="-mod=mod -modcacherw -buildvcs=false", GOTOOLCHAIN="local",
               GOWORK="off", CGO_ENABLED="0", GOENV="off")
    return env


def _source_hash(go: str, env: dict) -> str:
    h = hashlib.sha256()
    for name in SOURCES:
        h.update(name.encode() + b"\0" + (HERE / name).read_bytes() + b"\0")
    try:
        version = subprocess.run([go, "version"], capture_output=True, text=True, env=env,
                                 timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LincheckUnavailable(f"`{go} version` failed: {e}") from e
    h.update(version.encode())
    return h.hexdigest()[:16]


_built: dict[str, Path] = {}
_build_lock = threading.Lock()


def build() -> Path:
    """The checker's binary, built first if needed (module docstring)."""
    go = go_binary()
    root = build_dir("lincheck")
    env = _go_env(root)
    with _build_lock:
        if go in _built:
            return _built[go]
        digest = _source_hash(go, env)
        exe = root / digest / "lincheck"
        if not exe.exists():
            root.mkdir(parents=True, exist_ok=True)
            with open(root / ".lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)         # one build across test workers
                try:
                    if not exe.exists():
                        _compile(go, env, exe)
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
        _built[go] = exe
        return exe


def _compile(go: str, env: dict, exe: Path):
    exe.parent.mkdir(parents=True, exist_ok=True)
    src = exe.parent / "src"                  # a copy: `-mod=mod` never touches the checkout
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir()
    for name in SOURCES:
        shutil.copyfile(HERE / name, src / name)
    tmp = exe.parent / f"lincheck.tmp{os.getpid()}"
    try:
        r = subprocess.run([go, "build", "-o", str(tmp), "."], cwd=src, env=env,
                           capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        raise LincheckUnavailable(f"`go build` of the checker ran over {BUILD_TIMEOUT} s") \
            from e
    if r.returncode != 0:
        raise LincheckUnavailable(
            f"`go build` of the linearizability checker failed (is the Go module proxy "
            f"reachable? GOPROXY={env.get('GOPROXY') or 'default'}):\n{r.stderr.strip()}")
    os.replace(tmp, exe)


# ---- histories -----------------------------------------------------------------------------
def _text(x):
    if x is None or isinstance(x, str):
        return x
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x).hex()
    return str(x)


def _get(op, name):
    return op[name] if isinstance(op, dict) else getattr(op, name)


def _ops(history):
    ops = [op for op in history]
    floats = any(isinstance(_get(op, "call"), float) or isinstance(_get(op, "return"), float)
                 for op in ops)

    def ts(t):
        if t is None:
            return None
        return int(round(t * 1e9)) if floats else int(t)
    return [{"client": int(_get(op, "client")), "op": _get(op, "op"),
             "key": _text(_get(op, "key")), "value": _text(_get(op, "value")),
             "call": ts(_get(op, "call")), "return": ts(_get(op, "return"))} for op in ops]


def to_jsonl(history) -> str:
    """The history as the checker's JSON lines."""
    return "".join(json.dumps(op, separators=(",", ":")) + "\n" for op in _ops(history))


def check(history, timeout: float = 60.0, html=None) -> dict:
    """Check ``history`` (module docstring): the checker's JSON report as a dict: ``ok``,
    ``result`` (Ok / Illegal / Unknown), ``operations``, ``pending_writes``,
    ``pending_reads``, ``partitions`` (keys), ``violations`` (keys not linearizable),
    ``unknown`` (keys whose check ran out of ``timeout``), ``key`` (the first bad key),
    ``bad_keys``, ``seconds``. ``html``: write porcupine's visualization there."""
    exe = build()
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write(to_jsonl(history))
        path = f.name
    try:
        argv = [str(exe), "-in", path, "-timeout", str(timeout)]
        if html:
            argv += ["-html", str(html)]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 60)
    finally:
        os.unlink(path)
    if r.returncode not in (0, 1) or not r.stdout.strip():
        raise ValueError(f"lincheck: {r.stderr.strip() or f'exit status {r.returncode}'}")
    return json.loads(r.stdout)


def acked_writes_lost(history) -> dict:
    """Acknowledged writes whose value vanished. Needs unique written values per key and a
    read of every key after the run went quiet. An acknowledged write ``w`` survives when a
    read returned its value, or when a read called after ``w`` returned saw the value of
    another write that did not end before ``w`` began (a write that may follow ``w``); it is
    lost otherwise (e.g. every later read shows an older value, or nothing was read after
    it). Returns ``{"acked_writes": N, "lost": N, "lost_ops": [...first 10]}``."""
    ops = _ops(history)
    writes, reads = {}, {}
    for op in ops:
        (writes if op["op"] == "write" else reads).setdefault(op["key"], []).append(op)
    acked = lost = 0
    lost_ops = []
    for key, ws in writes.items():
        by_value = {}
        for w in ws:
            by_value.setdefault(w["value"], []).append(w)
        rs = [r for r in reads.get(key, ()) if r["return"] is not None]
        for w in ws:
            if w["return"] is None:
                continue
            acked += 1
            if len(by_value[w["value"]]) > 1:
                raise ValueError(f"key {key!r}: value {w['value']!r} written twice: "
                                 f"acked_writes_lost needs unique values")
            ok = False
            for r in rs:
                if r["value"] == w["value"]:
                    ok = True
                    break
                if r["call"] > w["return"] and r["value"] is not None:
                    other = by_value.get(r["value"])
                    if other and not (other[0]["return"] is not None and
                                      other[0]["return"] < w["call"]):
                        ok = True
                        break
            if not ok:
                lost += 1
                if len(lost_ops) < 10:
                    lost_ops.append(w)
    return {"acked_writes": acked, "lost": lost, "lost_ops": lost_ops}


class Recorder:
    """A thread-safe history of one run: ``t = rec.call(client, op, key, value)`` when an
    operation starts, ``rec.ret(t, value)`` when it is answered (a read's value; a write's
    is kept); unanswered operations stay pending. Times: ``time.monotonic_ns()``."""

    def __init__(self):
        self.ops = []
        self._lock = threading.Lock()

    def call(self, client, op, key, value=None) -> int:
        entry = {"client": client, "op": op, "key": key, "value": value,
                 "call": time.monotonic_ns(), "return": None}
        with self._lock:
            self.ops.append(entry)
            return len(self.ops) - 1

    def ret(self, token: int, value=None):
        now = time.monotonic_ns()
        with self._lock:
            entry = self.ops[token]
            entry["return"] = now
            if entry["op"] == "read":
                entry["value"] = value

    def history(self) -> list:
        with self._lock:
            return [dict(e) for e in self.ops]

    def __len__(self):
        return len(self.ops)
