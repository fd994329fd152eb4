"""What one trace of an episode becomes in an export: an SFT row (its conversation in the
OpenAI chat shape, with the tools it was offered), RL rows of one model call each, or one RL row
of the whole trace with a loss mask; and which traces count as training data at all.

Works on episodes read once into typed values (:func:`~interplay.run.recorded.read_episode`),
whose messages and model calls stay the JSON objects the line holds (not structured records:
an export reads millions of them). Pure functions; no I/O, no logging.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs

from interplay.run.notes import is_private_note
from interplay.run.recorded import RecordedEpisode, RecordedTrace

#: A trace's stop conditions that mean it was cut short rather than finished.
CUT_SHORT = frozenset({"max_turns", "timeout", "error", "cancelled"})


def trainable_traces(ep: RecordedEpisode,
                     seats: Sequence[str] = ()) -> Iterator[RecordedTrace]:
    """The trainable traces of an episode (a trace whose record does not say is one), of
    ``seats`` when given: a seat or agent name."""
    for trace in ep.traces:
        if trace.trainable is False:
            continue
        if seats and trace.seat not in seats and trace.agent not in seats:
            continue
        yield trace


def cut_short(trace: RecordedTrace) -> bool:
    """Whether the trace did not finish: stopped by a cap, a timeout or an error, or a model
    call was cut off at its token limit."""
    if trace.stop_condition in CUT_SHORT:
        return True
    return any(c.get("finish_reason") == "length" for c in trace.model_calls)


def meta(ep: RecordedEpisode, trace: RecordedTrace) -> dict[str, Any]:
    """Which episode, task, rollout and seat a row comes from, and its reward."""
    return {"episode_id": ep.episode_id, "task_idx": ep.task_idx, "rollout": ep.rollout or 0,
            "seat": trace.seat, "agent": trace.agent, "reward": trace.reward}


# -- SFT ---------------------------------------------------------------------------------------


def sft_row(trace: RecordedTrace) -> dict[str, Any] | None:
    """The trace's conversation up to its last assistant message (``messages``, OpenAI chat
    shape, tool calls and tool results included) and the tools its model calls were offered
    (``tools``, function tools in the Chat Completions shape); None when the agent never
    answered."""
    # An entry that is not a message (an empty object) is no turn of the conversation.
    messages = [m for m in trace.messages if m]
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"),
               default=-1)
    if last < 0:
        return None
    return {"messages": [_message(m) for m in messages[:last + 1]], "tools": tools_of(trace)}


def private_messages(messages: Sequence[Mapping[str, Any]], notes: Sequence[str]) -> list[int]:
    """The indices of an SFT row's ``messages`` that are an always_on agent's private notes
    (``notes``: its plain replies, which the user never reads)."""
    return [i for i, m in enumerate(messages) if m.get("role") == "assistant"
            and is_private_note(content_text(m.get("content")) or "", notes)]


def content_text(content: Any) -> str | None:
    """A message's content as text (the text parts of a list joined); None stays None."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return str(content)


def _message(m: Mapping[str, Any]) -> dict[str, Any]:
    # The keys a chat template reads, and no nulls it would render ("name": null).
    return {k: v for k, v in m.items() if v is not None or k == "content"}


def tools_of(trace: RecordedTrace) -> list[dict[str, Any]]:
    """The function tools the trace's model calls offered, each once (by name), in the Chat
    Completions shape."""
    seen: dict[str, dict[str, Any]] = {}
    for call in trace.model_calls:
        request = call.get("request")
        for tool in (request or {}).get("tools") or () if isinstance(request, Mapping) else ():
            spec = _chat_tool(tool)
            if spec is not None:
                seen.setdefault(spec["function"]["name"], spec)
    return list(seen.values())


def _chat_tool(tool: Any) -> dict[str, Any] | None:
    if not isinstance(tool, Mapping) or tool.get("type") != "function":
        return None
    fn = tool.get("function")
    if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
        return {"type": "function", "function": dict(fn)}
    if isinstance(tool.get("name"), str):  # a Responses tool: its fields at the top
        fn = {k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool}
        return {"type": "function", "function": fn}
    return None


# -- RL ----------------------------------------------------------------------------------------


