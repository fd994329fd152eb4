"""`interplay view`: a run read as its episodes file grows (the index), the rows it answers,
and the server over a folder of runs, asked for what is there and attacked for what is not
(every form of path traversal, huge requests, many connections, other methods and hosts)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interplay import cli
from interplay.errors import InterplayError
from interplay.report.episodes import ROW_COLUMNS
from interplay.run.results import RUNNING_FILE, episode_parts, side_path
from interplay.values.records import (
    Episode,
    EpisodeInfo,
    Message,
    ModelCall,
    Reward,
    Task,
    ToolCall,
    Trace,
    Usage,
)
from interplay.view import Viewer
from interplay.view.app import _figures, _run_page
from interplay.view.folder import RunsFolder, card, differing, masked
from interplay.view.runs import RunIndex, rows_query, run_state

SECRET = "the-secret-outside-the-folder-8f3a"


def episode(task: int, rollout: int = 0, *, reward: float | None = 1.0, text: str = "hello",
            error_type: str | None = None, long: bool = False) -> Episode:
    info = EpisodeInfo(episode_id=f"ep-{task}-{rollout}", env="echo", task_idx=task,
                       rollout=rollout)
    words = f"{text} " + ("filler " * 20_000 if long else "")
    call = ToolCall(id="c1", name="lookup", arguments=json.dumps({"q": f"arg-{task}"}))
    trace = Trace(agent="assistant", episode=info, seat="assistant", harness="chat",
                  stop_condition="agent_completed",
                  messages=[Message("user", f"task {task}"),
                            Message("assistant", None, tool_calls=(call,)),
                            Message("tool", "found", tool_call_id="c1"),
                            Message("assistant", words)],
                  model_calls=[ModelCall(id="m1", usage=Usage(5, 2, 7), latency_s=0.25)],
                  reward=None if error_type else reward)
    return Episode(info=info, task=Task(idx=task, prompt=f"prompt {task}", answer="x"),
                   traces=[trace], reward=None if error_type else reward,
                   error_type=error_type, error="it broke" if error_type else None,
                   rewards=[] if error_type else [Reward("match", reward or 0.0,
                                                         reason=f"reason {task}")],
                   started_at=1_700_000_000.0 + task, wall_s=1.5)


def append(folder: Path, *episodes: Episode) -> None:
    """Append episodes as the run does: a long one's side file first, then its line."""
    with (folder / "episodes.jsonl").open("ab") as fh:
        for ep in episodes:
            line, side = episode_parts(ep)
            if side is not None:
                (folder / "episodes").mkdir(exist_ok=True)
                (folder / "episodes" / f"{ep.info.episode_id}.json").write_bytes(side)
            fh.write(line + b"\n")


def run_folder(root: Path, name: str, *, env: str = "echo", model: str = "m1",
               **config: Any) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"config": {
        "env": {"name": env}, "model": {"model": model, "base_url": "http://127.0.0.1:1/v1",
                                        "headers": {"Authorization": "Bearer sk-hidden"}},
        "rollouts": 1, "seed": 0, **config}}))
    return folder


# -- the index ----------------------------------------------------------------------------------


def test_the_index_reads_only_what_was_appended_and_waits_for_a_whole_line(
        tmp_path: Path) -> None:
    folder = run_folder(tmp_path, "run")
    index = RunIndex(folder, "run")
    assert index.refresh() is False and index.rows == []
    append(folder, episode(0), episode(1, reward=0.0))
    assert index.refresh() is True
    assert [r.task for r in index.rows] == [0, 1]
    assert index.offset == (folder / "episodes.jsonl").stat().st_size
    # A line being written (no newline yet) is left for the next refresh.
    line, _ = episode_parts(episode(2))
    with (folder / "episodes.jsonl").open("ab") as fh:
        fh.write(line[:40])
    before = index.offset
    assert index.refresh() is False and index.offset == before
    assert index.caught_up  # every whole line is read
    with (folder / "episodes.jsonl").open("ab") as fh:
        fh.write(line[40:] + b"\n")
    assert index.refresh() is True and [r.task for r in index.rows] == [0, 1, 2]
    assert index.caught_up
    summary = index.summary()
    assert summary["episodes"] == 3 and summary["reward_mean"] == pytest.approx(2 / 3)


