"""The web app of ``interplay view``: starlette routes over a
:class:`~interplay.view.folder.RunsFolder`, read-only (GET and HEAD; any other method is a 405),
every page rendered by the report's own templates and functions (:mod:`interplay.report`; the
comparison by :mod:`interplay.compare`), so the live view and the static report cannot drift
apart.

Pages: ``/`` (the runs), ``/run?id=KEY`` (a run: the report's page with its rows and
episodes fetched), ``/compare?run=A&run=B`` (what ``interplay compare --html`` writes).
Data: ``/api/runs``, ``/api/rows``, ``/api/episode``, ``/api/figures``, ``/api/find``, and
``/api/events`` (Server-Sent Events: what changed). Scripts and the icon come from the
package (``/static/NAME``, a fixed set), never from the folder.

What it refuses: a Host header that is not the address it serves (DNS rebinding: a web page
elsewhere cannot read the runs through the browser), a run or episode it did not find (404),
bad parameters (400, one line). Every answer carries a Content-Security-Policy that lets a
page load nothing from anywhere but the server.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.resources
import io
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import Route

from interplay._plumbing import codec as _codec
from interplay.errors import InterplayError
from interplay.log import get_logger
from interplay.report.episodes import episode_view
from interplay.report.figures import table_seats
from interplay.report.label import read_label
from interplay.report.page import (
    EpisodeTable,
    Page,
    RunHeader,
    render_figures,
    render_to,
    template,
)
from interplay.run.results import SUMMARY_FILE
from interplay.view.folder import Hub, RunsFolder, card, differing, masked
from interplay.view.runs import RunIndex, read_json, rows_query, run_state

log = get_logger("interplay.view")

#: Loads nothing but from the server: scripts only from its files (never inline), the charts'
#: inline SVG styles, no frame around it.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
       "form-action 'none'; frame-ancestors 'none'")
HEADERS = {"content-security-policy": CSP, "x-content-type-options": "nosniff",
           "referrer-policy": "no-referrer", "cache-control": "no-store"}
#: The package's files the pages load: (the package holding it, its type).
STATIC = {"report.js": ("interplay.report", "text/javascript; charset=utf-8"),
          "view.js": ("interplay.view", "text/javascript; charset=utf-8"),
          "icon.svg": ("interplay.view", "image/svg+xml")}
#: Seconds an SSE stream stays quiet at most: a comment then shows the connection is alive
#: (and finds a page that went away).
PING_S = 15.0
#: Seconds an episode asked for waits for the first reading of its run to reach it.
READ_WAIT_S = 30.0


@functools.cache
def _environment() -> jinja2.Environment:
    loader = jinja2.ChoiceLoader([jinja2.PackageLoader("interplay.view", "templates"),
                                  jinja2.PackageLoader("interplay.report", "templates")])
    return jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True)


@functools.cache
def _static(name: str) -> bytes:
    package, _ = STATIC[name]
    return importlib.resources.files(package).joinpath("templates", name).read_bytes()


class Refused(Exception):
    """A request the view answers with a client error (status, one line)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _json(data: Any, status: int = 200) -> Response:
    return Response(_codec.dumps(data), status, headers=HEADERS, media_type="application/json")


def _html(text: str, status: int = 200) -> Response:
    return HTMLResponse(text, status, headers=HEADERS)


def _one(request: Request, name: str) -> str:
    values = request.query_params.getlist(name)
    if len(values) != 1 or not values[0]:
        raise Refused(400, f"{name}: give it once")
    return values[0]


