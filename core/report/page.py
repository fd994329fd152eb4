"""The report: ``interplay report DIR`` turns a results folder into one HTML page a person reads.

Owns rendering ``DIR/report.html`` from ``config.json``, ``summary.json`` and
``episodes.jsonl``: what the run is, the summary figures, charts (:mod:`interplay.report.charts`),
a filterable table of episodes with CSV and JSON downloads, and each episode's transcript per
seat (tool calls, user turns, rewards, the verifiers' reasons); an always_on episode also as the
user's chat with times and wake by wake (values from :mod:`interplay.report.always_on`). The
page is self-contained (inline CSS, JS and SVG, no network). The markup is Jinja2 templates
(``templates/``) with autoescape on, so every piece of a run's text is escaped without a call
anyone could forget; this module only turns records into plain values for them, reading them
defensively (a field of an unexpected shape is shown as text, never a crash). The embedded JSON
cannot close its ``<script>`` element; the table's rows are JSON the page's script writes as
text.

Episodes are read one at a time, in (task, rollout) order: what is held is a row per episode
and the charts' counts; each episode's details go through a temporary file into the page, up
to a budget of transcripts. It does not run anything or change the results.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import math
import os
import tempfile
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import jinja2
from markupsafe import Markup

from interplay import _codec
from interplay.errors import InterplayError
from interplay.report import always_on, charts
from interplay.run.results import finite, finite_number
from interplay.run.summary import completion_text, is_error, reward_text, scored_reward

REPORT_FILE = "report.html"


def safe_json(data: Any) -> str:
    """JSON for inside a ``<script>`` element: no ``<``, ``>`` or ``&`` survives, so neither
    ``</script>`` nor ``<!--`` can end the element early. NaN and infinities (which
    ``JSON.parse`` rejects) become null."""
    return _script_safe(json.dumps(finite(data), ensure_ascii=False, default=repr,
                                   allow_nan=False))


def _script_safe(text: str) -> str:
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _rows_json(table: Mapping[str, Any]) -> str:
    """:func:`safe_json` of the episode table, made by orjson (a row per episode: the
    standard library's encoder is most of the page's build time on a large run). Its numbers
    are finite already (:func:`_row`); orjson writes any other as null all the same."""
    return _script_safe(_codec.dumps(table).decode("utf-8", "replace"))


@functools.cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("interplay.report", "templates"),
                              autoescape=True, undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True)


def template(name: str) -> jinja2.Template:
    """One of the report's templates (``templates/NAME``), autoescaping everything."""
    return _environment().get_template(name)


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


def _label(ep: Mapping[str, Any]) -> str:
    """What the episode was asked: the task's prompt, or for a task whose env makes its
    prompt (a puzzle, a game), the first message a seat was sent."""
    text = _prompt_text(_map(ep.get("task")).get("prompt"))
    if not text.strip():
        for t in map(_map, _seq(ep.get("traces"))):
            first = next((m for m in map(_map, _seq(t.get("messages")))
                          if m.get("role") == "user"), None)
            if first is not None:
                text = _content_text(first.get("content"))
                break
    label = " ".join(text.split())
    return label[:90] + ("…" if len(label) > 90 else "")


def cause(error: Any) -> str:
    """An error's one-line cause: its first line, shortened."""
    line = next((x.strip() for x in _text(error).splitlines() if x.strip()), "")
    return line[:160] + ("…" if len(line) > 160 else "")


def _episode(i: int, ep: Mapping[str, Any], judged: Collection[str]) -> dict[str, Any]:
    info, task = _map(ep.get("info")), _map(ep.get("task"))
    reward = scored_reward(ep)
    traces = [_map(t) for t in _seq(ep.get("traces"))]
    turns = _map(ep.get("metrics")).get("turns")
    stops = _stops(ep)
    record = _map(ep.get("results")).get("always_on")
    view = always_on.view(record)
    if view is not None:
        view["timeline_chart"] = charts.always_on_timeline(_map(record))
        view["latency_chart"] = charts.reply_latencies(_map(record))
    return {
        "index": i, "episode_id": _text(info.get("episode_id")),
        "task_idx": _text(info.get("task_idx")), "rollout": _text(info.get("rollout")),
        "seed": _text(info.get("seed")),
        "reward": _fmt(reward),
        "error_type": _text(ep.get("error_type")), "error": _text(ep.get("error")),
        "stops": stops, "turns": _fmt(turns),
        "calls": sum(len(_seq(t.get("model_calls"))) for t in traces),
        "wall_s": _fmt(ep.get("wall_s"), 3),
        "metrics": ", ".join(f"{k} = {_fmt(v)}" for k, v in _map(ep.get("metrics")).items()),
        "rewards": _rewards(ep.get("rewards"), judged),
        "system_prompt": _text(task.get("system_prompt")),
        "prompt": _prompt_text(task.get("prompt")), "answer": _json(task.get("answer")),
        "results": _json(ep["results"], indent=2) if ep.get("results") else "",
        "traces": [_trace(t, is_error(ep), judged) for t in traces],
        "always_on": view,
    }


