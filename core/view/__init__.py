"""``interplay view [FOLDER]``: every run under a folder as a read-only local web app, live
while the runs write: the runs with their scores (:mod:`interplay.view.folder`), a run's page
and its episodes, two runs side by side (:mod:`interplay.view.app`), each page rendered by the
report's own templates and functions (:mod:`interplay.report`, :mod:`interplay.compare`). A
run is read as its episodes file grows, never whole again (:mod:`interplay.view.runs`); the
command and its server are :mod:`interplay.view.command`.

It writes nothing, serves nothing but what it renders from the runs it found under the folder
and its own scripts, and listens on 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

from interplay.view.command import Viewer, add_view

__all__ = ["Viewer", "add_view"]
