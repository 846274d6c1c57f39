"""Discovery routes: what holds state, filtered by what the caller may read, paged."""

from __future__ import annotations

import httpx
from tests.api.conftest import Served

from taskstate import AssetScope, TaskScope

V2 = "/taskstate/api/v2"


def _seed(served: Served) -> None:
    for dag, run, task, index, keys in [
        ("etl_a", "r1", "extract", -1, 2),
        ("etl_a", "r1", "load", 0, 1),
        ("etl_a", "r1", "load", 1, 3),
        ("etl_a", "r2", "extract", -1, 1),
        ("etl_b", "r1", "x", -1, 1),
        ("report", "r1", "x", -1, 4),
    ]:
        accessor = served.store.task_state(TaskScope(dag, run, task, index))
        for i in range(keys):
            accessor.set(f"k{i}", i)
    served.store.asset_state(AssetScope(name="orders")).set("w", 1)
    served.store.asset_state(AssetScope(uri="s3://b/k")).set("w", 1)


def test_everything_for_an_admin(api: httpx.Client, served: Served) -> None:
    _seed(served)
    assert api.get(f"{V2}/dags").json() == {
        "dags": [
            {"dag_id": "etl_a", "keys": 7},
            {"dag_id": "etl_b", "keys": 1},
            {"dag_id": "report", "keys": 4},
        ],
        "total_entries": 3,
        "exact_total": True,
    }
    assert api.get(f"{V2}/dags/etl_a/dagRuns").json() == {
        "dag_runs": [{"dag_run_id": "r1", "keys": 6}, {"dag_run_id": "r2", "keys": 1}],
        "total_entries": 2,
        "exact_total": True,
    }
    assert api.get(f"{V2}/dags/etl_a/dagRuns/r1/taskInstances").json() == {
        "task_instances": [
            {"task_id": "extract", "map_index": -1, "keys": 2},
            {"task_id": "load", "map_index": 0, "keys": 1},
            {"task_id": "load", "map_index": 1, "keys": 3},
        ],
        "total_entries": 3,
        "exact_total": True,
    }
    assert api.get(f"{V2}/assets").json() == {
        "assets": [{"name": "orders", "keys": 1}, {"name": "s3://b/k", "keys": 1}],
        "total_entries": 2,
        "exact_total": True,
    }


def test_paged(api: httpx.Client, served: Served) -> None:
    _seed(served)
    page = api.get(f"{V2}/dags", params={"limit": 1, "offset": 1}).json()
    # One more DAG found than the page shows: more may follow, so the total is a lower bound.
    more = {"total_entries": 3, "exact_total": False}
    assert page == {"dags": [{"dag_id": "etl_b", "keys": 1}], **more}
    last = api.get(f"{V2}/dags", params={"limit": 5, "offset": 1}).json()
    assert (len(last["dags"]), last["total_entries"], last["exact_total"]) == (2, 3, True)
    assert api.get(f"{V2}/dags/none/dagRuns").json() == {
        "dag_runs": [],
        "total_entries": 0,
        "exact_total": True,
    }


def test_filtered_by_the_callers_claims(served: Served) -> None:
    _seed(served)
    with served.client(dag_ids=("etl_*",), run_id="r1") as client:
        dags = client.get(f"{V2}/dags").json()
        assert dags["dags"] == [{"dag_id": "etl_a", "keys": 6}, {"dag_id": "etl_b", "keys": 1}]
        runs = client.get(f"{V2}/dags/etl_a/dagRuns").json()
        assert runs["dag_runs"] == [{"dag_run_id": "r1", "keys": 6}]
        assert client.get(f"{V2}/dags/report/dagRuns").status_code == 403  # not its DAG
        assert client.get(f"{V2}/assets").json() == {
            "assets": [],
            "total_entries": 0,
            "exact_total": True,
        }
    with served.client(assets=("orders",)) as client:
        assert client.get(f"{V2}/assets").json()["assets"] == [{"name": "orders", "keys": 1}]
        assert client.get(f"{V2}/dags").json()["total_entries"] == 0
    with served.client(dag_ids=("etl_a",), task_id="load", map_index=1) as client:
        tis = client.get(f"{V2}/dags/etl_a/dagRuns/r1/taskInstances").json()
        assert tis["task_instances"] == [{"task_id": "load", "map_index": 1, "keys": 3}]


