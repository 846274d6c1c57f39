"""Crash-safe `DbtCloudRunJobOperator` (waiting for termination, blocking or deferrable).

A subclass of apache-airflow-providers-dbt-cloud's operator, same arguments and result (the run
id); change the import. dbt Cloud takes no idempotency token, so the run's `cause` carries it
(`<trigger_reason> [<token>]`, within the API's 255 characters) and `find_job` looks for it
among the job's runs; `verify_job` refuses a stored run id of another job, or whose cause does
not carry the token of the intent it was saved under.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.dbt.cloud.hooks.dbt import DbtCloudJobRunException, DbtCloudJobRunStatus
from airflow.providers.dbt.cloud.operators.dbt import DbtCloudRunJobOperator as _DbtCloud

from taskstate.providers._base import ProviderJob, build_trigger, step_aside

CAUSE_MAX_LENGTH = 255  # dbt Cloud's limit on a run's cause
RUNS_SEARCHED = 100  # find_job reads the job's newest runs, one page

__all__ = ["DbtCloudRunJobOperator"]


class DbtCloudRunJobOperator(ProviderJob, _DbtCloud):  # type: ignore[misc]  # the provider is untyped here
    """`DbtCloudRunJobOperator`, crash-safe in blocking and deferrable mode. Returns the run
    id."""

    external_id_key = "dbt_cloud_run_id"

    def waits(self) -> bool:
        return bool(self.wait_for_termination)

    def job_trigger(self, external_id: Any, context: Any) -> Any:
        from airflow.providers.dbt.cloud.triggers.dbt import DbtCloudRunJobTrigger

        self.run_id = external_id
        return build_trigger(
            DbtCloudRunJobTrigger,
            conn_id=self.dbt_cloud_conn_id,
            run_id=external_id,
            **self.deadlines(self.timeout),
            account_id=self.account_id,
            poll_interval=self.check_interval,
            hook_params=getattr(self, "hook_params", None),
        )

    def _job(self) -> int:
        job_id: Any = getattr(self, "job_id", None)
        if job_id is None:
            if not all([self.project_name, self.environment_name, self.job_name]):
                raise ValueError(
                    "Either job_id or project_name, environment_name, and job_name must be "
                    "provided."
                )
            job_id = self.job_id = self.hook.get_job_by_name(
                account_id=self.account_id,
                project_name=self.project_name,
                environment_name=self.environment_name,
                job_name=self.job_name,
            )["id"]
        return int(job_id)

    def _cause(self, context: Any, token: str | None) -> str:
        reason = self.trigger_reason or (
            f"Triggered via Apache Airflow by task {self.task_id!r} in the {self.dag_id} DAG."
        )
        if getattr(self, "openlineage_inject_parent_job_info", False):
            # The provider replaces the cause with OpenLineage's JSON: no room for the token.
            from airflow.providers.dbt.cloud.utils.openlineage import (
                inject_parent_job_information_into_dbt_cloud_cause,
            )

            return str(inject_parent_job_information_into_dbt_cloud_cause(reason, context["ti"]))
        if token is None:
            return reason
        marker = f" [{token}]"
        return reason[: CAUSE_MAX_LENGTH - len(marker)] + marker

    def submit_job(self, context: Any) -> Any:
        job_id = self._job()
        run = None
        if self.reuse_existing_run:  # the provider's option: adopt a run of the job in flight
            runs = self.hook.get_job_runs(
                account_id=self.account_id,
                payload={
                    "job_definition_id": job_id,
                    "status__in": str(list(DbtCloudJobRunStatus.NON_TERMINAL_STATUSES.value)),
                    "order_by": "-created_at",
                },
            ).json()["data"]
            run = runs[0] if runs else None
        if run is None:
            run = self.hook.trigger_job_run(
                account_id=self.account_id,
                job_id=job_id,
                cause=self._cause(context, self.idempotency_token(context)),
                steps_override=self.steps_override,
                schema_override=self.schema_override,
                retry_from_failure=int(context["ti"].try_number) != 1 and self.retry_from_failure,
                additional_run_config=self.additional_run_config,
            ).json()["data"]
        self.run_id = run["id"]
        context["ti"].xcom_push(key="job_run_url", value=run["href"])
        context["ti"].xcom_push(key="job_run_id", value=self.run_id)
        return self.run_id

    def _runs(self, **payload: Any) -> list[dict[str, Any]]:
        response = self.hook.get_job_runs(account_id=self.account_id, payload=payload)
        return list(response.json()["data"])

    def find_job(self, token: str, context: Any) -> Any:
        """The run of this job whose cause carries `token` (among its newest runs), or None."""
        runs = self._runs(
            job_definition_id=self._job(),
            order_by="-created_at",
            include_related=["trigger"],
            limit=RUNS_SEARCHED,
        )
        for run in runs:
            if token in str((run.get("trigger") or {}).get("cause", "")):
                return run["id"]
        return None

    def verify_job(self, external_id: Any, context: Any) -> bool:
        run = self.hook.get_job_run(
            run_id=external_id, account_id=self.account_id, include_related=["trigger"]
        ).json()["data"]
        if run.get("job_definition_id") != self._job():
            return False
        token = self.recorded_token(context)
        return token is None or token in str((run.get("trigger") or {}).get("cause", ""))

    def get_job_status(self, external_id: Any, context: Any) -> str:
        status = self.hook.get_job_run_status(run_id=external_id, account_id=self.account_id)
        return str(DbtCloudJobRunStatus(status).name)

    def is_job_active(self, status: str) -> bool:
        return not DbtCloudJobRunStatus.is_terminal(DbtCloudJobRunStatus[status].value)

    def is_job_succeeded(self, status: str) -> bool:
        return bool(status == DbtCloudJobRunStatus.SUCCESS.name)

    def poll_until_complete(self, external_id: Any, context: Any) -> None:
        self.run_id = external_id
        self.log.info("Waiting for job run %s to terminate.", external_id)
        if not self.hook.wait_for_job_run_status(
            run_id=external_id,
            account_id=self.account_id,
            expected_statuses=DbtCloudJobRunStatus.SUCCESS.value,
            check_interval=self.check_interval,
            timeout=self.timeout,
        ):
            raise DbtCloudJobRunException(
                f"Job run {external_id} has failed or has been cancelled."
            )

    def get_job_result(self, external_id: Any, context: Any) -> Any:
        self.run_id = external_id
        return external_id


# Where the installed provider's class is durable already, it is used as it is.
DbtCloudRunJobOperator = step_aside(DbtCloudRunJobOperator, _DbtCloud)  # type: ignore[misc]
