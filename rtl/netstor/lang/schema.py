"""The program part of the host schema (P4Info-like): tables, actions, banks, programs, PHV.

Merged by the control block into ``schema.json`` next to the register/memory map, so the host
addresses everything by name and packs entries without hand-copied offsets.
"""

from __future__ import annotations

__all__ = ["program_schema"]


def program_schema(pipeline):
    tables = {t.qualname: t.schema(pipeline) for t in pipeline.tables}
    banks = {b.qualname: {"width": b.width, "depth": b.depth} for b in pipeline.banks}
    programs = []
    for p in pipeline.programs:
        programs.append({
            "name": p.name, "udp_port": p.udp_port, "hdr_type": p.hdr_type,
            "header": [{"name": n, "width": w} for n, w in p.header_fields],
            "elements": [{"name": e.qualname, "type": e.kind_name} for e in p.elements],
            "egress_elements": [{"name": e.qualname, "type": e.kind_name}
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
