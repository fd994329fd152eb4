"""always_on_agent_verifier: an always_on run graded the way the user lived it.

The verifier (a subclass of interplay's ``rubric`` judge) lives in
:mod:`interplay_always_on_verifier.verifier`; what the judge is shown besides the user's chat
(the run's context, the wake-by-wake summary) in :mod:`interplay_always_on_verifier.summary`;
the deterministic criteria (reply latency, silence) in
:mod:`interplay_always_on_verifier.measures`; the hook in :mod:`interplay_always_on_verifier.plugin`
(found through the ``interplay`` entry-point group).
"""

from __future__ import annotations

__version__ = "0.1.0"
