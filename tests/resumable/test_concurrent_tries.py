"""Two tries of one task running at once (a zombie and its retry), on one real SQLite file: the
intent's compare-and-set lets only one submit under its own token. Each try has its own
StateStore, as two worker processes would; a try is paused at a chosen step by gating the
real store it writes through, so the interleaving is exact rather than lucky."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from taskstate import StateStore, TaskScope
from taskstate.errors import ConcurrentTryError

from .test_mixin import SCOPE, Jobs, Op


class Gate:
    """Stops a thread at one step until the test lets it go on."""

    def __init__(self) -> None:
        self.reached, self.go = threading.Event(), threading.Event()

    def pass_(self) -> None:
        self.reached.set()
        assert self.go.wait(30), "the test never released the gate"


class GatedStore:
    """A real task_state_store whose intent compare-and-set waits at `gate` first."""

    def __init__(self, url: str, scope: TaskScope, gate: Gate | None) -> None:
        self._inner = StateStore(url).task_state(scope)
        self._gate = gate

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def compare_and_set(self, key: str, expected: Any, new: Any, **kwargs: Any) -> bool:
        if self._gate is not None and key.endswith("__intent"):
            self._gate.pass_()
        result: bool = self._inner.compare_and_set(key, expected, new, **kwargs)
        return result


class GatedSubmitOp(Op):
    """Pauses inside submit_job: its intent is recorded, its id not yet saved."""

    gate: Gate | None = None

    def submit_job(self, context: Any) -> Any:
        if self.gate is not None:
            self.gate.pass_()
        return super().submit_job(context)


def _start(target: Any) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = target()
        except Exception as exc:  # the assertion is on what the try raised
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_a_try_that_lost_the_race_to_a_finished_submission_raises(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    jobs, gate = Jobs(), Gate()
    zombie_ctx = {"task_state_store": GatedStore(url, SCOPE, gate)}
    zombie, outcome = _start(lambda: Op(jobs).execute_resumable(zombie_ctx))
    assert gate.reached.wait(30)  # the zombie read "no intent" and is about to claim it
    retry_ctx = {"task_state_store": GatedStore(url, SCOPE, None)}
    assert Op(jobs).execute_resumable(retry_ctx) == {"result_of": 100}  # submits, saves the id
    gate.go.set()
    zombie.join(30)
    assert not zombie.is_alive()
    assert isinstance(outcome.get("error"), ConcurrentTryError), outcome
    assert isinstance(outcome["error"], RuntimeError)
    assert len(jobs.submitted) == 1  # the zombie submitted nothing
    assert StateStore(url).task_state(SCOPE).get("job_id") == 100


def test_a_try_that_lost_the_race_to_a_pending_submission_reuses_its_token(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    jobs, cas_gate, submit_gate = Jobs(), Gate(), Gate()
    first_ctx = {"task_state_store": GatedStore(url, SCOPE, cas_gate)}
    first, first_outcome = _start(lambda: Op(jobs).execute_resumable(first_ctx))
    assert cas_gate.reached.wait(30)  # the first try is about to claim the intent
    second_op = GatedSubmitOp(jobs)
    second_op.gate = submit_gate
    second_ctx = {"task_state_store": GatedStore(url, SCOPE, None)}
    second, second_outcome = _start(lambda: second_op.execute_resumable(second_ctx))
    assert submit_gate.reached.wait(30)  # the second claimed it and is inside submit_job
    cas_gate.go.set()
    first.join(30)
    submit_gate.go.set()
    second.join(30)
    assert not first.is_alive() and not second.is_alive()
    assert "error" not in first_outcome and "error" not in second_outcome
    token = StateStore(url).task_state(SCOPE).get("job_id__intent")["token"]
    # Both submissions carry the winner's token: a job system that dedupes runs one job.
    assert jobs.submitted == [token, token]
