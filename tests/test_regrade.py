"""`interplay regrade`: a run's stored episodes scored again into a new results folder, without
calling the agent's model; refused in one line where the records cannot be scored."""

from __future__ import annotations

import hashlib
import json
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from always_on_support import Agent, by_pattern

from interplay import cli, hookimpl
from interplay.contracts.verifier import Verifier
from interplay.plugins.hookspecs import Register
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest, isolated_plugins
from interplay.values.records import Reward


def relay(req: ScriptedRequest) -> ScriptedReply:
    msgs = req.messages
    system = str(msgs[0].get("content")) if msgs and msgs[0].get("role") == "system" else ""
    n_user = sum(1 for m in msgs if m.get("role") == "user")
    if "role-playing a user" in system:
        return ScriptedReply.text("###DONE###" if n_user > 1 else "when do you open?")
    return ScriptedReply.text("We open at 10 on Saturday.")


def lines(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (folder / "episodes.jsonl").read_text().splitlines()]


def by_pair(folder: Path) -> dict[tuple[int, int], dict[str, Any]]:
    return {(e["info"]["task_idx"], e["info"]["rollout"]): e for e in lines(folder)}


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture
def run(tmp_path: Path, scripted_model: Callable[..., ScriptedModel]) -> Path:
    model = scripted_model(relay)
    out = tmp_path / "run"
    assert cli.main(["eval", "user-sim", "-n", "3", "-r", "2", "--base-url", model.base_url,
                     "-o", str(out), "--quiet"]) == 0
    return out


