"""NetRS controller: RSNode placement for in-network replica selection (Su et al., "NetRS:
in-network replica selection", IEEE TCC 2020).

* :mod:`netstor.offloads.netrs.topology` -- k-ary fat tree, NetRS operators (switch + accelerator),
  tiers, distances and next hops.
* :mod:`netstor.offloads.netrs.placement` -- the placement ILP (HiGHS), Algorithm 1 (adaptive
  heuristic with multi-confirm), Algorithm 2 (failures), degraded replica selection (DRS).
* :mod:`netstor.offloads.netrs.rules` -- a plan as per-device table entries (plain data).
* :mod:`netstor.offloads.netrs.bench` -- ``python -m netstor.offloads.netrs.bench``: ILP vs heuristic.
"""
