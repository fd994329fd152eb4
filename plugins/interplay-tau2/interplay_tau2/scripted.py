"""Scripted replies that play tau2 tasks through on both seats, and tau2's own runner driven on
them: what proves this plugin against tau2's runner (the cross-check test, the benchmark).

A task's script (:func:`script_for`) is derived from its expected actions in tau2's task data:
the user asks (her first message carries a tag naming the script and her turn), the agent makes
the task's tool calls one reply at a time and reports back with the task's ``communicate_info``,
and the user ends with ``###STOP###`` (``###TRANSFER###`` after a transfer). A variant changes
the plot: ``batched`` (consecutive reads in one reply, the first reply with text beside its tool
call), ``skip_write`` (the last write left out: the database misses it, reward 0),
``tool_error`` (a call to a tool that does not exist and one with an argument missing before
the actions), ``endless`` (the user never stops: ``max_steps``) and ``errors`` (failing calls
until ``max_errors``).

:class:`ScriptBook` answers a request from what the request holds, never from the order
requests arrive in, so the same replies reach tau2's runner and interplay's env at any
concurrency: the user's seat is told apart by tau2's ``<scenario>`` in its system prompt and
finds her script by that scenario (and the task's earlier history); her turn is the number of
her own messages in the request. The agent finds the script by the tag of the last user
message, and its step by the replies it made since. A request no script answers is counted in
``misses`` and answered with a line saying so.

:func:`run_tau2` runs tasks through ``tau2.run.run_tasks`` with both seats' LLM calls sent to a
local OpenAI-compatible server; :func:`sequence` and :func:`final_db_hash` read a simulation's
messages into what two runners must agree on. tau2 is imported on first use (``import
tau2.run`` takes seconds); set :data:`OFFLINE_ENVIRON` in the environment before that, or
litellm fetches its model cost map from the internet.

``python -m interplay_tau2.scripted --domain retail --task-ids 2 3`` serves such a book over
HTTP (its base URL printed, served until stopped): a tau2 env run end to end with no model,
no GPU and no network, every tool call tau2's and every score tau2's evaluator's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest, ScriptedToolCall

#: The environment tau2's runner needs to run offline against a local server: litellm's
#: bundled model cost map, no network, and some API key (litellm refuses a call without one).
OFFLINE_ENVIRON = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_OFFLINE_MODE": "true",
                   "OPENAI_API_KEY": "dummy"}

VARIANTS = ("complete", "batched", "skip_write", "tool_error", "endless", "errors")
STOP = "###STOP###"
TRANSFER = "###TRANSFER###"
TRANSFER_TOOL = "transfer_to_human_agents"
#: What the agent answers a user who goes on past the script (``endless``).
STILL_HERE = "I am still here if you need anything."
MISS = "scripted tau2 model: no script answers this request"

_TAG = re.compile(r"^\[(?P<key>[^\]#]+) #(?P<turn>\d+)\]")
_SCENARIO = re.compile(r"<scenario>\n(?P<text>.*)\n</scenario>", re.S)


@attrs.frozen
class Call:
    """One tool call of a script: the tool's name and its arguments."""

    name: str
    arguments: dict[str, Any]


@attrs.frozen
class Script:
    """One task's conversation, by turn: ``user[n]`` is the user's n-th message (after the
    task's history), ``agent[n]`` the agent's replies to it (tool calls, text); past the
    script an ``endless`` user goes on asking and the agent answers :data:`STILL_HERE`."""

    key: str
    variant: str
    scenario: str
    #: The task's message history as the user's seat reads it (role, content), before turn 0.
    history: tuple[tuple[str, str], ...]
    user: tuple[str, ...]
    agent: tuple[tuple[ScriptedReply, ...], ...]
    endless: bool = False

    def user_reply(self, turn: int) -> str | None:
        if turn < len(self.user):
            return self.user[turn]
        if self.endless:
            return f"[{self.key} #{turn}] Is there anything else you can tell me?"
        return None

    def agent_reply(self, turn: int, step: int) -> ScriptedReply | None:
        if turn < len(self.agent) and step < len(self.agent[turn]):
            return self.agent[turn][step]
        if self.endless and step == 0:
            return ScriptedReply.text(STILL_HERE)
        return None


