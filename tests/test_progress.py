"""The progress display: on a terminal (a real pseudo-terminal, read back through a terminal
emulator) one bar fit to the width with log lines above it; elsewhere one plain line per
update; the error-episode rule in its figures; and never a reason for a run to stop."""

from __future__ import annotations

import asyncio
import fcntl
import io
import json
import os
import pty
import re
import struct
import sys
import termios
from collections.abc import Callable
from pathlib import Path

import pyte
import pytest

from interplay.run import progress
from interplay.testing import ScriptedModel, ScriptedReply, ScriptedRequest

ScriptedFactory = Callable[..., ScriptedModel]


def relay(latency_s: float) -> Callable[[ScriptedRequest], ScriptedReply]:
    def handler(req: ScriptedRequest) -> ScriptedReply:
        msgs = req.messages
        system = msgs[0].get("content") if msgs and msgs[0].get("role") == "system" else ""
        n_user = sum(1 for m in msgs if m.get("role") == "user")
        if "role-playing a user" in str(system):
            return ScriptedReply.text("###DONE###" if n_user > 1 else "a question",
                                      latency_s=latency_s)
        return ScriptedReply.text("the answer", latency_s=latency_s)

    return handler


async def run_in_terminal(args: list[str], *, columns: int, rows: int = 300) -> pyte.Screen:
    """Run the command on a pseudo-terminal ``columns`` wide (stdin, stdout and stderr, as in
    a shell) and return the screen a terminal would show at the end."""
    screen = pyte.Screen(columns, rows)
    pyte.ByteStream(screen).feed(await terminal_bytes(args, columns=columns, rows=rows))
    return screen


