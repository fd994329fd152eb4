"""The embedded model's kept conversation states: what lets the next request of a
conversation skip reading its prompt again, in a memory bound that holds.

Seats take turns (a user and an assistant, two players), so consecutive requests rarely share
a prefix; the server keeps each conversation's evaluated state (llama.cpp's KV cells for its
tokens) and loads it back when that conversation's next request comes.

llama-cpp-python's own ``LlamaRAMCache`` counts a state by its llama.cpp bytes only, while
``Llama.save_state`` also copies the model's score buffer (a row of vocabulary-sized floats per
token, up to ``n_batch`` rows: about 100 MB a state for SmolLM2's 49,152-token vocabulary, none
of it counted), and keeps every turn of a conversation as a state of its own. Nothing reads
those scores back: a model made without ``logits_all`` never writes them, and a restored state
is decoded again from its last token before anything is sampled. So here a state is kept
without them (:class:`StateLlama`), counted by every byte it holds, and a conversation keeps
one state, its latest (:class:`StateCache`).

Runs in the server's worker thread; no I/O, no logging.
"""

from __future__ import annotations

import ctypes
import inspect
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp import Llama, LlamaState
from llama_cpp.llama_cache import BaseLlamaCache

#: The kept states' bytes at most: a few conversations of several thousand tokens at about
#: 23 kB a token, more than a run of the embedded model (one episode at a time) takes up again.
STATE_CACHE_BYTES = 128 << 20

#: The conversations whose latest state is kept whatever its size: the two seats of an episode
#: take turns, and a prompt of 5,000 tokens or more (a benchmark's policy and tools) makes a
#: state of over 100 MB, which the capacity alone would drop at the other seat's next call. At
#: most two windows' worth of states (8,192 tokens each, about 190 MB) stay above the capacity.
KEPT_LATEST = 2

_NO_SCORES = np.zeros((0, 0), dtype=np.single)


#: ``Llama.create_completion``'s own default for ``max_tokens``.
_DEFAULT_MAX_TOKENS = inspect.signature(Llama.create_completion).parameters["max_tokens"].default


class StateLlama(Llama):
    """``Llama`` whose saved states hold the tokens and llama.cpp's own state, not the
    score buffer (see the module docstring); ``completion_cap``, when set, bounds every
    completion it makes (see :meth:`create_completion`)."""

    #: The most tokens any one completion may take while set (None: as each call asks).
    completion_cap: int | None = None

    def create_completion(self, *args: Any, **kwargs: Any) -> Any:
        """As ``Llama.create_completion``, each completion held to ``completion_cap``: the
        tool handler (``chatml-function-calling``) asks its completions for no limit (up to
        the whole window), whatever the request's ``max_tokens`` said, so a small model's
        answer could run for minutes and fill the context until the next one was refused."""
        cap = self.completion_cap
        if cap is not None and len(args) < 3:  # (prompt, suffix, max_tokens, ...)
            asked = kwargs.get("max_tokens", _DEFAULT_MAX_TOKENS)
            kwargs["max_tokens"] = cap if asked is None or asked <= 0 else min(asked, cap)
        return super().create_completion(*args, **kwargs)

    def save_state(self) -> LlamaState:
        ctx = self._ctx.ctx
        size = int(llama_cpp.llama_state_get_size(ctx))
        buffer = (ctypes.c_uint8 * size)()
        written = int(llama_cpp.llama_state_get_data(ctx, buffer, size))
        if written > size:
            raise RuntimeError("llama.cpp wrote more state than it said it would")
        return LlamaState(input_ids=self.input_ids[: self.n_tokens].copy(), scores=_NO_SCORES,
                          n_tokens=self.n_tokens, llama_state=bytes(memoryview(buffer)[:written]),
                          llama_state_size=written, seed=self._seed)

    def load_state(self, state: LlamaState) -> None:
        ids = np.zeros(self._n_ctx, dtype=np.intc)
        ids[: state.n_tokens] = state.input_ids[: state.n_tokens]
        self.input_ids = ids
        self.n_tokens = state.n_tokens
        # As Llama.load_state: a restored state decodes again before it is sampled from.
        self._requires_eval = True
        self._seed = state.seed
        data = (ctypes.c_uint8 * state.llama_state_size).from_buffer_copy(state.llama_state)
        if llama_cpp.llama_state_set_data(self._ctx.ctx, data,
                                          state.llama_state_size) != state.llama_state_size:
            raise RuntimeError("llama.cpp did not take the kept state back")


#: glibc's mallopt parameter for the size from which a block is mapped on its own.
_M_MMAP_THRESHOLD = -3


def release_large_blocks(threshold: int = 1 << 20) -> bool:
    """Have glibc map every block of ``threshold`` bytes or more on its own, so freeing it
    gives the memory back. A state is a block of megabytes, and so are the buffers it passes
    through on its way in and out of llama.cpp; by default glibc raises that threshold to the
    size of the largest mapped block freed so far (up to 32 MB), after which such blocks come
    from its heaps, where the holes between them were never given back: the server's memory
    crept up with every state dropped. False where the C library has no ``mallopt``."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))


def state_bytes(state: LlamaState) -> int:
    """What a kept state holds in memory."""
    return (len(state.llama_state) + int(state.input_ids.nbytes)
            + int(np.asarray(state.scores).nbytes))


class StateCache(BaseLlamaCache):
    """Conversation states by their tokens, least recently used dropped first once they hold
    more than ``capacity_bytes`` (every byte of a state counted), except the ``kept_latest``
    most recently used, which stay whatever their size. A state whose tokens begin with a kept
    state's tokens replaces it: the conversation went on, and its longer state serves every
    request the shorter one would."""

    def __init__(self, capacity_bytes: int = STATE_CACHE_BYTES,
                 kept_latest: int = KEPT_LATEST) -> None:
        super().__init__(capacity_bytes)
        self.kept_latest = kept_latest
        self.states: OrderedDict[tuple[int, ...], LlamaState] = OrderedDict()
        self.bytes = 0

    @property
    def cache_size(self) -> int:
        return self.bytes

    def _find_longest_prefix_key(self, key: tuple[int, ...]) -> tuple[int, ...] | None:
        best, best_len = None, 0
        for kept in self.states:
            n = Llama.longest_token_prefix(kept, key)
            if n > best_len:
                best, best_len = kept, n
        return best

    def __getitem__(self, key: Sequence[int]) -> LlamaState:
        found = self._find_longest_prefix_key(tuple(key))
        if found is None:
            raise KeyError("no kept state shares a prefix with these tokens")
        self.states.move_to_end(found)
        return self.states[found]

    def __contains__(self, key: Any) -> bool:
        return self._find_longest_prefix_key(tuple(key)) is not None

    def __setitem__(self, key: Sequence[int], value: LlamaState) -> None:
        key = tuple(key)
        for kept in [k for k in self.states if key[: len(k)] == k]:
            self._drop(kept)
        self.states[key] = value
        self.bytes += state_bytes(value)
        while self.bytes > self.capacity_bytes and len(self.states) > self.kept_latest:
            self._drop(next(iter(self.states)))

    def _drop(self, key: tuple[int, ...]) -> None:
        self.bytes -= state_bytes(self.states.pop(key))
