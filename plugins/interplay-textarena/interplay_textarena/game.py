"""One TextArena game held for one episode, and what a game id needs before it can run.

:class:`Game` makes a game with ``textarena.make``, resets it with the episode's seed, reads the
acting player's new observations, plays moves through the game's own ``step`` (its action
wrappers included), records every invalid move the game itself rules on, and closes it for its
rewards. :func:`describe` runs when the env loads: it makes and resets the game once to learn how
many players it seats, and turns whatever stops it from running here (an nltk corpus it loads at
run time, a Python package it imports, a module this Python cannot compile, an unknown id) into
one line saying what is missing and how to get it.

TextArena games draw from the ``random`` module's global generator (``textarena.State`` seeds it
at reset), so two games interleaved in one process would draw from each other's stream.
:class:`GameRandom` swaps the game's own generator state in around every call into the game, so
a game depends on its seed and its moves alone, however many episodes run at once.

This module knows the library, not episodes: it never talks to a model.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import io
import json
import random
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs

from interplay import InterplayError

#: Seats this adapter fills: one player (the game plays the user) or two (self-play).
PLAYER_COUNTS = (1, 2)
#: The sender id TextArena gives the game itself (``textarena.GAME_ID``).
GAME_ID = -1
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class GameRandom:
    """A game's own state of the global ``random`` generator (and numpy's, when a game uses
    numpy), swapped in for the duration of each call into the game."""

    def __init__(self, seed: int) -> None:
        self._seed = seed
        self._state = random.Random(seed).getstate()
        self._numpy: Any = None

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        outer = random.getstate()
        random.setstate(self._state)
        np_random = sys.modules.get("numpy.random")
        np_outer = None
        if np_random is not None:
            np_outer = np_random.get_state()
            if self._numpy is None:
                np_random.seed(self._seed % 2**32)
            else:
                np_random.set_state(self._numpy)
        try:
            yield
        finally:
            self._state = random.getstate()
            random.setstate(outer)
            np_random = sys.modules.get("numpy.random")
            if np_random is not None:
                self._numpy = np_random.get_state()
                if np_outer is not None:
                    np_random.set_state(np_outer)


@attrs.frozen
class GameSpec:
    """What the env needs to know of a game id before any episode: its player count."""

    game: str
    players: int


@attrs.frozen
class InvalidMove:
    """One move the game ruled invalid (through its own ``State.set_invalid_move``)."""

    player: int
    reason: str


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence what a game prints while it loads (nltk's download attempts, banners)."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


def _import_textarena() -> Any:
    with _quiet():
        import textarena

    return textarena


def innermost(env: Any) -> Any:
    """The game under its wrappers (observations are read from it, unwrapped)."""
    ta = _import_textarena()
    while isinstance(env, ta.Wrapper):
        env = env.env
    return env


class Game:
    """One game, made and reset with ``seed`` for ``players`` players."""

    def __init__(self, game: str, *, players: int, seed: int,
                 kwargs: Mapping[str, Any] | None = None) -> None:
        ta = _import_textarena()
        self.id = game
        self.seed = seed
        self.random = GameRandom(seed)
        with self.random.active(), _quiet():
            self.env = ta.make(game, **dict(kwargs or {}))
            self.env.reset(num_players=players, seed=seed)
        self.core = innermost(self.env)
        self._invalid: list[InvalidMove] = []
        self._watch_invalid_moves()

    def _watch_invalid_moves(self) -> None:
        # The game rules on invalid moves through its State (a retry within its error
        # allowance, or the loss of the game past it); wrapping the bound method records each
        # ruling without changing it.
        state = self.core.state
        rule = state.set_invalid_move

        def recorded(*args: Any, **kwargs: Any) -> Any:
            reason = kwargs.get("reason", args[0] if args else None)
            self._invalid.append(InvalidMove(int(state.current_player_id), str(reason)))
            return rule(*args, **kwargs)

        state.set_invalid_move = recorded

    @property
    def roles(self) -> Mapping[int, str]:
        return dict(getattr(self.core.state, "role_mapping", None) or {})

    def observe(self) -> tuple[int, list[tuple[int, str, Any]]]:
        """The player to act and the observations it has not seen yet."""
        with self.random.active():
            player, observations = self.core.get_observation()
        return int(player), list(observations or ())

    def play(self, action: str) -> tuple[bool, list[InvalidMove]]:
        """Play ``action`` for the player to act: whether the game is over, and the invalid
        moves the game ruled on while playing it."""
        self._invalid.clear()
        with self.random.active():
            out = self.env.step(action=action)
        done = out[0] if isinstance(out, tuple) else out
        return bool(done), list(self._invalid)

    def close(self) -> tuple[dict[int, float] | None, dict[int, dict[str, Any]]]:
        """The game's rewards by player (None when it did not finish) and its per-player info."""
        with self.random.active():
            out = self.env.close()
        rewards, info = out if isinstance(out, tuple) and len(out) == 2 else (out, {})
        if rewards is not None:
            rewards = {int(p): float(r) for p, r in dict(rewards).items()}
        return rewards, {int(p): dict(v) for p, v in dict(info or {}).items()
                         if isinstance(v, Mapping)}


