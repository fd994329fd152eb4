"""The report: ``interplay report DIR`` turns a results folder into one HTML page a person reads.

Owns rendering ``DIR/report.html`` from ``config.json``, ``summary.json`` and
``episodes.jsonl``: what the run is, the summary figures and charts
(:mod:`interplay.report.figures`), a filterable table of episodes with CSV and JSON downloads,
and each episode's section (:mod:`interplay.report.episodes`). The page is self-contained
(inline CSS, JS and SVG, no network). The markup is Jinja2 templates (``templates/``) with
autoescape on, so every piece of a run's text is escaped without a call anyone could forget;
the modules beside this one only turn records into plain values for them. The embedded JSON
cannot close its ``<script>`` element; the table's rows are JSON the page's script writes as
text.

Episodes are read one at a time, in (task, rollout) order: what is held is a row per episode
and the charts' counts; each episode's details go through a temporary file into the page, up
to a budget of transcripts. It does not run anything or change the results.

``interplay view`` serves this same page for a run (:func:`render_to` with a :class:`Page`
whose ``live`` says where: the rows and the episodes' sections fetched from it, the figures
again as the run writes, :func:`render_figures`): one page, one script, whichever way it is
read. Each episode is read once into typed values
(:func:`~interplay.run.recorded.read_episode`), which its row, its section and the charts
read.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import math
import os
import tempfile
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import attrs
import jinja2
from markupsafe import Markup

from interplay._plumbing import codec as _codec
from interplay.errors import InterplayError
from interplay.report import charts
from interplay.report.episodes import (
    ROW_COLUMNS,
    TableRow,
    component_names,
    episode_view,
    table_row,
)
from interplay.report.figures import Figures, summary_view, table_seats
from interplay.report.label import read_label
from interplay.run.recorded import RecordedEpisode, read_episode
from interplay.run.results import finite
from interplay.values.plain import as_map, as_seq, as_text

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
    standard library's encoder is most of the page's build time on a large run), each row
    the list of its fields. Its numbers are finite already
    (:func:`~interplay.report.episodes.table_row`); orjson writes any other as null all the
    same."""
    return _script_safe(_codec.dumps(table).decode("utf-8", "replace"))


@functools.cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("interplay.report", "templates"),
                              autoescape=True, undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True)


def template(name: str) -> jinja2.Template:
    """One of the report's templates (``templates/NAME``), autoescaping everything."""
    return _environment().get_template(name)


@functools.lru_cache(maxsize=64)
def _describe_env(env_name: str, settings: str) -> str:
    """The first paragraph of the env's docstring (kept per env and settings: loading an env
    can read its taskset, and a served page asks again and again)."""
    try:
        from interplay.run.loader import load_env

        env_cls = type(load_env(env_name, json.loads(settings)))
        doc = (env_cls.__doc__ or "").strip()
        return " ".join(doc.split("\n\n")[0].split())
    except Exception:  # a plugin not installed here, an env file moved: the page goes on
        return ""


def _about(config: Mapping[str, Any], stored: Mapping[str, Any]) -> dict[str, Any]:
    """What a newcomer is looking at: the env as its author describes it, what scores it,
    and on the embedded model, what that model can show."""
    env = as_map(config.get("env"))
    description = _describe_env(as_text(env.get("name")), json.dumps(
        {k: v for k, v in env.items() if k != "name"}, sort_keys=True, default=repr))
    verifiers = [as_text(as_map(v).get("name") or as_map(v).get("kind"))
                 for v in as_seq(stored.get("verifiers"))]
    regrade = as_map(stored.get("regrade"))
    return {"description": description, "verifiers": verifiers,
            "embedded": as_map(config.get("model")).get("base_url") is None and bool(config),
            "regraded_from": as_text(regrade.get("from")) if regrade else ""}


def seat_lines(stored: Mapping[str, Any],
               seen: Mapping[str, tuple[str, str]] | None = None) -> list[dict[str, str]]:
    """Each seat of the run with the harness and the model that filled it: as config.json
    records the seats, else (a run recorded before it kept them) as the traces say
    (``seen``: seat -> (harness, model))."""
    out = []
    for seat, spec in as_map(stored.get("seats")).items():
        spec = as_map(spec)
        model = as_text(as_map(spec.get("model")).get("model"))
        if not model and not as_map(spec.get("model")).get("base_url"):
            model = "embedded"
        out.append({"seat": as_text(seat), "harness": as_text(spec.get("harness")) or "?",
                    "model": model})
    if not out and seen:
        out = [{"seat": seat, "harness": harness or "?", "model": model}
               for seat, (harness, model) in seen.items()]
    return out


