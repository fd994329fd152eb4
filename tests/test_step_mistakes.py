"""What a step may get wrong at run time and how the episode records it, so that a run goes on
and the summary never drops something without a word."""

from __future__ import annotations

from typing import Any, ClassVar

from interplay import Env, SeatSpec, Step, Task
from interplay.testing import run_scripted


class Measuring(Step):
    """Asks once and reports the metrics the test gives it."""

    name = "test_measuring"
    metrics: ClassVar[dict[str, Any]] = {}

    async def run(self, ctx: Any) -> None:
        await ctx.agent("assistant").run(ctx.task)
        ctx.metrics.update(self.metrics)


class Measured(Env):
    """One step that reports metrics."""

    name = "test_measured"
    seats: ClassVar[dict[str, SeatSpec]] = {"assistant": SeatSpec(harness="null")}

    def __init__(self, metrics: dict[str, Any]) -> None:
        super().__init__()
        self._metrics = metrics

    def tasks(self) -> list[Task]:
        return [Task(0, prompt="p")]

    def steps(self) -> list[Step]:
        step = Measuring()
        step.metrics = self._metrics  # type: ignore[misc]
        return [step]


async def test_numeric_metrics_are_kept_as_numbers() -> None:
    run = await run_scripted(Measured({"turns": 2, "solved": True, "score": 0.5}),
                             Task(0, prompt="p"), None)
    assert run.episode.error is None
    assert run.episode.metrics == {"turns": 2.0, "solved": 1.0, "score": 0.5}


async def test_a_metric_that_is_not_a_number_is_an_env_error_not_a_silent_gap() -> None:
    run = await run_scripted(Measured({"turns": 2, "label": "high", "none": None}),
                             Task(0, prompt="p"), None)
    episode = run.episode
    assert episode.error_type == "env_error"
    assert episode.error == "ctx.metrics['label'] is str 'high'; a step's metrics are numbers"
    assert episode.metrics == {"turns": 2.0}