def test_a_dag_or_run_the_caller_may_not_see_is_403_not_an_empty_page(served: Served) -> None:
    """Issue 30: "No run of this DAG holds state" was the answer to a token that may not see
    the DAG at all. Now 403 names why (as Airflow's own DAG routes answer), while a DAG or run
    the caller may see but that holds nothing (or nothing it may see) is still an empty 200."""
    _seed(served)
    with served.client(dag_ids=("etl_*",), run_id="r1", subject="oncall") as client:
        for path in (
            "report/dagRuns", "report/dagRuns/r1/taskInstances", "etl_a/dagRuns/r2/taskInstances"
        ):  # fmt: skip
            refused = client.get(f"{V2}/dags/{path}")
            assert refused.status_code == 403, (path, refused.text)
            detail = refused.json()["detail"]
            assert detail.startswith("'oncall' may not GET any task state of dag_id="), detail
            assert "does not cover this DAG" in detail
        assert "run_id='r2'" in refused.json()["detail"]
        empty = client.get(f"{V2}/dags/etl_none/dagRuns")  # its DAG, no state: not refused
        assert empty.json() == {"dag_runs": [], "total_entries": 0, "exact_total": True}
        assert client.get(f"{V2}/dags/etl_none/dagRuns/r1/taskInstances").status_code == 200
        access = {
            (dag, run): client.get(
                "/taskstate/ui/access", params={"dag_id": dag, **({"run_id": run} if run else {})}
            ).json()["allowed"]
            for dag, run in (("report", None), ("etl_a", None), ("etl_a", "r1"), ("etl_a", "r2"))
        }
        assert access == {
            ("report", None): False, ("etl_a", None): True,
            ("etl_a", "r1"): True, ("etl_a", "r2"): False,
        }  # fmt: skip
    with served.client(dag_ids=("etl_a",), task_id="load", read_only=True) as client:
        runs = client.get(f"{V2}/dags/etl_a/dagRuns").json()  # a part of the DAG: listed
        assert runs["dag_runs"] == [{"dag_run_id": "r1", "keys": 4}]
        assert client.get(f"{V2}/dags/etl_a/dagRuns/r2/taskInstances").json()["total_entries"] == 0
        put = client.put("/taskstate/ui/access", params={"dag_id": "etl_a"})
        assert put.json()["allowed"] is False  # read-only


def test_dag_search_is_the_servers_airflows_dag_id_pattern_paged(served: Served) -> None:
    """Issue 30: the DAG search ran in the browser over every DAG; the server searches now,
    with Airflow's `dag_id_pattern` (ILIKE '%term%', `|` for either), and answers one page."""
    _seed(served)
    for dag in ("ETL_daily", "etlx", "billing"):
        served.store.task_state(TaskScope(dag, "r", "t")).set("k", 1)
    with served.admin() as api:

        def found(pattern: str, **page: int) -> tuple[list[str], int]:
            answer = api.get(f"{V2}/dags", params={"dag_id_pattern": pattern, **page})
            assert answer.status_code == 200, answer.text
            body = answer.json()
            return [d["dag_id"] for d in body["dags"]], body["total_entries"]

        assert found("etl_") == (["ETL_daily", "etl_a", "etl_b", "etlx"], 4)  # `_`: any one
        assert found("ETL\\_") == (["ETL_daily", "etl_a", "etl_b"], 3)  # escaped: itself
        assert found("etl\\_", limit=1, offset=1) == (["etl_a"], 3)  # paged after the search
        assert found("e%y") == (["ETL_daily"], 1)
        assert found("bill|REP") == (["billing", "report"], 2)
        assert found("nothing") == ([], 0)
        assert api.get(f"{V2}/dags", params={"dag_id_pattern": "x" * 1001}).status_code == 422
        counted = api.get(f"{V2}/dags", params={"dag_id_pattern": "l\\_A"}).json()["dags"]
        assert counted == [{"dag_id": "etl_a", "keys": 7}]
    with served.client(dag_ids=("etl_*",), run_id="r1") as client:  # within what it may see
        answer = client.get(f"{V2}/dags", params={"dag_id_pattern": "l_"}).json()
        dags = [{"dag_id": "etl_a", "keys": 6}, {"dag_id": "etl_b", "keys": 1}]
        assert answer == {"dags": dags, "total_entries": 2, "exact_total": True}