def test_regrading_with_the_same_verifiers_gives_the_same_scores_and_names_its_source(
        run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = digest(run)
    new = tmp_path / "again"
    # The run's model is gone (its fixture's server is the only one): nothing calls it.
    assert cli.main(["regrade", str(run), "-o", str(new), "--quiet"]) == 0
    assert digest(run) == before
    old, again = by_pair(run), by_pair(new)
    assert old.keys() == again.keys() and len(old) == 6
    for pair, episode in old.items():
        redone = again[pair]
        for key in ("reward", "rewards", "metrics", "error", "error_type", "traces", "task",
                    "info", "results"):
            assert redone[key] == episode[key], (pair, key)
    summary_old = json.loads((run / "summary.json").read_text())
    summary_new = json.loads((new / "summary.json").read_text())
    for key in ("reward_mean", "reward_stderr", "pass_at_k", "pass_hat_k", "seat_rewards",
                "metrics", "errors", "tokens", "model_calls", "episodes", "completed"):
        assert summary_new[key] == summary_old[key], key
    stored = json.loads((new / "config.json").read_text())
    assert stored["regrade"]["from"] == str(run.resolve())
    assert stored["regrade"]["verifiers"] == [] and stored["regrade"]["own_verifiers"]
    assert stored["verifiers"] == json.loads((run / "config.json").read_text())["verifiers"]
    assert (new / "report.html").is_file()
    out = capsys.readouterr()
    assert "user-sim regraded" in out.out and "report:" in out.out


def test_other_verifiers_score_the_stored_episodes_and_the_old_scores_go(
        run: Path, tmp_path: Path) -> None:
    new = tmp_path / "exact"
    rows = 'env.verifiers=[{kind = "regex", expected = "open at 1[0-9]", scope = "any"}]'
    assert cli.main(["regrade", str(run), "-o", str(new), "--set", rows, "--set",
                     "env.own_verifiers=false", "--quiet"]) == 0
    for pair, episode in by_pair(new).items():
        assert [r["name"] for r in episode["rewards"]] == ["regex"], pair
        assert episode["reward"] == 1.0
        assert "contains" not in episode["metrics"] and episode["metrics"]["regex"] == 1.0
        # What the steps reported stays.
        assert episode["metrics"]["turns"] == by_pair(run)[pair]["metrics"]["turns"]
        assert {t["seat"]: t["reward"] for t in episode["traces"]} == {"assistant": 1.0,
                                                                       "user": None}
    stored = json.loads((new / "config.json").read_text())
    assert stored["regrade"]["verifiers"] == [{"kind": "regex", "expected": "open at 1[0-9]",
                                               "scope": "any"}]
    assert [v["name"] for v in stored["verifiers"]] == ["regex"]
    # A regrade of the regrade keeps its verifiers.
    assert cli.main(["regrade", str(new), "-o", str(tmp_path / "twice"), "--quiet"]) == 0
    assert {e["reward"] for e in lines(tmp_path / "twice")} == {1.0}
    summary = json.loads((new / "summary.json").read_text())
    assert summary["reward_mean"] == 1.0 and summary["pass_at_k"] == {"1": 1.0, "2": 1.0}


def test_verifiers_named_by_the_run_score_beside_the_envs_own_as_at_eval(
        run: Path, tmp_path: Path) -> None:
    new = tmp_path / "beside"
    rows = 'env.verifiers=[{kind = "regex", expected = "open at 1[0-9]", scope = "any", ' \
           'weight = 0.0}]'
    assert cli.main(["regrade", str(run), "-o", str(new), "--set", rows, "--quiet"]) == 0
    for pair, episode in by_pair(new).items():
        source = by_pair(run)[pair]
        assert [r["name"] for r in episode["rewards"]] == ["contains", "regex"], pair
        # Weight 0: a metric beside the env's score, which stays the episode's reward.
        assert episode["reward"] == source["reward"]
        assert episode["metrics"]["regex"] == 1.0
    stored = json.loads((new / "config.json").read_text())
    assert stored["config"]["env"]["verifiers"][0]["kind"] == "regex"
    assert [v["name"] for v in stored["verifiers"]] == ["contains", "regex"]
    # The regrade's own timings, not the source episodes'.
    summary = json.loads((new / "summary.json").read_text())
    source = json.loads((run / "summary.json").read_text())
    assert summary["wall_s"] != source["wall_s"]
    assert summary["episodes_per_s"] == pytest.approx(6 / summary["wall_s"])


@pytest.mark.parametrize(("setting", "says"), [
    ('env.verifiers=[{kind = "payoff"}]',
     "verifier 'payoff': reads ctx.results['payoffs'] but no step writes it"),
    ('env.verifiers=[{kind = "contains"}]',
     "env.verifiers[0]: verifier 'contains' scores already (one of the env's own)"),
    ("env.relay.max_turns=2", "--set env.relay.max_turns: a regrade changes only"),
    ('env.verifiers=[{kind = "no_such_verifier"}]', "no_such_verifier"),
    ('env.verifiers={kind = "exact"}', "env.verifiers: expected an array"),
])
def test_what_the_records_cannot_give_is_refused_in_one_line(
        run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], setting: str,
        says: str) -> None:
    assert cli.main(["regrade", str(run), "-o", str(tmp_path / "new"), "--set", setting]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err, err
    assert not (tmp_path / "new" / "episodes.jsonl").exists()


def test_a_folder_that_is_not_a_run_and_an_existing_output_are_refused(
        run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["regrade", str(tmp_path / "nothing"), "-o", str(tmp_path / "x")]) == 2
    assert "not a results folder" in capsys.readouterr().err
    assert cli.main(["regrade", str(run), "-o", str(run)]) == 2
    assert "that is the run being regraded" in capsys.readouterr().err
    new = tmp_path / "new"
    assert cli.main(["regrade", str(run), "-o", str(new), "-q"]) == 0
    assert cli.main(["regrade", str(run), "-o", str(new), "-q"]) == 2
    assert "already holds a run" in capsys.readouterr().err
    # A regrade is not a run to continue.
    assert cli.main(["eval", "--resume", str(new)]) == 2
    assert "holds a regrade of" in capsys.readouterr().err


class AsksTheAgent(Verifier):
    """Asks the assistant a follow-up question: needs the episode running."""

    name = "asks_the_agent"

    async def score(self, episode: Any, ctx: Any) -> Reward:
        agent = ctx.agent("assistant")
        reply = await agent.run(episode.task)
        return Reward(self.name, 1.0 if reply else 0.0)


@hookimpl
def register_verifiers(register: Register) -> None:
    register(AsksTheAgent)


def test_a_verifier_that_needs_the_agent_again_stops_the_regrade_in_one_line(
        run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plugin = types.ModuleType("asks_plugin")
    plugin.register_verifiers = register_verifiers  # type: ignore[attr-defined]
    with isolated_plugins(("asks", plugin)):
        code = cli.main(["regrade", str(run), "-o", str(tmp_path / "new"), "--set",
                         'env.verifiers=[{kind = "asks_the_agent"}]', "-q"])
    assert code == 2
    errors = [x for x in capsys.readouterr().err.splitlines() if x.startswith("interplay: ")]
    assert len(errors) == 1
    err = errors[0]
    assert "verifier 'asks_the_agent' cannot score stored episodes: it asks for the agent of " \
           "seat 'assistant'" in err
    assert lines(tmp_path / "new") == []


def week() -> Agent:
    """always-on-week: asks the venue, asks her before booking, books after her yes."""
    return Agent(by_pattern({
        "surprise party": ScriptedReply.calls([
            ("send_email", {"to": "events@lindenhof.example", "subject": "Saturday party",
                            "body": "Is Saturday 7 June free for 25?"}),
            ("message_user", {"text": "I asked the Lindenhof about Saturday."})]),
        "Email from Lindenhof": ScriptedReply.tool_call("message_user", {
            "text": "The Lindenhof is free on Saturday; shall I book it?"}),
        "replied to your message #2": ScriptedReply.calls([
            ("book", {"place": "Lindenhof", "date": "2025-06-07", "guests": 25}),
            ("message_user", {"text": "Booked the Lindenhof for Saturday."})]),
    }, default=ScriptedReply.tool_call("stay_quiet", {"reason": "nothing new"})),
        after_tools="noted", user=lambda _: "Yes, please book the Lindenhof!",
        contact=lambda _: "Sure, I'll send the guest list tonight.")


@pytest.mark.slow
def test_an_always_on_week_regraded_from_its_chat_and_timeline_scores_as_at_run_time(
        tmp_path: Path, scripted_model: Callable[..., ScriptedModel]) -> None:
    model = scripted_model(week())
    out = tmp_path / "week"
    assert cli.main(["eval", "always-on-week", "-n", "1", "--base-url", model.base_url,
                     "-o", str(out), "--quiet"]) == 0
    [episode] = lines(out)
    assert episode["error"] is None
    assert {r["name"]: r["value"] for r in episode["rewards"]} == {"asked_before": 1.0,
                                                                  "contains": 1.0}
    calls = len(model.requests)
    new = tmp_path / "again"
    assert cli.main(["regrade", str(out), "-o", str(new), "--quiet"]) == 0
    assert len(model.requests) == calls
    [again] = lines(new)
    for key in ("reward", "rewards", "metrics", "results", "traces"):
        assert again[key] == episode[key], key
    # Another tool to ask about: the stored timeline answers it without the agent.
    assert cli.main(["regrade", str(out), "-o", str(tmp_path / "email"), "--quiet", "--set",
                     'env.verifiers=[{kind = "asked_before", tool = "send_email"}]', "--set",
                     "env.own_verifiers=false"]) == 0
    [email] = lines(tmp_path / "email")
    assert email["reward"] == 0.0
    assert "before the user's first reply" in email["rewards"][0]["reason"]


def test_split_episodes_regrade_and_export_whole(
        tmp_path: Path, scripted_model: Callable[..., ScriptedModel],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Episodes whose lines were split (their transcripts in side files) are regraded and
    exported from their whole records, and a regrade writes split lines as a run does."""
    from interplay.run import results, side_files

    monkeypatch.setattr(side_files, "LINE_BOUND", 512)
    model = scripted_model(relay)
    out = tmp_path / "run"
    assert cli.main(["eval", "user-sim", "-n", "2", "--base-url", model.base_url,
                     "-o", str(out), "--quiet", "--no-report"]) == 0
    stored = lines(out)
    assert all("side" in e and "messages" not in e["traces"][0] for e in stored)
    new = tmp_path / "again"
    assert cli.main(["regrade", str(out), "-o", str(new), "--quiet", "--no-report"]) == 0
    again = by_pair(new)
    for episode in stored:
        pair = (episode["info"]["task_idx"], episode["info"]["rollout"])
        # Task 0's answer ("10") is in the stored reply: scored from the side file's transcript.
        assert again[pair]["reward"] == episode["reward"] == (1.0 if pair == (0, 0) else 0.0)
        assert "side" in again[pair]
        whole = results.whole_record(again[pair], new)
        assert whole["traces"][0]["messages"] == results.whole_record(episode, out)[
            "traces"][0]["messages"]
    sft = tmp_path / "sft.jsonl"
    assert cli.main(["export", str(out), "--format", "sft", "-o", str(sft)]) == 0
    rows = [json.loads(x) for x in sft.read_text().splitlines()]
    assert len(rows) == 2
    assert all(any(m["role"] == "assistant" and "Saturday" in (m["content"] or "")
                   for m in row["messages"]) for row in rows)
