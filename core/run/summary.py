"""The run's figures from its episode records, and the summary as a table for a terminal.

The rule for error episodes, the same everywhere a score is shown (summary.json, the terminal,
the report, the progress line): an episode that ended in an error (any ``error_type``: a model
fault, a user sim that failed, a failed verifier, an env that raised, a lost worker) is not
scored. It is left out of
the reward mean, pass@k and pass^k, the per-seat rewards and the metric means, and counted on
its own (``error_episodes``, ``errors`` by type) beside ``completed`` and the run's
``completion_ratio``. A metric is the mean over the completed episodes that recorded it
(``metric_counts`` says how many: a verifier's breakdown may be recorded only where it scored
in full), shown with that count when it is not every completed episode. Stop conditions,
tokens and model calls count every episode: they are what the run did and spent, not how well
it did.

pass@k and pass^k are given for k = 1, 2, 4, ... and the number of rollouts of the task with
the fewest scored rollouts (every task's figure over the same k).

A judge's rewards (those of a rubric verifier, or of a subclass of one: the caller names them,
as :func:`interplay.plugins.host.is_kind` tells them) are also shown per criterion: each criterion's
mean score over the completed episodes the judge scored.

It reads episode records (slimmed by :func:`interplay.run.results.slim_record`) and never
touches files.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from interplay.errors import ErrorType
from interplay.run.results import finite_number, slim_record
from interplay.run.slim import counted_reward


def _comb(n: int, k: int) -> int:
    return math.comb(n, k) if 0 <= k <= n else 0


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n rollouts with c passes: 1 - C(n-c, k) / C(n, k)."""
    return 1.0 - _comb(n - c, k) / _comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k (all k pass) from n rollouts with c passes: C(c, k) / C(n, k)."""
    return _comb(c, k) / _comb(n, k)


def _ks(n: int) -> list[int]:
    ks = {n}
    k = 1
    while k < n:
        ks.add(k)
        k *= 2
    return sorted(ks)


def is_error(record: Mapping[str, Any]) -> bool:
    """Whether an episode record ended in an error, and so is not scored."""
    return bool(record.get("error_type"))


def is_truncated(record: Mapping[str, Any]) -> bool:
    """Whether a limit cut the episode short (its ``truncated`` metric is 1; the always_on
    step sets it on a run its real-time budget ended): scored, as far as it went."""
    value = (record.get("metrics") or {}).get("truncated")
    return finite_number(value) and float(value) >= 1.0


def scored_reward(record: Mapping[str, Any]) -> float | None:
    """The reward an episode counts with: None for an error episode whatever its line holds
    (a line written before this rule may carry one) and for an episode nothing scored."""
    return counted_reward(record.get("error_type"), record.get("reward"))


def summarize(records: Sequence[Mapping[str, Any]], *, pass_threshold: float = 1.0,
              expected: int | None = None, session_wall_s: float | None = None,
              session_episodes: int | None = None,
              judged: Collection[str] = ()) -> dict[str, Any]:
    """The run's figures from its episode records (as read from episodes.jsonl, or slim).
    ``session_wall_s`` and ``session_episodes`` describe the process that ran last (absent
    for a report); ``judged`` names the env's rubric verifiers, whose criteria are averaged."""
    records = [r if "usage" in r else slim_record(r) for r in records]
    completed = [r for r in records if not is_error(r)]
    rewards = [x for x in map(scored_reward, completed) if x is not None]
    truncated = [r for r in completed if is_truncated(r)]
    whole = [x for r in completed if not is_truncated(r)
             if (x := scored_reward(r)) is not None]

    by_task: dict[int, list[bool]] = {}
    for r in completed:
        reward = scored_reward(r)
        if reward is not None:
            by_task.setdefault(int(r["info"]["task_idx"]), []).append(reward >= pass_threshold)
    pass_k: dict[str, float] = {}
    pass_hat: dict[str, float] = {}
    if by_task:
        # Over the rollouts every task has: a task with fewer would bias the larger k.
        n_min = min(len(v) for v in by_task.values())
        for k in _ks(n_min):
            pass_k[str(k)] = _mean([pass_at_k(len(v), sum(v), k) for v in by_task.values()])
            pass_hat[str(k)] = _mean([pass_hat_k(len(v), sum(v), k) for v in by_task.values()])

    metric_values: dict[str, list[float]] = {}
    seat_rewards: dict[str, list[float]] = {}
    for r in completed:
        for key, value in (r.get("metrics") or {}).items():
            if finite_number(value):
                metric_values.setdefault(str(key), []).append(float(value))
        for t in r.get("traces") or ():
            if t.get("reward") is not None:
                seat_rewards.setdefault(_seat(t), []).append(float(t["reward"]))
    criteria: dict[str, dict[str, list[float]]] = {}
    for r in completed:
        for name, scores in (r.get("criteria") or {}).items():
            if name in judged:
                for criterion, score in scores.items():
                    criteria.setdefault(name, {}).setdefault(criterion, []).append(score)
    stops: Counter[str] = Counter()
    tokens: Counter[str] = Counter()
    for r in records:
        for t in r.get("traces") or ():
            stops[f"{_seat(t)}: {t.get('stop_condition')}"] += 1
        tokens.update(r["usage"])
    errors = Counter(str(r["error_type"]) for r in records if is_error(r))
    causes = Counter((str(r["error_type"]), r.get("error") or "") for r in records
                     if is_error(r))
    done = len(records)
    wall = busy_seconds(records)
    out: dict[str, Any] = {
        "episodes": done,
        "expected": expected,
        "complete": expected is None or done >= expected,
        "completed": len(completed),
        "error_episodes": done - len(completed),
        "completion_ratio": len(completed) / (expected or done) if (expected or done) else None,
        "tasks": len({int(r["info"]["task_idx"]) for r in records}),
        "scored": len(rewards),
        "reward_mean": _mean(rewards) if rewards else None,
        "reward_stderr": stderr(rewards),
        # Episodes a limit cut short (metrics.truncated = 1: an always_on run its real-time
        # budget ended) are scored as far as they went and averaged in above; counted here,
        # with the mean of the rest beside it, so they are never averaged in unmarked.
        "truncated": len(truncated),
        "reward_mean_untruncated": (_mean(whole) if whole else None) if truncated else None,
        "pass_threshold": pass_threshold,
        "pass_at_k": pass_k,
        "pass_hat_k": pass_hat,
        "seat_rewards": {seat: {"mean": _mean(v), "stderr": stderr(v), "n": len(v)}
                         for seat, v in sorted(seat_rewards.items())},
        "metrics": {k: _mean(v) for k, v in sorted(metric_values.items())},
        # How many completed episodes each metric is the mean of: a verifier's breakdown is
        # recorded only where it scored in full (tau2's is absent from a cut conversation).
        "metric_counts": {k: len(v) for k, v in sorted(metric_values.items())},
        "criteria": {name: {c: {"mean": _mean(v), "n": len(v)} for c, v in by.items()}
                     for name, by in sorted(criteria.items())},
        "stop_conditions": dict(sorted(stops.items())),
        "errors": dict(sorted(errors.items())),
        "common_error": _common_error(causes),
        "tokens": {k: tokens[k] for k in ("prompt_tokens", "completion_tokens",
                                          "total_tokens")},
        "model_calls": tokens["model_calls"],
        "episode_wall_s_mean": _mean([float(r.get("wall_s") or 0.0) for r in records])
        if records else None,
        "wall_s": wall,
        "episodes_per_s": done / wall if wall else None,
    }
    if session_wall_s is not None:
        out["session_wall_s"] = session_wall_s
        out["episodes_this_session"] = done if session_episodes is None else session_episodes
    return out


