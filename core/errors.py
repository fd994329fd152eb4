"""The project's one exception type for errors a user can cause, where a plugin's code went
wrong, and the one vocabulary of error types a record keeps.

:class:`InterplayError` carries a one-line message that says what to change. The CLI prints it
without a traceback and exits 2. Bugs are ordinary exceptions and keep their traceback;
:func:`describe_exception` says one in a line, at the line of the plugin's own code that
raised it.

:class:`ErrorType` is every ``error_type`` interplay writes (an episode's, a trace's, a model
call's, a tool run's), each with its meaning (the table in docs/results.md is the same);
:func:`error_of` is the one mapping from an exception to its error type and error.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import traceback
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar

#: Where the kernel's own modules are: a frame outside it is where a plugin went wrong.
_KERNEL = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _library_roots() -> tuple[str, ...]:
    """The standard library's folders and every installed package's (site-packages): a frame
    there is a library's, not the plugin's that called it (an editable plugin's code is in
    its checkout, never here)."""
    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return tuple(os.path.abspath(r) + os.sep for r in roots if r)


_LIBRARIES = _library_roots()


class ErrorType(StrEnum):
    """Why an episode, a seat's trace, a model call or a tool run failed: the ``error_type`` of
    its record, one member per type interplay writes, each with its :attr:`meaning`. A member
    is the string it stands for (``ErrorType.TIMEOUT == "timeout"``), so records on disk read
    back as they were written; a plugin compares and writes members
    (``from interplay import ErrorType``). docs/results.md lists them in one table."""

    meaning: str

    def __new__(cls, value: str, meaning: str) -> ErrorType:
        member = str.__new__(cls, value)
        member._value_ = value
        member.meaning = meaning
        return member

    # -- how an episode (or a seat's trace) ended ------------------------------------------------
    CONFIG_ERROR = ("config_error", "a setting, a task or a name the episode refused (an "
                    "InterplayError): the error says what to change")
    ENV_ERROR = ("env_error", "a step of the env raised (the error names where in its code), "
                 "recorded a metric that is not a number, or broke out of an open chat")
    USER_ERROR = ("user_error", "the user sim failed: it raised (setting up or answering) or "
                  "answered with Answer.error (UserSimError)")
    SANDBOX_ERROR = ("sandbox_error", "the episode's sandbox could not start, set up or run a "
                     "command at all (SandboxError)")
    HARNESS_ERROR = ("harness_error", "a harness raised, or handed back something other than "
                     "a Segment of Messages")
    VERIFIER_ERROR = ("verifier_error", "a verifier raised, or gave a reward that is not a "
                      "finite number: the episode has no reward")
    WORKER_ERROR = ("worker_error", "the process running the episode died (a worker process, "
                    "a Ray actor)")
    RUNNER_ERROR = ("runner_error", "running the episode raised outside its steps and "
                    "verifiers (interplay's own bug)")
    CANCELLED = ("cancelled", "always_on's record of a run cancelled mid-way (Ctrl-C, the "
                 "run's end)")
    MAX_TURNS = ("max_turns", "always_on: an agent turn stopped at its harness's turn cap "
                 "(the chat harness's max_turns), which ends the run as an error")
    TIMEOUT = ("timeout", "a seat's turn ran past its timeout_s (or a harness's own limit, "
               "which the error names), a model call past its endpoint's timeout (HTTP 408 "
               "too), or a tool call past its limit")
    TOOLS_UNREACHABLE = ("tools_unreachable", "a program harness's program could not reach "
                         "the env's tools (their MCP server did not start)")
    SPAWN_ERROR = ("spawn_error", "the system would not start a seat's program (short of "
                   "descriptors, processes or memory); tried again")
    COMMAND_FAILED = ("command_failed", "the command harness's program exited with an error, "
                      "or finished without a recorded model answer")
    CODEX_FAILED = ("codex_failed", "Codex (the codex harness) exited with an error, or "
                    "finished without a recorded model answer")
    CLAUDE_CODE_FAILED = ("claude_code_failed", "Claude Code (the claude-code harness) exited "
                          "with an error, or finished without a recorded model answer")
    MINI_SWE_AGENT_FAILED = ("mini_swe_agent_failed", "mini-swe-agent (its harness) exited "
                             "with an error, or finished without a recorded model answer")
    # -- a model call (a seat's failed call is its trace's error, and its episode's) -----------
    RATE_LIMITED = ("rate_limited", "a model call answered HTTP 429; tried again")
    SERVER_ERROR = ("server_error", "a model call answered HTTP 5xx or 409, or an error "
                    "inside its stream; tried again")
    CONNECTION_ERROR = ("connection_error", "a model call's endpoint could not be reached, or "
                        "the connection broke before the answer ended; tried again")
    BAD_RESPONSE = ("bad_response", "a model call's answer is not what its API returns (not "
                    "JSON, no message)")
    AUTH_ERROR = ("auth_error", "a model call answered HTTP 401 or 403: the endpoint refused "
                  "the key")
    NOT_FOUND = ("not_found", "a model call answered HTTP 404: a wrong base_url or model name")
    BAD_REQUEST = ("bad_request", "a model call answered another 4xx: the endpoint refused the "
                   "request")
    NOT_SUPPORTED = ("not_supported", "the endpoint does not serve what was asked (a token "
                     "count: no /tokenize route)")
    # -- a tool call (a tool run's, a tool outcome's) ---------------------------------------------
    UNKNOWN_TOOL = ("unknown_tool", "a tool call named no tool the seat has")
    BAD_ARGUMENTS = ("bad_arguments", "a tool call's arguments are not a JSON object, or not "
                     "the tool's parameters")
    TOOL_ERROR = ("tool_error", "a tool raised, or the command it ran failed or was stopped; "
                  "a program's own tool reported an error")
    MCP_CALL_FAILED = ("mcp_call_failed", "a program's call of an env tool failed before the "
                       "tool gateway answered it")
    INTERRUPTED = ("interrupted", "a program's own tool was still running, or left without a "
                   "result, when the program ended")
    EXIT_CODE = ("exit_code", "a command a program ran itself (Codex's) exited non-zero")
    FAILED = ("failed", "a tool a program ran itself (Codex's) ended with status failed")
    DECLINED = ("declined", "a tool call a program declined to run itself (Codex's "
                "approval policy)")
    # -- an OpenEnv server (the openenv env) ---------------------------------------------------
    ENV_UNREACHABLE = ("env_unreachable", "the OpenEnv server could not be reached, or the "
                       "connection was lost")
    ENV_TIMEOUT = ("env_timeout", "the OpenEnv server took longer than message_timeout_s to "
                   "answer")
    ENV_BAD_RESPONSE = ("env_bad_response", "the OpenEnv server answered something that is "
                        "not OpenEnv's protocol")
    ENV_SERVER_ERROR = ("env_server_error", "the OpenEnv server answered with an error (its "
                        "environment raised)")
    ENV_CAPACITY = ("env_capacity", "every session the OpenEnv server allows stayed taken for "
                    "capacity_wait_s")


class InterplayError(Exception):
    """A bad config, an unknown name, a bad input: something the user can fix. ``site``
    (``file:line``), when given, is where the thing to change is written. An episode it ends
    is a ``config_error`` (:attr:`error_type`; a subclass may name another)."""

    exit_code = 2
    #: The error type of an episode this ends (:func:`error_of`).
    error_type: ClassVar[ErrorType] = ErrorType.CONFIG_ERROR

    def __init__(self, message: str, *, site: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.site = site

    def __str__(self) -> str:
        return self.message


def package_root(obj: Any) -> Path | None:
    """The folder of the package that defines ``obj``'s class (``obj`` a class or an
    instance), or the file of a lone module; None when it cannot be found."""
    cls = obj if isinstance(obj, type) else type(obj)
    module = sys.modules.get(cls.__module__)
    file = getattr(module, "__file__", None)
    if not file:
        return None
    path = Path(file).resolve()
    return path.parent if cls.__module__.rpartition(".")[0] else path


def _inside(filename: str, root: Path) -> bool:
    try:
        resolved = Path(filename).resolve()
    except OSError:
        return False
    return resolved == root or root in resolved.parents


def failure_site(exc: BaseException, owner: Any = None) -> str | None:
    """Where ``exc`` was raised in the code that is to blame, as ``file:line``: the innermost
    frame of code that is neither the kernel's nor a library's (the standard library, an
    installed dependency), the package that defines ``owner`` (a step, a verifier, a user sim:
    its class or an instance) counting as code to blame wherever it is installed; else the
    innermost frame outside the kernel, else the innermost of all. A frame inside ``owner``'s
    package is shown from that package's parent (``pkg/module.py:LINE``). An InterplayError
    that names its own ``site`` is there. None without a traceback."""
    if isinstance(exc, InterplayError) and exc.site:
        return exc.site
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    if not frames:
        return None
    root = package_root(owner) if owner is not None else None

    def owners(frame: traceback.FrameSummary) -> bool:
        return root is not None and _inside(frame.filename, root)

    blamed = [f for f in frames if owners(f) or not os.path.abspath(f.filename).startswith(
        (_KERNEL, *_LIBRARIES))]
    if not blamed:
        blamed = [f for f in frames if not os.path.abspath(f.filename).startswith(_KERNEL)]
    frame = (blamed or frames)[-1]
    if owners(frame) and root is not None:
        shown = Path(frame.filename).resolve().relative_to(root.parent).as_posix()
        return f"{shown}:{frame.lineno}"
    return f"{frame.filename}:{frame.lineno}"


def describe_exception(exc: BaseException, owner: Any = None) -> str:
    """``Type: message (file:line)``, the line being where the code to blame went wrong
    (:func:`failure_site`: ``owner``'s package, else the innermost frame of neither the
    kernel nor a library)."""
    where = failure_site(exc, owner)
    return f"{type(exc).__name__}: {exc}" + (f" ({where})" if where else "")


def error_of(exc: BaseException, otherwise: ErrorType, *, owner: Any = None, by: str = "",
             located: bool = True) -> tuple[ErrorType, str]:
    """The error type and the one-line error a record keeps for ``exc``, raised by code whose
    bugs are ``otherwise`` (a step's: ``ENV_ERROR``; a harness's: ``HARNESS_ERROR``; the
    runner's: ``RUNNER_ERROR``). The one mapping from exceptions to :class:`ErrorType`: the
    episode, a seat's segment, the always_on run and the runner all use it.

    - An exception whose class names its type (an ``error_type`` class attribute that is an
      ErrorType) has that type: an :class:`InterplayError` ``config_error``, its error named
      by its class (``UnknownName: ...``); a ``UserSimError`` ``user_error`` and a
      ``SandboxError`` ``sandbox_error``, their error their message (which names what
      failed).
    - Any other is a bug of that code: ``otherwise``, its error ``Type: message (file:line)``
      at the line of the code to blame (:func:`describe_exception`, ``owner``'s package
      first), after ``by`` (``step 'reply'``) when given; ``located=False`` leaves the line
      out."""
    declared = getattr(type(exc), "error_type", None)
    if isinstance(declared, ErrorType):
        if declared is ErrorType.CONFIG_ERROR:
            return declared, f"{type(exc).__name__}: {exc}"
        return declared, str(exc)
    said = describe_exception(exc, owner) if located else f"{type(exc).__name__}: {exc}"
    return otherwise, f"{by}: {said}" if by else said
