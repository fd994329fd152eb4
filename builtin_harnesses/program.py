"""Program harnesses: an agent program that runs as a process of its own (codex, Claude Code,
mini-swe-agent, any CLI) for one segment, on this machine or inside the episode's sandbox.

One base, :class:`ProgramHarness`, does what every such harness does the same way: find the
program (and say once when it is not the version the harness is tested with), keep one trace's
state between segments (where it runs, its folders, the session it keeps of its own), start it
for a segment pointed at the trace's route through the interception server (its model) and
the tool gateway (the env's tools), run it until it exits or its time limit passes and end
everything it started, read back the messages the segment added from the model calls the
trace recorded, keep what it did on the trace (``trace.info[<info_key>]``), and say how the
segment ended (a timeout, tools it could not reach, a failed model call, a program that
failed, an answer). A program harness holds only what is its own: its command line and
environment (:meth:`ProgramHarness.command`), what its output says (:meth:`ProgramHarness.read`)
and whether it keeps a session to resume (:attr:`ProgramHarness.own_session`).

Where it runs: when the seat works in the episode's sandbox (``ctx.sandbox()``), the program
runs **inside** it, brought in read-only from this machine's install (:meth:`brought`: a
static or glibc binary mounted into the container), in the task's workspace, its config home
in a folder of the trace's own inside, its model and tools reached through
``Sandbox.reach`` (the ``model`` network), its own tools on. Otherwise it runs here, in a
folder of the trace's own (:class:`interplay.processes.ProgramDirs`), removed when the trace
closes.

This module owns a segment's course for every program; it must not know any program's flags.
"""

from __future__ import annotations

import asyncio
import errno
import os
import posixpath
import secrets
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs

from interplay.contracts.contexts import SegmentContext
from interplay.contracts.harness import Harness, Segment, text_prompt
from interplay.contracts.sandbox import BoundedOutput, Mount, Sandbox, SandboxError, SandboxNeeds
from interplay.errors import ErrorType, InterplayError
from interplay.log import get_logger
from interplay.model.retries import Failure, RetryPolicy
from interplay.model.wire import assistant_message, request_messages
from interplay.processes import (
    PROGRAM_VAR,
    ProgramDirs,
    find_program,
    not_runnable,
    other_version,
    refusal_reason,
    run_program,
)
from interplay.values.records import Message, ModelCall, Task, ToolRun

log = get_logger("interplay.program")

#: Bytes of a program's stdout kept per segment (its events: a command's whole output can sit
#: in one of them).
KEEP_STDOUT = 64 * 1024 * 1024
#: Bytes of its stderr kept on the trace per segment.
KEEP_STDERR = 16 * 1024
#: Where the programs a harness brings into a sandbox are mounted, one folder per harness.
BROUGHT = "/opt/interplay"
#: Where a trace's own folder is made inside a sandbox (its config home, its files).
STATE_INSIDE = "/var/lib/interplay"


@attrs.define
class ProgramConfig:
    """Settings every program harness takes (a seat's ``harness_config``)."""

    #: The program's executable; null looks next to the running Python (the venv's bin) and
    #: then on PATH.
    binary: str | None = None
    #: Wall-time limit of one segment; past it the program and everything it started are
    #: killed.
    timeout_s: float = attrs.field(default=600.0, validator=attrs.validators.gt(0))
    #: More arguments for the program, on every segment (resumes too).
    extra_args: list[str] = attrs.Factory(list)
    #: On this machine (no sandbox): the folder it works in (created if missing, kept); null
    #: gives every trace a fresh temp folder, removed when the trace closes. In a sandbox it
    #: works in the task's workspace.
    workdir: str | None = None
    #: On this machine (no sandbox): where the per-trace folders (its config home, and the
    #: workdir unless configured) are made; null: the system temp folder.
    state_dir: str | None = None
    #: The program's own retries of a failed request to the interception server (which
    #: already retries the real endpoint with the seat's policy).
    max_retries: int = attrs.field(default=0, validator=attrs.validators.ge(0))


