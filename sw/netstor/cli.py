"""``netstor``: the command line, a thin layer over :mod:`netstor.api`.

    netstor [--device TARGET] [--schema PATH] [--json] [--lpm-lengths T=L,L,...] COMMAND ...

TARGET (default ``$NETSTOR_DEVICE``, else ``model``): ``model`` (a golden model of this
process: changes vanish when the command ends), ``unix:PATH`` (the control window of a running
``netstor switch`` / ``netstor serve-model``), ``pcie:BDF`` or ``/dev/mqnicN`` (a card).

Commands::

    info                                   identity and sizes
    schema                                 tables, banks, registers, counters of the schema
    table list | dump T | get T MATCH | add T MATCH ACTION [p=v ...] [--mask M --priority N]
          | modify T MATCH ACTION [p=v ...] | delete T MATCH | clear T | default T [ACTION [p=v]]
    reg list | get NAME | set NAME VALUE
    bank read B INDEX [COUNT] | write B INDEX VALUE | clear B
    counters [PREFIX] [--watch] [--interval S] [--count N] [--clear]
    mcast list | get G | set G PORT:RID ... | clear G   (copy lists: in order, a port may repeat)
    apply CONFIG [--dry-run]               declarative YAML/TOML configuration
    serve-model --control PATH [--config CONFIG]
    controller --config CONFIG [...]       the controller daemon (netstor.controller)
    api METHOD PATH [JSON] [--url URL]     a request to a running controller's HTTP API, with
                                           the bearer token of its token file
    switch --port0 IF --port1 IF [...]     the test bed's software switch (netstor.testbed)
    OFFLOAD COMMAND ...                    an offload's own commands (its Offload.cli hook;
                                           `netstor OFFLOAD --help` lists them)

``--lpm-lengths T=8,16,24,32`` (repeatable): the prefix lengths the banks of hashed LPM table
``T`` may hold (routes of other lengths are expanded into the next held one; the same as a
configuration's ``tables.T.lpm_lengths``). Give it to every process that writes the table: a
process without it places new routes by any length while banks last.

MATCH: exact tables take the key (``1`` or ``10.0.0.1,53`` for several parts), ternary tables
the value (with ``--mask`` and ``--priority``; ``get``/``delete``/``modify`` take the
priority), LPM tables a prefix ``10.0.0.0/8``. Exit status: 0 ok, 1 error (one line on
stderr: a device, table or file that says no), 2 usage error (one line naming the bad argument
or value; argparse's own also print the usage). No input prints a traceback: an unexpected
exception is reported on one line as an internal error (``NETSTOR_DEBUG=1`` shows the
traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

__all__ = ["main", "UsageError", "open_device"]


class UsageError(ValueError):
    """A bad argument or value on the command line (exit status 2)."""


def _err(msg, status=1):
    print(f"netstor: error: {msg}", file=sys.stderr)
    return status


def _int0(text):
    return int(text, 0)


_int0.__name__ = "integer"      # argparse names the type in its message


def _count(text):
    v = _int0(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"count {text!r} must be >= 1")
    return v


def _nonneg(text):
    v = _int0(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0")
    return v


def _positive_float(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a number > 0")
    return v


def _no_more(args, what, n):
    """At most ``n`` words in ``args.rest`` for ``what``."""
    if len(args.rest) > n:
        raise UsageError(f"{what}: unexpected argument(s) {' '.join(args.rest[n:])!r}")


def _lpm_lengths(text):
    """``--lpm-lengths T=L,L,...`` -> ``(T, [L, ...])``."""
    name, eq, rest = text.partition("=")
    try:
        if not (eq and name and rest):
            raise ValueError
        lengths = [int(x, 0) for x in rest.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--lpm-lengths {text!r}: expected TABLE=LENGTH,LENGTH,... (e.g. "
            "l3.big=8,16,24,32)") from None
    return name, lengths


def _open(args):
    from netstor.api import Device
    target = args.device or os.environ.get("NETSTOR_DEVICE", "model")
    dev = Device.open(target, schema=args.schema)
    try:
        for name, lengths in getattr(args, "lpm_lengths", None) or []:
            dev.set_lpm_lengths(name, lengths)
    except BaseException:
        dev.close()
        raise
    return dev


def open_device(args):
    """The device the global options name (``--device``, ``--schema``, ``--lpm-lengths``):
    for an offload's ``cli`` hook (:class:`netstor.offload.Offload`); the caller closes it."""
    return _open(args)


