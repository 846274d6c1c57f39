"""Amazon's `RedshiftDataOperator` and `GlueJobOperator` (apache-airflow-providers-amazon from
PyPI, unchanged) against the tests' AWS server on loopback, with try 1 of each task faulted at a
named point: `after_persist` (the job submitted and its id saved, as the operator starts
polling), `while_polling` (the second status check of the polling loop, the job still active)
or `in_window` (the job accepted, its id not saved yet: the bench only). The fault is a SIGKILL
of the task process under a scheduler, an exception under `dags test` (which runs tasks in its
own process): TS_PROVIDER_FAULT = kill | raise | none; TS_PROVIDER_FAULTS lists the points (one task
per operator and point). Each job names its logical job (`<run_id>|<task_id>`) in its SQL or
its Glue arguments, which is how the service's ledger counts jobs per logical job.

The subclasses add only the fault and a report: submit, status, polling and results are the
provider's, and the mixin they inherit is whatever `airflow.sdk` / the provider's compatibility
import resolved (taskstate's with `[state_store] taskstate_provider_durable = True`). Each
finished try writes a report to $VERSUS_OUT.
"""

from __future__ import annotations

import json
import os
import signal
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.providers.amazon.aws.operators.glue import GlueJobOperator
from airflow.providers.amazon.aws.operators.redshift_data import RedshiftDataOperator
from airflow.sdk import DAG


def _fault(context: Any) -> None:
    how = os.environ.get("TS_PROVIDER_FAULT", "kill")
    if int(context["ti"].try_number) != 1 or how == "none":
        return
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError("try 1 fails here on purpose (TS_PROVIDER_FAULT=raise)")


class _Faulted:
    """Faults try 1 at `fault_at`; `polled` names the hook method the polling loop calls."""

    fault_at: str
    polled: str

    def submit_job(self, context: Any) -> Any:
        external_id = super().submit_job(context)  # type: ignore[misc]
        if self.fault_at == "in_window":
            _fault(context)
        return external_id

    def poll_until_complete(self, external_id: Any, context: Any) -> None:
        if self.fault_at == "after_persist":
            _fault(context)
        else:
            hook = self.hook  # type: ignore[attr-defined]
            check = getattr(hook, self.polled)
            calls = []

            def counted(*args: Any, **kwargs: Any) -> Any:
                calls.append(1)
                if len(calls) == 2:
                    _fault(context)
                return check(*args, **kwargs)

            setattr(hook, self.polled, counted)
        super().poll_until_complete(external_id, context)  # type: ignore[misc]

    def execute(self, context: Any) -> Any:
        result = super().execute(context)  # type: ignore[misc]
        ti = context["ti"]
        store = context.get("task_state_store")
        mixin = next(k for k in type(self).__mro__ if k.__name__ == "ResumableJobMixin")
        report = {
            "run_id": ti.run_id,
            "task_id": ti.task_id,
            "map_index": ti.map_index,
            "try_number": int(ti.try_number),
            "mixin": mixin.__module__,
            "durable": self.durable,  # type: ignore[attr-defined]
            "stored": None if store is None else store.get(self.external_id_key),  # type: ignore[attr-defined]
            "result": result,
        }
        out = Path(os.environ["VERSUS_OUT"]) / f"{ti.task_id}.json"
        out.write_text(json.dumps(report))
        return result


class FaultedRedshift(_Faulted, RedshiftDataOperator):
    polled = "check_query_is_finished"

    def __init__(self, *, fault_at: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fault_at = fault_at


class FaultedGlue(_Faulted, GlueJobOperator):
    polled = "get_job_state"

    def __init__(self, *, fault_at: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fault_at = fault_at


with DAG(
    "ts_provider_durable",
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=0)},
):
    logical = "{{ run_id }}|{{ ti.task_id }}"
    for fault_at in os.environ.get("TS_PROVIDER_FAULTS", "after_persist,while_polling").split(","):
        FaultedRedshift(
            task_id=f"redshift_{fault_at}",
            fault_at=fault_at,
            sql=f"SELECT '{logical}'",
            database="dev",
            cluster_identifier="analytics",
            db_user="etl",
            poll_interval=1,
        )
        FaultedGlue(
            task_id=f"glue_{fault_at}",
            fault_at=fault_at,
            job_name=f"ts_{fault_at}",
            script_location="s3://scripts/etl.py",
            script_args={"--logical": logical},
            iam_role_arn="arn:aws:iam::123456789012:role/glue",
            # Glue's default (1) would refuse a second run while the first still runs: a
            # retry without the setting would fail rather than submit again.
            concurrent_run_limit=4,
            job_poll_interval=1,
        )
