"""Update operations (`taskstate.ops`, docs/api.md "Update operations"): what each does, the
same through `update` on every side (local SQLite, PostgreSQL, over HTTP), one request over
HTTP, and the write ledger answering a re-sent copy. The route's wire and refusals:
tests/api/test_update_route.py."""

from __future__ import annotations

import asyncio
import math
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import Clock
from tests.stores import SIDES, Opener, opener

from taskstate import NEVER_EXPIRE, AssetScope, StateStore, TaskScope
from taskstate.backends.http import HttpBackend, Request, Response
from taskstate.errors import BackendBusyError, UnsupportedValueTypeError, UpdateOperationError
from taskstate.ops import NAMES, Op, add, append, from_wire, maximum, minimum
from taskstate.settings import Settings
from taskstate.stored import GONE

T = TaskScope("dag", "run", "task")


@pytest.mark.parametrize(
    ("op", "current", "new"),
    [
        (add(1), 4, 5),
        (add(1), None, 1),  # absent, no default: from 0
        (add(-2), 1.5, -0.5),
        (add(0.5), 1, 1.5),
        (add(2**70), 1, 2**70 + 1),  # ints stay exact ints
        (maximum(3), 5, 5),
        (maximum(7), 5, 7),
        (maximum(1.5), None, 1.5),
        (maximum("2026-01-02T00:00:00Z"), "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"),
        (minimum("b"), "a", "a"),
        (minimum(2), 3.5, 2),
        (append({"x": 1}), ["a"], ["a", {"x": 1}]),
        (append(None), None, [None]),
    ],
)
def test_each_operation_is_a_plain_function_of_the_current_value(
    op: Op, current: Any, new: Any
) -> None:
    assert op(current) == new
    assert type(op(current)) is type(new)  # an int stays an int


@pytest.mark.parametrize(
    ("op", "current", "says"),
    [
        (add(1), "3", "a number"),
        (add(1), True, "a bool"),  # JSON's true is not 1
        (add(1), [1], "a number"),
        (add(1e308), 1e308, "not finite"),
        (maximum(1), "2", "a number"),
        (maximum("a"), 1, "a str"),
        (minimum(1), False, "a bool"),
        (append(1), {"a": 1}, "a list"),
    ],
)
def test_a_value_of_the_wrong_type_is_a_typed_error_that_says_which(
    op: Op, current: Any, says: str
) -> None:
    with pytest.raises(UpdateOperationError, match=says) as raised:
        op(current)
    assert isinstance(raised.value, TypeError)


@pytest.mark.parametrize(
    "make",
    [
        lambda: add(True),
        lambda: add("1"),
        lambda: add(math.inf),
        lambda: maximum(None),
        lambda: minimum(math.nan),
        lambda: maximum([1]),
        lambda: from_wire("multiply", 2),
        lambda: from_wire("add", "2"),
    ],
)
def test_a_bad_operand_or_name_is_refused_when_the_operation_is_made(make: Any) -> None:
    with pytest.raises(UpdateOperationError):
        make()


def test_operations_are_frozen_values_with_their_wire_form() -> None:
    assert add(1) == add(1) and add(1) != add(2) and hash(add(1)) == hash(add(1))
    assert repr(maximum("x")) == "maximum('x')"
    assert [from_wire(name, 1).name for name in NAMES] == list(NAMES)
    with pytest.raises(AttributeError):
        add(1).operand = 2  # type: ignore[misc]
    with pytest.raises(UnsupportedValueTypeError):
        append((1, 2))  # the value rules: a tuple is not JSON's list


@pytest.fixture(params=SIDES)
def open_store(request: pytest.FixtureRequest, tmp_path: Path, clock: Clock) -> Iterator[Opener]:
    with ExitStack() as stack:
        yield opener(request.param, tmp_path, clock, stack)


def test_update_with_an_operation_means_the_same_on_every_side(
    open_store: Opener, clock: Clock
) -> None:
    opened = open_store()
    state = opened.store.task_state(T)
    assert state.update("n", add(1), default=0) == 1
    assert state.update("n", add(2)) == 3
    assert state.update("mark", maximum("2026-01-02")) == "2026-01-02"
    assert state.update("mark", maximum("2026-01-01")) == "2026-01-02"
    assert state.update("seen", append("a"), default=["z"]) == ["z", "a"]
    assert asyncio.run(state.aupdate("n", add(10))) == 13
    assert opened.store.asset_state(AssetScope(name="orders")).update("low", minimum(4)) == 4
    # A refusal writes nothing: not the value, not a version.
    before = state.history("mark")
    with pytest.raises(UpdateOperationError, match="a number"):
        state.update("mark", add(1))
    assert state.get("mark") == "2026-01-02" and state.history("mark") == before
    assert [v.op for v in state.history("n")] == ["update"] * 3
    # Retention as `update`'s: the server's clock counts it.
    state.update("brief", add(1), retention=timedelta(seconds=30))
    state.update("kept", add(1), retention=NEVER_EXPIRE)
    brief, kept = state.entry("brief"), state.entry("kept")
    assert brief is not None and brief.expires_at == pytest.approx(clock.now + 30, abs=1)
    assert kept is not None and kept.expires_at is None


