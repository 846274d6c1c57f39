"""Deferrable resumable jobs under a real scheduler and triggerer: every kill point, two tasks.

`DeferrableBatchOperator` (taskstate's mixin, `execute_deferrable`) submits to the tests' real
job system (tests/resumable/jobsystem.py, path in RESUMABLE_JOBSYSTEM, table in
RESUMABLE_JOBS_DB) and defers to `JobTrigger`, which polls it from the triggerer and keeps its
poll count in the task's state (`TriggerStateMixin`). Each task SIGKILLs its own worker at the
point `kill_at` names for a try (writing `<run_id>.<task>.kills` first); `ask_kill` makes its
trigger ask the test to SIGKILL the triggerer (a marker file in $VERSUS_OUT) once it has polled
three times.
A `held` job runs until the test releases it (`JobSystem.release`), so it is still running at
the reconnect and while the triggerer is replaced, however slow the machine. Kill points share
a task where one's retry is the other's starting point: seven task processes instead of eleven.
Each completed task writes a report. `ts_deferrable_kill_plain` is the same operator and kill
points with `durable=False` (bench/deferrable_scheduler.py's baseline; no triggerer kill).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

try:  # Airflow 3
    from airflow.sdk import DAG, BaseOperator
except ImportError:  # Airflow 2
    from airflow.models.baseoperator import BaseOperator  # type: ignore[no-redef]
    from airflow.models.dag import DAG  # type: ignore[no-redef]
from airflow.triggers.base import BaseTrigger, TriggerEvent

from taskstate import ResumableJobMixin
from taskstate.airflow.triggers import TriggerStateMixin

OUT = Path(os.environ.get("VERSUS_OUT", "/tmp"))


def _jobs() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("ts_jobsystem", os.environ["RESUMABLE_JOBSYSTEM"])
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.JobSystem(os.environ["RESUMABLE_JOBS_DB"])


class JobTrigger(TriggerStateMixin, BaseTrigger):
    """Polls one job; counts its polls in the task's state, so a re-created trigger goes on
    counting where the dead one stopped (each poll is also logged to `<name>.polls`)."""

    def __init__(self, job_id: Any, name: str, ask_kill: bool = False) -> None:
        super().__init__()
        self.job_id = job_id
        self.name = name  # <run_id>.<task_id>: the files of this task instance
        self.ask_kill = ask_kill

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "ts_deferrable_kill.JobTrigger",
            {"job_id": self.job_id, "name": self.name, "ask_kill": self.ask_kill},
        )

    async def run(self) -> Any:
        state = self.task_state_store
        polls = await state.aget("polls", 0)
        while True:
            status = await asyncio.to_thread(lambda: str(_jobs().status(self.job_id)))
            polls += 1
            with (OUT / f"{self.name}.polls").open("a") as log:
                log.write(f"{polls}\n")
            await state.aset("polls", polls)
            if status not in ("PENDING", "RUNNING"):
                yield TriggerEvent({"external_id": self.job_id, "status": status})
                return
            marker = OUT / f"{self.name}.kill-triggerer"
            if self.ask_kill and polls >= 3 and not marker.exists():
                marker.write_text(str(os.getpid()))  # the test kills this triggerer now
            await asyncio.sleep(0.5)


class DeferrableBatchOperator(BaseOperator, ResumableJobMixin):
    external_id_key = "batch_job_id"

    def __init__(
        self, *, kill_at: dict[int, str], held: bool = False, ask_kill: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.kill_at = kill_at  # try number -> the point where that try dies
        self.held = held
        self.ask_kill = ask_kill

    def execute(self, context: Any) -> Any:
        self._state(context)
        decision = self.resume_decision(context)
        self._note(context, "decisions", decision.action.value)
        return self._report(context, self.execute_deferrable(context))

    def execute_complete(self, context: Any, event: Any = None) -> Any:
        self._state(context)
        return self._report(context, self.complete_deferred(context, event))

    def _state(self, context: Any) -> None:
        if context.get("task_state_store") is None:
            raise RuntimeError("no task_state_store in the context: taskstate is not in charge")

    def _name(self, context: Any) -> str:
        return f"{context['ti'].run_id}.{context['ti'].task_id}"

    def _note(self, context: Any, what: str, value: Any) -> None:
        with (OUT / f"{self._name(context)}.{what}").open("a") as log:
            log.write(f"{int(context['ti'].try_number)} {value}\n")

    def _report(self, context: Any, result: Any) -> Any:
        ti = context["ti"]
        report = {
            "run_id": ti.run_id,
            "task_id": ti.task_id,
            "map_index": ti.map_index,
            "try_number": int(ti.try_number),
            "logical": self._logical(context),
            "polls": context["task_state_store"].get("polls"),
            "result": result,
        }
        (OUT / f"{ti.task_id}.json").write_text(json.dumps(report))
        return result

    def _logical(self, context: Any) -> str:
        return f"{context['ti'].run_id}/{context['ti'].task_id}"

    def _die(self, context: Any, point: str) -> None:
        if self.kill_at.get(int(context["ti"].try_number)) == point:
            self._note(context, "kills", point)
            os.kill(os.getpid(), signal.SIGKILL)

    def submit_job(self, context: Any) -> Any:
        job_id = _jobs().submit(
            self._logical(context),
            token=self.idempotency_token(context),
            dedupe=True,
            run_for=3600.0 if self.held else 2.0,
        )
        self._die(context, "after_accept")  # accepted; its id not saved yet
        return job_id

    def defer_job(self, external_id: Any, context: Any) -> Any:
        self._die(context, "before_defer")  # the id is saved, not handed over
        trigger = JobTrigger(external_id, self._name(context), ask_kill=self.ask_kill)
        self.defer(trigger=trigger, method_name="execute_complete")

    def get_job_status(self, external_id: Any, context: Any) -> str:
        return str(_jobs().status(external_id))

    def is_job_active(self, status: str) -> bool:
        return status in ("PENDING", "RUNNING")

    def is_job_succeeded(self, status: str) -> bool:
        return status == "SUCCEEDED"

    def poll_until_complete(self, external_id: Any, context: Any) -> None:
        raise AssertionError("the deferrable path never polls in the worker")

    def get_job_result(self, external_id: Any, context: Any) -> Any:
        result = _jobs().result(external_id)
        self._die(context, "during_complete")  # the result in hand, not returned
        return result


def _dag(dag_id: str, prefix: str = "", **plain: Any) -> None:
    with DAG(
        dag_id,
        schedule=None,
        start_date=datetime(2024, 1, 1),
        catchup=False,
        # Two tries die by design; one more for a try Airflow itself fails (the test counts
        # those).
        default_args={"retries": 3, "retry_delay": timedelta(seconds=0)},
    ):
        # Try 1 dies after the job system accepted the job (its id not saved); try 2 recovers
        # it from the intent (the resubmission carries the token) and defers; its
        # execute_complete dies with the result in hand; try 3 finds the job succeeded.
        DeferrableBatchOperator(
            task_id=f"{prefix}accept_then_complete",
            kill_at={1: "after_accept", 2: "during_complete"},
            **plain,
        )
        # Try 1 dies after saving the id, before defer(); try 2 reconnects to the held job and
        # defers; the triggerer running its trigger is SIGKILLed and a new one takes it over.
        DeferrableBatchOperator(
            task_id=f"{prefix}defer_then_trigger",
            kill_at={1: "before_defer"},
            held=True,
            ask_kill=not plain,
            **plain,
        )


_dag("ts_deferrable_kill")
_dag("ts_deferrable_kill_plain", "plain_", durable=False)
