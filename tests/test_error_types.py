"""One error vocabulary: every ``error_type`` interplay writes is an :class:`ErrorType` member,
the table in docs/results.md is the enum, written out; no code writes one as a string literal
(a scan of the sources); and :func:`error_of` is the one mapping from an exception to its type
and error, the same for the episode, a seat's segment, the always_on run and the runner."""

from __future__ import annotations

import ast
import re
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

import interplay
from interplay import (
    Env,
    ErrorType,
    Harness,
    InterplayError,
    SandboxError,
    SeatSpec,
    Segment,
    SegmentContext,
    Step,
    Task,
    UserSimError,
    hookimpl,
)
from interplay._plumbing import codec
from interplay.builtin_envs.steps import OneShot
from interplay.contracts.contexts import EpisodeContext
from interplay.contracts.sandbox import NotReachable
from interplay.contracts.usersim import Answer, Person, Read, UserSim, answer_or_error, set_up
from interplay.errors import error_of
from interplay.model.retries import RETRYABLE, status_error_type
from interplay.testing import run_scripted
from interplay.values.records import Episode, EpisodeInfo, converter

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results.md"
#: The code that writes records: the kernel, the builtins and the plugins' packages.
SOURCES = [ROOT / "core", *sorted(ROOT.glob("builtin_*")),
           *sorted(ROOT.glob("plugins/*/interplay_*"))]
#: Calls whose argument at this position is an error type (``Failure(type, message)``, the
#: openenv plugin's ``EnvFailure(type, message)``, ``CallOutcome(output, type)``,
#: ``ctx.fail(type, error)``).
ERROR_TYPE_ARG = {"Failure": 0, "AttemptFailure": 0, "EnvFailure": 0, "CallOutcome": 1,
                  "fail": 0}


def _table() -> list[tuple[str, str]]:
    text = RESULTS.read_text()
    marker = "<!-- error-types:"
    assert marker in text, "docs/results.md has no error-types table"
    table = text.split(marker, 1)[1].split("\n\n", 1)[0]
    return re.findall(r"^\| `([a-z_]+)` \| (.+) \|$", table, re.M)


def test_the_results_table_is_the_vocabulary() -> None:
    assert _table() == [(m.value, m.meaning) for m in ErrorType], (
        "docs/results.md's error types differ from interplay.ErrorType: write the table "
        "from the enum (one row per member, in order: `value` | meaning)")


def test_each_member_is_its_own_string_with_a_one_line_meaning() -> None:
    for member in ErrorType:
        assert member.name == member.value.upper()
        assert member == member.value and str(member) == member.value
        assert ErrorType(member.value) is member
        assert member.meaning and "\n" not in member.meaning
    assert "ErrorType" in interplay.__all__


def test_a_record_with_a_member_is_written_as_the_plain_string() -> None:
    info = EpisodeInfo(episode_id="e1", env="env", task_idx=0, rollout=0, seed=1)
    as_member = Episode(info=info, task=Task(idx=0), error="x", error_type=ErrorType.TIMEOUT)
    as_text = Episode(info=info, task=Task(idx=0), error="x", error_type="timeout")
    written = codec.dumps(converter().unstructure(as_member))
    assert written == codec.dumps(converter().unstructure(as_text))
    assert converter().structure(codec.loads(written), Episode).error_type == ErrorType.TIMEOUT


