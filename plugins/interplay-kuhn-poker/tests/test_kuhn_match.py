"""Matches end to end: the kuhn-poker env run through run_episode, both seats live chat
sessions over real HTTP against the scripted model, scored by the builtin payoff verifier."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import pytest

from interplay import Endpoint, Episode, InterplayError, Trace, lookup
from interplay.run import RunResources, run_episode
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest
from interplay.values import from_json, to_json
from interplay_kuhn_poker import messages, rules, strategies
from interplay_kuhn_poker.env import (
    DEFAULT_MAX_TOKENS,
    SEATS,
    KuhnPokerEnv,
    first_seat,
    hand_rng,
)
from interplay_kuhn_poker.scripted import Situation, handler, playing

ALWAYS_BET = playing(strategies.always_bet)


def _passive(card: str, history: tuple[str, ...]) -> dict[str, Fraction]:
    legal = rules.legal_actions(history)
    return {"check" if "check" in legal else "fold": Fraction(1)}


PASSIVE = playing(_passive)


def make_env(**settings: Any) -> KuhnPokerEnv:
    env_cls = lookup("envs", "kuhn-poker")
    env = env_cls(env_cls.Config(**settings))
    env.check()
    return env


@pytest.fixture
def model() -> Iterator[Callable[..., ScriptedModel]]:
    started: list[ScriptedModel] = []

    def start(script: Any, name: str = "scripted") -> ScriptedModel:
        m = ScriptedModel(script, model=name).start()
        started.append(m)
        return m

    yield start
    for m in started:
        m.stop()


async def play(env: KuhnPokerEnv, endpoint: Endpoint, *, task_idx: int = 0, seed: int = 5,
               seats: dict[str, dict[str, Any]] | None = None) -> Episode:
    task = next(t for t in env.tasks() if t.idx == task_idx)
    resources = RunResources(endpoint=endpoint, seats=seats)
    try:
        return await run_episode(env, task, resources=resources, seed=seed, rollout=0)
    finally:
        await resources.aclose()


def trace_of(episode: Episode, seat: str) -> Trace:
    (trace,) = [t for t in episode.traces if t.seat == seat]
    return trace


def expected_match(task_idx: int, seed: int, hands: int,
                   players: dict[str, strategies.Strategy]) -> list[rules.HandResult]:
    """The same match replayed with the rules engine alone (deterministic players only)."""
    out = []
    for hand in range(hands):
        first = first_seat(task_idx, hand)
        order = (first, SEATS[1 - SEATS.index(first)])
        cards = rules.deal(hand_rng(seed, task_idx, 0, hand))
        history: list[str] = []
        while not rules.is_terminal(history):
            pos = rules.to_act(history)
            dist = players[order[pos]](cards[pos], tuple(history))
            history.append(max(dist, key=lambda a: dist[a]))
        out.append(rules.result(cards, history))
    return out


async def test_a_scripted_match_is_refereed_scored_and_recorded(model: Any) -> None:
    m = model(handler({"player0": ALWAYS_BET, "player1": PASSIVE}))
    env = make_env(hands=4)
    episode = await play(env, m.endpoint)
    assert episode.error is None, episode.error

    expected = expected_match(0, 5, 4, {"player0": strategies.always_bet, "player1": _passive})
    record = episode.results["kuhn_poker"]
    assert [h["first"] for h in record["hands"]] == ["player0", "player1", "player0", "player1"]
    want = dict.fromkeys(SEATS, 0)
    for hand, res in zip(record["hands"], expected, strict=True):
        order = (hand["first"], SEATS[1 - SEATS.index(hand["first"])])
        assert hand["history"] == list(res.history)
        assert hand["outcome"] == res.outcome
        assert hand["cards"] == {order[0]: res.cards[0], order[1]: res.cards[1]}
        assert sum(hand["payoffs"].values()) == 0
        for pos, seat in enumerate(order):
            want[seat] += res.payoffs[pos]
    # Always-bet against a player who never calls takes the antes: +1 per hand.
    assert want == {"player0": 4, "player1": -4}
    assert episode.results["payoffs"] == {"player0": 4.0, "player1": -4.0}

    # The payoff verifier put each seat's payoff on that seat's trace, and only there.
    for seat in SEATS:
        trace = trace_of(episode, seat)
        assert trace.agent == seat
        assert [(r.name, r.seat, r.value) for r in trace.rewards] == [
            ("payoff", seat, float(want[seat]))]
        assert trace.reward == float(want[seat])
        assert trace.stop_condition == "match_over"
        assert trace.metrics["payoff"] == float(want[seat])
        assert trace.metrics["forfeits"] == 0.0
        assert trace.harness == "null"
    assert episode.reward is None  # no seat-less reward: a zero-sum game has no shared score
    m_ = episode.metrics
    assert m_["payoff/player0"] == 4.0 and m_["payoff/player1"] == -4.0
    assert m_["hands"] == 4.0 and m_["hands/fold"] == 4.0 and m_["hands/showdown"] == 0.0
    assert m_["hands/forfeit"] == 0.0 and m_["forfeits"] == 0.0 and m_["hands/aborted"] == 0.0

    # Each decision was one request on the deciding seat's own conversation, which opens with
    # the rules as the system prompt; a seat is told its own card only.
    decisions = sum(len(h["actions"]) for h in record["hands"])
    # player1 checks then folds when it acts first (hands 2 and 4): 2 + 3 + 2 + 3 decisions.
    assert len(m.requests) == decisions == 10
    for request in m.requests:
        assert request.messages[0] == {"role": "system", "content": messages.RULES}
        s = Situation(request)
        hand = record["hands"][int(s.text.split("Hand ")[-1].split(" of")[0]) - 1]
        assert s.card == hand["cards"][s.seat]
    p0 = trace_of(episode, "player0")
    assert len([x for x in p0.messages if x.role == "assistant"]) == 4
    assert len(p0.model_calls) == 4
    # How a hand ended is told to each seat before its next decision.
    assert "Hand 1 is over (player1 folded); you won 1 chip." in p0.messages[3].text

    # The episode round-trips through JSON, results included.
    again = from_json(to_json(episode), Episode)
    assert again.results == episode.results


async def test_invalid_replies_are_asked_again_then_accepted(model: Any) -> None:
    bad = iter(["I would rather not say.", "[bet] [bet]", "[call]"])

    def player0(s: Situation) -> str:
        return next(bad, "[bet]")

    m = model(handler({"player0": player0, "player1": PASSIVE}))
    env = make_env(hands=1, invalid_retries=3)
    episode = await play(env, m.endpoint)
    assert episode.error is None
    (hand,) = episode.results["kuhn_poker"]["hands"]
    assert hand["outcome"] == "fold" and hand["history"] == ["bet", "fold"]
    first = hand["actions"][0]
    assert first["seat"] == "player0" and first["action"] == "bet" and first["asks"] == 4
    assert ["no action in square brackets" in first["invalid"][0],
            "2 bracketed words ([bet], [bet])" in first["invalid"][1],
            "[call] is not allowed now" in first["invalid"][2]] == [True, True, True]
    assert episode.metrics["invalid_replies/player0"] == 3.0
    assert episode.metrics["invalid_replies/player1"] == 0.0
    assert episode.metrics["forfeits"] == 0.0
    assert episode.results["payoffs"] == {"player0": 1.0, "player1": -1.0}
    # The re-asks are turns of the same conversation: the model sees its invalid replies and
    # why they were refused.
    asks = [r for r in m.requests if Situation(r).seat == "player0"]
    assert len(asks) == 4
    last = [x["content"] for x in asks[-1].messages]
    assert "I would rather not say." in last and "[bet] [bet]" in last
    assert last[-1].startswith("That reply is not valid: [call] is not allowed now")
    assert "last chance" in last[-1]


async def test_a_seat_still_invalid_after_its_retries_forfeits_the_hand(model: Any) -> None:
    m = model(handler({"player0": ALWAYS_BET, "player1": lambda s: "[check] [check]"}))
    env = make_env(hands=2, invalid_retries=1)
    episode = await play(env, m.endpoint)
    assert episode.error is None
    hands = episode.results["kuhn_poker"]["hands"]
    # Hand 1: player0 bets, player1 never answers validly: it forfeits its ante.
    assert hands[0]["outcome"] == "forfeit" and hands[0]["history"] == ["bet"]
    assert hands[0]["payoffs"] == {"player0": 1, "player1": -1}
    assert hands[0]["actions"][-1] == {
        "seat": "player1", "action": None, "asks": 2,
        "invalid": [hands[0]["actions"][-1]["invalid"][0]] * 2}
    # Hand 2: player1 acts first and forfeits at once.
    assert hands[1]["first"] == "player1" and hands[1]["history"] == []
    assert hands[1]["outcome"] == "forfeit" and hands[1]["winner"] == "player0"
    assert episode.results["payoffs"] == {"player0": 2.0, "player1": -2.0}
    assert episode.metrics["forfeits/player1"] == 2.0
    assert episode.metrics["forfeits/player0"] == 0.0
    assert episode.metrics["forfeits"] == 2.0
    assert episode.metrics["hands/forfeit"] == 2.0
    assert episode.metrics["invalid_replies/player1"] == 4.0
    assert trace_of(episode, "player1").rewards[0].value == -2.0
    # Asked once plus one retry per hand; player0 bet once (hand 1) and was never asked in
    # hand 2, where player1 forfeited first.
    seats = [Situation(r).seat for r in m.requests]
    assert seats.count("player1") == 4 and seats.count("player0") == 1
    p1 = trace_of(episode, "player1")
    told = [x.text for x in p1.messages if x.role == "user"]
    assert "Hand 1 is over (you gave no valid action and forfeited); you lost 1 chip." in told[2]


async def test_zero_retries_asks_once(model: Any) -> None:
    m = model(handler({"player0": lambda s: "", "player1": PASSIVE}))
    episode = await play(make_env(hands=1, invalid_retries=0), m.endpoint)
    (hand,) = episode.results["kuhn_poker"]["hands"]
    assert hand["outcome"] == "forfeit" and hand["actions"][0]["asks"] == 1
    assert len(m.requests) == 1
    assert episode.results["payoffs"] == {"player0": -1.0, "player1": 1.0}


@pytest.mark.parametrize("value", [-1, -5])
def test_negative_invalid_retries_is_refused_at_load(value: int) -> None:
    env_cls = lookup("envs", "kuhn-poker")
    env = env_cls(env_cls.Config(invalid_retries=value))
    with pytest.raises(InterplayError, match=f"invalid_retries must be 0 or more, got {value}"):
        env.check()


def test_other_bad_settings_are_refused_at_load() -> None:
    env_cls = lookup("envs", "kuhn-poker")
    with pytest.raises(InterplayError, match="hands must be at least 1, got 0"):
        env_cls(env_cls.Config(hands=0)).check()
    with pytest.raises(InterplayError, match="tasks must be at least 1"):
        env_cls(env_cls.Config(tasks=0)).check()


async def test_each_seat_can_be_filled_by_its_own_model(model: Any) -> None:
    m0 = model(handler({"player0": ALWAYS_BET}), name="model-a")
    m1 = model(handler({"player1": ALWAYS_BET}), name="model-b")
    env = make_env(hands=2)
    episode = await play(env, m0.endpoint, seats={
        "player1": {"model": {"base_url": m1.base_url, "model": "model-b"},
                    "sampling": {"temperature": 0.5}}})
    assert episode.error is None
    assert {Situation(r).seat for r in m0.requests} == {"player0"}
    assert {Situation(r).seat for r in m1.requests} == {"player1"}
    assert all(r.body.get("temperature") == 0.5 for r in m1.requests)
    # A seat's overrides merge over the env's defaults: the reply cap stays on both seats.
    assert all(r.body.get("max_tokens") == DEFAULT_MAX_TOKENS
               for r in [*m0.requests, *m1.requests])
    assert all("temperature" not in r.body for r in m0.requests)
    assert trace_of(episode, "player0").model == "model-a"
    assert trace_of(episode, "player1").model == "model-b"
    # Both always bet and call: every hand is a showdown for 2 chips.
    assert episode.metrics["hands/showdown"] == 2.0
    assert sum(episode.results["payoffs"].values()) == 0


async def test_a_seat_whose_model_fails_aborts_the_match_cleanly(model: Any) -> None:
    def handle(request: ScriptedRequest) -> ScriptedReply:
        s = Situation(request)
        if s.seat == "player1":
            return ScriptedReply.fault(400)
        return ScriptedReply.text("[bet]")

    m = model(handle)
    env = make_env(hands=3)
    episode = await play(env, m.endpoint)
    # Hand 1: player0 bets, player1's model refuses: the hand is void, the match stops.
    record = episode.results["kuhn_poker"]
    assert record["aborted"]["hand"] == 0 and record["aborted"]["seat"] == "player1"
    assert [h["outcome"] for h in record["hands"]] == ["aborted"]
    assert episode.results["payoffs"] == {"player0": 0.0, "player1": 0.0}
    assert episode.metrics["hands/aborted"] == 1.0 and episode.metrics["hands"] == 0.0
    assert episode.metrics["forfeits"] == 0.0
    p1 = trace_of(episode, "player1")
    assert p1.error_type is not None and p1.stop_condition == "error"
    assert trace_of(episode, "player0").stop_condition == "opponent_failed"
    assert episode.error is not None and episode.error_type == p1.error_type


async def test_deals_follow_the_seed_task_and_hand(model: Any) -> None:
    m = model(handler({"player0": ALWAYS_BET, "player1": ALWAYS_BET}))
    env = make_env(hands=6)
    first = await play(env, m.endpoint, seed=9)
    again = await play(env, m.endpoint, seed=9)
    other = await play(env, m.endpoint, seed=10)

    def cards(e: Episode) -> list[dict[str, str]]:
        return [h["cards"] for h in e.results["kuhn_poker"]["hands"]]

    assert cards(first) == cards(again)
    assert cards(first) != cards(other)
    assert first.results["payoffs"] == again.results["payoffs"]
    # Task 1 starts with player1 first, so one-hand matches alternate across tasks too.
    task1 = await play(make_env(hands=1), m.endpoint, task_idx=1)
    assert task1.results["kuhn_poker"]["hands"][0]["first"] == "player1"
