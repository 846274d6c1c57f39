"""Browser tests of the state pages against `taskstate serve`'s app (uvicorn on loopback, a
real SQLite store, real time: the page computes expiry from the browser's clock)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page
from tests.api.server import running
from tests.ui.browser import DESKTOP, launched

from taskstate import StateStore
from taskstate.api.serve import standalone_app
from taskstate.api.tokens import Claims, SigningKeys
from taskstate.settings import Settings

SECRET = "ui-test-secret-key-0123456789abcdefghijkl"


# Package scope: Playwright's sync API keeps an event loop running while it is started, and
# a later test calling `asyncio.run` (the async accessors' tests) would fail beside it.
@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    with launched() as browser:
        yield browser


@dataclass
class Served:
    base: str  # http://127.0.0.1:<port>
    store: StateStore
    keys: SigningKeys | None

    @property
    def ui(self) -> str:
        return f"{self.base}/taskstate/ui/"

    def token(self, **claims: Any) -> str:
        assert self.keys is not None
        claims.setdefault("subject", "tester")
        return self.keys.issue(Claims(**claims))


def _serve(tmp: Path, keys: SigningKeys | None, **settings: Any) -> Iterator[Served]:
    store = StateStore(f"sqlite:///{tmp}/state.db", settings=replace(Settings(), **settings))
    with store, running(standalone_app(store, keys)) as base:
        yield Served(base, store, keys)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """Open (no secret key), as `taskstate serve` on loopback; a 1 KiB value limit."""
    yield from _serve(tmp_path, None, max_value_storage_bytes=1024)


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Served]:
    """Tokens required."""
    yield from _serve(tmp_path, SigningKeys([SECRET]))


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    page.set_default_timeout(10_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert not errors, f"the page raised: {errors}"