def _offload_commands():
    """The registered offloads that add commands (an ``Offload.cli`` hook), in registry
    order."""
    from netstor.offloads import offloads
    return [o for o in offloads() if o.cli is not None]


def _print_rows(rows, headers):
    rows = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip())
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def _params(pairs):
    out = {}
    for p in pairs:
        if "=" not in p:
            raise UsageError(f"action parameter {p!r} must be NAME=VALUE")
        k, v = p.split("=", 1)
        out[k] = v
    return out


def _match(table, text):
    if table.kind == "ternary" and text is not None:
        try:
            return int(text, 0)
        except ValueError:
            pass
    if table.kind == "lpm":
        return text
    parts = text.split(",")
    return parts if len(parts) > 1 else parts[0]


def _fmt_entry(table, e):
    from netstor.api import format_value
    acts = {a.name: a for a in table.desc.actions}
    params = " ".join(f"{k}={format_value(v, acts[e['action']].params[k])}"
                      for k, v in e["params"].items()) if e["action"] else ""
    if table.kind == "lpm" and "prefix" in e:
        m = f"{format_value(e['prefix'], table.desc.key_width)}/{e['prefix_len']}"
    elif table.kind == "exact":
        m = ",".join(format_value(v, k.width) for v, k in zip(e["key"], table.desc.key))
    else:
        m = ",".join(f"{format_value(v, k.width)}&{format_value(mk, k.width)}"
                     for v, mk, k in zip(e["value"], e["mask"], table.desc.key))
    return [e["address"], m, e["action"] or "-", params]


# ---- commands -----------------------------------------------------------------------------------

def cmd_info(args, dev):
    info = dev.info()
    if args.json:
        print(json.dumps(info, indent=1))
    else:
        for k, v in info.items():
            print(f"{k:15} {v}")


def cmd_schema(args, dev):
    s = dev.schema
    if args.json:
        print(json.dumps(s, indent=1, sort_keys=True))
        return
    print(f"app_id {s['app_id']:#010x}  schema hash {s['hash']}  ports {dev.info()['ports']}")
    print("\ntables:")
    _print_rows([[n, t["kind"], t["size"], " ".join(f"{k['expr']}({k['width']})" for k in t["key"]),
                  " ".join(a["name"] + "(" + ",".join(f"{p['name']}:{p['width']}"
                                                      for p in a["params"]) + ")"
                           for a in t["actions"])]
                 for n, t in sorted(s["tables"].items())],
                ["name", "kind", "size", "key", "actions"])
    print("\nregister banks:")
    _print_rows([[n, b["depth"], b["width"]] for n, b in sorted(s["banks"].items())],
                ["name", "depth", "width"])
    print("\nregisters:")
    _print_rows([[r["name"], r["width"], r["access"], r["doc"]] for r in s["registers"]],
                ["name", "width", "access", "doc"])
    print(f"\ncounters: {len(s['counters'])} (netstor counters)")


def _check_table_args(args):
    """Usage errors of ``table`` found before the device is opened."""
    if args.op in ("list",) and (args.name is not None or args.rest):
        raise UsageError(f"table list takes no arguments")
    if args.op != "list" and args.name is None:
        raise UsageError(f"table {args.op} needs a table name")
    need = {"get": 1, "delete": 1, "add": 2, "modify": 2}.get(args.op, 0)
    if len(args.rest) < need:
        raise UsageError(f"table {args.op} {args.name} needs "
                         + {1: "MATCH", 2: "MATCH ACTION [NAME=VALUE ...]"}[need])
    if args.op in ("dump", "clear"):
        _no_more(args, f"table {args.op} {args.name}", 0)
    if args.op in ("get", "delete"):
        _no_more(args, f"table {args.op} {args.name} MATCH", 1)
    if args.op != "add" and (args.mask is not None or args.priority is not None):
        raise UsageError(f"--mask/--priority are for 'table add' on a ternary table (table "
                         f"{args.op} on a ternary table takes the priority as MATCH)")


