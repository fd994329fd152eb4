"""``python -m interplay_openenv.serve --app MODULE:ATTR --port N --parent PID``: serve an
OpenEnv app on 127.0.0.1 with uvicorn for one run, and die with the run.

Started by :class:`interplay_openenv.server.LocalServer`. On Linux the kernel kills this process
when the process that started it dies, however it dies (SIGKILL leaves the run no say), so a
killed run leaves no server behind.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys


def die_with_parent(parent: int) -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        sys.exit(0)  # the parent died before the line above


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m interplay_openenv.serve")
    parser.add_argument("--app", required=True, help="the ASGI app, as MODULE:ATTRIBUTE")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True, help="die when this pid dies")
    args = parser.parse_args(argv)
    die_with_parent(args.parent)
    # As `uvicorn MODULE:ATTR` does: an app in the working directory imports.
    sys.path.insert(0, os.getcwd())
    import uvicorn

    uvicorn.run(args.app, host="127.0.0.1", port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
