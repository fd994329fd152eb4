"""The report: ``interplay report DIR`` turns a results folder into one HTML page a person reads.

Owns rendering ``DIR/report.html`` from ``config.json``, ``summary.json`` and
``episodes.jsonl``: the summary figures, a filterable table of episodes, and each episode's
transcript per seat (tool calls, user turns, rewards, the verifiers' reasons); an always_on
episode also as the user's chat with times and wake by wake (values from
:mod:`interplay.report.always_on`). The page is
self-contained (inline CSS and JS, no network). The markup is a Jinja2 template
(``templates/report.html.j2``) with autoescape on, so every piece of a run's text is escaped
without a call anyone could forget; this module only turns records into plain values for it,
reading them defensively (a field of an unexpected shape is shown as text, never a crash). The
embedded JSON cannot close its ``<script>`` element. It does not run anything or change the
results.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from interplay.errors import InterplayError
from interplay.report import always_on
from interplay.run.results import finite
from interplay.run.summary import completion_text, is_error, reward_text, scored_reward

REPORT_FILE = "report.html"


def safe_json(data: Any) -> str:
    """JSON for inside a ``<script>`` element: no ``<``, ``>`` or ``&`` survives, so neither
    ``</script>`` nor ``<!--`` can end the element early. NaN and infinities (which
    ``JSON.parse`` rejects) become null."""
    text = json.dumps(finite(data), ensure_ascii=False, default=repr, allow_nan=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


@functools.cache
def _template() -> jinja2.Template:
    env = jinja2.Environment(loader=jinja2.PackageLoader("interplay.report", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    return env.get_template("report.html.j2")


# -- records to plain values ------------------------------------------------------------------


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _seq(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else ()


def _text(value: Any) -> str:
    return "" if value is None else value if isinstance(value, str) else _json(value)


def _json(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=False, default=repr)


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _content_text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(_text(part.get("text")) if isinstance(part, Mapping) and "text" in part
                         else _text(part) for part in content)
    return _text(content)


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, list):
        return "\n".join(f"{_text(_map(m).get('role'))}: {_content_text(_map(m).get('content'))}"
                         for m in prompt)
    return _text(prompt)


def _pretty_args(arguments: Any) -> str:
    try:
        return _json(json.loads(arguments), indent=2)
    except (TypeError, ValueError):
        return _text(arguments)


def _stops(ep: Mapping[str, Any]) -> list[str]:
    return [f"{_seat(_map(t))}: {_text(_map(t).get('stop_condition'))}"
            for t in _seq(ep.get("traces"))]


def _seat(t: Mapping[str, Any]) -> str:
    return _text(t.get("seat") or t.get("agent"))


_ROLES = ("system", "developer", "user", "assistant", "tool")


def _message(m: Mapping[str, Any]) -> dict[str, Any]:
    role = _text(m.get("role")) or "?"
    return {"role": role, "role_class": role if role in _ROLES else "other",
            "name": _text(m.get("name")), "tool_call_id": _text(m.get("tool_call_id")),
            "text": _content_text(m.get("content")),
            "tool_calls": [{"name": _text(_map(_map(c).get("function")).get("name")),
                            "id": _text(_map(c).get("id")),
                            "arguments": _pretty_args(_map(_map(c).get("function"))
                                                      .get("arguments"))}
                           for c in _seq(m.get("tool_calls"))]}


def _messages(messages: Any) -> list[dict[str, Any]]:
    if messages is not None and not isinstance(messages, list | tuple):
        # Not a list of messages: shown as what it is rather than dropped.
        return [_message({"role": "?", "content": messages})]
    return [_message(_map(m)) for m in _seq(messages)]


def _rewards(rewards: Any, judged: Collection[str]) -> list[dict[str, Any]]:
    """Rewards as rows; a judge's (a rubric verifier's, named in ``judged``) with a row per
    criterion: its score, weight and reason."""
    out = []
    for r in map(_map, _seq(rewards)):
        name = _text(r.get("name"))
        criteria = _map(_map(r.get("info")).get("criteria")) if name in judged else {}
        out.append({"name": name, "value": _fmt(r.get("value")),
                    "weight": _fmt(r.get("weight")), "seat": _text(r.get("seat")),
                    "reason": _text(r.get("reason")),
                    "criteria": [{"name": _text(c), "score": _fmt(_map(v).get("score")),
                                  "weight": _fmt(_map(v).get("weight")),
                                  "reason": _text(_map(v).get("reason"))}
                                 for c, v in criteria.items()]})
    return out


def _trace(t: Mapping[str, Any], errored: bool, judged: Collection[str]) -> dict[str, Any]:
    calls = [_map(c) for c in _seq(t.get("model_calls"))]
    tokens = 0
    for c in calls:
        count = _map(c.get("usage")).get("total_tokens")
        tokens += count if isinstance(count, int) else 0
    return {"seat": _seat(t), "agent": _text(t.get("agent")), "harness": _text(t.get("harness")),
            "model": _text(t.get("model")), "trainable": t.get("trainable") is True,
            "stop_condition": _text(t.get("stop_condition")),
            "reward": "-" if errored else _fmt(t.get("reward")), "calls": len(calls),
            "failed_calls": sum(1 for c in calls if c.get("error_type")), "tokens": tokens,
            "tool_runs": len(_seq(t.get("tool_runs"))),
            "error_type": _text(t.get("error_type")), "error": _text(t.get("error")),
            "messages": _messages(t.get("messages")),
            "rewards": _rewards(t.get("rewards"), judged)}


def _episode(i: int, ep: Mapping[str, Any], judged: Collection[str]) -> dict[str, Any]:
    info, task = _map(ep.get("info")), _map(ep.get("task"))
    reward = scored_reward(ep)
    traces = [_map(t) for t in _seq(ep.get("traces"))]
    label = " ".join(_prompt_text(task.get("prompt")).split())
    turns = _map(ep.get("metrics")).get("turns")
    stops = _stops(ep)
    return {
        "index": i, "episode_id": _text(info.get("episode_id")),
        "task_idx": _text(info.get("task_idx")), "rollout": _text(info.get("rollout")),
        "seed": _text(info.get("seed")),
        # What the filters read: the reward the episode counts with (none for an error).
        "reward_attr": "" if reward is None else repr(reward), "reward": _fmt(reward),
        "error_type": _text(ep.get("error_type")), "error": _text(ep.get("error")),
        "stops": stops, "stops_json": _json(stops),
        "turns": _fmt(turns), "calls": sum(len(_seq(t.get("model_calls"))) for t in traces),
        "wall_s": _fmt(ep.get("wall_s"), 3),
        "label": label[:90] + ("…" if len(label) > 90 else ""),
        "metrics": ", ".join(f"{k} = {_fmt(v)}" for k, v in _map(ep.get("metrics")).items()),
        "rewards": _rewards(ep.get("rewards"), judged),
        "system_prompt": _text(task.get("system_prompt")),
        "prompt": _prompt_text(task.get("prompt")), "answer": _json(task.get("answer")),
        "results": _json(ep["results"], indent=2) if ep.get("results") else "",
        "traces": [_trace(t, is_error(ep), judged) for t in traces],
        "always_on": always_on.view(_map(ep.get("results")).get("always_on")),
    }


RULE = ("Rewards, pass@k and metrics are over the completed episodes. An episode that ended in "
        "an error (a model fault, a user sim that failed, a failed verifier, an env that "
        "raised) is not scored: it is counted among the errors.")


def _summary(summary: Mapping[str, Any]) -> dict[str, Any]:
    expected = summary.get("expected")
    tokens = _map(summary.get("tokens"))
    figures = [
        ("episodes", f"{summary.get('episodes', 0)}" + (f" / {expected}" if expected else ""),
         "episodes"),
        ("completed", completion_text(summary), "completed"),
        (f"mean reward ± se ({summary.get('scored', 0)} scored)", reward_text(summary),
         "reward"),
        ("error episodes (not scored)", _fmt(summary.get("error_episodes", 0)), "errors"),
        ("tokens", f"{tokens.get('total_tokens', 0):,}", "tokens"),
        ("model calls", f"{summary.get('model_calls', 0):,}", "calls"),
    ]
    if summary.get("wall_s") is not None:
        figures.append(("wall time", f"{_fmt(summary['wall_s'], 3)} s", "wall"))
    passk = [(f"pass@{k}", _fmt(v)) for k, v in _map(summary.get("pass_at_k")).items()]
    passk += [(f"pass^{k}", _fmt(v)) for k, v in _map(summary.get("pass_hat_k")).items()]
    seats = [(seat, _fmt(_map(v).get("mean"))) for seat, v in
             _map(summary.get("seat_rewards")).items()]
    criteria = [(f"{name}.{c}", f"{_fmt(_map(v).get('mean'))} (n={_fmt(_map(v).get('n'))})")
                for name, by in _map(summary.get("criteria")).items()
                for c, v in _map(by).items()]
    tables = [
        (f"pass (reward ≥ {_fmt(summary.get('pass_threshold'))})", passk, "passk"),
        ("judge criteria (mean)", criteria, "criteria"),
        ("reward per seat (mean)", seats, "seats"),
        ("metrics (mean)", _map(summary.get("metrics")).items(), "metrics"),
        ("stop conditions", _map(summary.get("stop_conditions")).items(), "stops"),
        ("errors", _map(summary.get("errors")).items(), "errtypes"),
        ("tokens", tokens.items(), "tokentable"),
    ]
    return {"figures": [{"label": label, "value": value, "cls": cls}
                        for label, value, cls in figures],
            "rule": RULE,
            "incomplete": bool(summary.get("interrupted")) or not summary.get("complete", True),
            "tables": [{"title": title, "cls": cls,
                        "rows": [(_text(k), _fmt(v)) for k, v in rows]}
                       for title, rows, cls in tables]}


def render(config: Mapping[str, Any], summary: Mapping[str, Any],
           episodes: Sequence[Mapping[str, Any]], *, title: str = "",
           judged: Collection[str] = ()) -> str:
    """The whole page as text; ``judged`` names the rubric verifiers, whose rewards are
    shown per criterion."""
    env_name = _text(_map(config.get("env")).get("name")) or "run"
    model = _map(config.get("model"))
    views = [_episode(i, ep, judged) for i, ep in enumerate(episodes)]
    return _template().render(
        title=title or f"interplay · {env_name}", env_name=env_name,
        model=_text(model.get("model")),
        where=_text(model.get("base_url")) or "embedded local model",
        rollouts=_text(config.get("rollouts")), seed=_text(config.get("seed")),
        summary=_summary(summary), episodes=views,
        error_options=sorted({v["error_type"] for v in views if v["error_type"]}),
        stop_options=sorted({s for v in views for s in v["stops"]}),
        data=Markup(safe_json({"summary": summary, "config": config})))


# -- files -------------------------------------------------------------------------------------


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        raise InterplayError(f"{path}: not valid JSON; rerun or resume the eval") from None


def write_report(folder: str | Path) -> Path:
    """Render ``folder/report.html`` from the results there; returns its path."""
    from interplay.run.results import (
        CONFIG_FILE,
        EPISODES_FILE,
        SUMMARY_FILE,
        judged_names,
        read_episodes,
        recorded_verifiers,
        whole_record,
    )
    from interplay.run.summary import summarize

    out = Path(folder)
    if not (out / EPISODES_FILE).is_file() and not (out / CONFIG_FILE).is_file():
        raise InterplayError(f"{out}: not a results folder (no {EPISODES_FILE}); "
                             f"point `interplay report` at the -o folder of `interplay eval`")
    stored = _map(_read_json(out / CONFIG_FILE))
    config = _map(stored.get("config"))
    judged = judged_names(recorded_verifiers(stored))
    # A long episode's transcripts and records are in its side file: the page shows them.
    episodes = [whole_record(e, out) for e in read_episodes(out / EPISODES_FILE)]
    episodes.sort(key=lambda e: (int(e["info"]["task_idx"]), int(e["info"].get("rollout") or 0)))
    summary = _read_json(out / SUMMARY_FILE)
    if not isinstance(summary, Mapping) or summary.get("episodes") != len(episodes) \
            or "completed" not in summary:
        # No summary yet (a killed run) or an older one: the episodes are the truth.
        threshold = config.get("pass_threshold", 1.0)
        summary = summarize(episodes, pass_threshold=float(threshold)
                            if isinstance(threshold, int | float) else 1.0, judged=judged)
    page = render(config, summary, episodes, judged=judged)
    path = out / REPORT_FILE
    tmp = path.with_suffix(".html.tmp")
    try:
        # A lone surrogate (JSON can carry one; UTF-8 cannot) is shown as a replacement mark.
        tmp.write_bytes(page.encode("utf-8", "replace"))
        os.replace(tmp, path)
    except OSError as exc:
        raise InterplayError(f"{path}: cannot write it ({exc.strerror or exc})") from None
    return path


def add_report(sub: Any) -> None:
    p = sub.add_parser("report", help="write DIR/report.html from a results folder",
                       description="Render a results folder of `interplay eval` as one "
                       "self-contained HTML page (no network needed to view it).")
    p.add_argument("dir", help="the results folder")
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    path = write_report(args.dir)
    print(f"report: {path}")
    return 0
