"""`interplay report`: the page a person reads, checked in headless Chromium (over the DevTools
protocol) and as text."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from interplay import cli, report
from interplay.report import page
from interplay.run.results import judged_names, recorded_verifiers
from interplay.run.summary import format_summary, summarize
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest
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
    to_json,
)

EVIL = '<script>window.__xss = 1</script></script><!-- <img src=x onerror="window.__xss=2">'
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def relay_handler(req: ScriptedRequest) -> ScriptedReply:
    msgs = req.messages
    system = str(msgs[0].get("content")) if msgs and msgs[0].get("role") == "system" else ""
    n_user = sum(1 for m in msgs if m.get("role") == "user")
    if "role-playing a user" in system:
        return ScriptedReply.text("###DONE###" if n_user > 1 else f"my question {EVIL}")
    return ScriptedReply.text(f"the answer is yes {EVIL}")


@pytest.fixture
def results(tmp_path: Path, scripted_model: Callable[..., ScriptedModel]) -> Path:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"prompt": f"scenario {i}", "answer": a}) + "\n"
                             for i, a in enumerate(["yes", "no", "yes"])))
    model = scripted_model(relay_handler)
    out = tmp_path / "run"
    assert cli.main(["eval", "user-sim", "-r", "2", "--base-url", model.base_url,
                     "-o", str(out), "--quiet",
                     "--set", f"env.taskset={json.dumps(str(tasks))}"]) == 0
    return out


def test_report_command_writes_a_self_contained_escaped_page(results: Path) -> None:
    (results / "report.html").unlink()
    proc = subprocess.run([sys.executable, "-m", "interplay.cli", "report", str(results)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    page = (results / "report.html").read_text()
    assert proc.stdout.strip() == f"report: {results / 'report.html'}"
    # Our three script elements only: the run's data, the episode table's, the page's code.
    assert page.count("<script") == 3 and page.count("</script>") == 3
    # The payload never appears unescaped: not as markup, not inside the JSON data.
    assert "<script>window.__xss" not in page
    assert "</script></script>" not in page
    assert "&lt;script&gt;window.__xss = 1&lt;/script&gt;" in page
    assert "<img" not in page
    # Self-contained: nothing fetched from anywhere (a chart's url(#clip) is in the page).
    for needle in ("src=\"http", "href=\"http", "<link", "@import"):
        assert needle not in page
    assert re.findall(r"url\((?!#)", page) == []
    assert page.count("<svg") >= 3  # the run's charts, drawn into the page


def test_report_refuses_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "interplay.cli", "report", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "not a results folder" in proc.stderr


def test_safe_json_turns_non_finite_numbers_into_null() -> None:
    data = {"reward": float("nan"), "metrics": {"a": float("inf"), "b": [1.5, float("-inf")]},
            "rows": ({"x": float("nan")},)}

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON; JSON.parse rejects it")

    parsed = json.loads(page.safe_json(data), parse_constant=refuse)
    assert parsed == {"reward": None, "metrics": {"a": None, "b": [1.5, None]},
                      "rows": [{"x": None}]}


def test_safe_json_cannot_close_its_script() -> None:
    text = page.safe_json({"a": "</script><script>x()</script>", "b": "<!--", "c": "&"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"a": "</script><script>x()</script>", "b": "<!--", "c": "&"}


def test_tool_calls_rewards_and_reasons_render(tmp_path: Path) -> None:
    info = EpisodeInfo(episode_id="ep1", env="shop", task_idx=0)
    call = ToolCall(id="call_1", name="lookup", arguments=json.dumps({"q": "<b>x</b>"}))
    trace = Trace(agent="assistant", episode=info, seat="assistant", harness="chat",
                  stop_condition="agent_completed", messages=[
                      Message("user", "find <it>"),
                      Message("assistant", None, tool_calls=(call,)),
                      Message("tool", "found <it>", tool_call_id="call_1"),
                      Message("assistant", "here it is")],
                  model_calls=[ModelCall(id="m1", usage=Usage(5, 2, 7))])
    episode = Episode(info=info, task=Task(idx=0, prompt="find it", answer="it"),
                      traces=[trace], reward=0.5,
                      rewards=[Reward("rubric", 0.5, reason="half <right>")])
    (tmp_path / "episodes.jsonl").write_text(to_json(episode) + "\n")
    page = report.write_report(tmp_path).read_text()
    assert "tool call lookup" in page and "call_1" in page
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "found &lt;it&gt;" in page
    assert "half &lt;right&gt;" in page and "rubric" in page
    assert 'result of <span class="call-id">call_1</span>' in page


def test_a_judges_criteria_are_shown_for_every_rubric_verifier(tmp_path: Path) -> None:
    info = EpisodeInfo(episode_id="ep1", env="shop", task_idx=0)
    criteria = {"polite": {"score": 0.25, "weight": 1.0, "reason": "curt <reply>"},
                "resolved": {"score": 1.0, "weight": 2.0, "reason": "done"}}
    rewards = [Reward("house_judge", 0.75, info={"criteria": criteria}),
               # Not a judge, though its info looks like one: shown as a plain reward.
               Reward("lookalike", 1.0, info={"criteria": {"x": {"score": 0.0}}})]
    episode = Episode(info=info, task=Task(idx=0, prompt="p"), rewards=rewards, reward=0.8)
    (tmp_path / "episodes.jsonl").write_text(to_json(episode) + "\n")
    # The kinds config.json records: the judge's plugin need not be installed.
    (tmp_path / "config.json").write_text(json.dumps({"config": {}, "verifiers": [
        {"name": "house_judge", "is": ["house_judge", "rubric"]},
        {"name": "lookalike", "is": ["lookalike"]}]}))
    page = report.write_report(tmp_path).read_text()
    assert "<td>· polite</td><td class=num>0.25</td><td class=num>1</td><td></td>" \
           "<td class=\"reason\">curt &lt;reply&gt;</td>" in page
    assert "<td>· x</td>" not in page
    assert "judge criteria (mean)" in page and "house_judge.resolved" in page
    figures = summarize([json.loads(to_json(episode))], judged={"house_judge"})
    assert figures["criteria"] == {"house_judge": {"polite": {"mean": 0.25, "n": 1},
                                                   "resolved": {"mean": 1.0, "n": 1}}}
    assert "criterion house_judge.polite 0.25 (n=1)" in [
        " ".join(line.split()) for line in format_summary(figures).splitlines()]
    assert summarize([json.loads(to_json(episode))])["criteria"] == {}
    # A folder written before config.json kept its verifiers: the config's rows are read.
    (tmp_path / "config.json").write_text(json.dumps({"config": {"env": {"verifiers": [
        {"kind": "rubric", "criteria": []}]}}}))
    assert judged_names(recorded_verifiers(json.loads(
        (tmp_path / "config.json").read_text()))) == {"rubric"}


# -- what a person sees, in Chromium -----------------------------------------------------------


class Browser:
    """Headless Chromium driven over the DevTools protocol (aiohttp's websocket client)."""

    def __init__(self, profile: str) -> None:
        self.profile = profile
        self.proc: asyncio.subprocess.Process | None = None
        self.session: aiohttp.ClientSession | None = None
        self.ws: Any = None
        self._id = 0
        #: What the page reported as errors: uncaught exceptions, console.error, failed loads.
        self.errors: list[str] = []

    async def __aenter__(self) -> Browser:
        assert CHROMIUM is not None
        self.proc = await asyncio.create_subprocess_exec(
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--no-first-run", "--disable-dev-shm-usage", f"--user-data-dir={self.profile}",
             "--remote-debugging-port=0", "about:blank",
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 120
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline or self.proc.returncode is not None:
                raise RuntimeError("chromium did not start its DevTools endpoint")
            await asyncio.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        self.session = aiohttp.ClientSession()
        async with self.session.get(f"http://127.0.0.1:{port}/json/list") as resp:
            targets = await resp.json(content_type=None)
        page = next(t for t in targets if t.get("type") == "page")
        self.ws = await self.session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
        await self.send("Page.enable")
        await self.send("Runtime.enable")
        await self.send("Log.enable")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self.session is not None:
            await self.session.close()
        if self.proc is not None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), timeout=20)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        my_id = self._id
        await self.ws.send_json({"id": my_id, "method": method, "params": params})
        while True:
            msg = await asyncio.wait_for(self.ws.receive_json(), timeout=120)
            self._note(msg)
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def _note(self, msg: dict[str, Any]) -> None:
        method, params = msg.get("method"), msg.get("params") or {}
        if method == "Runtime.exceptionThrown":
            self.errors.append(json.dumps(params.get("exceptionDetails"))[:500])
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append(json.dumps(params.get("args"))[:500])
        elif method == "Log.entryAdded" and (params.get("entry") or {}).get("level") == "error":
            self.errors.append(json.dumps(params.get("entry"))[:500])

    async def open(self, url: str) -> None:
        await self.send("Page.navigate", url=url)
        # Poll for the new document: right after navigate, the old one may still answer.
        for _ in range(600):
            state = await self.eval("[location.href, document.readyState]")
            if state == [url, "complete"]:
                return
            await asyncio.sleep(0.05)
        raise RuntimeError("the page did not load")

    async def eval(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page error: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str) -> None:
        """Poll until ``expression`` is truthy: input is handled after the protocol answers,
        and a loaded machine may take a moment."""
        for _ in range(1200):
            if await self.eval(expression):
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"never true: {expression}")

    async def click(self, selector: str) -> None:
        """A real mouse click at the element's centre, as a person makes it (scrolled into
        view first; the scroll may land a frame later, so the position is read after it)."""
        sel = json.dumps(selector)
        box: list[float] = []
        for _ in range(100):
            box = await self.eval(
                f"(function(){{var e=document.querySelector({sel});"
                f"var r=e.getBoundingClientRect();var x=r.left+r.width/2,y=r.top+r.height/2;"
                f"if (y < 0 || y > innerHeight) {{e.scrollIntoView({{block:'center'}});"
                f"return null;}} return [x, y];}})()")
            if box:
                break
            await asyncio.sleep(0.05)
        assert box, f"{selector} never came into view"
        await self.send("Input.dispatchMouseEvent", type="mouseMoved", x=box[0], y=box[1])
        for kind in ("mousePressed", "mouseReleased"):
            await self.send("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1],
                            button="left", clickCount=1)

    async def click_until(self, selector: str, expression: str) -> None:
        """Click like a person, again if nothing happened: a heavily loaded machine can drop
        synthesized input before the page is ready for it."""
        for _ in range(5):
            await self.click(selector)
            for _ in range(40):
                if await self.eval(expression):
                    return
                await asyncio.sleep(0.05)
        hit = await self.eval(
            f"(function(){{var e=document.querySelector({json.dumps(selector)});"
            f"var r=e.getBoundingClientRect();var h=document.elementFromPoint("
            f"r.left + r.width / 2, r.top + r.height / 2);"
            f"return [r.left, r.top, r.width, r.height, innerWidth, innerHeight,"
            f" h && h.outerHTML.slice(0, 80)];}})()")
        raise AssertionError(f"clicking {selector} never made this true: {expression}; {hit}")


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install "
                    "chromium; .ci/setup installs it)")