@attrs.define
class Skipped:
    """Why traces or calls did not become RL rows."""

    #: Calls without prompt or completion ids (the endpoint did not return them).
    calls_without_ids: int = 0
    #: Traces whose calls do not extend each other (exported per call only): an earlier
    #: turn's text changed (a template that re-renders it, a context policy that drops it).
    not_extending: int = 0
    #: Traces whose calls do not extend each other because the endpoint re-tokenized a reply
    #: the model sampled (it did not continue from the sampled ids).
    retokenized: int = 0
    #: Calls another process made with the trace's secret (a command the program ran: the
    #: call's ``caller`` is ``other``), never the agent's.
    calls_by_others: int = 0


def _ids(tokens: Mapping[str, Any], key: str) -> list[int] | None:
    value = tokens.get(key)
    return value if isinstance(value, list) else None


def call_rows(trace: RecordedTrace, skipped: Skipped) -> Iterator[dict[str, Any]]:
    """One row per model call with captured ids: ``prompt_ids``, ``completion_ids``,
    ``logprobs`` (None when the endpoint returned none), ``loss_mask`` (all ones: every
    completion token was sampled) and the call's ``finish_reason``."""
    for index, call in enumerate(trace.model_calls):
        # An empty object (an entry that was not a call) is no call at all.
        if not call or call.get("error_type") is not None:
            continue
        if call.get("caller") == "other":
            skipped.calls_by_others += 1
            continue
        tokens = call.get("tokens")
        if not isinstance(tokens, Mapping):
            skipped.calls_without_ids += 1
            continue
        prompt, completion = _ids(tokens, "prompt_ids"), _ids(tokens, "completion_ids")
        if prompt is None or completion is None:
            skipped.calls_without_ids += 1
            continue
        logprobs = _ids(tokens, "logprobs")
        if logprobs is not None and len(logprobs) != len(completion):
            logprobs = None
        yield {"call": index, "prompt_ids": prompt, "completion_ids": completion,
               "logprobs": logprobs, "loss_mask": [1] * len(completion),
               "finish_reason": call.get("finish_reason")}


def trace_row(trace: RecordedTrace, skipped: Skipped) -> dict[str, Any] | None:
    """The whole trace as one sequence: the first call's ``prompt_ids``, then
    ``completion_ids`` holding every call's completion and, between them, what the next call's
    prompt added (tool results, the user's turns); ``loss_mask`` is 1 on sampled tokens and 0
    on the added ones, ``logprobs`` 0.0 on the added ones (None when a call has none).

    Needs each call's prompt to begin with the previous call's prompt and completion, as a
    chat template renders an unchanged conversation and an endpoint that continues from the
    sampled ids keeps them; a trace whose calls do not is None and counted, as re-tokenized
    when its ids first differ inside a completion, else as not extending (a template that
    re-renders earlier turns, a context policy that drops them)."""
    before = skipped.calls_without_ids
    rows = list(call_rows(trace, skipped))
    if not rows or skipped.calls_without_ids > before:
        # A call without ids leaves a hole no mask can stand for.
        return None
    prompt = rows[0]["prompt_ids"]
    sequence = list(prompt)
    completion: list[int] = []
    mask: list[int] = []
    logprobs: list[float] | None = []
    completion_of_last: list[int] = []
    for row in rows:
        ids = row["prompt_ids"]
        if ids[:len(sequence)] != sequence:
            at = next((i for i, (a, b) in enumerate(zip(ids, sequence, strict=False))
                       if a != b), min(len(ids), len(sequence)))
            if len(sequence) - len(completion_of_last) <= at < len(ids):
                skipped.retokenized += 1
            else:
                skipped.not_extending += 1
            return None
        added = ids[len(sequence):]
        completion += added
        mask += [0] * len(added)
        if logprobs is not None:
            logprobs += [0.0] * len(added)
        completion += row["completion_ids"]
        mask += row["loss_mask"]
        if logprobs is not None and row["logprobs"] is not None:
            logprobs += row["logprobs"]
        else:
            logprobs = None
        sequence = ids + row["completion_ids"]
        completion_of_last = row["completion_ids"]
    return {"calls": len(rows), "prompt_ids": prompt, "completion_ids": completion,
            "logprobs": logprobs, "loss_mask": mask,
            "finish_reason": rows[-1]["finish_reason"]}


def has_tokens(trace: RecordedTrace) -> bool:
    """Whether any model call of the trace captured tokens."""
    return any(isinstance(c.get("tokens"), Mapping) for c in trace.model_calls)
