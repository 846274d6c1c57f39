"""401 for who, 403 for what: every claim shape against every route, over real HTTP."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from tests.api.conftest import OTHER_SECRET, SECRET, Served, _serve
from tests.conftest import Clock

from taskstate import AssetScope, TaskScope
from taskstate.api.tokens import Claims, SigningKeys, key_id
from taskstate.errors import InvalidTokenError

SCOPE = TaskScope("etl_daily", "r1", "t1", 0)
ASSET = AssetScope(name="orders")
TASK = "/taskstate/api/v2/dags/etl_daily/dagRuns/r1/taskInstances/t1/state-store"
ASSETS = "/taskstate/api/v2/assets/state-store"
HISTORY = TASK.replace("/state-store", "/taskstate-history")
ASSET_HISTORY = ASSETS.replace("/state-store", "/taskstate-history")
SOON = "2027-01-15T08:00:01Z"  # just after the test clock's now (keys are live then)
LATEST = {"version": "latest"}  # a restore's body: the key's newest kept version (`_body`)
ON_TASK = {"map_index": 0}
ON_ASSET = {"name": "orders"}

# (name, method, path, params, body, what it touches)
OPERATIONS: list[tuple[str, str, str, dict[str, Any], Any, str]] = [
    ("list", "GET", TASK, ON_TASK, None, "task-read"),
    ("get", "GET", f"{TASK}/k", ON_TASK, None, "task-read"),
    ("put", "PUT", f"{TASK}/k", ON_TASK, {"value": 2}, "task-write"),
    ("patch", "PATCH", f"{TASK}/k", ON_TASK, {"value": 2}, "task-write"),
    ("delete", "DELETE", f"{TASK}/k", ON_TASK, None, "task-write"),
    ("clear", "DELETE", TASK, ON_TASK, None, "task-write"),
    ("clear-all", "DELETE", TASK, {"all_map_indices": "true"}, None, "task-all"),
    ("asset-list", "GET", ASSETS, ON_ASSET, None, "asset-read"),
    ("asset-get", "GET", f"{ASSETS}/k", ON_ASSET, None, "asset-read"),
    ("asset-put", "PUT", f"{ASSETS}/k", ON_ASSET, {"value": 2}, "asset-write"),
    ("asset-delete", "DELETE", f"{ASSETS}/k", ON_ASSET, None, "asset-write"),
    ("asset-clear", "DELETE", ASSETS, ON_ASSET, None, "asset-write"),
    # State history: a read-only token may read it, not restore.
    ("history", "GET", f"{HISTORY}/k", ON_TASK, None, "task-read"),
    ("as-of", "GET", f"{HISTORY}/k", {**ON_TASK, "as_of": SOON}, None, "task-read"),
    ("restore-preview", "GET", HISTORY, {**ON_TASK, "as_of": SOON}, None, "task-read"),
    ("restore", "POST", f"{HISTORY}/k", ON_TASK, LATEST, "task-write"),
    ("restore-task", "POST", HISTORY, {"all_map_indices": "true"},
     {"as_of": SOON}, "task-all"),
    ("asset-history", "GET", f"{ASSET_HISTORY}/k", ON_ASSET, None, "asset-read"),
    ("asset-restore", "POST", f"{ASSET_HISTORY}/k", ON_ASSET, LATEST, "asset-write"),
]  # fmt: skip
TASK_ALL = {"task-read", "task-write", "task-all"}
ASSET_ALL = {"asset-read", "asset-write"}

# (claims, what they allow)
SHAPES: list[tuple[dict[str, Any], set[str]]] = [
    ({"admin": True}, TASK_ALL | ASSET_ALL),
    ({"admin": True, "read_only": True}, {"task-read", "asset-read"}),
    ({"dag_ids": ("etl_*",)}, TASK_ALL),
    ({"dag_ids": ("other", "etl_daily")}, TASK_ALL),
    ({"dag_ids": ("other*",)}, set()),
    ({"dag_ids": ("ETL_*",)}, set()),  # globs are case-sensitive, like dag ids
    ({"dag_ids": ("etl_daily",), "run_id": "r1"}, TASK_ALL),
    ({"dag_ids": ("etl_daily",), "run_id": "r2"}, set()),
    ({"dag_ids": ("etl_daily",), "run_id": "r1", "task_id": "t1"}, TASK_ALL),
    ({"dag_ids": ("etl_daily",), "task_id": "t2"}, set()),
    ({"dag_ids": ("etl_daily",), "task_id": "t1", "map_index": 0}, {"task-read", "task-write"}),
    ({"dag_ids": ("etl_daily",), "task_id": "t1", "map_index": 1}, set()),
    ({"dag_ids": ("etl_daily",), "try_number": 3}, TASK_ALL),
    ({"dag_ids": ("etl_*",), "read_only": True}, {"task-read"}),
    ({"assets": ("orders",)}, ASSET_ALL),
    ({"assets": ("orders",), "read_only": True}, {"asset-read"}),
    ({"assets": ("other",)}, set()),
    ({"dag_ids": ("etl_*",), "assets": ("orders",)}, TASK_ALL | ASSET_ALL),
    ({}, set()),
]


def _seed(served: Served) -> None:
    served.store.task_state(SCOPE).set("k", 1)
    served.store.asset_state(ASSET).set("k", 1)


def _body(served: Served, path: str, body: Any) -> Any:
    if body is not LATEST:
        return body
    state = (
        served.store.asset_state(ASSET) if "/assets/" in path else served.store.task_state(SCOPE)
    )
    return {"version": state.history("k", 1)[0].version}


def _state(served: Served) -> tuple[object, object]:
    return (
        served.store.task_state(SCOPE).items(),
        served.store.asset_state(ASSET).items(),
    )


@pytest.mark.parametrize(("claims", "allowed"), SHAPES, ids=[str(c) for c, _ in SHAPES])
def test_claims_decide_every_route(
    served: Served, claims: dict[str, Any], allowed: set[str]
) -> None:
    with served.client(served.token(**claims)) as client:
        for name, method, path, params, body, touches in OPERATIONS:
            _seed(served)
            before = _state(served)
            response = client.request(method, path, params=params, json=_body(served, path, body))
            if touches in allowed:
                assert response.status_code in (200, 204), (name, response.text)
            else:
                assert response.status_code == 403, (name, response.text)
                assert "may not" in response.json()["detail"]
                assert _state(served) == before, name  # refused: nothing written


def _bad_tokens() -> list[tuple[str, str]]:
    keys = SigningKeys([SECRET])
    other = SigningKeys([OTHER_SECRET])
    good = Claims(subject="x", admin=True)
    forged_signature = jwt.encode(
        good.payload(time.time()), OTHER_SECRET, algorithm="HS256", headers={"kid": key_id(SECRET)}
    )
    wrong_audience = jwt.encode(
        {"sub": "x", "aud": "airflow", "admin": True}, SECRET, headers={"kid": key_id(SECRET)}
    )
    no_audience = jwt.encode({"sub": "x", "admin": True}, SECRET, headers={"kid": key_id(SECRET)})
    none_alg = jwt.encode(
        {**good.payload(time.time())}, None, algorithm="none", headers={"kid": key_id(SECRET)}
    )
    bad_claims = jwt.encode(
        {"sub": "x", "aud": "taskstate", "dag_ids": "etl_*"},
        SECRET,
        headers={"kid": key_id(SECRET)},
    )
    return [
        ("expired", keys.issue(Claims(subject="x", admin=True, expires_at=time.time() - 1))),
        ("unknown-key", other.issue(good)),
        ("forged-signature", forged_signature),
        ("wrong-audience", wrong_audience),
        ("no-audience", no_audience),
        ("alg-none", none_alg),
        ("malformed-claims", bad_claims),
        ("not-a-jwt", "garbage"),
        ("truncated", keys.issue(good)[:-5]),
    ]


@pytest.mark.parametrize(("why", "token"), _bad_tokens(), ids=[w for w, _ in _bad_tokens()])
def test_bad_tokens_are_401_on_every_route(served: Served, why: str, token: str) -> None:
    with served.client(token) as client:
        for name, method, path, params, body, _ in OPERATIONS:
            _seed(served)
            before = _state(served)
            response = client.request(method, path, params=params, json=_body(served, path, body))
            assert response.status_code == 401, (why, name, response.text)
            assert response.headers["www-authenticate"] == "Bearer"
            assert _state(served) == before


@pytest.mark.parametrize("header", [None, "Basic YWRtaW46YWRtaW4=", "Bearer", "Token abc"])
def test_missing_credentials_are_401(served: Served, header: str | None) -> None:
    headers = {} if header is None else {"Authorization": header}
    with httpx.Client(base_url=served.base, headers=headers) as client:
        for route in (TASK, f"{ASSETS}?name=orders", "/taskstate/api/v2/dags"):
            response = client.get(route)
            assert response.status_code == 401
            assert "detail" in response.json()


def test_401_comes_before_422(served: Served) -> None:
    with httpx.Client(base_url=served.base) as client:
        assert client.put(f"{TASK}/k", params={"map_index": "x"}, content="junk").status_code == 401


def test_403_comes_before_422(served: Served) -> None:
    with served.client(dag_ids=("other",)) as client:
        assert client.put(f"{TASK}/k", content="junk").status_code == 403


def test_rotated_keys_verify_and_the_first_signs(tmp_path: Path, clock: Clock) -> None:
    old = SigningKeys([SECRET]).issue(Claims(subject="old", admin=True))
    for served in _serve(tmp_path, clock, SigningKeys([OTHER_SECRET, SECRET])):
        with served.client(old) as client:
            assert client.get(TASK).status_code == 200
        new = served.token(admin=True)
        assert jwt.get_unverified_header(new)["kid"] == key_id(OTHER_SECRET)


def test_token_expiry_is_honoured_to_the_second(served: Served) -> None:
    # Over HTTP: an expired token is refused, a live one served. No window to hit in time (a
    # token minted to expire in 2 s failed its first request on a loaded machine).
    now = time.time()
    expired = served.token(admin=True, expires_at=now - 1)
    live = served.token(admin=True, expires_at=now + 3600)
    with served.client(expired) as client:
        refused = client.get(TASK)
        assert refused.status_code == 401 and "expired" in refused.text, refused.text
    with served.client(live) as client:
        assert client.get(TASK).status_code == 200
    # To the second, on the server's own check: valid until `exp`, refused from `exp` on.
    assert served.keys is not None
    exp = int(now) + 60
    token = served.token(admin=True, expires_at=exp)
    assert served.keys.verify(token, now=exp - 0.001).admin
    with pytest.raises(InvalidTokenError, match="expired"):
        served.keys.verify(token, now=exp)


def test_writes_record_the_token_subject(served: Served) -> None:
    with served.client(dag_ids=("etl_*",), subject="nightly-job") as client:
        client.put(f"{TASK}/who", params=ON_TASK, json={"value": 1})
        assert client.get(f"{TASK}/who", params=ON_TASK).json()["last_updated_by"] == {
            "kind": "api",
            "subject": "nightly-job",
        }


def test_open_server_allows_all_and_writes_as_anonymous(open_served: Served) -> None:
    with open_served.client() as client:
        assert client.put(f"{TASK}/k", params=ON_TASK, json={"value": 1}).status_code == 204
        body = client.get(f"{TASK}/k", params=ON_TASK).json()
        assert body["last_updated_by"] == {"kind": "api", "subject": "anonymous"}
