"""A virtual-time simulator of a storage cluster whose switches run our data plane.

* :mod:`.engine` -- the event loop (integer-nanosecond clock, deterministic tie-breaking).
* :mod:`.rng` -- named random streams per seed (numpy generators and counter streams), for
  common random numbers across the schemes of one figure.
* :mod:`.service` -- service-time distributions (the test bed's specs + NetClone's slowdown).
* :mod:`.frames` -- real Ethernet/IPv4/UDP frames.
* :mod:`.net` -- links (latency, serialisation) and nodes; :mod:`.switch` -- a switch running a
  model of the data plane with the device's latency, configured by configuration files;
  :mod:`.host` -- hosts, storage servers (W workers, FIFO, the offloads' server codecs),
  open-loop clients.
* :mod:`.scheme` -- what clients do per request (``direct`` + the offloads' ``sim_schemes``).
* :mod:`.rack` -- one rack (the test bed's addressing and routes) and a run's result;
  :mod:`.topology` -- k-ary fat trees.
* :mod:`.erlang` -- M/M/c formulas; :mod:`.validate` -- the simulator against them.

See ``docs/simulator.md``.
"""