def _common_error(causes: Counter[tuple[str, str]]) -> dict[str, Any] | None:
    """The error most error episodes ended with: its type, its text, how many."""
    if not causes:
        return None
    (error_type, error), n = causes.most_common(1)[0]
    return {"error_type": error_type, "error": error, "episodes": n}


#: The advice for a request past the model's context window (its 400 says so in more than
#: one way).
_OUTGROWN = ("the conversation outgrew the model's context window: lower "
             "{ep}.sampling.max_tokens or the env's turns, or serve the model with a longer "
             "window")

#: A call that twice sent its request and got no answer begun: nothing helps but a server
#: that serves.
_UNANSWERED = ("the endpoint takes requests and answers none: see that its server is serving "
               "(its own logs; a process stopped, wedged or out of memory) and reachable at "
               "{ep}.base_url; raise {ep}.first_byte_timeout_s (a stream's wait) or "
               "{ep}.timeout_s (a whole answer's) only if it queues requests longer")
_QUEUED = ("the endpoint began no answer in time: see that its server is serving, or raise "
           "{ep}.first_byte_timeout_s if it queues requests longer (or lower -c)")
_SLOW_WHOLE = ("the endpoint did not answer a whole (non-streamed) request within "
               "{ep}.timeout_s: raise it if its answers take longer, or lower -c")

