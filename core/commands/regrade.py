"""``interplay regrade RUN -o NEW``: the verifiers applied again to a run's stored episodes.

Owns rebuilding a run's env from its ``config.json`` (with more verifiers when asked:
``--set env.verifiers=[...]``, or only those with ``env.own_verifiers=false``, the rule
``interplay eval`` follows), scoring each stored episode through the very function a run
scores with (:func:`interplay.run.episode.score`) without calling the agent's model again (a
judge still calls its own), and writing a new results folder that names its source:
``config.json`` (the source's config, the verifiers now used, and ``regrade`` naming the source
folder), ``episodes.jsonl``, ``summary.json`` and the report.

What a verifier reads at score time is the Episode (its traces, results, task) and the
episode's context. The Episode is rebuilt from the stored line
(:func:`interplay.run.results.stored_episode`); the context is the stored episode's, with
no agents and no sandbox: a verifier that asks for a seat's agent (``ctx.agent``) or for the
episode's sandbox (``ctx.sandbox()``: the ``tests`` verifier; it was removed when the episode
ended) needs an episode run again, not a stored one, and stops the regrade with one line. A
verifier that reads what the env's steps do not write is refused when the env loads, as by
``interplay eval``. It never changes the source folder.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from interplay._version import __version__
from interplay.config import loading as config_mod
from interplay.contracts.env import Env
from interplay.errors import ErrorType, InterplayError
from interplay.log import get_logger
from interplay.run.config import (
    RunConfig,
    give_again,
    masked_credentials,
    resolve,
    resolved_seats,
    without_credentials,
)
from interplay.run.episode import LiveEpisodeContext, RunResources, score
from interplay.run.results import (
    CONFIG_FILE,
    EPISODES_FILE,
    SUMMARY_FILE,
    EpisodeLog,
    iter_episodes,
    judged_in,
    recorded_verifiers,
    slim_episode,
    stored_episode,
    stored_verifiers,
    write_json,
)
from interplay.run.summary import summarize
from interplay.values.records import Episode

log = get_logger("interplay.commands.regrade")

#: What ``--set`` may change in a regrade: the verifiers (``env.verifiers`` beside the env's
#: own, ``env.own_verifiers``), the endpoint a judge that names none calls, the pass threshold,
#: and how many episodes are scored at once. Anything else would
#: change what the stored episodes did, which only running them again can.
SETTABLE = ("env.verifiers", "env.own_verifiers", "model", "pass_threshold",
            "concurrency")


class StoredEpisodeContext(LiveEpisodeContext):
    """A stored episode's context: its env, task, results and traces, and no agents or
    sandbox."""

    refused: str | None = None

    def agent(self, seat: str, *, name: str | None = None) -> Any:
        self.refused = (f"asks for the agent of seat {seat!r}, which a regrade does not run "
                        f"(it scores the stored episodes without calling the agent again); "
                        f"score this env with `interplay eval`")
        raise InterplayError(self.refused)

    async def sandbox(self) -> Any:
        self.refused = ("runs commands in the episode's sandbox, which was removed when the "
                        "episode ended (a stored episode keeps what changed in it, not the "
                        "sandbox); score this env with `interplay eval`")
        raise InterplayError(self.refused)


@attrs.define
class Regrade:
    """A regrade set up: the source folder, the env to score with, the config it ran with."""

    source: Path
    output: Path
    cfg: RunConfig
    env: Env
    resolved: dict[str, Any]
    #: The verifier rows ``env.verifiers`` adds (empty: the env's own verifiers alone).
    rows: list[dict[str, Any]]
    #: The names of the verifiers that scored the source (their rewards and metrics go).
    old_names: frozenset[str]


def _read_config(source: Path) -> dict[str, Any]:
    path = source / CONFIG_FILE
    if not (source / EPISODES_FILE).is_file() or not path.is_file():
        raise InterplayError(f"{source}: not a results folder (no {EPISODES_FILE} and "
                             f"{CONFIG_FILE}); point `interplay regrade` at the -o folder of "
                             f"`interplay eval`")
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        stored = None
    if not isinstance(stored, dict) or not isinstance(stored.get("config"), dict):
        raise InterplayError(f"{path}: not a results config; point `interplay regrade` at "
                             f"the -o folder of `interplay eval`")
    return stored


def _checked_overrides(overrides: Sequence[str]) -> list[str]:
    for item in overrides:
        parts, _ = config_mod.parse_override(item)
        key = ".".join(parts)
        if not any(key == s or key.startswith(f"{s}.") for s in SETTABLE):
            raise InterplayError(
                f"--set {key}: a regrade changes only {', '.join(SETTABLE)}; what else the "
                f"run was set to decided what its stored episodes did: run `interplay eval` "
                f"with it instead")
    return list(overrides)


def prepare(source: str | Path, output: str | Path | None, overrides: Sequence[str] = (),
            concurrency: int | None = None) -> Regrade:
    """Check the source folder and the settings, load the env with the verifiers to use, and
    make the new results folder with its config.json. Nothing is scored yet.

    The verifiers follow the rule ``interplay eval`` follows
    (:class:`interplay.contracts.EnvOptions`): the env's own, and beside them those
    ``env.verifiers`` names; with ``env.own_verifiers = false`` only those. The source's own
    ``env.verifiers`` are kept unless given again."""
    src = Path(source)
    stored = _read_config(src)
    data = config_mod.apply_overrides(stored["config"], _checked_overrides(overrides))
    env_table = data.setdefault("env", {})
    regraded = stored.get("regrade") if isinstance(stored.get("regrade"), dict) else {}
    if "verifiers" not in env_table and isinstance(regraded.get("verifiers"), list):
        # A regrade written before env.verifiers was every env's: its rows replaced the
        # env's own verifiers.
        env_table["verifiers"] = regraded["verifiers"]
        env_table.setdefault("own_verifiers", False)
    if concurrency is not None:
        data["concurrency"] = concurrency
    data.pop("output", None)
    data.pop("retry_errors", None)
    for key in masked_credentials(data):
        if key.startswith("model."):
            raise InterplayError(give_again(key, base_url_flag=False))
    cfg, env, resolved = resolve(data)
    out = Path(output) if output else src.parent / f"{src.name}-regraded-" \
                                                   f"{time.strftime('%Y%m%d-%H%M%S')}"
    if out.resolve() == src.resolve():
        raise InterplayError(f"-o {out}: that is the run being regraded; choose another -o")
    if (out / EPISODES_FILE).exists() or (out / CONFIG_FILE).exists():
        raise InterplayError(f"{out} already holds a run; choose another -o")
    if out.exists() and not out.is_dir():
        raise InterplayError(f"-o {out}: not a folder; choose another -o")
    resolved["output"] = str(out)
    old_names = frozenset(str(row.get("name") or row.get("kind")) for row in
                          recorded_verifiers(stored) if isinstance(row, Mapping))
    rows = list(env.options.verifiers)
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / CONFIG_FILE, {
            "config": without_credentials(resolved), "interplay": __version__,
            "verifiers": stored_verifiers(env), "seats": resolved_seats(env, cfg),
            "regrade": {"from": str(src.resolve()), "verifiers": rows,
                        "own_verifiers": env.options.own_verifiers,
                        "source_verifiers": recorded_verifiers(stored)}})
    except OSError as exc:
        raise InterplayError(f"-o {out}: cannot write a results folder there "
                             f"({exc.strerror or type(exc).__name__}); choose another -o") from None
    return Regrade(source=src, output=out, cfg=cfg, env=env, resolved=resolved, rows=rows,
                   old_names=old_names)


def unscored(episode: Episode, old_names: frozenset[str]) -> dict[str, float]:
    """Take the source's scores off a stored episode, leaving it as its verifiers found it at
    run time; returns the metrics its steps reported (a run merges the verifiers' over them)."""
    names = old_names | {r.name for r in episode.rewards}
    keys = {r.name if r.seat is None else f"{r.name}/{r.seat}" for r in episode.rewards}
    keys |= {f"{n}_error" for n in names}
    steps_metrics = {k: v for k, v in episode.metrics.items() if k not in keys}
    if episode.error_type == ErrorType.VERIFIER_ERROR:
        # The verifier's failure was the source's; the episode's own error, if any, stays.
        failed = next((t for t in episode.traces if t.error_type is not None), None)
        episode.error = failed.error if failed else None
        episode.error_type = failed.error_type if failed else None
    episode.rewards, episode.reward, episode.judge_calls, episode.metrics = [], None, [], {}
    for trace in episode.traces:
        trace.rewards, trace.reward = [], None
    return steps_metrics


async def rescore(episode: Episode, env: Env, resources: RunResources,
                  old_names: frozenset[str]) -> Episode:
    """Score a stored episode again with ``env``'s verifiers, as a run scores it."""
    steps_metrics = unscored(episode, old_names)
    ctx = StoredEpisodeContext(env=env, task=episode.task, info=episode.info,
                               resources=resources)
    ctx.results = episode.results
    ctx.traces = list(episode.traces)
    ctx.metrics = dict(steps_metrics)
    try:
        await score(episode, env, ctx)
    finally:
        ctx.release()
    if ctx.refused is not None:
        name = next((v.name for v in env.run_verifiers()
                     if f"{v.name}_error" in episode.metrics), "a verifier")
        raise InterplayError(f"verifier {name!r} cannot score stored episodes: it "
                             f"{ctx.refused}")
    episode.metrics = {**steps_metrics, **episode.metrics}
    return episode


@attrs.define
class RegradeOutcome:
    output: Path
    summary: dict[str, Any]
    scored: int


async def run(job: Regrade, *, show_progress: bool = False) -> RegradeOutcome:
    """Score every stored episode of ``job.source`` again, ``concurrency`` at once, writing
    each to the new folder as it is done; then the summary."""
    from interplay.run.progress import Progress

    source_file = job.source / EPISODES_FILE
    total = sum(1 for _ in iter_episodes(source_file, slim=True))
    cfg = job.cfg
    concurrency = cfg.concurrency or 1
    resources = RunResources(endpoint=cfg.model, seats=cfg.seats, interception=cfg.interception,
                             max_connections=concurrency)
    writer = EpisodeLog(job.output / EPISODES_FILE)
    records: dict[tuple[int, int], dict[str, Any]] = {}
    progress = Progress(total, enabled=show_progress)
    stream = iter_episodes(source_file, order="pair")
    log.info("regrade.start", episodes=total, concurrency=concurrency,
             verifiers=len(job.env.run_verifiers()), output_path=str(job.output))
    t0 = time.monotonic()

    async def worker() -> None:
        for record in stream:
            episode = stored_episode(record, job.source)
            del record
            await rescore(episode, job.env, resources, job.old_names)
            slim = slim_episode(episode)
            writer.append_episode(episode)
            records[(episode.info.task_idx, episode.info.rollout)] = slim
            progress.count(slim)
            del episode

    failure: BaseException | None = None
    workers: list[asyncio.Task[None]] = []
    try:
        writer.open()
        progress.start()
        workers = [asyncio.ensure_future(worker()) for _ in range(concurrency)]
        await asyncio.gather(*workers)
    except BaseException as exc:
        failure = exc
        raise
    finally:
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        progress.finish()
        await writer.aclose()
        await asyncio.shield(resources.aclose())
        elapsed = time.monotonic() - t0
        summary = summarize(list(records.values()), pass_threshold=cfg.pass_threshold,
                            expected=total, session_wall_s=elapsed,
                            session_episodes=len(records), judged=judged_in(job.output))
        # The regrade's own time, not the source episodes' (their wall_s is what they took
        # when they ran, which summarize() would add up).
        summary["wall_s"] = elapsed
        summary["episodes_per_s"] = len(records) / elapsed if elapsed > 0 else None
        summary["interrupted"] = isinstance(failure, asyncio.CancelledError | KeyboardInterrupt)
        write_json(job.output / SUMMARY_FILE, summary)
    return RegradeOutcome(output=job.output, summary=summary, scored=len(records))


# -- the command -------------------------------------------------------------------------------


def add_regrade(sub: Any) -> None:
    p = sub.add_parser(
        "regrade", help="score a run's stored episodes again into a new results folder",
        description="Apply verifiers to the stored episodes of a results folder without "
        "calling the agent's model again (a judge still calls its own), and write a new "
        "results folder naming its source, with the same summary and report.")
    p.add_argument("run", help="the results folder to regrade (left as it is)")
    p.add_argument("-o", "--output", help="the new results folder (default RUN-regraded-TIME "
                   "beside RUN)")
    p.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE",
                   help="env.verifiers=[...] (verifier rows, as in an env file's "
                   "[[verifiers]], scoring beside the env's own), env.own_verifiers=false "
                   "(only env.verifiers score), model.* (the endpoint a judge that names none "
                   "calls), pass_threshold (repeatable)")
    p.add_argument("-c", "--concurrency", type=int, help="episodes scored at once (default "
                   "8; 1 on the embedded model)")
    p.add_argument("--no-report", action="store_true", help="do not write report.html")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    p.set_defaults(func=cmd_regrade)


def cmd_regrade(args: argparse.Namespace) -> int:
    from interplay._plumbing import aio as _aio
    from interplay.run.summary import error_line, format_summary

    job = prepare(args.run, args.output, args.overrides, args.concurrency)
    print(f"interplay regrade {job.source}: {len(job.env.run_verifiers())} verifier(s) "
          f"({', '.join(v.name for v in job.env.run_verifiers()) or 'none'}); results in "
          f"{job.output}", file=sys.stderr)
    try:
        outcome = _aio.run(run(job, show_progress=not args.quiet))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print(f"interplay: interrupted; the episodes scored so far are in "
              f"{job.output / EPISODES_FILE}", file=sys.stderr)
        return 130
    summary = outcome.summary
    print(format_summary(summary, title=f"{job.env.name} regraded: {job.output}"))
    if not args.no_report:
        from interplay.report import write_report

        print(f"report: {write_report(job.output)}")
    line = error_line(summary, rerun=f"regrade {job.source} again (with another -o)")
    if line is not None:
        print(line, file=sys.stderr)
    # As eval: 1 when no episode was scored, or when not every stored episode was.
    if not summary["completed"]:
        return 1
    return 0 if summary["complete"] else 1
