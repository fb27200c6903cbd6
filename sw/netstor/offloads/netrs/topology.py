"""The k-ary fat tree with NetRS operators (switch + network accelerator).

The fat tree itself (tiers, names, wiring, distances, ECMP next hops) is the simulator's
generic :class:`netstor.cluster.topology.FatTree`; this module adds what NetRS puts on it:

* NetRS operators ``<switch>/acc<n>``: one accelerator attached to one switch (a switch with
  several accelerators belongs to several operators, paper section 2); an operator stands for
  its switch in distances and next hops and has its switch's tier and pod.
* Accelerator capacity: an operator can take at most ``T^max = U * c_ac / t_ac`` requests per
  second as RSNode (paper section 3.2); :func:`accelerator_capacity` computes it, the defaults
  are the evaluation's numbers (section 6: U = 25 %, 1 core, 5 us per selection -> 50 000 req/s).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from netstor.cluster.topology import AGG, CORE, TIER_NAMES, TOR, FatTree as _FatTree, Host, Switch

__all__ = ["CORE", "AGG", "TOR", "TIER_NAMES", "Switch", "Host", "Operator", "FatTree",
           "accelerator_capacity"]


def accelerator_capacity(utilization: float = 0.25, cores: int = 1,
                         service_time: float = 5e-6) -> float:
    """``T^max = U * c^ac / t^ac`` in requests per second (paper section 3.2)."""
    if service_time <= 0:
        raise ValueError("service_time must be positive")
    return utilization * cores / service_time


@dataclass(frozen=True)
class Operator:
    """A NetRS operator: one accelerator attached to one switch."""
    name: str
    switch: str
    slot: int
    tier: int
    pod: int | None
    capacity: float      # T^max_j, requests per second


class FatTree(_FatTree):
    """A k-ary fat tree (:class:`netstor.cluster.topology.FatTree`) with NetRS operators.

    ``accelerators`` maps switch name -> number of attached accelerators (default: one on every
    switch, as in the paper's evaluation); ``capacity`` is the default ``T^max`` of an operator
    and ``capacities`` overrides it per operator name.
    """

    def __init__(self, k: int, *, accelerators: Mapping[str, int] | None = None,
                 capacity: float | None = None,
                 capacities: Mapping[str, float] | None = None):
        super().__init__(k)
        cap = accelerator_capacity() if capacity is None else float(capacity)
        capacities = dict(capacities or {})
        self.operators: dict[str, Operator] = {}
        for sw in self.switches.values():
            n = 1 if accelerators is None else int(accelerators.get(sw.name, 0))
            for slot in range(n):
                name = f"{sw.name}/acc{slot}"
                self.operators[name] = Operator(name, sw.name, slot, sw.tier, sw.pod,
                                                float(capacities.get(name, cap)))
        unknown = set(capacities) - set(self.operators)
        if unknown:
            raise ValueError(f"capacities for unknown operators: {sorted(unknown)}")

    def locate(self, node: str) -> str:
        """Operators are located at their switch."""
        op = self.operators.get(node)
        return node if op is None else op.switch

    def operators_of_switch(self, switch: str) -> list[str]:
        return [o.name for o in self.operators.values() if o.switch == switch]

    def tier(self, node: str) -> int:
        """Tier ID of a switch or operator (hosts: the tier of their ToR)."""
        if node in self.operators:
            return self.operators[node].tier
        return super().tier(node)

    def pod(self, node: str) -> int | None:
        if node in self.operators:
            return self.operators[node].pod
        return super().pod(node)
