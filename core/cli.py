"""The `interplay` command. The only place that configures logging.

Each subcommand is a pair of functions: ``add_<name>(subparsers)`` builds its parser and sets
``func``; the function takes the parsed args and returns the exit code. Errors a user can cause
(InterplayError) print one line and exit 2; bugs keep their traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

import attrs

from interplay import __version__
from interplay.errors import InterplayError

LIST_KINDS = ("harnesses", "user-sims", "steps", "verifiers", "envs")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="interplay",
        description="Run, score and record multi-turn episodes between LLM agents, "
        "simulated users and simulated worlds.",
    )
    parser.add_argument("--version", action="version", version=f"interplay {__version__}")
    parser.add_argument("--log-format", choices=("console", "json"), default="console",
                        help="log line format on stderr (default: console)")
    parser.add_argument("--log-level", default="warning",
                        help="debug, info, warning or error (default: warning)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    add_plugins(sub)
    add_list(sub)
    for add in _more_commands():
        add(sub)
    return parser


def _more_commands() -> list[Any]:
    """Subcommands that live beside the modules they drive (imported only when defined)."""
    import importlib

    adds = []
    for module_name, attr in (
        ("interplay.local_model", "add_serve_local"),
        ("interplay.runner", "add_eval"),
        ("interplay.report", "add_report"),
    ):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        adds.append(getattr(module, attr))
    return adds


# -- interplay plugins -------------------------------------------------------------------------


def add_plugins(sub: Any) -> None:
    p = sub.add_parser("plugins", help="list installed plugins, what they registered, and "
                       "the ones that failed to load")
    p.add_argument("--all", action="store_true", help="include the builtin plugins")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_plugins)


def cmd_plugins(args: argparse.Namespace) -> int:
    from interplay import plugins

    infos = plugins.host().plugin_infos(include_builtins=args.all)
    if args.json:
        print(json.dumps([attrs.asdict(i) for i in infos], indent=2))
        return 0
    if not infos:
        print("no external plugins installed (--all shows the builtins)")
    for info in infos:
        origin = "builtin" if info.builtin else f"{info.package} {info.version}"
        print(f"{info.name}  ({origin})")
        if info.error:
            print(f"  FAILED: {info.error}")
            continue
        print(f"  hooks: {', '.join(info.hooks) or '-'}")
        for kind, names in sorted(info.registered.items()):
            print(f"  {kind}: {', '.join(names)}")
    clashes = plugins.registry().clashes()
    for (kind, name), packages in sorted(clashes.items()):
        print(f"CLASH: {plugins.SINGULAR[kind]} {name!r} registered by {' and '.join(packages)}")
    return 0


# -- interplay list ----------------------------------------------------------------------------


def add_list(sub: Any) -> None:
    p = sub.add_parser("list", help="list registered harnesses, user-sims, steps, verifiers "
                       "or envs")
    p.add_argument("kind", choices=LIST_KINDS)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_list)


def cmd_list(args: argparse.Namespace) -> int:
    from interplay import plugins

    entries = plugins.registry().entries(args.kind)
    rows = [
        {"name": e.name, "package": e.package, "plugin": e.plugin,
         "summary": _summary(e.obj)}
        for e in entries
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max((len(r["name"]) for r in rows), default=0)
    for r in rows:
        print(f"{r['name']:<{width}}  {r['summary']}  [{r['package']}]")
    return 0


def _summary(obj: Any) -> str:
    doc = (getattr(obj, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else ""


# -- entry point -------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        from interplay import log

        log.configure(fmt=args.log_format, level=args.log_level)
        return int(args.func(args) or 0)
    except InterplayError as exc:
        print(f"interplay: error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interplay: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