def test_a_later_line_replaces_its_pair_and_a_bad_line_is_counted_not_fatal(
        tmp_path: Path) -> None:
    folder = run_folder(tmp_path, "run")
    append(folder, episode(0, error_type="model_error"), episode(1))
    with (folder / "episodes.jsonl").open("ab") as fh:
        fh.write(b'{"not": "an episode"}\n')
    append(folder, episode(0, reward=1.0))  # run again with --retry-errors
    index = RunIndex(folder, "run")
    index.refresh()
    assert len(index.rows) == 2 and index.bad_lines == 1 and "byte" in index.first_bad
    assert index.rows[0].error_type == "" and index.rows[0].reward == 1.0
    assert index.record(0)["info"]["task_idx"] == 0 and index.record(0)["error_type"] is None
    # The charts are made again from the lines that count.
    assert sum(index.current_figures().rewards.values()) == 2


def test_a_replaced_or_shortened_file_is_read_again_from_its_start(tmp_path: Path) -> None:
    folder = run_folder(tmp_path, "run")
    append(folder, episode(0), episode(1), episode(2))
    index = RunIndex(folder, "run")
    index.refresh()
    (folder / "episodes.jsonl").unlink()
    append(folder, episode(5))
    index.refresh()
    assert [r.task for r in index.rows] == [5]


def test_a_config_rewritten_by_resume_is_read_again(tmp_path: Path) -> None:
    folder = run_folder(tmp_path, "run")
    append(folder, episode(0), episode(1, reward=0.0))
    index = RunIndex(folder, "run")
    index.refresh()
    assert index.summary()["pass_at_k"]["1"] == pytest.approx(0.5)
    version = index.version
    # --resume with a model timeout raised (and, for the figures, a pass threshold moved).
    stored = json.loads((folder / "config.json").read_text())
    stored["config"]["model"]["timeout_s"] = 4321.0
    stored["config"]["pass_threshold"] = 0.0
    (folder / "config.json").write_text(json.dumps(stored))
    assert index.refresh() is True and index.version > version
    assert index.config["model"]["timeout_s"] == 4321.0
    assert index.summary()["pass_at_k"]["1"] == pytest.approx(1.0)
    assert index.refresh() is False  # read once


def test_rows_filter_sort_page_and_search_the_messages(tmp_path: Path) -> None:
    folder = run_folder(tmp_path, "run")
    append(folder, *[episode(i, reward=i / 4, text=f"word{i}") for i in range(4)],
           episode(4, error_type="timeout"), episode(5, text="needle", long=True))
    index = RunIndex(folder, "run")
    # Not read yet: its counts are said to be what was read so far, not the run's.
    unread = index.rows_page(rows_query({}))
    assert (unread["total"], unread["complete"]) == (0, False)
    index.refresh()
    assert index.rows_page(rows_query({}))["complete"] is True
    assert (folder / "episodes" / "ep-5-0.json").is_file()  # the long one's side file

    def tasks(**params: str) -> list[int]:
        return [r.task for r in index.rows_page(rows_query(params))["rows"]]

    assert tasks() == [0, 1, 2, 3, 4, 5]
    assert tasks(sort="reward", desc="1") == [5, 3, 2, 1, 0, 4]  # unscored last either way
    assert tasks(sort="reward") == [0, 1, 2, 3, 5, 4]
    assert tasks(reward="pass") == [5] and tasks(reward="none") == [4]
    assert tasks(min="0.5", max="0.75") == [2, 3]
    assert tasks(error="timeout") == [4] and tasks(error="__none") == [0, 1, 2, 3, 5]
    assert tasks(task="3") == [3] and tasks(rollout="1") == []
    assert tasks(stop="assistant: agent_completed") == [0, 1, 2, 3, 4, 5]
    assert tasks(limit="2", offset="2") == [2, 3]
    # Text in a message, in a tool call's arguments, in a side file, any case.
    assert tasks(text="WORD2") == [2] and tasks(text="arg-3") == [3]
    assert tasks(text="needle") == [5] and tasks(text="no such text") == []
    page = index.rows_page(rows_query({}))
    assert page["total"] == 6 and page["stops"] == ["assistant: agent_completed"]
    assert page["errors"] == ["timeout"]
    # A search is extended, not repeated, as the run grows.
    append(folder, episode(6, text="word2 again"))
    index.refresh()
    assert tasks(text="word2") == [2, 6]