def cmd_table(args, dev):
    if args.op == "list":
        rows = []
        for n in dev.table_names:
            t = dev.table(n)
            rows.append([n, t.kind, t.desc.size, len(t.dump())])
        if args.json:
            print(json.dumps([dict(zip(["name", "kind", "size", "used"], r)) for r in rows]))
        else:
            _print_rows(rows, ["table", "kind", "size", "used"])
        return
    t = dev.table(args.name)
    if args.op == "dump":
        entries = t.dump()
        default = t.get_default()
        if args.json:
            print(json.dumps({"table": t.name, "entries": entries, "default": default}))
        else:
            _print_rows([_fmt_entry(t, e) for e in entries], ["addr", "match", "action", "params"])
            print(f"default: {default['action'] or '-'} "
                  + " ".join(f"{k}={v}" for k, v in default["params"].items()))
            print(f"{len(entries)}/{t.desc.size} entries")
    elif args.op == "get":
        e = t.get(_match(t, args.rest[0]) if args.rest else None)
        if e is None:
            raise KeyError(f"table {t.name}: no entry {args.rest[0]}")
        print(json.dumps(e) if args.json else "  ".join(map(str, _fmt_entry(t, e))))
    elif args.op in ("add", "modify"):
        if len(args.rest) < 2:
            raise ValueError(f"table {args.op} {t.name} MATCH ACTION [NAME=VALUE ...]")
        match, action, params = args.rest[0], args.rest[1], _params(args.rest[2:])
        if args.op == "add":
            kw = {}
            if t.kind != "ternary" and (args.mask is not None or args.priority is not None):
                raise UsageError(f"table {t.name} is {t.kind}: --mask/--priority are only "
                                 "for ternary tables")
            if t.kind == "ternary":
                if args.mask is None or args.priority is None:
                    raise UsageError(f"table {t.name} is ternary: give --mask and --priority")
                mk = args.mask.split(",")
                kw = {"mask": mk if len(mk) > 1 else mk[0], "priority": args.priority}
                m = args.rest[0].split(",")
                match = m if len(m) > 1 else m[0]
            else:
                match = _match(t, match)
            t.add(match, action, params, **kw)
        else:
            t.modify(_match(t, match), action, params)
        print(f"{t.name}: {args.op} {match} -> {action}")
    elif args.op == "delete":
        t.delete(_match(t, args.rest[0]))
        print(f"{t.name}: deleted {args.rest[0]}")
    elif args.op == "clear":
        t.clear()
        print(f"{t.name}: cleared")
    elif args.op == "default":
        if args.rest:
            t.set_default(None if args.rest[0] == "none" else args.rest[0],
                          _params(args.rest[1:]))
        d = t.get_default()
        print(json.dumps(d) if args.json else f"default: {d['action'] or '-'} " +
              " ".join(f"{k}={v}" for k, v in d["params"].items()))


def _check_reg_args(args):
    if args.op == "list" and (args.name is not None or args.value is not None):
        raise UsageError("reg list takes no arguments")
    if args.op in ("get", "set") and args.name is None:
        raise UsageError(f"reg {args.op} needs a register name")
    if args.op == "get" and args.value is not None:
        raise UsageError(f"reg get {args.name}: unexpected argument {args.value!r}")
    if args.op == "set" and args.value is None:
        raise UsageError(f"reg set {args.name} needs a VALUE")


def cmd_reg(args, dev):
    if args.op == "list":
        regs = dev.registers()
        if args.json:
            print(json.dumps(regs))
        else:
            _print_rows([[n, f"{v} ({v:#x})"] for n, v in regs.items()], ["register", "value"])
    elif args.op == "get":
        v = dev.reg_read(args.name)
        print(json.dumps({args.name: v}) if args.json else v)
    elif args.op == "set":
        dev.reg_write(args.name, args.value)
        print(f"{args.name} = {dev.reg_read(args.name)}")


