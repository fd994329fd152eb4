"""Multi-turn puzzles driven by a session loop: ``alphabet_sort`` and ``color_codeword``.

Each step holds one chat session open and plays the user itself: every turn it sends the next
instruction, reads the reply and grades it against the expected answer. The instructions are
drawn from ``ctx.rng`` up front, so an episode (seed, task, rollout) is reproducible. A step
writes ``ctx.results[<step name>]`` (``score`` = fraction of turns answered exactly right, plus
what was asked and read each turn) and the ``turns``/``turns_correct`` metrics; the
``step_score`` verifier turns that score into the reward.

This module owns the puzzles' rules and reply parsing; it does not touch sessions' internals.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import attrs

from interplay.builtin_envs.envs import ScoredStepEnv
from interplay.config import loading as config
from interplay.contracts.contexts import EpisodeContext
from interplay.contracts.step import Step
from interplay.errors import InterplayError
from interplay.values.records import Task
from interplay.values.taskset import TasksetSource


@attrs.frozen
class Round:
    """One turn of a puzzle: what the env says and the answer it expects."""

    message: str
    expected: tuple[str, ...]


@attrs.frozen
class Plan:
    system_prompt: str
    rounds: tuple[Round, ...]
    #: Extra facts a parser may use (the codeword vocabulary).
    info: dict[str, Any] = attrs.Factory(dict)


def task_params(cls: type[Any], defaults: Any, task: Task) -> Any:
    """The step's config with the task's ``info`` overriding any field it names."""
    names = {f.name for f in attrs.fields(cls)}
    data = attrs.asdict(defaults, recurse=False)
    data.update({k: v for k, v in task.info.items() if k in names})
    return config.structure(data, cls, path=f"task {task.idx} info")


class SessionPuzzle(Step):
    """Base of the session-loop puzzles: plan the rounds, then ask and grade them one by one."""

    def plan(self, params: Any, rng: random.Random) -> Plan:
        raise NotImplementedError

    def parse(self, text: str, plan: Plan) -> list[str]:
        raise NotImplementedError

    def same(self, got: Sequence[str], expected: Sequence[str]) -> bool:
        return [g.casefold() for g in got] == [e.casefold() for e in expected]

    def check(self, steps: Sequence[Step]) -> list[str]:
        try:
            self.validate(self.config)
        except InterplayError as exc:
            return [exc.message]
        return []

    def validate(self, params: Any) -> None:
        """Raise InterplayError when ``params`` cannot make a puzzle."""

    async def run(self, ctx: EpisodeContext) -> None:
        params = task_params(type(self.config), self.config, ctx.task)
        self.validate(params)
        plan = self.plan(params, ctx.rng)
        system = ctx.task.system_prompt or plan.system_prompt
        task = attrs.evolve(ctx.task, prompt=None, system_prompt=system)
        log: list[dict[str, Any]] = []
        result: dict[str, Any] = {"score": 0.0, "correct": 0, "turns": len(plan.rounds),
                                  "answered": 0, "rounds": log}
        ctx.results[self.name] = result
        try:
            async with ctx.agent(self.config.seat).chat(task) as chat:
                for rnd in plan.rounds:
                    reply = await chat.turn(rnd.message)
                    got = self.parse(reply.text, plan)
                    ok = self.same(got, rnd.expected)
                    log.append({"expected": list(rnd.expected), "got": got, "correct": ok})
                    result["answered"] += 1
                    result["correct"] += int(ok)
                    if reply.stopped:
                        break
                else:
                    chat.stop("user_done")
        finally:
            n = len(plan.rounds)
            result["score"] = result["correct"] / n if n else 0.0
            ctx.metrics["turns"] = float(result["answered"])
            ctx.metrics["turns_correct"] = float(result["correct"])


# -- alphabet-sort ---------------------------------------------------------------------------

FIRST_NAMES = (
    "Ada", "Alan", "Amara", "Basil", "Beatrix", "Carmen", "Cyrus", "Dalia", "Dmitri", "Edith",
    "Elias", "Farah", "Felix", "Greta", "Gustavo", "Hana", "Hugo", "Ines", "Ivan", "Jonas",
    "Juno", "Kenji", "Kira", "Lars", "Leila", "Marek", "Mina", "Nadia", "Nico", "Olga",
    "Omar", "Priya", "Quentin", "Rosa", "Rafael", "Saoirse", "Tariq", "Thea", "Umar", "Vera",
    "Wendell", "Xenia", "Yusuf", "Zora",
)
LAST_NAMES = (
    "Abernathy", "Baptiste", "Castellanos", "Dimitrov", "Eriksen", "Fairweather", "Gallagher",
    "Hoffmann", "Ibarra", "Jablonski", "Kowalczyk", "Lindqvist", "Moreau", "Nakamura",
    "Okonkwo", "Petrov", "Quintero", "Rasmussen", "Sandoval", "Takahashi", "Underwood",
    "Valdez", "Whitfield", "Yamamoto", "Zielinski", "Achebe", "Bergstrom", "Chandra",
    "Delacroix", "Esposito", "Fitzgerald", "Grimaldi", "Haddad", "Iwasaki", "Jovanovic",
    "Kaplan", "Lombardi", "Mbeki", "Novak", "Osei",
)

ALPHABET_SYSTEM = (
    "You sort lists of names. Each time you are given names, reply with every name you have "
    "been given so far, sorted as asked, one full name per line, and nothing else."
)


@attrs.define
class AlphabetSortConfig:
    #: The seat that plays the game.
    seat: str = "assistant"
    #: Turns in the game (turn 1 gives the first names; each later turn adds more).
    turns: int = 3
    #: Names given on turn 1 and added on every later turn.
    first: int = 4
    #: Names added on each turn after the first.
    per_turn: int = 2
    #: Sort by the first or the last name (ties broken by the other one).
    by: Literal["first", "last"] = "last"
    #: Ascending (A to Z) or descending order.
    order: Literal["asc", "desc"] = "asc"


class AlphabetSort(SessionPuzzle):
    """Sort names; each later turn adds names and asks for the combined sorted list.

    The reply is read one name per line or comma separated: list bullets and numbering,
    quotes and trailing punctuation are stripped, blank lines and heading lines ending in ':'
    are skipped, and a ``<sorted>...</sorted>`` block, when present, is read alone. A turn is
    right when the names read equal the expected list exactly (case-insensitive, in order).
    """

    name = "alphabet_sort"
    Config: ClassVar[type] = AlphabetSortConfig
    writes = frozenset({"alphabet_sort"})

    def validate(self, params: Any) -> None:
        p: AlphabetSortConfig = params
        if p.turns < 1 or p.first < 1 or (p.per_turn < 1 and p.turns > 1):
            raise InterplayError(f"alphabet_sort needs turns >= 1, first >= 1 and per_turn >= 1; "
                                 f"got turns={p.turns}, first={p.first}, per_turn={p.per_turn}")
        total = p.first + p.per_turn * (p.turns - 1)
        most = min(len(FIRST_NAMES), len(LAST_NAMES))
        if total > most:
            raise InterplayError(f"alphabet_sort can deal at most {most} names; "
                                 f"turns={p.turns}, first={p.first}, per_turn={p.per_turn} "
                                 f"asks for {total}")

    def plan(self, params: Any, rng: random.Random) -> Plan:
        p: AlphabetSortConfig = params
        total = p.first + p.per_turn * (p.turns - 1)
        # Distinct first and last names: no ties whichever name the list is sorted by.
        names = [f"{f} {ln}" for f, ln in zip(rng.sample(FIRST_NAMES, total),
                                              rng.sample(LAST_NAMES, total), strict=True)]
        how = (f"alphabetically by {p.by.upper()} name"
               + (" in REVERSE order (Z to A)" if p.order == "desc" else " (A to Z)"))

        def key(name: str) -> tuple[str, str]:
            first, last = name.split(" ", 1)
            return (last, first) if p.by == "last" else (first, last)

        rounds = []
        given: list[str] = []
        for turn in range(p.turns):
            new = names[:p.first] if turn == 0 else names[p.first + (turn - 1) * p.per_turn:
                                                          p.first + turn * p.per_turn]
            given += new
            expected = sorted(given, key=key, reverse=p.order == "desc")
            listed = "\n".join(new)
            if turn == 0:
                msg = f"Sort these names {how}:\n{listed}"
            else:
                msg = (f"Add these names:\n{listed}\nNow give ALL the names so far, sorted {how}, "
                       f"one per line.")
            rounds.append(Round(msg, tuple(expected)))
        return Plan(ALPHABET_SYSTEM, tuple(rounds))

    def parse(self, text: str, plan: Plan) -> list[str]:
        return parse_name_list(text)


_TAGGED = re.compile(r"<sorted>(.*?)</sorted>", re.S | re.I)
_FENCE = re.compile(r"```[\w-]*\n?(.*?)```", re.S)
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)]|\(\d+\))\s*")


def parse_name_list(text: str) -> list[str]:
    """Names read from a reply (see :class:`AlphabetSort` for the rules)."""
    tagged = _TAGGED.findall(text)
    if tagged:
        text = tagged[-1]
    else:
        fenced = _FENCE.findall(text)
        if fenced:
            text = fenced[-1]
    lines = [ln for ln in text.splitlines() if ln.strip()]
    items: list[str] = []
    for line in lines:
        line = line.strip()
        if line.endswith(":"):
            continue
        parts = line.split(",") if "," in line else [line]
        for part in parts:
            item = _BULLET.sub("", part).strip().strip("\"'`*_").strip()
            item = re.sub(r"[.;]+$", "", item).strip()
            item = re.sub(r"\s+", " ", item)
            if item:
                items.append(item)
    return items


# -- color-codeword --------------------------------------------------------------------------

COLORS = ("red", "blue", "green", "yellow", "purple", "orange", "black", "white", "pink",
          "brown", "gray", "teal")
CODEWORDS = ("falcon", "harbor", "maple", "quartz", "ember", "tundra", "violet", "cobalt",
             "saffron", "glacier", "lantern", "meadow", "obsidian", "pepper", "riddle", "summit",
             "thistle", "walnut", "zephyr", "anchor")

CODEWORD_SYSTEM = (
    "You are a radio operator. Every color has a secret code word:\n{codebook}\n"
    "When you are given a sequence of colors, reply with the code words for those colors in "
    "the same order, separated by spaces, and nothing else. The code book may change during "
    "the conversation; always use the latest one."
)


@attrs.define
class ColorCodewordConfig:
    #: The seat that plays the game.
    seat: str = "assistant"
    #: Colors in the code book.
    colors: int = 4
    #: Turns in the game.
    turns: int = 3
    #: Colors in each sequence asked for.
    length: int = 3
    #: From turn 2 on, each turn re-codes this many colors before asking.
    remaps_per_turn: int = 1


class ColorCodeword(SessionPuzzle):
    """A code book maps colors to code words (system prompt); each turn asks for the code words
    of a color sequence, and from turn 2 on first re-codes a color, so the model must track
    the latest code book across turns.

    The reply is read as the code words it contains, in order: any word that is not a code
    word used in this game is ignored (so "The code is: falcon, maple." reads as falcon maple).
    A turn is right when those equal the expected sequence exactly.
    """

    name = "color_codeword"
    Config: ClassVar[type] = ColorCodewordConfig
    writes = frozenset({"color_codeword"})

    def validate(self, params: Any) -> None:
        p: ColorCodewordConfig = params
        if not 2 <= p.colors <= len(COLORS):
            raise InterplayError(f"color_codeword needs 2 <= colors <= {len(COLORS)}, "
                                 f"got {p.colors}")
        if p.turns < 1 or p.length < 1 or p.remaps_per_turn < 0:
            raise InterplayError(f"color_codeword needs turns >= 1, length >= 1 and "
                                 f"remaps_per_turn >= 0; got turns={p.turns}, "
                                 f"length={p.length}, remaps_per_turn={p.remaps_per_turn}")
        needed = p.colors + p.remaps_per_turn * (p.turns - 1)
        if needed > len(CODEWORDS):
            raise InterplayError(f"color_codeword has {len(CODEWORDS)} code words; colors + "
                                 f"remaps_per_turn * (turns - 1) = {needed} is too many")

    def plan(self, params: Any, rng: random.Random) -> Plan:
        p: ColorCodewordConfig = params
        colors = rng.sample(COLORS, p.colors)
        # Every code word is used once at most, so a re-coded color never reuses an old word.
        words = rng.sample(CODEWORDS, p.colors + p.remaps_per_turn * (p.turns - 1))
        book = dict(zip(colors, words[:p.colors], strict=True))
        fresh = iter(words[p.colors:])
        codebook = "\n".join(f"- {c}: {w}" for c, w in book.items())
        rounds = []
        for turn in range(p.turns):
            lines = []
            if turn > 0:
                for color in rng.sample(colors, min(p.remaps_per_turn, len(colors))):
                    book[color] = next(fresh)
                    lines.append(f"Code book change: {color} is now {book[color]}.")
            seq = [rng.choice(colors) for _ in range(p.length)]
            lines.append(f"Colors: {', '.join(seq)}")
            rounds.append(Round("\n".join(lines), tuple(book[c] for c in seq)))
        return Plan(CODEWORD_SYSTEM.replace("{codebook}", codebook), tuple(rounds),
                    info={"vocabulary": sorted(words)})

    def parse(self, text: str, plan: Plan) -> list[str]:
        vocab = set(plan.info["vocabulary"])
        return [w for w in re.findall(r"[a-z]+", text.casefold()) if w in vocab]


# -- the envs --------------------------------------------------------------------------------


@attrs.define
class AlphabetSortEnvConfig:
    #: The tasks to run instead of the env's builtin ones: a JSONL file of task rows, a file or
    #: folder the datasets library reads, or a dataset table ([env.taskset] with dataset = ...); a
    #: relative path is read from the working folder. Empty keeps the builtin tasks.
    taskset: TasksetSource = ""
    #: The alphabet_sort step's settings (env.puzzle.*).
    puzzle: AlphabetSortConfig = attrs.Factory(AlphabetSortConfig)


class AlphabetSortEnv(ScoredStepEnv):
    """Sort names over several turns, each adding names; reward = fraction of turns right."""

    name = "alphabet-sort"
    Config: ClassVar[type] = AlphabetSortEnvConfig
    step_cls = AlphabetSort
    data = "alphabet_sort.jsonl"


@attrs.define
class ColorCodewordEnvConfig:
    #: The tasks to run instead of the env's builtin ones: a JSONL file of task rows, a file or
    #: folder the datasets library reads, or a dataset table ([env.taskset] with dataset = ...); a
    #: relative path is read from the working folder. Empty keeps the builtin tasks.
    taskset: TasksetSource = ""
    #: The color_codeword step's settings (env.puzzle.*).
    puzzle: ColorCodewordConfig = attrs.Factory(ColorCodewordConfig)


class ColorCodewordEnv(ScoredStepEnv):
    """Translate color sequences with a changing code book; reward = fraction of turns right."""

    name = "color-codeword"
    Config: ClassVar[type] = ColorCodewordEnvConfig
    step_cls = ColorCodeword
    data = "color_codeword.jsonl"
