"""Fault injection: run a `ResumableJobMixin` operator in a child process, SIGKILL it at a chosen
(or random) point, then run the next try as Airflow would, against a real taskstate SQLite store
and the real job system of `jobsystem.py`.

The child stops itself at the named point and tells the parent, which then kills it with
SIGKILL, so a named kill point is deterministic. Kill points:

- `start`:          before the mixin does anything;
- `before_submit`:  the intent is saved, the job system not called yet;
- `after_accept`:   inside `submit_job`, after the job system accepted the job;
- `before_persist`: `submit_job` returned, the id is not saved yet (the window Airflow 3.3.2
                    leaves open);
- `during_poll`:    while polling the running job;
- `after_success`:  the job succeeded, before the task returns its result.

The deferrable flow (`run_deferrable_scenario`) runs each Airflow process as its own child: the
worker (`execute_deferrable`, which ends by deferring), the triggerer (a trigger polling the
job, re-created from its id when killed) and the worker again (`complete_deferred`, Airflow's
`execute_complete`). Its kill points add:

- `before_defer`:     the id is saved, `defer_job` not reached (the worker dies before
                      handing the job to the triggerer);
- `during_trigger`:   the triggerer, while its trigger polls the running job;
- `during_complete`:  the worker running `execute_complete`, the job's result in hand.

`run_scenario` is one logical job: a killed try, then clean tries until one returns (or the
task fails for good), as Airflow's retries would; it reports the decisions and what the job
system billed.
"""

from __future__ import annotations

import json
import os
import random
import select
import signal
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taskstate import ResumableJobMixin, StateStore, TaskScope, TaskStateStore
from taskstate.resumable import ResumeDecision

from .jobsystem import ACTIVE, FAILED, SUCCEEDED, JobSystem, expected_output

KILL_POINTS = (
    "start",
    "before_submit",
    "after_accept",
    "before_persist",
    "during_poll",
    "after_success",
)
DEFERRABLE_KILL_POINTS = (
    "start",
    "before_submit",
    "after_accept",
    "before_persist",
    "before_defer",
    "during_trigger",
    "during_complete",
)


@dataclass(frozen=True)
class System:
    """How the operator and the job system handle the idempotency token."""

    name: str
    pass_token: bool  # submit_job hands self.idempotency_token(context) to the job system
    dedupe: bool  # the job system returns the existing job for a known token
    find_job: bool  # the operator implements find_job (a lookup by the token label)
    on_lost_submission: str = "resubmit"
    airflow_332: bool = False  # run Airflow 3.3.2's algorithm instead of ours (the baseline)
    durable: bool = True  # False: the same operator without taskstate's state (a baseline)


SYSTEMS = {
    s.name: s
    for s in (
        System("client-token", pass_token=True, dedupe=True, find_job=False),
        System("find_job", pass_token=True, dedupe=False, find_job=True),
        System("no-token", pass_token=False, dedupe=False, find_job=False),
        System(
            "no-token+fail",
            pass_token=False,
            dedupe=False,
            find_job=False,
            on_lost_submission="fail",
        ),
        System("airflow-3.3.2", pass_token=False, dedupe=False, find_job=False, airflow_332=True),
        System("no-taskstate", pass_token=False, dedupe=False, find_job=False, durable=False),
    )
}


class _Probe:
    """The child's side: report events to the parent; stop at the kill point and wait."""

    def __init__(self, fd: int, kill_at: str | None, occurrence: int) -> None:
        self.fd = fd
        self.kill_at = kill_at
        self.occurrence = occurrence
        self.seen: Counter[str] = Counter()

    def send(self, **event: Any) -> None:
        os.write(self.fd, (json.dumps(event) + "\n").encode())

    def hit(self, point: str) -> None:
        self.seen[point] += 1
        if point == self.kill_at and self.seen[point] == self.occurrence:
            self.send(at=point)
            time.sleep(3600)  # the parent SIGKILLs us here


class _ProbedStore(TaskStateStore):
    """A real task accessor (the store's own class: local or over HTTP) that stops at
    `before_persist`: just before the first write that carries the job id (ours: the completed
    intent; Airflow 3.3.2: the id itself)."""

    _probe: _Probe
    _op: ResumableJobMixin

    @staticmethod
    def of(store: StateStore, scope: TaskScope, probe: _Probe, op: ResumableJobMixin) -> Any:
        cls = type("ProbedStore", (_ProbedStore, type(store.task_state(scope))), {})
        accessor = cls(store, scope)
        accessor._probe, accessor._op = probe, op
        return accessor

    def set(self, key: str, value: Any, *, retention: Any = None) -> None:
        carries_id = key == self._op.external_id_key or (
            key == self._op.intent_key and isinstance(value, dict) and "external_id" in value
        )
        if carries_id and not self._probe.seen["job_done"]:
            self._probe.hit("before_persist")
        super().set(key, value, retention=retention)