def _check_bank_args(args):
    """``bank read B INDEX [COUNT]`` (COUNT positional as documented, or ``--count``),
    ``bank write B INDEX VALUE``, ``bank clear B``."""
    if args.op == "read":
        if args.value is not None:
            try:
                n = _count(args.value)
            except (ValueError, argparse.ArgumentTypeError) as e:
                raise UsageError(f"bank read: COUNT {args.value!r} is not an integer >= 1"
                                 if isinstance(e, ValueError) else f"bank read: {e}") from None
            if args.count is not None and args.count != n:
                raise UsageError(f"bank read: COUNT {args.value} and --count {args.count} "
                                 "disagree")
            args.count = n
        elif args.count is None:
            args.count = 1
    else:
        if args.count is not None:
            raise UsageError(f"--count is for 'bank read', not 'bank {args.op}'")
    if args.op == "write":
        if args.index is None or args.value is None:
            raise UsageError(f"bank write {args.name} needs INDEX VALUE")
    if args.op == "clear" and (args.index is not None or args.value is not None):
        raise UsageError(f"bank clear {args.name} takes no INDEX or VALUE")
    if args.index is None:
        args.index = 0


def cmd_bank(args, dev):
    b = dev.bank(args.name)
    if args.op == "read":
        vals = b.read_range(args.index, args.count)
        if args.json:
            print(json.dumps({str(args.index + i): v for i, v in enumerate(vals)}))
        else:
            _print_rows([[args.index + i, v] for i, v in enumerate(vals)], ["index", "value"])
    elif args.op == "write":
        b.write(args.index, args.value)
        print(f"{b.name}[{args.index}] = {b.read(args.index)}")
    elif args.op == "clear":
        b.clear()
        print(f"{b.name}: cleared {b.desc.depth} cells")


def cmd_counters(args, dev):
    if args.clear:
        dev.clear_counters(args.prefix or "")
        print(f"cleared counters {args.prefix or '(all)'}")
        return
    prev, t_prev = None, None
    n = 0
    tty = sys.stdout.isatty()
    while True:
        now = time.monotonic()
        vals = dev.counters(args.prefix or "")
        if not vals:
            raise KeyError(f"no counter starts with {args.prefix!r}")
        rates = ({k: (v - prev.get(k, v)) / (now - t_prev) for k, v in vals.items()}
                 if prev else None)
        if args.json:
            print(json.dumps({"time": time.time(), "counters": vals, "rates": rates}),
                  flush=True)
        else:
            if args.watch and tty:
                print("\x1b[H\x1b[2J", end="")
            if args.watch:
                print(f"netstor counters on {dev.target} - {time.strftime('%H:%M:%S')} "
                      f"(every {args.interval:g} s; Ctrl-C quits)")
            shown = {k: v for k, v in vals.items() if v or not args.nonzero}
            _print_rows([[k, v] + ([f"{rates[k]:.1f}/s"] if rates else [])
                         for k, v in shown.items()],
                        ["counter", "value"] + (["rate"] if rates else []))
            sys.stdout.flush()
        n += 1
        if not args.watch or (args.count and n >= args.count):
            return
        prev, t_prev = vals, now
        time.sleep(args.interval)


def _members(words):
    members = []
    for m in words:
        p, _, r = m.partition(":")
        try:
            members.append((int(p, 0), int(r or "0", 0)))
        except ValueError:
            raise UsageError(f"mcast member {m!r} is not PORT:RID (integers)") from None
    return members


def _check_mcast_args(args):
    if args.op == "list" and (args.group is not None or args.members):
        raise UsageError("mcast list takes no arguments")
    if args.op != "list" and args.group is None:
        raise UsageError(f"mcast {args.op} needs a group number")
    if args.op in ("get", "clear") and args.members:
        raise UsageError(f"mcast {args.op} {args.group}: unexpected argument(s) "
                         f"{' '.join(args.members)!r}")
    if args.op == "set":
        _members(args.members)


def _check_counters_args(args):
    if (args.interval != 1.0 or args.count) and not args.watch:
        raise UsageError("--interval and --count are for --watch")
    if args.clear and args.watch:
        raise UsageError("--clear and --watch do not go together")


