"""The documentation site as a reader gets it: ``mkdocs build --strict`` from mkdocs.yml (as
.ci/test runs it), the reference holding every public name, and the site served over HTTP and
opened in headless Chromium: the navigation shows its sections, and a click on the API
reference shows the names with their docstrings, with nothing failing to load."""

from __future__ import annotations

import asyncio
import functools
import html
import http.server
import os
import re
import subprocess
import sys
import tempfile
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_report import CHROMIUM, Browser

import interplay
import interplay.testing

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ["Getting started", "Running evals", "always_on", "Plugins", "Training data",
            "Scaling out", "Reference"]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
         "-d", str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.parametrize("module", [interplay, interplay.testing], ids=lambda m: m.__name__)
def test_the_reference_has_a_section_for_every_public_name(site: Path, module: Any) -> None:
    page = {"interplay": "reference/interplay/index.html",
            "interplay.testing": "reference/testing/index.html"}[module.__name__]
    ids = set(re.findall(r'id="([\w.]+)"', (site / page).read_text()))
    missing = [name for name in module.__all__
               if name != "__version__" and f"{module.__name__}.{name}" not in ids]
    assert missing == []
    # The methods of the test kit's classes and of the contracts a plugin subclasses too.
    kept = {"Env", "Step", "Verifier", "UserSim", "Harness"}
    for name in module.__all__:
        cls = getattr(module, name)
        if not isinstance(cls, type) or cls.__module__.split(".")[0] != "interplay" or (
                module is interplay and name not in kept):
            continue
        methods = [m for m, v in vars(cls).items() if not m.startswith("_")
                   and isinstance(v, classmethod | staticmethod | types.FunctionType)]
        undocumented = [m for m in methods if f"{module.__name__}.{name}.{m}" not in ids]
        assert undocumented == [], f"{name}: methods without a section (a docstring)"


def test_the_test_kits_servers_show_their_signature(site: Path) -> None:
    text = re.sub(r"<[^>]+>", "", (site / "reference/testing/index.html").read_text())
    assert re.search(r"ScriptedModel\(\s*script: Script \| None = None,\s*\*,\s*model: str",
                     html.unescape(text))


@pytest.fixture
def served(site: Path) -> Iterator[str]:
    """The built site on 127.0.0.1, as a static host serves it (a page is its folder's
    index.html, which file:// does not do)."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


NAV = ("Array.from(document.querySelectorAll("
       "'.md-nav--primary > .md-nav__list > .md-nav__item')).map(function(item){"
       "var link = item.querySelector('.md-nav__link');"
       "return [link.innerText.trim(), link.getBoundingClientRect().width > 0]; })")
REFERENCE = "a.md-nav__link[href$='reference/interplay/']"


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install "
                                               "chromium; .ci/setup --test installs it)")
def test_the_site_in_chromium_shows_the_navigation_and_the_reference(served: str) -> None:
    async def read() -> tuple[dict[str, Any], list[str]]:
        with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
            async with Browser(profile) as b:
                # A desktop window: narrower, the theme folds the navigation into a drawer.
                await b.send("Emulation.setDeviceMetricsOverride", width=1400, height=1000,
                             deviceScaleFactor=1, mobile=False)
                await b.open(served)
                seen: dict[str, Any] = {"nav": await b.eval(NAV),
                                        "title": await b.eval("document.title")}
                await b.click_until(REFERENCE,
                                    "location.pathname.endsWith('/reference/interplay/')")
                await b.wait_for("document.readyState === 'complete'")
                seen["harness"] = await b.eval(
                    "(function(){var h = document.getElementById('interplay.Harness');"
                    "var r = h.getBoundingClientRect();"
                    "return [h.innerText, h.parentElement.innerText, r.width > 0]; })()")
                seen["names"] = await b.eval(
                    "document.querySelectorAll('.doc-heading[id^=\"interplay.\"]').length")
                return seen, list(b.errors)

    seen, errors = asyncio.run(read())
    assert errors == []
    assert seen["title"].startswith("Getting started")
    assert [label for label, _ in seen["nav"]] == SECTIONS
    assert all(shown for _, shown in seen["nav"])
    heading, section, shown = seen["harness"]
    assert "Harness" in heading and shown
    # The docstring's first line, as the page renders it (``code`` becomes code).
    assert interplay.Harness.__doc__.split("\n")[0].strip().replace("``", "") in section
    assert seen["names"] >= len([n for n in interplay.__all__ if n != "__version__"])