def test_a_two_seat_run_has_its_seats_figures_and_columns(tmp_path: Path) -> None:
    """A game scored per seat: the list's line, the run's page and each row give every seat's
    reward (the episode's own is not set)."""
    folder = run_folder(tmp_path, "game", env="kuhn")
    episodes = []
    for task in range(4):
        ep = episode(task)
        info = ep.info
        traces = [Trace(agent=seat, episode=info, seat=seat, harness="chat",
                        stop_condition="env_done", messages=[Message("assistant", "bet")],
                        reward=(1.0 if (task + i) % 2 else -1.0))
                  for i, seat in enumerate(("player0", "player1"))]
        episodes.append(Episode(info=info, task=ep.task, traces=traces, reward=None,
                                started_at=ep.started_at, wall_s=1.0))
    append(folder, *episodes)
    found = RunsFolder(tmp_path)
    found.scan()
    index = found.index("game")
    page = index.rows_page(rows_query({}))
    assert page["seats"] == ["player0", "player1"]
    assert [r.seat_rewards for r in page["rows"]] == [[-1.0, 1.0], [1.0, -1.0]] * 2
    line = card(found.get("game"))
    assert {s: v["mean"] for s, v in line["seat_rewards"].items()} == {"player0": 0.0,
                                                                      "player1": 0.0}
    shown = _run_page(index, "game") + _figures(index)
    assert "reward per seat" in shown and "player1" in shown


@pytest.mark.parametrize(("params", "error"), [
    ({"task": "x"}, "task: expected a number"), ({"offset": "-1"}, "offset: expected 0"),
    ({"limit": "0"}, "limit: expected 1 to 1000"), ({"min": "nan"}, "min: expected a finite"),
    ({"reward": "best"}, "reward: expected pass"), ({"sort": "__class__"}, "sort: expected"),
    ({"text": "x" * 201}, "text: at most 200"),
])
def test_a_bad_parameter_is_one_line_naming_it(params: dict[str, str], error: str) -> None:
    with pytest.raises(InterplayError, match=error):
        rows_query(params)


def test_a_run_in_progress_is_told_from_one_whose_process_is_gone(tmp_path: Path) -> None:
    folder = run_folder(tmp_path, "run")
    (folder / RUNNING_FILE).write_text(json.dumps({"pid": os.getpid(), "host": os.uname()[1],
                                                   "expected": 12}))
    state = run_state(folder, None)
    assert state.name == "running" and state.expected == 12
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    (folder / RUNNING_FILE).write_text(json.dumps({"pid": int(dead.stdout), "expected": 12}))
    assert run_state(folder, None).name == "stopped"
    (folder / RUNNING_FILE).unlink()
    assert run_state(folder, {"complete": True, "expected": 3}).name == "finished"
    assert run_state(folder, {"complete": False}).name == "incomplete"
    assert run_state(folder, {"interrupted": True}).name == "interrupted"


def test_a_run_marks_itself_running_and_unmarks_at_the_end(
        tmp_path: Path, scripted_model: Any) -> None:
    seen: list[bool] = []
    out = tmp_path / "run"

    def handler(request: Any) -> Any:
        from interplay.testing import ScriptedReply

        seen.append((out / RUNNING_FILE).is_file())
        return ScriptedReply.text("apple")

    model = scripted_model(handler)
    assert cli.main(["eval", "echo", "-n", "2", "--base-url", model.base_url, "-o", str(out),
                     "--quiet", "--no-report"]) in (0, 1)
    assert seen and all(seen)
    assert not (out / RUNNING_FILE).exists()