def render(observations: Sequence[Sequence[Any]], player: int, roles: Mapping[int, str]) -> str:
    """What ``player`` is told: each new observation as ``[sender] text``, as TextArena's
    ``LLMObservationWrapper`` writes them, leaving out the player's own moves echoed back (the
    chat session already holds them as its replies)."""
    ta = _import_textarena()
    lines = []
    for item in observations:
        sender, text = int(item[0]), str(item[1])
        kind = item[2] if len(item) > 2 else None
        if sender == player and kind == ta.ObservationType.PLAYER_ACTION:
            continue
        name = "GAME" if sender == GAME_ID else roles.get(sender, f"Player {sender}")
        lines.append(f"[{name}] {text}")
    return "\n".join(lines)


@functools.lru_cache(maxsize=64)
def _describe(game: str, kwargs_json: str) -> GameSpec:
    ta = _import_textarena()
    if game not in ta.envs.registration.ENV_REGISTRY:
        close = difflib.get_close_matches(game, list(ta.envs.registration.ENV_REGISTRY), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else (
            "; game ids look like TicTacToe-v0 or GuessTheNumber-v0")
        raise InterplayError(f"env.game: textarena has no game {game!r}{hint}")
    kwargs = json.loads(kwargs_json)
    try:
        with GameRandom(0).active(), _quiet():
            ta.make(game, **kwargs)
    except Exception as exc:
        missing = missing_dependency(game, exc)
        if missing is not None:
            raise InterplayError(missing) from None
        given = f" with game_kwargs {kwargs}" if kwargs else ""
        raise InterplayError(f"env.game: textarena game {game!r} cannot be made{given}: "
                             f"{type(exc).__name__}: {_first_line(exc)}") from None
    failures: list[str] = []
    for players in PLAYER_COUNTS:
        try:
            made = Game(game, players=players, seed=0, kwargs=kwargs)
        except Exception as exc:
            missing = missing_dependency(game, exc)
            if missing is not None:
                raise InterplayError(missing) from None
            failures.append(f"with {players}: {type(exc).__name__}: {_first_line(exc)}")
            continue
        state = type(made.core.state).__name__
        # A game for any number of players may accept one; only a single-player state is
        # played alone.
        if players == 1 and state != "SinglePlayerState":
            failures.append(f"with 1: it keeps a {state}")
            continue
        return GameSpec(game=game, players=players)
    raise InterplayError(f"env.game: textarena game {game!r} does not play with 1 or 2 players "
                         f"({'; '.join(failures)}); this adapter seats single-player and "
                         f"two-player games")


def describe(game: str, kwargs: Mapping[str, Any] | None = None) -> GameSpec:
    """How many players ``game`` seats, or an InterplayError saying why it cannot run here."""
    if not game:
        raise InterplayError("env.game is not set; name a TextArena game, e.g. "
                             "--set env.game=TicTacToe-v0 (two players) or "
                             "--set env.game=GuessTheNumber-v0 (one player)")
    try:
        kwargs_json = json.dumps(dict(kwargs or {}), sort_keys=True)
    except TypeError as exc:
        raise InterplayError(f"env.game_kwargs: not plain data ({exc})") from None
    return _describe(game, kwargs_json)


def missing_dependency(game: str, exc: BaseException) -> str | None:
    """One line naming what stops ``game`` from loading here and how to get it, when ``exc``
    says something is missing (an nltk corpus, a Python package, a module this Python cannot
    compile); None for any other failure."""
    text = _ANSI.sub("", str(exc))
    if isinstance(exc, LookupError):
        resource = re.search(r"Resource\s+'?([\w./-]+)'?\s+not found", text)
        if resource:
            name = resource.group(1)
            return (f"env.game: textarena game {game!r} needs nltk's {name!r} data, which is "
                    f"not installed here (nltk searched {_nltk_paths()}); install it on a "
                    f"machine that can download it with `python -m nltk.downloader {name}` "
                    f"(or put it in a folder named by NLTK_DATA)")
    if isinstance(exc, ImportError):
        module = re.search(r"No module named '([\w.]+)'", text)
        if module:
            package = module.group(1).split(".")[0]
            return (f"env.game: textarena game {game!r} imports {package!r}, which is not "
                    f"installed; install it with `pip install {package}`")
    if isinstance(exc, SyntaxError):
        return (f"env.game: textarena game {game!r} cannot be loaded by Python "
                f"{sys.version_info.major}.{sys.version_info.minor}: its module does not "
                f"compile ({_first_line(exc)}); pick another game")
    return None


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in _ANSI.sub("", str(exc)).splitlines()
             if line.strip().strip("*")]
    return lines[0] if lines else type(exc).__name__


def _nltk_paths() -> str:
    try:
        import nltk

        paths = list(nltk.data.path)
    except Exception:
        return "its data folders"
    return f"{paths[0]} and {len(paths) - 1} more" if len(paths) > 1 else ", ".join(paths)
