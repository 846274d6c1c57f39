"""Runs inside a pinned Airflow env with `[metrics] statsd_on` pointing at the test's UDP
listener, with Airflow's `Stats` set up as Airflow 3.2's task runner sets it up: taskstate's
metrics then go through Airflow's own client (its prefix, tags and lists)."""

from __future__ import annotations

import tempfile
import warnings

warnings.simplefilter("ignore")

import airflow  # noqa: E402, F401  (taskstate uses Airflow's Stats only if Airflow is loaded)
from taskstate import StateStore, TaskScope  # noqa: E402


def main() -> None:
    from airflow.sdk._shared.observability.metrics import stats
    from airflow.sdk.observability.metrics import stats_utils

    stats.Stats.initialize(factory=stats_utils.get_stats_factory(stats.Stats))  # as 3.2's main()
    with tempfile.TemporaryDirectory() as tmp:
        store = StateStore(f"sqlite:///{tmp}/state.db")
        print("PROBE sink", type(store.metrics.sinks[0]).__name__)
        state = store.task_state(TaskScope("probe", "run", "task"))
        state.set("k", 1)
        state.get("k")
        state.get("k")
        store.close()
    print("PROBE done")  # the totals are sent at exit


if __name__ == "__main__":
    main()