def figures_context(config: Mapping[str, Any], summary: Mapping[str, Any], figures: Figures,
                    *, running: bool = False,
                    drawn: Sequence[Markup] | None = None) -> dict[str, Any]:
    """What ``run_figures.html.j2`` (the summary, its tables and the charts) is rendered
    with: the static page's and the live page's, and the fragment ``interplay view`` sends
    again as a run's episodes land. ``running``: the run is writing (not "incomplete");
    ``drawn``: the charts of ``figures``, drawn before (a live page asks again and again)."""
    charts_drawn = list(drawn) if drawn is not None else figures.draw(summary)
    return {"summary": summary_view(summary), "charts": charts_drawn,
            "charts_missing": charts.missing(), "running": running,
            "data": Markup(safe_json({"summary": summary, "config": config}))}


def render_figures(config: Mapping[str, Any], summary: Mapping[str, Any], figures: Figures,
                   *, running: bool = False, drawn: Sequence[Markup] | None = None) -> str:
    """The run's figures alone (``run_figures.html.j2``): the part of the page a live run
    changes."""
    return template("run_figures.html.j2").render(
        **figures_context(config, summary, figures, running=running, drawn=drawn))


@attrs.frozen
class RunHeader:
    """What the page's header says the run is: its config (``config.json``'s ``config``),
    the whole of ``config.json`` (its seats, verifiers, a regrade's source), its label
    (``interplay label``) and, for a run recorded before config.json kept its seats, each
    seat's harness and model as the traces say (:func:`note_seats`)."""

    config: Mapping[str, Any]
    stored: Mapping[str, Any] = attrs.Factory(dict)
    label: str = ""
    seen: Mapping[str, tuple[str, str]] | None = None


@attrs.frozen
class EpisodeTable:
    """The page's table of episodes, drawn by its script: the rows, the seats given a
    reward column, the stop conditions the rows' ``stops`` index, and how many episodes'
    sections the page kept within its budget of transcripts (MB). ``components``, ``errors``
    and ``total`` are what the filters offer and how many episodes there are, when the rows
    are not all here (``interplay view`` fetches them): None, those of ``rows``."""

    rows: Sequence[TableRow]
    seats: Sequence[str]
    stops: Sequence[str]
    kept: int
    budget_mb: float
    #: The results folder, as the page names it.
    folder: str = "DIR"
    components: Sequence[str] | None = None
    errors: Sequence[str] | None = None
    total: int | None = None


@attrs.frozen
class Page:
    """One run's page: its header, its figures and charts (``summary``, the charts'
    ``figures``, and the charts drawn before when a live page asks again), the episode table
    and the episodes' sections (``details``: each one rendered, streamed through).

    ``live`` makes it the page ``interplay view`` serves for a run: the table's rows and the
    episodes' sections are fetched from it (``live["table"]``: where), the scripts are its
    files, and the table's rows and ``details`` are empty."""

    header: RunHeader
    summary: Mapping[str, Any]
    figures: Figures
    table: EpisodeTable
    details: Iterable[str] = ()
    drawn: Sequence[Markup] | None = None
    live: Mapping[str, Any] | None = None


def render_to(out: IO[str], page: Page) -> None:
    """Write ``page`` to ``out``: the summary, charts, the episode table (drawn by the page's
    script) and the episodes' details, streamed through."""
    config, stored, t = page.header.config, page.header.stored, page.table
    env_name = as_text(as_map(config.get("env")).get("name")) or "run"
    model = as_map(config.get("model"))
    errors = t.errors if t.errors is not None else sorted(
        {r.error_type for r in t.rows if r.error_type})
    components = t.components if t.components is not None else component_names(t.rows)
    table: dict[str, Any] = {"columns": ROW_COLUMNS, "seats": list(t.seats),
                             "stops": list(t.stops), "components": list(components),
                             # Each row the list of its fields, as the script reads them.
                             "rows": [list(r) for r in t.rows], "kept": t.kept,
                             "budget_mb": t.budget_mb, "folder": t.folder}
    live = page.live
    if live is not None:
        table["live"] = live["table"]
    stream = template("report.html.j2").generate(
        title=f"interplay · {env_name}", env_name=env_name,
        model=as_text(model.get("model")),
        where=as_text(model.get("base_url")) or "embedded local model",
        rollouts=as_text(config.get("rollouts")), seed=as_text(config.get("seed")),
        seat_lines=seat_lines(stored, page.header.seen), label=page.header.label,
        about=_about(config, stored),
        per_seat=bool(t.seats), error_options=errors, stop_options=sorted(t.stops),
        component_options=list(components),
        episodes_total=len(t.rows) if t.total is None else t.total, kept=t.kept,
        budget_mb=t.budget_mb, details=(Markup(d) for d in page.details),
        table=Markup(_rows_json(table)), live=live,
        **figures_context(config, page.summary, page.figures, drawn=page.drawn,
                          running=bool(live and live.get("state") == "running")))
    for chunk in stream:
        out.write(chunk)


