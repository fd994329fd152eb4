"""``interplay describe KIND [NAME]``: what a registered env, step, verifier, harness or user sim
(or the model endpoint) is and every setting it takes, read from the settings classes the config
check structures into (:mod:`interplay.config.settings`), so what a user reads cannot drift from
what a config accepts. An env also shows its seats, its task rows (fields and an example), its
verifiers with the settings it gives them, and the ``ctx.results`` keys its steps write.

The same descriptions make the settings reference pages (:func:`reference_pages`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import cattrs

from interplay.config import loading as config
from interplay.config.endpoint import Endpoint, Sampling
from interplay.config.settings import field_docs, settings_of, type_text
from interplay.contracts.contexts import SeatSpec
from interplay.contracts.env import EnvFile, EnvOptions
from interplay.errors import InterplayError
from interplay.plugins import host as plugins
from interplay.plugins.registry import SINGULAR
from interplay.run.loader import env_from_toml, file_env, open_env, split_options
from interplay.values.records import Task

#: What ``describe`` takes: every registered kind, ``model`` (the endpoint a run calls) and
#: ``run`` (the run's own settings, the top-level keys of a config file).
DESCRIBE_KINDS: tuple[str, ...] = ("envs", "steps", "verifiers", "harnesses", "sandboxes",
                                   "user-sims", "scenario-kinds", "model", "run")
#: The one name of the ``model`` kind.
MODEL = "model"
#: The one name of the ``run`` kind.
RUN = "run"
_plain = cattrs.Converter()


def names(kind: str) -> list[str]:
    """The names ``describe KIND NAME`` takes for ``kind``."""
    _check_kind(kind)
    if kind in (MODEL, RUN):
        return [kind]
    return plugins.registry().names(kind)


def _check_kind(kind: str) -> None:
    if kind not in DESCRIBE_KINDS:
        raise InterplayError(f"unknown kind {kind!r}; expected one of: "
                             f"{', '.join(DESCRIBE_KINDS)}")


def _doc(obj: Any) -> str:
    text = (getattr(obj, "__doc__", None) or "").strip()
    return "\n".join(line.strip() for line in text.splitlines())


def _settings(cls: Any, defaults: Any = None) -> list[dict[str, Any]]:
    return [attrs.asdict(s) for s in settings_of(cls, defaults)]


def describe(kind: str, name: str, settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What ``name`` of ``kind`` is, as plain data (``--json`` prints it); for an env, made
    with ``settings`` (its ``env.*`` settings, as a config file's table) over its defaults."""
    _check_kind(kind)
    if kind == "model":
        if name != MODEL:
            raise InterplayError(f"kind model has one name, model; got {name!r}")
        return {"kind": kind, "name": MODEL, "package": "interplay", "summary":
                _doc(Endpoint).split("\n")[0], "doc": _doc(Endpoint),
                "settings": _settings(Endpoint),
                "sampling_settings": _settings(Sampling),
                "seat_settings": _settings(SeatSpec)}
    if kind == RUN:
        if name != RUN:
            raise InterplayError(f"kind run has one name, run; got {name!r}")
        from interplay.run.config import FLAGS, RunConfig

        return {"kind": kind, "name": RUN, "package": "interplay",
                "summary": _doc(RunConfig).split("\n")[0], "doc": _doc(RunConfig),
                "settings": [{**s, "flag": FLAGS.get(s["name"])}
                             for s in _settings(RunConfig)]}
    if kind == "envs" and name.endswith((".toml", ".json")) and Path(name).is_file():
        # An env file, as `interplay eval FILE` takes it.
        obj, package = env_from_toml(name), f"file {name}"
    else:
        plugins.get(kind, name)  # an unknown name: its error names any plugin that failed
        entry = plugins.registry().entry(kind, name)
        obj, package = entry.obj, entry.package
        if isinstance(obj, EnvFile):
            obj = file_env(obj)
    doc = _doc(obj)
    out: dict[str, Any] = {"kind": kind, "name": name, "package": package,
                           "summary": doc.split("\n")[0], "doc": doc,
                           "settings": _settings(obj.Config)}
    if kind == "envs":
        out.update(_env_parts(obj, settings))
        out["options"] = _settings(EnvOptions)
    return out


