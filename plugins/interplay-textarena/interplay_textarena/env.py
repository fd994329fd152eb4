"""The ``textarena`` env, its referee step ``textarena`` and its verifier ``textarena``.

The step holds one chat session per seat and lets the game referee: it reads the acting player's
new observations, sends them to that player's seat as one user message, and plays the reply as
the player's move through the game's own ``step``. A single-player game seats ``assistant`` (the
game plays the user); a two-player game seats ``player0`` and ``player1`` (by default both the
run's own model: self-play). Rewards are the game's own, per player, carried onto the seats.

A reply with nothing the game could read (empty, or not matching ``action_pattern``) is never
played: the seat is asked again, ``reask_budget`` times per move, then forfeits. What the game
itself rules invalid is its business (its own retries and penalties) and is recorded per move.
This module owns the exchange and the records; :mod:`interplay_textarena.game` owns the library.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import attrs

from interplay import (
    ChatSession,
    Env,
    Episode,
    EpisodeContext,
    InterplayError,
    Reward,
    SeatSpec,
    Step,
    Task,
    Verifier,
    get_logger,
)
from interplay_textarena.game import Game, describe, render

log = get_logger("interplay.textarena")

SINGLE_SEAT = "assistant"
TWO_SEATS: tuple[str, str] = ("player0", "player1")
SEED_SOURCES = ("episode", "task")
RESULTS_KEY = "textarena"
DEFAULT_SYSTEM_PROMPT = ("You are playing a text game. Each message shows what the game tells "
                         "you; reply with your move in the form the game asks for.")
#: Sent when a player's new observations are empty (the game said nothing since its last move).
YOUR_MOVE = "It is your move."


@attrs.define
class MatchConfig:
    #: A TextArena game id (``textarena.make``'s), e.g. TicTacToe-v0 or GuessTheNumber-v0.
    game: str = ""
    #: Keyword arguments for the game's constructor (``textarena.make(game, **game_kwargs)``).
    game_kwargs: dict[str, Any] = attrs.Factory(dict)
    #: Where the game's seed comes from: "episode" (the episode's seed, derived from the run's
    #: --seed, the task and the rollout) or "task" (task i is seed i in every rollout).
    seed_from: str = "episode"
    #: Times a reply with nothing to play (empty, or not matching action_pattern) is asked for
    #: again before the seat forfeits; 0 forfeits at the first such reply.
    reask_budget: int = 2
    #: A regular expression a reply must contain to be played ("" plays any non-empty reply
    #: and leaves its reading to the game).
    action_pattern: str = ""
    #: The reward of a seat that forfeits (the opponent gets its negation): TextArena's own
    #: penalty for a player out of invalid moves.
    forfeit_reward: float = -1.0
    #: Moves after which a game that has not ended is stopped (an error: no game result).
    max_turns: int = 500
    #: In a two-player game, swap which seat is the game's player 0 on every other task.
    alternate: bool = True


@attrs.define
class TextArenaConfig(MatchConfig):
    #: Games the env offers as tasks (``interplay eval -n`` takes the first n).
    tasks: int = 1000
    #: Each seat's system prompt ("" for none); the game's own rules come in its first message.
    system_prompt: str = DEFAULT_SYSTEM_PROMPT


def config_problems(cfg: MatchConfig) -> list[str]:
    problems = []
    if cfg.seed_from not in SEED_SOURCES:
        problems.append(f"seed_from must be one of {', '.join(SEED_SOURCES)}, "
                        f"got {cfg.seed_from!r}")
    if cfg.reask_budget < 0:
        problems.append(f"reask_budget must be 0 or more, got {cfg.reask_budget}")
    if cfg.max_turns < 1:
        problems.append(f"max_turns must be at least 1, got {cfg.max_turns}")
    if not math.isfinite(cfg.forfeit_reward):
        problems.append(f"forfeit_reward must be a finite number, got {cfg.forfeit_reward}")
    if cfg.action_pattern:
        try:
            re.compile(cfg.action_pattern)
        except re.error as exc:
            problems.append(f"action_pattern is not a regular expression ({exc})")
    return problems


def seat_names(players: int) -> tuple[str, ...]:
    return (SINGLE_SEAT,) if players == 1 else TWO_SEATS


def seating(players: int, task_idx: int, alternate: bool) -> dict[int, str]:
    """Which seat plays each of the game's players in task ``task_idx``."""
    seats = seat_names(players)
    shift = task_idx % 2 if alternate and players == 2 else 0
    return {player: seats[(player + shift) % players] for player in range(players)}


def game_seed(ctx: EpisodeContext, seed_from: str) -> int:
    if seed_from == "task":
        return int(ctx.task.info.get("game_seed", ctx.task.idx))
    return ctx.info.seed if ctx.info.seed is not None else 0


