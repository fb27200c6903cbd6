"""Declarative configuration files (YAML or TOML) and how they are applied.

A configuration says what the data plane should hold; ``netstor apply CONFIG``, the
controller and the test bed's switch make the device match it. Format (YAML shown; TOML has
the same structure)::

    registers:                         # run-time registers by name
      parser.udp_port.prim: 0x5EED
    tables:
      l3.routes:                       # LPM: prefix, action, params
        replace: true                  # entries not listed here are removed (default true)
        default: {action: to_host}
        entries:
          - {prefix: 10.77.1.1/32, action: route,
             params: {port: 1, dmac: "02:00:00:00:01:01", smac: "02:00:00:00:ff:01"}}
      prim.ops:                        # exact: key (a list of key parts, or one value)
        entries:
          - {key: 1, action: forward, params: {port: 1}}
      big.routes:                      # a hashed LPM (banks): the prefix lengths its banks
        lpm_lengths: [8, 16, 24, 32]   # may hold (others are expanded into the next one;
        entries: []                    # optional, default: any length while banks last)
      prim.acl:                        # ternary: value, mask, priority (0 wins)
        entries:
          - {priority: 0, value: [10.0.0.9, 0], mask: [255.255.255.255, 0], action: deny}
    banks:                             # register banks: index -> value
      prim.cells: {0: 5, 3: 7}
    mcast:                             # group -> [[port, rid], ...] (copy lists: in order)
      1: [[0, 1], [1, 2]]
    programs:                          # per program: who may update its register state
      nc:
        trusted_ports: [1]             # reports (replies...) from these ingress ports only
        trusted_sources: [10.77.1.0/24]    # optional: and only from these IPv4 prefixes
        request_ports: any             # optional (default any): where requests may come from

Values are ints or text (``0x..``, dotted IPv4, colon MAC). The whole file is validated (every
name, key width, parameter, prefix) before anything is written, then applied as one batch:
a bad file changes nothing. Errors name the place: ``tables.l3.routes.entries[2]: ...``.

``programs.<prog>``: the program's trust guard (:mod:`netstor.elements.trust`), written into
its ``<prog>.trust`` table. A program's *reports* (what a server or another switch tells the
data plane: NetClone replies, NetRS responses and monitor packets, every primitives packet)
may update its register state only when they arrive on a ``trusted_ports`` port (wire ports
``0..P-1``, ``host0..host<P-1>`` for the host's TX queues, or ``any``) from a
``trusted_sources`` prefix (default: any source); its requests only from ``request_ports``
(default ``any``). Everything else of the program is dropped and counted
(``<prog>.trust.miss``). A program not listed here trusts nothing: the unconfigured data
plane forwards other traffic but lets no packet write state. ``trusted_ports`` is required
(``[]``: no report is trusted).

Offloads add their own top-level sections, named after the offload (an offload's
``config_section`` hook, :mod:`netstor.offloads`); other code may add sections with
:func:`register_section`. A section nobody declared is an error, not silently ignored.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import yaml

from netstor.driver.tables import TableFullError
from netstor.offloads import offloads

__all__ = ["load_config", "apply_config", "register_section", "sections", "write_plan",
           "ConfigError", "ConfigTableFull"]

_SECTIONS = {}
_CORE = {"registers", "tables", "banks", "mcast", "device", "programs"}
_TRUST_KEYS = {"trusted_ports", "trusted_sources", "request_ports"}


class ConfigError(ValueError):
    """A configuration that cannot be applied; the message says where and why."""


class ConfigTableFull(ConfigError):
    """A configuration whose entries do not fit a table (the driver's ``TableFullError``,
    named where in the configuration): a caller may retry with other keys."""


def register_section(name, handler):
    """``handler(device, section_value, dry_run)`` applies top-level section ``name``; it runs
    inside the configuration's batch, after the core sections."""
    if name in _CORE:
        raise ValueError(f"section {name!r} is built in")
    _SECTIONS[name] = handler


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe YAML loader that refuses a mapping with the same key twice (PyYAML keeps the
    last one silently)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)
            seen = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:       # unhashable key: the base class reports it
                    continue
                if first is not key_node:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"duplicate key {key!r} (first given on line "
                        f"{first.start_mark.line + 1})",
                        key_node.start_mark)
        return super().construct_mapping(node, deep)


