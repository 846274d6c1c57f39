"""Crash-safe `BatchOperator`, `EcsRunTaskOperator` and `AthenaOperator` (blocking and
deferrable mode).

Subclasses of apache-airflow-providers-amazon's operators, same arguments and results; change
the import. How each closes the submit→persist window (docs/providers.md):

- Athena: `ClientRequestToken` = the idempotency token (unless the task sets its own
  `client_request_token`), so a resubmission after a lost id is the same query execution.
- ECS: `clientToken` = the token where the installed botocore's `RunTask` takes one (ECS
  dedupes on it), and `startedBy` = the token always, which `find_job` lists tasks by.
- Batch: no idempotency token in `SubmitJob`: the job carries the token as a tag, and
  `find_job` looks for it among the jobs of the same name in the queue.

`verify_job` refuses a stored id whose job does not carry the token of the intent it was saved
under (or, for an id stored without one, is not this operator's kind of job).
"""

from __future__ import annotations

from typing import Any

from airflow.providers.amazon.aws.operators.athena import AthenaOperator as _Athena
from airflow.providers.amazon.aws.operators.batch import BatchOperator as _Batch
from airflow.providers.amazon.aws.operators.ecs import EcsRunTaskOperator as _Ecs

from taskstate.providers._base import ProviderJob, build_trigger, step_aside

TOKEN_TAG = "taskstate-token"
"""The Batch job tag that carries the idempotency token."""

__all__ = ["AthenaOperator", "BatchOperator", "EcsRunTaskOperator"]


class AthenaOperator(ProviderJob, _Athena):  # type: ignore[misc]  # the provider is untyped here
    """`AthenaOperator`, crash-safe in blocking and deferrable mode. Returns the query
    execution id."""

    external_id_key = "athena_query_execution_id"  # upstream's key on Airflow 3.3's mixin

    def job_trigger(self, external_id: Any, context: Any) -> Any:
        from airflow.providers.amazon.aws.triggers.athena import AthenaTrigger

        self.query_execution_id = external_id
        return build_trigger(
            AthenaTrigger,
            query_execution_id=external_id,
            waiter_delay=self.sleep_time,
            waiter_max_attempts=self.max_polling_attempts,
            **_connection(self),
        )

    def submit_job(self, context: Any) -> Any:
        if self.database:
            self.query_execution_context["Database"] = self.database
        self.query_execution_context["Catalog"] = self.catalog
        if self.output_location:
            self.result_configuration["OutputLocation"] = self.output_location
        token = self.client_request_token or self.idempotency_token(context)
        self.query_execution_id = self.hook.run_query(
            self.query,
            self.query_execution_context,
            self.result_configuration,
            token,
            self.workgroup,
        )
        self._persist_link(context, self.query_execution_id)
        return self.query_execution_id

    def _persist_link(self, context: Any, query_execution_id: str) -> None:
        from airflow.providers.amazon.aws.links.athena import AthenaQueryResultsLink

        AthenaQueryResultsLink.persist(
            context=context,
            operator=self,
            region_name=self.hook.conn_region_name,
            aws_partition=self.hook.conn_partition,
            query_execution_id=query_execution_id,
        )

    def get_job_status(self, external_id: Any, context: Any) -> str:
        return str(self.hook.check_query_status(external_id))

    def is_job_active(self, status: str) -> bool:
        return bool(status in self.hook.INTERMEDIATE_STATES)

    def is_job_succeeded(self, status: str) -> bool:
        return bool(status in self.hook.SUCCESS_STATES)

    def poll_until_complete(self, external_id: Any, context: Any) -> None:
        from airflow.exceptions import AirflowException

        self.query_execution_id = external_id
        status = self.hook.poll_query_status(
            external_id, max_polling_attempts=self.max_polling_attempts, sleep_time=self.sleep_time
        )
        if status in self.hook.FAILURE_STATES:
            reason = self.hook.get_state_change_reason(external_id)
            raise AirflowException(
                f"Final state of Athena job is {status}, query_execution_id is {external_id}. "
                f"Error: {reason}"
            )
        if not status or status in self.hook.INTERMEDIATE_STATES:
            raise AirflowException(
                f"Final state of Athena job is {status}. Max tries of poll status exceeded, "
                f"query_execution_id is {external_id}."
            )

    def get_job_result(self, external_id: Any, context: Any) -> Any:
        self.query_execution_id = external_id
        return external_id

    def verify_job(self, external_id: Any, context: Any) -> bool:
        """The stored id is this task's query: same query text (and workgroup) as the task's.
        Athena does not show a query's ClientRequestToken, so the text is what can be told."""
        info = self.hook.get_query_info(external_id)["QueryExecution"]
        same_query = " ".join(str(info.get("Query", "")).split()) == " ".join(self.query.split())
        return same_query and info.get("WorkGroup", self.workgroup) == self.workgroup


