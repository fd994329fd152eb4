"""The project's one exception type for errors a user can cause, and where a plugin's code
went wrong.

:class:`InterplayError` carries a one-line message that says what to change. The CLI prints it
without a traceback and exits 2. Bugs are ordinary exceptions and keep their traceback;
:func:`describe_exception` says one in a line, at the line of the plugin's own code that
raised it.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import traceback
from pathlib import Path
from typing import Any

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


class InterplayError(Exception):
    """A bad config, an unknown name, a bad input: something the user can fix. ``site``
    (``file:line``), when given, is where the thing to change is written."""

    exit_code = 2

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
