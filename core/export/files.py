"""``interplay export``: a results folder streamed into a file trainers read, in two passes
over disk so memory stays flat whatever the size of ``episodes.jsonl``.

The first pass reads the episodes (:func:`interplay.run.results.iter_episodes`), keeps the
traces the filters let through, and writes their rows to a spill file beside the output, each
behind a small header (its group, its reward, which trace it is); meanwhile it keeps each
group's reward statistics and best rollout (:mod:`interplay.export.groups`). The second pass
reads the spill back, drops what ``--best-of-group`` leaves out, puts each RL row's group and
advantage in front of it without parsing the row again, and writes the output, which takes
its place only once whole: an export that fails leaves what was there before.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import attrs

from interplay._plumbing import codec as _codec
from interplay.errors import InterplayError
from interplay.export import rows as rw
from interplay.export.groups import Advantage, Groups, group_id
from interplay.log import get_logger
from interplay.run.recorded import RecordedTrace, read_episode
from interplay.run.results import CONFIG_FILE, EPISODES_FILE, iter_episodes, whole_record

log = get_logger("interplay.export")

Format = Literal["sft", "rl", "hf"]
Unit = Literal["call", "trace"]
DATASETS_HINT = ("the hf format needs the datasets library: pip install 'interplay[datasets]'")


@attrs.define
class ExportOptions:
    """What to export and which traces (see ``interplay export --help``)."""

    format: Format = attrs.field(default="sft", validator=attrs.validators.in_(
        ("sft", "rl", "hf")))
    #: RL rows: one per model call, or one per trace with a loss mask.
    unit: Unit = attrs.field(default="call", validator=attrs.validators.in_(("call", "trace")))
    #: What rows the hf format holds.
    rows: Literal["sft", "rl"] = attrs.field(default="sft", validator=attrs.validators.in_(
        ("sft", "rl")))
    #: Only these seats (or agents); empty: every trainable seat.
    seats: tuple[str, ...] = ()
    #: Only traces with at least this reward.
    min_reward: float | None = None
    #: Only traces that finished (see :func:`interplay.export.rows.cut_short`).
    completed_only: bool = False
    #: Only the best trace of each group (task and seat).
    best_of_group: bool = False
    advantage: Advantage = attrs.field(default="std", validator=attrs.validators.in_(
        ("std", "mean")))
    #: SFT lines carry ``meta`` (episode, task, rollout, seat, reward) besides messages and
    #: tools (hf rows always do).
    meta: bool = False

    def __attrs_post_init__(self) -> None:
        if self.min_reward is not None and not math.isfinite(self.min_reward):
            raise InterplayError(f"--min-reward must be a finite number, got {self.min_reward}")

    @property
    def kind(self) -> Literal["sft", "rl"]:
        """The rows written: SFT or RL."""
        if self.format == "hf":
            return self.rows
        return "rl" if self.format == "rl" else "sft"


@attrs.define
class ExportResult:
    output: Path
    rows: int = 0
    traces: int = 0
    episodes: int = 0
    #: Why traces (or calls) were left out, by reason, for those that were.
    skipped: dict[str, int] = attrs.Factory(dict)
    #: What else is worth knowing (a --seat that matched nothing).
    notes: list[str] = attrs.Factory(list)


def default_output(folder: Path, options: ExportOptions) -> Path:
    """Where an export goes when no output is named: beside the episodes it came from."""
    rows = "sft" if options.kind == "sft" else f"rl-{options.unit}s"
    if options.format == "hf":
        return folder / f"hf-{rows}"
    return folder / f"{rows}.jsonl"


def export(run: str | Path, output: str | Path | None = None,
           options: ExportOptions | None = None) -> ExportResult:
    """Export the episodes of ``run`` (a results folder, or its ``episodes.jsonl``) to
    ``output`` (default: :func:`default_output`). Raises InterplayError, with one line saying
    what to change, for a run that is not one, an output that cannot be written, or an RL
    export of a run without token capture."""
    opts = options or ExportOptions()
    episodes, folder = _locate(Path(run))
    if opts.kind == "rl":
        _refuse_without_capture(folder, episodes)
    out = Path(output) if output is not None else default_output(folder, opts)
    _check_output(out, opts)
    if opts.format == "hf":
        _require_datasets()
    result = ExportResult(output=out)
    try:
        work = Path(tempfile.mkdtemp(prefix=".export-", dir=out.parent))
    except OSError as exc:
        raise InterplayError(f"-o {out}: cannot write beside it "
                             f"({exc.strerror or type(exc).__name__}); choose another -o") \
            from None
    try:
        groups = Groups()
        spill = work / "rows"
        trainable, found, private = _collect(episodes, spill, opts, groups, result)
        if opts.kind == "rl" and trainable and not found:
            raise InterplayError(
                f"{folder}: no model call of a trainable seat recorded token ids (the endpoint "
                f"returned none: see a call's tokens.missing); an rl export needs them: run it "
                f"again on an endpoint that returns them (vLLM, or the embedded model)")
        final = work / "final.jsonl"
        _finish(spill, final, opts, groups, result)
        if opts.format == "hf":
            _write_dataset(final, out, work, opts.kind, opts.unit, result.rows,
                           private=private)
        else:
            os.replace(final, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log.info("export.done", format=opts.format, rows=result.rows, traces=result.traces,
             episodes=result.episodes, output_path=str(out))
    return result


def _locate(run: Path) -> tuple[Path, Path]:
    """(episodes.jsonl, the folder it is in) for a results folder or the file itself."""
    episodes = run / EPISODES_FILE if run.is_dir() else run
    if not episodes.is_file():
        where = f"{run} holds no {EPISODES_FILE}" if run.is_dir() else f"{run} does not exist"
        raise InterplayError(f"{where}; name a results folder of `interplay eval` (or its "
                             f"{EPISODES_FILE})")
    return episodes, episodes.parent


def _refuse_without_capture(folder: Path, episodes: Path) -> None:
    """Refuse at once a run whose config says it captured no tokens, and whose first
    episode's trainable calls have none (an env's own seat endpoint, which the config does not
    hold, may capture: the first episode tells)."""
    try:
        config = json.loads((folder / CONFIG_FILE).read_text())["config"]
    except (OSError, ValueError, KeyError, TypeError):
        return  # no config to go by: the episodes will tell
    if not isinstance(config, Mapping):
        return
    seats = config.get("seats") if isinstance(config.get("seats"), Mapping) else {}
    settings = [config.get("model")] + [s.get("model") for s in seats.values()
                                        if isinstance(s, Mapping)]
    if any(isinstance(m, Mapping) and m.get("capture_tokens") for m in settings):
        return
    try:
        with episodes.open("rb") as fh:
            first = _codec.loads(fh.readline())
        traces = [t for t in rw.trainable_traces(read_episode(first)) if t.model_calls]
    except (OSError, ValueError, AttributeError, TypeError):
        return
    if not traces or any(rw.has_tokens(t) for t in traces):
        return
    raise InterplayError(
        f"{folder} was run without token capture, and an rl export needs the token ids the "
        f"model sampled: run it again with --set model.capture_tokens=true on an endpoint "
        f"that returns them (vLLM, or the embedded model)")


def _check_output(out: Path, opts: ExportOptions) -> None:
    if not out.parent.is_dir():
        raise InterplayError(f"-o {out}: its folder {out.parent} does not exist; make it or "
                             f"choose another -o")
    if opts.format == "hf":
        if out.exists() and not (out.is_dir() and _is_dataset(out)):
            raise InterplayError(f"-o {out}: exists and is not a dataset folder an earlier "
                                 f"export wrote; choose another -o")
    elif out.is_dir():
        raise InterplayError(f"-o {out}: is a folder; name a file")


def _is_dataset(path: Path) -> bool:
    return (path / "dataset_info.json").is_file() or (path / "state.json").is_file()


# -- the first pass: episodes to a spill of rows -------------------------------------------------

_SEP = b"\t"  # never inside compact JSON, which escapes control characters
_BUFFER = 1 << 20  # rows run to tens of KB


def _reward(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        and math.isfinite(value) else None


def _collect(episodes: Path, spill: Path, opts: ExportOptions, groups: Groups,
             result: ExportResult) -> tuple[int, bool, bool]:
    """Write the rows of every trace the filters keep; return how many trainable traces
    there were (in episodes without an error), whether some captured tokens, and whether
    SFT rows' meta marks private notes (an always_on run's)."""
    skipped = rw.Skipped()
    counts = result.skipped
    found = private = False
    trainable = 0
    seats_seen: set[str] = set()
    serial = 0
    with_meta = opts.kind == "rl" or opts.meta or opts.format == "hf"
    with spill.open("wb", buffering=_BUFFER) as fh:
        for record in iter_episodes(episodes):
            result.episodes += 1
            line = read_episode(record)
            if line.error_type is not None:
                # An episode that failed is never training data (its side file is not read).
                _count(counts, "error episodes")
                continue
            # A long episode's messages and calls are in its side file (a line without one is
            # whole: read once).
            ep = read_episode(whole_record(record, episodes)) if "side" in record else line
            task_idx, rollout = ep.task_idx or 0, ep.rollout or 0
            notes = ep.private_notes() if opts.kind == "sft" and with_meta \
                and ep.keeps_private_notes else None
            for trace in rw.trainable_traces(ep, opts.seats):
                trainable += 1
                seats_seen.update((trace.seat, str(trace.agent)))
                reward = _reward(trace.reward)
                group = group_id(task_idx, trace.seat)
                groups.add(group, reward)
                found = found or rw.has_tokens(trace)
                if opts.min_reward is not None and (reward is None or reward < opts.min_reward):
                    _count(counts, "below --min-reward")
                    continue
                if opts.completed_only and rw.cut_short(trace):
                    _count(counts, "cut short")
                    continue
                made = list(_rows(trace, opts, skipped))
                if not made:
                    if opts.kind == "sft":
                        _count(counts, "traces without a reply")
                    continue
                serial += 1
                key = f"{rollout}/{trace.agent}"
                if opts.best_of_group:
                    groups.offer(group, reward, rollout, key)
                head = _codec.dumps({"g": group, "k": key, "r": reward, "t": serial})
                meta = rw.meta(ep, trace) if with_meta else None
                for row in made:
                    if meta is not None and opts.kind == "rl":
                        row = {**meta, **row}
                    elif meta is not None:
                        if notes is not None:
                            # The agent's plain replies, which the user never read.
                            private = True
                            meta = {**meta, "private_messages": rw.private_messages(
                                row["messages"], notes)}
                        row = {**row, "meta": meta}
                    fh.write(head + _SEP + _codec.dumps(row) + b"\n")
    if skipped.calls_without_ids:
        counts["calls without token ids"] = skipped.calls_without_ids
    if skipped.calls_by_others:
        counts["calls another process made with the trace's secret"] = skipped.calls_by_others
    if skipped.retokenized:
        counts["traces the endpoint re-tokenized (a reply's ids differ from those sampled; "
               "serve the model where model.continue_tokens is taken, or export them "
               "--unit call)"] = skipped.retokenized
    if skipped.not_extending:
        counts["traces whose calls do not extend each other (an earlier turn changed; export "
               "them --unit call)"] = skipped.not_extending
    result.notes += [f"--seat {seat}: no trainable trace of it in an episode without an "
                     f"error" for seat in opts.seats if seat not in seats_seen]
    return trainable, found, private


def _count(counts: dict[str, int], reason: str) -> None:
    counts[reason] = counts.get(reason, 0) + 1


def _rows(trace: RecordedTrace, opts: ExportOptions,
          skipped: rw.Skipped) -> Iterator[dict[str, Any]]:
    if opts.kind == "sft":
        row = rw.sft_row(trace)
        if row is not None:
            yield row
    elif opts.unit == "call":
        yield from rw.call_rows(trace, skipped)
    else:
        row = rw.trace_row(trace, skipped)
        if row is not None:
            yield row


# -- the second pass: the spill to the output ---------------------------------------------------


def _finish(spill: Path, final: Path, opts: ExportOptions, groups: Groups,
            result: ExportResult) -> None:
    last = 0
    with spill.open("rb", buffering=_BUFFER) as src, \
            final.open("wb", buffering=_BUFFER) as out:
        for line in src:
            cut = line.index(_SEP)
            head = _codec.loads(line[:cut])
            body = line[cut + 1:]
            if opts.best_of_group and not groups.is_best(head["g"], head["k"]):
                if head["t"] != last:
                    _count(result.skipped, "not the best of their group")
                    last = head["t"]
                continue
            if opts.kind == "rl":
                advantage = groups.advantage(head["g"], head["r"], opts.advantage)
                body = (b'{"group":' + _codec.dumps(head["g"]) + b',"advantage":'
                        + _codec.dumps(advantage) + b"," + body[1:])
            out.write(body)
            result.rows += 1
            if head["t"] != last:
                result.traces += 1
                last = head["t"]


# -- hf: a dataset folder -------------------------------------------------------------------------


def _require_datasets() -> Any:
    try:
        import datasets
    except ModuleNotFoundError:
        raise InterplayError(DATASETS_HINT) from None
    return datasets


def features(kind: str, unit: str, *, private: bool = False) -> Any:
    """The dataset's columns and their types (``private``: SFT rows with the indices of
    their private notes, an always_on run's)."""
    ds = _require_datasets()
    text, integer, real = ds.Value("string"), ds.Value("int64"), ds.Value("float64")
    meta = {"episode_id": text, "task_idx": integer, "rollout": integer, "seat": text,
            "agent": text, "reward": real}
    if kind == "sft":
        call = {"id": text, "type": text, "function": {"name": text, "arguments": text}}
        message = {"role": text, "content": text, "name": text, "tool_call_id": text,
                   "tool_calls": ds.List(call)}
        marks = {"private_messages": ds.List(ds.Value("int32"))} if private else {}
        return ds.Features({"messages": ds.List(message), "tools": text, **meta, **marks})
    return ds.Features({"group": text, "advantage": real, **meta,
                        "call" if unit == "call" else "calls": integer,
                        "prompt_ids": ds.List(ds.Value("int32")),
                        "completion_ids": ds.List(ds.Value("int32")),
                        "logprobs": ds.List(real), "loss_mask": ds.List(ds.Value("int8")),
                        "finish_reason": text})


