"""The skill's §4 example: an asset's watermark and last_run_summary, shared by the producer and
the consumer DAG (Airflow 3 `Asset`; on Airflow 2 the same code with a `Dataset`)."""

from __future__ import annotations

from datetime import datetime, timezone

try:
    from airflow.sdk import DAG, Asset, task

    ORDERS = Asset(name="orders/daily", uri="s3://warehouse/orders/daily")
except ImportError:  # Airflow 2: assets are called datasets and are known by their URI
    from airflow.datasets import Dataset
    from airflow.decorators import task

    from airflow import DAG

    ORDERS = Dataset("s3://warehouse/orders/daily")


def fetch_records_since(watermark: str) -> list[dict]:
    # Stands in for a query such as `SELECT ... WHERE updated_at > :watermark`.
    return [{"order": n, "since": watermark} for n in range(3)]


with DAG(dag_id="producer", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):

    @task(inlets=[ORDERS], outlets=[ORDERS])
    def load(asset_state_store=None):  # injected — declare as a kwarg
        asset_state_store = asset_state_store[ORDERS]

        watermark = asset_state_store.get("watermark", default="2026-01-01T00:00:00+00:00")
        records = fetch_records_since(watermark)

        now = datetime.now(tz=timezone.utc).isoformat()
        asset_state_store.set("watermark", now)
        asset_state_store.set(
            "last_run_summary", {"rows_loaded": len(records), "completed_at": now}
        )

    load()


with DAG(dag_id="consumer", schedule=[ORDERS], start_date=datetime(2026, 1, 1), catchup=False):

    @task(inlets=[ORDERS])
    def consume(asset_state_store=None):
        asset_state_store = asset_state_store[ORDERS]
        summary = asset_state_store.get("last_run_summary") or {}
        print(
            f"Processing {summary.get('rows_loaded')} rows up to "
            f"{asset_state_store.get('watermark')}"
        )

    consume()
