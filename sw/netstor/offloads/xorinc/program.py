"""XORInc's data-plane program (``xi``): NetRepair and NetUpdate on the GF(2^8) payload
element. Protocol: ``docs/xorinc.md``; header: :mod:`.header`.

Packets on UDP port 7450 (register ``parser.udp_port.xi``), all routed by ``l3.routes`` like
any IPv4 packet unless this program decides otherwise:

* **PART** (a helper's chunk data, addressed to the requester): table ``xi.repair`` (exact on
  ``code``, ``chunk`` = the lost chunk, ``src`` = the helper's chunk) gives the decoding
  coefficient and ``need`` (= k); the engine (``xi.engine``, :class:`GFAccumulate`) adds
  ``coeff * data`` into slot ``(opid, off)``; the packet that completes its slots leaves as
  **REPAIRED** (its data the repaired chunk part, UDP destination port ``req_port``) towards
  the requester, the others are dropped (counted by the engine: absorbed / dup / bad /
  misaligned / split). A PART whose key is not in the table is dropped (``xi.repair.miss``).
* **UPD_NEW** (the client's new data, addressed to the data node) and **UPD_OLD** (the data
  node's old data, addressed to the requester): coefficient 1, ``need`` 2, engine ``src`` 0
  (new) / 1 (old): the completing packet carries the delta ``old XOR new``. An UPD_NEW that
  does not complete goes on to the data node **header-only** (``meta.truncate``): that is the
  data node's request for its old data. The completing packet becomes **DELTA** and goes
  through the copy-list group of table ``xi.groups`` (exact on ``code``, ``chunk``): one copy
  per node to update, ``rid`` = 1 + the chunk index that node holds (the data node's chunk,
  then the parity chunks ``k..n-1``). Egress, per copy: table ``xi.delta`` (exact on
  ``code``, ``chunk``, ``rid``) gives the node's addresses and the coefficient (1 for the
  data node, ``C[i][chunk]`` for parity ``k + i``); :class:`GFScale` multiplies the copy's
  data by it and ``src`` is set to the target chunk index. Every copy's IPv4 source becomes
  the requester's (``req_addr``): the completing packet may be the data node's UPD_OLD, and a
  copy back to the data node from its own address is a martian to Linux (dropped unless
  ``accept_local`` is set). A completing packet without a
  group is dropped (``xi.groups.miss``).
* Every other type (READ, READ_REPLY, REPAIR, REPAIRED, DELTA, ACK, TIMEOUT) is only routed.

Trust (:func:`netstor.elements.trust.guard`, table ``xi.trust``): the packets that write
engine state -- PART, UPD_OLD (the storage nodes' contributions) and UPD_NEW (the
requester's new data) -- are the program's *reports*: accepted only from the sources the
``xorinc:`` section configures (every node's address, and the ``requesters`` prefixes); the
engine runs only on trusted packets. Every other XORInc packet is a request (trusted from any
port once configured). An untrusted packet is dropped before the engine sees it and counted
in ``xi.trust.miss``; the unconfigured data plane trusts nothing.

The coefficients come from the controller (:mod:`.config`), never from the packet.
"""
from netstor.elements import Compute, GFAccumulate, GFScale, Table
from netstor.elements.trust import guard
from netstor.elements.gf import ST_ABSORBED, ST_DONE, ST_DUP
from netstor.lang import Action, F, Mux, Program, Set

from .header import (HEADER, MAX_DATA, T_DELTA, T_PART, T_REPAIRED, T_UPD_NEW, T_UPD_OLD,
                     XORINC_UDP_PORT)

__all__ = ["make_xorinc", "core_test_pipeline", "N_OPS", "CHUNK_BEATS", "REPAIR_SIZE",
           "GROUPS_SIZE", "DELTA_SIZE", "TRUST_SIZE", "SRC_NEW", "SRC_OLD"]

N_OPS = 64               #: engine operations (op ids 0..63)
CHUNK_BEATS = 64         #: beats per chunk (4 KiB chunks)
REPAIR_SIZE = 1024       #: (code, lost, src) -> coefficient entries
GROUPS_SIZE = 64         #: (code, chunk) -> copy-list group
DELTA_SIZE = 256         #: (code, chunk, rid) -> node and coefficient
#: xi.trust entries (source prefixes + the request entry): at most 16, the flip-flop TCAM
#: with the 2-cycle lookup (a larger one is the RAM TCAM, which lengthens stage 0)
TRUST_SIZE = 16
SRC_NEW, SRC_OLD = 0, 1  #: the engine's src of an update's two contributions


