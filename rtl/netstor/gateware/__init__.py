"""netstor gateware: Amaranth components of the data plane."""