def test_a_person_sees_the_summary_opens_an_episode_and_reads_escaped_text(
        results: Path) -> None:
    page_url = (results / "report.html").resolve().as_uri()
    summary = json.loads((results / "summary.json").read_text())
    records = [json.loads(x) for x in (results / "episodes.jsonl").read_text().splitlines()]
    target = next(r for r in records if r["info"]["task_idx"] == 1 and r["info"]["rollout"] == 1)

    async def drive() -> None:
        # Chromium's helper processes may still be writing the profile as the browser exits.
        with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
            async with Browser(profile) as b:
                await b.open(page_url)
                body = await b.eval("document.body.innerText")
                assert "6 / 6" in body and "episodes" in body
                assert f"{summary['reward_mean']:.4g} ± {summary['reward_stderr']:.3g}" in body
                assert "pass@2" in body and "pass^2" in body
                # No transcript is shown before a click.
                assert "the answer is yes" not in body
                assert await b.eval("document.querySelectorAll('tr.ep-row').length") == 6

                # Filter: only the failed episodes (task 1 expects "no"; the model says "yes").
                await b.eval("var s=document.getElementById('f-reward');s.value='fail';"
                             "s.dispatchEvent(new Event('change'))")
                shown = await b.eval("Array.from(document.querySelectorAll('tr.ep-row'))"
                                     ".filter(r => !r.hidden).length")
                assert shown == sum(1 for r in records if (r["reward"] or 0) < 1.0) == 2
                await b.eval("var s=document.getElementById('f-reward');s.value='';"
                             "s.dispatchEvent(new Event('change'))")
                # By task, by text (the task's prompt here), sorted by a column's header.
                await b.eval("var s=document.getElementById('f-task');s.value='2';"
                             "s.dispatchEvent(new Event('input'))")
                assert await b.eval("Array.from(document.querySelectorAll('tr.ep-row td:first-"
                                    "child')).map(td => td.textContent)") == ["2", "2"]
                await b.eval("var s=document.getElementById('f-task');s.value='';"
                             "s.dispatchEvent(new Event('input'));"
                             "var t=document.getElementById('f-text');t.value='SCENARIO 1';"
                             "t.dispatchEvent(new Event('input'))")
                await b.wait_for("document.querySelectorAll('tr.ep-row').length === 2")
                await b.eval("var t=document.getElementById('f-text');t.value='';"
                             "t.dispatchEvent(new Event('input'))")
                await b.wait_for("document.querySelectorAll('tr.ep-row').length === 6")
                await b.click_until("th[data-sort=reward]",
                                    "!!document.querySelector('th[aria-sort=ascending]')")
                assert await b.eval("Array.from(document.querySelectorAll('tr.ep-row td.reward'))"
                                    ".map(td => td.textContent)") == ["0", "0", "1", "1", "1",
                                                                      "1"]

                eid = target["info"]["episode_id"]
                await b.click_until(f'tr.ep-row[data-episode="{eid}"]',
                                    "!!document.querySelector('section.episode:not([hidden])')")
                body = await b.eval("document.body.innerText")
                assert f"Episode {eid}: task 1, rollout 1" in body
                # The transcript shows the markup as text, and none of it ran.
                assert "the answer is yes <script>window.__xss = 1</script></script>" in body
                assert f"my question {EVIL}" in body
                assert await b.eval("typeof window.__xss") == "undefined"
                assert await b.eval("document.querySelectorAll('img').length") == 0
                assert "user_done" in body and "user_closed" in body
                assert "contains" in body  # the verifier's reward row
                # Exactly one episode is open, and the URL names it.
                assert await b.eval("document.querySelectorAll('section.episode:not([hidden])')"
                                    ".length") == 1
                assert await b.eval("location.hash") == f"#episode={eid}"

                # A link to an episode opens it on load.
                await b.open("about:blank")
                await b.open(f"{page_url}#episode={records[0]['info']['episode_id']}")
                await b.wait_for("!!document.querySelector('section.episode:not([hidden])')")
                body = await b.eval("document.body.innerText")
                assert f"Episode {records[0]['info']['episode_id']}" in body

    asyncio.run(drive())