#: What to change for an error, by type: the first remedy whose words all occur in the error's
#: text (lowercased), else the type's last one (no words). Each says what follows the change:
#: ``resume`` (the run resumed with --retry-errors: what it changes may differ on resume),
#: ``new_run`` (a setting --resume refuses to change) or ``regrade`` (only scoring failed).
#: ``{ep}`` is the endpoint's key (``model``, or a seat's own ``seats.SEAT.model``), ``{flag}``
#: its flag (the run's only).
_REMEDIES: dict[str, list[tuple[tuple[str, ...], str, str]]] = {
    ErrorType.CONNECTION_ERROR: [
        (("mismatch", "certificate verify failed"),
         "the endpoint's certificate is for another name: reach it by a host name the "
         "certificate holds ({ep}.base_url)", "new_run"),
        (("certificate verify failed",),
         "the endpoint's certificate is not trusted here: set {ep}.ca_bundle to the PEM file "
         "of its CA (or export SSL_CERT_FILE=that file)", "resume"),
        (("certificate",), "the endpoint's TLS certificate was refused: check {ep}.base_url's "
                           "host and {ep}.ca_bundle", "resume"),
        (("name or service not known",), "{ep}.base_url's host name does not resolve",
         "new_run"),
        (("nodename nor servname",), "{ep}.base_url's host name does not resolve", "new_run"),
        ((), "nothing answered at {ep}.base_url{flag}: start the endpoint there, or set "
             "{ep}.proxy (HTTPS_PROXY) if it is reached through one (a wrong URL needs a new "
             "run with another -o: --resume keeps the run's URL)", "resume"),
    ],
    # Read from what timed out: the endpoint (a call that began no answer, or stalled), the
    # seat's turn, a harness's own limit (the setting it names), else what the text says.
    ErrorType.TIMEOUT: [
        (("began no answer", "in a row"), _UNANSWERED, "resume"),
        (("began no answer", "first_byte_timeout_s"), _QUEUED, "resume"),
        (("began no answer",), _SLOW_WHOLE, "resume"),
        (("timed out connecting",), "nothing accepted the connection at {ep}.base_url within "
                                    "10 s: see that the endpoint is up and reachable from "
                                    "here", "resume"),
        (("timed out reading",), "the endpoint's answer stopped partway for {ep}.timeout_s: "
                                 "its own logs say why (raise {ep}.timeout_s only if it "
                                 "pauses longer mid-answer)", "resume"),
        (("segment exceeded",), "raise the seat's timeout_s (--set seats.SEAT.timeout_s=...)",
         "resume"),
        (("command exceeded",), "raise harness_config.timeout_s", "new_run"),
        # A program harness's own limits, named in its error (the base's words).
        (("(harness_config.timeout_s)",), "raise harness_config.timeout_s", "new_run"),
        (("(harness_config.wall_time_limit_s)",), "raise harness_config.wall_time_limit_s",
         "new_run"),
        (("harness_config.",), "a limit of the harness ended it (the error names the "
                               "setting): raise that setting, or give the turn less to do",
         "new_run"),
        ((), "a time limit inside the turn was reached (the error says which): raise that "
             "limit where it is set", "resume"),
    ],
    ErrorType.AUTH_ERROR: [((), "the endpoint refused the key: set {ep}.api_key_var to the "
                                "variable holding a valid one", "resume")],
    # What was sent is the run's config: a change to it is a new run, and the same request
    # sent again (--retry-errors) is refused again.
    ErrorType.BAD_REQUEST: [
        (("context",), _OUTGROWN, "new_run"),
        (("too long",), _OUTGROWN, "new_run"),
        ((), "the endpoint refused the request the run's config made (its answer says why): "
             "change that setting, or serve another model; sent again unchanged, it is "
             "refused again", "new_run"),
    ],
    ErrorType.NOT_FOUND: [((), "check {ep}.base_url (it often ends in /v1) and the model's name "
                               "({ep}.model)", "new_run")],
    ErrorType.RATE_LIMITED: [((), "lower -c, or give retries more room ({ep}.max_retries, "
                                  "{ep}.retry_max_s)", "resume")],
    ErrorType.SERVER_ERROR: [((), "the endpoint failed; its own logs say why ({ep}.max_retries "
                                  "retries such answers)", "resume")],
    ErrorType.SPAWN_ERROR: [((), "the system ran short of descriptors, processes or memory: raise "
                                 "`ulimit -n` (and `ulimit -u`) or lower -c", "resume")],
    ErrorType.COMMAND_FAILED: [((), "the program's exit code and stderr are in episodes.jsonl "
                                    "(traces[].info.command_runs)", "resume")],
    ErrorType.USER_ERROR: [((), "the user sim failed (its error names it and where in its "
                                "code): mend it and resume, or choose another (env.user_sim) "
                                "in a new run", "resume")],
    ErrorType.ENV_ERROR: [((), "a step of the env raised (the error names where in its "
                               "code): mend it", "resume")],
    ErrorType.VERIFIER_ERROR: [((), "a verifier failed (the error names where in its code): "
                                    "mend it", "regrade")],
    # Its own text says what to change; a changed setting is a new run.
    ErrorType.CONFIG_ERROR: [((), "", "new_run")],
}

