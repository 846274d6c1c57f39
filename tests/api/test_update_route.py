"""The update route over real HTTP (docs/api.md, "Update operations"): its wire, a re-sent
copy answered from the write ledger, who may call it, and the typed refusals. What each
operation does, and the Python client over it: tests/test_ops.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.types import ASGIApp, Receive, Scope, Send
from tests.api.conftest import SECRET, Served, _serve
from tests.api.server import running
from tests.conftest import Clock

from taskstate import AssetScope, StateStore, TaskScope
from taskstate.api.serve import standalone_app
from taskstate.api.tokens import SigningKeys
from taskstate.backends.http import HttpBackend
from taskstate.errors import OutcomeUnknownError
from taskstate.ops import add
from taskstate.settings import Settings

SCOPE = TaskScope("d", "r", "t")
BASE = "/taskstate/api/v2/dags/d/dagRuns/r/taskInstances/t"
UPDATE = BASE + "/taskstate-update"
STATE = BASE + "/state-store"


def test_an_update_answers_the_new_value_and_records_an_update_version(
    served: Served, api: httpx.Client
) -> None:
    answer = api.post(f"{UPDATE}/a%2Fb", json={"op": "add", "value": 2, "default": 40})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"key": "a/b", "value": 42}
    assert api.get(f"{STATE}/a%2Fb").json()["value"] == 42
    versions = api.get(f"{BASE}/taskstate-history/a%2Fb").json()["versions"]
    assert [(v["op"], v["updated_by"]) for v in versions] == [
        ("update", {"kind": "api", "subject": "admin"})
    ]
    asset = api.post(
        "/taskstate/api/v2/assets/taskstate-update/low",
        params={"name": "orders"},
        json={"op": "minimum", "value": "b"},
    )
    assert asset.json() == {"key": "low", "value": "b"}
    assert served.store.asset_state(AssetScope(name="orders")).get("low") == "b"


def test_a_resent_copy_applies_once_and_answers_the_first_new_value(
    served: Served, api: httpx.Client
) -> None:
    first = {"X-Taskstate-Write-Id": "one"}
    body = {"op": "add", "value": 1, "default": 0}
    assert api.post(f"{UPDATE}/n", json=body, headers=first).json()["value"] == 1
    assert api.post(f"{UPDATE}/n", json=body, headers=first).json()["value"] == 1
    assert served.store.task_state(SCOPE).get("n") == 1
    served.clock.now += 1
    assert api.post(f"{UPDATE}/n", json=body, headers={"X-Taskstate-Write-Id": "two"}).json() == {
        "key": "n",
        "value": 2,
    }
    # The key moved on: the first copy's value, which the ledger kept with it.
    assert api.post(f"{UPDATE}/n", json=body, headers=first).json()["value"] == 1
    assert served.store.task_state(SCOPE).get("n") == 2
    # One id names one write: never another key's.
    used = api.post(f"{UPDATE}/other", json=body, headers=first)
    assert used.status_code == 412 and "another key" in used.text


def test_without_history_a_moved_on_key_still_answers_the_first_new_value(
    tmp_path: Path, clock: Clock
) -> None:
    for served in _serve(tmp_path, clock, SigningKeys([SECRET]), history_versions=0):
        with served.admin() as api:
            body, first = {"op": "add", "value": 1}, {"X-Taskstate-Write-Id": "one"}
            api.post(f"{UPDATE}/n", json=body, headers=first)
            for _ in range(30):  # far past any kept history
                api.post(f"{UPDATE}/n", json=body)
            assert api.post(f"{UPDATE}/n", json=body, headers=first).json() == {
                "key": "n",
                "value": 1,
            }
            assert served.store.task_state(SCOPE).get("n") == 31
            # An id a conditional PUT recorded: applied, no value kept to answer with.
            put = {"X-Taskstate-Write-Id": "put", "If-None-Match": "*"}
            assert api.put(f"{STATE}/m", json={"value": 1}, headers=put).status_code == 204
            again = api.post(f"{UPDATE}/m", json=body, headers={"X-Taskstate-Write-Id": "put"})
            assert again.json() == {"key": "m"}
            assert served.store.task_state(SCOPE).get("m") == 1


def test_a_read_only_token_may_not_update(served: Served) -> None:
    with served.client(dag_ids=("d",), read_only=True) as reader:
        refused = reader.post(f"{UPDATE}/n", json={"op": "add", "value": 1})
    assert refused.status_code == 403
    assert served.store.task_state(SCOPE).get("n") is None


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"op": "multiply", "value": 2}, None),  # not an operation
        ({"op": "add"}, None),  # no operand
        ({"op": "add", "value": 1, "extra": 1}, None),
        ({"op": "add", "value": True}, "UpdateOperationError"),  # a bool is not a number
        ({"op": "add", "value": 1, "expires_in": 5, "expires_at": None}, None),
        ({"op": "add", "value": 1, "expires_in": -1}, None),
    ],
)
def test_a_bad_body_is_a_typed_422_and_writes_nothing(
    served: Served, api: httpx.Client, body: dict[str, object], error: str | None
) -> None:
    refused = api.post(f"{UPDATE}/n", json=body)
    assert refused.status_code == 422, refused.text
    assert refused.headers.get("x-taskstate-error") == error
    assert served.store.task_state(SCOPE).get("n") is None


def test_an_operation_on_a_value_of_another_type_is_refused_with_what_was_wrong(
    served: Served, api: httpx.Client
) -> None:
    api.put(f"{STATE}/n", json={"value": "three"})
    refused = api.post(f"{UPDATE}/n", json={"op": "add", "value": 1})
    assert refused.status_code == 422
    assert refused.headers["x-taskstate-error"] == "UpdateOperationError"
    assert "a number" in refused.text and "'three'" in refused.text
    assert served.store.task_state(SCOPE).get("n") == "three"


class _Older:
    """A server from before the update route: its POST there is FastAPI's plain 404."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and "/taskstate-update/" in scope["path"]:
            start = {"type": "http.response.start", "status": 404,
                     "headers": [(b"content-type", b"application/json")]}  # fmt: skip
            await send(start)
            await send({"type": "http.response.body", "body": b'{"detail":"Not Found"}'})
            return
        await self.app(scope, receive, send)


