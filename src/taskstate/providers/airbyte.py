"""Crash-safe `AirbyteTriggerSyncOperator` (not asynchronous; blocking or deferrable).

A subclass of apache-airflow-providers-airbyte's operator, same arguments and result (the job
id); change the import. Airbyte takes no idempotency token and a job carries nothing of ours:
before submitting, the operator saves the time (`airbyte_job_id__submitted_at`), and `find_job`
takes the connection's first sync job started from then on (Airbyte runs one sync per
connection at a time, so that is the one the killed try started unless another client started
one in the same moments). `verify_job` refuses a stored id that is not a sync of this
connection.
"""

from __future__ import annotations

import datetime
from typing import Any

from airflow.providers.airbyte.hooks.airbyte import AirbyteHook
from airflow.providers.airbyte.operators.airbyte import AirbyteTriggerSyncOperator as _Airbyte

from taskstate.providers._base import ProviderJob, build_trigger, step_aside

__all__ = ["AirbyteTriggerSyncOperator"]

_ACTIVE = ("running", "pending", "incomplete")
CLOCK_SKEW = datetime.timedelta(seconds=5)
"""How far Airbyte's clock may lag this worker's when `find_job` compares start times."""
JOBS_SEARCHED = 20


class AirbyteTriggerSyncOperator(ProviderJob, _Airbyte):  # type: ignore[misc]  # the provider is untyped here
    """`AirbyteTriggerSyncOperator`, crash-safe in blocking and deferrable mode. Returns the
    job id."""

    external_id_key = "airbyte_job_id"  # upstream's key on Airflow 3.3's mixin

    def waits(self) -> bool:
        return not self.asynchronous

    def job_trigger(self, external_id: Any, context: Any) -> Any:
        """The provider's trigger, polling every `wait_seconds` (the provider's own deferrable
        path polls once a minute, whatever the task says)."""
        from airflow.providers.airbyte.triggers.airbyte import AirbyteSyncTrigger

        self.job_id = external_id
        return build_trigger(
            AirbyteSyncTrigger,
            conn_id=self.airbyte_conn_id,
            job_id=external_id,
            poll_interval=self.wait_seconds,
            **self.deadlines(self.timeout),
        )

    def _hook(self) -> AirbyteHook:
        return AirbyteHook(airbyte_conn_id=self.airbyte_conn_id, api_version=self.api_version)

    @property
    def submitted_at_key(self) -> str:
        return self.external_id_key + "__submitted_at"

    def submit_job(self, context: Any) -> Any:
        store = context.get("task_state_store")
        if store is not None and self.durable:
            now = datetime.datetime.now(datetime.timezone.utc)
            store.set(self.submitted_at_key, now.isoformat())
        job = self._hook().submit_sync_connection(connection_id=self.connection_id)
        self.job_id = job.job_id
        self.log.info("Job %s was submitted to Airbyte Server", self.job_id)
        return self.job_id

    def find_job(self, token: str, context: Any) -> Any:
        """The connection's first sync job started since this submission began, or None."""
        from airbyte_api.api import ListJobsRequest
        from airbyte_api.models import JobTypeEnum

        store = context.get("task_state_store")
        since = store.get(self.submitted_at_key) if store is not None else None
        if since is None:
            raise NotImplementedError  # nothing to tell our job from others by
        earliest = datetime.datetime.fromisoformat(since) - CLOCK_SKEW
        listed = self._hook().airbyte_api.jobs.list_jobs(
            request=ListJobsRequest(
                connection_id=self.connection_id,
                job_type=JobTypeEnum.SYNC,
                order_by="createdAt|DESC",
                limit=JOBS_SEARCHED,
            )
        )
        jobs = listed.jobs_response.data if listed.jobs_response else []
        ours = [job for job in jobs if _started(job.start_time) >= earliest]
        return min(ours, key=lambda job: _started(job.start_time)).job_id if ours else None

    def verify_job(self, external_id: Any, context: Any) -> bool:
        job = self._hook().get_job_details(job_id=int(external_id))
        return bool(job.connection_id == self.connection_id and _value(job.job_type) == "sync")

    def get_job_status(self, external_id: Any, context: Any) -> str:
        return _value(self._hook().get_job_status(job_id=int(external_id)))

    def is_job_active(self, status: str) -> bool:
        return status in _ACTIVE

    def is_job_succeeded(self, status: str) -> bool:
        return status == "succeeded"

    def poll_until_complete(self, external_id: Any, context: Any) -> None:
        self.job_id = external_id
        self._hook().wait_for_job(
            job_id=external_id, wait_seconds=self.wait_seconds, timeout=self.timeout
        )

    def get_job_result(self, external_id: Any, context: Any) -> Any:
        self.job_id = external_id
        return external_id


def _started(start_time: str) -> datetime.datetime:
    started = datetime.datetime.fromisoformat(start_time)
    return started if started.tzinfo else started.replace(tzinfo=datetime.timezone.utc)


def _value(status: Any) -> str:
    """An airbyte_api enum member (or a plain string) as its wire value."""
    return str(getattr(status, "value", status))


# Where the installed provider's class is durable already, it is used as it is.
AirbyteTriggerSyncOperator = step_aside(AirbyteTriggerSyncOperator, _Airbyte)  # type: ignore[misc]