#: An episode error that names the seat whose own endpoint failed
#: (:func:`interplay.run.episode.seat_error`).
_OWN_ENDPOINT = re.compile(r"^seat '[^']+' \(its own endpoint (seats\.[^ ,)]+\.model)[,)]")


def remedy(error_type: str, error: str) -> str | None:
    """The setting to change for an error of ``error_type`` whose text is ``error``; None
    where the error's own text says it (a config error) or nothing general can be said."""
    return _remedy(error_type, error)[0]


def _remedy(error_type: str, error: str) -> tuple[str | None, str]:
    """The advice (None: none) and what follows it: resume, new_run or regrade."""
    text = error.lower()
    own = _OWN_ENDPOINT.match(error)
    ep, flag = (own[1], "") if own else ("model", " (--base-url)")
    for words, advice, then in _REMEDIES.get(error_type, []):
        if all(w in text for w in words):
            return (advice.format(ep=ep, flag=flag) or None), then
    return None, "resume"


def error_line(summary: Mapping[str, Any], *, rerun: str, new_run: str | None = None,
               regrade: str | None = None) -> str | None:
    """The terminal's last word on a run's errors: when no episode completed, or when more
    than half of its episodes ended with the same error, that error, its cause and what to
    change, and how to go on that accepts the change: ``rerun`` (the run resumed), ``new_run``
    (a setting --resume refuses) or ``regrade`` (only scoring failed); None otherwise."""
    common = summary.get("common_error")
    episodes = int(summary.get("episodes") or 0)
    if not common or not episodes:
        return None
    cause = " ".join(str(common["error"]).split())
    advice, then = _remedy(common["error_type"], cause)
    follow = {"resume": rerun,
              "new_run": new_run or "start a new run with another -o (--resume keeps the "
                                    "run's config)",
              "regrade": regrade or rerun}[then]
    said = f"{common['error_type']}: {cause}" if cause else common["error_type"]
    if advice:
        said += f"; {advice}"
    if not summary.get("completed"):
        if common["episodes"] == episodes:
            return (f"interplay: error: no episode completed: all {episodes} ended in {said}; "
                    f"then {follow}")
        errors = ", ".join(f"{kind} {n}" for kind, n in
                           sorted(summary["errors"].items(), key=lambda item: -item[1]))
        return (f"interplay: error: no episode completed: all {episodes} ended in an error "
                f"({errors}), {common['episodes']} in {said}; mend the causes, then {rerun}")
    if common["episodes"] * 2 > episodes:
        return (f"interplay: warning: {common['episodes']} of {episodes} episodes ended in "
                f"{said}; then {follow}")
    return None


