from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from taskstate import StateStore
from taskstate.settings import Settings


class Clock:
    """A settable clock, so expiry is tested without sleeping."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/state.db"


@pytest.fixture
def store(db_url: str, clock: Clock) -> Iterator[StateStore]:
    with StateStore(db_url, settings=Settings(), clock=clock) as s:
        yield s
