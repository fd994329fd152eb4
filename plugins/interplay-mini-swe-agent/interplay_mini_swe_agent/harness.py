"""The ``mini-swe-agent`` harness: mini-swe-agent (SWE-agent's bash-only agent) as an agent,
its loop on this machine, its commands in the episode's sandbox.

mini-swe-agent is a loop (ask the model for one bash command, run it, show the model its
output, until the model submits) and an *environment* that runs the commands. The harness
runs mini-swe-agent's own ``mini`` command on this machine, as a process of its own for each
segment, talking to the interception server's Chat Completions route with the trace's secret
(so every model request is a recorded call on the trace), and gives it an environment of
interplay's (:mod:`~interplay_mini_swe_agent.environment`) that sends each command back to
the harness (:mod:`~interplay_mini_swe_agent.bridge`), which runs it in the episode's sandbox
through ``Sandbox.exec``. So no Python is needed in the image, nothing of mini-swe-agent is
brought in, the sandbox's network can stay ``none`` (only the loop calls the model, from
here), and the secret stays with the loop: its commands run in the container with the
image's environment and the harness's variables, never this process's. Without a sandbox the
commands run on this machine in the trace's own folder, as mini-swe-agent's
``LocalEnvironment`` runs them, without the secret in their environment.

mini-swe-agent keeps no session: every continuation is the default resume, mini-swe-agent
relaunched on the conversation so far (a labelled transcript as its task). Its trajectory is
the harness's own record (``trace.info.mini_swe_agent``, one per segment); its step and cost
limits end a segment as ``max_turns`` and ``max_cost``, its own time limit as a ``timeout``
naming ``harness_config.wall_time_limit_s``. Where it runs, its time limit
(``timeout_s``), what it leaves and the rest of a segment's course are the kernel's program
harness base (``interplay.ProgramHarness``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from interplay import (
    ErrorType,
    Heard,
    InterplayError,
    Launch,
    Message,
    ModelCall,
    ProgramHarness,
    ProgramState,
    Ran,
    Segment,
    SegmentContext,
    Task,
    ToolRun,
    Turn,
    get_logger,
)
from interplay.contracts import SandboxNeeds
from interplay_mini_swe_agent import command_line as cl
from interplay_mini_swe_agent import trajectory as tj
from interplay_mini_swe_agent.bridge import CommandBridge
from interplay_mini_swe_agent.command_line import MiniSweAgentConfig

log = get_logger("interplay_mini_swe_agent")

#: Where a trace's command bridge and its run's ending are kept between the harness's calls
#: of one segment (``ctx.state``).
_BRIDGE = "mini-swe-agent:bridge"
_ENDING = "mini-swe-agent:ending"
#: Characters of a submission kept in a segment's row (the trajectory holds it whole).
KEEP_SUBMISSION = 4096
#: The longest path a Unix socket may have (108 bytes with its end, on Linux).
_SOCKET_PATH = 100


class MiniSweAgentHarness(ProgramHarness):
    """mini-swe-agent, its loop here and its bash commands in the episode's sandbox.

    Its ``mini`` calls the interception server; each command runs through ``Sandbox.exec``;
    a continuation is the default resume (see the module docstring)."""

    name = "mini-swe-agent"
    Config: ClassVar[type] = MiniSweAgentConfig
    program = "mini"
    package = cl.PACKAGE
    install_hint = cl.INSTALL_HINT
    title = "mini-swe-agent"
    info_key = "mini_swe_agent"
    # It keeps no session of its own: the default resume relaunches it on the conversation,
    # which it takes as one text (a labelled transcript).
    accepts_messages = True
    own_session = False

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self._base: dict[str, Any] | None = None
        self._version_said = False

    # -- before the run --------------------------------------------------------------------

    def check(self) -> list[str]:
        """``mini`` installed, mini-swe-agent importable beside interplay (its environment
        class is loaded by ``mini``), and the config specs readable."""
        problems = super().check()
        if problems:
            return problems
        version = cl.installed_version()
        if version is None:
            return [f"harness 'mini-swe-agent': the package {cl.PACKAGE!r} is not installed "
                    f"in interplay's environment; {cl.INSTALL_HINT}"]
        if version != cl.MINI_SWE_AGENT_VERSION and not self._version_said:
            self._version_said = True
            log.warning("mini_swe_agent.version_differs", version=version,
                        package=f"{cl.PACKAGE}=={cl.MINI_SWE_AGENT_VERSION}")
        try:
            self.base_config()
        except InterplayError as exc:
            return [str(exc)]
        return []

    def base_config(self) -> dict[str, Any]:
        """The specs of ``harness_config.config`` merged (read once)."""
        if self._base is None:
            self._base = cl.merged(cl.read_specs(self.config.config))
        return self._base

    def sandbox_needs(self) -> SandboxNeeds:
        """Nothing brought in and nothing reached from inside: the loop runs here and calls
        the model from here; only its commands run in the sandbox."""
        return SandboxNeeds()

    # -- a segment --------------------------------------------------------------------------

    async def launch(self, task: Task, ctx: SegmentContext) -> Segment:
        """A run of mini-swe-agent on ``task`` (on a continuation, the default resume's task:
        the conversation so far)."""
        if ctx.tools:
            names = ", ".join(sorted(t.name for t in ctx.tools))
            raise InterplayError(f"harness 'mini-swe-agent' has its bash tool alone, and the "
                                 f"env gives the seat tools ({names}); give the seat a harness "
                                 f"that calls them (chat, claude-code, codex)")
        await asyncio.to_thread(self.base_config)  # a config that does not read: one line
        state = ctx.state.get(self.name)
        if not isinstance(state, ProgramState):
            # The loop runs on this machine even when the seat works in a sandbox: the
            # base's place for it is this machine's, folders of the trace's own.
            binary = await asyncio.to_thread(self.binary)
            state = ProgramState(place=self.host_place(binary))
            ctx.state[self.name] = state
        sandbox = await ctx.sandbox()
        bridge = None
        if sandbox is not None:
            bridge = CommandBridge(sandbox, _socket_path(state.place.root), shell=self.config.shell,
                                   output_bytes=self.config.command_output_bytes)
        ctx.state[_BRIDGE] = bridge
        ctx.state.pop(_ENDING, None)
        try:
            async with bridge or contextlib.nullcontext():
                segment = await super().launch(task, ctx)
        finally:
            ctx.state.pop(_BRIDGE, None)
            if bridge is not None and os.path.dirname(bridge.path) != state.place.root:
                await asyncio.to_thread(_remove_folder, os.path.dirname(bridge.path))
        return self._settled(segment, ctx.state.pop(_ENDING, None), bridge)

    def command(self, turn: Turn) -> Launch:
        cfg: MiniSweAgentConfig = self.config
        place, routes, ctx = turn.place, turn.routes, turn.ctx
        bridge: CommandBridge | None = ctx.state.get(_BRIDGE)
        n = turn.state.segments
        config_file = os.path.join(place.root, f"segment-{n}.yaml")
        trajectory = os.path.join(place.root, f"trajectory-{n}.json")
        turn.scratch["trajectory"] = trajectory
        config = cl.segment_config(
            cfg, self.base_config(), task=turn.prompt, system=turn.state.system,
            model=ctx.client.endpoint.model, base_url=routes.base_url,
            socket=None if bridge is None else bridge.path,
            cwd=place.workdir if bridge is None else bridge.sandbox.workdir,
            request_timeout_s=cfg.timeout_s)
        argv = cl.argv(place.binary, cfg, config_file=config_file, trajectory=trajectory)
        env = cl.environment(turn.base_env(), home=place.home, secret=routes.secret,
                             max_retries=cfg.max_retries)
        return Launch(argv=argv, env=env, files={config_file: cl.dump(config)})

    def read(self, ran: Ran, turn: Turn, messages: Sequence[Message]) -> Heard:
        bridge: CommandBridge | None = turn.ctx.state.get(_BRIDGE)
        path = turn.scratch.get("trajectory")
        trajectory = tj.load(Path(path)) if path else None
        ending = tj.ending(trajectory)
        turn.ctx.state[_ENDING] = ending
        heard = Heard(detail={
            "exit_status": None if ending is None else ending.status,
            "submission": None if ending is None else ending.submission[:KEEP_SUBMISSION],
            "cost": None if ending is None else ending.cost,
            "commands_in": "host" if bridge is None else "sandbox",
            "commands": len(bridge.runs) if bridge is not None else None,
            "trajectory": None if trajectory is None else tj.bounded(trajectory)})
        heard.tool_runs = self._tool_runs(trajectory, bridge, ending)
        if heard.detail["commands"] is None:
            heard.detail["commands"] = len(heard.tool_runs)
        if ending is None or ran.timed_out or ran.cancelled:
            heard.reason = None if bridge is None or bridge.failure is None else \
                f"the sandbox could not run its command: {bridge.failure}"
            return heard
        # What the segment added ends where the run ended: after a limit, on a command's
        # result; the model's last answer is then not the segment's last message.
        heard.messages = list(messages)
        if ending.status == tj.LIMITS:
            steps = self.config.step_limit or (self.base_config().get("agent") or {}).get(
                "step_limit") or 0
            heard.stop_condition = "max_turns" if steps and ending.calls >= steps \
                else "max_cost"
        elif ending.status == tj.TIME:
            heard.stop_condition = "timeout"
        elif ending.status == tj.FORMAT:
            heard.failed = True
            heard.reason = ("its model answered without one command several times in a row "
                            "(mini-swe-agent's agent.max_consecutive_format_errors)")
        elif ending.status != tj.SUBMITTED:
            heard.failed = True
            heard.messages = None
            if bridge is not None and bridge.failure is not None:
                heard.reason = f"the sandbox could not run its command: {bridge.failure}"
            else:
                text = ending.exception.strip().splitlines()
                heard.reason = f"{ending.status}: {text[-1][:300] if text else 'no message'}"
        return heard

    def _tool_runs(self, trajectory: dict[str, Any] | None, bridge: CommandBridge | None,
                   ending: tj.Ending | None) -> list[ToolRun]:
        """Each bash call the model made that ran (its result in the trajectory, or run by
        the sandbox's bridge: the submitting one has no result the model read)."""
        ran = {} if bridge is None else {r.call_id: r for r in bridge.runs if r.call_id}
        asked = tj.commands(trajectory)
        out = []
        for i, command in enumerate(asked):
            run = ran.get(command.call_id)
            submitted = ending is not None and ending.status == tj.SUBMITTED and \
                i == len(asked) - 1
            if run is None and command.result is None and not submitted:
                continue  # never run: the run ended first
            if run is not None:
                timed_out, duration = run.timed_out, run.duration_s
                stopped = run.exit_code is None and not run.timed_out
            else:
                timed_out, duration, stopped = command.timed_out, command.duration_s, False
            out.append(ToolRun(call_id=command.call_id, name="bash", duration_s=duration,
                               error_type=ErrorType.TIMEOUT if timed_out else
                               ErrorType.TOOL_ERROR if stopped else None))
        return out

    def keep(self, ctx: SegmentContext, turn: Turn, ran: Ran, heard: Heard,
             calls: Sequence[ModelCall]) -> None:
        """The base's row per segment, a continuation named ``relaunch`` (the default resume
        starts mini-swe-agent afresh on the conversation so far)."""
        super().keep(ctx, turn, ran, heard, calls)
        if turn.state.segments > 1:
            ctx.trace.info[self.info_key]["segments"][-1]["command"] = "relaunch"

    def record_extra(self, state: ProgramState) -> dict[str, Any]:
        return {"version": cl.installed_version()}

    def _settled(self, segment: Segment, ending: tj.Ending | None,
                 bridge: CommandBridge | None) -> Segment:
        """The segment's ending in interplay's words where mini-swe-agent's own say more
        than the base can: its own time limit, the sandbox gone, its format errors."""
        if ending is not None and ending.status == tj.TIME and \
                segment.stop_condition == "timeout" and segment.error_type is None:
            segment.error_type = ErrorType.TIMEOUT
            segment.error = (f"mini-swe-agent reached its own time limit of "
                             f"{self.config.wall_time_limit_s or '?'} s "
                             f"(harness_config.wall_time_limit_s)")
        elif bridge is not None and bridge.failure is not None and \
                segment.error_type == self.failed_type:
            segment.error_type = ErrorType.SANDBOX_ERROR
            segment.error = f"mini-swe-agent's command could not run: {bridge.failure}"
        elif ending is not None and ending.status == tj.FORMAT and \
                segment.error_type == self.failed_type:
            segment.error = ("mini-swe-agent stopped: its model answered without one command "
                             "several times in a row (agent.max_consecutive_format_errors)")
        return segment

    async def close(self, ctx: SegmentContext) -> None:
        ctx.state.pop(_BRIDGE, None)
        ctx.state.pop(_ENDING, None)
        await super().close(ctx)


def _socket_path(root: str) -> str:
    """The bridge's socket: in the trace's own folder, or in a short private folder of its
    own when that path is too long for a Unix socket."""
    path = os.path.join(root, "commands.sock")
    if len(path.encode()) <= _SOCKET_PATH:
        return path
    return os.path.join(tempfile.mkdtemp(prefix="interplay-msa-"), "commands.sock")


def _remove_folder(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)
