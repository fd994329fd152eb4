"""``interplay export RUN --format inspect``: a run as an Inspect eval log (its JSON form),
which ``inspect view`` lists and opens and ``inspect_ai.log.read_eval_log`` reads.

Each episode is a sample: its task is the sample's id and its rollout the epoch (from 1), the
conversation of its first trainable seat the sample's messages (every other seat's in the
sample's metadata, under ``seats``), each verifier's reward a score with its reason as the
explanation and its details as metadata (``reward`` is the episode's), an episode that ended
in an error the sample's error; an always_on agent's private notes (its plain replies, which
the user never reads) are marked private in their messages' metadata. The run's figures are
the log's results: each score's mean and standard error over the samples it scored.

Every value is made by inspect-ai's own types (``pip install 'interplay[inspect]'``), checked
as they are built. The samples are written one at a time into a file beside the output and the
log is put together after them (its header, then the samples), so what is held does not grow
with the run.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from interplay.contracts.exporter import ExportFormat, Written
from interplay.errors import InterplayError
from interplay.run.notes import is_private_note, private_notes
from interplay.run.results import slim_record
from interplay.run.summary import is_error, stderr, summarize

HINT = "pip install 'interplay[inspect]'"


def _inspect() -> Any:
    try:
        import inspect_ai.log as log
        import inspect_ai.model as model
        import inspect_ai.scorer as scorer
        import inspect_ai.tool as tool
    except ImportError:
        raise InterplayError(f"--format inspect writes through inspect-ai, which is not "
                             f"installed: {HINT}") from None
    return log, model, scorer, tool


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _seq(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(_map(p).get("text", "")) if isinstance(p, Mapping) else str(p)
                       for p in content)
    return json.dumps(content, ensure_ascii=False, default=repr)


def _iso(seconds: Any) -> str | None:
    if not isinstance(seconds, int | float) or not math.isfinite(seconds) or seconds <= 0:
        return None
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat()


def _plain(value: Any) -> Any:
    """``value`` as plain JSON data (what metadata holds)."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=repr))


