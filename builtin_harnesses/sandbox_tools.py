"""The ``chat`` harness's tools that work in the episode's sandbox: ``bash`` (a shell command),
``python`` (a program on the image's python3) and ``text_editor`` (view, create, str_replace,
insert, undo_edit: the shape Anthropic's text editor tool and Inspect's share).

Each call is one command in the sandbox (:meth:`interplay.Sandbox.exec`) or a file read and
written through it, so they work the same on any backend. A command runs in the task's
workspace until it exits or its time limit passes; then everything it started is ended and the
model is told so, with what it had written. What the model reads back is bounded: past the
bound the middle is left out, and the text says how many bytes. A shell's state (its folder,
its variables) does not carry from one call to the next; files do. The text editor keeps each
trace's edits to undo in the harness's per-trace state, never in the sandbox.

Calls are checked and answered as the env's tools are (:func:`interplay.values.tools.run_call`: the
same schema check, the same error texts) and recorded on the trace as a tool run each, a
command stopped at its limit as a ``timeout``; ``trace.info["sandbox_tools"]`` keeps how each
ended (exit code, stopped, bytes left out), never its text.

This module owns those tools; it must not start or stop a sandbox (the run does).
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from interplay.contracts.contexts import SegmentContext
from interplay.contracts.sandbox import ExecResult, Sandbox, SandboxError, bounded_text
from interplay.errors import ErrorType
from interplay.log import get_logger
from interplay.values.records import ToolRun
from interplay.values.tools import CallOutcome, Tool, run_call, tool_call_id

log = get_logger("interplay.sandbox_tools")

#: The tools, by the names a seat's ``harness_config.sandbox_tools`` picks them with.
NAMES = ("bash", "python", "text_editor")
#: Seconds over a command's own limit its tool call may take (the sandbox ends the command
#: first and says so; this only bounds a sandbox that does not answer).
GRACE_S = 30.0
#: Lines of context around an edit in the snippet the editor shows back.
SNIPPET_LINES = 4
#: The largest file the editor reads.
MAX_FILE_BYTES = 4 * 1024 * 1024
#: Edits per file the editor can undo.
UNDO_DEPTH = 20

_BASH = ("Run a bash command in the workspace and read its output (stdout then stderr). "
         "Each call starts a new shell in the workspace folder: `cd` and variables do not "
         "carry to the next call. A command that runs past {limit:g} s is stopped with "
         "everything it started. Output past {bytes} bytes is cut in the middle.")
_PYTHON = ("Run a Python 3 program (its source as `code`, fed to the image's python3) in the "
           "workspace and read what it prints. Each call is a new interpreter. One that runs "
           "past {limit:g} s is stopped. Output past {bytes} bytes is cut in the middle.")
_EDITOR = ("View, create and edit text files in the workspace. Paths are absolute or relative "
           "to the workspace folder ({workdir}). `view` shows a file with line numbers "
           "(`view_range` [first, last] for part of it; last -1: to the end) or a folder's "
           "files two levels deep; `create` writes `file_text` to a new file; `str_replace` "
           "replaces `old_str`, which must occur exactly once, with `new_str`; `insert` puts "
           "`new_str` after line `insert_line` (0: at the top); `undo_edit` takes back the "
           "last edit of `path`.")


@attrs.frozen
class Limits:
    """How far one call of a sandbox tool may go: seconds a command runs, bytes read back."""

    timeout_s: float
    output_bytes: int


class ToolProblem(Exception):
    """A call that cannot be done as asked (a text the editor cannot find, the sandbox gone):
    the model reads the message, and the call is recorded as a ``tool_error``."""


@attrs.define
class Ended:
    """How one call ended, kept for its record."""

    exit_code: int | None = None
    timed_out: bool = False
    stopped: str | None = None
    #: Bytes of its output left out.
    cut: int = 0
    #: Whether it could not be done as asked (the model was told why).
    failed: bool = False


class SandboxTools:
    """The sandbox tools of one trace: made per segment for the sandbox its seat works in,
    with the harness's limits; the editor's undo history lives in ``history`` (the trace's
    own, kept by the harness across segments)."""

    def __init__(self, sandbox: Sandbox, names: Sequence[str], limits: Limits,
                 history: dict[str, list[str | None]]) -> None:
        self.sandbox = sandbox
        self.limits = limits
        self.history = history
        #: How each call of this segment ended, by its call id.
        self.ended: dict[str, Ended] = {}
        made = {"bash": self._bash_tool, "python": self._python_tool,
                "text_editor": self._editor_tool}
        self.tools: dict[str, Tool] = {name: made[name]() for name in names}

    # -- the tools as the model sees them -----------------------------------------------------

    def _timeout(self) -> float:
        return self.limits.timeout_s + GRACE_S

    def _bash_tool(self) -> Tool:
        return Tool(name="bash", description=_BASH.format(limit=self.limits.timeout_s,
                                                          bytes=self.limits.output_bytes),
                    parameters={"type": "object", "properties": {
                        "command": {"type": "string", "description": "The bash command."}},
                        "required": ["command"], "additionalProperties": False},
                    fn=self._bash, timeout_s=self._timeout())

    def _python_tool(self) -> Tool:
        return Tool(name="python", description=_PYTHON.format(limit=self.limits.timeout_s,
                                                              bytes=self.limits.output_bytes),
                    parameters={"type": "object", "properties": {
                        "code": {"type": "string", "description": "The program's source."}},
                        "required": ["code"], "additionalProperties": False},
                    fn=self._python, timeout_s=self._timeout())

    def _editor_tool(self) -> Tool:
        text = {"type": "string"}
        return Tool(name="text_editor",
                    description=_EDITOR.format(workdir=self.sandbox.workdir),
                    parameters={"type": "object", "properties": {
                        "command": {"type": "string", "enum": ["view", "create", "str_replace",
                                                               "insert", "undo_edit"]},
                        "path": {"type": "string", "description": "The file or folder."},
                        "file_text": {**text, "description": "create: the new file's text."},
                        "old_str": {**text, "description": "str_replace: the text to replace "
                                                           "(exactly once in the file)."},
                        "new_str": {**text, "description": "str_replace: its replacement; "
                                                           "insert: the text to insert."},
                        "insert_line": {"type": "integer", "minimum": 0,
                                        "description": "insert: the line after which it goes "
                                                       "(0: the top)."},
                        "insert_text": {**text, "description": "insert: the same as new_str "
                                                               "(the name Anthropic's tool "
                                                               "uses)."},
                        "view_range": {"type": "array", "items": {"type": "integer"},
                                       "minItems": 2, "maxItems": 2,
                                       "description": "view: [first line, last line]; last "
                                                      "-1: to the end."}},
                        "required": ["command", "path"], "additionalProperties": False},
                    fn=self._editor, timeout_s=self._timeout())

    # -- one call ------------------------------------------------------------------------------

    async def call(self, name: str, arguments: str | Mapping[str, Any] | None, *,
                   call_id: str, ctx: SegmentContext) -> CallOutcome:
        """Run the model's call of the sandbox tool ``name`` and record it on the trace (a
        tool run; a command stopped at its limit is a ``timeout``); what the model reads."""
        t0 = time.monotonic()
        outcome = await run_call(self.tools, name, arguments, call_id=call_id)
        ended = self.ended.pop(call_id, None)
        error_type = outcome.error_type
        if error_type is None and ended is not None:
            error_type = ErrorType.TIMEOUT if ended.timed_out else \
                ErrorType.TOOL_ERROR if ended.stopped or ended.failed else None
        duration = time.monotonic() - t0
        ctx.record_tool(ToolRun(call_id=call_id, name=name, duration_s=duration,
                                error_type=error_type))
        row: dict[str, Any] = {"call_id": call_id, "tool": name, "error_type": error_type,
                               "output_bytes": len(outcome.output.encode(errors="replace"))}
        if ended is not None:
            row.update(exit_code=ended.exit_code, timed_out=ended.timed_out,
                       stopped=ended.stopped, cut=ended.cut)
        ctx.trace.info.setdefault("sandbox_tools", []).append(row)
        log.debug("sandbox_tools.call", tool=name, agent=ctx.trace.agent,
                  error_type=error_type, exit_code=row.get("exit_code"),
                  output_bytes=row["output_bytes"], cut=row.get("cut", 0),
                  duration_s=round(duration, 3))
        return outcome

    async def _bash(self, command: str) -> str:
        try:
            return self._answer(await self._exec(["bash", "-c", command]))
        except ToolProblem as exc:
            return self._failed(exc)

    async def _python(self, code: str) -> str:
        try:
            return self._answer(await self._exec(["python3", "-"], stdin=code))
        except ToolProblem as exc:
            return self._failed(exc)

    def _keep(self, ended: Ended) -> None:
        call_id = tool_call_id()
        if call_id is not None:
            self.ended[call_id] = ended

    def _failed(self, exc: ToolProblem) -> str:
        self._keep(Ended(failed=True))
        return f"error: {exc}"

    async def _exec(self, argv: list[str], stdin: str | None = None) -> ExecResult:
        try:
            return await self.sandbox.exec(argv, stdin=stdin, timeout_s=self.limits.timeout_s,
                                           output_bytes=self.limits.output_bytes)
        except SandboxError as exc:
            raise ToolProblem(f"the sandbox could not run it: {exc}") from None

    def _answer(self, result: ExecResult) -> str:
        """What the model reads of a command: its output, bounded, and how it ended when
        that was not exit code 0."""
        text, cut = bounded_text(result.output(), self.limits.output_bytes)
        ended = Ended(exit_code=result.exit_code, timed_out=result.timed_out,
                      stopped=result.stopped, cut=cut + result.stdout_cut + result.stderr_cut)
        self._keep(ended)
        notes = []
        if result.timed_out:
            notes.append(f"[stopped: it ran past its {self.limits.timeout_s:g} s limit, and "
                         f"everything it started was ended]")
        elif result.stopped is not None:
            notes.append(f"[stopped: {result.stopped}]")
        elif result.exit_code != 0:
            notes.append(f"[exit code {result.exit_code}]")
        if not text and not notes:
            return "[no output]"
        sep = "\n" if text and not text.endswith("\n") else ""
        return text + (sep + "\n".join(notes) if notes else "")

    # -- the text editor -----------------------------------------------------------------------

    async def _editor(self, command: str, path: str, file_text: str | None = None,
                      old_str: str | None = None, new_str: str | None = None,
                      insert_line: int | None = None, insert_text: str | None = None,
                      view_range: list[int] | None = None) -> str:
        if new_str is None and command == "insert":
            new_str = insert_text
        try:
            where = self._where(path)
            kind, mode = await self._kind(where)
            if command == "view":
                if kind == "dir":
                    if view_range is not None:
                        raise ToolProblem("view_range is for a file; leave it out for a "
                                          "folder")
                    return await self._view_folder(where)
                return self._view(await self._read(where, kind), where, view_range)
            if kind == "dir":
                raise ToolProblem(f"{where} is a folder: only `view` works on a folder")
            if command == "create":
                if file_text is None:
                    raise ToolProblem("`create` needs `file_text`")
                if kind == "file":
                    raise ToolProblem(f"{where} exists already: `create` makes a new file; "
                                      f"edit it with `str_replace` or `insert`")
                await self._write(where, file_text, mode)
                self._remember(where, None)
                return f"Created {where} ({_lines(file_text)} lines)."
            if command == "str_replace":
                if old_str is None:
                    raise ToolProblem("`str_replace` needs `old_str`")
                return await self._replace(where, await self._read(where, kind), old_str,
                                           new_str or "", mode)
            if command == "insert":
                if insert_line is None or new_str is None:
                    raise ToolProblem("`insert` needs `insert_line` and `new_str`")
                return await self._insert(where, await self._read(where, kind), insert_line,
                                          new_str, mode)
            if command == "undo_edit":
                return await self._undo(where, mode)
            raise ToolProblem(f"unknown command {command!r}: one of view, create, "
                              f"str_replace, insert, undo_edit")
        except ToolProblem as exc:
            return self._failed(exc)

    def _where(self, path: str) -> str:
        if not path.strip():
            raise ToolProblem("`path` is empty; give a file or folder")
        return posixpath.normpath(posixpath.join(self.sandbox.workdir, path))

    async def _kind(self, where: str) -> tuple[str, int]:
        """``("dir" | "file" | "none" | "other", mode)`` of the path inside."""
        probe = ('if [ -d "$1" ]; then echo dir; elif [ -f "$1" ]; then '
                 'echo "file $(stat -c %a "$1" 2>/dev/null || echo 644)"; '
                 'elif [ -e "$1" ]; then echo other; else echo none; fi')
        result = await self._exec(["sh", "-c", probe, "sh", where])
        words = result.stdout.split()
        if not result.ok or not words:
            raise ToolProblem(f"cannot look at {where}: {result.output().strip() or 'no answer'}")
        mode = 0o644
        if words[0] == "file" and len(words) > 1:
            try:
                mode = int(words[1], 8) & 0o7777
            except ValueError:
                pass
        if words[0] == "other":
            raise ToolProblem(f"{where} is neither a file nor a folder")
        return words[0], mode

    async def _read(self, where: str, kind: str) -> str:
        if kind == "none":
            raise ToolProblem(f"{where} does not exist (`create` makes a new file)")
        try:
            data = await self.sandbox.read_file(where, max_bytes=MAX_FILE_BYTES)
        except FileNotFoundError:
            raise ToolProblem(f"{where} does not exist (`create` makes a new file)") from None
        except SandboxError as exc:
            raise ToolProblem(f"cannot read {where}: {exc}") from None
        if b"\0" in data[:8192]:
            raise ToolProblem(f"{where} is not a text file; look at it with bash")
        return data.decode(errors="replace")

    async def _write(self, where: str, text: str, mode: int) -> None:
        try:
            await self.sandbox.write_file(where, text, mode=mode)
        except SandboxError as exc:
            raise ToolProblem(f"cannot write {where}: {exc}") from None

    def _remember(self, where: str, before: str | None) -> None:
        """Keep what ``where`` held before an edit (None: it did not exist), for undo_edit."""
        edits = self.history.setdefault(where, [])
        edits.append(before)
        del edits[:-UNDO_DEPTH]

    def _view(self, text: str, where: str, view_range: list[int] | None) -> str:
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        first, last = 1, len(lines)
        if view_range is not None:
            first, last = view_range
            if last == -1:
                last = len(lines)
            if not 1 <= first <= max(1, len(lines)) or last < first or last > len(lines):
                raise ToolProblem(f"view_range {view_range} is outside the file's lines "
                                  f"1 to {len(lines)}")
        shown = _numbered(lines[first - 1:last], first)
        head = f"{where}, lines {first}-{last} of {len(lines)}:\n" if view_range else \
            f"{where} ({len(lines)} lines):\n"
        body, cut = bounded_text(shown, self.limits.output_bytes)
        if cut:
            self._keep(Ended(cut=cut))
            body += "\n[view a part of it with view_range to see the lines left out]"
        return head + body

    async def _view_folder(self, where: str) -> str:
        result = await self._exec(["find", where, "-maxdepth", "2", "-not", "-path", "*/.*"])
        if not result.ok:
            raise ToolProblem(f"cannot list {where}: {result.output().strip()}")
        listing = "\n".join(sorted(result.stdout.split("\n"))).strip()
        body, _ = bounded_text(listing, self.limits.output_bytes)
        return f"Files and folders in {where}, two levels deep (hidden ones left out):\n{body}"

    async def _replace(self, where: str, text: str, old: str, new: str, mode: int) -> str:
        if not old:
            raise ToolProblem("`old_str` is empty; give the text to replace")
        count = text.count(old)
        if count == 0:
            raise ToolProblem(f"`old_str` does not occur in {where}; nothing was replaced "
                              f"(it must match the file exactly, whitespace included)")
        if count > 1:
            starts = [i + 1 for i, line in enumerate(text.split("\n")) if old in line]
            at = f" (lines {', '.join(map(str, starts[:10]))})" if starts else ""
            raise ToolProblem(f"`old_str` occurs {count} times in {where}{at}; nothing was "
                              f"replaced: give more of the text around it so it occurs once")
        changed = text.replace(old, new, 1)
        await self._write(where, changed, mode)
        self._remember(where, text)
        line = text[:text.index(old)].count("\n")
        return f"Edited {where}.\n" + self._snippet(changed, line, new.count("\n") + 1)

    async def _insert(self, where: str, text: str, after: int, new: str, mode: int) -> str:
        lines = text.split("\n")
        trailing = text.endswith("\n")
        if trailing:
            lines.pop()
        if after > len(lines):
            raise ToolProblem(f"insert_line {after} is past the file's {len(lines)} lines "
                              f"(0 to {len(lines)})")
        added = new[:-1].split("\n") if new.endswith("\n") else new.split("\n")
        changed = "\n".join(lines[:after] + added + lines[after:]) + ("\n" if trailing or
                                                                      not lines else "")
        await self._write(where, changed, mode)
        self._remember(where, text)
        return f"Edited {where}.\n" + self._snippet(changed, after, len(added))

    async def _undo(self, where: str, mode: int) -> str:
        edits = self.history.get(where)
        if not edits:
            raise ToolProblem(f"no edit of {where} to undo")
        before = edits.pop()
        if before is None:  # the file was created: undoing removes it
            result = await self._exec(["rm", "-f", "--", where])
            if not result.ok:
                raise ToolProblem(f"cannot remove {where}: {result.output().strip()}")
            return f"Undid the creation of {where}: it is removed."
        await self._write(where, before, mode)
        return f"Undid the last edit of {where}.\n" + self._snippet(before, 0, 0, whole=True)

    def _snippet(self, text: str, line: int, count: int, *, whole: bool = False) -> str:
        """Lines around the edit that starts at line index ``line`` and spans ``count``."""
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        first = 0 if whole else max(0, line - SNIPPET_LINES)
        last = len(lines) if whole else min(len(lines), line + count + SNIPPET_LINES)
        body, _ = bounded_text(_numbered(lines[first:last], first + 1),
                               self.limits.output_bytes)
        return f"Lines {first + 1}-{last} now:\n{body}"


def _numbered(lines: Sequence[str], first: int) -> str:
    return "\n".join(f"{n:6}\t{line}" for n, line in enumerate(lines, first))


def _lines(text: str) -> int:
    return text.count("\n") + (0 if text.endswith("\n") or not text else 1)


__all__ = ["NAMES", "Limits", "SandboxTools"]
