"""Tell a retry from a re-run: state carries over the first and starts over the second.

A task instance's state belongs to one *run* of it. Retries are the same run and resume. A
clear (of the task instance or of its whole DAG run) asks for the work to be done again, so
its state starts over; so does a map index whose input changed (a re-expansion), because the
state under that index belonged to another item.

What tells them apart, on Airflow 2.10 and 3.x alike:
- a clear sets `max_tries = try_number + retries` (always higher than before); a retry never
  touches `max_tries`;
- a DAG run deleted and created again (`airflow dags test` on the same date) starts the
  tries again from the same or a lower number, under a new DAG run start;
- a sensor rescheduled (`mode="reschedule"`) keeps its try number and its DAG run: not a re-run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

ATTEMPT_KEY = "attempt"
INPUT_KEY = "input"


@dataclass(frozen=True)
class Attempt:
    """What identifies one try of a task instance within its run."""

    try_number: int
    max_tries: int
    run_started: str | None

    def as_json(self) -> dict[str, Any]:
        """The attempt as the JSON marker it is stored as."""
        return asdict(self)


def rerun_reason(previous: Mapping[str, Any] | None, now: Attempt) -> str | None:
    """Why `now` starts a new run of the task instance, or None when it continues `previous`."""
    if not isinstance(previous, Mapping):
        return None
    before = previous.get("max_tries")
    if isinstance(before, int) and now.max_tries != before:
        return f"it was cleared for a re-run (max_tries {before} -> {now.max_tries})"
    tried = previous.get("try_number")
    if isinstance(tried, int) and (
        now.try_number < tried
        or (now.try_number == tried and now.run_started != previous.get("run_started"))
    ):
        return f"its DAG run was created again (try {tried} -> {now.try_number})"
    return None


def input_fingerprint(values: Mapping[str, Any]) -> str:
    """A stable digest of one map index's input (what `.expand()` gave this index)."""
    # repr() for values JSON cannot hold: stable for the plain data mapped inputs are made of.
    text = json.dumps(values, sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]
