"""A real taskstate server per test: a fresh SQLite store, a settable clock, uvicorn on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from tests.api.server import running
from tests.conftest import Clock

from taskstate import StateStore
from taskstate.api.serve import standalone_app
from taskstate.api.tokens import Claims, SigningKeys
from taskstate.settings import Settings

SECRET = "test-secret-key-0123456789abcdefghijklmnop"
OTHER_SECRET = "another-secret-key-0123456789abcdefghijklm"
TASK = "/taskstate/api/v2/dags/d/dagRuns/r/taskInstances/t/state-store"


def key_path(key: str) -> str:
    """A key as one path segment: `/` and everything else reserved encoded, and the dot
    segments `.`/`..` spelled `%2E` so no client or proxy normalises them away."""
    if key in (".", ".."):
        return key.replace(".", "%2E")
    return quote(key, safe="")


@dataclass
class Served:
    base: str  # http://127.0.0.1:<port>
    store: StateStore
    clock: Clock
    keys: SigningKeys | None

    def client(self, token: str | None = None, **claims: Any) -> httpx.Client:
        if token is None and claims:
            token = self.token(**claims)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.base, headers=headers, timeout=30)

    def token(self, **claims: Any) -> str:
        assert self.keys is not None
        claims.setdefault("subject", "tester")
        return self.keys.issue(Claims(**claims))

    def admin(self) -> httpx.Client:
        return self.client(admin=True, subject="admin")


def _serve(tmp: Path, clock: Clock, keys: SigningKeys | None, **settings: Any) -> Iterator[Served]:
    store = StateStore(
        f"sqlite:///{tmp}/state.db", settings=replace(Settings(), **settings), clock=clock
    )
    with store, running(standalone_app(store, keys)) as base:
        yield Served(base, store, clock, keys)


@pytest.fixture
def served(tmp_path: Path, clock: Clock) -> Iterator[Served]:
    """Tokens required (the secret key is set)."""
    yield from _serve(tmp_path, clock, SigningKeys([SECRET]))


@pytest.fixture
def open_served(tmp_path: Path, clock: Clock) -> Iterator[Served]:
    """No secret key: the open loopback server."""
    yield from _serve(tmp_path, clock, None)


@pytest.fixture
def api(served: Served) -> Iterator[httpx.Client]:
    with served.admin() as client:
        yield client