def _row(i: int, ep: Mapping[str, Any], seats: Sequence[str], stop_index: dict[str, int],
         ) -> list[Any]:
    """An episode's row of the table, as the page's script reads it (see ROW_COLUMNS)."""
    info = _map(ep.get("info"))
    traces = [_map(t) for t in _seq(ep.get("traces"))]
    errored = is_error(ep)
    by_seat = {_seat(t): t.get("reward") for t in traces}
    seat_rewards = [None if errored or not finite_number(by_seat.get(s)) else by_seat[s]
                    for s in seats]
    stops = [stop_index.setdefault(s, len(stop_index)) for s in _stops(ep)]
    wall = ep.get("wall_s")
    turns = _map(ep.get("metrics")).get("turns")
    return [i, _text(info.get("episode_id")), info.get("task_idx"), info.get("rollout") or 0,
            scored_reward(ep), seat_rewards, _text(ep.get("error_type")), cause(ep.get("error")),
            stops, turns if finite_number(turns) else None,
            sum(len(_seq(t.get("model_calls"))) for t in traces),
            round(wall, 3) if finite_number(wall) else None, _label(ep)]


#: The fields of a row of the episode table, in order (the page's script and its CSV read
#: them by these names).
ROW_COLUMNS = ("index", "episode_id", "task", "rollout", "reward", "seat_rewards", "error_type",
               "error", "stops", "turns", "calls", "wall_s", "prompt")


RULE = ("Rewards, pass@k and metrics are over the completed episodes. An episode that ended in "
        "an error (a model fault, a user sim that failed, a failed verifier, an env that "
        "raised) is not scored: it is counted among the errors.")


def _per_seat(summary: Mapping[str, Any]) -> bool:
    """Whether the run's figures are its seats' rewards (a game scores each seat, never the
    episode)."""
    return not summary.get("scored") and bool(_map(summary.get("seat_rewards")))


