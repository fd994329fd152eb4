"""The judge beside the code checks: a generated always_on week (the `always-on-generated` env,
an `errands` task) graded by its goals, read from the records, and by this plugin's judge, in
the same run."""

from __future__ import annotations

from aov_week import CRITERIA, VERDICT

from interplay import load_env, lookup
from interplay.contracts import generate_tasks
from interplay.testing import ScriptedReply, ScriptedRequest, run_scripted


def handler(request: ScriptedRequest) -> ScriptedReply | str:
    msgs = request.messages
    system = str(msgs[0].get("content")) if msgs and msgs[0]["role"] == "system" else ""
    if "impartial grader" in system:
        return VERDICT
    if "role-playing a user" in system:
        return "Thanks!"
    if msgs[-1]["role"] == "tool":
        return ""
    return ScriptedReply.tool_call("stay_quiet", {"reason": "nothing to tell her"})


async def test_a_generated_week_is_graded_by_its_goals_and_by_the_judge() -> None:
    env = load_env("always-on-generated", {
        "count": 1, "verifiers": [{"kind": "always_on_agent_verifier"}]})
    env.check()
    (task,) = generate_tasks(lookup("scenario-kinds", "errands")(), count=1)
    episode = (await run_scripted(env, task, handler, seed=0)).episode
    assert episode.error is None, episode.error
    by_name = {r.name: r for r in episode.rewards}
    judged = by_name.pop("always_on_agent_verifier")
    assert list(judged.info["criteria"])[:len(CRITERIA)] == list(CRITERIA)
    # An agent that only stays quiet meets none of its errands: not even her quiet nights,
    # which doing nothing keeps.
    goals = {r.info["goal"]: r.value for r in by_name.values()}
    assert goals == {g["id"]: 0.0 for g in task.info["goals"]}