def test_expired_state_is_not_listed(api: httpx.Client, served: Served) -> None:
    from datetime import timedelta

    served.store.task_state(TaskScope("gone", "r", "t")).set("k", 1, retention=timedelta(seconds=5))
    assert api.get(f"{V2}/dags").json()["total_entries"] == 1
    served.clock.now += 6
    assert api.get(f"{V2}/dags").json()["total_entries"] == 0


def test_a_glob_lists_only_its_dags_and_pins_narrow_the_counts(served: Served) -> None:
    _seed(served)
    for dag in ("etlx", "etl%", "etl_\\"):  # LIKE's own characters are data, not patterns
        served.store.task_state(TaskScope(dag, "r1", "x")).set("k", 1)
    with served.client(dag_ids=("etl_*",)) as client:
        dags = [d["dag_id"] for d in client.get(f"{V2}/dags").json()["dags"]]
        assert dags == ["etl_\\", "etl_a", "etl_b"]
    with served.client(dag_ids=("etl%",)) as client:
        assert client.get(f"{V2}/dags").json()["dags"] == [{"dag_id": "etl%", "keys": 1}]
    with served.client(dag_ids=("etl_a",), run_id="r1", task_id="load") as client:
        assert client.get(f"{V2}/dags").json()["dags"] == [{"dag_id": "etl_a", "keys": 4}]
        runs = client.get(f"{V2}/dags/etl_a/dagRuns").json()
        assert runs == {
            "dag_runs": [{"dag_run_id": "r1", "keys": 4}],
            "total_entries": 1,
            "exact_total": True,
        }


def test_ids_are_read_from_the_path_as_sent(api: httpx.Client, served: Served) -> None:
    """Defects 6 and 12 on the listings: `%2F` stays inside a dag or run id, `.`/`..` are ids,
    and a segment that is not UTF-8 is 422 (after 401), never folded into U+FFFD."""
    for dag, run in (("a/b", "r/1"), ("a", "r"), (".", ".."), ("\ufffd", "r")):
        served.store.task_state(TaskScope(dag, run, "t")).set("k", 1)
    runs = api.get(f"{V2}/dags/a%2Fb/dagRuns").json()
    assert runs["dag_runs"] == [{"dag_run_id": "r/1", "keys": 1}]
    instances = api.get(f"{V2}/dags/a%2Fb/dagRuns/r%2F1/taskInstances").json()
    assert instances["task_instances"] == [{"task_id": "t", "map_index": -1, "keys": 1}]
    assert api.get(f"{V2}/dags/a/dagRuns").json()["dag_runs"] == [{"dag_run_id": "r", "keys": 1}]
    dots = api.get(f"{V2}/dags/%2E/dagRuns/%2E%2E/taskInstances").json()
    assert dots["total_entries"] == 1
    for path in (f"{V2}/dags/%FF/dagRuns", f"{V2}/dags/a/dagRuns/%FE/taskInstances"):
        assert api.get(path).status_code == 422
        assert httpx.get(served.base + path).status_code == 401
