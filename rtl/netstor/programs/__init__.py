"""Built-in programs. ``default_pipeline()`` is what one bitstream carries: L3 routing, the
primitives test program, then every registered offload's program (:mod:`netstor.offloads`),
in registry order."""
from netstor.lang import Pipeline
from netstor.offloads import offloads

from .l3 import make_l3
from .primitives import make_primitives, PRIM_UDP_PORT


def default_pipeline(n_ports=2):
    """The programs of the default bitstream, in pipeline order."""
    offs = offloads()
    progs = [o.make_program(n_ports) for o in offs]
    routed = [p for o, p in zip(offs, progs) if o.routed_by_l3]
    return Pipeline([make_l3(n_ports, also=routed), make_primitives(n_ports), *progs],
                    n_ports=n_ports, guarded=True)
