"""``wordle``: the env plays the user of a Wordle game held open in one chat session.

Each turn the model guesses a 5-letter word and the env answers with per-letter feedback under
the standard rules (``G`` right letter in the right place, ``Y`` in the word elsewhere, ``-``
not in the word; a letter that repeats in the guess is marked ``G``/``Y`` only as many times
as it occurs in the secret, greens first). Up to ``max_guesses`` guesses.

The guess is read from the reply: the last word of five letters in square brackets
(``[crane]``); failing that, a reply that is a single word; failing that, the last 5-letter word
in the reply. A reply with no readable guess (empty, or no 5-letter word) is re-asked: a re-ask
does not use a guess but spends one of ``reask_budget``; when that runs out the game ends
unsolved (``ended_by = "unreadable"``).

Writes ``ctx.results["wordle"]`` (secret, guesses, feedback, solved, score) and the metrics
``solved``, ``guesses`` and ``reasks``. The score is 1 when solved, else 0; with
``scale_by_guesses`` a win scores ``(max_guesses - guesses + 1) / max_guesses`` (1 for a first
guess win, ``1/max_guesses`` for a last-guess win).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any, ClassVar

import attrs

from interplay.builtin_envs.envs import ScoredStepEnv
from interplay.contracts.contexts import EpisodeContext
from interplay.contracts.step import Step
from interplay.errors import InterplayError
from interplay.values.taskset import TasksetSource

#: Secrets drawn (from ``ctx.rng``) for a task that gives no answer.
WORDS = ("crane", "slate", "pious", "light", "brick", "flame", "ghost", "mango", "quilt",
         "river", "sword", "tiger", "vivid", "zesty", "bloom", "chess", "dwarf", "epoch")

SYSTEM = (
    "We are playing Wordle. I have picked a secret English word of 5 letters; you have "
    "{max_guesses} guesses to find it. After each guess I reply with one mark per letter: "
    "G = right letter, right place; Y = the letter is in the word but elsewhere; "
    "- = the letter is not in the word (or not that many times). "
    "Think briefly if you like, then end your reply with your guess in square brackets, "
    "for example [{example}]."
)
REASK = ("I could not read a guess in your reply. End your reply with one 5-letter word in "
         "square brackets, for example [{example}].")
#: Words shown as the bracket format's example; never the secret (a model may copy it).
EXAMPLES = ("house", "plant")

_BRACKETED = re.compile(r"\[\s*([A-Za-z]{5})\s*\]")
_FIVE = re.compile(r"\b([A-Za-z]{5})\b")


def feedback(guess: str, secret: str) -> str:
    """The marks for ``guess`` against ``secret`` (both 5 letters): e.g. ``"GY--G"``."""
    guess, secret = guess.lower(), secret.lower()
    marks = ["-"] * len(guess)
    unused = Counter(s for g, s in zip(guess, secret, strict=True) if g != s)
    for i, (g, s) in enumerate(zip(guess, secret, strict=True)):
        if g == s:
            marks[i] = "G"
    for i, g in enumerate(guess):
        if marks[i] != "G" and unused[g] > 0:
            marks[i] = "Y"
            unused[g] -= 1
    return "".join(marks)


def read_guess(text: str) -> str | None:
    """The guess in a reply, lower-cased, or None when there is none (see module doc)."""
    bracketed = _BRACKETED.findall(text)
    if bracketed:
        return bracketed[-1].lower()
    words = re.findall(r"[A-Za-z]+", text)
    if len(words) == 1 and len(words[0]) == 5:
        return words[0].lower()
    five = _FIVE.findall(text)
    return five[-1].lower() if five else None


@attrs.define
class WordleConfig:
    #: The seat that plays the game.
    seat: str = "assistant"
    #: Guesses before the game ends unsolved.
    max_guesses: int = 6
    #: Unreadable replies re-asked before the game ends unsolved.
    reask_budget: int = 2
    #: Score a win by how early it came, (max_guesses - guesses + 1) / max_guesses, instead of 1.
    scale_by_guesses: bool = False


class Wordle(Step):
    """The env plays the user of a Wordle game (see the module doc for the rules)."""

    name = "wordle"
    Config: ClassVar[type] = WordleConfig
    writes = frozenset({"wordle"})

    def check(self, steps: Sequence[Step]) -> list[str]:
        cfg: WordleConfig = self.config
        problems = []
        if cfg.max_guesses < 1:
            problems.append(f"max_guesses must be at least 1, got {cfg.max_guesses}")
        if cfg.reask_budget < 0:
            problems.append(f"reask_budget must be 0 or more, got {cfg.reask_budget}")
        return problems

    def secret(self, ctx: EpisodeContext) -> str:
        answer = ctx.task.answer
        if answer is None or answer == "":
            return ctx.rng.choice(WORDS)
        word = str(answer).strip().lower()
        if not re.fullmatch(r"[a-z]{5}", word):
            raise InterplayError(f"wordle task {ctx.task.idx}: the answer must be one word of "
                                 f"5 letters a-z, got {len(word)} characters")
        return word

    def score(self, solved: bool, guesses: int) -> float:
        cfg: WordleConfig = self.config
        if not solved:
            return 0.0
        if not cfg.scale_by_guesses:
            return 1.0
        return (cfg.max_guesses - guesses + 1) / cfg.max_guesses

    async def run(self, ctx: EpisodeContext) -> None:
        cfg: WordleConfig = self.config
        secret = self.secret(ctx)
        example = next(w for w in EXAMPLES if w != secret)
        system = SYSTEM.replace("{max_guesses}", str(cfg.max_guesses)).replace("{example}",
                                                                                example)
        task = attrs.evolve(ctx.task, prompt=None, system_prompt=ctx.task.system_prompt or system)
        result: dict[str, Any] = {"secret": secret, "guesses": [], "feedback": [],
                                  "solved": False, "reasks": 0, "ended_by": "out_of_guesses",
                                  "score": 0.0}
        ctx.results["wordle"] = result
        message = f"Make your first guess (you have {cfg.max_guesses})."
        try:
            async with ctx.agent(cfg.seat).chat(task) as chat:
                while True:
                    reply = await chat.turn(message)
                    if reply.stopped:
                        result["ended_by"] = "assistant_stopped"
                        break
                    guess = read_guess(reply.text)
                    if guess is None:
                        if result["reasks"] >= cfg.reask_budget:
                            result["ended_by"] = "unreadable"
                            chat.stop("user_done")
                            break
                        result["reasks"] += 1
                        message = REASK.replace("{example}", example)
                        continue
                    marks = feedback(guess, secret)
                    result["guesses"].append(guess)
                    result["feedback"].append(marks)
                    n = len(result["guesses"])
                    if guess == secret:
                        result["solved"] = True
                        result["ended_by"] = "solved"
                        chat.stop("user_done")
                        break
                    if n >= cfg.max_guesses:
                        chat.stop("user_done")
                        break
                    left = cfg.max_guesses - n
                    message = (f"{guess.upper()}: {' '.join(marks)}\n"
                               f"{left} guess{'es' if left != 1 else ''} left.")
        finally:
            result["score"] = self.score(result["solved"], len(result["guesses"]))
            ctx.metrics["solved"] = 1.0 if result["solved"] else 0.0
            ctx.metrics["guesses"] = float(len(result["guesses"]))
            ctx.metrics["reasks"] = float(result["reasks"])


@attrs.define
class WordleEnvConfig:
    #: The tasks to run instead of the env's builtin ones: a JSONL file of task rows, a file or
    #: folder the datasets library reads, or a dataset table ([env.taskset] with dataset = ...); a
    #: relative path is read from the working folder. Empty keeps the builtin tasks.
    taskset: TasksetSource = ""
    #: The wordle step's settings (env.game.*).
    game: WordleConfig = attrs.Factory(WordleConfig)


class WordleEnv(ScoredStepEnv):
    """Wordle with the env as the user; reward 1 when solved (see the module doc)."""

    name = "wordle"
    Config: ClassVar[type] = WordleEnvConfig
    step_cls = Wordle
    data = "wordle.jsonl"
    step_field = "game"
