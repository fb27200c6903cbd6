"""Built-in programs. ``default_pipeline()`` is what one bitstream carries: L3 routing, the
primitives test program, then every registered offload's program (:mod:`netstor.offloads`),
in registry order. An offload registered with ``bitstream=False`` (a build option: every
built-in offload is in the bitstream) joins only when named in ``extra``:
``default_pipeline(extra=(name,))``, ``make rtl RTL_EXTRA=name``."""
from netstor.lang import Pipeline
from netstor.offloads import offloads

from .l3 import make_l3
from .primitives import make_primitives, PRIM_UDP_PORT


def pipeline_offloads(extra=()):
    """The offloads of ``default_pipeline(extra=extra)``, in registry order: those of the
    bitstream and those named in ``extra`` (``"all"``: every registered one)."""
    offs = offloads()
    if extra == "all":
        return list(offs)
    extra = (extra,) if isinstance(extra, str) else tuple(extra)
    unknown = set(extra) - {o.name for o in offs}
    if unknown:
        raise KeyError(f"no offload(s) {sorted(unknown)}; registered: {[o.name for o in offs]}")
    return [o for o in offs if o.bitstream or o.name in extra]


def default_pipeline(n_ports=2, extra=(), exclude=()):
    """The programs of the default bitstream, in pipeline order; ``extra``: names of
    offloads outside the bitstream (``bitstream=False``) to add in their registry position;
    ``exclude``: names of offloads to leave out (a reference switch that models one offload
    itself routes the rest through the others)."""
    offs = [o for o in pipeline_offloads(extra) if o.name not in exclude]
    progs = [o.make_program(n_ports) for o in offs]
    routed = [p for o, p in zip(offs, progs) if o.routed_by_l3]
    return Pipeline([make_l3(n_ports, also=routed), make_primitives(n_ports), *progs],
                    n_ports=n_ports, guarded=True, mcast_groups=4096)


def payload_offloads(extra=()):
    """Names of the offloads of ``default_pipeline(extra=extra)`` whose program has a payload
    element (``rewrites_payload``, the GF engine): only the copy-lane core carries them, so
    the ``copies="ports"`` core is built without them (:func:`netstor.build.build_core`)."""
    out = []
    for o in pipeline_offloads(extra):
        p = o.make_program(2)
        if any(e.rewrites_payload for e in p.elements + p.egress_elements):
            out.append(o.name)
    return out