@pytest.fixture
def older(tmp_path: Path, clock: Clock) -> Iterator[tuple[StateStore, str]]:
    """The database, and the older server's base URL."""
    with (
        StateStore(f"sqlite:///{tmp_path}/state.db", settings=Settings(), clock=clock) as db,
        running(_Older(standalone_app(db, None))) as base,
    ):
        yield db, base


def test_an_older_server_gets_the_optimistic_path(older: tuple[StateStore, str]) -> None:
    database, base = older
    backend = HttpBackend(base + "/taskstate")
    with StateStore(settings=Settings(), backend=backend) as store:
        state = store.task_state(SCOPE)
        assert state.update("n", add(1), default=0) == 1
        assert not backend.http.update_route  # asked once, then GET + conditional PUT
        assert state.update("n", add(1)) == 2
    assert database.task_state(SCOPE).get("n") == 2


class _MidUpgrade:
    """A balancer over a new replica and an older one: the first update request reaches the
    new one and is applied, but the balancer loses its answer (a 502); the re-sent copy lands
    on the older replica, which has no update route."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.updates = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or "/taskstate-update/" not in scope["path"]:
            await self.app(scope, receive, send)
            return
        self.updates += 1
        if self.updates == 1:

            async def lost(message: dict) -> None:  # type: ignore[type-arg]
                if message["type"] == "http.response.start":
                    message = {**message, "status": 502, "headers": []}
                elif message["type"] == "http.response.body":
                    message = {**message, "body": b""}
                await send(message)

            await self.app(scope, receive, lost)
            return
        await _Older(self.app)(scope, receive, send)


def test_a_resent_update_that_meets_an_older_replica_is_an_unknown_outcome_not_a_second_try(
    tmp_path: Path, clock: Clock
) -> None:
    with (
        StateStore(f"sqlite:///{tmp_path}/state.db", settings=Settings(), clock=clock) as db,
        running(balancer := _MidUpgrade(standalone_app(db, None))) as base,
    ):
        backend = HttpBackend(base + "/taskstate")
        with StateStore(settings=Settings(), backend=backend) as store:
            state = store.task_state(SCOPE)
            state.set("seen", 1)  # the ledger is announced with the first write's answer
            with pytest.raises(OutcomeUnknownError, match="does not know the request"):
                state.update("n", add(1), default=0)
        assert balancer.updates == 2
        assert db.task_state(SCOPE).get("n") == 1  # applied once, by the first copy
