"""The retry/re-run/re-expansion rule, without Airflow: what each kind of next try looks like."""

from __future__ import annotations

from taskstate.airflow.attempts import Attempt, input_fingerprint, rerun_reason

FIRST = Attempt(try_number=1, max_tries=2, run_started="2025-01-01T00:00:00")


def test_first_try_and_retries_continue() -> None:
    assert rerun_reason(None, FIRST) is None
    retry = Attempt(2, 2, FIRST.run_started)
    assert rerun_reason(FIRST.as_json(), retry) is None


def test_a_rescheduled_sensor_continues() -> None:
    assert rerun_reason(FIRST.as_json(), Attempt(1, 2, FIRST.run_started)) is None


def test_a_clear_is_a_rerun() -> None:
    # Airflow sets max_tries = try_number + retries on clear: 1 + 2.
    reason = rerun_reason(FIRST.as_json(), Attempt(2, 3, FIRST.run_started))
    assert reason is not None and "cleared" in reason


def test_a_recreated_dag_run_is_a_rerun() -> None:
    assert rerun_reason(FIRST.as_json(), Attempt(1, 2, "2025-01-02T00:00:00")) is not None
    assert rerun_reason(Attempt(3, 2, None).as_json(), Attempt(1, 2, None)) is not None


def test_fingerprint_follows_the_input_only() -> None:
    assert input_fingerprint({"x": [1, "a"]}) == input_fingerprint({"x": [1, "a"]})
    assert input_fingerprint({"x": "a"}) != input_fingerprint({"x": "b"})
    assert input_fingerprint({"a": 1, "b": 2}) == input_fingerprint({"b": 2, "a": 1})