@attrs.define
class Place:
    """Where one trace's program runs: this machine (``sandbox`` None, its folders ``dirs``)
    or the episode's sandbox; its own folder (``root``, for the files it is started with),
    its config home and its working folder, as paths where it runs."""

    sandbox: Sandbox | None
    root: str
    home: str
    workdir: str
    dirs: ProgramDirs | None = None
    #: The program's executable as it runs there.
    binary: str = ""

    @property
    def inside(self) -> bool:
        return self.sandbox is not None

    async def write(self, path: str, text: str) -> str:
        """``text`` in the file ``path`` there, readable by its user alone; the path."""
        if self.sandbox is not None:
            await self.sandbox.write_file(path, text, mode=0o600)
        else:
            await asyncio.to_thread(_write_private, Path(path), text)
        return path


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


@attrs.define
class ProgramState:
    """What a program harness keeps for one trace between segments."""

    place: Place
    #: The program's own session (a thread id, a session id), once a segment has one.
    session: str | None = None
    #: Whether a segment has started the session (a later one resumes it).
    started: bool = False
    #: The system prompt (instructions) the session was started with.
    system: str | None = None
    segments: int = 0


@attrs.frozen
class Routes:
    """The trace's ways out, as the program reaches them where it runs: the interception
    server (``base_url``, with ``secret`` as its key) and, when the seat has tools, the tool
    gateway (``tools_url``, ``tools_token``), whose slowest tool may take ``tool_timeout_s``."""

    base_url: str
    secret: str
    tools_url: str | None
    tools_token: str | None
    tool_timeout_s: float


@attrs.frozen
class Turn:
    """One segment as a program harness's :meth:`~ProgramHarness.command` is asked to start
    it: the context, the trace's state and place, the prompt (the whole task on a launch, the
    new user message on a resume) and the routes."""

    ctx: SegmentContext
    state: ProgramState
    prompt: str
    resume: bool
    routes: Routes
    #: How many model calls the trace held before the segment (its own are after them).
    first_call: int = 0
    #: The segment's tag (:data:`interplay.processes.PROGRAM_VAR`, value): every process the
    #: program starts that carries it is ended with the segment. On this machine a program
    #: that builds its commands' environment itself is given it to pass on; inside a sandbox
    #: the sandbox tags the command (None here).
    tag: tuple[str, str] | None = None
    #: What the harness keeps of this segment while it runs (its events as they are read).
    scratch: dict[str, Any] = attrs.Factory(dict)

    @property
    def place(self) -> Place:
        return self.state.place

    def calls(self) -> list[ModelCall]:
        """The model calls the trace recorded during this segment."""
        return self.ctx.trace.model_calls[self.first_call:]

    def base_env(self) -> dict[str, str]:
        """The environment the program starts from: this process's on this machine; inside a
        sandbox, none of this machine's (the image's own, and what the harness adds)."""
        return {} if self.place.inside else dict(os.environ)


@attrs.define
class Launch:
    """How a program starts for one segment: its argv, environment and stdin, and files to
    write (path where it runs -> text, readable by it alone) before it starts."""

    argv: list[str]
    env: dict[str, str]
    stdin: bytes = b""
    files: dict[str, str] = attrs.Factory(dict)


@attrs.define
class Ran:
    """What one run of the program did: how it ended and what it wrote (stdout kept up to
    :data:`KEEP_STDOUT`, stderr's last :data:`KEEP_STDERR` bytes)."""

    exit_code: int | None = None
    timed_out: bool = False
    #: The segment was cancelled from outside (the seat's timeout) and the program killed.
    cancelled: bool = False
    stdout: bytes = b""
    stderr: bytes = b""
    #: Processes it started that were still alive after it exited, ended then.
    strays: int = 0
    wall_s: float = 0.0