def busy_seconds(records: Sequence[Mapping[str, Any]]) -> float | None:
    """The run's wall time over all its sessions: how long at least one of its episodes was
    running (the union of the episodes' intervals), so the time between a kill and a resume
    does not count, and a resume with nothing left to run still reports the run's time."""
    spans = sorted((float(r["started_at"]), float(r["started_at"]) + float(r["wall_s"] or 0))
                   for r in records if r.get("started_at"))
    if not spans:
        return None
    total = 0.0
    start, end = spans[0]
    for s, e in spans[1:]:
        if s > end:
            total += end - start
            start, end = s, e
        else:
            end = max(end, e)
    return total + end - start


def _seat(trace: Mapping[str, Any]) -> str:
    return str(trace.get("seat") or trace.get("agent"))


def _mean(values: Sequence[float]) -> float:
    # Each value's share summed, so that a mean of finite numbers never overflows.
    n = len(values)
    return math.fsum(x / n for x in values) if values else 0.0


def stderr(values: Sequence[float]) -> float | None:
    """The standard error of the mean (None for fewer than two values)."""
    if len(values) < 2:
        return None
    # Worked out on the values scaled to at most 1: squares of large ones would overflow.
    scale = max(abs(x) for x in values) or 1.0
    scaled = [x / scale for x in values]
    mean = _mean(scaled)
    var = math.fsum((x - mean) ** 2 for x in scaled) / (len(values) - 1)
    return scale * math.sqrt(var / len(values))


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def reward_text(summary: Mapping[str, Any]) -> str:
    """The mean reward with its standard error, as the terminal and the report show it."""
    text = _fmt(summary.get("reward_mean"))
    if summary.get("reward_stderr") is not None:
        text += f" ± {summary['reward_stderr']:.3g}"
    return text


#: How the terminal and the report name the episodes a limit cut short.
TRUNCATED_LABEL = "truncated (cut short by a limit, scored as far as they went)"


def truncated_text(summary: Mapping[str, Any]) -> str | None:
    """How many episodes a limit cut short and the mean reward without them, as the terminal
    and the report show it beside the mean of all; None when none was."""
    if not summary.get("truncated"):
        return None
    return (f"{summary['truncated']}; reward without them "
            f"{_fmt(summary.get('reward_mean_untruncated'))}")


def completion_text(summary: Mapping[str, Any]) -> str:
    """How many episodes completed, of how many, as the terminal and the report show it."""
    of = summary.get("expected") or summary.get("episodes") or 0
    ratio = summary.get("completion_ratio")
    return f"{summary.get('completed', 0)} of {of}" + (f" ({ratio:.0%})" if ratio is not None
                                                        else "")