async def terminal_bytes(args: list[str], *, columns: int, rows: int = 300) -> bytes:
    """Run the command on a pseudo-terminal as :func:`run_in_terminal` does; every byte it
    wrote to the terminal, as written (what a capture of the terminal, ``script``, keeps)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(INTERPLAY_LOAD_PLUGINS="", TERM="xterm")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "interplay.cli", *args, stdin=slave, stdout=slave, stderr=slave,
        env=env)
    os.close(slave)
    os.set_blocking(master, False)
    data = bytearray()
    try:
        async with asyncio.timeout(120):
            while True:
                try:
                    chunk = os.read(master, 1 << 16)
                except BlockingIOError:
                    await asyncio.sleep(0.02)  # the scripted model answers on this loop
                    continue
                except OSError:  # EIO: every holder of the terminal's other end closed it
                    break
                if not chunk:
                    break
                data += chunk
            code = await proc.wait()
        assert code == 0, bytes(data).decode(errors="replace")[-2000:]
    finally:
        os.close(master)
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return bytes(data)


BAR = re.compile(r"\d+/6 episodes")


@pytest.mark.slow
@pytest.mark.parametrize("columns", [100, 44])
async def test_a_terminal_shows_one_bar_fit_to_its_width_with_log_lines_above_it(
        tmp_path: Path, scripted_model: ScriptedFactory, columns: int) -> None:
    model = scripted_model(relay(latency_s=0.08))
    # Debug level: every episode writes log lines while the bar is on the screen.
    screen = await run_in_terminal(
        ["--log-level", "debug", "eval", "user-sim", "-n", "6", "-c", "2", "--base-url",
         model.base_url, "-o", str(tmp_path / "run"), "--no-report"], columns=columns)
    lines = [line.rstrip() for line in screen.display]
    bars = [i for i, line in enumerate(lines) if BAR.search(line)]
    # One bar: every earlier frame was erased, none was left between log lines.
    assert len(bars) == 1, "\n".join(lines)
    bar = lines[bars[0]]
    assert bar.startswith(("━", "6/6")) and "6/6 episodes" in bar
    # It fits its row: the line after it is the summary's title, not the bar's overflow.
    assert lines[bars[0] + 1].startswith("user-sim: ")
    if columns >= 100:
        assert "reward 0.000 (6 scored)  errors 0" in bar and "ETA" in bar
    # Every log line came through whole (above the bar), and no row mixes the two.
    log_text = " ".join(lines[: bars[0]])
    assert len(re.findall(r"\[debug\s*\] episode\.end", log_text)) == 6
    assert not any("━" in line and ("debug" in line or "=" in line) for line in lines)


@pytest.mark.slow
async def test_worker_processes_log_above_the_bar_too(tmp_path: Path,
                                                      scripted_model: ScriptedFactory) -> None:
    model = scripted_model(relay(latency_s=0.08))
    screen = await run_in_terminal(
        ["--log-level", "debug", "eval", "user-sim", "-n", "6", "-c", "2", "-w", "2",
         "--base-url", model.base_url, "-o", str(tmp_path / "run"), "--no-report"],
        columns=100)
    lines = [line.rstrip() for line in screen.display]
    bars = [i for i, line in enumerate(lines) if BAR.search(line)]
    assert len(bars) == 1, "\n".join(lines)
    assert lines[bars[0] + 1].startswith("user-sim: ")
    # The workers' own log lines (their episodes end there) are all above the bar, whole.
    log_text = " ".join(lines[: bars[0]])
    assert len(re.findall(r"\[debug\s*\] episode\.end", log_text)) == 6, "\n".join(lines)
    stamped = [line for line in lines if re.match(r"\d{4}-\d\d-\d\dT", line)]
    assert [line for line in stamped if not re.match(r"\S+Z \[\w+\s*\] \S", line)] == []
    assert not any("━" in line and ("debug" in line or "=" in line) for line in lines)


def json_or_progress(text: str) -> list[str]:
    """The lines of ``text`` that are neither a whole JSON log line nor a whole progress
    line (a terminal's line ends are ``\\r\\n``)."""
    odd = []
    for line in text.replace("\r\n", "\n").split("\n"):
        if not line or re.fullmatch(r"\d+/\d+ episodes  reward .*s elapsed", line):
            continue
        try:
            if isinstance(json.loads(line), dict):
                continue
        except ValueError:
            pass
        odd.append(line)
    return odd


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
async def test_json_log_lines_on_a_terminal_are_never_mixed_with_the_progress_display(
        tmp_path: Path, scripted_model: ScriptedFactory, workers: int) -> None:
    """With --log-format json, stderr is for a program to read even on a terminal: the
    progress comes as plain lines between whole JSON lines, no bar drawn across them (a bar
    redraws itself with cursor moves, which a capture of the terminal keeps inside the lines
    around it) and no JSON line wrapped to the terminal's width."""
    model = scripted_model(relay(latency_s=0.08))
    data = await terminal_bytes(
        ["--log-format", "json", "--log-level", "debug", "eval", "user-sim", "-n", "6",
         "-c", "2", "-w", str(workers), "--base-url", model.base_url,
         "-o", str(tmp_path / "run"), "--no-report"], columns=60)
    # The run's first line says what runs, in words; the summary (stdout) comes last.
    start, _, text = data.decode().replace("\r\n", "\n").partition("\n")
    stderr = text.rpartition("\nuser-sim: ")[0]
    assert start.startswith("interplay eval user-sim: 6 episodes")
    assert "\x1b" not in stderr
    assert json_or_progress(stderr) == []
    assert sum('"event": "episode.end"' in line for line in stderr.splitlines()) == 6
    assert re.search(r"^6/6 episodes  reward 0\.000 \(6 scored\)", stderr, re.M)


def test_without_a_terminal_each_update_is_one_plain_line() -> None:
    plain = io.StringIO()
    p = progress.Progress(4, stream=plain, interval_s=3600)
    p.add_done([{"reward": 1.0, "error_type": None}])
    p.start()
    p.count({"reward": 0.0, "error_type": None})  # the first update is shown at once
    p.count({"reward": None, "error_type": "timeout"})  # within the interval: not shown
    p.count({"reward": 1.0, "error_type": None})  # the last is always shown
    p.finish()  # already shown: not again
    lines = plain.getvalue().splitlines()
    assert len(lines) == 2 and "\r" not in plain.getvalue() and "\x1b" not in plain.getvalue()
    assert lines[0].startswith("2/4 episodes  reward 0.500 (2 scored)  errors 0")
    assert lines[1].startswith("4/4 episodes  reward 0.667 (3 scored)  errors 1")

    # An interrupted run ends on a line that says where it stopped.
    plain = io.StringIO()
    p = progress.Progress(4, stream=plain, interval_s=3600)
    p.start()
    p.count({"reward": 1.0, "error_type": None})
    p.count({"reward": 1.0, "error_type": None})
    p.finish()
    assert [line[:12] for line in plain.getvalue().splitlines()] == ["1/4 episodes",
                                                                      "2/4 episodes"]


def test_an_error_episode_is_counted_apart_even_with_a_reward_on_its_line() -> None:
    p = progress.Progress(3, enabled=False)
    # A line written before the rule may carry a reward for an error episode.
    p.add_done([{"reward": 1.0, "error_type": "timeout"}, {"reward": 0.25, "error_type": None}])
    p.count({"reward": None, "error_type": None})  # completed, nothing scored it
    assert "3/3 episodes  reward 0.250 (1 scored)  errors 1" in p.figures()


class _Broken(io.StringIO):
    def isatty(self) -> bool:
        return self.tty

    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


@pytest.mark.parametrize("tty", [False, True])
def test_a_display_that_cannot_write_turns_itself_off(tty: bool) -> None:
    p = progress.Progress(2, stream=_Broken(tty), interval_s=0)
    p.start()
    p.count({"reward": 1.0, "error_type": None})
    p.count({"reward": 1.0, "error_type": None})
    p.finish()
    assert p.done == 2
    # The streams rich takes over for the bar are given back.
    assert type(sys.stdout).__name__ != "FileProxy" != type(sys.stderr).__name__


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_with_json_log_lines_a_terminal_gets_plain_lines_each_whole() -> None:
    """Threads writing log lines while the display's own thread prints its line: every line
    on the shared stream is whole, a JSON line or a progress line."""
    import threading

    from interplay import log as log_mod
    from interplay.testing import captured_log

    screen = _Terminal()
    with captured_log("info"):  # put back as it was afterwards
        log_mod.configure(fmt="json", level="info", stream=screen)
        p = progress.Progress(50, stream=screen, interval_s=0.004)
        assert p.tty is False  # JSON lines: no bar, even on a terminal
        p.start()

        def logs(n: int) -> None:
            logger = log_mod.get_logger("interplay.test")
            for i in range(200):
                logger.info("probe.line", worker=n, call_id=f"c{i}" * 40)

        threads = [threading.Thread(target=logs, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for _ in range(50):
            p.count({"reward": 1.0, "error_type": None})
        for t in threads:
            t.join()
        p.finish()
    text = screen.getvalue()
    assert json_or_progress(text) == []
    assert sum('"probe.line"' in line for line in text.splitlines()) == 800
    # The last progress line is the whole run's (a log line may land after it).
    progress_lines = [line for line in text.splitlines() if not line.startswith("{")]
    assert progress_lines[-1].startswith("50/50 episodes  reward 1.000")
    # Once logging is the console's again, a terminal has its bar.
    assert progress.Progress(3, stream=_Terminal()).tty is True


def test_without_a_terminal_a_line_comes_every_interval_while_episodes_run(
        tmp_path: Path) -> None:
    """Long episodes: no episode finishes for minutes, yet the plain line comes every
    interval (written to a real file, as stderr redirected to one is)."""
    import time

    path = tmp_path / "stderr.log"
    with path.open("w") as log_file:
        p = progress.Progress(2, stream=log_file, interval_s=0.2)
        p.start()
        time.sleep(0.75)
        during = path.read_text().splitlines()
        p.count({"reward": 1.0, "error_type": None})
        p.count({"reward": 1.0, "error_type": None})
        p.finish()
        after_finish = path.read_text()
        time.sleep(0.5)
        assert path.read_text() == after_finish  # the timer stopped with the run
    assert len(during) >= 2 and all(line.startswith("0/2 episodes") for line in during)
    assert all(line.endswith("s elapsed") for line in during)
    assert after_finish.splitlines()[-1].startswith("2/2 episodes  reward 1.000")
