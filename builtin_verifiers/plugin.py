"""Registers the builtin verifiers (listed in interplay.plugins.host.DEFAULT_PLUGINS)."""

from __future__ import annotations

from interplay.plugins.hookspecs import Register, hookimpl


@hookimpl
def register_verifiers(register: Register) -> None:
    from interplay.builtin_verifiers.asked_before import AskedBefore
    from interplay.builtin_verifiers.goals import (
        ActedOnReply,
        ApprovedFirst,
        AppState,
        Goals,
        NoCollateral,
        QuietHours,
        RelayedWithin,
    )
    from interplay.builtin_verifiers.match import Contains, Exact, Regex
    from interplay.builtin_verifiers.payoff import Payoff
    from interplay.builtin_verifiers.rubric import Rubric
    from interplay.builtin_verifiers.state import StateMatch, StepScore
    from interplay.builtin_verifiers.tests import Tests

    register(Exact)
    register(Contains)
    register(Regex)
    register(Rubric)
    register(Payoff)
    register(StateMatch)
    register(StepScore)
    register(AskedBefore)
    register(RelayedWithin)
    register(ApprovedFirst)
    register(QuietHours)
    register(ActedOnReply)
    register(AppState)
    register(NoCollateral)
    register(Goals)
    register(Tests)
