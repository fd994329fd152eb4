"""Whether a sandbox backend can run here, for the tests that need it (:func:`docker_problem`:
the docker backend's own check when a run starts: its SDK, a daemon that answers, the image),
and the pytest fixture ``docker_sandbox`` (``interplay.testing.pytest_plugin``) that skips a
test with the reason.

This module owns that question; it must not start a daemon or build an image (``.ci/setup
--test`` does, as docs/sandboxes.md says).
"""

from __future__ import annotations

import functools


@functools.cache
def docker_problem(image: str | None = None) -> str | None:
    """Why the docker sandbox cannot run here (its SDK missing, no daemon answering, ``image``
    — by default the one it starts from — not on the daemon), in one line; None when it can.
    Asked once per process and image."""
    from interplay import plugins
    from interplay.records import Workspace
    from interplay.sandbox import SandboxNeeds

    try:
        backend = plugins.get("sandboxes", "docker")()
    except Exception as exc:
        return str(exc)
    problems = backend.check() or backend.problems(Workspace(image=image), SandboxNeeds())
    return problems[0] if problems else None
