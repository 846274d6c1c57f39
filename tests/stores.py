"""The store two ways, for the accessor tests: a local SQLite store, and the same store reached
over HTTP through the app `taskstate serve` serves, under uvicorn on loopback.

Both sides run on the test's settable clock (the served store is opened with it, as
`StateStore(clock=...)` is for any caller), so expiry is the server's clock's to decide and a
test moves time without sleeping. `Opened.database` is the store where the database is — the
local store itself, or the server's — for what only runs there (`cleanup`, counting expired
rows, reading a stored row).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from tests.api.server import running

from taskstate import StateStore
from taskstate.api.serve import standalone_app
from taskstate.api.tokens import Claims, SigningKeys
from taskstate.backends.http import HttpBackend
from taskstate.settings import Settings

SIDES = ("local", "http")
SECRET = "accessor-tests-secret-key-0123456789abcdef"


@dataclass
class Opened:
    store: StateStore  # what the test's accessors use
    database: StateStore  # where the database is
    url: str  # the store's URL, as [state_store] taskstate_url names it
    token: str = ""  # [state_store] taskstate_token for it


Opener = Callable[..., Opened]


def opener(side: str, root: Path, clock: Callable[[], float], stack: ExitStack) -> Opener:
    """`open(settings)` → a fresh store under `root` on `clock`, closed with `stack`."""
    numbers = itertools.count()

    def open_(settings: Settings | None = None) -> Opened:
        settings = settings or Settings()
        url = f"sqlite:///{root}/state-{next(numbers)}.db"
        database = stack.enter_context(StateStore(url, settings=settings, clock=clock))
        if side == "local":
            return Opened(database, database, url)
        keys = SigningKeys([SECRET])
        base = stack.enter_context(running(standalone_app(database, keys)))
        token = keys.issue(Claims(subject="accessor-tests", admin=True))
        backend = HttpBackend(base + "/taskstate", token=token)
        remote = StateStore(settings=settings, backend=backend, clock=clock)
        return Opened(stack.enter_context(remote), database, backend.url, token)

    return open_