def make_app(folder: RunsFolder, hub: Hub, *, allowed_hosts: list[str] | None = None) -> Starlette:
    """The app over ``folder``; ``allowed_hosts``: the Host headers it answers (None: any,
    for a server bound to all addresses)."""

    def guarded(handler: Callable[[Request], Awaitable[Response]], *,
                page: bool = False) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                return await handler(request)
            except Refused as exc:
                return _refused(exc.status, exc.message, page)
            except LookupError as exc:
                return _refused(404, str(exc.args[0] if exc.args else exc), page)
            except InterplayError as exc:
                return _refused(400, exc.message, page)
        return endpoint

    async def index_of(request: Request, name: str = "run") -> RunIndex:
        key = _one(request, name)
        folder.get(key)  # LookupError before any reading
        return await asyncio.to_thread(folder.index, key)

    async def home(request: Request) -> Response:
        return _html(_environment().get_template("runs.html.j2").render(
            root=str(folder.root), static="/static/"))

    async def runs(request: Request) -> Response:
        def cards() -> list[dict[str, Any]]:
            out = [card(run) for run in folder.all()]
            differing(out)
            return out

        found = await asyncio.to_thread(cards)
        for c in found:
            if c["reading"]:
                _read_soon(folder, c["key"])  # once: then its index reads on its own
        found.sort(key=lambda c: (-(c["started_at"] or 0.0), c["key"]))
        return _json({"root": str(folder.root), "runs": found, "truncated": folder.truncated})

    async def run_card(request: Request) -> Response:
        run = folder.get(_one(request, "run"))
        found = await asyncio.to_thread(card, run)
        if found["reading"]:
            _read_soon(folder, run.key)
        return _json(found)

    async def run_page(request: Request) -> Response:
        index = await index_of(request, "id")
        text = await asyncio.to_thread(_run_page, index, index.key)
        return _html(text)

    async def rows(request: Request) -> Response:
        index = await index_of(request)
        query = rows_query(request.query_params)
        page = await asyncio.to_thread(index.rows_page, query)
        # Each row the list of its fields, as the page's script reads them.
        return _json({**page, "rows": [list(r) for r in page["rows"]]})

    async def episode(request: Request) -> Response:
        index = await index_of(request)
        params = request.query_params
        if "i" in params:
            try:
                wanted: dict[str, Any] = {"index": int(params["i"])}
            except ValueError:
                raise Refused(400, "i: expected an episode's row number") from None
        else:
            wanted = {"episode_id": _one(request, "id")}
        # A link to an episode of a run still being read: its line may come further on.
        for _ in range(int(READ_WAIT_S * 10)):
            try:
                pos = index.position(**wanted)
                break
            except LookupError:
                if index.caught_up:
                    raise
                await asyncio.sleep(0.1)
        else:
            pos = index.position(**wanted)

        def section() -> str:
            ep = index.episode(pos)
            return template("episode.html.j2").render(ep=episode_view(pos, ep, index.judged))

        return _html(await asyncio.to_thread(section))

    async def figures(request: Request) -> Response:
        index = await index_of(request)
        return _html(await asyncio.to_thread(_figures, index))

    async def find(request: Request) -> Response:
        """The runs in which a task passed (or failed, or ran): each run's index read to the
        end of its episodes file for it, so that no run answers from what it had read so far
        (a large run still being read, a line not yet followed)."""
        try:
            task = int(_one(request, "task"))
        except ValueError:
            raise Refused(400, "task: expected a task's index") from None
        outcome = request.query_params.get("outcome", "pass")
        if outcome not in ("pass", "fail", "any"):
            raise Refused(400, "outcome: expected pass, fail or any")

        def search() -> list[dict[str, Any]]:
            out = []
            for run in sorted(folder.all(), key=lambda r: r.key):
                index = folder.index(run.key)
                index.refresh(functools.partial(folder.on_read, run.key))
                page = index.rows_page(rows_query(
                    {"task": str(task), "limit": "all",
                     "reward": "" if outcome == "any" else outcome}))
                if page["matched"]:
                    out.append({"key": run.key, "episodes": page["matched"],
                                "rollouts": sorted(r.rollout for r in page["rows"])})
            return out

        return _json({"task": task, "outcome": outcome,
                      "runs": await asyncio.to_thread(search)})

    async def compare_page(request: Request) -> Response:
        keys = request.query_params.getlist("run")
        if len(keys) < 2:
            raise Refused(400, "run: name two runs or more (run=A&run=B)")
        if len(keys) > 8:
            raise Refused(400, "run: eight runs at most")
        runs = [folder.get(k) for k in keys]
        common = request.query_params.get("common", "") in ("1", "true")

        def render() -> Response:
            from interplay.compare import compare, load_run
            from interplay.compare.figures import NotComparable
            from interplay.compare.page import render as render_compare

            loaded = [load_run(r.folder, r.key) for r in runs]
            try:
                result = compare(loaded, common=common)
            except NotComparable as exc:
                # Runs of other envs or tasks: the line says how, and a link (not the
                # command's flag) asks for the tasks they share.
                again = None if common else urlencode([("run", k) for k in keys])
                return _html(_environment().get_template("message.html.j2").render(
                    title="interplay compare", message=exc.reason if again else exc.message,
                    static="/static/", common=again), 400)
            except InterplayError as exc:
                return _html(_environment().get_template("message.html.j2").render(
                    title="interplay compare", message=exc.message, static="/static/",
                    common=None), 400)
            return _html(render_compare(result))

        return await asyncio.to_thread(render)

    async def events(request: Request) -> Response:
        queue = hub.subscribe()
        if queue is None:
            raise Refused(429, f"{hub.limit} live pages are open already; close some")

        async def stream() -> AsyncIterator[str]:
            try:
                yield "retry: 2000\n\n"
                while True:
                    try:
                        event = await asyncio.wait_for(queue.get(), PING_S)
                    except TimeoutError:
                        yield ": ping\n\n"
                        continue
                    if event is None:
                        return
                    # What else changed meanwhile goes in the same message.
                    await asyncio.sleep(0.2)
                    batch = [event]
                    while not queue.empty():
                        more = queue.get_nowait()
                        if more is None:
                            return
                        batch.append(more)
                    unique = list({_codec.dumps(e): e for e in batch}.values())
                    yield f"data: {_codec.dumps(unique).decode()}\n\n"
            finally:
                hub.unsubscribe(queue)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={**HEADERS, "x-accel-buffering": "no"})

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            raise LookupError(f"no file {name[:100]!r}")
        return Response(_static(name), headers={**HEADERS, "cache-control": "no-cache"},
                        media_type=STATIC[name][1])

    async def favicon(request: Request) -> Response:
        return Response(_static("icon.svg"), headers=HEADERS, media_type="image/svg+xml")

    routes = [
        Route("/", guarded(home, page=True)),
        Route("/run", guarded(run_page, page=True)),
        Route("/compare", guarded(compare_page, page=True)),
        Route("/api/runs", guarded(runs)),
        Route("/api/run", guarded(run_card)),
        Route("/api/rows", guarded(rows)),
        Route("/api/episode", guarded(episode)),
        Route("/api/figures", guarded(figures)),
        Route("/api/find", guarded(find)),
        Route("/api/events", guarded(events)),
        Route("/static/{name}", guarded(static)),
        Route("/favicon.ico", guarded(favicon)),
    ]
    middleware = []
    if allowed_hosts is not None:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts))
    app = Starlette(routes=routes, middleware=middleware,
                    exception_handlers={404: _not_found, 405: _not_allowed})
    # A path it does not serve is a 404, never a redirect to another path.
    app.router.redirect_slashes = False
    return app


