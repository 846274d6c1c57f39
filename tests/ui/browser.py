"""Debian's chromium driven by Playwright (its own browser download is not reachable here).

`chromium()` installs the package with apt-get when it is missing, as tests/postgres_server.py
does for PostgreSQL, so CI on a fresh machine needs nothing beforehand.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Browser, sync_playwright
from tests.postgres_server import apt_install

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


def chromium_path() -> Path:
    if CHROMIUM.exists():
        return CHROMIUM
    apt_install("chromium")
    if not CHROMIUM.exists():
        raise RuntimeError("chromium not found: apt-get install chromium (as root)")
    return CHROMIUM


@contextmanager
def launched() -> Iterator[Browser]:
    path = chromium_path()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(path), args=ARGS)
        try:
            yield browser
        finally:
            browser.close()