def metric_text(summary: Mapping[str, Any], key: str) -> str:
    """A metric's mean as the terminal and the report show it: with the number of episodes it
    is the mean of when that is not every completed episode (``0.8 (7 of 10 completed)``)."""
    value = _fmt((summary.get("metrics") or {}).get(key))
    n = (summary.get("metric_counts") or {}).get(key)
    completed = summary.get("completed")
    if isinstance(n, int) and isinstance(completed, int) and n != completed:
        value += f" ({n} of {completed} completed)"
    return value


def format_summary(summary: Mapping[str, Any], *, title: str = "") -> str:
    """The summary as an aligned two-column table for a terminal."""
    rows: list[tuple[str, str]] = []
    expected = summary.get("expected")
    rows.append(("episodes", f"{summary['episodes']}" + (f" / {expected}" if expected else "")))
    rows.append(("completed", completion_text(summary)))
    rows.append(("error episodes (not scored)", str(summary.get("error_episodes", 0))))
    rows.append(("tasks", str(summary["tasks"])))
    # A multi-seat env (a game) scores each seat, not the episode: its seats' rewards are the
    # run's figures, not a "-" for the episode's.
    per_seat = not summary.get("scored") and bool(summary.get("seat_rewards"))
    if not per_seat:
        rows.append((f"reward (mean ± se, {summary.get('scored', 0)} scored)",
                     reward_text(summary)))
    if (truncated := truncated_text(summary)) is not None:
        rows.append((TRUNCATED_LABEL, truncated))
    for k, v in summary.get("pass_at_k", {}).items():
        rows.append((f"pass@{k}", _fmt(v)))
    for k, v in summary.get("pass_hat_k", {}).items():
        rows.append((f"pass^{k}", _fmt(v)))
    for seat, figures in summary.get("seat_rewards", {}).items():
        text = _fmt(figures["mean"])
        if figures.get("stderr") is not None:
            text += f" ± {figures['stderr']:.3g}"
        rows.append((f"reward {seat}" + (f" (mean ± se, {figures.get('n', 0)} scored)"
                                         if per_seat else ""), text))
    for k in summary.get("metrics", {}):
        rows.append((f"metric {k}", metric_text(summary, k)))
    for name, by in summary.get("criteria", {}).items():
        for criterion, figures in by.items():
            rows.append((f"criterion {name}.{criterion}",
                         f"{_fmt(figures['mean'])} (n={figures['n']})"))
    for k, v in summary.get("stop_conditions", {}).items():
        rows.append((f"stop {k}", str(v)))
    for k, v in summary.get("errors", {}).items():
        rows.append((f"error {k}", str(v)))
    tokens = summary.get("tokens", {})
    rows.append(("tokens prompt/completion/total",
                 f"{tokens.get('prompt_tokens', 0)} / {tokens.get('completion_tokens', 0)} / "
                 f"{tokens.get('total_tokens', 0)}"))
    rows.append(("model calls", str(summary.get("model_calls", 0))))
    if summary.get("wall_s") is not None:
        rows.append(("wall time", f"{summary['wall_s']:.3g} s"))
        rows.append(("episodes/s", _fmt(summary.get("episodes_per_s"))))
    if summary.get("episodes_this_session") == 0:
        rows.append(("this session", "nothing left to run"))
    elif summary.get("session_wall_s") is not None and summary.get("wall_s") is not None \
            and summary.get("episodes_this_session") != summary.get("episodes"):
        rows.append(("this session", f"{summary['episodes_this_session']} episodes in "
                                     f"{summary['session_wall_s']:.3g} s"))
    width = max(len(k) for k, _ in rows)
    lines = [title] if title else []
    lines += [f"  {k:<{width}}  {v}" for k, v in rows]
    return "\n".join(lines)