def reask_message(problem: str, pattern: str, attempts_left: int) -> str:
    why = ("Your reply was empty" if problem == "empty" else
           f"Your reply has no move in the form this game reads (a match for {pattern!r})")
    left = ("This is your last chance before you forfeit." if attempts_left == 1 else
            f"{attempts_left} tries left before you forfeit.")
    return f"{why}, so nothing was played. Reply with your move. {left}"


@attrs.define
class _Decision:
    """What came of asking one seat for one move."""

    action: str | None
    asks: int
    #: Why each reply that was not played was refused ("empty" or "no_match").
    refused: list[str]
    #: The seat's session ended (model error, timeout): it can move no more in this episode.
    failed: str | None = None


class _Tally:
    """Per-seat counts, kept as the match goes and written out however it ends."""

    KINDS = ("moves", "empty_replies", "unmatched_replies", "invalid_moves", "forfeits")

    def __init__(self, seats: Sequence[str]) -> None:
        self.counts = {seat: dict.fromkeys(self.KINDS, 0) for seat in seats}

    def add(self, seat: str, kind: str, n: int = 1) -> None:
        self.counts[seat][kind] += n

    def write(self, ctx: EpisodeContext, chats: dict[str, ChatSession],
              rewards: dict[str, float] | None) -> None:
        # The episode holds the totals; each seat's own counts are on its trace.
        for kind in self.KINDS:
            ctx.metrics[kind] = float(sum(c[kind] for c in self.counts.values()))
        for seat, chat in chats.items():
            chat.trace.metrics.update({k: float(v) for k, v in self.counts[seat].items()})
            if rewards is not None and seat in rewards:
                chat.trace.metrics["game_reward"] = rewards[seat]


class TextArenaMatch(Step):
    """Let a TextArena game referee its players: one chat session per seat."""

    name = "textarena"
    Config: ClassVar[type] = MatchConfig
    writes = frozenset({RESULTS_KEY})

    def seats(self) -> set[str]:
        return set(seat_names(describe(self.config.game, self.config.game_kwargs).players))

    def check(self, steps: Sequence[Step]) -> list[str]:
        problems = config_problems(self.config)
        describe(self.config.game, self.config.game_kwargs)  # refuses a game that cannot run
        return problems

    async def run(self, ctx: EpisodeContext) -> None:
        cfg: MatchConfig = self.config
        problems = config_problems(cfg)
        if problems:
            raise InterplayError(f"textarena: {problems[0]}")
        spec = describe(cfg.game, cfg.game_kwargs)
        seat_of = seating(spec.players, ctx.task.idx, cfg.alternate)
        seed = game_seed(ctx, cfg.seed_from)
        pattern = re.compile(cfg.action_pattern) if cfg.action_pattern else None
        record: dict[str, Any] = {
            "game": spec.game, "seed": seed,
            "players": {seat: player for player, seat in seat_of.items()},
            "moves": [], "ended_by": None, "rewards": None, "game_info": {}, "aborted": None}
        ctx.results[RESULTS_KEY] = record
        tally = _Tally(list(seat_of.values()))
        chats: dict[str, ChatSession] = {}
        game = Game(spec.game, players=spec.players, seed=seed, kwargs=cfg.game_kwargs)
        try:
            async with contextlib.AsyncExitStack() as stack:
                for seat in seat_of.values():
                    chats[seat] = await stack.enter_async_context(ctx.agent(seat).chat(ctx.task))
                ended_by = await self._play(game, cfg, pattern, seat_of, chats, record, tally)
                record["ended_by"] = ended_by
                for chat in chats.values():
                    chat.stop(ended_by if ended_by != "aborted" else "opponent_failed")
                rewards, info = game.close()
                record["game_info"] = {seat_of[p]: v for p, v in info.items() if p in seat_of}
                if ended_by == "game_over" and rewards is not None:
                    record["rewards"] = {seat_of[p]: r for p, r in rewards.items()
                                         if p in seat_of}
                elif ended_by == "forfeit":
                    record["rewards"] = self._forfeit_rewards(record, seat_of)
        finally:
            tally.write(ctx, chats, record["rewards"])
            log.debug("textarena.game_end", episode_id=ctx.info.episode_id, game=spec.game,
                      ended_by=record["ended_by"], moves=len(record["moves"]))

    async def _play(self, game: Game, cfg: MatchConfig, pattern: re.Pattern[str] | None,
                    seat_of: dict[int, str], chats: dict[str, ChatSession],
                    record: dict[str, Any], tally: _Tally) -> str:
        """Play until the game ends; how it ended: game_over, forfeit or aborted."""
        while True:
            if len(record["moves"]) >= cfg.max_turns:
                raise RuntimeError(f"the game did not end within max_turns={cfg.max_turns} "
                                   f"moves; raise env.max_turns")
            player, observations = game.observe()
            seat = seat_of[player]
            text = render(observations, player, game.roles) or YOUR_MOVE
            decision = await self._ask(chats[seat], text, pattern, cfg)
            move: dict[str, Any] = {"seat": seat, "player": player, "action": decision.action,
                                    "asks": decision.asks, "refused": decision.refused,
                                    "invalid": []}
            record["moves"].append(move)
            tally.add(seat, "empty_replies", decision.refused.count("empty"))
            tally.add(seat, "unmatched_replies", decision.refused.count("no_match"))
            if decision.failed is not None:
                record["aborted"] = {"seat": seat, "reason": decision.failed}
                return "aborted"
            if decision.action is None:
                tally.add(seat, "forfeits")
                record["forfeited"] = seat
                return "forfeit"
            tally.add(seat, "moves")
            done, invalid = game.play(decision.action)
            for ruling in invalid:
                move["invalid"].append(ruling.reason)
                tally.add(seat_of.get(ruling.player, seat), "invalid_moves")
            if done:
                return "game_over"

    async def _ask(self, chat: ChatSession, text: str, pattern: re.Pattern[str] | None,
                   cfg: MatchConfig) -> _Decision:
        """Ask for one move, asking again after each reply with nothing to play."""
        refused: list[str] = []
        message = text
        asks = cfg.reask_budget + 1
        for ask in range(1, asks + 1):
            if chat.over:
                return _Decision(None, ask - 1, refused,
                                 failed=f"its session is over ({chat.trace.stop_condition})")
            reply = await chat.turn(message)
            if reply.stopped:
                # A session ended by a model error or a timeout can take no further turn; a
                # game lost to infrastructure is not a game result.
                return _Decision(None, ask, refused,
                                 failed=f"its session ended ({reply.stop_condition})")
            action = reply.text.strip()
            problem = ("empty" if not action else
                       "no_match" if pattern is not None and not pattern.search(action) else None)
            if problem is None:
                return _Decision(action, ask, refused)
            refused.append(problem)
            message = reask_message(problem, cfg.action_pattern, asks - ask)
        return _Decision(None, asks, refused)

    def _forfeit_rewards(self, record: dict[str, Any],
                         seat_of: dict[int, str]) -> dict[str, float]:
        cfg: MatchConfig = self.config
        loser = record["forfeited"]
        return {seat: cfg.forfeit_reward if seat == loser else -cfg.forfeit_reward
                for seat in seat_of.values()}


