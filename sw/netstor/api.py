"""The host API: tables, register banks, registers, counters and multicast groups by name.

One :class:`Device` over any data plane::

    from netstor.api import Device
    dev = Device.open("model")                 # or "pcie:0000:81:00.0", "/dev/mqnic0",
                                               # "unix:/run/netstor/switch.sock", "sim"
    routes = dev.table("l3.routes")
    routes.add("10.0.1.0/24", "route", port=1, dmac="02:00:00:00:01:01", smac="02:00:00:00:ff:01")
    routes.dump()                              # read back from the device
    with dev.batch():                          # validated first, written together
        dev.table("prim.ops").add([1], "forward", port=0)
        dev.bank("prim.cells").write(3, 7)

Everything is looked up in the schema the gateware build exports (``schema.json``); nothing
here knows an offset. Values may be ints or text: ``"0x1f"``, ``"10.0.0.1"`` (32-bit fields),
``"02:00:00:00:00:01"`` (48-bit fields). Errors are precise: unknown names list the known
ones, values that do not fit say their width, a full table raises :class:`TableFullError`.

A device's tables are read back once, on first use, so a new process (the CLI, a restarted
controller) continues from what the device holds.
"""

from __future__ import annotations

import contextlib
import copy
import ipaddress
import json
import os
from pathlib import Path

from netstor.driver.regs import CsrClient
from netstor.driver.schema_view import SchemaPipeline
from netstor.driver.tables import TableWriter, TableFullError
from netstor.driver.transports import open_device
from netstor.model.replication import decode_group
from netstor.paths import NoCheckout, build_dir

__all__ = ["Device", "Table", "Bank", "TableFullError", "parse_uint", "load_schema",
           "format_value"]



def _default_schema():
    """The checkout's ``build/rtl/schema.json`` (None when running from a wheel)."""
    try:
        return build_dir("rtl") / "schema.json"
    except NoCheckout:
        return None


def load_schema(schema=None):
    """A schema dict from ``schema`` (a dict, a path, or None: ``$NETSTOR_SCHEMA``, else the
    build's ``build/rtl/schema.json``, else elaborated from the default pipeline)."""
    if isinstance(schema, dict):
        return schema
    if schema is None:
        schema = os.environ.get("NETSTOR_SCHEMA")
        default = _default_schema()
        if schema is None and default is not None and default.exists():
            schema = default
    if schema is None:
        from netstor.build import build_core
        return build_core().schema
    path = Path(schema)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"schema file {path} not found (run `make rtl` to generate "
                                "build/rtl/schema.json)") from None


def parse_uint(value, width, what="value"):
    """``value`` (int or text) as an unsigned ``width``-bit integer, or a ValueError naming
    ``what``. Text: decimal, ``0x``/``0b``/``0o``, dotted IPv4 (only for a 32-bit field),
    colon-separated MAC (only for a 48-bit field): an address of the other kind is an error,
    not a number that happens to fit."""
    v = value
    if isinstance(v, str):
        s = v.strip()
        try:
            if s.count(".") == 3:
                if width != 32:
                    raise ValueError(f"{what}: {value!r} is an IPv4 address, but the field is "
                                     f"{width} bits" + (" (a MAC address)" if width == 48
                                                        else ""))
                v = int(ipaddress.IPv4Address(s))
            elif s.count(":") == 5 and all(len(p) in (1, 2) for p in s.split(":")):
                if width != 48:
                    raise ValueError(f"{what}: {value!r} is a MAC address, but the field is "
                                     f"{width} bits")
                v = int(s.replace(":", ""), 16)
            else:
                v = int(s.replace("_", ""), 0)
        except ValueError as e:
            if str(e).startswith(f"{what}: "):
                raise
            raise ValueError(f"{what}: {value!r} is not a number, IPv4 address or MAC "
                             "address") from None
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{what}: {value!r} is not an integer")
    if v < 0:
        raise ValueError(f"{what}: {value!r} is negative")
    if v >> width:
        raise ValueError(f"{what}: {value!r} does not fit in {width} bits")
    return v