class BatchOperator(ProviderJob, _Batch):  # type: ignore[misc]  # the provider is untyped here
    """`BatchOperator`, crash-safe in blocking and deferrable mode (when waiting for
    completion). Returns the job id."""

    external_id_key = "batch_job_id"

    def waits(self) -> bool:
        return bool(self.wait_for_completion) or bool(self.deferrable)

    def job_trigger(self, external_id: Any, context: Any) -> Any:
        from airflow.providers.amazon.aws.triggers.batch import BatchJobTrigger

        self.job_id = external_id
        return build_trigger(
            BatchJobTrigger,
            job_id=external_id,
            waiter_max_attempts=self.max_retries,
            waiter_delay=self.poll_interval,
            **_connection(self),
        )

    def submit_job(self, context: Any) -> Any:
        token = self.idempotency_token(context)
        tags: Any = getattr(self, "tags", None)
        if token is not None:
            self.tags = {**(tags or {}), TOKEN_TAG: token}
        try:
            _Batch.submit_job(self, context)  # the provider's: sets job_id, persists the link
        finally:
            self.tags = tags
        return self.job_id

    def find_job(self, token: str, context: Any) -> Any:
        """The job of this name in this queue tagged with `token`, or None."""
        client = self.hook.client
        pages = client.get_paginator("list_jobs").paginate(
            jobQueue=self.job_queue, filters=[{"name": "JOB_NAME", "values": [self.job_name]}]
        )
        ids = [job["jobId"] for page in pages for job in page["jobSummaryList"]]
        for start in range(0, len(ids), 100):  # DescribeJobs takes 100 ids at a time
            for job in client.describe_jobs(jobs=ids[start : start + 100])["jobs"]:
                if (job.get("tags") or {}).get(TOKEN_TAG) == token:
                    return job["jobId"]
        return None

    def verify_job(self, external_id: Any, context: Any) -> bool:
        jobs = self.hook.client.describe_jobs(jobs=[external_id])["jobs"]
        if not jobs:
            return False
        token = self.recorded_token(context)
        if token is not None:
            return (jobs[0].get("tags") or {}).get(TOKEN_TAG) == token
        return bool(jobs[0].get("jobName") == self.job_name)

    def get_job_status(self, external_id: Any, context: Any) -> str:
        return str(self.hook.get_job_description(external_id)["status"])

    def is_job_active(self, status: str) -> bool:
        return bool(status in self.hook.INTERMEDIATE_STATES)

    def is_job_succeeded(self, status: str) -> bool:
        return bool(status == self.hook.SUCCESS_STATE)

    def poll_until_complete(self, external_id: Any, context: Any) -> None:
        self.job_id = external_id
        self.monitor_job(context)  # the provider's: waits, fetches logs, raises on failure

    def get_job_result(self, external_id: Any, context: Any) -> Any:
        self.job_id = external_id
        return external_id


