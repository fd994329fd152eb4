"""Talking to an OpenEnv server: its action schema (``GET /schema``) and one episode's session
(``/ws``, through openenv-core's own ``GenericEnvClient``), with every way a server can fail
turned into an :class:`EnvFailure` of a named kind.

The kinds, which become the episode's ``error_type`` (:class:`interplay.ErrorType` members):

- ``env_unreachable``: no connection, or the connection was lost;
- ``env_timeout``: the server took longer than ``message_timeout_s`` to answer;
- ``env_bad_response``: the server answered something that is not OpenEnv's protocol;
- ``env_server_error``: the server answered with an error (the environment raised);
- ``env_capacity``: every session the server allows stayed taken for ``capacity_wait_s``.

An action the server refuses as invalid (``VALIDATION_ERROR``: nothing was stepped) is an
:class:`ActionRefused`, for the agent to correct, not a failure.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import time
from typing import TYPE_CHECKING, Any

import httpx
from websockets.exceptions import ConnectionClosed

from interplay import ErrorType, get_logger
from interplay_openenv.schema import ActionSchema

if TYPE_CHECKING:
    from openenv.core.client_types import StepResult

log = get_logger("interplay.openenv")

#: The codes an OpenEnv server puts in its error messages (openenv.core WSErrorCode).
CAPACITY_REACHED = "CAPACITY_REACHED"
VALIDATION_ERROR = "VALIDATION_ERROR"


class EnvFailure(Exception):
    """The server failed this episode; ``error_type`` names how."""

    def __init__(self, error_type: ErrorType, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


class ActionRefused(Exception):
    """The server refused an action as invalid; nothing was stepped."""


class _Refusal(Exception):
    def __init__(self, code: str, message: str, errors: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.errors = errors


@functools.cache
def client_class() -> type:
    """openenv-core's generic client, keeping the server's error code and details (the
    library's own folds them into one RuntimeError text) and checking each answer's shape.

    Made on first use: importing openenv.core imports gradio, seconds that listing plugins or
    running another env must not pay."""
    from openenv.core.client_types import StepResult
    from openenv.core.generic_client import GenericEnvClient

    class Client(GenericEnvClient):
        async def _send_and_receive(self, message: dict[str, Any]) -> dict[str, Any]:
            try:
                await self._send(message)
            except ConnectionClosed:
                # A server at capacity says so, then closes: its message may still be
                # waiting (receiving raises ConnectionClosed when none is).
                pass
            response = await self._receive()
            if not isinstance(response, dict):
                raise EnvFailure(ErrorType.ENV_BAD_RESPONSE,
                                 f"the server answered {type(response).__name__}, not a message")
            if response.get("type") == "error":
                data = response.get("data")
                data = data if isinstance(data, dict) else {}
                raise _Refusal(str(data.get("code") or "UNKNOWN"),
                               str(data.get("message") or "no message"), data.get("errors"))
            return response

        def _parse_result(self, payload: dict[str, Any]) -> StepResult[dict[str, Any]]:
            return StepResult(observation=_observation(payload), reward=_reward(payload),
                              done=_done(payload))

    return Client


def _observation(payload: Any) -> dict[str, Any]:
    if not isinstance(payload, dict) or not isinstance(payload.get("observation"), dict):
        raise EnvFailure(ErrorType.ENV_BAD_RESPONSE,
                         "the server's answer holds no observation object")
    return payload["observation"]


def _reward(payload: dict[str, Any]) -> float | None:
    reward = payload.get("reward")
    if reward is not None and (isinstance(reward, bool) or not isinstance(reward, int | float)
                               or not math.isfinite(reward)):
        raise EnvFailure(ErrorType.ENV_BAD_RESPONSE, f"the server's reward is not a finite number "
                         f"({json.dumps(reward)[:40]})")
    return reward


def _done(payload: dict[str, Any]) -> bool:
    done = payload.get("done", False)
    if not isinstance(done, bool):
        raise EnvFailure(ErrorType.ENV_BAD_RESPONSE, f"the server's done is not true or false "
                         f"({json.dumps(done)[:40]})")
    return done


def _failure(exc: BaseException, doing: str) -> EnvFailure:
    if isinstance(exc, EnvFailure):
        return exc
    if isinstance(exc, TimeoutError):
        return EnvFailure(ErrorType.ENV_TIMEOUT, f"no answer to {doing} in time")
    if isinstance(exc, ConnectionClosed):
        return EnvFailure(ErrorType.ENV_UNREACHABLE, f"the connection closed during {doing}")
    if isinstance(exc, ConnectionError | OSError):
        return EnvFailure(ErrorType.ENV_UNREACHABLE, f"{doing}: {exc}")
    if isinstance(exc, ValueError):  # json.JSONDecodeError and other unreadable answers
        return EnvFailure(ErrorType.ENV_BAD_RESPONSE, f"{doing}: the answer is not JSON ({exc})")
    if isinstance(exc, _Refusal):
        return EnvFailure(ErrorType.ENV_SERVER_ERROR,
                          f"{doing}: the server answered {exc.code}: {exc}")
    return EnvFailure(ErrorType.ENV_BAD_RESPONSE, f"{doing}: {type(exc).__name__}: {exc}")


async def fetch_schema(base_url: str, timeout_s: float) -> ActionSchema:
    """The action schema the server at ``base_url`` declares (``GET /schema``)."""
    try:
        async with httpx.AsyncClient(timeout=timeout_s, trust_env=False) as client:
            response = await client.get(f"{base_url}/schema")
    except httpx.TimeoutException:
        raise EnvFailure(ErrorType.ENV_TIMEOUT,
                         f"GET {base_url}/schema: no answer in time") from None
    except httpx.HTTPError as exc:
        raise EnvFailure(ErrorType.ENV_UNREACHABLE, f"GET {base_url}/schema: {exc}") from None
    if response.status_code != 200:
        raise EnvFailure(ErrorType.ENV_BAD_RESPONSE, f"GET {base_url}/schema answered HTTP "
                         f"{response.status_code}; is it an OpenEnv server?")
    try:
        return ActionSchema.from_json_schema(response.json()["action"])
    except (ValueError, KeyError, TypeError) as exc:
        raise EnvFailure(ErrorType.ENV_BAD_RESPONSE,
                         f"GET {base_url}/schema: not an OpenEnv schema ({exc})") from None


class Session:
    """One episode's environment session on the server (``async with``)."""

    def __init__(self, base_url: str, *, connect_timeout_s: float, message_timeout_s: float,
                 capacity_wait_s: float) -> None:
        self.base_url = base_url
        self._timeouts = {"connect_timeout_s": connect_timeout_s,
                          "message_timeout_s": message_timeout_s}
        self._capacity_wait_s = capacity_wait_s
        self._client: Any = None

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def reset(self, **kwargs: Any) -> StepResult[dict[str, Any]]:
        """Open the session and reset it, waiting for a free session while the server is at
        its capacity (up to ``capacity_wait_s``)."""
        deadline = time.monotonic() + self._capacity_wait_s
        pause = 0.05
        while True:
            client = client_class()(self.base_url, **self._timeouts)
            try:
                await client.connect()
                result = await client.reset(**kwargs)
            except _Refusal as exc:
                await client.close()
                if exc.code != CAPACITY_REACHED:
                    raise _failure(exc, "reset") from None
            except BaseException as exc:
                await client.close()
                if not isinstance(exc, Exception):
                    raise
                raise _failure(exc, "reset") from None
            else:
                self._client = client
                return result
            if time.monotonic() + pause > deadline:
                raise EnvFailure(ErrorType.ENV_CAPACITY, f"every session of {self.base_url} stayed "
                                 f"taken for {self._capacity_wait_s:g} s; run fewer episodes at "
                                 f"once (-c) or raise the server's max_concurrent_envs")
            log.debug("openenv.capacity_wait", base_url=self.base_url, pause_s=pause)
            await asyncio.sleep(pause)
            pause = min(1.0, pause * 2)

    async def step(self, action: dict[str, Any]) -> StepResult[dict[str, Any]]:
        assert self._client is not None, "reset() first"
        try:
            return await self._client.step(action)
        except _Refusal as exc:
            if exc.code == VALIDATION_ERROR:
                raise ActionRefused(_validation_text(exc.errors) or str(exc)) from None
            raise _failure(exc, "step") from None
        except Exception as exc:
            raise _failure(exc, "step") from None


def _validation_text(errors: Any) -> str:
    """pydantic's errors, as the server sent them, in one line."""
    if not isinstance(errors, list):
        return ""
    parts = []
    for error in errors[:5]:
        if isinstance(error, dict):
            where = ".".join(str(p) for p in error.get("loc") or () if p != "body")
            parts.append(f"{where}: {error.get('msg')}" if where else str(error.get("msg")))
    return "; ".join(parts)
