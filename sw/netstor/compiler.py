"""The configuration compiler: a configuration (:mod:`netstor.config` format) as the
control-plane operations it performs on a fresh data plane.

Both test-bed data planes start from these operations: the model switch applies them to its
golden model, the RTL switch replays them over AXI-Lite. They are recorded while
:meth:`netstor.api.Device.apply` configures a scratch golden model, so there is one loader and
one validator, the host API's.
"""
from __future__ import annotations

from netstor.api import Device
from netstor.model.dataplane import DataplaneModel
from netstor.programs import default_pipeline

__all__ = ["config_ops", "config_writes"]


def config_ops(cfg, schema=None):
    """The control-plane operations that the configuration ``cfg`` (dict or YAML/TOML/JSON path,
    :mod:`netstor.config` format) performs on a fresh data plane: ``(writes, regs)`` with
    ``writes = [(memory, address, word)]`` and ``regs = [(register, value)]``, in order.

    They are recorded while :meth:`netstor.api.Device.apply` configures a scratch golden model,
    so the model switch and the RTL switch (which replays them over AXI-Lite) get exactly the
    same writes, validated by the one config loader."""
    # the scratch model keeps multicast as the schema's core does (copy lists: tm.groups)
    groups = ("list" if schema and any(m["name"] == "tm.groups" for m in schema["memories"])
              else "bitmap")
    dev = Device.open("model", schema=schema,
                      model=DataplaneModel(default_pipeline(), groups=groups))
    writes, regs = [], []
    client = dev.client
    mem_write, reg_write = client.mem_write, client.reg_write

    def rec_mem(name, addr, word):
        writes.append((name, addr, word))
        mem_write(name, addr, word)

    def rec_reg(name, value):
        regs.append((name, value))
        reg_write(name, value)
    client.mem_write, client.reg_write = rec_mem, rec_reg
    dev.apply(cfg)
    return writes, regs


def config_writes(pipeline, cfg):
    """The memory writes of :func:`config_ops` (``pipeline`` must be the default one, which
    the schema describes; kept for callers that only program tables)."""
    return config_ops(cfg)[0]