_CHECKS = {"table": _check_table_args, "reg": _check_reg_args, "bank": _check_bank_args,
           "mcast": _check_mcast_args, "counters": _check_counters_args}


def cmd_mcast(args, dev):
    if args.op == "list":
        groups = dev.mcast_dump()
        if args.json:
            print(json.dumps({str(g): m for g, m in groups.items()}))
        else:
            _print_rows([[g, " ".join(f"{p}:{r}" for p, r in m)] for g, m in groups.items()],
                        ["group", "port:rid"])
        return
    if args.op == "set":
        dev.mcast_set(args.group, _members(args.members))
    elif args.op == "clear":
        dev.mcast_set(args.group, [])
    m = dev.mcast_get(args.group)
    print(json.dumps(m) if args.json else f"group {args.group}: " +
          (" ".join(f"{p}:{r}" for p, r in m) or "(empty)"))


def cmd_apply(args, dev):
    summary = dev.apply(args.config, dry_run=args.dry_run)
    if args.json:
        print(json.dumps(summary))
    else:
        print(("validated (dry run, nothing written): " if args.dry_run else "applied: ")
              + ", ".join(f"{v} {k}" for k, v in summary.items()))


def cmd_serve_model(args):
    """A golden model with its control window served at ``--control`` (no packets: for
    controller and CLI work without a network)."""
    import signal
    import threading
    from netstor.api import Device, load_schema
    from netstor.driver.remote import WindowServer
    from netstor.driver.transports import ModelTransport
    from netstor.model.dataplane import DataplaneModel
    from netstor.programs import default_pipeline
    folder = os.path.dirname(os.path.abspath(args.control))
    if not os.path.isdir(folder):
        raise UsageError(f"--control {args.control}: folder {folder} does not exist")
    schema = load_schema(args.schema)
    model = DataplaneModel(default_pipeline())
    if args.config:
        Device.open("model", schema=schema, model=model).apply(args.config)
    srv = WindowServer(ModelTransport(model, schema), args.control).start()
    print(f"netstor model serving its control window at unix:{args.control}", flush=True)
    done = threading.Event()
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda *_: done.set())
    done.wait()
    srv.stop()