def _tool_types(domain: str) -> dict[str, str]:
    from tau2.registry import registry

    env = registry.get_env_constructor(domain)()
    return {name: env.tools.tool_type(name).value for name in env.tools.get_tools()}


def _is_write(action: Any, types: Mapping[str, str]) -> bool:
    return types.get(action.name) == "write" or action.name == TRANSFER_TOOL


def _history(task: Any) -> tuple[tuple[str, str], ...]:
    """The task's message history as the user's seat reads it: her messages and the agent's
    texts (tau2 leaves the agent's tool calls and their results out of her view)."""
    state = task.initial_state
    out = []
    for msg in (state.message_history or []) if state is not None else []:
        if msg.role == "user" or (msg.role == "assistant" and not msg.is_tool_call()):
            out.append((msg.role, msg.content or ""))
    return tuple(out)


def script_for(task: Any, variant: str, *, key: str, tool_types: Mapping[str, str]) -> Script:
    """The script of ``task`` (a ``tau2.data_model.tasks.Task``) in ``variant`` (one of
    :data:`VARIANTS`), named ``key`` in its tags; ``tool_types`` maps the domain's tools to
    tau2's tool types (``read``, ``write``, ...)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; one of {', '.join(VARIANTS)}")
    criteria = task.evaluation_criteria
    actions = [a for a in (criteria.actions or []) if a.requestor == "assistant"] \
        if criteria is not None else []
    calls = [Call(a.name, dict(a.arguments)) for a in actions]
    if variant == "skip_write":
        writes = [i for i, a in enumerate(actions) if _is_write(a, tool_types)]
        if not writes:
            raise ValueError(f"task {task.id} has no write to leave out")
        del calls[writes[-1]]
    info = list(criteria.communicate_info or []) if criteria is not None else []
    ask = f"[{key} #0] Hello, I need help with my request."
    transfer = any(c.name == TRANSFER_TOOL for c in calls)
    done = "All done." + (" " + " ".join(info) if info else "")
    replies: list[ScriptedReply] = []
    ids = (f"{key}-{i}" for i in range(10_000))
    if variant == "tool_error":
        replies.append(ScriptedReply.tool_call("no_such_tool", {}, next(ids)))
        if calls:
            first = calls[0]
            partial = dict(list(first.arguments.items())[1:])
            replies.append(ScriptedReply.tool_call(first.name, partial, next(ids)))
    if variant == "errors":
        name = calls[0].name if calls else "no_such_tool"
        replies.extend(ScriptedReply.tool_call(name, {"no_such_argument": i}, next(ids))
                       for i in range(20))
    elif variant == "batched":
        batch: list[ScriptedToolCall] = []
        for call, action in zip(calls, actions, strict=False):
            batch.append(ScriptedToolCall(call.name, call.arguments, next(ids)))
            if _is_write(action, tool_types):
                replies.append(ScriptedReply.calls(batch))
                batch = []
        if batch:
            replies.append(ScriptedReply.calls(batch))
        if replies:
            replies[0] = attrs.evolve(replies[0], content="Let me look into that.")
    else:
        replies.extend(ScriptedReply.tool_call(c.name, c.arguments, next(ids)) for c in calls)
    replies.append(ScriptedReply.text(done))
    end = TRANSFER if transfer else STOP
    return Script(key=key, variant=variant, scenario=str(task.user_scenario),
                  history=_history(task), user=(ask, end) if variant != "endless" else (ask,),
                  agent=(tuple(replies),), endless=variant == "endless")


class ScriptBook:
    """The scripts of a run's tasks, answering each request from what it holds (a handler for
    :class:`interplay.testing.ScriptedModel`)."""

    def __init__(self, scripts: Iterable[Script]) -> None:
        self.scripts = {s.key: s for s in scripts}
        self._by_scenario: dict[str, list[Script]] = {}
        for s in self.scripts.values():
            self._by_scenario.setdefault(s.scenario, []).append(s)
        self._lock = threading.Lock()
        self.misses = 0
        self.user_calls = 0
        self.agent_calls = 0

    def __call__(self, request: ScriptedRequest) -> ScriptedReply:
        found = self._find(request.messages)
        with self._lock:
            if found is not None and found[0] == "user":
                self.user_calls += 1
            else:
                self.agent_calls += 1
        reply = None
        if found is not None:
            seat, script, turn, step = found
            if seat == "user":
                text = script.user_reply(turn)
                reply = None if text is None else ScriptedReply.text(text)
            else:
                reply = script.agent_reply(turn, step)
        if reply is None:
            with self._lock:
                self.misses += 1
            return ScriptedReply.text(MISS)
        return reply

    def key_of(self, request: ScriptedRequest) -> str | None:
        """The key of the script that answers ``request`` (None: none does)."""
        found = self._find(request.messages)
        return None if found is None else found[1].key

    def _find(self, messages: Sequence[Mapping[str, Any]]
              ) -> tuple[str, Script, int, int] | None:
        """Which seat asks, the script that answers, the turn and the step within it."""
        system = messages[0].get("content") if messages and \
            messages[0].get("role") == "system" else None
        scenario = _SCENARIO.search(system) if isinstance(system, str) else None
        if scenario is not None:
            return self._user(scenario["text"], messages[1:])
        return self._agent(messages)

    def _user(self, scenario: str, messages: Sequence[Mapping[str, Any]]
              ) -> tuple[str, Script, int, int] | None:
        # The user's seat reads roles flipped: her own messages are "assistant" ones.
        seen = [("user" if m.get("role") == "assistant" else "assistant", m.get("content") or "")
                for m in messages if m.get("role") in ("user", "assistant")]
        best: Script | None = None
        for s in self._by_scenario.get(scenario, ()):
            if tuple(seen[:len(s.history)]) == s.history and (
                    best is None or len(s.history) > len(best.history)):
                best = s
        if best is None:
            return None
        own = sum(1 for role, _ in seen[len(best.history):] if role == "user")
        return "user", best, own, 0

    def _agent(self, messages: Sequence[Mapping[str, Any]]
               ) -> tuple[str, Script, int, int] | None:
        for i in range(len(messages) - 1, -1, -1):
            if messages[i].get("role") == "user":
                break
        else:
            return None
        tag = _TAG.match(str(messages[i].get("content") or ""))
        script = self.scripts.get(tag["key"]) if tag else None
        if tag is None or script is None:
            return None
        step = sum(1 for m in messages[i + 1:] if m.get("role") == "assistant")
        return "assistant", script, int(tag["turn"]), step


def load_tasks(domain: str, task_ids: Sequence[str] | None = None) -> list[Any]:
    """tau2's tasks of ``domain`` (all, or these ids in tasks.json order)."""
    import tau2.run

    tasks = tau2.run.load_tasks(domain)
    if task_ids is None:
        return tasks
    by_id = {t.id: t for t in tasks}
    missing = [t for t in task_ids if t not in by_id]
    if missing:
        raise ValueError(f"{domain} has no task {', '.join(missing)}")
    return [t for t in tasks if t.id in set(task_ids)]