def _env_parts(env_cls: Any, settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An env's seats, task rows, steps, verifiers (with the settings it gives them) and the
    results its steps write, from an instance made with ``settings`` over its defaults."""
    # An env's seats may depend on its settings (a property): read from the class when not.
    seats = {seat: _plain.unstructure(spec) for seat, spec in env_cls.seats.items()} \
        if isinstance(env_cls.seats, Mapping) else {}
    attrs.resolve_types(Task)
    task_docs = field_docs(Task)
    fields = [{"name": f.name, "type": type_text(f.type), "doc": task_docs.get(f.name, "")}
              for f in attrs.fields(Task) if f.init]
    try:
        own, options = split_options(dict(settings or {}))
        env = open_env(env_cls(own), options)
        steps = env.run_steps()
        seats = {seat: _plain.unstructure(spec) for seat, spec in env.seats.items()}
    except InterplayError as exc:  # an env that needs a setting it has no default for
        return {"seats": seats, "steps": [], "verifiers": [], "results": [],
                "task_fields": fields, "info_keys": [], "example_task": None,
                "needs": exc.message}
    writes: set[str] = set()
    for step in steps:
        writes |= set(step.writes)
    verifiers = []
    for verifier in env.run_verifiers():
        own = type(verifier).Config
        given = {s.name: s.default for s in settings_of(own, verifier.config,
                                                         keys_of_tables=False)}
        defaults = {s.name: s.default for s in settings_of(own, keys_of_tables=False)}
        verifiers.append({
            "name": verifier.name,
            "settings": given,
            # Where the env's settings are not the verifier's own defaults: a regrade that
            # names the verifier alone gets the defaults, not these.
            "differs_from_defaults": {k: {"env": v, "default": defaults.get(k)}
                                      for k, v in given.items() if defaults.get(k) != v},
        })
    try:
        first = next(iter(env.tasks()), None)
        example = None if first is None else _task_row(first)
        example_error = None
    except Exception as exc:  # a taskset that cannot be read here (a dataset offline)
        example, example_error = None, f"{type(exc).__name__}: {exc}"
    return {"seats": seats,
            # The env's settings with its own defaults (a tau2 env fixes its domain).
            "settings": _settings(env_cls.Config, env.config),
            "steps": [{"name": s.name, "settings": {
                x.name: x.default for x in settings_of(type(s).Config, s.config,
                                                       keys_of_tables=False)}}
                      for s in steps],
            "verifiers": verifiers,
            "results": sorted(writes),
            "task_fields": fields,
            "info_keys": sorted((example or {}).get("info") or {}),
            "example_task": example,
            **({"example_task_error": example_error} if example_error else {})}


def _task_row(task: Task) -> dict[str, Any]:
    row = _plain.unstructure(task)
    return {k: v for k, v in row.items() if not k.startswith("_")}


# -- text --------------------------------------------------------------------------------------


def _value(value: Any) -> str:
    return json.dumps(value, default=repr, ensure_ascii=False)


def settings_lines(settings: list[dict[str, Any]], indent: str = "  ") -> list[str]:
    if not settings:
        return [f"{indent}(no settings)"]
    out = []
    for s in settings:
        default = ("required" if s["required"] else
                   f"fixed {_value(s['default'])}; a config cannot set it" if s.get("fixed")
                   else f"default {_value(s['default'])}")
        allowed = (f"; one of {', '.join(_value(a) for a in s['allowed'])}"
                   if s["allowed"] else "")
        flag = f"; flag {s['flag']}" if s.get("flag") else ""
        out.append(f"{indent}{s['name']}: {s['type']} ({default}{allowed}{flag})")
        out.append(f"{indent}    {s['doc'] or '(undocumented)'}")
    return out


def text(info: dict[str, Any]) -> str:
    """``info`` (from :func:`describe`) as the terminal shows it."""
    what = SINGULAR.get(info["kind"], info["kind"])
    lines = [f"{what} {info['name']}  [{info['package']}]"]
    if info["doc"]:
        lines += ["", *(f"  {line}" if line else "" for line in info["doc"].split("\n"))]
    lines += ["", "settings:", *settings_lines(info["settings"])]
    if info.get("options"):
        lines += ["", "taken by every env (env.*; `interplay describe envs` explains them):",
                  *settings_lines(info["options"])]
    if "sampling_settings" in info:
        lines += ["", "sampling (model.sampling.*, seats.<seat>.sampling.*; unset: not sent):",
                  *settings_lines(info["sampling_settings"])]
    if "seat_settings" in info:
        lines += ["", "each seat (seats.<seat>.*):", *settings_lines(info["seat_settings"])]
    if info["kind"] != "envs":
        return "\n".join(lines)
    lines += ["", "seats:"]
    for seat, spec in info["seats"].items():
        lines.append(f"  {seat}: " + ", ".join(f"{k}={_value(v)}" for k, v in spec.items()
                                               if v not in ({}, None)))
    if info.get("needs"):
        lines += ["", f"with its defaults alone it cannot be made: {info['needs']}"]
    lines += ["", "steps:"]
    for step in info["steps"]:
        lines.append(f"  {step['name']}: " + ", ".join(f"{k}={_value(v)}" for k, v in
                                                       step["settings"].items()))
    lines += ["", "verifiers (as this env configures them):"]
    for v in info["verifiers"] or []:
        lines.append(f"  {v['name']}: " + (", ".join(f"{k}={_value(x)}" for k, x in
                                                     v["settings"].items()) or "(no settings)"))
        for key, d in v["differs_from_defaults"].items():
            lines.append(f"    {key}={_value(d['env'])} here; the verifier's own default is "
                         f"{_value(d['default'])}")
    if not info["verifiers"]:
        lines.append("  (none)")
    lines += ["", "writes ctx.results: " + (", ".join(info["results"]) or "(nothing)")]
    lines += ["", "task rows:"]
    for f in info["task_fields"]:
        lines.append(f"  {f['name']}: {f['type']}  {f['doc']}")
    if info["info_keys"]:
        lines.append(f"  info keys in the example: {', '.join(info['info_keys'])}")
    if info.get("example_task") is not None:
        lines += ["", "example task row:", "  " + _value(info["example_task"])]
    elif info.get("example_task_error"):
        lines += ["", f"example task row: cannot be read here ({info['example_task_error']})"]
    return "\n".join(lines)


# -- the reference pages -----------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _markdown_settings(settings: list[dict[str, Any]]) -> list[str]:
    if not settings:
        return ["No settings.", ""]
    flags = any("flag" in s for s in settings)
    out = ["| setting | type | default | meaning |" + (" flag |" if flags else ""),
           "|---|---|---|---|" + ("---|" if flags else "")]
    for s in settings:
        default = ("required" if s["required"] else
                   f"`{_value(s['default'])}` (fixed: a config cannot set it)" if s.get("fixed")
                   else f"`{_value(s['default'])}`")
        allowed = (" One of " + ", ".join(f"`{_value(a)}`" for a in s["allowed"]) + "."
                   if s["allowed"] else "")
        flag = (f" `{_cell(s['flag'])}` |" if s.get("flag") else " |") if flags else ""
        out.append(f"| `{s['name']}` | `{_cell(s['type'])}` | {_cell(default)} | "
                   f"{_cell(s['doc'])}{_cell(allowed)} |{flag}")
    return [*out, ""]


TITLES = {"envs": "Envs", "steps": "Steps", "verifiers": "Verifiers",
          "harnesses": "Harnesses", "sandboxes": "Sandboxes", "user-sims": "User sims",
          "scenario-kinds": "Scenario kinds", "model": "Model", "run": "The run"}


def markdown(kind: str, infos: Iterable[dict[str, Any]], command: str) -> str:
    """One reference page: every name of ``kind`` with its settings (and, for an env, its
    seats, verifiers as it configures them, and results); ``command`` made it."""
    lines = [f"# {TITLES[kind]}: settings", "",
             f"Generated from the settings classes by `{command}`: edit the classes, not this "
             f"page. `interplay describe {kind} NAME` prints the same for what is installed.",
             ""]
    if kind == "envs":
        lines += ["Every env takes these beside its own settings (`--set env.<setting>=...`): "
                  "the run's user sim for an env with a user, and verifiers beside the env's "
                  "own or instead of them.", "", *_markdown_settings(_settings(EnvOptions))]
    if kind == "run":
        lines += ["The top-level keys of a run's config (a `--config` TOML file, `--set "
                  "KEY=VALUE`), and the flag of `interplay eval` that sets each.", ""]
    for info in infos:
        lines += [f"## {info['name']}", "",
                  f"{info['summary'] or '(no description)'} *({info['package']})*", ""]
        if kind == "envs":
            lines += ["Settings go under `env.` (`--set env.<setting>=...`).", ""]
        if kind == "scenario-kinds":
            lines += ["Knobs go under `env.knobs.` of `always-on-generated`, or `interplay "
                      "generate KIND --set <knob>=...`.", ""]
        lines += _markdown_settings(info["settings"])
        if "sampling_settings" in info:
            lines += ["Sampling, under `model.sampling.` and `seats.<seat>.sampling.` (a "
                      "setting left unset is not sent; the endpoint's own default holds):", "",
                      *_markdown_settings(info["sampling_settings"])]
        if "seat_settings" in info:
            lines += ["Each seat, under `seats.<seat>.`:", "",
                      *_markdown_settings(info["seat_settings"])]
        if kind != "envs":
            continue
        lines += ["Seats: " + ", ".join(
            f"`{seat}` ({spec['harness']}" + ("" if spec["trainable"] else ", untrainable") + ")"
            for seat, spec in info["seats"].items()) + ".", ""]
        if info.get("needs"):
            lines += [f"With its defaults alone it cannot be made: {info['needs']}", ""]
        if not info["verifiers"] and not info.get("needs"):
            lines += ["Verifiers: none of its own.", ""]
        if info["verifiers"]:
            lines.append("Verifiers, as this env sets them:")
            lines.append("")
            for v in info["verifiers"]:
                differs = "; ".join(f"`{k} = {_value(d['env'])}` (the verifier's default: "
                                    f"`{_value(d['default'])}`)"
                                    for k, d in v["differs_from_defaults"].items())
                lines.append(f"- `{v['name']}`" + (f": {differs}" if differs else
                                                    " with its defaults"))
            lines.append("")
        lines += ["Writes `ctx.results`: " + (", ".join(f"`{k}`" for k in info["results"])
                                              or "nothing") + ".", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def reference_pages(packages: Iterable[str] | None = None,
                    command: str = "interplay describe --markdown DIR") -> dict[str, str]:
    """``{file name: page}``, one page per kind, for the names registered by ``packages``
    (every installed package when None); each page says ``command`` made it."""
    keep = None if packages is None else set(packages)
    pages = {}
    for kind in DESCRIBE_KINDS:
        infos = []
        for name in names(kind):
            if kind not in (MODEL, RUN):
                package = plugins.registry().entry(kind, name).package
                if keep is not None and package not in keep:
                    continue
            infos.append(describe(kind, name))
        pages[f"{kind}.md"] = markdown(kind, infos, command)
    return pages


def write_reference(folder: str | Path, packages: Iterable[str] | None = None) -> list[Path]:
    """Write :func:`reference_pages` into ``folder``; the paths written."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, page in reference_pages(packages).items():
        (out / name).write_text(page)
        written.append(out / name)
    return written


# -- the command -------------------------------------------------------------------------------


def add_describe(sub: Any) -> None:
    p = sub.add_parser(
        "describe", help="what an env, step, verifier, harness, user sim, scenario kind, the "
        "model endpoint or the run is, and every setting it takes",
        description="With KIND alone, list its names; with NAME, describe it: every setting "
        "with its type, default, allowed values and meaning; for an env also its seats, task "
        "rows, verifiers as it configures them and the results its steps write.")
    p.add_argument("kind", nargs="?", choices=DESCRIBE_KINDS)
    p.add_argument("name", nargs="?")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE",
                   help="an env's setting, as after env. in eval's --set (e.g. --set "
                   "relay.max_turns=2): its steps, verifiers and seats are shown with it")
    p.add_argument("--markdown", metavar="DIR", help="write the settings reference pages "
                   "(one per kind, every installed name) into DIR")
    p.set_defaults(func=cmd_describe)


def cmd_describe(args: argparse.Namespace) -> int:
    if args.markdown:
        for path in write_reference(args.markdown):
            print(path)
        return 0
    if args.kind is None:
        raise InterplayError(f"describe needs a KIND: one of {', '.join(DESCRIBE_KINDS)}")
    if args.name is None and args.kind not in (MODEL, RUN):
        found = names(args.kind)
        if args.json:
            print(json.dumps(found))
        else:
            print("\n".join(found))
        return 0
    if args.overrides and args.kind != "envs":
        raise InterplayError("describe --set takes an env's settings; name an env")
    # eval's form (--set env.game=...) is taken too, as an env's own errors write it.
    overrides = [o.removeprefix("env.") for o in args.overrides]
    info = describe(args.kind, args.name or args.kind, config.apply_overrides({}, overrides))
    print(json.dumps(info, indent=2, default=repr) if args.json else text(info))
    return 0