# -- every field a user controls, hostile ------------------------------------------------------

#: Markup, both quotes (to leave an attribute), a comment opener, template syntax (to show that
#: no value is rendered as a template), an entity (shown as written), and a % (a hash link).
HOSTILE = ("'\"><script>window.__xss=1</script><img src=x onerror=\"window.__xss=2\">"
           "<!-- {{ 7*7 }} {% raw %} &amp; 100%")


def evil(field: str) -> str:
    return f"{field}:{HOSTILE}"


def hostile_results(folder: Path) -> list[str]:
    """A results folder with the payload in every field a user controls; the field names
    whose text must show on the page as written."""
    info = EpisodeInfo(episode_id=evil("episode_id"), env=evil("env"), task_idx=0, seed=7)
    call = ToolCall(id=evil("tool_call_id"), name=evil("tool_name"),
                    arguments=json.dumps({"q": evil("tool_argument")}))
    bad_args = ToolCall(id="call_2", name="raw", arguments=evil("unparsed_arguments"))
    trace = Trace(
        agent=evil("agent"), episode=info, seat=evil("seat"), harness=evil("harness"),
        model=evil("trace_model"), stop_condition=evil("stop_condition"),
        error=evil("trace_error"), error_type=evil("trace_error_type"),
        messages=[Message("system", evil("system_message")),
                  Message("user", [{"type": "text", "text": evil("content_part")}],
                          name=evil("message_name")),
                  Message("assistant", evil("assistant_text"), tool_calls=(call, bad_args)),
                  Message("tool", evil("tool_result"), tool_call_id=evil("result_of"))],
        model_calls=[ModelCall(id="m1", usage=Usage(5, 2, 7))],
        rewards=[Reward(evil("trace_reward_name"), 0.5, reason=evil("trace_reward_reason"))])
    episode = Episode(
        info=info, traces=[trace], reward=0.5, error=evil("episode_error"),
        error_type=evil("episode_error_type"),
        task=Task(idx=0, prompt=evil("prompt"), system_prompt=evil("system_prompt"),
                  answer=evil("answer")),
        rewards=[Reward(evil("reward_name"), 0.5, seat=evil("reward_seat"),
                        reason=evil("reward_reason"))],
        metrics={evil("metric_key"): 1.0}, results={evil("results_key"): evil("results_value")})
    second = Episode(info=EpisodeInfo(episode_id="plain-2", env="x", task_idx=1),
                     task=Task(idx=1, prompt=(Message("user", evil("prompt_message")),)),
                     traces=[Trace(agent="a", episode=info, seat="a", stop_condition="done")],
                     reward=1.0, metrics={evil("metric_key"): 0.0})
    # A line of odd shapes: every field the page reads is where it expects something else.
    odd = {"info": {"task_idx": 2, "episode_id": "odd-3"}, "task": ["not", "a", "task"],
           "traces": [{"seat": "s", "messages": evil("messages_as_text"),
                       "model_calls": [], "rewards": "none", "tool_runs": 3},
                      {"seat": "t", "messages": [{"role": evil("role"),
                                                  "content": {"odd": evil("content_object")},
                                                  "tool_calls": {"not": "a list"}}, 7]}],
           "rewards": [None, 3], "metrics": {"x": [1]}, "results": evil("results_as_text")}
    (folder / "episodes.jsonl").write_text(
        "".join(to_json(e) + "\n" for e in (episode, second)) + json.dumps(odd) + "\n")
    config = {"env": {"name": evil("env_name")},
              "model": {"model": evil("model_name"), "base_url": evil("base_url")},
              "rollouts": evil("rollouts"), "seed": evil("seed"), "pass_threshold": 1.0}
    (folder / "config.json").write_text(json.dumps({"config": config}))
    return ["episode_id", "tool_call_id", "tool_name", "unparsed_arguments",
            "agent", "seat", "harness", "trace_model", "stop_condition", "trace_error",
            "trace_error_type", "system_message", "content_part", "message_name",
            "assistant_text", "tool_result", "result_of", "trace_reward_name",
            "trace_reward_reason", "episode_error", "episode_error_type", "prompt",
            "system_prompt", "reward_name", "reward_seat", "reward_reason", "metric_key",
            "prompt_message", "messages_as_text", "role", "env_name", "model_name",
            "base_url", "rollouts", "seed"]


