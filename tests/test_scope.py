"""Scope fields follow the key rules (one place: `taskstate.values.name_problem`) and Airflow's
length bounds; every name the rules accept is stored and read back by every backend."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tests.stores import opener

from taskstate import AssetScope, StateStore, TaskScope
from taskstate.errors import InvalidKeyError, InvalidScopeError, TaskStateError
from taskstate.scope import MAX_LENGTHS, parse_namespace, task_prefix
from taskstate.settings import Settings

BAD_TEXT = ["", "a\x00b", "tab\there", "new\nline", "\x1f", "\x7f", "lone \ud800", "\udfff"]


@pytest.mark.parametrize("bad", BAD_TEXT)
@pytest.mark.parametrize(
    "make",
    [
        lambda v: TaskScope(v, "r", "t"),
        lambda v: TaskScope("d", v, "t"),
        lambda v: TaskScope("d", "r", v),
        lambda v: AssetScope(name=v),
        lambda v: AssetScope(uri=v),
        lambda v: task_prefix(v),
    ],
)
def test_bad_scope_fields_are_scope_errors(make: Callable[[str], Any], bad: str) -> None:
    with pytest.raises(InvalidScopeError):
        make(bad)


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    return StateStore(f"sqlite:///{tmp_path}/state.db", settings=Settings())


@pytest.mark.parametrize(
    ("field", "make"),
    [
        ("dag_id", lambda v: TaskScope(v, "r", "t")),
        ("run_id", lambda v: TaskScope("d", v, "t")),
        ("task_id", lambda v: TaskScope("d", "r", v)),
        ("name", lambda v: AssetScope(name=v)),
        ("uri", lambda v: AssetScope(uri=v)),
    ],
)
def test_fields_are_bounded_as_in_airflow_on_write(
    store: StateStore, field: str, make: Callable[[str], TaskScope | AssetScope]
) -> None:
    limit = MAX_LENGTHS[field]
    at_limit, over = make("é" * limit), make("é" * (limit + 1))
    accessor: Callable[[Any], Any] = (
        store.task_state if isinstance(at_limit, TaskScope) else store.asset_state
    )
    accessor(at_limit).set("k", 1)
    assert accessor(at_limit).get("k") == 1
    with pytest.raises(InvalidScopeError, match=f"{field} is at most {limit} characters"):
        accessor(over).set("k", 1)
    with pytest.raises(InvalidScopeError):
        accessor(over).update("k", lambda v: 1, default=0)
    assert accessor(over).get("k") is None  # reading is fine, and nothing was written


def test_rows_written_before_the_bounds_stay_readable_and_deletable(store: StateStore) -> None:
    long = TaskScope("d" * 400, "r", "t")
    store.backend.set(long.namespace, "k", "1", None, store.clock())  # as an older taskstate did
    accessor = store.task_state(long)
    assert accessor.get("k") == 1
    assert accessor.keys() == ["k"]
    assert parse_namespace(long.namespace) == long
    accessor.delete("k")
    assert accessor.get("k") is None


# Any text at all: the rules must refuse it with a typed error, or every backend must store it.
any_text = st.lists(
    st.sampled_from(["a", "é", "😀", "\x00", "\x1f", "\n", "\x7f", "\ud800", "\udfff", "/", "%"])
    | st.characters(codec=None),
    max_size=10,
).map("".join)


def round_trip_or_typed_error(store: StateStore, dag_id: str, key: str) -> None:
    try:
        accessor = store.task_state(TaskScope(dag_id, "run", "task"))
        accessor.set(key, "v")
    except (InvalidScopeError, InvalidKeyError):
        return
    assert accessor.get(key) == "v"
    assert [r.key for r in store.backend.scan(accessor.scope.namespace)] == [key]
    accessor.delete(key)


@given(dag_id=any_text, key=any_text)
def test_any_text_is_refused_typed_or_round_trips_on_sqlite(
    tmp_path_factory: pytest.TempPathFactory, dag_id: str, key: str
) -> None:
    path = tmp_path_factory.getbasetemp() / "names.db"
    with StateStore(f"sqlite:///{path}", settings=Settings()) as store:
        round_trip_or_typed_error(store, dag_id, key)


@pytest.fixture(scope="module", params=["asgi", "wsgi"])
def served_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StateStore]:
    """The store over HTTP: ids and keys as path segments of the API. `asgi`: the app `serve`
    serves, under uvicorn (`tests/stores.py`); `wsgi`: the app the Airflow 2 plugin serves,
    through a2wsgi under a WSGI server (werkzeug's, which like gunicorn keeps the request's
    raw target in `RAW_URI`), mounted at `/taskstate` as the plugin's blueprint mounts it."""
    root = tmp_path_factory.mktemp("names")
    with ExitStack() as stack:
        if request.param == "asgi":
            yield opener("http", root, time.time, stack)().store
            return
        yield stack.enter_context(_wsgi_served(root))


@contextmanager
def _wsgi_served(root: Path) -> Iterator[StateStore]:
    from a2wsgi import ASGIMiddleware
    from werkzeug.middleware.dispatcher import DispatcherMiddleware
    from werkzeug.serving import make_server

    from taskstate.api.app import create_app
    from taskstate.api.auth import Auth
    from taskstate.api.tokens import Claims, SigningKeys
    from taskstate.backends.http import HttpBackend

    keys = SigningKeys(["wsgi-names-test-secret-0123456789abcdefgh"])
    with StateStore(f"sqlite:///{root}/wsgi.db") as database:
        app = ASGIMiddleware(create_app(database, Auth.standalone(keys)))  # type: ignore[arg-type]
        mounted = DispatcherMiddleware(lambda e, s: [], {"/taskstate": app})
        server = make_server("127.0.0.1", 0, mounted, threaded=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        token = keys.issue(Claims(subject="names", admin=True))
        backend = HttpBackend(f"http://127.0.0.1:{server.server_port}/taskstate", token=token)
        try:
            with StateStore(settings=Settings(), backend=backend) as store:
                yield store
        finally:
            server.shutdown()


@settings(max_examples=25)  # a handful of requests each; the examples below always run
@given(dag_id=any_text, key=any_text)
@example(dag_id="a/b", key="state-store/x")
@example(dag_id="..", key=".")
@example(dag_id="%2F", key="%FF")
@example(dag_id="é/%", key="a%2Fb")
def test_any_text_is_refused_typed_or_round_trips_over_http(
    served_store: StateStore, dag_id: str, key: str
) -> None:
    """Defect 6: `/`, `%`, `.`/`..` and non-ASCII ids and keys reach their own scope and key
    through the API's paths, the discovery listings included, whatever the text — under an
    ASGI server and under the WSGI one Airflow 2 serves the plugin with."""
    round_trip_or_typed_error(served_store, dag_id, key)


def test_scope_errors_are_value_errors() -> None:
    assert issubclass(InvalidScopeError, ValueError)
    assert issubclass(InvalidScopeError, TaskStateError)
