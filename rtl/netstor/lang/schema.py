"""The program part of the host schema (P4Info-like): tables, actions, banks, programs, PHV.

Merged by the control block into ``schema.json`` next to the register/memory map, so the host
addresses everything by name and packs entries without hand-copied offsets.
"""

from __future__ import annotations

from .program import Table, RegisterOp, Hash, Compute

__all__ = ["program_schema"]


def _expr_name(e):
    return getattr(e, "name", repr(e))


def program_schema(pipeline):
    tables = {}
    for t in pipeline.tables:
        tables[t.qualname] = {
            "kind": t.kind,
            "egress": t in pipeline.egress_elements,
            "key": [{"expr": _expr_name(k), "width": k.width} for k in t.key],
            "key_width": t.key_width,
            "size": t.size,
            "ways": t.ways,
            "depth": t.depth,
            "action_bits": t.action_bits,
            "param_width": t.param_width,
            "actions": [{"name": a.name, "id": t.action_id(a.name),
                         "params": [{"name": p, "width": w} for p, w in a.params.items()]}
                        for a in t.actions],
            "default": t.default.name if t.default else None,
            "hash": "crc32(seed=way byte, key big-endian) mod depth" if t.kind == "exact" else None,
        }
    banks = {b.qualname: {"width": b.width, "depth": b.depth} for b in pipeline.banks}
    programs = []
    for p in pipeline.programs:
        programs.append({
            "name": p.name, "udp_port": p.udp_port, "hdr_type": p.hdr_type,
            "header": [{"name": n, "width": w} for n, w in p.header_fields],
            "elements": [{"name": e.qualname, "type": type(e).__name__} for e in p.elements],
            "egress_elements": [{"name": e.qualname, "type": type(e).__name__}
                                for e in p.egress_elements],
        })
    phv = [{"name": f.name, "width": f.width, "writable": f.writable}
           for f in pipeline.phv.fields.values()]
    P = pipeline.n_ports
    ports = {
        "inputs": [f"wire_rx{p}" for p in range(P)] + [f"host_tx{p}" for p in range(P)]
                  + ["recirc"],
        "outputs": [f"wire_tx{p}" for p in range(P)] + [f"host_rx{p}" for p in range(P)],
    }
    return {"tables": tables, "banks": banks, "programs": programs, "phv": phv,
            "ports": ports, "mcast_groups": pipeline.mcast_groups,
            "max_recirc": pipeline.max_recirc}
