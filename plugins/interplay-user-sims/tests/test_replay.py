"""``replay``: the user's side of a stored episode (an earlier run's episodes.jsonl, matched by
task and rollout), replayed against a new assistant in the relay and in always_on; a missing
file or episode is refused naming the file and the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from user_sims_support import (
    agent,
    ao,
    first_task,
    quiet,
    relay_env,
    replies,
    run_relay,
    say,
    scenario_env,
    seats,
)
from user_sims_support import user_lines as lines_of

from interplay import Episode, InterplayError, Task
from interplay.run import whole_record
from interplay.testing import ScriptedModel, run_interplay
from interplay.values import to_json


def store(path: Path, *episodes: Episode) -> Path:
    path.write_text("".join(to_json(e) + "\n" for e in episodes))
    return path


async def test_the_relay_replays_her_lines_against_a_new_assistant(tmp_path: Path) -> None:
    lines = ["My order #1042 is wrong.", "Cancel it please.", "Thanks."]
    earlier, _ = await run_relay(relay_env("scripted", {"lines": lines}),
                                 Task(0, prompt="p"), replies("old assistant"))
    other, _ = await run_relay(relay_env("scripted", {"lines": ["another rollout"]}),
                               Task(0, prompt="p"), replies("old"), rollout=1)
    file = store(tmp_path / "episodes.jsonl", earlier, other)

    env = relay_env("replay", {"episodes": str(tmp_path)})  # the results folder
    episode, requests = await run_relay(env, Task(0, prompt="p"), replies("new assistant"))
    assert episode.error is None
    assert lines_of(episode) == lines
    assert episode.results["relay"]["ended_by"] == "user_done"
    assert all("old" not in str(r.messages) for r in requests)
    # Rollout 1 replays rollout 1; a pinned rollout replays that one for every rollout.
    again, _ = await run_relay(env, Task(0, prompt="p"), replies("new"), rollout=1)
    assert lines_of(again) == ["another rollout"]
    pinned = relay_env("replay", {"episodes": str(file), "rollout": 0})
    third, _ = await run_relay(pinned, Task(0, prompt="p"), replies("new"), rollout=1)
    assert lines_of(third) == lines


async def test_a_missing_episode_is_refused_with_the_file_and_the_key(tmp_path: Path) -> None:
    earlier, _ = await run_relay(relay_env("scripted", {"lines": ["hi"]}), Task(0, prompt="p"),
                                 replies("ok"))
    file = store(tmp_path / "episodes.jsonl", earlier)
    episode, _ = await run_relay(relay_env("replay", {"episodes": str(file)}),
                                 Task(7, prompt="p"), replies("ok"))
    assert episode.error_type == "config_error"
    assert f"replay: {file} has no episode for task_idx=7, rollout=0" in (episode.error or "")


def test_a_missing_file_is_refused_when_the_env_loads(tmp_path: Path) -> None:
    with pytest.raises(InterplayError, match=r"replay: .*nowhere/episodes.jsonl does not exist"):
        relay_env("replay", {"episodes": str(tmp_path / "nowhere" / "episodes.jsonl")})
    with pytest.raises(InterplayError, match="replay needs the earlier run"):
        relay_env("replay")


async def test_always_on_replays_her_replies_at_their_task_times(tmp_path: Path) -> None:
    user = {"reply_delays": {"free": ["PT5M", "PT50M"]}}
    scenario = {"end": "PT8H", "tasks": [{"prompt": "find a table for Friday"}]}
    first = scenario_env(tmp_path, {**user, "user_sim": "scripted", "user_sim_settings": {
        "lines": ["Yes, Lindenhof.", {"text": "Great, thanks.", "delay": "PT1H"}]}}, **scenario)
    old_agent = seats(agent({"find a table": say("Which place?"),
                             "Lindenhof": say("Booked it."), "thanks": say("Bye!")}))
    earlier, _ = await run_relay(first, first_task(first), old_agent)
    recorded = [(r["text"], r["wrote_at"]) for r in ao(earlier)["replies"]
                if r["outcome"] == "replied"]
    assert len(recorded) == 2
    file = store(tmp_path / "episodes.jsonl", earlier)

    # A new assistant that answers each line at once: her lines come at the recorded times,
    # not after a fresh draw of her reply delay.
    second = scenario_env(tmp_path, {**user, "user_sim": "replay",
                                     "user_sim_settings": {"episodes": str(file)}}, **scenario)
    new_agent = seats(agent({"find a table": say("Where shall we go?"),
                             "Lindenhof": say("Done, table for Friday."),
                             "thanks": say("You're welcome.")}))
    episode, _ = await run_relay(second, first_task(second), new_agent, seed=99)
    replayed = [(r["text"], r["wrote_at"]) for r in ao(episode)["replies"]
                if r["outcome"] == "replied"]
    assert replayed == recorded
    assert ao(episode)["end_reason"] == ao(earlier)["end_reason"]


async def test_a_relay_record_without_a_user_side_is_refused(tmp_path: Path) -> None:
    earlier, _ = await run_relay(relay_env("scripted", {"lines": ["hi"]}), Task(0, prompt="p"),
                                 replies("ok"))
    earlier.results = {}
    file = store(tmp_path / "episodes.jsonl", earlier)
    episode, _ = await run_relay(relay_env("replay", {"episodes": str(file)}),
                                 Task(0, prompt="p"), replies("ok"))
    assert "has no user side to replay" in (episode.error or "")
    assert str(file) in (episode.error or "")


async def test_her_closing_words_are_replayed_with_her_done(tmp_path: Path) -> None:
    earlier, _ = await run_relay(relay_env("tau"), Task(0, prompt="p"), seats(
        replies("Done, cancelled."), replies("Cancel #1042.", "Great, thanks! ###STOP###")))
    assert earlier.results["relay"]["closing_line"] == "Great, thanks!"
    store(tmp_path / "episodes.jsonl", earlier)
    episode, _ = await run_relay(relay_env("replay", {"episodes": str(tmp_path)}),
                                 Task(0, prompt="p"), replies("new assistant"))
    assert lines_of(episode) == ["Cancel #1042."]
    assert (episode.results["relay"]["closing_line"], episode.results["relay"]["done_reason"],
            episode.results["relay"]["ended_by"]) == ("Great, thanks!", "stop", "user_done")


async def test_always_on_replays_a_long_run_whose_records_are_in_its_side_file(
        tmp_path: Path) -> None:
    """A long episode's line keeps its chat and replies in its side file (episodes/): the
    replay reads them there, through interplay.run.whole_record."""
    alerts = [{"name": f"a{i}", "at": f"2025-06-02T{9 + i // 6:02d}:{(i % 6) * 10:02d}",
               "actions": [{"kind": "notify", "text": f"news {i}"}]} for i in range(60)]
    scenario = {"end": "PT20H", "tasks": [{"prompt": "find a table for Friday"}],
                "triggers": alerts}
    lines = ["Yes, Lindenhof.", *(f"Noted, item {i}." for i in range(6)),
             {"text": "Great, thanks.", "delay": "PT1H"}]
    first = scenario_env(tmp_path, {"user_sim": "scripted", "user_sim_settings": {
        "lines": lines}}, **scenario)
    old_agent = agent({"find a table": say("Which place?"), "Lindenhof": say("Booked it."),
                       "news": say("Something came in."), "thanks": say("Bye!")},
                      default=quiet())
    with ScriptedModel(old_agent) as model:
        out = tmp_path / "run"
        done = run_interplay("eval", str(first.source), "--base-url", model.base_url,
                             "-o", str(out), "--quiet", "--no-report")
    assert done.returncode == 0, done.stderr
    line = json.loads((out / "episodes.jsonl").read_text())
    assert "replies" not in line["results"]["always_on"]  # in its side file
    recorded = [(r["text"], r["wrote_at"])
                for r in whole_record(line, out)["results"]["always_on"]["replies"]
                if r["outcome"] == "replied"]
    assert len(recorded) == 8

    second = scenario_env(tmp_path, {"user_sim": "replay",
                                     "user_sim_settings": {"episodes": str(out)}}, **scenario)
    new_agent = seats(agent({"find a table": say("Where shall we go?"),
                             "Lindenhof": say("Done."), "news": say("An update."),
                             "thanks": say("Bye!")}, default=quiet()))
    episode, _ = await run_relay(second, first_task(second), new_agent)
    assert [(r["text"], r["wrote_at"]) for r in ao(episode)["replies"]
            if r["outcome"] == "replied"] == recorded
