"""Table, action and bank descriptions read from ``schema.json`` alone.

The host needs only the schema the gateware build exports, not the Python program
descriptions: :class:`SchemaPipeline` offers the attributes :class:`netstor.driver.tables.
TableWriter` reads from a :class:`netstor.lang.Pipeline` (tables with their keys, actions and
parameter widths, register banks, port and multicast-group counts), built from the schema's
``tables``, ``banks``, ``ports`` and ``mcast_groups`` sections.
"""

from __future__ import annotations

from dataclasses import dataclass

from netstor.lang.program import Action, action_id

__all__ = ["SchemaPipeline"]


@dataclass(frozen=True)
class _Key:
    expr: str
    width: int


class _Table:
    def __init__(self, name, d):
        self.qualname = name
        self.kind = d["kind"]
        self.size = d["size"]
        self.ways = d["ways"]
        self.depth = d["depth"]
        self.egress = d["egress"]
        self.key = [_Key(k["expr"], k["width"]) for k in d["key"]]
        self.key_width = d["key_width"]
        self.action_bits = d["action_bits"]
        self.param_width = d["param_width"]
        self.default_name = d["default"]
        if self.kind == "exact" and not str(d.get("hash", "")).startswith("H3"):
            # the driver places keys by the per-way H3 hashes (netstor.gateware.h3); a build
            # whose exact tables hash otherwise (the CRC of earlier builds) would miss them
            raise ValueError(f"schema: exact table {name} hashes by {d.get('hash')!r}; this "
                             "driver computes the per-way H3 hashes (rebuild the gateware)")
        # ids are 1..n in order; check the schema says so rather than assume it
        acts = sorted(d["actions"], key=lambda a: a["id"])
        if [a["id"] for a in acts] != list(range(1, len(acts) + 1)):
            raise ValueError(f"schema: table {name} action ids are not 1..n")
        self.actions = [Action(a["name"], {p["name"]: p["width"] for p in a["params"]})
                        for a in acts]

    def action_id(self, name):
        return action_id(self.qualname, self.actions, name)


@dataclass(frozen=True)
class _Bank:
    qualname: str
    width: int
    depth: int


class SchemaPipeline:
    """What the host knows of a pipeline, from its schema."""

    def __init__(self, schema):
        self.schema = schema
        self.tables = [_Table(n, d) for n, d in sorted(schema["tables"].items())]
        self.banks = [_Bank(n, d["width"], d["depth"]) for n, d in sorted(schema["banks"].items())]
        self.n_ports = sum(1 for p in schema["ports"]["inputs"] if p.startswith("wire_rx"))
        self.mcast_groups = schema["mcast_groups"]