def script_book(domain: str, plan: Mapping[str, str]) -> tuple[ScriptBook, list[Any]]:
    """The script book for ``plan`` (task id -> variant) on ``domain``, and the tasks (in
    tasks.json order). Tasks the user's seat cannot tell apart (the same scenario and history)
    share one script: the first's, under its id as key."""
    tasks = load_tasks(domain, list(plan))
    types = _tool_types(domain)
    scripts: dict[tuple[str, tuple[tuple[str, str], ...]], Script] = {}
    for task in tasks:
        same = (str(task.user_scenario), _history(task))
        if same not in scripts:
            scripts[same] = script_for(task, plan[task.id], key=task.id, tool_types=types)
    return ScriptBook(scripts.values()), tasks


def run_tau2(domain: str, tasks: Sequence[Any], base_url: str, *, model: str = "scripted",
             concurrency: int = 1, seed: int = 300, max_steps: int = 200,
             max_errors: int = 10, save_to: str | None = None,
             sampling: Mapping[str, Mapping[str, Any]] | None = None) -> list[Any]:
    """Run ``tasks`` through tau2's own runner (``tau2.run.run_tasks``, one trial each, its
    ``llm_agent`` and ``user_simulator``) with both seats' calls sent to ``base_url``; its
    simulations, scored by tau2's evaluator as its runner scores them (``EvaluationType.ALL``),
    in task order. ``sampling`` adds to each seat's request (``assistant``, ``user``: e.g.
    ``max_tokens``)."""
    import tau2.run
    from tau2.evaluator.evaluator import EvaluationType

    args = {"api_base": base_url}
    extra = sampling or {}
    results = tau2.run.run_tasks(
        domain=domain, tasks=list(tasks), agent="llm_agent", user="user_simulator",
        llm_agent=f"openai/{model}", llm_args_agent={**args, **extra.get("assistant", {})},
        llm_user=f"openai/{model}", llm_args_user={**args, **extra.get("user", {})},
        num_trials=1, max_steps=max_steps, max_errors=max_errors,
        save_to=save_to, console_display=False, evaluation_type=EvaluationType.ALL,
        max_concurrency=concurrency, seed=seed, log_level="ERROR")
    return list(results.simulations)


