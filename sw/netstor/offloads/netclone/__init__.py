"""NetClone end to end (Kim, SIGCOMM 2023) on the netstor test bed.

The data plane (``netstor.offloads.netclone.program``) clones a request when both candidate servers
of its group were idle at their last reply and drops the slower reply. This package holds the
host side around it:

* :mod:`netstor.offloads.netclone.header` -- the 16-byte NetClone header (light: the agents import it).
* :mod:`netstor.offloads.netclone.config` -- the data-plane configuration of a rack: ``nc.groups``
  (ordered server pairs), ``nc.servers``, the l3 routes including the service address, and
  the switch start-up with it.
* :mod:`netstor.offloads.netclone.compare` -- NetClone against no cloning and client-side cloning at
  equal offered load (``python -m netstor.offloads.netclone.compare --out build/bench/netclone.json``).

The agents speak it: ``netstor-server --netclone-port`` (default 7431) answers NetClone
requests and drops a clone copy when busy; ``netstor-load --scheme netclone|clone|single``.
"""