#: Fields the page shows as the JSON they are (tool arguments, the task's answer, an env's
#: results, content of no known shape): their text is there as a JSON string holds it.
JSON_FIELDS = ["tool_argument", "answer", "results_key", "results_value", "content_object",
               "results_as_text"]


def shown(field: str) -> str:
    return json.dumps(evil(field), ensure_ascii=False)[1:-1] if field in JSON_FIELDS \
        else evil(field)


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        (self.scripts if self._in_script else self.text).append(data)


PAGE_TAGS = {"html", "head", "meta", "title", "style", "body", "header", "h1", "h2", "h3", "h4",
             "p", "main", "section", "div", "label", "select", "option", "input", "span",
             "table", "thead", "tbody", "tr", "th", "td", "details", "summary", "pre", "b",
             "code", "script", "button"}
#: What matplotlib's SVG writer makes of a chart (no script, no foreign object).
SVG_TAGS = {"svg", "g", "path", "text", "defs", "clippath", "use", "rect", "style",
            "title", "tspan", "circle", "polyline", "line", "polygon"}


def test_every_field_a_user_controls_is_text_on_the_page(tmp_path: Path) -> None:
    fields = hostile_results(tmp_path)
    html_text = report.write_report(tmp_path).read_text()
    parsed = _Elements()
    parsed.feed(html_text)
    # Only the page's own elements and its charts', none with an event handler, and our
    # three scripts.
    assert {tag for tag, _ in parsed.tags} <= PAGE_TAGS | SVG_TAGS
    assert not [(tag, a) for tag, attrs in parsed.tags for a in attrs if a.startswith("on")]
    assert not [a for _, attrs in parsed.tags for a, v in attrs.items()
                if "javascript:" in str(v) or (a == "href" and not str(v).startswith("#"))]
    assert [attrs.get("type") for tag, attrs in parsed.tags if tag == "script"] == [
        "application/json", "application/json", None]
    data = json.loads(parsed.scripts[0])
    assert data["config"]["model"]["base_url"] == evil("base_url")
    assert "__xss" not in parsed.scripts[2]
    # Every field shows as written: markup, quotes, template syntax and entities alike.
    text = "".join(parsed.text)
    assert [f for f in fields + JSON_FIELDS if shown(f) not in text] == []
    assert "49" not in text
    # The episode table's rows are data the page's script writes as text, fields whole.
    table = json.loads(parsed.scripts[1])
    rows = [dict(zip(table["columns"], row, strict=True)) for row in table["rows"]]
    assert rows[0]["episode_id"] == evil("episode_id")
    assert rows[0]["error_type"] == evil("episode_error_type")
    assert rows[0]["error"] == evil("episode_error")
    assert [table["stops"][i] for i in rows[0]["stops"]] == [
        f"{evil('seat')}: {evil('stop_condition')}"]
    assert rows[1]["prompt"].startswith(f"user: {evil('prompt_message')[:40]}")
    # An error episode is not scored on the page either, whatever its line says.
    assert rows[0]["reward"] is None and rows[1]["reward"] == 1.0


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install "
                    "chromium; .ci/setup installs it)")
