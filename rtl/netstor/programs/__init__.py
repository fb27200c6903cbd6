"""Built-in programs. ``default_pipeline()`` is what one bitstream carries."""
from netstor.lang import Pipeline

from .l3 import make_l3
from .primitives import make_primitives, PRIM_UDP_PORT
from netstor.offloads.netclone.program import make_netclone, NETCLONE_UDP_PORT
from netstor.offloads.netrs.program import make_netrs, NETRS_UDP_PORT


def default_pipeline(n_ports=2):
    """The programs of the default bitstream, in pipeline order."""
    nc, rs = make_netclone(n_ports), make_netrs(n_ports)
    return Pipeline([make_l3(n_ports, also=[nc, rs]), make_primitives(n_ports), nc, rs],
                    n_ports=n_ports)