class CrashJobOperator(ResumableJobMixin):
    """A plain-Python operator on the job system, as a Spark/Databricks operator would be."""

    external_id_key = "crash_job_id"

    def __init__(
        self,
        jobs: JobSystem,
        logical: str,
        system: System,
        probe: _Probe,
        *,
        run_for: float,
        fail_first: bool,
    ) -> None:
        super().__init__()
        self.jobs = jobs
        self.logical = logical
        self.system = system
        self.probe = probe
        self.run_for = run_for
        self.fail_first = fail_first
        self.on_lost_submission = system.on_lost_submission  # type: ignore[misc]
        self.durable = system.durable

    def resume_decision(self, context: Any) -> ResumeDecision:
        decision = super().resume_decision(context)
        self.probe.send(decision=decision.action.value, recovered=decision.recovered)
        return decision

    def submit_job(self, context: Any) -> int:
        self.probe.hit("before_submit")
        first = not self.jobs.jobs_for(self.logical)
        job_id = self.jobs.submit(
            self.logical,
            token=self.idempotency_token(context) if self.system.pass_token else None,
            dedupe=self.system.dedupe,
            run_for=self.run_for,
            outcome=FAILED if self.fail_first and first else SUCCEEDED,
        )
        self.probe.hit("after_accept")
        return job_id

    def get_job_status(self, external_id: Any, context: Any) -> str:
        return self.jobs.status(external_id)

    def is_job_active(self, status: str) -> bool:
        return status in ACTIVE

    def is_job_succeeded(self, status: str) -> bool:
        return status == SUCCEEDED

    def poll_until_complete(self, external_id: Any, context: Any) -> None:
        while (status := self.jobs.status(external_id)) in ACTIVE:
            self.probe.hit("during_poll")
            time.sleep(0.004)
        if status != SUCCEEDED:
            raise RuntimeError(f"job {external_id} ended {status}")

    def get_job_result(self, external_id: Any, context: Any) -> Any:
        result = self.jobs.result(external_id)
        self.probe.seen["job_done"] += 1
        self.probe.hit("after_success")
        return result

    def find_job(self, token: str, context: Any) -> int | None:
        if not self.system.find_job:
            raise NotImplementedError
        return self.jobs.find(token)


class Deferred(Exception):
    def __init__(self, external_id: Any) -> None:
        super().__init__(external_id)
        self.external_id = external_id


class DeferrableCrashOperator(CrashJobOperator):
    """The same operator on the deferrable path: `defer_job` hands the id to a trigger."""

    def defer_job(self, external_id: Any, context: Any) -> Any:
        self.probe.hit("before_defer")
        raise Deferred(external_id)

    def get_job_result(self, external_id: Any, context: Any) -> Any:
        result = self.jobs.result(external_id)
        self.probe.seen["job_done"] += 1
        self.probe.hit("during_complete")
        return result


def poll_trigger(jobs: JobSystem, external_id: Any, probe: _Probe) -> dict[str, Any]:
    """What the trigger's `run()` does: poll until the job is terminal, yield its status."""
    while (status := jobs.status(external_id)) in ACTIVE:
        probe.hit("during_trigger")
        time.sleep(0.004)
    return {"external_id": external_id, "status": status}


class Airflow332Operator(CrashJobOperator):
    """The baseline: Airflow 3.3.2's `execute_resumable` (task-sdk 1.3.2,
    bases/resumablejobmixin.py:103-211), step for step, without its metrics and span."""

    def execute_resumable(self, context: Any) -> Any:
        store = context["task_state_store"]
        reconnect_to = already_succeeded_id = None
        external_id = store.get(self.external_id_key)
        if external_id:  # 3.3.2's truthy check
            status = self.get_job_status(external_id, context)
            if self.is_job_active(status):
                decision, reconnect_to = "reconnect", external_id
            elif self.is_job_succeeded(status):
                decision, already_succeeded_id = "already_succeeded", external_id
            else:
                decision = "terminal_resubmit"
        else:
            decision = "fresh_submit"
        self.probe.send(decision=decision, recovered=False)
        if reconnect_to is not None:
            return self.poll_until_complete(reconnect_to, context)  # type: ignore[func-returns-value]
        if already_succeeded_id is not None:
            return self.get_job_result(already_succeeded_id, context)
        external_id = self.submit_job(context)
        if external_id is not None:
            store.set(self.external_id_key, external_id)
        self.poll_until_complete(external_id, context)
        return self.get_job_result(external_id, context)