def dataset_rows(path: str, kind: str) -> Iterator[dict[str, Any]]:
    """The rows of an exported JSONL file in the dataset's shape: an SFT row's meta as
    columns, its message content as text and its tools as JSON text (tool schemas differ too
    much for one column type)."""
    with open(path, "rb") as fh:
        for line in fh:
            row = _codec.loads(line)
            if kind == "sft":
                meta = row.pop("meta", {})
                row["messages"] = [{**m, "content": rw.content_text(m.get("content"))}
                                   for m in row["messages"]]
                row = {**row, "tools": json.dumps(row["tools"]), **meta}
            yield row


# What pyarrow's JSON reader parses at once (the library's default is 10 MB): a tenth of it
# keeps the process's own memory where the SFT path's is, at a tenth of the speed lost.
_JSON_CHUNK = 1 << 20


def _write_dataset(final: Path, out: Path, work: Path, kind: str, unit: str,
                   rows: int, *, private: bool = False) -> None:
    """The dataset folder from the exported lines. RL lines are already the dataset's rows, so
    the library reads them with pyarrow's JSON reader (2.4 times as fast as rows handed over
    from Python); SFT rows are reshaped first (:func:`dataset_rows`). No rows is an empty
    dataset with the same columns, in one shard (the library's readers refuse an empty file,
    and an empty dataset saved as no shard does not load)."""
    datasets = _require_datasets()
    schema = features(kind, unit, private=private)
    bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        if rows == 0:
            built = datasets.Dataset.from_dict({name: [] for name in schema}, features=schema)
        elif kind == "rl":
            built = datasets.Dataset.from_json(str(final), features=schema,
                                               cache_dir=str(work / "cache"),
                                               chunksize=_JSON_CHUNK)
        else:
            built = datasets.Dataset.from_generator(
                dataset_rows, gen_kwargs={"path": str(final), "kind": kind},
                features=schema, cache_dir=str(work / "cache"))
        staged = work / "dataset"
        built.save_to_disk(str(staged), num_shards=1 if rows == 0 else None)
        del built
    finally:
        if bars:
            datasets.enable_progress_bars()
    if out.exists():
        shutil.rmtree(out)
    os.replace(staged, out)