def _unique_pairs(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise ConfigError(f"duplicate key {k!r}")
        out[k] = v
    return out


def load_config(source):
    """A configuration dict from a dict, a ``.yaml``/``.yml``/``.toml``/``.json`` path.
    Anything else at the top level (a list, a number, a document that is not a mapping) is a
    :class:`ConfigError`; so is a key given twice in one mapping."""
    if isinstance(source, dict):
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise ConfigError(f"the top level of a configuration must be a mapping, got "
                          f"{type(source).__name__}")
    path = Path(source)
    if path.suffix not in (".toml", ".json", ".yaml", ".yml"):
        raise ConfigError(f"{path}: unknown configuration format {path.suffix!r} "
                          "(use .yaml, .yml, .toml or .json)")
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"configuration file {path} not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"configuration file {path}: {e.strerror or e}") from None
    try:
        if path.suffix == ".toml":
            cfg = tomllib.loads(text)
        elif path.suffix == ".json":
            cfg = json.loads(text, object_pairs_hook=_unique_pairs)
        else:
            cfg = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        at = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}{at}: {e.problem or e.context}") from None
    except (tomllib.TOMLDecodeError, yaml.YAMLError, json.JSONDecodeError, ConfigError,
            RecursionError) as e:
        raise ConfigError(f"{path}: {str(e).splitlines()[0] if str(e) else repr(e)}") from None
    if cfg is None:
        cfg = {}
    if not isinstance(cfg, dict):
        raise ConfigError(f"{path}: the top level must be a mapping, got {type(cfg).__name__}")
    return cfg


def _section(cfg, name):
    """Top-level section ``name`` as a mapping: absent or empty (``tables:``) is {}, anything
    else that is not a mapping (``tables: 0``, a list) is an error."""
    v = cfg.get(name)
    return {} if v is None else _mapping(name, v)


def _mapping(where, v):
    if not isinstance(v, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(v).__name__}")
    return v


def _int_key(where, k):
    if isinstance(k, str):
        try:
            return int(k, 0)
        except ValueError:
            pass
    elif isinstance(k, int) and not isinstance(k, bool):
        return k
    raise ConfigError(f"{where}: {k!r} is not an integer")


def _entry_match(table, e, where):
    kind = table.kind
    allowed = {"action", "params"} | {"exact": {"key"}, "ternary": {"value", "mask", "priority"},
                                      "lpm": {"prefix"}}[kind]
    unknown = set(e) - allowed
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {sorted(unknown)} for a {kind} entry "
                          f"(fields: {sorted(allowed)})")
    need = {"exact": ["key"], "ternary": ["value", "mask", "priority"], "lpm": ["prefix"]}[kind]
    missing = [f for f in need + ["action"] if f not in e]
    if missing:
        raise ConfigError(f"{where}: missing {missing}")


def _apply_table(dev, name, spec, where):
    table = dev.table(name)
    spec = _mapping(where, spec)
    unknown = set(spec) - {"entries", "default", "replace", "lpm_lengths"}
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {sorted(unknown)} (fields: entries, "
                          "default, replace, lpm_lengths)")
    if "lpm_lengths" in spec:
        # before any route is written: the routes below are placed by these lengths
        try:
            dev.set_lpm_lengths(name, spec["lpm_lengths"])
        except (KeyError, ValueError, TypeError) as err:
            raise ConfigError(f"{where}.lpm_lengths: {err.args[0]}") from None
    if "default" in spec:
        d = _mapping(f"{where}.default", spec["default"])
        table.set_default(d.get("action"), d.get("params") or {})
    entries = spec.get("entries", [])
    if not isinstance(entries, list):
        raise ConfigError(f"{where}.entries: expected a list")
    wanted = []
    for i, e in enumerate(entries):
        w = f"{where}.entries[{i}]"
        _entry_match(table, _mapping(w, e), w)
        wanted.append((w, e))
    if spec.get("replace", True):
        keep = set()
        for w, e in wanted:
            if table.kind == "exact":
                keep.add(tuple(table._key(e["key"])))
            elif table.kind == "ternary":
                keep.add(e["priority"])
            else:
                keep.add(tuple(table._locate(e["prefix"])))
        if table.kind == "lpm":
            # the routes as given, not the entries: a hashed table's expanded entries are no
            # routes of their own (a writer that read the table from the device sees them as
            # routes, and deletes them as such)
            dev._sync(name)
            for route in list(dev.writer.lpm_routes(name)):
                if route not in keep:
                    table.delete(list(route))
        for cur in table.dump() if table.kind != "lpm" else []:
            if table.kind == "exact":
                ident, match = tuple(cur["key"]), cur["key"]
            else:
                ident = match = cur["address"]
            if ident not in keep:
                table.delete(match)
    for w, e in wanted:
        try:
            if table.kind == "exact":
                table.add(e["key"], e["action"], e.get("params") or {})
            elif table.kind == "ternary":
                table.add(e["value"], e["action"], e.get("params") or {}, mask=e["mask"],
                          priority=e["priority"])
            else:
                table.add(e["prefix"], e["action"], e.get("params") or {})
        except TableFullError as err:
            raise ConfigTableFull(f"{w}: {err}") from None
        except (KeyError, ValueError, TypeError) as err:
            raise ConfigError(f"{w}: {err.args[0] if err.args else err}") from None