def test_the_list_shows_what_differs_and_no_header_value(tmp_path: Path) -> None:
    a = run_folder(tmp_path, "a", n=2)
    b = run_folder(tmp_path, "b", n=3)
    c = run_folder(tmp_path, "c", env="other")
    for folder in (a, b, c):
        append(folder, episode(0))
    folder = RunsFolder(tmp_path)
    folder.scan()
    cards = [card(folder.get(k)) for k in ("a", "b", "c")]
    assert [c["reading"] for c in cards] == [True] * 3  # no summary: the index reads them
    differing(cards)
    assert cards[0]["settings"] == {"n": 2} and cards[1]["settings"] == {"n": 3}
    assert cards[2]["settings"] == {}
    shown = json.dumps(masked(json.loads((a / "config.json").read_text())))
    assert "sk-hidden" not in shown and '"Authorization": "***"' in shown
    assert masked({"api_key_var": "OPENAI_API_KEY", "max_tokens": 5, "token": "t"}) == {
        "api_key_var": "OPENAI_API_KEY", "max_tokens": 5, "token": "***"}


def test_a_runs_line_holds_its_scores_errors_and_times(
        tmp_path: Path, scripted_model: Any) -> None:
    """A finished run's line from its summary: episodes of expected, the mean reward with its
    95% interval, pass^k, errors by type, when it started and ended; the same run marked
    running again (its line from its episodes as read): running, no end, what it expects."""
    from interplay.testing import ScriptedReply

    calls: list[int] = []

    def handler(request: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            return ScriptedReply(status=400, content="no")  # one episode: a model error
        return ScriptedReply.text("apple")

    out = tmp_path / "run"
    model = scripted_model(handler)
    cli.main(["eval", "echo", "-n", "3", "-r", "2", "-c", "1", "--base-url", model.base_url,
              "-o", str(out), "--quiet", "--no-report"])
    summary = json.loads((out / "summary.json").read_text())
    found = RunsFolder(tmp_path)
    found.scan()
    line = card(found.get("run"))
    assert not line["reading"] and line["state"] == "finished"
    assert (line["episodes"], line["expected"], line["scored"]) == (6, 6, 5)
    assert line["errors"] == summary["errors"] and sum(line["errors"].values()) == 1
    mean, se = summary["reward_mean"], summary["reward_stderr"]
    assert line["reward_mean"] == mean and se > 0
    assert line["reward_interval"] == pytest.approx([mean - 1.96 * se, mean + 1.96 * se])
    assert line["pass_hat_k"] == summary["pass_hat_k"] and "1" in line["pass_hat_k"]
    assert line["started_at"] <= line["ended_at"] == (out / "summary.json").stat().st_mtime
    (out / RUNNING_FILE).write_text(json.dumps({"pid": os.getpid(), "host": os.uname()[1],
                                                "expected": 10, "started_at": 1.0e9}))
    found.index("run")
    line = card(found.get("run"))
    assert (line["state"], line["ended_at"], line["started_at"]) == ("running", None, 1.0e9)
    assert (line["episodes"], line["expected"], line["scored"]) == (6, 10, 5)
    assert line["reward_mean"] == pytest.approx(mean) and line["errors"] == summary["errors"]


def test_a_url_with_credentials_is_shown_without_them(tmp_path: Path) -> None:
    """config.json masks a URL's credentials since it learnt to; one written before that (or
    by hand) holds them, and the view shows it as if it had been masked."""
    folder = run_folder(tmp_path, "old")
    stored = json.loads((folder / "config.json").read_text())
    stored["config"]["model"]["base_url"] = "http://user:pw-in-url@127.0.0.1:1/v1"
    stored["config"]["model"]["headers"] = {"Authorization": "Bearer sk-hidden"}
    (folder / "config.json").write_text(json.dumps(stored))
    append(folder, episode(0))
    other = run_folder(tmp_path, "new")  # its URL differs: a setting the list shows
    append(other, episode(0))
    found = RunsFolder(tmp_path)
    found.scan()
    cards = [card(found.get(k)) for k in ("old", "new")]
    differing(cards)
    assert cards[0]["where"] == "http://***@127.0.0.1:1/v1"
    assert cards[0]["settings"]["model.base_url"] == "http://***@127.0.0.1:1/v1"
    index = found.index("old")
    shown = _run_page(index, "old") + _figures(index) + json.dumps(cards)
    assert "pw-in-url" not in shown and "sk-hidden" not in shown and "user:" not in shown
    assert "http://***@127.0.0.1:1/v1" in shown


def test_a_line_cannot_send_a_reader_to_a_side_file_outside_its_folder(tmp_path: Path) -> None:
    (tmp_path / "run" / "episodes").mkdir(parents=True)
    (tmp_path / "secret.json").write_text("{}")
    for ref in ("../secret.json", "episodes/../../secret.json", str(tmp_path / "secret.json"),
                "episodes/x/../../../secret.json", None, 7):
        with pytest.raises(InterplayError, match="not in its episodes/ folder"):
            side_path(tmp_path / "run", ref)
    assert side_path(tmp_path / "run", "episodes/a.json").name == "a.json"


# -- the server ---------------------------------------------------------------------------------


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    """A folder of runs beside a secret the view must never serve."""
    (tmp_path / "secret.txt").write_text(SECRET)
    (tmp_path / "secret.json").write_text(json.dumps({"traces": [{"messages": [
        {"role": "user", "content": SECRET}]}]}))
    root = tmp_path / "results"
    first = run_folder(root, "echo-a")
    append(first, *[episode(i, reward=float(i % 2)) for i in range(6)])
    second = run_folder(root / "nested", "echo-b", n=4)
    append(second, *[episode(i) for i in range(4)])
    # A line naming a side file outside its folder, and a link out of the root.
    with (first / "episodes.jsonl").open("ab") as fh:
        line = json.loads(episode_parts(episode(9))[0])
        line["side"] = {"file": "../../secret.json", "traces": ["messages"]}
        fh.write(json.dumps(line).encode() + b"\n")
    os.symlink(tmp_path, root / "escape")
    yield root


def snapshot(folder: Path) -> dict[str, tuple[int, float]]:
    out = {}
    for dirpath, _, files in os.walk(folder):
        for name in files:
            st = os.stat(os.path.join(dirpath, name))
            out[os.path.join(dirpath, name)] = (st.st_size, st.st_mtime)
    return out


async def request(port: int, target: str, *, method: str = "GET", host: str | None = None,
                  extra: str = "", to: str = "127.0.0.1") -> tuple[int, bytes]:
    """One request as written, byte for byte (no client normalizes the path)."""
    reader, writer = await asyncio.open_connection(to, port)
    try:
        head = (f"{method} {target} HTTP/1.1\r\nHost: {host or f'{to}:{port}'}\r\n"
                f"Connection: close\r\n{extra}\r\n")
        writer.write(head.encode("latin-1", "replace"))
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0
    return status, data


TRAVERSALS = [
    "../secret.txt", "../../secret.txt", "..%2fsecret.txt", "%2e%2e/secret.txt",
    "%2e%2e%2fsecret.txt", "%252e%252e%252fsecret.txt", "..%5csecret.txt", "..\\secret.txt",
    "/etc/passwd", "%2fetc%2fpasswd", "....//secret.txt", "..;/secret.txt",
    "escape", "escape/secret.txt", "echo-a/../../secret.txt", "echo-a/%00../secret.txt",
    "%c0%ae%c0%ae/secret.txt", "\u2025/secret.txt", "file:///etc/passwd", ".",
    "~/secret.txt", "echo-a/episodes/../../secret.json",
]


def targets(port: int) -> list[str]:
    out = []
    for t in TRAVERSALS:
        for template in ("/{}", "/static/{}", "/run?id={}", "/api/rows?run={}",
                         "/api/episode?run={}&i=0", "/api/episode?run=echo-a&id={}",
                         "/api/figures?run={}", "/compare?run={}&run=echo-a",
                         "/api/run?run={}", "/static/..%2f{}", "/run/{}"):
            out.append(template.format(t))
    return out


def test_hostile_requests_get_nothing_outside_the_folder_and_no_5xx(root: Path) -> None:
    before = snapshot(root.parent)

    async def attack() -> dict[str, Any]:
        async with Viewer(root, port=0) as viewer:
            assert viewer.server is not None
            port = viewer.server.port
            seen: dict[str, Any] = {"statuses": {}, "leaks": []}

            async def one(target: str, **kw: Any) -> int:
                status, data = await request(port, target, **kw)
                if SECRET.encode() in data or b"root:x:0:0" in data:
                    seen["leaks"].append(target)
                return status

            for target in targets(port):
                seen["statuses"][target] = await one(target)
            # The episode whose line names a file outside: its section, without that file.
            eid = "ep-9-0"
            seen["outside_line"] = await one(f"/api/episode?run=echo-a&id={eid}")
            # Huge query strings and headers: refused by the listener, never a 5xx.
            seen["huge_query"] = await one("/api/rows?run=echo-a&text=" + "a" * 70_000)
            seen["long_text"] = await one("/api/rows?run=echo-a&text=" + "a" * 5_000)
            seen["many_params"] = await one("/api/rows?" + "&".join(f"p{i}=1"
                                                                    for i in range(5_000)))
            seen["repeated"] = await one("/api/rows?run=echo-a&run=nested/echo-b")
            # Not read-only requests, and another host (DNS rebinding).
            for method in ("POST", "PUT", "DELETE", "PATCH"):
                seen[method] = await one("/api/runs", method=method,
                                         extra="Content-Length: 0\r\n")
            seen["evil_host"] = await one("/api/runs", host="evil.example:80")
            seen["websocket"] = await one("/api/events", extra=(
                "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"))
            # Many connections at once, half of them never finishing their request.
            held = []
            for i in range(400):
                _, w = await asyncio.open_connection("127.0.0.1", port)
                if i % 2:
                    w.write(b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                held.append(w)
            results = await asyncio.gather(*[request(port, "/api/runs") for _ in range(50)])
            seen["under_load"] = sorted({status for status, _ in results})
            for w in held:
                w.close()
            seen["after"] = await one("/api/runs")
            _, data = await request(port, "/api/runs")
            seen["runs"] = sorted(r["key"] for r in json.loads(data.split(b"\r\n\r\n", 1)[1])
                                  ["runs"])
            return seen

    seen = asyncio.run(attack())
    assert seen["leaks"] == []
    assert [t for t, s in seen["statuses"].items() if s >= 500 or s == 0] == []
    assert {t: s for t, s in seen["statuses"].items() if s not in (200, 400, 404)} == {}
    assert seen["outside_line"] == 200
    assert seen["huge_query"] == 431 and seen["long_text"] == 400
    assert seen["many_params"] == 400 and seen["repeated"] == 400
    assert [seen[m] for m in ("POST", "PUT", "DELETE", "PATCH")] == [405] * 4
    assert seen["evil_host"] == 400 and seen["websocket"] == 403
    assert seen["under_load"] == [200] and seen["after"] == 200
    # The link out of the root is not followed: only the two runs under it.
    assert seen["runs"] == ["echo-a", "nested/echo-b"]
    assert snapshot(root.parent) == before  # nothing written, nothing touched


def test_the_pages_and_the_data_they_ask_for(root: Path) -> None:
    async def ask() -> dict[str, Any]:
        async with Viewer(root, port=0) as viewer:
            assert viewer.server is not None
            port = viewer.server.port
            got: dict[str, Any] = {}
            for name, target in [("home", "/"), ("run", "/run?id=nested%2Fecho-b"),
                                 ("rows", "/api/rows?run=echo-a&reward=pass"),
                                 ("episode", "/api/episode?run=echo-a&id=ep-1-0"),
                                 ("figures", "/api/figures?run=echo-a"),
                                 ("find", "/api/find?task=1&outcome=pass"),
                                 ("refused", "/compare?run=echo-a&run=nested%2Fecho-b"),
                                 ("compare", "/compare?run=echo-a&run=nested%2Fecho-b&common=1"),
                                 ("script", "/static/report.js"), ("missing", "/run?id=nope")]:
                got[name] = await request(port, target)
            return got

    got = asyncio.run(ask())
    for name in ("home", "run", "rows", "episode", "figures", "find", "compare", "script"):
        assert got[name][0] == 200, name
    head, body = got["run"][1].split(b"\r\n\r\n", 1)
    assert b"content-security-policy: default-src 'self'; script-src 'self'" in head.lower()
    page = body.decode()
    # The report's own page, its script from the server, no inline script.
    assert "interplay · echo" in page and '<script src="/static/report.js">' in page
    assert page.count("<script>") == 0 and "sk-hidden" not in page
    rows = json.loads(got["rows"][1].split(b"\r\n\r\n", 1)[1])
    # Over the wire each row is the list of its fields (ROW_COLUMNS).
    task = ROW_COLUMNS.index("task")
    assert [r[task] for r in rows["rows"]] == [1, 3, 5, 9] and rows["total"] == 7
    section = got["episode"][1].decode()
    assert 'data-episode="ep-1-0"' in section and "reason 1" in section
    assert "model calls (1)" in section and "0.25" in section
    found = json.loads(got["find"][1].split(b"\r\n\r\n", 1)[1])
    assert [r["key"] for r in found["runs"]] == ["echo-a", "nested/echo-b"]
    assert "echo-a vs nested/echo-b" in got["compare"][1].decode()
    # Runs of other tasks: the one line, and a link (not the command's flag) to compare the
    # tasks they share.
    assert got["refused"][0] == 400 and b"only echo-a has task" in got["refused"][1]
    assert b"--common-tasks" not in got["refused"][1]
    assert b"run=echo-a&amp;run=nested%2Fecho-b&amp;common=1" in got["refused"][1]
    assert got["missing"][0] == 404 and b"no run &#39;nope&#39;" in got["missing"][1]


def test_finding_a_task_reads_each_run_to_the_end_of_its_file(root: Path) -> None:
    """A run's index holds what it had read when a page last asked; episodes appended since
    (no file event noticed yet: a poll an hour apart) are still counted by a find."""

    async def ask() -> tuple[Any, Any]:
        async with Viewer(root, port=0, poll_s=3600) as viewer:
            assert viewer.server is not None
            port = viewer.server.port
            await request(port, "/api/rows?run=echo-a")  # the run's index, read to its end
            append(root / "echo-a", episode(1, 1), episode(1, 2, reward=0.0))
            _, passed = await request(port, "/api/find?task=1&outcome=pass")
            _, ran = await request(port, "/api/find?task=1&outcome=any")
            return (json.loads(passed.split(b"\r\n\r\n", 1)[1]),
                    json.loads(ran.split(b"\r\n\r\n", 1)[1]))

    passed, ran = asyncio.run(ask())
    assert passed["runs"][0] == {"key": "echo-a", "episodes": 2, "rollouts": [0, 1]}
    assert ran["runs"][0] == {"key": "echo-a", "episodes": 3, "rollouts": [0, 1, 2]}


def test_the_pages_are_told_what_changed_and_their_number_is_bounded(root: Path) -> None:
    """An episode appended to a run reaches an open page's event stream as that run's change
    (the list asks for that run's line, not for every run's); past the limit of open pages,
    another is refused with a 429 (never a 5xx)."""

    async def follow() -> tuple[list[Any], int]:
        async with Viewer(root, port=0) as viewer:
            assert viewer.server is not None
            port = viewer.server.port
            await request(port, "/api/rows?run=echo-a")  # the run's index is read
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"GET /api/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
                         .encode())
            await writer.drain()
            assert b"200 OK" in await reader.readuntil(b"\r\n\r\n")
            await asyncio.sleep(0.5)
            append(root / "echo-a", episode(40))
            told: list[Any] = []
            while not any(e.get("run") == "echo-a" and e.get("episodes") == 8 for e in told):
                line = await asyncio.wait_for(reader.readline(), 30)
                if line.startswith(b"data: "):
                    told += json.loads(line[6:])
            appended = list(told)
            # A config written again: which settings differ between runs may have changed.
            config = root / "echo-a" / "config.json"
            config.write_bytes(config.read_bytes())
            while {"kind": "runs"} not in told:
                line = await asyncio.wait_for(reader.readline(), 30)
                if line.startswith(b"data: "):
                    told += json.loads(line[6:])
            viewer.hub.limit = len(viewer.hub.queues)
            status, _ = await request(port, "/api/events")
            writer.close()
            return appended, status

    appended, status = asyncio.run(follow())
    assert {"kind": "runs"} not in appended and status == 429


def test_a_run_listed_before_it_is_read_is_read_once(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The list starts reading the runs it has no current summary of; each is read once, in
    the background, the pages told as it fills and when it is read."""
    reads: dict[str, int] = {}
    real = RunIndex.refresh

    def counted(self: RunIndex, *args: Any, **kwargs: Any) -> bool:
        reads[self.key] = reads.get(self.key, 0) + 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(RunIndex, "refresh", counted)

    async def ask() -> tuple[list[bool], list[bool]]:
        async with Viewer(root, port=0, poll_s=3600) as viewer:
            assert viewer.server is not None
            queue = viewer.hub.subscribe()
            assert queue is not None
            _, data = await request(viewer.server.port, "/api/runs")
            first = [c["reading"] for c in json.loads(data.split(b"\r\n\r\n", 1)[1])["runs"]]
            for _ in range(600):  # both read (and the readings' tasks done), or 30 s
                if not viewer.folder.tasks and all(r.index is not None and r.index.caught_up
                                                   for r in viewer.folder.all()):
                    break
                await asyncio.sleep(0.05)
            told: set[str] = set()
            while not queue.empty():
                event = queue.get_nowait()
                if event is not None and event.get("kind") == "run":
                    told.add(event["run"])
            _, data = await request(viewer.server.port, "/api/runs")
            then = [c["reading"] for c in json.loads(data.split(b"\r\n\r\n", 1)[1])["runs"]]
            assert told == {"echo-a", "nested/echo-b"}
            return first, then

    first, then = asyncio.run(ask())
    assert first == [True, True] and then == [False, False]
    assert reads == {"echo-a": 1, "nested/echo-b": 1}


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback")
def test_it_serves_on_an_ipv6_address(root: Path) -> None:
    async def ask() -> tuple[str, int, list[int]]:
        async with Viewer(root, host="::1", port=0) as viewer:
            assert viewer.server is not None
            port = viewer.server.port
            statuses = [(await request(port, "/api/runs", to="::1", host=host))[0]
                        for host in (f"[::1]:{port}", "localhost", "evil.example")]
            return viewer.url, port, statuses

    url, port, statuses = asyncio.run(ask())
    assert url == f"http://[::1]:{port}/"
    assert statuses == [200, 200, 400]  # only the addresses it serves (DNS rebinding)


def test_the_command_says_what_it_serves_and_refuses_what_it_cannot(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["view", str(tmp_path / "nowhere")]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert cli.main(["view", str(tmp_path), "--port", "70000"]) == 2
    assert "--port: expected 0 to 65535" in capsys.readouterr().err
    # On every address, it says what that exposes, and answers any Host.
    proc = subprocess.Popen([sys.executable, "-m", "interplay.cli", "view", str(tmp_path),
                             "--host", "0.0.0.0", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        address = proc.stdout.readline()
        port = int(address.rsplit(":", 1)[1].strip("/\n"))
        status, _ = asyncio.run(request(port, "/api/runs", host="viewer.example"))
    finally:
        proc.terminate()
        proc.wait(20)
    err = proc.stderr.read()
    assert address.startswith("view: http://0.0.0.0:") and status == 200
    assert "anyone who can reach this machine" in err and "no login" in err
