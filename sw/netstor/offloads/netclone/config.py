"""The data-plane configuration that runs NetClone on a test-bed rack.

* Server ids: server host ``k`` (``rack.servers[k]``) is NetClone server ``k + 1`` (what it
  writes into its replies: ``netstor-server --server-id k+1``; the data plane keys its load
  state and ``nc.servers`` on it; ids must stay below 64).
* Groups: by default every ordered pair of distinct servers, group id = position in that list
  (``(s0, s1), (s0, s2), ..., (s1, s0), ...``). A client draws a group uniformly, so with every
  ordered pair each server is first candidate equally often; the data plane clones to both
  when both were idle at their last reply, else picks one (``policy``: random by default, the
  paper's baseline; ``POLICY_LEAST_LOADED`` for the least loaded).
* ``nc.servers``: server id -> (ip, mac, switch port MAC, wire port) of that host.
* ``programs.nc``: replies (which update the load state and the response filter) are trusted
  only from the wire ports the servers sit behind; requests from any port.
* ``l3.routes``: a /32 per host (:func:`netstor.testbed.rack.route_config`) plus one for the
  service address ``vip`` towards the servers' port (NetClone rewrites the destination of every
  request it handles; the route is what a request of an unknown op would take).

:func:`start_switch` starts the rack's model switch with such a configuration.
"""
from __future__ import annotations

from dataclasses import dataclass

from netstor.offloads.netclone.header import (NETCLONE_UDP_PORT, POLICY_LEAST_LOADED,
                                              POLICY_RANDOM, SERVERS)

__all__ = ["VIP", "NcSetup", "ordered_pairs", "netclone_config"]

VIP = "10.77.9.1"           # the service address clients send NetClone requests to


def ordered_pairs(n):
    """Every ordered pair of distinct server indexes ``0..n-1``."""
    return [(i, j) for i in range(n) for j in range(n) if i != j]


@dataclass
class NcSetup:
    config: dict                            # netstor config format (tables)
    groups: list                            # group ids
    pairs: list                             # pairs[g] = (server index, server index)
    server_ids: list                        # server_ids[k] of rack.servers[k]
    vip: str = VIP
    port: int = NETCLONE_UDP_PORT
    policy: int = POLICY_RANDOM

    @property
    def groups_arg(self):
        """The ``netstor-load --groups`` argument."""
        return ",".join(str(g) for g in self.groups)

    @property
    def pairs_arg(self):
        """The ``netstor-load --pairs`` argument (same pairs as the groups, for the
        client-side schemes)."""
        return ",".join(f"{a}:{b}" for a, b in self.pairs)


def netclone_config(hosts, servers, *, vip=VIP, policy=POLICY_RANDOM, pairs=None):
    """The NetClone setup for ``hosts`` (every host of the rack, for the routes) whose
    storage servers are ``servers`` (:class:`netstor.testbed.rack.Host`, in server-id order).
    ``pairs``: the groups as pairs of indexes into ``servers`` (default: every ordered pair)."""
    from netstor.testbed import netns
    from netstor.testbed.rack import port_mac, route_config
    servers = list(servers)
    if not 2 <= len(servers) < SERVERS:
        raise ValueError(f"NetClone needs 2..{SERVERS - 1} servers, got {len(servers)}")
    if policy not in (POLICY_RANDOM, POLICY_LEAST_LOADED):
        raise ValueError(f"bad policy {policy!r}")
    pairs = ordered_pairs(len(servers)) if pairs is None else [tuple(p) for p in pairs]
    if len(pairs) > 64:
        raise ValueError(f"{len(pairs)} groups: nc.groups holds 64")
    ids = [k + 1 for k in range(len(servers))]
    seg = servers[0].segment
    cfg = route_config(list(hosts))
    cfg["tables"]["l3.routes"]["entries"].append(
        {"prefix": f"{vip}/32", "action": "route",
         "params": {"port": seg, "dmac": servers[0].mac_str,
                    "smac": netns.mac_str(port_mac(seg))}})
    # trust: replies (the servers' load reports) only from the servers' wire ports;
    # requests from any port
    cfg["programs"] = {"nc": {"trusted_ports": sorted({h.segment for h in servers})}}
    cfg["tables"]["nc.groups"] = {"entries": [
        {"key": g, "action": "candidates",
         "params": {"s1": ids[a], "s2": ids[b], "policy": policy}}
        for g, (a, b) in enumerate(pairs)]}
    cfg["tables"]["nc.servers"] = {"entries": [
        {"key": ids[k], "action": "server",
         "params": {"ip": h.ip, "mac": h.mac_str, "smac": netns.mac_str(port_mac(h.segment)),
                    "port": h.segment}} for k, h in enumerate(servers)]}
    return NcSetup(cfg, list(range(len(pairs))), pairs, ids, vip, NETCLONE_UDP_PORT, policy)