def _summary(summary: Mapping[str, Any]) -> dict[str, Any]:
    expected = summary.get("expected")
    tokens = _map(summary.get("tokens"))
    figures = [
        ("episodes", f"{summary.get('episodes', 0)}" + (f" / {expected}" if expected else ""),
         "episodes"),
        ("completed", completion_text(summary), "completed"),
    ]
    if _per_seat(summary):
        for seat, v in _map(summary.get("seat_rewards")).items():
            v = _map(v)
            se = f" ± {v['stderr']:.3g}" if finite_number(v.get("stderr")) else ""
            figures.append((f"{seat}: mean reward ± se ({_fmt(v.get('n'))} scored)",
                            f"{_fmt(v.get('mean'))}{se}", "reward seat"))
    else:
        figures.append((f"mean reward ± se ({summary.get('scored', 0)} scored)",
                        reward_text(summary), "reward"))
    figures += [
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


class Figures:
    """What the run's charts draw, gathered episode by episode in bounded memory: rewards by
    value, each task's reward sum and count, and each seat's model calls in log-scale bins of
    completion tokens and of latency."""

    def __init__(self) -> None:
        self.rewards: Counter[float] = Counter()
        self.tasks: dict[int, list[float]] = {}
        self.tokens: dict[str, Counter[int]] = {}
        self.seconds: dict[str, Counter[int]] = {}

    def add(self, ep: Mapping[str, Any]) -> None:
        reward = scored_reward(ep)
        if reward is not None and math.isfinite(reward):
            self.rewards[round(reward, 4)] += 1
            idx = _map(ep.get("info")).get("task_idx")
            if isinstance(idx, int):
                acc = self.tasks.setdefault(idx, [0.0, 0])
                acc[0] += reward
                acc[1] += 1
        for t in _seq(ep.get("traces")):
            if isinstance(t, Mapping):
                self._calls(_seat(t), t.get("model_calls"))
        self._calls("judge", ep.get("judge_calls"))

    def _calls(self, seat: str, calls: Any) -> None:
        tokens = self.tokens.get(seat)
        seconds = self.seconds.get(seat)
        for call in _seq(calls):
            if not isinstance(call, Mapping):
                continue
            usage = call.get("usage")
            count = usage.get("completion_tokens") if isinstance(usage, Mapping) else None
            if type(count) is int and count > 0:
                if tokens is None:
                    tokens = self.tokens[seat] = Counter()
                tokens[charts.log_bin(count)] += 1
            latency = call.get("latency_s")
            if type(latency) is float and 0 < latency < math.inf:
                if seconds is None:
                    seconds = self.seconds[seat] = Counter()
                seconds[charts.log_bin(latency)] += 1

    def draw(self, summary: Mapping[str, Any]) -> list[Markup]:
        drawn = [
            charts.reward_distribution(self.rewards),
            charts.pass_at_k(_map(summary.get("pass_at_k")), _map(summary.get("pass_hat_k")),
                             _fmt(summary.get("pass_threshold"))),
            charts.reward_per_task({t: (s / n, int(n)) for t, (s, n) in self.tasks.items()}),
            charts.per_call(self.tokens, self.seconds),
            charts.errors({str(k): int(v) for k, v in _map(summary.get("errors")).items()
                           if isinstance(v, int)}),
        ]
        return [c for c in drawn if c is not None]


def _about(config: Mapping[str, Any], stored: Mapping[str, Any]) -> dict[str, Any]:
    """What a newcomer is looking at: the env as its author describes it, what scores it,
    and on the embedded model, what that model can show."""
    env_name = _text(_map(config.get("env")).get("name"))
    description = ""
    try:
        from interplay.loader import load_env

        env_cls = type(load_env(env_name, {k: v for k, v in _map(config.get("env")).items()
                                           if k != "name"}))
        doc = (env_cls.__doc__ or "").strip()
        description = " ".join(doc.split("\n\n")[0].split())
    except Exception:  # a plugin not installed here, an env file moved: the page goes on
        description = ""
    verifiers = [_text(_map(v).get("name") or _map(v).get("kind"))
                 for v in _seq(stored.get("verifiers"))]
    regrade = _map(stored.get("regrade"))
    return {"description": description, "verifiers": verifiers,
            "embedded": _map(config.get("model")).get("base_url") is None and bool(config),
            "regraded_from": _text(regrade.get("from")) if regrade else ""}


def render_to(out: IO[str], config: Mapping[str, Any], summary: Mapping[str, Any],
              rows: Sequence[Sequence[Any]], details: Iterable[str], *, stops: Sequence[str],
              seats: Sequence[str], figures: Figures, kept: int, budget_mb: float,
              folder: str = "DIR", stored: Mapping[str, Any] | None = None) -> None:
    """Write the page to ``out``: the summary, charts, the episode table (``rows``, drawn by
    the page's script) and the episodes' details (``details``: each one's rendered section,
    streamed through)."""
    env_name = _text(_map(config.get("env")).get("name")) or "run"
    model = _map(config.get("model"))
    errors = sorted({r[6] for r in rows if r[6]})
    table = {"columns": ROW_COLUMNS, "seats": list(seats), "stops": list(stops),
             "rows": rows, "kept": kept, "budget_mb": budget_mb, "folder": folder}
    stream = template("report.html.j2").generate(
        title=f"interplay · {env_name}", env_name=env_name,
        model=_text(model.get("model")),
        where=_text(model.get("base_url")) or "embedded local model",
        rollouts=_text(config.get("rollouts")), seed=_text(config.get("seed")),
        summary=_summary(summary), charts=figures.draw(summary),
        charts_missing=charts.missing(), about=_about(config, stored or {}),
        per_seat=bool(seats), error_options=errors, stop_options=sorted(stops),
        episodes_total=len(rows), kept=kept, budget_mb=budget_mb,
        details=(Markup(d) for d in details),
        data=Markup(safe_json({"summary": summary, "config": config})),
        table=Markup(_rows_json(table)))
    for chunk in stream:
        out.write(chunk)


def render(config: Mapping[str, Any], summary: Mapping[str, Any],
           episodes: Sequence[Mapping[str, Any]], *, title: str = "",
           judged: Collection[str] = ()) -> str:
    """The whole page as text for episodes in memory (every transcript kept); ``judged``
    names the rubric verifiers, whose rewards are shown per criterion."""
    buf = io.StringIO()
    seats = _table_seats(summary)
    stop_index: dict[str, int] = {}
    figures = Figures()
    rows, details = [], []
    for i, ep in enumerate(episodes):
        figures.add(ep)
        row = _row(i, ep, seats, stop_index)
        rows.append(row)
        details.append(template("episode.html.j2").render(ep=_episode(i, ep, judged)))
    render_to(buf, config, summary, rows, details, stops=list(stop_index), seats=seats,
              figures=figures, kept=len(details), budget_mb=math.inf)
    return buf.getvalue()


def _table_seats(summary: Mapping[str, Any]) -> list[str]:
    """The seats the table gives a reward column of their own: every rewarded seat of a run
    with more than one, or of a run scored only per seat."""
    seats = list(_map(summary.get("seat_rewards")))
    return seats if len(seats) > 1 or _per_seat(summary) else []


# -- files -------------------------------------------------------------------------------------


#: The episodes' details (transcripts, chats, timelines) a page keeps, in MB: past it an
#: episode's row is still in the table, and its details are left out. Error episodes may use
#: the whole budget, the others three quarters of it, so a large run's failures stay readable.
TRANSCRIPTS_MB = 3.0


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        raise InterplayError(f"{path}: not valid JSON; rerun or resume the eval") from None


def write_report(folder: str | Path, *, transcripts_mb: float = TRANSCRIPTS_MB) -> Path:
    """Render ``folder/report.html`` from the results there; returns its path. The episodes
    are read one at a time, in (task, rollout) order: what is held is each episode's table
    row and the charts' counts, while the details go through a temporary file."""
    from interplay.run.results import (
        CONFIG_FILE,
        EPISODES_FILE,
        SUMMARY_FILE,
        iter_episodes,
        judged_names,
        recorded_verifiers,
        whole_record,
    )
    from interplay.run.summary import summarize

    out = Path(folder)
    if not (out / EPISODES_FILE).is_file() and not (out / CONFIG_FILE).is_file():
        raise InterplayError(f"{out}: not a results folder (no {EPISODES_FILE}); "
                             f"point `interplay report` at the -o folder of `interplay eval`")
    if not transcripts_mb >= 0:
        raise InterplayError(f"--transcripts-mb: expected 0 or more, got {transcripts_mb}")
    stored = _map(_read_json(out / CONFIG_FILE))
    config = _map(stored.get("config"))
    judged = judged_names(recorded_verifiers(stored))
    summary = _read_json(out / SUMMARY_FILE)
    seats = _table_seats(_map(summary))
    episodes_path = out / EPISODES_FILE
    budget = transcripts_mb * 1_000_000
    used = 0
    kept = 0
    rows: list[list[Any]] = []
    stop_index: dict[str, int] = {}
    figures = Figures()
    path = out / REPORT_FILE
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace",
                                dir=out if out.is_dir() else None) as held:
        for i, stored_ep in enumerate(iter_episodes(episodes_path, order="pair")):
            # A long episode's transcripts and records are in its side file: the page shows them.
            ep = whole_record(stored_ep, out)
            figures.add(ep)
            rows.append(_row(i, ep, seats, stop_index))
            if used < budget * (1.0 if is_error(ep) else 0.75):
                section = template("episode.html.j2").render(ep=_episode(i, ep, judged))
                held.write(section)
                used += len(section.encode("utf-8", "replace"))
                kept += 1
        if not isinstance(summary, Mapping) or summary.get("episodes") != len(rows) \
                or "completed" not in summary:
            # No summary yet (a killed run) or an older one: the episodes are the truth.
            threshold = config.get("pass_threshold", 1.0)
            summary = summarize(list(iter_episodes(episodes_path, slim=True)),
                                pass_threshold=float(threshold)
                                if isinstance(threshold, int | float) else 1.0, judged=judged)
            if _table_seats(summary) != seats:
                # The columns follow the summary's seats: the rows are made again with them.
                seats, stop_index, rows = _table_seats(summary), {}, []
                for i, ep in enumerate(iter_episodes(episodes_path, order="pair")):
                    rows.append(_row(i, whole_record(ep, out), seats, stop_index))
        held.seek(0)
        tmp = path.with_suffix(".html.tmp")
        try:
            # A lone surrogate (JSON can carry one; UTF-8 cannot) is shown as a replacement
            # mark.
            with tmp.open("w", encoding="utf-8", errors="replace") as page:
                render_to(page, config, summary, rows, _chunks(held), stops=list(stop_index),
                          seats=seats, figures=figures, kept=kept, budget_mb=transcripts_mb,
                          folder=str(out), stored=stored)
            os.replace(tmp, path)
        except OSError as exc:
            raise InterplayError(f"{path}: cannot write it ({exc.strerror or exc})") from None
    return path


def _chunks(fh: IO[str], size: int = 1 << 20) -> Iterator[str]:
    while chunk := fh.read(size):
        yield chunk


def add_report(sub: Any) -> None:
    p = sub.add_parser("report", help="write DIR/report.html from a results folder",
                       description="Render a results folder of `interplay eval` as one "
                       "self-contained HTML page (no network needed to view it).")
    p.add_argument("dir", help="the results folder")
    p.add_argument("--transcripts-mb", type=float, default=TRANSCRIPTS_MB, metavar="MB",
                   help=f"episodes' transcripts the page keeps, in MB (default "
                   f"{TRANSCRIPTS_MB:g}); past it, episodes are listed without them")
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    path = write_report(args.dir, transcripts_mb=args.transcripts_mb)
    print(f"report: {path}")
    return 0
