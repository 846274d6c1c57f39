"""The wire module is the one statement of the API's shape: the server's models and the UI's
`app.js` use no path or field it does not name, and its error table round-trips."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from taskstate import errors, wire
from taskstate.api import models
from taskstate.scope import TaskScope

APP_JS = Path(wire.__file__).parent / "ui" / "static" / "app.js"


def _shape(path: str) -> str:
    """A route with its parameters blanked: `/dags/{dag_id}/x` and `dags/${keyPath(d)}/x` alike."""
    return re.sub(r"\$?\{[^}]*\}+", "{}", path.removeprefix("/api/v2/").removeprefix("/"))


def test_every_api_path_app_js_calls_is_a_wire_route() -> None:
    text = APP_JS.read_text()
    called = re.findall(
        r"(?:getJson|call)\((?:(?:\"[A-Z]+\"|method), )?[\"`](?![A-Z]+\")([^\"`]+)[\"`]", text
    )
    called += re.findall(r"return `(dags/[^`]+)`", text)  # the task state route's base
    known = {_shape(route) for route in wire.ROUTES}
    known |= {_shape(route) + "/{}" for route in wire.ROUTES_WITH_KEYS}
    known |= {"access"}  # UI_ACCESS, relative to the UI's own base
    assert len(called) >= 8, called
    unknown = {path for path in called if _shape(path) not in known}
    unknown.discard("${base}/${keyPath(key)}")  # the task route's base + a key
    unknown.discard("${base}/${keyPath(entry.key)}")
    assert not unknown


def test_every_field_app_js_reads_or_sends_is_a_wire_field() -> None:
    # app.js itself is camelCase: every snake_case name in it is the API's (or the page's own
    # address, which reuses the API's names).
    text = APP_JS.read_text()
    names = set(re.findall(r"\.([a-z]+_[a-z_]+)\b", text))
    names |= set(re.findall(r"[{,]\s*([a-z]+_[a-z_]+):", text))
    assert {"task_state_store", "total_entries", "last_updated_by", "map_index"} <= names
    assert names - wire.FIELDS <= {"run_id"}  # the page address's run (the writer's too)


def test_every_model_field_is_a_wire_field() -> None:
    for model in vars(models).values():
        if isinstance(model, type) and issubclass(model, BaseModel) and model is not BaseModel:
            assert set(model.model_fields) <= wire.FIELDS, model.__name__


@pytest.mark.parametrize("kind", [kind for kind, _, _ in wire.ERRORS])
def test_each_typed_error_comes_back_as_its_own_class(kind: type[errors.TaskStateError]) -> None:
    exc = kind("the message")
    status, _ = wire.error_status(exc)
    name = wire.error_headers(exc)[wire.ERROR_HEADER]
    back = wire.error_from_response(status, name, {"detail": "the message"}, "h/route")
    if kind is errors.InvalidTokenError:  # a refusal of the credentials: the client's class
        assert isinstance(back, errors.AccessDeniedError)
    elif kind is errors.TaskStateError:
        assert type(back) is errors.BackendError
    else:
        assert type(back) is kind and "the message" in str(back)


def test_a_404_without_the_error_header_is_no_such_route() -> None:
    back = wire.error_from_response(404, None, {"detail": "Not Found"}, "http://h/wrong/path")
    assert isinstance(back, errors.ConfigError) and "http://h/wrong/path" in str(back)
    absent = wire.error_from_response(404, "KeyNotFoundError", {"detail": "no"}, "h")
    assert isinstance(absent, errors.KeyNotFoundError)


def test_413_and_a_size_422_are_the_same_error() -> None:
    """Defect 10: the body limit (413) and the store's size rule (422) raise one class."""
    assert isinstance(
        wire.error_from_response(413, None, "too big", "h"), errors.ValueTooLargeError
    )
    big = wire.error_from_response(422, "ValueTooLargeError", {"detail": [{"msg": "m"}]}, "h")
    assert isinstance(big, errors.ValueTooLargeError)


@pytest.mark.parametrize("name", [".", "..", "a/b", "%2F", "a b", "ключ"])
def test_ids_and_keys_are_one_segment_never_a_dot_segment(name: str) -> None:
    """Defect 6: `.`/`..` ids are spelled %2E (no URL layer removes them); `/` is escaped."""
    path = wire.task_path(TaskScope(name, "r", "t"))
    dag = path.split("/")[4]
    assert dag not in (".", "..") and "/" not in dag
    assert wire.key_path("/c", name).count("/") == 2


def test_a_lost_commit_is_a_500_the_client_never_resends() -> None:
    """503 means "certainly not applied, send again"; a write whose COMMIT answer the store lost
    may have landed, so the server says so with its own class on a 500 (no server paths), and
    the client raises it without resending: the remote accessor re-reads its write id."""
    from taskstate.api.errors import taskstate_error
    from taskstate.backends.http import TRANSIENT

    code, body, headers = taskstate_error(errors.OutcomeUnknownError("/srv/state.db: lost"))
    assert code == 500 and code not in TRANSIENT
    assert headers[wire.ERROR_HEADER] == "OutcomeUnknownError"
    assert b"may or may not" in body and b"/srv" not in body
    back = wire.error_from_response(code, "OutcomeUnknownError", {"detail": "x"}, "h")
    assert type(back) is errors.OutcomeUnknownError


@pytest.mark.parametrize("key", ["k", 'q"uo\\te', "clé/ü 🙂", "a\u2028b"])
def test_an_entry_answered_from_its_row_is_the_decoded_entrys_json(
    key: str, tmp_path: Path
) -> None:
    """The server answers a GET from the stored text (`wire.entry_json`): the same bytes the
    decoded entry gives through the API's encoder, for task and asset keys alike, with and
    without an expiry or a known writer."""
    from taskstate import AssetScope, StateStore
    from taskstate.api.errors import dumps
    from taskstate.values import NEVER_EXPIRE

    value = {"text": 'é\u2028"\\ 🙂', "n": [1, 2.5, -0.0, 10**40, True, None], "o": {}}
    with StateStore(f"sqlite:///{tmp_path}/state.db") as store:
        task = store.task_state(TaskScope("d", "r", "t"))
        asset = store.asset_state(AssetScope(name="a"))
        task.set(key, value)
        task.set(key + "2", value, retention=NEVER_EXPIRE)
        asset.set(key, value)
        for accessor, render in [(task, wire.task_entry), (asset, wire.asset_entry)]:
            for name in (key, key + "2") if accessor is task else (key,):
                row = accessor.live_row(name)
                assert row is not None
                entry = store.entry_of(row)
                assert entry is not None
                spliced = wire.entry_json(row, expiry=accessor is task)
                assert spliced == dumps(render(entry))
        assert asset.live_row(key).updated_by is None  # type: ignore[union-attr]
