"""Storage agents: the UDP storage server in front of LMDB, the client library and the load
generator (see :mod:`netstor.proto` for the wire format).

* :mod:`netstor.agent.server` -- ``netstor-server`` and the in-process :class:`Server`.
* :mod:`netstor.agent.client` -- synchronous :class:`Client` and the pipelined :class:`Engine`.
* :mod:`netstor.agent.load` -- ``netstor-load`` and :func:`run_load`.
* :mod:`netstor.agent.servicetime` -- switchable service-time models.
* :mod:`netstor.agent.zipf` -- exact Zipf key sampler.
"""