@attrs.define
class Heard:
    """What a program harness read in one run's output (:meth:`ProgramHarness.read`)."""

    #: The session the program reported (a thread id, a session id), if any.
    session: str | None = None
    #: Whether it reports a failure of its own although it exited 0.
    failed: bool = False
    #: Why it failed, in one line, when its output says (else its stderr's last line is used).
    reason: str | None = None
    #: Whether it reached the env's tools (the gateway): None when its output does not say.
    tools_reached: bool | None = None
    #: Why it did not, in one line.
    tools_problem: str | None = None
    #: A stop condition of its own with no error (``max_turns``), or None.
    stop_condition: str | None = None
    #: The tools it ran itself, and env tools it called that the gateway never answered.
    tool_runs: list[ToolRun] = attrs.Factory(list)
    #: What the segment's record keeps of it besides the kernel's fields.
    detail: dict[str, Any] = attrs.Factory(dict)
    #: The messages the segment added when the program's own output is its reply (the
    #: ``command`` harness's stdout); None: read from the model calls the trace recorded.
    messages: list[Message] | None = None


class ProgramHarness(Harness):
    """Base of the harnesses that run an agent program as a process (see the module
    docstring). A subclass sets its class attributes and writes :meth:`command` and
    :meth:`read`; one whose program keeps a session of its own sets :attr:`own_session`."""

    Config: ClassVar[type] = ProgramConfig
    accepts_messages = False
    #: The program's executable's name (next to the running Python, or on PATH).
    program: ClassVar[str] = ""
    #: The version it is tested with; another is said once per executable.
    pinned: ClassVar[str | None] = None
    #: The package to install for it, named when another version is found.
    package: ClassVar[str] = ""
    #: How to install it, or set ``harness_config.binary``.
    install_hint: ClassVar[str] = ""
    #: Its name in messages ("Claude Code").
    title: ClassVar[str] = ""
    #: The key of ``trace.info`` its segments are recorded under, and that record's key of
    #: the session.
    info_key: ClassVar[str] = ""
    session_key: ClassVar[str] = "session_id"
    #: How a segment's record names a first segment and a continuation.
    launch_word: ClassVar[str] = "launch"
    #: Whether the program keeps a session of its own that a continuation resumes natively
    #: (codex exec resume, claude --resume); False: the default resume, a relaunch on the
    #: whole conversation.
    own_session: ClassVar[bool] = False

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self._binary: str | None = None

    @property
    def failed_type(self) -> str:
        """The error type of a segment whose program failed: ``<info_key>_failed``
        (``codex_failed``, ...; those of interplay's own program harnesses are ErrorType
        members)."""
        return f"{self.info_key}_failed"

    # -- the program -------------------------------------------------------------------------

    def binary(self) -> str:
        """The program's executable here (resolved once); InterplayError saying how to install
        it. Another version than the pinned one is said once per executable."""
        if self._binary is None:
            self._binary = find_program(self.program, self.config.binary, harness=self.name,
                                        hint=self.install_hint)
            if self.pinned is not None:
                other = other_version(self._binary, self.pinned)
                if other is not None:
                    # The version it is tested with, as the package to install.
                    log.warning(f"{self.info_key}.version_differs", version=other,
                                package=f"{self.package}@{self.pinned}",
                                binary_path=self._binary)
        return self._binary

    def check(self) -> list[str]:
        """The program installed where the run starts (saying how to install it if not)."""
        try:
            self.binary()
        except InterplayError as exc:
            return [str(exc)]
        return []

    def brought(self, binary: str) -> tuple[list[Mount], str]:
        """What of this machine's install of the program a sandbox needs, mounted read-only,
        and the program's path inside: by default the executable itself (its real file)."""
        real = os.path.realpath(binary)
        target = posixpath.join(self.mount_point(), os.path.basename(real))
        return [Mount(source=real, target=target)], target

    def mount_point(self) -> str:
        """Where in a sandbox this harness's program is brought (``/opt/interplay/NAME``)."""
        return posixpath.join(BROUGHT, self.name)

    def sandbox_needs(self) -> SandboxNeeds:
        """The program brought in, and the model boundary reached from inside."""
        mounts, _ = self.brought(self.binary())
        return SandboxNeeds(mounts=tuple(mounts), reach=True)

    # -- what a subclass writes ----------------------------------------------------------------

    def command(self, turn: Turn) -> Launch:
        """The program's command line, environment, stdin and files for one segment."""
        raise NotImplementedError(f"harness {self.name!r} does not implement command()")

    def listen(self, turn: Turn) -> Callable[[bytes], None] | None:
        """What hears each line of the program's stdout as it is written (events with the
        times they came), or None: read it all at the end (:meth:`read`)."""
        return None

    def read(self, ran: Ran, turn: Turn, messages: Sequence[Message]) -> Heard:
        """What one run's output says (its session, failures, the tools it ran itself);
        ``messages`` are those the segment added, as the model saw them (to pair a tool the
        program ran with the model's call of it)."""
        return Heard()

    def messages(self, calls: Sequence[ModelCall], prompt: str) -> list[Message]:
        """The messages one segment added, as the model saw them (:func:`segment_messages`)."""
        return segment_messages(calls, prompt)

    def record_extra(self, state: ProgramState) -> dict[str, Any]:
        """What ``trace.info[info_key]`` keeps beside its segments (the session's id)."""
        return {self.session_key: state.session}

    # -- the contract ----------------------------------------------------------------------------

    async def launch(self, task: Task, ctx: SegmentContext) -> Segment:
        """A new session of the program on ``task``."""
        state = await self._state(ctx)
        system, prompt = text_prompt(task)
        if not prompt.strip():
            raise InterplayError(f"harness {self.name!r} needs a task with a non-empty "
                                 f"prompt (or a chat opened by a user message)")
        state.system, state.session, state.started = system, None, False
        return await self._segment(ctx, state, prompt, resume=False)

    async def resume(self, messages: Sequence[Message], ctx: SegmentContext) -> Segment:
        """The program's own session continued with the new user message, when it keeps one
        and a segment started it; otherwise the whole conversation launched afresh."""
        state = ctx.state.get(self.name)
        if not self.own_session or not isinstance(state, ProgramState) or not state.started:
            return await super().resume(messages, ctx)
        last = messages[-1] if messages else None
        if last is None or last.role != "user" or not last.text.strip():
            raise InterplayError(f"harness {self.name!r} continues a chat from a non-empty "
                                 f"user message; the conversation must end with one")
        return await self._segment(ctx, state, last.text, resume=True)

    def can_resume(self) -> bool:
        """Natively when the program keeps a session; else by the default relaunch, which
        needs a program that reads a message list."""
        return self.own_session or self.accepts_messages

    async def close(self, ctx: SegmentContext) -> None:
        """Remove the trace's own folders on this machine (a sandbox goes with its episode)."""
        state = ctx.state.pop(self.name, None)
        if isinstance(state, ProgramState):
            if state.place.dirs is not None:
                await state.place.dirs.remove()
            log.debug("program.closed", harness=self.name, agent=ctx.trace.agent,
                      segments=state.segments)

    # -- one segment ---------------------------------------------------------------------------

    async def _state(self, ctx: SegmentContext) -> ProgramState:
        found = ctx.state.get(self.name)
        if isinstance(found, ProgramState):
            return found
        sandbox = await ctx.sandbox()
        # The first time, the program's --version runs (a process's start): not on the loop.
        binary = self._binary or await asyncio.to_thread(self.binary)
        if sandbox is None:
            place = self.host_place(binary)
        else:
            mounts, inside = self.brought(binary)
            for mount in mounts:  # where the sandbox has it (a local one: where it is here)
                if inside == mount.target or inside.startswith(mount.target.rstrip("/") + "/"):
                    inside = sandbox.inside(mount) + inside[len(mount.target):]
                    break
            if sandbox.isolated:
                # Outside the workspace (what changed there is the agent's work) and outside
                # /tmp (codex will not put its helpers in a temp folder); it goes with the
                # sandbox.
                root = f"{STATE_INSIDE}/{self.name}-{secrets.token_hex(4)}"
                place = Place(sandbox=sandbox, root=root, home=f"{root}/home",
                              workdir=sandbox.workdir, binary=inside)
                await sandbox.write_file(f"{root}/home/.interplay", "", mode=0o600)
                if sandbox.user:  # its program runs as that user: its folder is that user's
                    given = await sandbox.exec(["chown", "-R", sandbox.user, root], user="0")
                    if not given.ok:
                        raise SandboxError(f"could not give {root} to the user "
                                           f"{sandbox.user!r} the agent runs as: "
                                           f"{given.output()[-300:].strip()}")
            else:  # its commands run on this machine: folders of the trace's own here
                dirs = ProgramDirs.make(self.name,
                                        state_dir=getattr(self.config, "state_dir", None),
                                        workdir=sandbox.workdir)
                place = Place(sandbox=sandbox, root=str(dirs.root), home=str(dirs.home),
                              workdir=sandbox.workdir, dirs=dirs, binary=inside)
        state = ProgramState(place=place)
        ctx.state[self.name] = state
        return state

    def host_place(self, binary: str) -> Place:
        """Where the program runs on this machine: folders of the trace's own
        (:class:`~interplay.processes.ProgramDirs`, under ``state_dir``; the configured
        ``workdir``, else one of its own), removed when the trace closes."""
        dirs = ProgramDirs.make(self.name, state_dir=self.config.state_dir,
                                workdir=self.config.workdir)
        return Place(sandbox=None, root=str(dirs.root), home=str(dirs.home),
                     workdir=str(dirs.workdir), dirs=dirs, binary=binary)

    async def _routes(self, ctx: SegmentContext, place: Place) -> Routes:
        route = await ctx.route()
        tools = await ctx.tool_route()
        base_url, tools_url = route.base_url, None if tools is None else tools.url
        if place.sandbox is not None:
            base_url = await place.sandbox.reach(base_url)
            if tools_url is not None:
                tools_url = await place.sandbox.reach(tools_url)
        return Routes(base_url=base_url, secret=route.secret, tools_url=tools_url,
                      tools_token=None if tools is None else tools.token,
                      tool_timeout_s=max((t.timeout_s for t in ctx.tools), default=30.0))

    async def _segment(self, ctx: SegmentContext, state: ProgramState, prompt: str, *,
                       resume: bool) -> Segment:
        tag = None if state.place.inside else (PROGRAM_VAR, secrets.token_hex(16))
        first_call = len(ctx.trace.model_calls)
        turn = Turn(ctx=ctx, state=state, prompt=prompt, resume=resume,
                    routes=await self._routes(ctx, state.place), first_call=first_call,
                    tag=tag)
        state.segments += 1
        was_started, state.started = state.started, True  # the next turn resumes it
        ran = Ran()
        t0 = time.monotonic()
        try:
            await self._run(turn, ran, tag)
        except asyncio.CancelledError:
            # The seat's own timeout (or the run's end): the program is dead; keep what it did.
            ran.cancelled = True
            messages = self.messages(turn.calls(), prompt)
            self._finish(ctx, turn, ran, self.read(ran, turn, messages), messages, t0)
            raise
        except Failure as failure:  # the system would not start the program
            state.started = was_started
            heard = Heard(failed=True, reason=failure.message,
                          detail={"start_error": failure.message})
            messages = self.messages(turn.calls(), prompt)
            self._finish(ctx, turn, ran, heard, messages, t0)
            return Segment(messages, stop_condition="error", error_type=failure.error_type,
                           error=failure.message)
        messages = self.messages(turn.calls(), prompt)
        heard = self.read(ran, turn, messages)
        if heard.messages is not None:
            messages = heard.messages
        if heard.session is not None:
            state.session = heard.session
        self._finish(ctx, turn, ran, heard, messages, t0)
        return self._outcome(ctx, turn, ran, heard, messages)

    async def _run(self, turn: Turn, ran: Ran, tag: tuple[str, str] | None) -> None:
        hear = self.listen(turn)
        lines = None if hear is None else Lines(hear)
        try:
            await self._start(turn, ran, tag, None if lines is None else lines.feed)
        finally:
            if lines is not None:
                lines.close()

    async def _start(self, turn: Turn, ran: Ran, tag: tuple[str, str] | None,
                     on_stdout: Callable[[bytes], None] | None) -> None:
        place, timeout = turn.place, self.config.timeout_s
        if place.sandbox is not None:
            launch = self.command(turn)
            for path, text in launch.files.items():
                await place.write(path, text)
            result = await place.sandbox.exec(launch.argv, env=launch.env, stdin=launch.stdin,
                                              cwd=place.workdir, timeout_s=timeout,
                                              output_bytes=KEEP_STDOUT, on_stdout=on_stdout)
            ran.exit_code, ran.timed_out = result.exit_code, result.timed_out
            ran.stdout = result.stdout.encode()
            ran.stderr = result.stderr.encode()[-KEEP_STDERR:]
            if result.stopped is not None:  # the sandbox's wall time or disk limit
                ran.stderr += f"\n{result.stopped}\n".encode()
            return
        stdout = BoundedOutput(KEEP_STDOUT, on_stdout)

        async def attempt() -> Any:
            # Made in each attempt: making it may start the run's reaper (for the run's tag,
            # interplay.processes.owner_tag) and writes its files, which take descriptors too.
            argv0 = self.program
            try:
                launch = self.command(turn)
                argv0 = launch.argv[0]
                for path, text in launch.files.items():
                    await place.write(path, text)
                return await run_program(launch.argv, stdin=launch.stdin, timeout_s=timeout,
                                         cwd=place.workdir, env=launch.env,
                                         keep_stderr=KEEP_STDERR, on_stdout=stdout.add,
                                         tag=None if tag is None else tag[1])
            except OSError as exc:
                if isinstance(exc, FileNotFoundError) or not_runnable(exc) or \
                        exc.errno == errno.E2BIG:
                    raise self.start_error(argv0, exc) from None
                raise Failure(ErrorType.SPAWN_ERROR, f"the system could not start "
                              f"{self.title or self.name} ({refusal_reason(exc)})") from None

        program = await RetryPolicy(turn.ctx.client.endpoint).run(
            attempt, event=f"{self.info_key}.start_retry")
        ran.exit_code, ran.timed_out, ran.strays = program.exit_code, program.timed_out, \
            program.strays
        ran.stdout, ran.stderr = stdout.text().encode(), program.stderr

    def start_error(self, argv0: str, exc: OSError) -> InterplayError:
        """The one line for a program that cannot run as configured (no such file, no
        permission, not an executable, a command line too long): a setting to change."""
        reason = exc.strerror or type(exc).__name__
        if exc.errno == errno.E2BIG:
            return InterplayError(f"harness {self.name!r}: its command line is too long to "
                                  f"start ({reason})")
        return InterplayError(f"harness {self.name!r}: cannot run {argv0!r} ({reason}); "
                              f"{self.install_hint or 'fix harness_config'}")

    def _finish(self, ctx: SegmentContext, turn: Turn, ran: Ran, heard: Heard,
                messages: list[Message], t0: float) -> None:
        """Keep what one run did on the trace."""
        ran.wall_s = time.monotonic() - t0
        calls = turn.calls()
        self.keep(ctx, turn, ran, heard, calls)
        recorded = {r.call_id for r in ctx.trace.tool_runs}
        for run in heard.tool_runs:
            if run.call_id not in recorded:
                ctx.record_tool(run)
        log.debug("program.segment", harness=self.name, agent=ctx.trace.agent,
                  segment=turn.state.segments, resumed=turn.resume, exit_code=ran.exit_code,
                  calls=len(calls), added=len(messages), timed_out=ran.timed_out,
                  cancelled=ran.cancelled, strays=ran.strays, inside=turn.place.inside)

    def keep(self, ctx: SegmentContext, turn: Turn, ran: Ran, heard: Heard,
             calls: Sequence[ModelCall]) -> None:
        """The segment's record on the trace: ``trace.info[info_key]``, its session and a
        row per segment (how it ended, its model calls, where it ran, what :meth:`read`
        found, its stderr's end)."""
        info = ctx.trace.info.setdefault(self.info_key, {"segments": []})
        info.update(self.record_extra(turn.state))
        info["segments"].append({
            "command": "resume" if turn.resume else self.launch_word,
            "exit_code": ran.exit_code, "timed_out": ran.timed_out, "cancelled": ran.cancelled,
            self.session_key: heard.session or turn.state.session, "model_calls": len(calls),
            "wall_s": round(ran.wall_s, 3), "strays_killed": ran.strays,
            "where": "sandbox" if turn.place.inside else "host",
            **heard.detail,
            "stderr": ran.stderr[-KEEP_STDERR:].decode(errors="replace")})

    def _outcome(self, ctx: SegmentContext, turn: Turn, ran: Ran, heard: Heard,
                 messages: list[Message]) -> Segment:
        """The segment a finished run amounts to."""
        title = self.title or self.name
        if ran.timed_out:
            return Segment(messages, stop_condition="timeout", error_type=ErrorType.TIMEOUT,
                           error=f"{title} exceeded {self.config.timeout_s:g} s "
                                 f"(harness_config.timeout_s)")
        if heard.tools_reached is False:
            return Segment(messages, stop_condition="error",
                           error_type=ErrorType.TOOLS_UNREACHABLE,
                           error=f"{title} could not reach the env's tools: "
                                 f"{heard.tools_problem or 'its MCP server did not start'}")
        if heard.stop_condition is not None:
            return Segment(messages, stop_condition=heard.stop_condition)
        calls = turn.calls()
        failed_call = next((c for c in reversed(calls) if c.error_type is not None), None)
        if ran.exit_code != 0 or heard.failed:
            if failed_call is not None:
                return Segment(messages, stop_condition="error",
                               error_type=failed_call.error_type,
                               error=self.failed_call_error(ctx, failed_call))
            return Segment(messages, stop_condition="error", error_type=self.failed_type,
                           error=f"{title} exited with code {ran.exit_code}: "
                                 f"{heard.reason or last_line(ran.stderr)}")
        if heard.messages is None and (not messages or messages[-1].role != "assistant"):
            return Segment(messages, stop_condition="error", error_type=self.failed_type,
                           error=f"{title} finished without a recorded model answer")
        return Segment(messages)

    def failed_call_error(self, ctx: SegmentContext, call: ModelCall) -> str:
        """What to say of a segment the program stopped on a failed model call."""
        return f"{self.title or self.name} stopped on a failed model call: {call.error}"