def _literals(node: ast.expr) -> Iterator[ast.Constant]:
    """The string constants an expression can evaluate to (through ``a if c else b`` and
    ``a or b``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node
    elif isinstance(node, ast.IfExp):
        yield from _literals(node.body)
        yield from _literals(node.orelse)
    elif isinstance(node, ast.BoolOp):
        for value in node.values:
            yield from _literals(value)


def _is_error_type(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "error_type") or \
        (isinstance(node, ast.Attribute) and node.attr in ("error_type", "failed_type"))


def _written(tree: ast.AST) -> Iterator[ast.Constant]:
    """Every string literal ``tree`` writes or compares as an error type."""
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "error_type":
            yield from _literals(node.value)
        elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if _is_error_type(target):
                    yield from _literals(node.value)
                elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    for part, value in zip(target.elts, node.value.elts, strict=False):
                        if _is_error_type(part):
                            yield from _literals(value)
        elif isinstance(node, ast.Compare) and any(
                _is_error_type(side) for side in (node.left, *node.comparators)):
            for side in (node.left, *node.comparators):
                yield from _literals(side)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else \
                func.attr if isinstance(func, ast.Attribute) else ""
            at = ERROR_TYPE_ARG.get(name)
            if at is not None and len(node.args) > at:
                yield from _literals(node.args[at])
        elif isinstance(node, ast.FunctionDef) and node.name == "failed_type":
            for returned in ast.walk(node):
                if isinstance(returned, ast.Return) and returned.value is not None:
                    yield from _literals(returned.value)


def _sources() -> Iterator[Path]:
    for root in SOURCES:
        for path in sorted(root.rglob("*.py")):
            if "tests" not in path.relative_to(ROOT).parts:
                yield path


def test_no_code_writes_an_error_type_as_a_string_literal() -> None:
    found = [f"{path.relative_to(ROOT)}:{c.lineno}: {c.value!r}" for path in _sources()
             for c in _written(ast.parse(path.read_text(), str(path)))]
    assert found == [], ("error types written as strings (write the ErrorType member; a new "
                         f"type is a new member and a row in docs/results.md): {found}")


def test_the_scan_finds_what_it_looks_for() -> None:
    code = ('Segment(error_type="x")\ncall.error_type = "y"\na.error, a.error_type = "m", "z"\n'
            'if t.error_type == "w": pass\nraise Failure("v", "m")\nCallOutcome("o", "u")\n'
            'ctx.fail("q" if c else "r", "e")\n')
    assert sorted(c.value for c in _written(ast.parse(code))) == \
        ["q", "r", "u", "v", "w", "x", "y", "z"]


def test_every_program_harness_fails_with_a_member() -> None:
    # A program harness's failure is ``<info_key>_failed`` (ProgramHarness.failed_type).
    keys: dict[str, str] = {}
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    ast.unparse(base).endswith("Harness") for base in node.bases):
                for item in node.body:
                    value = item.value if isinstance(item, ast.Assign | ast.AnnAssign) else None
                    target = item.targets[0] if isinstance(item, ast.Assign) else \
                        getattr(item, "target", None)
                    if isinstance(target, ast.Name) and target.id == "info_key" and \
                            isinstance(value, ast.Constant) and value.value:
                        keys[node.name] = value.value
    assert set(keys.values()) >= {"command", "codex", "claude_code", "mini_swe_agent"}
    assert [k for k in keys.values() if f"{k}_failed" not in set(ErrorType)] == []


def test_every_error_status_and_retryable_failure_is_a_member() -> None:
    assert {status_error_type(s) for s in range(400, 600)} == {
        ErrorType.BAD_REQUEST, ErrorType.AUTH_ERROR, ErrorType.NOT_FOUND, ErrorType.TIMEOUT,
        ErrorType.SERVER_ERROR, ErrorType.RATE_LIMITED}
    assert all(isinstance(t, ErrorType) for t in RETRYABLE)


# -- the one mapping -----------------------------------------------------------------------------


def _raised(exc: Exception) -> Exception:
    try:
        raise exc
    except Exception as caught:
        return caught


def test_a_user_sims_failure_is_an_interplay_error_of_its_own_type() -> None:
    assert issubclass(UserSimError, InterplayError)
    assert UserSimError.error_type is ErrorType.USER_ERROR
    assert InterplayError.error_type is ErrorType.CONFIG_ERROR
    assert str(UserSimError("user sim 'x' failed")) == "user sim 'x' failed"


@pytest.mark.parametrize(("exc", "expected"), [
    (InterplayError("set env.x"), (ErrorType.CONFIG_ERROR, "InterplayError: set env.x")),
    (UserSimError("user sim 'x' failed in relay"),
     (ErrorType.USER_ERROR, "user sim 'x' failed in relay")),
    (SandboxError("no image"), (ErrorType.SANDBOX_ERROR, "no image")),
    (NotReachable("the network keeps it out"),
     (ErrorType.SANDBOX_ERROR, "the network keeps it out")),
])
def test_an_exception_that_names_its_type_has_it_wherever_it_is_raised(
        exc: Exception, expected: tuple[ErrorType, str]) -> None:
    for otherwise in (ErrorType.ENV_ERROR, ErrorType.HARNESS_ERROR, ErrorType.RUNNER_ERROR):
        assert error_of(_raised(exc), otherwise, by="step 'x'") == expected


def test_a_bug_is_the_error_type_of_the_code_that_raised_it() -> None:
    exc = _raised(KeyError("k"))
    kind, error = error_of(exc, ErrorType.ENV_ERROR, by="step 'reply'")
    assert kind is ErrorType.ENV_ERROR
    assert re.fullmatch(r"step 'reply': KeyError: 'k' \(.*test_error_types\.py:\d+\)", error)
    assert error_of(exc, ErrorType.HARNESS_ERROR, located=False) == \
        (ErrorType.HARNESS_ERROR, "KeyError: 'k'")


class NestedSim(UserSim):
    """A sim whose own code raises a UserSimError (another sim inside it failed)."""

    name = "nested"

    async def setup(self, person: Person, ctx: EpisodeContext) -> None:
        raise UserSimError("the inner sim failed to set up")

    async def answer(self, read: Read) -> Answer:
        raise UserSimError("the inner sim failed")


async def test_a_sim_that_raises_a_user_sim_error_has_failed_like_any_other() -> None:
    # UserSimError is an InterplayError now; a sim raising one is still the sim's failure (an
    # Answer.error, a failed setup naming the sim), not a config error raised as it is.
    sim = NestedSim()
    answer = await answer_or_error(sim, Read(text="hi", turn=1), name="nested", step="relay")
    assert answer.error is not None
    assert answer.error.startswith("user sim 'nested' failed in relay at ")
    assert answer.error.endswith("UserSimError: the inner sim failed")
    person = Person(name="Ada")
    with pytest.raises(UserSimError, match=r"^user sim 'nested' failed to set up in relay at "
                                           r".*UserSimError: the inner sim failed to set up$"):
        await set_up(sim, person, None, name="nested", step="relay")  # type: ignore[arg-type]


class RaisingHarness(Harness):
    """Raises in its segment what the task's prompt names: the sandbox's failure, or a bug."""

    name = "test_raising_harness"

    async def launch(self, task: Task, ctx: SegmentContext) -> Segment:
        if str(task.prompt) == "sandbox":
            raise SandboxError("the sandbox's container has stopped")
        raise KeyError("k")


class OneSeat(Env):
    name = "test_error_types_one_seat"
    seats: ClassVar[dict[str, SeatSpec]] = {"assistant": SeatSpec(harness=RaisingHarness.name)}

    def tasks(self) -> list[Task]:
        return [Task(0, prompt="bug")]

    def steps(self) -> list[Step]:
        return [OneShot()]


@pytest.mark.parametrize(("prompt", "error_type", "error"), [
    ("sandbox", ErrorType.SANDBOX_ERROR, "the sandbox's container has stopped"),
    ("bug", ErrorType.HARNESS_ERROR, "KeyError: 'k' ("),
])
async def test_what_a_harness_raises_is_typed_by_the_one_mapping(
        register_plugin: Any, prompt: str, error_type: ErrorType, error: str) -> None:
    register_plugin(types.SimpleNamespace(register_harnesses=hookimpl(
        lambda register: register(RaisingHarness))), "raising_harness")
    run = await run_scripted(OneSeat(), Task(0, prompt=prompt), None)
    trace = run.episode.trace("assistant")
    assert (trace.error_type, trace.stop_condition) == (error_type, "error")
    assert (trace.error or "").startswith(error)
    assert run.episode.error_type == error_type and run.episode.reward is None
