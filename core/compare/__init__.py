"""``interplay compare RUN_A RUN_B [...]``: runs of one env side by side.

Owns pairing runs' episodes and the figures of a comparison: for each run after the first (the
baseline), the reward difference per task and overall with a paired bootstrap interval, the
same for each seat's reward, pass@k and pass^k side by side, tokens, model calls and errors,
and the config differences that may explain them (:mod:`interplay.compare.figures`); shown as
a terminal table (rich, :mod:`interplay.compare.table`) and an HTML page
(:mod:`interplay.compare.page`, through the report's templates and charts); the command is
:mod:`interplay.compare.command`.

Episodes are paired by their keys: a task is the same task in two runs when its index and its
content (prompt, system prompt, answer, info) are; a rollout pairs with the rollout of the same
index. A pair counts where both episodes were scored (an error episode is not, as everywhere).
The interval resamples tasks (with their rollouts' differences) with a seeded generator, so the
same runs and seed give the same interval. Runs of different envs, or of different tasks, are
refused in one line, unless asked to compare the tasks they share. It reads results folders
line by line and writes nothing but the page it is asked for.
"""

from __future__ import annotations

from interplay.compare.command import add_compare
from interplay.compare.figures import Run, compare, load_run

__all__ = ["Run", "add_compare", "compare", "load_run"]