def test_a_browser_runs_none_of_the_hostile_text_and_shows_all_of_it(tmp_path: Path) -> None:
    fields = hostile_results(tmp_path)
    url = report.write_report(tmp_path).resolve().as_uri()
    episode_id = evil("episode_id")

    async def drive() -> None:
        with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
            async with Browser(profile) as b:
                # A link to the hostile episode opens it: the id survives the URL both ways.
                await b.open(url)
                await b.eval(f"location.hash = '#episode=' + "
                             f"encodeURIComponent({json.dumps(episode_id)})")
                await b.wait_for("!!document.querySelector('section.episode:not([hidden])')")
                assert await b.eval("document.querySelector('section.episode:not([hidden])')"
                                    ".dataset.episode") == episode_id
                # Every row opens its episode on a click, the hash naming it.
                for i in range(3):
                    await b.click_until(f'tr.ep-row[data-index="{i}"]',
                                        f"!document.getElementById('ep-{i}').hidden")
                    assert await b.eval("decodeURIComponent(location.hash.slice(9))") == \
                        await b.eval(f"document.querySelector('tr.ep-row[data-index=\"{i}\"]')"
                                     ".dataset.episode")
                # The filter on the hostile error type finds its one episode.
                await b.eval("var s=document.getElementById('f-error');"
                             f"s.value={json.dumps(evil('episode_error_type'))};"
                             "s.dispatchEvent(new Event('change'))")
                assert await b.eval("document.getElementById('shown').textContent") == \
                    "1 of 3 shown"
                await b.eval("document.querySelectorAll('section.episode, details')"
                             ".forEach(function(e){ e.hidden = false; e.open = true; })")
                # (textContent: innerText is the text as styled, upper-cased in places.)
                body = await b.eval("document.body.textContent")
                assert [f for f in fields + JSON_FIELDS if shown(f) not in body] == []
                # Nothing ran and nothing was added: no handler, no image, our three scripts.
                assert await b.eval("typeof window.__xss") == "undefined"
                assert await b.eval("document.querySelectorAll('script').length") == 3
                assert await b.eval("document.querySelectorAll('img, iframe').length") == 0
                assert await b.eval(
                    "Array.from(document.querySelectorAll('*')).filter(function(e){"
                    " return Array.from(e.attributes).some(function(a){"
                    " return a.name.indexOf('on') === 0; }); }).length") == 0

    asyncio.run(drive())