def sections():
    """``{section name: handler}``: the registered offloads' sections, then those added with
    :func:`register_section`."""
    out = {}
    for off in offloads():
        if off.config_section is not None:
            out[off.name] = off.hook("config_section")
    out.update(_SECTIONS)
    return out


def write_plan(dev, section, entries, groups, *, copies_are):
    """Write an offload section's plan on ``dev``: its table entries ``(table, key, action,
    params)``, then its copy-list multicast groups ``(group, copies)``. Copy lists need a
    device with list-mode groups (``tm.groups``): otherwise a :class:`ValueError` naming the
    section and what its copies are (``copies_are``, e.g. "write copies")."""
    if groups and dev.mcast_mode != "list":
        raise ValueError(f"{section}: {copies_are} need copy-list multicast (tm.groups); this "
                         "device has bitmap groups")
    for table, key, action, params in entries:
        dev.table(table).add(key, action, params)
    for g, copies in groups:
        dev.mcast_set(g, copies)


def apply_config(dev, config, *, dry_run=False):
    """Make ``dev`` (a :class:`netstor.api.Device`) hold ``config``. Returns a summary dict
    (counts of what was written). ``dry_run``: validate only, write nothing."""
    cfg = load_config(config)
    handlers = sections()
    unknown = set(cfg) - _CORE - set(handlers)
    if unknown:
        raise ConfigError(f"unknown section(s) {sorted(unknown)}; known: "
                          f"{sorted(_CORE | set(handlers))}")
    summary = {"registers": 0, "tables": 0, "entries": 0, "banks": 0, "mcast": 0,
               "programs": 0, "writes": 0}
    try:
        with dev.batch():
            for name, v in _section(cfg, "registers").items():
                try:
                    dev.reg_write(name, v)
                except (KeyError, ValueError, TypeError) as e:
                    raise ConfigError(f"registers.{name}: {e.args[0]}") from None
                summary["registers"] += 1
            for name, spec in _section(cfg, "tables").items():
                where = f"tables.{name}"
                try:
                    _apply_table(dev, name, spec, where)
                except ConfigError:
                    raise
                except (KeyError, ValueError, TypeError) as e:
                    raise ConfigError(f"{where}: {e.args[0]}") from None
                summary["tables"] += 1
                summary["entries"] += len(spec.get("entries", []))
            for name, cells in _section(cfg, "banks").items():
                for idx, v in _mapping(f"banks.{name}", cells).items():
                    index = _int_key(f"banks.{name}", idx)
                    try:
                        dev.bank(name).write(index, v)
                    except (KeyError, ValueError, TypeError) as e:
                        raise ConfigError(f"banks.{name}[{idx}]: {e.args[0]}") from None
                    summary["banks"] += 1
            for g, members in _section(cfg, "mcast").items():
                where = f"mcast.{g}"
                if not isinstance(members, list):
                    raise ConfigError(f"{where}: expected a list of [port, rid]")
                group = _int_key(where, g)
                try:
                    dev.mcast_set(group, members)
                except (KeyError, ValueError, TypeError) as e:
                    raise ConfigError(f"{where}: {e.args[0]}") from None
                summary["mcast"] += 1
            progs = _mapping("programs", cfg.get("programs") or {})
            for prog, spec in progs.items():
                where = f"programs.{prog}"
                spec = _mapping(where, spec)
                unknown = set(spec) - _TRUST_KEYS
                if unknown:
                    raise ConfigError(f"{where}: unknown field(s) {sorted(unknown)} (fields: "
                                      f"{', '.join(sorted(_TRUST_KEYS))})")
                if "trusted_ports" not in spec:
                    raise ConfigError(f"{where}: missing trusted_ports (a list of ports, [] "
                                      "or 'any')")
                if f"{prog}.trust" in (cfg.get("tables") or {}):
                    raise ConfigError(f"{where}: tables.{prog}.trust is set too; use one")
                try:
                    dev.set_trust(prog, spec["trusted_ports"], spec.get("trusted_sources"),
                                  spec.get("request_ports", "any"))
                except (KeyError, ValueError, TypeError) as e:
                    raise ConfigError(f"{where}: {e.args[0]}") from None
                summary["programs"] += 1
            for name, handler in handlers.items():
                if name in cfg:
                    handler(dev, cfg[name], dry_run)
            summary["writes"] = len(dev._pending)
            if dry_run:
                raise _DryRun
    except _DryRun:
        pass
    except TableFullError as e:     # an offload section's entries that do not fit
        raise ConfigTableFull(str(e)) from None
    return summary


class _DryRun(Exception):
    pass