class EcsRunTaskOperator(ProviderJob, _Ecs):  # type: ignore[misc]  # the provider is untyped here
    """`EcsRunTaskOperator`, crash-safe in blocking and deferrable mode (when waiting for
    completion). Returns what the provider returns: the task's last log line when it fetches
    logs and pushes XComs, else None. `reattach` is not needed (the token does its job)."""

    external_id_key = "ecs_task_arn"

    def waits(self) -> bool:
        return bool(self.wait_for_completion) or bool(self.deferrable)

    def job_trigger(self, external_id: Any, context: Any) -> Any:
        from airflow.providers.amazon.aws.triggers.ecs import TaskDoneTrigger

        self.arn = external_id
        resolve_region = getattr(self, "resolve_awslogs_region", None)  # newer releases
        return build_trigger(
            TaskDoneTrigger,
            cluster=self.cluster,
            task_arn=external_id,
            waiter_delay=self.waiter_delay,
            waiter_max_attempts=self.waiter_max_attempts,
            region=self.region_name,  # the name in older releases
            log_region_name=resolve_region() if resolve_region else None,
            log_group=self.awslogs_group,
            log_stream=self._get_logs_stream_name(),
            **_connection(self),
        )

    def submit_job(self, context: Any) -> Any:
        token = self.idempotency_token(context)
        if token is not None:
            # startedBy (up to 128 letters, digits, - and _) is what find_job lists by.
            self._started_by = token
            self._send_client_token(token)
        self._start_task()  # the provider's RunTask call; sets self.arn
        if self.do_xcom_push:
            context["ti"].xcom_push(key="ecs_task_arn", value=self.arn)
        return self.arn

    def _send_client_token(self, token: str) -> None:
        """Add `clientToken` to this client's RunTask calls when botocore knows the member
        (the provider does not pass one); ECS then starts one task per token."""
        client = self.client
        members = client.meta.service_model.operation_model("RunTask").input_shape.members
        if "clientToken" not in members:
            self.log.info("botocore's RunTask has no clientToken: relying on startedBy")
            return
        self._client_token = token

        def add_token(params: dict[str, Any], **_: Any) -> None:
            params.setdefault("clientToken", self._client_token)

        # Once per client (a unique id): the handler reads the token of the current submission.
        client.meta.events.register(
            "provide-client-params.ecs.RunTask", add_token, unique_id="taskstate-client-token"
        )

    def find_job(self, token: str, context: Any) -> Any:
        """The task this cluster ran with `startedBy` = `token` (running or stopped)."""
        for desired in ("RUNNING", "STOPPED"):
            arns = self.client.list_tasks(
                cluster=self.cluster, startedBy=token, desiredStatus=desired
            )["taskArns"]
            if arns:
                return arns[0]
        return None

    def _describe(self, arn: Any) -> dict[str, Any] | None:
        tasks = self.client.describe_tasks(cluster=self.cluster, tasks=[arn])["tasks"]
        return tasks[0] if tasks else None

    def verify_job(self, external_id: Any, context: Any) -> bool:
        task = self._describe(external_id)
        if task is None:
            return False
        token = self.recorded_token(context)
        if token is not None:
            return task.get("startedBy") == token
        family = str(self.task_definition).rsplit("/", 1)[-1].split(":", 1)[0]
        return f"task-definition/{family}:" in str(task.get("taskDefinitionArn", ""))

    def get_job_status(self, external_id: Any, context: Any) -> str:
        task = self._describe(external_id)
        if task is None:
            return "MISSING"
        status = str(task.get("lastStatus"))
        if status != "STOPPED":
            return status
        # As the provider's success check: every container stopped, with exit code 0.
        containers = task.get("containers", [])
        done = all(c.get("lastStatus") == "STOPPED" and c.get("exitCode") == 0 for c in containers)
        return "STOPPED exit 0" if containers and done else "STOPPED failed"

    def is_job_active(self, status: str) -> bool:
        return not status.startswith(("STOPPED", "DELETED", "MISSING"))

    def is_job_succeeded(self, status: str) -> bool:
        return status == "STOPPED exit 0"

    def poll_until_complete(self, external_id: Any, context: Any) -> None:
        self.arn = external_id
        if self._aws_logs_enabled():  # as the provider's execute: logs while waiting
            self.task_log_fetcher = self._get_task_log_fetcher()
            self.task_log_fetcher.start()
            try:
                self._wait_for_task_ended()
            finally:
                self.task_log_fetcher.stop()
            self.task_log_fetcher.join()
        else:
            self._wait_for_task_ended()

    def get_job_result(self, external_id: Any, context: Any) -> Any:
        self.arn = external_id
        if self.do_xcom_push and self.task_log_fetcher:
            self._after_execution()  # raises unless the containers succeeded
            return self.task_log_fetcher.get_last_log_message()
        # A job that finished before this try (or without a log fetcher): the provider's
        # completion path checks success and reads the last log line from CloudWatch.
        event = {"status": "success", "task_arn": external_id, "cluster": self.cluster}
        result = _Ecs.execute_complete(self, context, event)
        return result if self.do_xcom_push else None


def _connection(operator: Any) -> dict[str, Any]:
    """How the provider's triggers reach AWS: the operator's connection settings."""
    return {
        "aws_conn_id": operator.aws_conn_id,
        "region_name": operator.region_name,
        "verify": operator.verify,
        "botocore_config": operator.botocore_config,
    }


# Where the installed provider's class is durable already, it is used as it is.
AthenaOperator = step_aside(AthenaOperator, _Athena)  # type: ignore[misc]
BatchOperator = step_aside(BatchOperator, _Batch)  # type: ignore[misc]
EcsRunTaskOperator = step_aside(EcsRunTaskOperator, _Ecs)  # type: ignore[misc]
