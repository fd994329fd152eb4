"""The `interplay` command. The only place that configures logging.

Each subcommand is a pair of functions: ``add_<name>(subparsers)`` builds its parser and sets
``func``; the function takes the parsed args and returns the exit code. Errors a user can cause
(InterplayError) print one line and exit 2; bugs keep their traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from interplay._plumbing import aio as _aio
from interplay._version import __version__
from interplay.config import loading as config_mod
from interplay.config.endpoint import redact_url
from interplay.errors import InterplayError
from interplay.run.results import EPISODES_FILE

if TYPE_CHECKING:
    from interplay.contracts.env import Env
    from interplay.run.config import RunConfig
    from interplay.run.runner import RunOutcome

LIST_KINDS = ("harnesses", "user-sims", "steps", "verifiers", "sandboxes", "envs",
              "export-formats", "scenario-kinds")


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
    add_eval(sub)
    for add in _more_commands():
        add(sub)
    return parser


def _more_commands() -> list[Any]:
    """Subcommands that live beside the modules they drive (imported when the parser is
    built, by name, so the import graph sees what the command depends on)."""
    from interplay.commands.describe import add_describe
    from interplay.commands.generate import add_generate
    from interplay.commands.regrade import add_regrade
    from interplay.compare import add_compare
    from interplay.export import add_export
    from interplay.model.local_server import add_serve_local
    from interplay.report import add_label, add_report
    from interplay.view import add_view

    return [add_serve_local, add_report, add_label, add_export, add_regrade, add_compare,
            add_describe, add_generate, add_view]


# -- interplay plugins -------------------------------------------------------------------------


def add_plugins(sub: Any) -> None:
    p = sub.add_parser("plugins", help="list installed plugins, what they registered, and "
                       "the ones that failed to load")
    p.add_argument("--all", action="store_true", help="include the builtin plugins")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_plugins)


def cmd_plugins(args: argparse.Namespace) -> int:
    from interplay.plugins import host as plugins

    infos = plugins.host().plugin_infos(include_builtins=args.all)
    if args.json:
        print(json.dumps([attrs.asdict(i) for i in infos], indent=2))
        return 0
    if not infos:
        print("no external plugins installed (--all shows the builtins)")
    elif all(i.builtin or i.skipped for i in infos) and not args.all:
        print("no external plugins loaded: the ones installed are kept out by "
              "INTERPLAY_LOAD_PLUGINS or INTERPLAY_BLOCK_PLUGINS")
    for info in infos:
        origin = "builtin" if info.builtin else f"{info.package} {info.version}"
        print(f"{info.name}  ({origin})")
        if info.skipped:
            print(f"  not loaded: {info.skipped}")
            continue
        if info.error:
            print(f"  FAILED: {info.error}")
            continue
        print(f"  hooks: {', '.join(info.hooks) or '-'}")
        for kind, names in sorted(info.registered.items()):
            print(f"  {kind}: {', '.join(names)}")
    for clash in plugins.registry().clashes().values():
        print(f"CLASH: {clash.describe()}")
    return 0


# -- interplay list ----------------------------------------------------------------------------


def add_list(sub: Any) -> None:
    p = sub.add_parser("list", help="list registered harnesses, user-sims, steps, verifiers, "
                       "sandboxes, envs, export formats or scenario kinds")
    p.add_argument("kind", choices=LIST_KINDS)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_list)


def cmd_list(args: argparse.Namespace) -> int:
    from interplay.plugins import host as plugins

    registry = plugins.registry()
    found = [(e, registry.clash(args.kind, e.name)) for e in registry.entries(args.kind)]
    if args.json:
        print(json.dumps([{"name": e.name, "package": e.package, "plugin": e.plugin,
                           "summary": _summary(e.obj),
                           "clash": None if clash is None else attrs.asdict(clash)}
                          for e, clash in found], indent=2))
        return 0
    width = max((len(e.name) for e, _ in found), default=0)
    for e, clash in found:
        flag = f"  CLASH: {clash.describe()}" if clash is not None else ""
        print(f"{e.name:<{width}}  {_summary(e.obj)}  [{e.package}]{flag}")
    return 0


def _summary(obj: Any) -> str:
    """The first sentence of what was registered's docstring (:func:`first_sentence`); an env
    file is read for it (one that cannot be read says why, and the rest of the list is still
    shown)."""
    from interplay.contracts.env import EnvFile
    from interplay.run.loader import file_env

    if isinstance(obj, EnvFile):
        try:
            obj = file_env(obj)
        except InterplayError as exc:
            return f"(cannot be loaded: {exc.message})"
    return first_sentence(getattr(obj, "__doc__", None) or "")


def first_sentence(doc: str) -> str:
    """A docstring's first sentence on one line: its first paragraph's lines joined, up to
    the first stop followed by a capital (a sentence wrapped over two lines is read whole;
    ``e.g. the`` does not end one)."""
    paragraph = " ".join(re.split(r"\n\s*\n", doc.strip())[0].split())
    end = re.search(r"[.!?](?=\s+[A-Z`])", paragraph)
    return paragraph[:end.end()] if end else paragraph


# -- interplay eval ---------------------------------------------------------------------------


def add_eval(sub: Any) -> None:
    from interplay.run.executor import EXECUTORS

    p = sub.add_parser(
        "eval", help="run an env's tasks and write a results folder with a report",
        description="Run N tasks x R rollouts of ENV, C episodes at once. Every finished episode "
        "is appended to OUTPUT/episodes.jsonl at once; --resume OUTPUT runs what is missing.")
    p.add_argument("env", nargs="?", help="env name (`interplay list envs`) or a TOML env file")
    p.add_argument("--config", action="append", default=[], metavar="FILE",
                   help="TOML file with any of the run's settings (repeatable; later wins)")
    p.add_argument("-n", type=int, dest="n", help="tasks to run (default: all)")
    p.add_argument("-r", "--rollouts", type=int, help="rollouts per task (default 1)")
    p.add_argument("-c", "--concurrency", type=int,
                   help="episodes at once (default 8; 1 on the embedded model)")
    p.add_argument("-w", "--workers", type=int, help="processes that run the episodes, "
                   "sharing the -c (default 1); for runs past a few thousand model calls a "
                   "second")
    p.add_argument("--executor", choices=tuple(EXECUTORS), help="where the episodes run: "
                   "this machine (local, the default) or a Ray cluster (ray: pip install "
                   "'interplay[ray]')")
    p.add_argument("--ray-address", metavar="ADDRESS", help="with --executor ray: the cluster "
                   "to run on (auto, HOST:PORT, ray://HOST:PORT); default: RAY_ADDRESS, else "
                   "a local cluster started for the run")
    p.add_argument("--sandbox", metavar="KIND", help="where the agents work: a sandbox "
                   "backend (`interplay list sandboxes`: docker, local) or none; default: "
                   "docker for an env or task that needs one")
    p.add_argument("-s", "--seed", type=int, help="the run's seed (default 0)")
    p.add_argument("-m", "--model", help="model name sent to the endpoint")
    p.add_argument("--base-url", help="OpenAI-compatible base URL (default: the embedded "
                   "local model)")
    p.add_argument("--api-key-var", help="environment variable holding the API key")
    p.add_argument("--pass-threshold", type=float,
                   help="reward at which an episode passes, for pass@k (default 1.0)")
    p.add_argument("-o", "--output", help="results folder (default results/ENV-TIMESTAMP)")
    p.add_argument("--resume", metavar="DIR", help="continue the run in DIR: run only the "
                   "missing episodes (refused if the config changed)")
    p.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE",
                   help="set any config field, e.g. --set env.relay.max_turns=4 or "
                   "--set seats.assistant.harness=null (repeatable)")
    p.add_argument("--retry-errors", action="store_true", help="with --resume: also run "
                   "again the episodes that ended in an error")
    p.add_argument("--no-report", action="store_true", help="do not write report.html")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    p.set_defaults(func=cmd_eval)


def _cli_data(args: argparse.Namespace) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for f in args.config:
        data = config_mod.merge(data, config_mod.read_toml(f))
    flags: dict[str, Any] = {}
    if args.env:
        flags["env"] = {"name": args.env}
    for key in ("n", "rollouts", "concurrency", "workers", "executor", "ray_address", "seed",
                "pass_threshold", "output"):
        value = getattr(args, key)
        if value is not None:
            flags[key] = value
    if args.retry_errors:
        if not args.resume:
            raise InterplayError("--retry-errors goes with --resume DIR")
        flags["retry_errors"] = True
    if args.sandbox is not None:
        flags["sandbox"] = {"kind": args.sandbox}
    model = {k: v for k, v in (("model", args.model), ("base_url", args.base_url),
                               ("api_key_var", args.api_key_var)) if v is not None}
    if model:
        flags["model"] = model
    data = config_mod.merge(data, flags)
    return config_mod.apply_overrides(data, args.overrides)


async def _run_cli(cfg: RunConfig, env: Env, resolved: Mapping[str, Any], output: Path,
                   **options: Any) -> RunOutcome:
    from interplay.run.executor import collector_tuned_for_runs
    from interplay.run.runner import run

    # A kill (SIGTERM) stops the run like Ctrl-C: running episodes are cancelled, finished
    # ones are already on disk, and the summary is written.
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    installed = False
    if main is not None and sys.platform != "win32":
        try:
            loop.add_signal_handler(signal.SIGTERM, main.cancel)
            installed = True
        except (NotImplementedError, RuntimeError):
            pass
    try:
        with collector_tuned_for_runs():
            return await run(cfg, env, resolved, output, **options)
    finally:
        if installed:
            loop.remove_signal_handler(signal.SIGTERM)


def cmd_eval(args: argparse.Namespace) -> int:
    from interplay.run.results import discard_unstarted, prepare

    cfg, env, resolved, output, tasks = prepare(_cli_data(args), args.resume)
    where = ("the embedded local model" if cfg.model.base_url is None
             else redact_url(cfg.model.base_url))
    spread = f", {cfg.workers} workers" if cfg.workers > 1 else ""
    if cfg.executor == "ray":
        spread = (f", Ray cluster at {cfg.ray_address}" if cfg.ray_address
                  else ", a local Ray cluster")

    def announce(n_tasks: int, to_run: int) -> None:
        short = (f" (-n {cfg.n}, but {env.name} has {n_tasks} tasks: it runs {n_tasks})"
                 if cfg.n is not None and cfg.n > n_tasks else "")
        print(f"interplay eval {env.name}: {to_run} episodes to run "
              f"({n_tasks} tasks x {cfg.rollouts} rollouts, -c {cfg.concurrency}{spread}) "
              f"on {where}; results in {output}{short}", file=sys.stderr)

    try:
        outcome = _aio.run(_run_cli(cfg, env, resolved, output, show_progress=not args.quiet,
                                   announce=announce, tasks=tasks))
    except Exception:
        if args.resume is None:
            discard_unstarted(output)
        raise
    except (KeyboardInterrupt, asyncio.CancelledError):
        print(f"interplay: interrupted; finished episodes are in {output / EPISODES_FILE}; "
              f"continue with: interplay eval --resume {output}", file=sys.stderr)
        return 130
    from interplay.run.summary import error_line, format_summary

    summary = outcome.summary
    print(format_summary(summary, title=f"{env.name}: {output}"))
    if not args.no_report:
        from interplay.report import write_report

        path = write_report(output)
        print(f"report: {path}")
    # When every episode, or most, ended the same way: the cause and what to change, last.
    line = error_line(summary, rerun=f"run them again with `interplay eval --resume {output} "
                                     f"--retry-errors`",
                      regrade=f"`interplay regrade {output}` scores the stored episodes again "
                              f"without calling the agent")
    if line is not None:
        print(line, file=sys.stderr)
    if not summary["completed"]:
        return 1
    return 0 if summary["complete"] else 1


# -- entry point -------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        from interplay import log
        from interplay._plumbing import fds as _fds

        log.configure(fmt=args.log_format, level=args.log_level)
        # Every connection, upstream call and program's pipe is a descriptor: take all the
        # system allows (the servers keep a client that hoards them to a share).
        raised = _fds.raise_limit()
        if raised is not None:
            log.get_logger("interplay.cli").debug("cli.descriptor_limit", before=raised[0],
                                                  after=raised[1])
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at interpreter exit
        return code
    except InterplayError as exc:
        print(f"interplay: error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interplay: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`interplay list envs | head`): stop as a pipe's writer does.
        # What is still buffered goes nowhere, so the exit does not fail to flush it again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