@dataclass
class Env:
    """Where the state store and the job table live (the job system's worker runs already)."""

    state_url: str
    jobs_path: Path
    run_for: float = 0.03


@dataclass
class Try:
    decision: str | None = None
    recovered: bool = False
    killed_at: str | None = None
    result: Any = None
    error: str | None = None
    deferred: Any = None  # the job id a deferrable try deferred on
    event: Any = None  # what a trigger yielded


def _child(
    fd: int,
    env: Env,
    scope: TaskScope,
    system: System,
    kill_at: str | None,
    occurrence: int,
    fail_first: bool,
    phase: str = "execute",
    payload: Any = None,
) -> int:
    """One Airflow process: `execute` (blocking), `defer` (up to `defer_job`), `trigger` (poll
    the job `payload` names) or `complete` (`execute_complete` with the event `payload`)."""
    probe = _Probe(fd, kill_at, occurrence)
    store = StateStore(env.state_url)
    jobs = JobSystem(env.jobs_path)
    kind: type[CrashJobOperator] = CrashJobOperator
    if system.airflow_332:
        kind = Airflow332Operator
    elif phase != "execute":
        kind = DeferrableCrashOperator
    op = kind(jobs, scope.run_id, system, probe, run_for=env.run_for, fail_first=fail_first)
    context = {"task_state_store": _ProbedStore.of(store, scope, probe, op)}
    probe.hit("start")
    try:
        if phase == "execute":
            probe.send(result=op.execute_resumable(context))
        elif phase == "defer":
            try:
                probe.send(result=op.execute_deferrable(context))
            except Deferred as deferred:
                probe.send(deferred=deferred.external_id)
        elif phase == "trigger":
            probe.send(event=poll_trigger(jobs, payload, probe))
        else:
            probe.send(result=op.complete_deferred(context, payload))
    except Exception as exc:
        probe.send(error=f"{type(exc).__name__}: {exc}")
        return 1
    return 0


def run_try(
    env: Env,
    scope: TaskScope,
    system: System,
    *,
    kill_at: str | None = None,
    occurrence: int = 1,
    kill_after: float | None = None,
    fail_first: bool = False,
    timeout: float = 60.0,
    phase: str = "execute",
    payload: Any = None,
) -> Try:
    """One try (or one `phase` of it) in a forked child; SIGKILL it at `kill_at` (its
    `occurrence`-th time) or after `kill_after` seconds, whichever the caller asked for."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into the caller's stack
        code = 70
        try:
            os.close(read_fd)
            code = _child(
                write_fd, env, scope, system, kill_at, occurrence, fail_first, phase, payload
            )
        finally:
            os._exit(code)
    os.close(write_fd)
    outcome = Try()
    start = time.monotonic()
    buffer = b""
    try:
        while True:
            deadline = start + (kill_after if kill_after is not None else timeout)
            wait = max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([read_fd], [], [], wait)
            if not ready:
                if kill_after is None:
                    raise TimeoutError(f"try of {scope.run_id} ran over {timeout}s")
                os.kill(pid, signal.SIGKILL)
                outcome.killed_at = "random_time"
                break
            chunk = os.read(read_fd, 65536)
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            if _apply(outcome, lines):
                os.kill(pid, signal.SIGKILL)
                break
    finally:
        os.close(read_fd)
        _, status = os.waitpid(pid, 0)
    if outcome.killed_at is not None and not os.WIFSIGNALED(status):
        outcome.killed_at = None  # the child finished just before the kill landed
    return outcome


def _apply(outcome: Try, lines: list[bytes]) -> bool:
    """Fold the child's events into `outcome`; True once it reports standing at the kill point."""
    for line in lines:
        event = json.loads(line)
        if "decision" in event:
            outcome.decision = event["decision"]
            outcome.recovered = event["recovered"]
        if "result" in event:
            outcome.result = event["result"]
        if "error" in event:
            outcome.error = event["error"]
        if "deferred" in event:
            outcome.deferred = event["deferred"]
        if "event" in event:
            outcome.event = event["event"]
        if "at" in event:
            outcome.killed_at = event["at"]
            return True
    return False


@dataclass
class Scenario:
    logical: str
    system: str
    kill: str
    tries: list[Try] = field(default_factory=list)
    jobs: list[tuple[int, str]] = field(default_factory=list)
    submissions: int = 0

    @property
    def final(self) -> Try:
        return self.tries[-1]

    @property
    def working_jobs(self) -> int:
        """Jobs that did (or do) the work: every job not FAILED. Exactly 1 is the target."""
        return sum(1 for _, state in self.jobs if state != FAILED)

    @property
    def result_correct(self) -> bool:
        result = self.final.result
        return (
            isinstance(result, dict)
            and result.get("output") == expected_output(self.logical)
            and any(job_id == result.get("job_id") for job_id, _ in self.jobs)
        )

    @property
    def lost(self) -> bool:
        """The task stopped for a person (on_lost_submission="fail")."""
        return self.final.error is not None and "LostSubmissionError" in self.final.error


