"""The ``kuhn-poker`` env and its referee step, ``kuhn_poker``.

The host referees: it deals from a seeded generator, asks the seat to act for its decision
through that seat's own chat session, reads the reply, enforces the betting rules, settles the
showdown and writes zero-sum payoffs. The players are whatever fills seats ``player0`` and
``player1`` (by default the run's own model in both: self-play). This module owns the match;
the rules are :mod:`interplay_kuhn_poker.rules`, the texts :mod:`interplay_kuhn_poker.messages`.
It does not score: the builtin ``payoff`` verifier reads ``results["payoffs"]``.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import attrs

from interplay import (
    ChatSession,
    Env,
    EpisodeContext,
    InterplayError,
    SeatSpec,
    Step,
    Task,
    Verifier,
    get_logger,
    lookup,
)
from interplay_kuhn_poker import messages, rules

log = get_logger("interplay.kuhn_poker")

SEATS: tuple[str, str] = ("player0", "player1")
OUTCOMES: tuple[str, ...] = ("showdown", "fold", "forfeit")
#: Each seat's default reply cap, in tokens.
DEFAULT_MAX_TOKENS = 64


@attrs.define
class MatchConfig:
    #: Hands in one match (one task). Positions alternate from hand to hand.
    hands: int = 1
    #: Times an invalid reply is asked again before the hand is forfeited (0: asked once).
    invalid_retries: int = 2


def config_problems(hands: int, invalid_retries: int) -> list[str]:
    problems = []
    if hands < 1:
        problems.append(f"hands must be at least 1, got {hands}; set hands = 1 or more")
    if invalid_retries < 0:
        problems.append(f"invalid_retries must be 0 or more, got {invalid_retries} (0 asks "
                        f"each player once, with no second chance); set invalid_retries = 0 "
                        f"or more")
    return problems


@attrs.define
class _Decision:
    """What came of asking one seat for one action."""

    action: str | None
    asks: int
    problems: list[str]
    #: The seat's session ended (model error, timeout): it can act no more in this episode.
    failed: str | None = None


class _Aborted(Exception):
    def __init__(self, seat: str, why: str) -> None:
        super().__init__(f"{seat}: {why}")
        self.seat = seat
        self.why = why


def first_seat(task_idx: int, hand: int) -> str:
    """Who acts first: alternating by hand, and by task so one-hand matches alternate too."""
    return SEATS[(task_idx + hand) % 2]


def hand_rng(seed: int | None, task_idx: int, rollout: int, hand: int) -> random.Random:
    """The generator one hand is dealt from: a pure function of the run's seed, the task, the
    rollout and the hand, so a deal never depends on what else the episode drew."""
    return random.Random(f"kuhn-poker:{seed if seed is not None else 0}:{task_idx}:"
                         f"{rollout}:{hand}")


class KuhnPokerMatch(Step):
    """Referee a Kuhn poker match between seats player0 and player1."""

    name = "kuhn_poker"
    Config: ClassVar[type] = MatchConfig
    writes = frozenset({"payoffs"})

    def seats(self) -> set[str]:
        return set(SEATS)

    def check(self, steps: Sequence[Step]) -> list[str]:
        cfg: MatchConfig = self.config
        return config_problems(cfg.hands, cfg.invalid_retries)

    async def run(self, ctx: EpisodeContext) -> None:
        cfg: MatchConfig = self.config
        problems = self.check([self])
        if problems:
            raise InterplayError(f"kuhn_poker: {problems[0]}")
        totals = dict.fromkeys(SEATS, 0)
        forfeits = dict.fromkeys(SEATS, 0)
        invalid = dict.fromkeys(SEATS, 0)
        decisions = dict.fromkeys(SEATS, 0)
        outcomes = dict.fromkeys(OUTCOMES, 0)
        hands: list[dict[str, Any]] = []
        aborted: dict[str, Any] | None = None
        chats: dict[str, ChatSession] = {}
        try:
            async with contextlib.AsyncExitStack() as stack:
                for seat in SEATS:
                    chats[seat] = await stack.enter_async_context(ctx.agent(seat).chat(ctx.task))
                news: dict[str, list[str]] = {seat: [] for seat in SEATS}
                for hand in range(cfg.hands):
                    first = first_seat(ctx.task.idx, hand)
                    order = (first, SEATS[1 - SEATS.index(first)])
                    cards = rules.deal(hand_rng(ctx.info.seed, ctx.task.idx, ctx.info.rollout,
                                                hand))
                    history: list[str] = []
                    record: dict[str, Any] = {
                        "hand": hand, "first": first,
                        "cards": {order[0]: cards[0], order[1]: cards[1]}, "actions": []}
                    try:
                        result = await self._play_hand(ctx, chats, cfg, hand, order, cards,
                                                       history, news, record, invalid,
                                                       decisions)
                    except _Aborted as exc:
                        record["outcome"] = "aborted"
                        record["history"] = list(history)
                        hands.append(record)
                        aborted = {"hand": hand, "seat": exc.seat, "reason": exc.why}
                        other = order[1 - order.index(exc.seat)]
                        chats[other].stop("opponent_failed")
                        break
                    for pos, seat in enumerate(order):
                        totals[seat] += result.payoffs[pos]
                    outcomes[result.outcome] += 1
                    if result.forfeited is not None:
                        forfeits[order[result.forfeited]] += 1
                    record.update(history=list(result.history), outcome=result.outcome,
                                  winner=order[result.winner],
                                  payoffs={order[0]: result.payoffs[0],
                                           order[1]: result.payoffs[1]})
                    hands.append(record)
                    for seat in SEATS:
                        news[seat].append(messages.hand_summary(result, order, seat, hand,
                                                                totals[seat]))
                    log.debug("kuhn_poker.hand", episode_id=ctx.info.episode_id, hand=hand,
                              outcome=result.outcome, pot=result.pot)
                else:
                    for chat in chats.values():
                        chat.stop("match_over")
        finally:
            ctx.results["payoffs"] = {seat: float(totals[seat]) for seat in SEATS}
            ctx.results["kuhn_poker"] = {"hands": hands, "aborted": aborted,
                                         "hands_planned": cfg.hands}
            ctx.metrics["hands"] = float(sum(outcomes.values()))
            for outcome, n in outcomes.items():
                ctx.metrics[f"hands/{outcome}"] = float(n)
            ctx.metrics["hands/aborted"] = float(aborted is not None)
            for seat in SEATS:
                ctx.metrics[f"payoff/{seat}"] = float(totals[seat])
                ctx.metrics[f"forfeits/{seat}"] = float(forfeits[seat])
                ctx.metrics[f"invalid_replies/{seat}"] = float(invalid[seat])
            ctx.metrics["forfeits"] = float(sum(forfeits.values()))
            for seat, chat in chats.items():
                chat.trace.metrics.update(payoff=float(totals[seat]),
                                          forfeits=float(forfeits[seat]),
                                          invalid_replies=float(invalid[seat]),
                                          decisions=float(decisions[seat]))

    async def _play_hand(self, ctx: EpisodeContext, chats: dict[str, ChatSession],
                         cfg: MatchConfig, hand: int, order: tuple[str, str],
                         cards: tuple[str, str], history: list[str],
                         news: dict[str, list[str]], record: dict[str, Any],
                         invalid: dict[str, int], decisions: dict[str, int]) -> rules.HandResult:
        while not rules.is_terminal(history):
            position = rules.to_act(history)
            seat = order[position]
            legal = rules.legal_actions(history)
            text = messages.decision_message(seat=seat, order=order, card=cards[position],
                                             history=history, legal=legal, hand=hand,
                                             hands=cfg.hands, news=news[seat])
            decision = await self._ask(chats[seat], text, legal, cfg.invalid_retries)
            news[seat] = []
            decisions[seat] += 1
            invalid[seat] += len(decision.problems)
            record["actions"].append({"seat": seat, "action": decision.action,
                                      "asks": decision.asks, "invalid": decision.problems})
            if decision.failed is not None:
                raise _Aborted(seat, decision.failed)
            if decision.action is None:
                return rules.forfeit(cards, history)
            history.append(decision.action)
        return rules.result(cards, history)

    async def _ask(self, chat: ChatSession, text: str, legal: Sequence[str],
                   retries: int) -> _Decision:
        """Ask for one action, asking again after each invalid reply (``retries`` times)."""
        problems: list[str] = []
        message = text
        asks = retries + 1
        for ask in range(1, asks + 1):
            if chat.over:
                return _Decision(None, ask - 1, problems,
                                 failed=f"its session is over ({chat.trace.stop_condition})")
            reply = await chat.turn(message)
            if reply.stopped:
                # The seat's session ended (a model error, a timeout): no further turn is
                # possible, and a hand lost to infrastructure is not a game result.
                return _Decision(None, ask, problems,
                                 failed=f"its session ended ({reply.stop_condition})")
            parsed = messages.parse_reply(reply.text, legal)
            if parsed.valid:
                return _Decision(parsed.action, ask, problems)
            assert parsed.problem is not None
            problems.append(parsed.problem)
            message = messages.reask_message(parsed.problem, asks - ask)
        return _Decision(None, asks, problems)


@attrs.define
class KuhnPokerConfig:
    #: Matches the env offers as tasks (``interplay eval -n`` takes the first n).
    tasks: int = 1000
    #: Hands per match.
    hands: int = 1
    #: Times an invalid reply is asked again before the hand is forfeited (0: asked once).
    invalid_retries: int = 2


class KuhnPokerEnv(Env):
    """Kuhn poker self-play: two seats of the run's model, refereed by the host, zero-sum."""

    name = "kuhn-poker"
    Config: ClassVar[type] = KuhnPokerConfig
    # A decision is one bracketed word; the cap keeps a rambling model from stalling the
    # match (a reply cut off before its action is invalid and asked again). Models that reason
    # before answering need it raised: --set seats.player0.sampling.max_tokens=4096.
    seats = {seat: SeatSpec(harness="null", sampling={"max_tokens": DEFAULT_MAX_TOKENS})
             for seat in SEATS}

    def tasks(self) -> Iterator[Task]:
        cfg: KuhnPokerConfig = self.config
        for idx in range(cfg.tasks):
            yield Task(idx=idx, prompt=None, system_prompt=messages.RULES,
                       info={"hands": cfg.hands, "first": first_seat(idx, 0)})

    def steps(self) -> list[Step]:
        cfg: KuhnPokerConfig = self.config
        return [KuhnPokerMatch(MatchConfig(hands=cfg.hands,
                                           invalid_retries=cfg.invalid_retries))]

    def verifiers(self) -> list[Verifier]:
        # The builtin payoff verifier carries results["payoffs"] onto each seat's trace;
        # naming both seats makes a match that lost a seat's payoff an error, not a blank.
        payoff = lookup("verifiers", "payoff")
        return [payoff(payoff.Config(seats=list(SEATS)))]

    def check(self) -> None:
        cfg: KuhnPokerConfig = self.config
        problems = config_problems(cfg.hands, cfg.invalid_retries)
        if cfg.tasks < 1:
            problems.append(f"tasks must be at least 1, got {cfg.tasks}")
        if problems:
            raise InterplayError(f"env {self.name!r}: {problems[0]}")
        super().check()
