"""Crash-safe `AirbyteTriggerSyncOperator` (blocking mode: not asynchronous, not deferrable).

A subclass of apache-airflow-providers-airbyte's operator, same arguments and result (the job
id); change the import. Airbyte takes no idempotency token and a job carries nothing of ours,
but it runs one sync per connection at a time: `find_job` takes the connection's sync job that
is still running (the one the killed try started, unless someone started another meanwhile),
and `verify_job` refuses a stored id that is not a sync of this connection.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.airbyte.hooks.airbyte import AirbyteHook
from airflow.providers.airbyte.operators.airbyte import AirbyteTriggerSyncOperator as _Airbyte

from taskstate.providers._base import ProviderJob, step_aside

__all__ = ["AirbyteTriggerSyncOperator"]

_ACTIVE = ("running", "pending", "incomplete")


class AirbyteTriggerSyncOperator(ProviderJob, _Airbyte):
    """`AirbyteTriggerSyncOperator`, crash-safe in blocking mode. Returns the job id."""

    external_id_key = "airbyte_job_id"  # upstream's key on Airflow 3.3's mixin

    def blocking(self) -> bool:
        return not self.asynchronous and not self.deferrable

    def _hook(self) -> AirbyteHook:
        return AirbyteHook(airbyte_conn_id=self.airbyte_conn_id, api_version=self.api_version)

    def submit_job(self, context: Any) -> Any:
        job = self._hook().submit_sync_connection(connection_id=self.connection_id)
        self.job_id = job.job_id
        self.log.info("Job %s was submitted to Airbyte Server", self.job_id)
        return self.job_id

    def find_job(self, token: str, context: Any) -> Any:
        """The connection's newest sync job that is still running, or None."""
        from airbyte_api.api import ListJobsRequest
        from airbyte_api.models import JobTypeEnum

        listed = self._hook().airbyte_api.jobs.list_jobs(
            request=ListJobsRequest(
                connection_id=self.connection_id,
                job_type=JobTypeEnum.SYNC,
                order_by="createdAt|DESC",
                limit=20,
            )
        )
        for job in listed.jobs_response.data if listed.jobs_response else []:
            if _value(job.status) in _ACTIVE:
                return job.job_id
        return None

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


def _value(status: Any) -> str:
    """An airbyte_api enum member (or a plain string) as its wire value."""
    return str(getattr(status, "value", status))


# Where the installed provider's class is durable already, it is used as it is.
AirbyteTriggerSyncOperator = step_aside(AirbyteTriggerSyncOperator, _Airbyte)  # type: ignore[misc]