def make_xorinc(n_ports=2, *, n_ops=N_OPS, chunk_beats=CHUNK_BEATS, timeout=0):
    p = Program("xi", udp_port=XORINC_UDP_PORT)
    h = p.header(HEADER.fields)
    typ = h["type"]
    coeff, need, esrc = p.meta("coeff", 8), p.meta("need", 5), p.meta("esrc", 4)
    hit, status = p.meta("coeff_hit", 1), p.meta("status", 3)
    ghit, is_delta = p.meta("group_hit", 1), p.meta("delta", 1)
    ecoeff, ehit = p.meta("delta_coeff", 8), p.meta("delta_hit", 1)
    part = typ == T_PART
    upd = (typ == T_UPD_NEW) | (typ == T_UPD_OLD)
    # the contributions (what writes engine state) are reports: configured sources only
    trusted = guard(p, reports=part | upd, size=TRUST_SIZE)

    coeff_action = Action("coeff", {"coeff": 8, "need": 5}, lambda a: [
        Set(hit, 1), Set(coeff, a.coeff), Set(need, a.need)])
    p.add(Compute("update_args", [Set(hit, 1), Set(coeff, 1), Set(need, 2),
                                  Set(esrc, Mux(typ == T_UPD_NEW, SRC_NEW, SRC_OLD))],
                  when=upd))
    # the repair lookup waits for part_args (stage 0) on purpose: it lands in stage 1 beside
    # L3's 4-cycle route lookup instead of making stage 0 (2 cycles) 3 cycles long; the
    # engine (after it) is in stage 2 either way
    is_part = p.meta("part", 1)
    p.add(Compute("part_flag", [Set(is_part, 1)], when=part))
    p.add(Table("repair", kind="exact", key=[h["code"], h["chunk"], h["src"]],
                size=REPAIR_SIZE, ways=4, actions=[coeff_action], when=is_part == 1))
    p.add(Compute("part_args", [Set(esrc, h["src"][0:4])], when=part))
    p.add(Compute("no_coeff", [Set(F.meta.drop, 1)], when=part & ~hit))
    engine = (part | upd) & hit & trusted
    p.add(GFAccumulate("engine", op=h["opid"], off=h["off"], coeff=coeff, src=esrc, need=need,
                       length=h["len"], status=status, n_ops=n_ops, chunk_beats=chunk_beats,
                       max_beats=MAX_DATA // 64, timeout=timeout, when=engine))
    done = status == ST_DONE
    # NetRepair: the completing contribution is the repaired data, to the requester
    p.add(Compute("repaired", [Set(typ, T_REPAIRED), Set(F.udp.dport, h["req_port"])],
                  when=part & done))
    # NetUpdate: the new data goes on header-only (the data node's cue to send its old data)
    trigger = (typ == T_UPD_NEW) & ((status == ST_ABSORBED) | (status == ST_DUP))
    p.add(Compute("trigger", [Set(F.meta.truncate, 1)], when=trigger))
    group = Action("group", {"group": 12}, lambda a: [
        Set(ghit, 1), Set(F.meta.mcast_group, a.group)])
    p.add(Table("groups", kind="exact", key=[h["code"], h["chunk"]], size=GROUPS_SIZE, ways=4,
                actions=[group], when=upd & done))
    p.add(Compute("to_delta", [Set(typ, T_DELTA), Set(is_delta, 1)], when=upd & done & ghit))
    p.add(Compute("no_group", [Set(F.meta.drop, 1)], when=upd & done & ~ghit))
    # everything else the engine saw is absorbed (or refused): dropped, counted by the engine
    p.add(Compute("absorb", [Set(F.meta.drop, 1)], when=engine & ~done & ~trigger))

    # egress, per delta copy: the node's addresses, the parity's coefficient, the scale
    node = Action("node", {"coeff": 8, "ip": 32, "mac": 48, "smac": 48}, lambda a: [
        Set(ehit, 1), Set(ecoeff, a.coeff), Set(F.ipv4.dst, a.ip), Set(F.eth.dst, a.mac),
        Set(F.eth.src, a.smac), Set(F.ipv4.src, h["req_addr"]),
        Set(h["src"], F.meta.rid[0:8] - 1)])
    mine = p.selected & is_delta
    p.add_egress(Table("delta", kind="exact", key=[h["code"], h["chunk"], F.meta.rid[0:8]],
                       size=DELTA_SIZE, ways=4, actions=[node], when=mine))
    p.add_egress(GFScale("scale", coeff=ecoeff, length=h["len"], max_bytes=MAX_DATA,
                         when=mine & ehit))
    return p


def core_test_pipeline(n_ports=2, mcast_groups=64):
    """L3 routing and XORInc alone, 64 copy-list groups: a small pipeline for model-level
    tests (the notifier's); the RTL runs XORInc in ``default_pipeline()``."""
    from netstor.lang import Pipeline
    from netstor.programs.l3 import make_l3
    xi = make_xorinc(n_ports)
    return Pipeline([make_l3(n_ports, also=[xi]), xi], n_ports=n_ports, guarded=True,
                    mcast_groups=mcast_groups)
