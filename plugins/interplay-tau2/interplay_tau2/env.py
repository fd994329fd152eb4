"""The tau2 envs, one per domain tau2 ships: ``tau2-mock``, ``tau2-airline``, ``tau2-retail``
and ``tau2-telecom``. Tasks come from tau2's own task files (a split with ``env.split``, a
subset with ``env.task_ids``), in tau2's order; each is played by the ``tau2`` step and scored
by the ``tau2`` verifier."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

import attrs

from interplay import Env, EpisodeContext, InterplayError, SeatSpec, Step, Task, Tool, Verifier
from interplay_tau2 import domains
from interplay_tau2.exchange import (
    RESULTS_KEY,
    ExchangeConfig,
    Live,
    StepConfig,
    Tau2Exchange,
    tau2_tools,
)
from interplay_tau2.scoring import Tau2Reward, Tau2RewardConfig


@attrs.define
class Tau2EnvConfig(ExchangeConfig):
    #: One of tau2's task splits of the domain (train, test, base; telecom also small,
    #: full); "" is every task.
    split: str = ""
    #: Only these tasks (tau2's task ids), in tau2's order; empty: all of the split.
    task_ids: list[str] = attrs.Factory(list)
    #: The ``tau2`` verifier's settings (the natural-language judge).
    scoring: Tau2RewardConfig = attrs.Factory(Tau2RewardConfig)


class Tau2Env(Env):
    """tau2-bench: a domain's policy, tools and database, tau2's user simulator, tau2's
    evaluator. Subclassed per domain."""

    name = "tau2"
    domain: ClassVar[str] = "mock"
    Config: ClassVar[type] = Tau2EnvConfig
    # Every seat runs tools: the user's too (telecom's user has tools of her own). Replies are
    # capped (tau2 sets no cap): a model that rambles would otherwise fill an 8k window within
    # the first turns on retail's long policy; raise them with
    # --set seats.<seat>.sampling.max_tokens=N. The seats as made (seats_for) let a seat's
    # tool loop run as long as the conversation may: tau2 lets an agent call tools until
    # max_steps, and so must the chat harness's cap on one reply's model calls.
    seats = {"assistant": SeatSpec(harness="chat", sampling={"max_tokens": 512}),
             "user": SeatSpec(harness="chat", trainable=False, sampling={"max_tokens": 256})}

    def __init__(self, config: object = None) -> None:
        super().__init__(config)
        cfg: Tau2EnvConfig = self.config
        if cfg.domain != type(self).domain:
            domains.check_choices(cfg.domain)
            if cfg.domain != ExchangeConfig().domain:
                raise InterplayError(f"env.domain: env {self.name!r} is tau2's "
                                     f"{type(self).domain} domain; choose the env "
                                     f"tau2-{cfg.domain} instead")
            cfg.domain = type(self).domain
        self.seats = seats_for(cfg.max_steps)  # type: ignore[misc]

    def check(self) -> None:
        cfg: Tau2EnvConfig = self.config
        domains.check_choices(cfg.domain, task_set=cfg.task_set, split=cfg.split,
                              policy=cfg.policy, solo=cfg.solo)
        super().check()

    def tasks(self) -> Iterable[Task]:
        cfg: Tau2EnvConfig = self.config
        found = domains.tasks(cfg.domain, task_set=cfg.task_set, split=cfg.split,
                              task_ids=cfg.task_ids, solo=cfg.solo)
        for idx, task in enumerate(found):
            yield Task(idx=idx, prompt=None, info={RESULTS_KEY: {
                "domain": cfg.domain, "task_id": task.id, "split": cfg.split}})

    def steps(self) -> list[Step]:
        cfg: Tau2EnvConfig = self.config
        return [Tau2Exchange(StepConfig(**{f.name: getattr(cfg, f.name)
                                           for f in attrs.fields(ExchangeConfig)}))]

    def verifiers(self) -> list[Verifier]:
        return [Tau2Reward(self.config.scoring)]

    def tools(self, seat: str, ctx: EpisodeContext) -> list[Tool]:
        cfg: Tau2EnvConfig = self.config
        live = ctx.store.find(Live)
        if live is None:
            raise InterplayError(f"env {self.name!r}: the seats' tools are tau2's environment, "
                                 f"made by the tau2 step; open a seat only inside it")
        if seat == cfg.seat:
            return tau2_tools(live, "assistant")
        if seat == cfg.user_seat:
            return tau2_tools(live, "user")
        return []


def seats_for(max_steps: int) -> dict[str, SeatSpec]:
    """The tau2 envs' seats for a conversation of ``max_steps``: both on the ``chat`` harness
    with a cap on one reply's model calls that tau2's own limit reaches first (each model call
    that calls tools is a step and its results another, so a reply of ``max_steps`` calls is
    past any conversation tau2 lets run). A run that gives a seat another harness starts from
    that harness's own settings."""
    chat = {"max_turns": max(max_steps, 1)}
    return {seat: attrs.evolve(spec, harness_config=dict(chat))
            for seat, spec in Tau2Env.seats.items()}


def _domain_env(domain: str) -> type[Tau2Env]:
    doc = {"mock": "tau2-bench's mock domain (9 small tasks; for fast checks)",
           "airline": "tau2-bench airline: flight bookings under the airline policy "
                      "(50 tasks; splits train, test)",
           "retail": "tau2-bench retail: orders, returns and exchanges (114 tasks; splits "
                     "train, test)",
           "telecom": "tau2-bench telecom: dual control, the user acts on her own phone "
                      "(114 tasks; splits train, test, small, full)"}[domain]
    return type(f"Tau2{domain.title()}Env", (Tau2Env,),
                {"name": f"tau2-{domain}", "domain": domain, "__doc__": doc,
                 "__module__": __name__})


ENVS = tuple(_domain_env(d) for d in domains.DOMAINS)