def format_value(v, width):
    """Text for a field value: MAC for 48 bits, dotted quad for 32, hex for wide, else int."""
    if width == 48:
        return ":".join(f"{(v >> s) & 0xFF:02x}" for s in range(40, -8, -8))
    if width == 32 and v > 0xFFFF:
        return str(ipaddress.IPv4Address(v))
    return hex(v) if width > 16 else str(v)


def _parse_prefix(prefix, width, what):
    if isinstance(prefix, str):
        if "/" not in prefix:
            raise ValueError(f"{what}: prefix {prefix!r} needs a length (e.g. 10.0.0.0/8)")
        addr, plen = prefix.rsplit("/", 1)
        try:
            plen = int(plen)
        except ValueError:
            raise ValueError(f"{what}: prefix length {plen!r} is not an integer") from None
    else:
        try:
            addr, plen = prefix
        except (TypeError, ValueError):
            raise TypeError(f"{what}: prefix must be 'addr/len' or (addr, len), got "
                            f"{prefix!r}") from None
    return parse_uint(addr, width, f"{what} prefix"), plen


class Table:
    """One match-action table of a :class:`Device`."""

    def __init__(self, dev, name):
        self.dev, self.name = dev, name
        self.desc = dev.pipeline_view.tables_by_name[name]
        self.kind = self.desc.kind

    def __repr__(self):
        return f"<Table {self.name} {self.kind} {self.desc.size} entries>"

    # ---- argument parsing ----------------------------------------------------------------------
    def _key(self, key, what="key"):
        parts = key if isinstance(key, (list, tuple)) else [key]
        if len(parts) != len(self.desc.key):
            raise ValueError(f"table {self.name}: {what} has {len(parts)} part(s), the key has "
                             f"{len(self.desc.key)} ({', '.join(k.expr for k in self.desc.key)})")
        return [parse_uint(v, k.width, f"table {self.name}: {what} part {k.expr}")
                for v, k in zip(parts, self.desc.key)]

    def _params(self, action, params):
        if action is None:
            return None
        try:
            a = self.desc.actions[self.desc.action_id(action) - 1]
        except KeyError as e:
            raise KeyError(e.args[0]) from None
        out = {}
        for p, v in (params or {}).items():
            w = a.params.get(p)
            out[p] = v if w is None else parse_uint(
                v, w, f"table {self.name}: action {action} parameter {p}")
        return out

    def _locate(self, match):
        """The writer's arguments identifying an entry: exact key list, ternary priority,
        LPM (prefix, len)."""
        if self.kind == "exact":
            return (self._key(match),)
        if self.kind == "ternary":
            if isinstance(match, bool) or not isinstance(match, int):
                raise TypeError(f"table {self.name}: ternary entries are addressed by "
                                f"priority (an int), got {match!r}")
            return (match,)
        return _parse_prefix(match, self.desc.key_width, f"table {self.name}")

    def _exists(self, loc):
        w = self.dev.writer
        if self.kind == "exact":
            return w._pack(self.desc, loc[0], "key") in w._exact[self.name]
        if self.kind == "ternary":
            return loc[0] in w._ternary[self.name]
        return tuple(loc) in w.lpm_routes(self.name)

    # ---- operations ----------------------------------------------------------------------------
    def add(self, match, action, params=None, *, mask=None, priority=None, **kw):
        """Add an entry (an existing one with the same match is replaced).

        exact: ``match`` is the key (list of parts, or one value); ternary: ``match`` is the
        value, ``mask=`` its mask and ``priority=`` its address (0 wins); LPM: ``match`` is
        ``"a.b.c.d/len"`` or ``(addr, len)``. Parameters as a dict or as keywords."""
        params = self._params(action, {**(params or {}), **kw})
        self.dev._sync(self.name)
        w = self.dev.writer
        if self.kind == "exact":
            writes = w.exact_add(self.name, self._key(match), action, params)
        elif self.kind == "ternary":
            if priority is None or mask is None:
                raise ValueError(f"table {self.name}: a ternary entry needs mask= and priority=")
            writes = w.ternary_add(self.name, self._key(match, "value"),
                                   self._key(mask, "mask"), action, params, priority)
        else:
            if mask is not None or priority is not None:
                raise ValueError(f"table {self.name}: an LPM entry has a prefix length, not a "
                                 "mask or priority")
            prefix, plen = self._locate(match)
            writes = w.lpm_add(self.name, prefix, plen, action, params)
        self.dev._write(writes)

    def modify(self, match, action, params=None, **kw):
        """Change the action of an existing entry (KeyError if there is none)."""
        self.dev._sync(self.name)
        loc = self._locate(match)
        if not self._exists(loc):
            raise KeyError(f"table {self.name}: no entry {match!r} to modify")
        if self.kind == "ternary":
            v, m = self.dev.writer._ternary[self.name][match]
            unpack = self.dev.writer._unpack
            return self.add(unpack(self.desc, v), action, params, mask=unpack(self.desc, m),
                            priority=match, **kw)
        return self.add(match, action, params, **kw)

    def delete(self, match):
        """Remove an entry: exact key, ternary priority or LPM prefix."""
        self.dev._sync(self.name)
        loc = self._locate(match)
        w = self.dev.writer
        if self.kind == "exact":
            writes = w.exact_delete(self.name, *loc)
        elif self.kind == "ternary":
            writes = w.ternary_delete(self.name, *loc)
        else:
            writes = w.lpm_delete(self.name, *loc)
        self.dev._write(writes)

    def _addresses(self, match):
        self.dev._sync(self.name)
        loc = self._locate(match)
        if not self._exists(loc):
            return []
        w = self.dev.writer
        if self.kind == "exact":
            return w.exact_slots(self.name, loc[0])
        if self.kind == "ternary":
            return [loc[0]]
        return w.lpm_addresses(self.name, *loc)

    def get(self, match):
        """The entry as read back from the device (a dict), or None."""
        for addr in self._addresses(match):
            e = self._decode(addr, self.dev.client.mem_read(self.name, addr))
            if e is not None and (self.kind != "exact" or e["key"] == self._key(match)):
                return e
        return None

    def _decode(self, addr, word):
        e = self.dev.writer.decode_entry(self.name, word)
        if not e.pop("valid"):
            return None
        e["address"] = addr
        return e

    def dump(self):
        """Every valid entry, read back from the device, in address order."""
        out = []
        for addr in range(self.desc.size):
            e = self._decode(addr, self.dev.client.mem_read(self.name, addr))
            if e is not None:
                out.append(e)
        return out

    def clear(self):
        """Remove every entry (the default action stays)."""
        words = [self.dev.client.mem_read(self.name, a) for a in range(self.desc.size)]
        self.dev._write([(self.name, a, 0) for a, w in enumerate(words) if w & 1])
        self.dev.writer.load_shadow(self.name, [0] * self.desc.size)
        self.dev._synced.add(self.name)

    def set_default(self, action, params=None, **kw):
        """The action on a miss (``None``: no action)."""
        params = self._params(action, {**(params or {}), **kw})
        self.dev._write(self.dev.writer.set_default(self.name, action, params))

    def get_default(self):
        e = self.dev.writer.decode_entry(self.name + ".default",
                                         self.dev.client.mem_read(self.name + ".default", 0))
        return {"action": e["action"], "params": e["params"]}

    def reset_default(self):
        """The default action the program declares (what reset loads)."""
        self.set_default(self.desc.default_name)


