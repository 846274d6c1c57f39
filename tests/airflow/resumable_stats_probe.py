"""Runs inside one pinned Airflow env with `[metrics] statsd_on` pointing at the test's UDP
listener: three tries of ResumableJobMixin take the reconnect, terminal-resubmit and
recover-from-intent paths, and Airflow's real Stats sends whatever the mixin counts."""

from __future__ import annotations

import tempfile
import warnings
from typing import Any

warnings.simplefilter("ignore")

import airflow  # noqa: E402, F401  (the mixin counts through Airflow's Stats only if loaded)
from taskstate import ResumableJobMixin, StateStore, TaskScope  # noqa: E402

JOBS = {"job-running": "RUNNING", "job-failed": "FAILED"}


class Counted(ResumableJobMixin):
    external_id_key = "batch_job_id"

    def submit_job(self, context: Any) -> str:
        JOBS[f"job-{len(JOBS)}"] = "RUNNING"
        return f"job-{len(JOBS) - 1}"

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


def init_stats_as_the_task_runner_does() -> None:
    """Airflow 3.2+ configures the task process's stats in the task runner's main()."""
    try:
        from airflow.sdk._shared.observability.metrics import stats
        from airflow.sdk.configuration import conf
        from airflow.sdk.observability.metrics import stats_utils
    except ImportError:  # earlier Airflow: airflow.stats configures itself from [metrics]
        return
    if callable(getattr(stats, "initialize", None)):  # 3.3: a module-level API
        legacy = conf.getboolean("metrics", "legacy_names_on", fallback=False)
        stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=legacy)
    else:  # 3.2
        stats.Stats.initialize(factory=stats_utils.get_stats_factory(stats.Stats))


def main() -> None:
    init_stats_as_the_task_runner_does()
    with tempfile.TemporaryDirectory() as tmp:
        store = StateStore(f"sqlite:///{tmp}/state.db")
        earlier = {
            "reconnect": ("batch_job_id", "job-running"),
            "terminal_resubmit": ("batch_job_id", "job-failed"),
            "recover_from_intent": ("batch_job_id__intent", {"token": "ts-lost", "attempt": 1}),
        }
        for task_id, (key, value) in earlier.items():
            state = store.task_state(TaskScope("probe", "run", task_id))
            state.set(key, value)
            Counted().execute_resumable({"task_state_store": state})
    print("PROBE done")


if __name__ == "__main__":
    main()