class Lines:
    """Chunks of a stream handed on as whole lines (without their newline), the last one
    when the stream ends."""

    def __init__(self, hear: Callable[[bytes], None]) -> None:
        self.hear = hear
        self.pending = b""

    def feed(self, chunk: bytes) -> None:
        *lines, self.pending = (self.pending + chunk).split(b"\n")
        for line in lines:
            self.hear(line)

    def close(self) -> None:
        if self.pending:
            line, self.pending = self.pending, b""
            self.hear(line)


def segment_messages(calls: Sequence[ModelCall], prompt: str) -> list[Message]:
    """The messages one segment added, as the model saw them.

    A program resends the conversation with every call, so the last answered call holds the
    segment's whole history: everything after the user message carrying ``prompt`` (the last
    one that is it, else the last that contains it: a program may add to what it is given),
    then that call's answer. System-role messages a program adds of its own (its
    environment) are left out: they stay in the model calls. Another call carries the prompt
    when the last does not (a program that rewrote it); with none, the last call's answer
    alone. A call another process made with the trace's secret (``caller`` ``other``: a
    command the program ran) is never the program's conversation."""
    answered = [c for c in calls if c.response is not None and c.error_type is None
                and c.caller != "other"]
    wanted = prompt.strip()
    for call in reversed(answered):
        history = request_messages(call)
        users = [i for i, m in enumerate(history) if m.role == "user"]
        start = next((i for i in reversed(users) if history[i].text.strip() == wanted), None)
        if start is None and wanted:
            start = next((i for i in reversed(users) if wanted in history[i].text), None)
        if start is None:
            continue
        new = [m for m in history[start + 1:] if m.role != "system"]
        reply = assistant_message(call)
        return [*new, reply] if reply is not None else new
    if not answered:
        return []
    reply = assistant_message(answered[-1])
    return [reply] if reply is not None else []


def last_line(stderr: bytes) -> str:
    """The last line a program wrote to stderr, or ``no output``."""
    lines = [ln for ln in stderr.decode(errors="replace").splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "no output"


def new_session_id() -> str:
    return str(uuid.uuid4())


__all__ = ["BROUGHT", "Heard", "Launch", "Place", "ProgramConfig", "ProgramHarness",
           "ProgramState", "Ran", "Routes", "Turn", "last_line", "segment_messages"]