class Bank:
    """A register bank (a stateful array the data plane reads and updates per packet)."""

    def __init__(self, dev, name):
        self.dev, self.name = dev, name
        self.desc = dev.pipeline_view.banks_by_name[name]

    def __repr__(self):
        return f"<Bank {self.name} {self.desc.depth} x {self.desc.width}>"

    def _index(self, i):
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.desc.depth:
            raise ValueError(f"register bank {self.name}: index {i!r} out of range "
                             f"0..{self.desc.depth - 1}")
        return i

    def read(self, index):
        return self.dev.client.mem_read(self.name, self._index(index))

    def read_range(self, start=0, count=None):
        count = self.desc.depth - start if count is None else count
        self._index(start)
        if count < 0 or start + count > self.desc.depth:
            raise ValueError(f"register bank {self.name}: range {start}+{count} beyond "
                             f"{self.desc.depth} cells")
        return [self.dev.client.mem_read(self.name, i) for i in range(start, start + count)]

    def write(self, index, value):
        v = parse_uint(value, self.desc.width, f"register bank {self.name}: value")
        self.dev._write(self.dev.writer.bank_write(self.name, self._index(index), v))

    def clear(self):
        self.dev._write([(self.name, i, 0) for i in range(self.desc.depth)])


class _View:
    def __init__(self, schema):
        self.pipeline = SchemaPipeline(schema)
        self.tables_by_name = {t.qualname: t for t in self.pipeline.tables}
        self.banks_by_name = {b.qualname: b for b in self.pipeline.banks}


