"""Which executor runs a task instance, and whether it spreads tasks over machines.

The embedded SQLite file lives on one machine. Under an executor that runs tasks on several
(Celery, Kubernetes, Edge, AWS ECS/Batch/Lambda) each worker would keep its own file and a
retry elsewhere would silently start from nothing, so a task there is refused the default file
(`check_task_store`) and `taskstate doctor` fails. Decided per task instance: the executor named
by the task instance or its operator (`executor=`, Airflow 2.10+'s multi-executor setups), else
the first of `[core] executor`. Local test runs (`dags test`, `tasks test`) are never refused.
Never imports Airflow: it reads what the running task already loaded.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Literal

from taskstate.errors import ConfigError
from taskstate.settings import Settings, setting

Reach = Literal["distributed", "local", "by queue", "unknown"]

# By class name, so core names ("CeleryExecutor"), provider paths and aliases all match.
_REACH: dict[str, Reach] = {
    "CeleryExecutor": "distributed",
    "CeleryKubernetesExecutor": "distributed",  # both of its halves run tasks elsewhere
    "KubernetesExecutor": "distributed",
    "EdgeExecutor": "distributed",
    "AwsEcsExecutor": "distributed",
    "AwsBatchExecutor": "distributed",
    "AwsLambdaExecutor": "distributed",
    "LocalKubernetesExecutor": "by queue",  # its kubernetes queue runs on Kubernetes
    "LocalExecutor": "local",
    "SequentialExecutor": "local",
    "DebugExecutor": "local",
}
# Airflow's defaults when `[core] executor` is unset: SequentialExecutor (2.x), LocalExecutor
# (3.x) — both local, so either name gives the same answer.
_DEFAULT = "LocalExecutor"


@dataclass(frozen=True)
class Executor:
    """One entry of `[core] executor`: `Name`, `module.path.Name`, or `alias:module.path.Name`."""

    entry: str

    @property
    def alias(self) -> str | None:
        """The alias before `:` in the `[core] executor` entry, if it has one."""
        alias, sep, _ = self.entry.partition(":")
        return alias if sep else None

    @property
    def path(self) -> str:
        """The executor as the entry names it, without its alias (a class name or dotted path)."""
        return self.entry.partition(":")[2] or self.entry

    @property
    def name(self) -> str:
        """The executor's class name."""
        return self.path.rsplit(".", 1)[-1]

    @property
    def reach(self) -> Reach:
        """Whether its tasks may run on other machines: `local`, `distributed`, `by queue` (only
        its Kubernetes queue's) or `unknown` (a custom executor)."""
        return _REACH.get(self.name, "unknown")

    def matches(self, reference: str) -> bool:
        """Whether a task's `executor` argument names this one (entry, alias, path or class
        name)."""
        return reference in (self.entry, self.alias, self.path, self.name)


def configured_executors(raw: str | None = None) -> list[Executor]:
    """`[core] executor` (comma-separated since Airflow 2.10); the first is the default."""
    if raw is None:
        raw = setting("executor")
    entries = [part.strip() for part in (raw or "").split(",") if part.strip()]
    return [Executor(entry) for entry in entries] or [Executor(_DEFAULT)]


def executor_of(reference: str | None, configured: list[Executor]) -> Executor:
    """The executor a task names (alias, class name or path), else the default one."""
    if reference:
        for executor in configured:
            if executor.matches(reference):
                return executor
        return Executor(reference)
    return configured[0]


def kubernetes_queue() -> str:
    """`[local_kubernetes_executor] kubernetes_queue`: the queue whose tasks go to Kubernetes."""
    queue: str = setting("kubernetes_queue")
    return queue


def runs_elsewhere(executor: Executor, queue: str | None) -> bool:
    """Whether a task with this executor and queue may run on another machine than its retry."""
    if executor.reach == "by queue":
        return queue == kubernetes_queue()
    return executor.reach == "distributed"


def is_local_test_run(ti: Any) -> bool:
    """`dags test` / `tasks test` / `dag.test()`: the task runs inside the command's process."""
    runner = sys.modules.get("airflow.sdk.execution_time.task_runner")
    comms = getattr(runner, "SUPERVISOR_COMMS", None)
    if comms is not None:  # Airflow 3: test runs use the in-process supervisor
        return type(comms).__name__ == "InProcessSupervisorComms"
    # Airflow 2: an executor's task runs as `airflow tasks run --raw`; `tasks test` sets
    # test_mode and `dags test` runs the task without --raw.
    return bool(getattr(ti, "test_mode", False)) or not getattr(ti, "raw", False)


def uses_default_sqlite(settings: Settings) -> bool:
    """No backend chosen: the store falls back to the embedded file of this machine."""
    from taskstate.backends import resolve_url

    return (
        settings.uses_builtin_backend
        and not settings.taskstate_url
        and resolve_url(settings).startswith("sqlite:")
    )


def check_task_store(context: Any, settings: Settings) -> None:
    """Refuse the default embedded SQLite file to a task whose executor spreads tasks out."""
    if not uses_default_sqlite(settings):
        return
    ti, task = context["ti"], context["task"]
    if is_local_test_run(ti):
        return
    reference = getattr(ti, "executor", None) or getattr(task, "executor", None)
    executor = executor_of(reference, configured_executors())
    queue = getattr(ti, "queue", None) or getattr(task, "queue", None)
    if runs_elsewhere(executor, queue):
        raise ConfigError(refusal(executor.name, settings))


def refusal(executor: str, settings: Settings) -> str:
    """Why tasks of a distributed executor may not use the default SQLite file, and what to
    configure instead."""
    from taskstate.backends import resolve_url

    path = resolve_url(settings).removeprefix("sqlite:///")
    return (
        f"{executor} runs tasks on several machines, but taskstate has no store configured and "
        f"would fall back to the SQLite file {path} of whichever machine runs this try: a retry "
        "elsewhere would start from nothing. Set [state_store] taskstate_url "
        "(AIRFLOW__STATE_STORE__TASKSTATE_URL) on every worker: "
        "http(s)://<api-server>/taskstate with [state_store] taskstate_token for workers "
        "without database access, or postgresql://user:pass@host/db; a sqlite:///path on a "
        "volume every worker shares is respected. See docs/deployment.md"
    )