class GameReward(Verifier):
    """The game's own rewards: the episode's reward in a single-player game, one per seat in a
    two-player game."""

    name = "textarena"

    def check(self, steps: Sequence[Step]) -> list[str]:
        if any(RESULTS_KEY in step.writes for step in steps):
            return []
        return [f"reads ctx.results[{RESULTS_KEY!r}] but no step writes it; add a "
                f"textarena step"]

    async def score(self, episode: Episode, ctx: EpisodeContext) -> list[Reward]:
        record = episode.results.get(RESULTS_KEY) or {}
        rewards = record.get("rewards")
        if rewards is None:
            # No game result (a seat's session failed, or the game raised): the episode
            # carries that error, and no reward is made up for it.
            return []
        reason = f"{record.get('game')}: {record.get('ended_by')}"
        if list(rewards) == [SINGLE_SEAT]:
            return [Reward(self.name, float(rewards[SINGLE_SEAT]), reason=reason)]
        return [Reward(self.name, float(value), seat=seat, reason=reason)
                for seat, value in rewards.items()]


class TextArenaEnv(Env):
    """TextArena games (set env.game): one player against the game, or two seats refereed
    by it."""

    name = "textarena"
    Config: ClassVar[type] = TextArenaConfig

    @property
    def seats(self) -> dict[str, SeatSpec]:  # type: ignore[override]
        # The seats follow the game: the game is known only once the env is configured.
        players = describe(self.config.game, self.config.game_kwargs).players
        return {seat: SeatSpec(harness="null") for seat in seat_names(players)}

    def tasks(self) -> Iterator[Task]:
        cfg: TextArenaConfig = self.config
        for idx in range(cfg.tasks):
            info: dict[str, Any] = {"game": cfg.game}
            if cfg.seed_from == "task":
                info["game_seed"] = idx
            yield Task(idx=idx, prompt=None, system_prompt=cfg.system_prompt or None,
                       info=info)

    def steps(self) -> list[Step]:
        cfg: TextArenaConfig = self.config
        fields = {f.name: getattr(cfg, f.name) for f in attrs.fields(MatchConfig)}
        return [TextArenaMatch(MatchConfig(**fields))]

    def verifiers(self) -> list[Verifier]:
        return [GameReward()]

    def check(self) -> None:
        cfg: TextArenaConfig = self.config
        problems = config_problems(cfg)
        if cfg.tasks < 1:
            problems.append(f"tasks must be at least 1, got {cfg.tasks}")
        if problems:
            raise InterplayError(f"env {self.name!r}: {problems[0]}")
        super().check()