def _parser(cmd=None):
    """The parser; the offload commands' own arguments are added (their ``cli`` hook
    imported) only for ``cmd``, the command being run."""
    extra = _offload_commands()
    epilog = __doc__.split("Commands::")[1]
    if extra:
        epilog += "\nOffload commands (netstor OFFLOAD --help)::\n\n" + "".join(
            f"    {o.name:38} {o.title}\n" for o in extra)
    ap = argparse.ArgumentParser(prog="netstor", description="netstor data plane control",
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=epilog)
    ap.add_argument("--device", help="model | unix:PATH | pcie:BDF | /dev/mqnicN "
                                     "(default $NETSTOR_DEVICE or model)")
    ap.add_argument("--schema", help="schema.json (default $NETSTOR_SCHEMA or "
                                     "build/rtl/schema.json)")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    ap.add_argument("--lpm-lengths", type=_lpm_lengths, action="append", default=[],
                    metavar="TABLE=L,L,...", help="the prefix lengths the banks of a hashed "
                    "LPM table may hold (repeatable)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info")
    sub.add_parser("schema")
    p = sub.add_parser("table")
    p.add_argument("op", choices=["list", "dump", "get", "add", "modify", "delete", "clear",
                                  "default"])
    p.add_argument("name", nargs="?")
    p.add_argument("rest", nargs="*")
    p.add_argument("--mask")
    p.add_argument("--priority", type=_nonneg)
    p = sub.add_parser("reg")
    p.add_argument("op", choices=["list", "get", "set"])
    p.add_argument("name", nargs="?")
    p.add_argument("value", nargs="?")
    p = sub.add_parser("bank")
    p.add_argument("op", choices=["read", "write", "clear"])
    p.add_argument("name")
    p.add_argument("index", type=_nonneg, nargs="?")
    p.add_argument("value", nargs="?", help="write: the value; read: COUNT (default 1)")
    p.add_argument("--count", type=_count, default=None, help="read: how many cells")
    p = sub.add_parser("counters")
    p.add_argument("prefix", nargs="?")
    p.add_argument("--watch", action="store_true", help="refresh until Ctrl-C")
    p.add_argument("--interval", type=_positive_float, default=1.0)
    p.add_argument("--count", type=_nonneg, default=0, help="stop after N refreshes")
    p.add_argument("--nonzero", action="store_true", help="hide counters that are 0")
    p.add_argument("--clear", action="store_true")
    p = sub.add_parser("mcast")
    p.add_argument("op", choices=["list", "get", "set", "clear"])
    p.add_argument("group", type=_nonneg, nargs="?")
    p.add_argument("members", nargs="*", help="PORT:RID copies; on a core with copy lists "
                   "(tm.groups) they leave in this order and a port may be listed again")
    p = sub.add_parser("apply")
    p.add_argument("config")
    p.add_argument("--dry-run", action="store_true")
    p = sub.add_parser("serve-model")
    p.add_argument("--control", required=True, help="Unix socket path")
    p.add_argument("--config")
    sub.add_parser("controller", add_help=False)
    sub.add_parser("api", add_help=False)
    sub.add_parser("switch", add_help=False)
    for off in extra:
        if off.name in sub.choices:
            raise ValueError(f"offload {off.name}: its command name is a built-in command")
        p = sub.add_parser(off.name, help=off.title, description=off.title)
        if off.name == cmd:
            run = off.hook("cli")(p)
            if not callable(run):
                raise TypeError(f"offload {off.name}: its cli hook returned {run!r}, not a "
                                "function run(args)")
            p.set_defaults(offload_run=run)
    return ap


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    # the daemons parse their own options; global --device/--schema reach them via the env
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--device")
    pre.add_argument("--schema")
    pre.add_argument("--json", action="store_true")
    pre.add_argument("--lpm-lengths", action="append")
    pre.add_argument("cmd", nargs="?")
    known, rest = pre.parse_known_args(argv)
    if known.cmd in ("controller", "switch", "api"):
        for opt, env in (("device", "NETSTOR_DEVICE"), ("schema", "NETSTOR_SCHEMA")):
            if getattr(known, opt):
                os.environ[env] = getattr(known, opt)
        if known.cmd == "controller":
            from netstor.controller import main as run
        elif known.cmd == "api":          # the HTTP client: sends the controller's token
            from netstor.controller import client_main as run
        else:
            from netstor.testbed.switch import main as run
        try:
            return run(argv[argv.index(known.cmd) + 1:])
        except KeyboardInterrupt:
            return 130
        except Exception as e:          # the daemon's own errors are its to report; a bug
            return _internal(e)         # still gets one line
    args = _parser(known.cmd).parse_args(argv)
    from netstor.api import TableFullError
    try:
        if args.cmd == "serve-model":
            return cmd_serve_model(args) or 0
        run = getattr(args, "offload_run", None)
        if run is not None:             # an offload's command: it opens a device if it needs
            return run(args) or 0
        check = _CHECKS.get(args.cmd)
        if check is not None:
            check(args)
        dev = _open(args)
        try:
            globals()["cmd_" + args.cmd](args, dev)
        finally:
            dev.close()
    except KeyboardInterrupt:
        return 130
    except UsageError as e:
        return _err(e, 2)
    except (KeyError, ValueError, TypeError, OSError, RuntimeError, TableFullError) as e:
        return _err(e.args[0] if isinstance(e, KeyError) and e.args else e)
    except Exception as e:              # a bug: one line, the traceback only when asked
        return _internal(e)
    return 0


def _internal(e):
    if os.environ.get("NETSTOR_DEBUG"):
        raise e
    return _err(f"internal error: {type(e).__name__}: {e} (NETSTOR_DEBUG=1 shows the "
                "traceback)")


if __name__ == "__main__":             # run as netstor.cli, so that an offload's cli hook
    from netstor.cli import main         # raises the same UsageError this main catches
    sys.exit(main())
