"""mini-swe-agent's environment under interplay: where the agent's bash commands run.

mini-swe-agent's loop asks an *environment* to run each command the model gives it
(``execute(action)``); its own run them on this machine (``LocalEnvironment``) or through
``docker exec`` (``DockerEnvironment``). This one is named in the config the harness writes
(``environment.environment_class``) and is loaded by mini-swe-agent's own process, never by
interplay's: it imports mini-swe-agent, pydantic and the standard library only.

With ``socket`` set (the seat works in the episode's sandbox), each command is sent over that
Unix socket to the harness in interplay's process, which runs it in the sandbox
(``Sandbox.exec``: the task's workspace, the sandbox's limits and network) and answers with
how it ended; the command's environment is ``env`` over the image's, and nothing of this
process's (its key to the model boundary stays here). Without ``socket`` it runs on this
machine as mini-swe-agent's ``LocalEnvironment`` runs it, with the variables named in
``keep_out`` taken out of its environment. Either way what a command returns is the shape
mini-swe-agent's own environments return (``output``, ``returncode``, ``exception_info``),
and ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` submits as it does there.

This module owns running one command for mini-swe-agent; it must not talk to the model or
know interplay's records.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import socket
import subprocess
from typing import Any

from minisweagent.exceptions import Submitted
from minisweagent.utils.serialize import recursive_merge
from pydantic import BaseModel

#: The line a command prints first to submit (mini-swe-agent's own word for it).
SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


class SandboxGone(RuntimeError):
    """The sandbox cannot run commands any more (it was removed, its daemon went away):
    the agent cannot go on, and mini-swe-agent's run ends on it."""


class SandboxEnvironmentConfig(BaseModel):
    #: The harness's Unix socket that runs commands in the episode's sandbox; empty: run
    #: them on this machine.
    socket: str = ""
    #: Where commands run: the task's workspace inside the sandbox, the trace's workdir here.
    cwd: str = ""
    #: Variables set for every command (over the image's inside a sandbox).
    env: dict[str, str] = {}
    #: Seconds a command may run; then it and everything it started are stopped.
    timeout: int = 60
    #: On this machine: variables of this process never passed to a command.
    keep_out: list[str] = []
    #: The env's instructions for the agent, for the system template (``{{instructions}}``).
    instructions: str = ""


class SandboxEnvironment:
    """Runs mini-swe-agent's commands in the episode's sandbox (or here); see the module."""

    def __init__(self, *, config_class: type = SandboxEnvironmentConfig, **kwargs: Any):
        self.config = config_class(**kwargs)

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None
                ) -> dict[str, Any]:
        command = action.get("command", "")
        limit = timeout or self.config.timeout
        if self.config.socket:
            output = self._send({"command": command, "cwd": cwd or self.config.cwd,
                                 "env": self.config.env, "timeout": limit,
                                 "call_id": action.get("tool_call_id")})
        else:
            output = self._here(command, cwd or self.config.cwd or os.getcwd(), limit)
        self._check_finished(output)
        return output

    def _send(self, request: dict[str, Any]) -> dict[str, Any]:
        """One command over the harness's socket, and its answer."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.connect(self.config.socket)
                conn.sendall(json.dumps(request).encode() + b"\n")
                conn.shutdown(socket.SHUT_WR)
                chunks = []
                while chunk := conn.recv(1 << 16):
                    chunks.append(chunk)
        except OSError as exc:
            raise SandboxGone(f"the sandbox's command channel is closed ({exc.strerror or exc})"
                              ) from None
        answer = json.loads(b"".join(chunks) or b"{}")
        if "error" in answer or "output" not in answer:
            raise SandboxGone(answer.get("error") or "the sandbox gave no answer")
        return answer

    def _here(self, command: str, cwd: str, timeout: int) -> dict[str, Any]:
        """One command on this machine, as mini-swe-agent's LocalEnvironment runs it (its
        whole process group killed at its time limit), without the ``keep_out`` variables."""
        env = {k: v for k, v in os.environ.items() if k not in self.config.keep_out}
        process = subprocess.Popen(command, shell=True, text=True, cwd=cwd,
                                   env=env | self.config.env, encoding="utf-8",
                                   errors="replace", stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            stdout, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, _ = process.communicate()
            return {"output": stdout or "", "returncode": -1,
                    "exception_info": f"An error occurred while executing the command: {exc}",
                    "extra": {"exception_type": "TimeoutExpired", "exception": str(exc)}}
        return {"output": stdout, "returncode": process.returncode, "exception_info": ""}

    def _check_finished(self, output: dict) -> None:
        """Submitted when the command's output starts with the submit line (and it exited
        0): the rest of its output is the submission, as mini-swe-agent's own environments
        read it."""
        lines = output.get("output", "").lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT and output.get("returncode") == 0:
            submission = "".join(lines[1:])
            raise Submitted({"role": "exit", "content": submission,
                             "extra": {"exit_status": "Submitted", "submission": submission}})

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        # The machine's names (a container shares this kernel), never this process's
        # environment: it holds the key to the model boundary.
        return recursive_merge(self.config.model_dump(), platform.uname()._asdict(), kwargs)

    def serialize(self) -> dict:
        return {"info": {"config": {
            "environment": self.config.model_dump(mode="json"),
            "environment_type": f"{self.__class__.__module__}.{self.__class__.__name__}"}}}