def render(config: Mapping[str, Any], summary: Mapping[str, Any],
           episodes: Sequence[Mapping[str, Any]], *, title: str = "",
           judged: Collection[str] = ()) -> str:
    """The whole page as text for episodes in memory (every transcript kept); ``judged``
    names the rubric verifiers, whose rewards are shown per criterion."""
    buf = io.StringIO()
    seats = table_seats(summary)
    stop_index: dict[str, int] = {}
    figures = Figures()
    rows, details = [], []
    seen: dict[str, tuple[str, str]] = {}
    for i, record in enumerate(episodes):
        ep = read_episode(record)
        figures.add(ep)
        note_seats(seen, ep)
        rows.append(table_row(i, ep, seats, stop_index))
        details.append(template("episode.html.j2").render(ep=episode_view(i, ep, judged)))
    table = EpisodeTable(rows=rows, seats=seats, stops=list(stop_index), kept=len(details),
                         budget_mb=math.inf)
    render_to(buf, Page(header=RunHeader(config=config, seen=seen), summary=summary,
                        figures=figures, table=table, details=details))
    return buf.getvalue()


def note_seats(seen: dict[str, tuple[str, str]], ep: RecordedEpisode) -> None:
    """Note the harness and model of each seat an episode's traces name, first come."""
    for t in ep.traces:
        if t.seat and t.seat not in seen and len(seen) < 64:
            seen[t.seat] = (t.harness, t.model)


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


def summary_is_current(summary: Any, episodes: int) -> bool:
    """Whether a folder's summary.json holds the figures of its ``episodes`` episodes (not
    those of a run that stopped before its summary, or of an older interplay)."""
    return isinstance(summary, Mapping) and summary.get("episodes") == episodes \
        and "completed" in summary


def pass_threshold(config: Mapping[str, Any]) -> float:
    """The reward a run's episode passes at, as its config says (1.0 unless set)."""
    threshold = config.get("pass_threshold", 1.0)
    return float(threshold) if isinstance(threshold, int | float) else 1.0


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
    stored = as_map(_read_json(out / CONFIG_FILE))
    config = as_map(stored.get("config"))
    judged = judged_names(recorded_verifiers(stored))
    summary = _read_json(out / SUMMARY_FILE)
    seats = table_seats(as_map(summary))
    episodes_path = out / EPISODES_FILE
    budget = transcripts_mb * 1_000_000
    used = 0
    kept = 0
    rows: list[TableRow] = []
    stop_index: dict[str, int] = {}
    figures = Figures()
    seen: dict[str, tuple[str, str]] = {}
    path = out / REPORT_FILE
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace",
                                dir=out if out.is_dir() else None) as held:
        for i, stored_ep in enumerate(iter_episodes(episodes_path, order="pair")):
            # A long episode's transcripts and records are in its side file: the page shows them.
            ep = read_episode(whole_record(stored_ep, out))
            figures.add(ep)
            note_seats(seen, ep)
            rows.append(table_row(i, ep, seats, stop_index))
            if used < budget * (1.0 if ep.is_error else 0.75):
                section = template("episode.html.j2").render(ep=episode_view(i, ep, judged))
                held.write(section)
                used += len(section.encode("utf-8", "replace"))
                kept += 1
        if not summary_is_current(summary, len(rows)):
            # No summary yet (a killed run) or an older one: the episodes are the truth.
            summary = summarize(list(iter_episodes(episodes_path, slim=True)),
                                pass_threshold=pass_threshold(config), judged=judged)
            if table_seats(summary) != seats:
                # The columns follow the summary's seats: the rows are made again with them.
                seats, stop_index, rows = table_seats(summary), {}, []
                for i, record in enumerate(iter_episodes(episodes_path, order="pair")):
                    rows.append(table_row(i, read_episode(whole_record(record, out)), seats,
                                          stop_index))
        held.seek(0)
        tmp = path.with_suffix(".html.tmp")
        try:
            # A lone surrogate (JSON can carry one; UTF-8 cannot) is shown as a replacement
            # mark.
            with tmp.open("w", encoding="utf-8", errors="replace") as page:
                table = EpisodeTable(rows=rows, seats=seats, stops=list(stop_index),
                                     kept=kept, budget_mb=transcripts_mb, folder=str(out))
                header = RunHeader(config=config, stored=stored, label=read_label(out),
                                   seen=seen)
                render_to(page, Page(header=header, summary=summary, figures=figures,
                                     table=table, details=_chunks(held)))
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