class InspectLog(ExportFormat):
    """An Inspect eval log (JSON): inspect view lists and opens it; needs interplay[inspect]."""

    name = "inspect"
    description = f"an Inspect eval log that `inspect view` opens ({HINT})"
    default_output = "inspect.json"

    def output_name(self, run_config: Mapping[str, Any]) -> str:
        # `inspect view` lists the JSON logs of a folder whose names begin with their time.
        env = _map(_map(run_config.get("config")).get("env")).get("name") or "run"
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(str(env)).stem).strip("-") or "run"
        return f"{dt.datetime.now(dt.UTC):%Y-%m-%dT%H-%M-%S}_{safe}_interplay.json"

    def write(self, episodes: Iterable[dict[str, Any]], output: Path, *,
              run_config: Mapping[str, Any]) -> Written:
        log, _, _, _ = _inspect()
        config = _map(run_config.get("config"))
        fd, held = tempfile.mkstemp(prefix=".inspect-samples-", dir=output.parent)
        slims: list[dict[str, Any]] = []
        usage: dict[str, dict[str, int]] = {}
        scores: dict[str, list[float]] = {}
        started: list[float] = []
        ended: list[float] = []
        tasks: set[int] = set()
        count = 0
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                for record in episodes:
                    sample = self.sample(record, config)
                    out.write("," if count else "")
                    out.write(sample.model_dump_json(exclude_none=True))
                    count += 1
                    slims.append(slim_record(record))
                    tasks.add(int(_map(record.get("info")).get("task_idx") or 0))
                    for name, score in (sample.scores or {}).items():
                        if isinstance(score.value, int | float):
                            scores.setdefault(name, []).append(float(score.value))
                    for name, used in sample.model_usage.items():
                        total = usage.setdefault(name, {"input_tokens": 0, "output_tokens": 0,
                                                        "total_tokens": 0})
                        total["input_tokens"] += used.input_tokens
                        total["output_tokens"] += used.output_tokens
                        total["total_tokens"] += used.total_tokens
                    at, wall = record.get("started_at"), record.get("wall_s")
                    if isinstance(at, int | float):
                        started.append(float(at))
                        if isinstance(wall, int | float):
                            ended.append(float(at) + float(wall))
            header = self.header(log, config, run_config, summarize(slims), scores, usage,
                                 started, ended, sorted(tasks), count)
            text = header.model_dump_json(exclude_none=True, exclude={"samples"})
            with output.open("w", encoding="utf-8") as fh, open(held, encoding="utf-8") as got:
                fh.write(text[:-1] + ',"samples":[')
                while chunk := got.read(1 << 20):
                    fh.write(chunk)
                fh.write("]}")
        finally:
            with contextlib.suppress(OSError):
                os.unlink(held)
        return Written(episodes=count)

    # -- what each part becomes ------------------------------------------------------------

    def sample(self, record: Mapping[str, Any], config: Mapping[str, Any]) -> Any:
        """An episode record as an Inspect ``EvalSample``."""
        log, model, scorer, _ = _inspect()
        info, task = _map(record.get("info")), _map(record.get("task"))
        traces = [_map(t) for t in _seq(record.get("traces"))]
        main = next((t for t in traces if t.get("trainable") is not False), traces[0]
                    if traces else {})
        prompt = task.get("prompt")
        if isinstance(prompt, list) and prompt:
            sample_input: Any = self.messages(prompt, "")
        else:
            sample_input = _text(prompt)
        answer = task.get("answer")
        target = answer if isinstance(answer, str) else "" if answer is None else json.dumps(
            answer, ensure_ascii=False, default=repr)
        scores = None
        if not is_error(record):
            scores = {}
            if record.get("reward") is not None:
                reasons = "; ".join(f"{_map(r).get('name')}: {_map(r).get('reason')}"
                                    for r in _seq(record.get("rewards"))
                                    if _map(r).get("reason"))
                scores["reward"] = scorer.Score(value=float(record["reward"]),
                                                explanation=reasons or None)
            for r in map(_map, _seq(record.get("rewards"))):
                name = str(r.get("name") or "")
                value = r.get("value")
                if not name or name == "reward" or not isinstance(value, int | float):
                    continue
                scores[name] = scorer.Score(
                    value=float(value), explanation=r.get("reason") or None,
                    metadata=_plain({k: r.get(k) for k in ("weight", "seat", "info")
                                     if r.get(k) is not None}) or None)
        used: dict[str, Any] = {}
        for t in traces:
            for call in map(_map, _seq(t.get("model_calls"))):
                u = _map(call.get("usage"))
                name = str(call.get("model") or t.get("model") or "model")
                total = used.setdefault(name, [0, 0, 0])
                total[0] += int(u.get("prompt_tokens") or 0)
                total[1] += int(u.get("completion_tokens") or 0)
                total[2] += int(u.get("total_tokens") or 0)
        at, wall = record.get("started_at"), record.get("wall_s")
        messages = self.messages(_seq(main.get("messages")), str(main.get("model") or ""),
                                 private_notes(record))
        private = [i for i, m in enumerate(messages) if (m.metadata or {}).get("private")]
        error = None
        if is_error(record):
            error = log.EvalError(message=f"{record.get('error_type')}: {record.get('error')}",
                                  traceback="", traceback_ansi="")
        return log.EvalSample(
            id=int(info.get("task_idx") or 0), epoch=int(info.get("rollout") or 0) + 1,
            uuid=str(info.get("episode_id") or "") or None,
            input=sample_input, target=target,
            messages=messages,
            scores=scores,
            metadata=_plain({
                "episode_id": info.get("episode_id"), "env": info.get("env"),
                "seed": info.get("seed"), "seat": main.get("seat") or main.get("agent"),
                "stop_conditions": {str(t.get("seat") or t.get("agent")): t.get("stop_condition")
                                    for t in traces},
                "metrics": record.get("metrics") or {},
                "harness_info": {str(t.get("seat") or t.get("agent")): t.get("info")
                                 for t in traces if t.get("info")},
                "seats": {str(t.get("seat") or t.get("agent")): [
                    {"role": _map(m).get("role"), "content": _text(_map(m).get("content"))}
                    for m in _seq(t.get("messages"))] for t in traces if t is not main},
                "task_info": task.get("info") or {},
                # An always_on agent's plain replies: private notes she never read (each such
                # message's own metadata says private too).
                **({"private_messages": private} if private else {})}),
            model_usage={name: model.ModelUsage(input_tokens=a, output_tokens=b,
                                                total_tokens=c)
                         for name, (a, b, c) in used.items()},
            started_at=_iso(at),
            completed_at=_iso(at + wall if isinstance(at, int | float)
                              and isinstance(wall, int | float) else None),
            total_time=float(wall) if isinstance(wall, int | float) else None,
            error=error)

    def messages(self, messages: list[Any], model_name: str,
                 notes: Sequence[str] = ()) -> list[Any]:
        """OpenAI-shaped messages as Inspect's chat messages; an assistant's text that is one
        of ``notes`` (an always_on wake's private notes) has ``{"private": true}`` as its
        metadata."""
        _, model, _, tool = _inspect()
        names: dict[str, str] = {}
        out: list[Any] = []
        for m in map(_map, messages):
            role, text = m.get("role"), _text(m.get("content"))
            if role == "assistant":
                calls = []
                for c in map(_map, _seq(m.get("tool_calls"))):
                    fn = _map(c.get("function"))
                    raw, error = fn.get("arguments"), None
                    try:
                        args = json.loads(raw) if isinstance(raw, str) else dict(_map(raw))
                        if not isinstance(args, dict):
                            args, error = {"value": args}, "arguments are not an object"
                    except ValueError as exc:
                        args, error = {"raw": raw}, f"arguments are not JSON: {exc}"
                    call_id = str(c.get("id") or f"call_{len(calls)}")
                    names[call_id] = str(fn.get("name") or "")
                    calls.append(tool.ToolCall(id=call_id, function=names[call_id],
                                               arguments=args, parse_error=error))
                private = is_private_note(text, notes)
                out.append(model.ChatMessageAssistant(content=text, tool_calls=calls or None,
                                                      model=model_name or None,
                                                      metadata={"private": True} if private
                                                      else None))
            elif role == "tool":
                call_id = str(m.get("tool_call_id") or "")
                out.append(model.ChatMessageTool(content=text, tool_call_id=call_id or None,
                                                 function=names.get(call_id)))
            elif role in ("system", "developer"):
                out.append(model.ChatMessageSystem(content=text))
            else:
                out.append(model.ChatMessageUser(content=text))
        return out

    def header(self, log: Any, config: Mapping[str, Any], run_config: Mapping[str, Any],
               summary: Mapping[str, Any], scores: Mapping[str, list[float]],
               usage: Mapping[str, Mapping[str, int]], started: list[float],
               ended: list[float], tasks: list[int], count: int) -> Any:
        """The log without its samples: what ran, its figures, its times and tokens."""
        from interplay._version import __version__

        _, model, _, _ = _inspect()
        env = _map(config.get("env"))
        endpoint = _map(config.get("model"))
        model_name = str(endpoint.get("model") or "embedded")
        created = _iso(min(started)) if started else dt.datetime.now(dt.UTC).isoformat()
        run_id = re.sub(r"[^A-Za-z0-9]", "", str(created))[:22]
        results = log.EvalResults(
            total_samples=count, completed_samples=int(summary.get("completed") or 0),
            scores=[log.EvalScore(
                name=name, scorer="interplay" if name == "reward" else name,
                scored_samples=len(values),
                metrics={"mean": log.EvalMetric(name="mean", value=sum(values) / len(values)),
                         "stderr": log.EvalMetric(name="stderr", value=stderr(values) or 0.0)})
                for name, values in scores.items() if values])
        status = "success"
        if summary.get("error_episodes") and not summary.get("completed"):
            status = "error"
        return log.EvalLog(
            status=status,
            eval=log.EvalSpec(
                eval_id=f"interplay-{run_id}", run_id=f"interplay-{run_id}", created=created,
                task=str(env.get("name") or "run"),
                task_args=_plain({k: v for k, v in env.items() if k != "name"}),
                dataset=log.EvalDataset(name=str(env.get("name") or "run"), samples=len(tasks),
                                        sample_ids=tasks),
                model=model_name if "/" in model_name else f"interplay/{model_name}",
                model_base_url=str(endpoint.get("base_url") or "") or None,
                config=log.EvalConfig(epochs=int(config.get("rollouts") or 1)),
                packages={"interplay": __version__},
                metadata=_plain({"interplay": {"config": config,
                                               "verifiers": run_config.get("verifiers"),
                                               "pass_at_k": summary.get("pass_at_k"),
                                               "pass_hat_k": summary.get("pass_hat_k"),
                                               "errors": summary.get("errors")}})),
            results=results,
            stats=log.EvalStats(
                started_at=_iso(min(started)) if started else "",
                completed_at=_iso(max(ended)) if ended else "",
                model_usage={name: model.ModelUsage(**u) for name, u in usage.items()}))

