"""Runs inside one pinned Airflow env (PYTHONPATH=<repo>/src): ResumableJobMixin on Airflow's
real BaseOperator, in both base-class orders, with and without an own `__init__`. Prints one
JSON object that `test_resumable_airflow.py` checks.

Airflow's Stats and the OpenTelemetry tracer provider are swapped for recorders: they observe
the mixin, they are not what is under test.
"""

from __future__ import annotations

import inspect
import json
import tempfile
import warnings
from typing import Any

warnings.simplefilter("ignore")

import airflow  # noqa: E402

try:  # Airflow 3
    from airflow.sdk import DAG, BaseOperator
except ImportError:  # Airflow 2
    from airflow.models.baseoperator import BaseOperator  # type: ignore[no-redef]
    from airflow.models.dag import DAG  # type: ignore[no-redef]

from taskstate import ResumableJobMixin, StateStore, TaskScope  # noqa: E402
from taskstate.resumable.reporting import airflow_stats  # noqa: E402

JOBS: dict[str, str] = {}


class JobMethods:
    def submit_job(self, context: Any) -> str:
        job_id = f"job-{len(JOBS)}"
        JOBS[job_id] = "RUNNING"
        return job_id

    def get_job_status(self, external_id: Any, context: Any) -> str:
        return JOBS.get(external_id, "UNKNOWN")

    def is_job_active(self, status: str) -> bool:
        return status == "RUNNING"

    def is_job_succeeded(self, status: str) -> bool:
        return status == "SUCCEEDED"

    def poll_until_complete(self, external_id: Any, context: Any) -> None:
        JOBS[external_id] = "SUCCEEDED"

    def get_job_result(self, external_id: Any, context: Any) -> Any:
        return {"result_of": external_id}

    def execute(self, context: Any) -> Any:
        return self.execute_resumable(context)  # type: ignore[attr-defined]


class SkillOrder(JobMethods, BaseOperator, ResumableJobMixin):  # the skill's order
    external_id_key = "batch_job_id"


class MixinFirst(JobMethods, ResumableJobMixin, BaseOperator):  # Airflow 3.3's documented order
    external_id_key = "batch_job_id"


class SkillOrderOwnInit(JobMethods, BaseOperator, ResumableJobMixin):
    external_id_key = "batch_job_id"

    def __init__(self, *, size: int = 1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.size = size


class MixinFirstOwnInit(JobMethods, ResumableJobMixin, BaseOperator):
    external_id_key = "batch_job_id"

    def __init__(self, *, size: int = 1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.size = size


class Subclass(SkillOrderOwnInit):
    pass


def dag(dag_id: str, **default_args: Any) -> Any:
    import datetime

    return DAG(
        dag_id,
        schedule=None,
        start_date=datetime.datetime(2024, 1, 1),
        default_args=default_args,
    )


def durable_cases(cls: type) -> dict[str, Any]:
    out: dict[str, Any] = {
        "default": cls(task_id="a").durable,
        "explicit_false": cls(task_id="b", durable=False).durable,
        "task_default_args": cls(task_id="c", default_args={"durable": False}).durable,
    }
    with dag(f"{cls.__name__}_defaults", durable=False):
        out["dag_default_args"] = cls(task_id="d").durable
        out["explicit_beats_dag_default_args"] = cls(task_id="e", durable=True).durable
    if "size" in inspect.signature(cls.__init__).parameters:
        with dag(f"{cls.__name__}_partial"):
            mapped = cls.partial(task_id="m", durable=False).expand(size=[1, 2])
            out["partial"] = mapped.unmap({"size": 1}).durable
        with dag(f"{cls.__name__}_partial_task_defaults"):
            mapped = cls.partial(task_id="m", default_args={"durable": False}).expand(size=[1])
            out["partial_task_default_args"] = mapped.unmap({"size": 1}).durable
        with dag(f"{cls.__name__}_partial_defaults", durable=False):
            mapped = cls.partial(task_id="m").expand(size=[1, 2])
            out["partial_dag_default_args"] = mapped.unmap({"size": 1}).durable
    return out


def run_twice(cls: type, store: StateStore) -> dict[str, Any]:
    state = store.task_state(TaskScope("probe", "run", cls.__name__))
    context = {"task_state_store": state}
    first = cls(task_id="x").execute_resumable(context)
    second = cls(task_id="x").execute_resumable(context)
    return {"first": first, "second": second, "stored": state.get("batch_job_id")}


def main() -> None:
    calls: list[list[Any]] = []
    stats = airflow_stats()
    if stats is not None:
        stats.incr = lambda name, *a, tags=None, **k: calls.append([name, tags])
    spans = _record_spans()
    out: dict[str, Any] = {"airflow": airflow.__version__, "classes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        store = StateStore(f"sqlite:///{tmp}/state.db")
        for cls in (SkillOrder, MixinFirst, SkillOrderOwnInit, MixinFirstOwnInit, Subclass):
            try:
                out["classes"][cls.__name__] = {**durable_cases(cls), **run_twice(cls, store)}
            except Exception as exc:
                out["classes"][cls.__name__] = {"error": f"{type(exc).__name__}: {exc}"}
    out["stats"] = None if stats is None else calls
    if spans is not None:
        # Only the decision spans: the store's own operations are traced too (metrics.py).
        spans = [
            dict(span.attributes)
            for span in spans.get_finished_spans()
            if span.name == "resumable_job.resume_decision"
        ]
    out["spans"] = spans
    print("PROBE " + json.dumps(out))


def _record_spans() -> Any:
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError:
        return None
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return exporter


if __name__ == "__main__":
    main()