def run_scenario(
    env: Env,
    jobs: JobSystem,
    system: System,
    *,
    kill_at: str | None = None,
    occurrence: int = 1,
    kill_after: float | None = None,
    fail_first: bool = False,
    kills: int = 1,
    max_tries: int = 6,
) -> Scenario:
    """One logical job: `kills` killed tries, then clean tries until one returns a result (a
    job that FAILED makes the try fail, so the next try resubmits) or the task gives up."""
    logical = uuid.uuid4().hex[:12]
    scope = TaskScope("crash_dag", logical, "job")
    scenario = Scenario(logical, system.name, kill_at or "random_time")
    for _ in range(kills):
        scenario.tries.append(
            run_try(
                env,
                scope,
                system,
                kill_at=kill_at,
                occurrence=occurrence,
                kill_after=kill_after,
                fail_first=fail_first,
            )
        )
    while len(scenario.tries) < max_tries:
        last = run_try(env, scope, system, fail_first=fail_first)
        scenario.tries.append(last)
        if last.error is None or "LostSubmissionError" in last.error:
            break
    _settle(jobs, logical)
    scenario.jobs = jobs.jobs_for(logical)
    scenario.submissions = len(jobs.submissions_for(logical))
    return scenario


def run_deferrable_scenario(
    env: Env,
    jobs: JobSystem,
    system: System,
    *,
    kill_at: str,
    occurrence: int = 1,
    fail_first: bool = False,
    max_tries: int = 6,
) -> Scenario:
    """One logical job on the deferrable path, as Airflow runs it: a try defers (worker), its
    trigger polls (triggerer) and fires, the try completes (worker). The kill lands once, at
    `kill_at` in whichever process reaches it: a killed worker fails the try (the next try
    starts over); a killed triggerer is replaced by a new one polling the same job (the task
    stays deferred, no try is spent). `tries` holds every process run, in order."""
    logical = uuid.uuid4().hex[:12]
    scope = TaskScope("crash_dag", logical, "job")
    scenario = Scenario(logical, system.name, kill_at)
    pending: str | None = kill_at

    def run(phase: str, payload: Any = None) -> Try:
        nonlocal pending
        outcome = run_try(
            env,
            scope,
            system,
            kill_at=pending,
            occurrence=occurrence,
            fail_first=fail_first,
            phase=phase,
            payload=payload,
        )
        scenario.tries.append(outcome)
        if outcome.killed_at is not None:
            pending = None
        return outcome

    for _ in range(max_tries):
        worker = run("defer")
        if worker.error is not None and "LostSubmissionError" in worker.error:
            break  # stopped for a person (on_lost_submission="fail")
        if worker.killed_at is not None or worker.error is not None:
            continue  # the try failed; Airflow retries it
        if worker.deferred is None:
            break  # returned a result without deferring (already_succeeded)
        while (trigger := run("trigger", worker.deferred)).event is None:
            assert trigger.killed_at is not None, trigger  # only a kill stops a trigger
        done = run("complete", trigger.event)
        if done.killed_at is None and done.error is None:
            break
    _settle(jobs, logical)
    scenario.jobs = jobs.jobs_for(logical)
    scenario.submissions = len(jobs.submissions_for(logical))
    return scenario


def _settle(jobs: JobSystem, logical: str, limit: float = 10.0) -> None:
    """Wait for the worker to finish every job of `logical` (duplicates keep running after the
    task returned), so a duplicate counts however the kill landed."""
    end = time.monotonic() + limit
    while any(state in ACTIVE for _, state in jobs.jobs_for(logical)):
        if time.monotonic() > end:
            raise TimeoutError(f"jobs of {logical} still running after {limit}s")
        time.sleep(0.005)


def random_deferrable_kill(rng: random.Random) -> dict[str, Any]:
    """A random kill point of the deferrable flow (a random poll of the trigger's)."""
    point = rng.choice(DEFERRABLE_KILL_POINTS)
    return {"kill_at": point, "occurrence": rng.randint(1, 4) if point == "during_trigger" else 1}


def random_kill(rng: random.Random) -> dict[str, Any]:
    """A random kill: a named point (poll at a random occurrence) or a random moment."""
    choice = rng.choice([*KILL_POINTS, "random_time"])
    if choice == "random_time":
        return {"kill_after": rng.uniform(0.0, 0.12)}
    return {"kill_at": choice, "occurrence": rng.randint(1, 4) if choice == "during_poll" else 1}