def sequence(messages: Iterable[Any]) -> list[dict[str, Any]]:
    """tau2 messages (or their JSON form) reduced to what two runners of the same script must
    agree on: role, text, tool calls (id, name, arguments, requestor) and a tool result's id,
    text, requestor and error; no times, costs, usage or raw data."""
    out = []
    for msg in messages:
        m = msg if isinstance(msg, Mapping) else msg.model_dump(mode="json")
        item: dict[str, Any] = {"role": m["role"], "content": m.get("content")}
        if m["role"] == "tool":
            item.update(id=m.get("id"), requestor=m.get("requestor"), error=m.get("error"))
        else:
            item["tool_calls"] = [
                {"id": c["id"], "name": c["name"], "arguments": c["arguments"],
                 "requestor": c.get("requestor")} for c in m.get("tool_calls") or ()] or None
        out.append(item)
    return out


def final_db_hash(domain: str, task: Any, messages: Sequence[Any]) -> str:
    """The database hash a simulation's messages leave: a fresh environment of ``domain`` with
    the task's initial state, the messages' tool calls replayed (tau2's evaluator replays them
    the same way, and fails if a result differs from the one recorded)."""
    from tau2.data_model.message import AssistantMessage, ToolMessage, UserMessage
    from tau2.registry import registry

    typed = []
    kinds = {"assistant": AssistantMessage, "user": UserMessage, "tool": ToolMessage}
    for msg in messages:
        if isinstance(msg, Mapping):
            msg = kinds[msg["role"]].model_validate(msg)
        typed.append(msg)
    env = registry.get_env_constructor(domain)()
    state = task.initial_state
    env.set_state(initialization_data=state.initialization_data if state else None,
                  initialization_actions=state.initialization_actions if state else None,
                  message_history=typed)
    return str(env.get_db_hash())


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def main(argv: Sequence[str] | None = None) -> int:
    """Serve the script book of a domain's tasks (``python -m interplay_tau2.scripted``)."""
    parser = argparse.ArgumentParser(
        prog="python -m interplay_tau2.scripted",
        description="Serve a scripted model that plays tau2 tasks through on both seats, each "
        "from its expected actions in tau2's task data: the user asks, the agent makes the "
        "task's tool calls and reports, the user stops. For running a tau2 env without a "
        "model (no GPU, no network): prints its base URL, then serves until stopped.")
    parser.add_argument("--domain", required=True, choices=("mock", "airline", "retail",
                                                            "telecom"))
    parser.add_argument("--task-ids", nargs="*", metavar="ID",
                        help="the tasks to script (default: all of the domain's)")
    parser.add_argument("--variant", default="complete", choices=VARIANTS,
                        help="how the scripts play (default complete: every expected action)")
    parser.add_argument("--port", type=int, default=0, help="default: a free one")
    args = parser.parse_args(argv)
    for key, value in OFFLINE_ENVIRON.items():
        os.environ.setdefault(key, value)
    try:
        tasks = load_tasks(args.domain, args.task_ids or None)
        book, _ = script_book(args.domain, {t.id: args.variant for t in tasks})
    except ValueError as exc:
        parser.error(str(exc))
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    with ScriptedModel(book, port=args.port) as model:
        print(model.base_url, flush=True)
        try:
            stopped.wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