def _refused(status: int, message: str, page: bool) -> Response:
    if page:
        return _html(_environment().get_template("message.html.j2").render(
            title=f"interplay view: {status}", message=message, static="/static/",
            common=None), status)
    return _json({"error": message}, status)


async def _not_found(request: Request, exc: Exception) -> Response:
    return _json({"error": "no such page"}, 404)


async def _not_allowed(request: Request, exc: Exception) -> Response:
    # Read-only: GET and HEAD are all it answers.
    return Response(_codec.dumps({"error": "read-only: only GET and HEAD are answered"}), 405,
                    headers={**HEADERS, "allow": "GET, HEAD"}, media_type="application/json")


def _read_soon(folder: RunsFolder, key: str) -> None:
    """Read a run's index in the background (its line in the list says it is being read
    meanwhile); the pages are told as it fills and when it is read (``RunsFolder.on_read``)."""
    try:
        if key in folder.reading or folder.get(key).index is not None:
            return
    except LookupError:
        return
    folder.reading.add(key)

    async def read() -> None:
        try:
            await asyncio.to_thread(folder.index, key)
        except LookupError:
            pass
        finally:
            folder.reading.discard(key)

    task = asyncio.get_running_loop().create_task(read())
    folder.tasks.add(task)
    task.add_done_callback(folder.tasks.discard)


def _figures(index: RunIndex) -> str:
    summary = index.summary()
    return render_figures(masked(index.config), summary, index.current_figures(),
                          running=run_state(index.folder, None).name == "running",
                          drawn=index.charts(summary))


def _run_page(index: RunIndex, key: str) -> str:
    summary = index.summary()
    state = run_state(index.folder, read_json(index.folder / SUMMARY_FILE), len(index.rows))
    q = quote(key, safe="")
    live = {"run": key, "home": "/", "static": "/static/", "state": state.name,
            "state_text": _state_line(state.text, index),
            "table": {"rows": f"/api/rows?run={q}", "episode": f"/api/episode?run={q}",
                      "figures": f"/api/figures?run={q}",
                      "run": key}}
    # The rows and the episodes' sections are fetched: the table says what they would offer.
    table = EpisodeTable(rows=[], seats=table_seats(summary), stops=index.stop_names(),
                         kept=0, budget_mb=0.0, folder=key,
                         components=index.component_names(), errors=index.errors(),
                         total=len(index.rows))
    header = RunHeader(config=masked(index.config), stored=index.stored,
                       label=read_label(index.folder))
    out = io.StringIO()
    render_to(out, Page(header=header, summary=summary, figures=index.figures, table=table,
                        live=live,
                        # Charts take seconds on a large run: the page asks for them once
                        # shown.
                        drawn=index.charts(summary, draw=False) or []))
    return out.getvalue()


def _state_line(text: str, index: RunIndex) -> str:
    line = text
    if not index.caught_up:
        line += f"; reading its episodes: {len(index.rows):,} so far"
    if index.bad_lines:
        line += (f"; {index.bad_lines} line(s) of its episodes file are not episode records "
                 f"({index.first_bad})")
    return line