class Device:
    """A data plane: ``client`` is a checked :class:`netstor.driver.regs.CsrClient`."""

    def __init__(self, client: CsrClient, schema=None, target="?", *, lpm_lengths=None):
        """``lpm_lengths``: ``{table: prefix lengths}`` the banks of a hashed LPM table may
        hold; other lengths are expanded (:class:`netstor.driver.tables.TableWriter`)."""
        self.client = client
        self.schema = client.schema if schema is None else schema
        self.target = target
        self.pipeline_view = _View(self.schema)
        self.writer = TableWriter(self.pipeline_view.pipeline, lpm_lengths=lpm_lengths)
        self._synced = set()
        self._pending = None            # list of writes while a batch is open

    @classmethod
    def open(cls, target="model", *, schema=None, model=None, transport=None):
        """Open ``target`` (see :func:`netstor.driver.transports.open_device`). The device's
        identity is checked against the schema."""
        schema = load_schema(schema)
        return cls(open_device(target, schema, model=model, transport=transport), schema,
                   target)

    def close(self):
        t = getattr(self.client, "transport", None)
        if hasattr(t, "close"):
            t.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- names ---------------------------------------------------------------------------------
    @property
    def table_names(self):
        return sorted(self.pipeline_view.tables_by_name)

    @property
    def bank_names(self):
        return sorted(self.pipeline_view.banks_by_name)

    def table(self, name) -> Table:
        if name not in self.pipeline_view.tables_by_name:
            raise KeyError(f"no table {name!r}; tables are {self.table_names}")
        return Table(self, name)

    def bank(self, name) -> Bank:
        if name not in self.pipeline_view.banks_by_name:
            raise KeyError(f"no register bank {name!r}; banks are {self.bank_names}")
        return Bank(self, name)

    def info(self):
        c = self.client
        return {"target": self.target, "app_id": f"{self.schema['app_id']:#010x}",
                "version": ".".join(map(str, self.schema["version"]))
                if isinstance(self.schema["version"], list) else self.schema["version"],
                "schema_hash": self.schema["hash"], "ports": self.pipeline_view.pipeline.n_ports,
                "tables": len(self.table_names), "banks": len(self.bank_names),
                "registers": len(c.register_names), "counters": len(c.counter_names),
                "latency_cycles": self.schema.get("latency_cycles")}

    # ---- registers and counters ----------------------------------------------------------------
    def registers(self):
        return {n: self.client.reg_read(n) for n in self.client.register_names}

    def reg_read(self, name):
        return self.client.reg_read(name)

    def reg_write(self, name, value):
        r = self.client._lookup(self.client._regs, "register", name)
        self._write([(None, name, parse_uint(value, r["width"], f"register {name}"))])

    def counters(self, prefix=""):
        return {n: self.client.counter_read(n) for n in self.client.counter_names
                if n.startswith(prefix)}

    def clear_counters(self, prefix=""):
        names = [n for n in self.client.counter_names if n.startswith(prefix)]
        if not names:
            raise KeyError(f"no counter starts with {prefix!r}")
        for n in names:
            self.client.counter_clear(n)

    # ---- trust (which packets may update a program's state) -------------------------------------
    def trust_programs(self):
        """Names of the programs that have a trust guard (a ``<prog>.trust`` table,
        :mod:`netstor.elements.trust`)."""
        return sorted(n[:-len(".trust")] for n in self.table_names if n.endswith(".trust")
                      and n.count(".") == 1)

    def parse_port(self, port, what="port"):
        """An ingress port: ``0..P-1`` (wire port, an int or its text) or ``"host0"..
        "host<P-1>"`` (the host's TX queue of that port). Returns the input number."""
        P = self.pipeline_view.pipeline.n_ports
        if isinstance(port, str):
            t = port.strip().lower()
            if t.startswith("host") and t[4:].isdigit() and int(t[4:]) < P:
                return P + int(t[4:])
            if t.isdigit():
                port = int(t)
        if isinstance(port, int) and not isinstance(port, bool) and 0 <= port < P:
            return port
        raise ValueError(f"{what}: {port!r} is not a port (wire ports 0..{P - 1}, "
                         f"host0..host{P - 1})")

    def trust_entries(self, ports, sources=None, request_ports="any"):
        """The ``(value, mask)`` pairs of a trust table that trusts reports from ``ports``
        (a list of :meth:`parse_port` values, or ``"any"``) and, when ``sources`` (IPv4
        prefixes) is given, only from those sources, and requests from ``request_ports``
        (``"any"``, or a list). Key parts: [report, ingress port, ipv4.src]."""
        def port_list(v, what):
            if v == "any":
                return [None]
            if not isinstance(v, (list, tuple)):
                raise ValueError(f"{what}: expected a list of ports or 'any', got {v!r}")
            out = [self.parse_port(x, f"{what}[{i}]") for i, x in enumerate(v)]
            if len(set(out)) != len(out):
                raise ValueError(f"{what}: a port is listed twice")
            return out
        nets = [(0, 0)]
        if sources is not None:
            if not isinstance(sources, (list, tuple)) or not sources:
                raise ValueError("trusted_sources: expected a non-empty list of IPv4 "
                                 "prefixes (leave it out to trust every source)")
            nets = []
            for i, src in enumerate(sources):
                try:
                    n = ipaddress.IPv4Network(str(src), strict=True)
                except ValueError as e:
                    raise ValueError(f"trusted_sources[{i}]: {src!r}: {e}") from None
                nets.append((int(n.network_address), int(n.netmask)))
        out = []
        for p in port_list(ports, "trusted_ports"):
            for addr, mask in nets:
                out.append(([1, p or 0, addr], [1, 0 if p is None else 0xF, mask]))
        for p in port_list(request_ports, "request_ports"):
            out.append(([0, p or 0, 0], [1, 0 if p is None else 0xF, 0]))
        return out

    def set_trust(self, program, ports, sources=None, request_ports="any"):
        """Program ``program``'s trust table (:meth:`trust_entries`): its reports (replies,
        responses, ...) may update its state only from ``ports`` (and ``sources``), its
        requests only from ``request_ports``; other packets are dropped and counted in
        ``<program>.trust.miss``. ``ports=[]`` trusts no report. Replaces what was there."""
        name = f"{program}.trust"
        if name not in self.pipeline_view.tables_by_name:
            raise KeyError(f"program {program!r} has no trust guard; programs with one: "
                           f"{self.trust_programs()}")
        table = self.table(name)
        entries = self.trust_entries(ports, sources, request_ports)
        if len(entries) > table.desc.size:
            raise ValueError(f"{len(entries)} trust entries (trusted ports x sources + "
                             f"request ports) do not fit {name}'s {table.desc.size}")
        table.dev._sync(name)
        for prio, (value, mask) in enumerate(entries):
            table.add(value, "trusted", mask=mask, priority=prio)
        for prio in range(len(entries), table.desc.size):
            if table._exists((prio,)):
                table.delete(prio)
        return len(entries)

    # ---- multicast -----------------------------------------------------------------------------
    @property
    def mcast_mode(self):
        """How the device's traffic manager holds multicast groups: ``"list"`` (copy lists in
        ``tm.groups``, the replication engine: up to 16 ``(port, rid)`` copies in order, any
        number on one port) or ``"bitmap"`` (``tm.mcast``: at most one copy per port)."""
        names = {mem["name"] for mem in self.schema["memories"]}
        return "list" if "tm.groups" in names else "bitmap"

    def mcast_set(self, group, members):
        """Group ``group`` sends one copy to each ``(port, rid)`` of ``members``; ``[]``
        empties it. Copy lists (:attr:`mcast_mode` ``"list"``): the copies leave in this
        order, a port may be listed any number of times, at most 16 copies; bitmap: one
        member per port, copies in increasing port order."""
        members = [tuple(m) for m in members]
        if self.mcast_mode == "list":
            self._write(self.writer.mcast_list_set(group, members))
        else:
            self._write(self.writer.mcast_set(group, members))

    def mcast_get(self, group):
        """The group's ``[(port, rid)]``: a copy list in its order (every listed copy, a
        port that is not an output included: the data plane counts it ``tm.bad_port``), or
        a bitmap's members in port order."""
        n = self.schema["mcast_groups"]
        if isinstance(group, bool) or not isinstance(group, int) or not 1 <= group < n:
            raise ValueError(f"multicast group {group!r} out of range 1..{n - 1}")
        if self.mcast_mode == "list":
            return decode_group(self.client.mem_read("tm.groups", group))
        P2 = 2 * self.pipeline_view.pipeline.n_ports
        word = self.client.mem_read("tm.mcast", group)
        return [(p, (word >> (P2 + 16 * p)) & 0xFFFF) for p in range(P2) if word >> p & 1]

    def mcast_dump(self, groups=None):
        """``{group: [(port, rid)]}`` of every non-empty group among ``groups`` (default: all
        of them, one host read each: 4,095 on a core with 4K groups; pass the groups a caller
        configured when reading them all over a slow transport costs too much)."""
        n = self.schema["mcast_groups"]
        ids = range(1, n) if groups is None else sorted(set(groups))
        return {g: m for g in ids if (m := self.mcast_get(g))}

    # ---- writes and batches --------------------------------------------------------------------
    def _sync(self, table):
        if table not in self._synced:
            t = self.pipeline_view.tables_by_name[table]
            self.writer.load_shadow(table, [self.client.mem_read(table, a)
                                            for a in range(t.size)])
            self._synced.add(table)

    def set_lpm_lengths(self, table, lengths):
        """The prefix lengths the banks of hashed LPM ``table`` may hold from now on (None:
        any); see :meth:`netstor.driver.tables.TableWriter.set_lpm_lengths`. The table is read
        from the device first, so the lengths it holds must be among them."""
        if table not in self.pipeline_view.tables_by_name:
            raise KeyError(f"no table {table!r}; tables are {self.table_names}")
        self._sync(table)
        self.writer.set_lpm_lengths(table, lengths)

    def _write(self, writes):
        if self._pending is not None:
            self._pending.extend(writes)
        else:
            for mem, addr, word in writes:
                if mem is None:                    # a run-time register, by name
                    self.client.reg_write(addr, word)
                else:
                    self.client.mem_write(mem, addr, word)

    @contextlib.contextmanager
    def batch(self):
        """Collect the writes of the block and apply them when it ends; if the block raises
        (a bad key, a full table), nothing is written and the host's view is unchanged."""
        if self._pending is not None:
            yield self           # nested: part of the outer batch
            return
        saved = copy.deepcopy((self.writer._exact, self.writer._ternary, self.writer._lpm,
                               self._synced, self.writer._lpm_fixed))
        self._pending = []
        try:
            yield self
        except BaseException:
            (self.writer._exact, self.writer._ternary, self.writer._lpm,
             self._synced, self.writer._lpm_fixed) = saved
            self._pending = None
            raise
        writes, self._pending = self._pending, None
        self._write(writes)

    def apply(self, config, *, dry_run=False):
        """Apply a configuration (a dict, or a YAML/TOML path); see :mod:`netstor.config`."""
        from netstor.config import apply_config
        return apply_config(self, config, dry_run=dry_run)