def _counting(backend: HttpBackend) -> list[str]:
    """The paths of the requests `backend` sends from now on (the transport's own exchange,
    wrapped: every request still goes to the server)."""
    sent: list[str] = []
    exchange = backend.http._exchange

    def counted(request: Request) -> Response:
        sent.append(f"{request.method} {request.path.split('/')[-2]}")
        return exchange(request)

    backend.http._exchange = counted  # type: ignore[method-assign]
    return sent


def test_over_http_an_operation_is_one_request_and_a_function_two(
    tmp_path: Path, clock: Clock
) -> None:
    with ExitStack() as stack:
        state = opener("http", tmp_path, clock, stack)().store.task_state(T)
        assert isinstance(state._backend, HttpBackend)
        sent = _counting(state._backend)
        state.update("n", add(1), default=0)
        assert sent == ["POST taskstate-update"]
        sent.clear()
        state.update("n", lambda n: n + 1)
        assert sent == ["GET state-store", "PUT state-store"]


def test_many_writers_adding_to_one_key_over_http_land_exactly_once_and_never_busy(
    tmp_path: Path, clock: Clock
) -> None:
    # 32 threads, each on its own connection, on one key: the optimistic path gives one winner
    # per round trip (tests/backends/test_http.py); an operation never loses a race.
    threads, each = 32, 15
    with ExitStack() as stack:
        opened = opener("http", tmp_path, clock, stack)()
        state = opened.store.task_state(T)
        assert isinstance(state._backend, HttpBackend)
        sent = _counting(state._backend)
        errors: list[BaseException] = []

        def run() -> None:
            try:
                for _ in range(each):
                    state.update("hot", add(1), default=0)
            except BaseException as exc:
                errors.append(exc)

        started = [threading.Thread(target=run) for _ in range(threads)]
        for thread in started:
            thread.start()
        for thread in started:
            thread.join()
        assert not errors and not any(isinstance(e, BackendBusyError) for e in errors)
        assert opened.database.task_state(T).get("hot") == threads * each
        assert len(sent) == threads * each  # one request each: no retry, no read
        assert len(state.history("hot", 1000)) == 20  # one version each (20 kept)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/state.db"
    url: str = request.getfixturevalue("fresh_postgres_url")
    with StateStore(url) as admin:
        admin.migrate()
    return url


@pytest.mark.parametrize("history", [20, 0])
def test_a_resent_update_applies_once_and_answers_its_first_new_value(
    database_url: str, clock: Clock, history: int
) -> None:
    # What the update route does with a write id (`apply`), on each database: the ledger
    # recorded the first copy with its write, in its transaction.
    settings = Settings(history_versions=history)
    with StateStore(database_url, settings=settings, clock=clock) as store:
        first = store.task_state(T, writer={"kind": "api", "subject": "a", "write_id": "w1"})
        assert first.apply("n", add(5), 0, None, "w1") == 5
        assert first.apply("n", add(5), 0, None, "w1") == 5  # re-sent: not applied again
        assert store.task_state(T).get("n") == 5
        other = store.task_state(T, writer={"kind": "api", "subject": "b", "write_id": "w2"})
        clock.now += 1
        assert other.apply("n", add(1), 0, None, "w2") == 6
        # The key moved on: the first new value, from the ledger (history on or off).
        assert first.apply("n", add(5), 0, None, "w1") == 5
        assert store.task_state(T).get("n") == 6
        # An id that another kind of write recorded (a conditional PUT) has no value kept.
        first.write("m", 1, if_none_match=True, write_id="w3")
        assert first.apply("m", add(1), 0, None, "w3") is GONE
        assert store.task_state(T).get("m") == 1
        # `clean` forgets the ledger and the values it kept, past its horizon.
        store.backend.forget_writes(clock.now + 10, 1000)
        if database_url.startswith("sqlite"):
            with sqlite3.connect(database_url.removeprefix("sqlite:///")) as conn:
                kept = conn.execute("SELECT count(*) FROM taskstate_write_outcomes").fetchone()
            assert kept == (0,)
        assert first.apply("n", add(5), 0, None, "w1") == 11  # now a new write
