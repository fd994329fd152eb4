"""Export formats plugins register (``register_export_formats``): the command's side of the
:class:`~interplay.contracts.exporter.ExportFormat` contract. It finds the run, checks the output,
streams the episodes (whole records, in file order) to the format, and puts what it wrote in place
only once whole: a format that fails leaves what was there before."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from interplay.contracts.exporter import ExportFormat, Written
from interplay.errors import InterplayError
from interplay.log import get_logger
from interplay.plugins import host as plugins
from interplay.run.results import CONFIG_FILE, EPISODES_FILE, iter_episodes, whole_record

log = get_logger("interplay.export")

#: The formats the kernel writes itself (interplay.export.files).
BUILTIN_FORMATS = ("sft", "rl", "hf")


def export_format(name: str) -> ExportFormat:
    """The registered format ``name``; an unknown one is one line naming every format."""
    try:
        cls = plugins.get("export-formats", name)
    except InterplayError as exc:
        # The registry's line names the plugins' formats (and any plugin that failed to load).
        raise InterplayError(f"--format {name}: {exc}; the kernel's own: "
                             f"{', '.join(BUILTIN_FORMATS)}") from None
    return cls()  # type: ignore[no-any-return]


def export_plugged(name: str, run: str | Path, output: str | Path | None = None,
                   ) -> tuple[Path, Written]:
    """Write the run ``run`` (a results folder or its episodes.jsonl) in the registered format
    ``name`` to ``output`` (default: the file the format's
    :meth:`~interplay.contracts.exporter.ExportFormat.output_name` names, in the results folder)."""
    fmt = export_format(name)
    run = Path(run)
    episodes = run / EPISODES_FILE if run.is_dir() else run
    if not episodes.is_file():
        where = f"{run} holds no {EPISODES_FILE}" if run.is_dir() else f"{run} does not exist"
        raise InterplayError(f"{where}; name a results folder of `interplay eval` (or its "
                             f"{EPISODES_FILE})")
    folder = episodes.parent
    config_path = folder / CONFIG_FILE
    run_config: dict[str, Any] = {}
    if config_path.is_file():
        run_config = json.loads(config_path.read_text())
    out = Path(output) if output is not None else folder / fmt.output_name(run_config)
    if not out.parent.is_dir():
        raise InterplayError(f"-o {out}: its folder {out.parent} does not exist; make it or "
                             f"choose another -o")
    if out.is_dir() and not fmt.writes_folder:
        raise InterplayError(f"-o {out}: is a folder; name a file")
    if out.exists() and not out.is_dir() and fmt.writes_folder:
        raise InterplayError(f"-o {out}: is a file; --format {name} writes a folder, name one")

    def records() -> Iterator[dict[str, Any]]:
        for record in iter_episodes(episodes):
            yield whole_record(record, folder)

    if fmt.writes_folder:
        return out, _write_folder(fmt, records(), out, run_config)
    # Made as every export file is (open's mode, under the umask), not mkstemp's 0600.
    tmp = str(out.parent / f".export-{uuid.uuid4().hex}{out.suffix}")
    with open(tmp, "xb"):
        pass
    try:
        written = fmt.write(records(), Path(tmp), run_config=run_config)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    log.info("export.done", format=name, episodes=written.episodes, output_path=str(out))
    return out, written


def _write_folder(fmt: ExportFormat, records: Iterator[dict[str, Any]], out: Path,
                  run_config: dict[str, Any]) -> Written:
    """A folder format written into a fresh folder beside ``out`` and then put in its place
    (what was there before is kept until the new one is whole, then removed)."""
    tmp = out.parent / f".export-{uuid.uuid4().hex}"
    os.mkdir(tmp)  # the mode every export gets, under the umask
    old = out.parent / f".export-{uuid.uuid4().hex}-old"
    try:
        written = fmt.write(records, tmp, run_config=run_config)
        if out.exists():
            os.rename(out, old)
        os.rename(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    log.info("export.done", format=fmt.name, episodes=written.episodes, output_path=str(out))
    return written
