"""How ``netstor-load`` sends a request and what it learns from the reply: a *scheme*.

The load generator (:func:`netstor.agent.load.run_load`) owns arrivals, keys, timeouts and the
latency accounting; a scheme decides where each request goes and how (which target, which
offload header before it, copies), and keeps its own statistics. ``direct`` is built in; every
registered offload adds its own (its ``schemes`` hook: ``{name: Scheme subclass}``).
"""
from __future__ import annotations

from netstor.proto import MAX_VALUE, STORAGE_UDP_PORT

__all__ = ["Scheme", "Direct", "PICKS", "all_schemes"]

PICKS = ("random", "round-robin", "key")


class Scheme:
    """A scheme. Subclasses set ``name``; ``codec`` (the offload's codec: the engine unwraps
    its reply headers into ``Completion.head``), ``port`` (targets' default port),
    ``bind_port`` (the engine's local port; the offload may recognise replies by it),
    ``preload`` (whether ``--preload`` makes sense), ``max_value`` (the largest
    ``--value-size``: a storage request's value unless the scheme carries larger objects
    itself), and implement :meth:`send`; ``options`` are the keyword arguments of
    :func:`run_load` (and CLI flags, :meth:`add_arguments`) the scheme takes."""
    name = ""
    help = ""
    codec = None
    port = STORAGE_UDP_PORT
    preload = True
    max_value = MAX_VALUE
    #: ``{option: default}`` taken from run_load's keyword arguments
    options = {}

    def __init__(self, n_targets, rng, seed, **options):
        self.n_targets, self.rng, self.seed = n_targets, rng, seed
        for k, default in self.options.items():
            setattr(self, k, options.pop(k, default))
        if options:
            raise TypeError(f"scheme {self.name}: unknown option(s) {sorted(options)}")

    @property
    def bind_port(self):
        return 0

    @classmethod
    def add_arguments(cls, parser):
        """Add the scheme's CLI flags (each maps to one option)."""

    def send(self, eng, op, key, value, now_ns):
        """Send one request through engine ``eng`` (:class:`netstor.agent.client.Engine`)."""
        raise NotImplementedError

    def record(self, c):
        """Learn from one finished request (``c.reply`` None: it timed out)."""

    def result(self, replies, targets):
        """The scheme's own section of the result (``result[name]``), or None."""
        return None

    def config(self):
        """The scheme's part of ``result["config"]``."""
        return {}

    @classmethod
    def note(cls, result):
        """A few words on ``result`` for ``netstor-load``'s table line ("" for none)."""
        return ""


class Direct(Scheme):
    """Plain storage requests to the targets (``pick``: random, round-robin or by key)."""
    name = "direct"
    help = "plain requests to the targets (--pick)"
    options = {"pick": "random"}

    def __init__(self, n_targets, rng, seed, **options):
        super().__init__(n_targets, rng, seed, **options)
        if self.pick not in PICKS:
            raise ValueError(f"pick must be one of {', '.join(PICKS)}, got {self.pick!r}")
        self._rr = 0

    def send(self, eng, op, key, value, now_ns):
        n = self.n_targets
        if self.pick == "random":
            t = self.rng.randrange(n) if n > 1 else 0
        elif self.pick == "round-robin":
            t, self._rr = self._rr, (self._rr + 1) % n
        else:
            t = key % n
        eng.send(op, key, value, target=t, now_ns=now_ns)

    def config(self):
        return {"pick": self.pick}


def all_schemes():
    """``{name: Scheme subclass}``: ``direct`` and every registered offload's."""
    from netstor.offloads import offloads
    out = {"direct": Direct}
    for off in offloads():
        extra = off.hook("schemes")
        for name, cls in (extra or {}).items():
            if name in out:
                raise ValueError(f"load scheme {name!r} of offload {off.name} is taken")
            out[name] = cls
    return out
