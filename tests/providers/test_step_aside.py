"""taskstate.providers steps aside for an upstream class that is durable already, and only for
a real mixin (taskstate's, or Airflow 3.3's `airflow.sdk` one), not the providers' stand-in."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from taskstate.providers._base import step_aside, upstream_durable
from taskstate.resumable import ResumableJobMixin


class _Jobs(ResumableJobMixin):
    def submit_job(self, context: Any) -> Any: ...
    def get_job_status(self, external_id: Any, context: Any) -> str: ...
    def is_job_active(self, status: str) -> bool: ...
    def is_job_succeeded(self, status: str) -> bool: ...
    def poll_until_complete(self, external_id: Any, context: Any) -> None: ...
    def get_job_result(self, external_id: Any, context: Any) -> Any: ...


def test_an_upstream_class_on_the_mixin_is_used_as_it_is(caplog: pytest.LogCaptureFixture) -> None:
    class UpstreamOperator(_Jobs):
        external_id_key = "upstream_job_id"

    class Ours(_Jobs):
        external_id_key = "upstream_job_id"

    with caplog.at_level(logging.INFO, logger="taskstate.providers"):
        chosen = step_aside(Ours, UpstreamOperator)
    assert chosen is UpstreamOperator
    assert upstream_durable(UpstreamOperator) is ResumableJobMixin
    assert "durable already" in caplog.text and "'upstream_job_id'" in caplog.text


def test_the_providers_stand_in_does_not_count() -> None:
    # Below 3.3 providers get a class of the same name that always submits a fresh job.
    stand_in = type("ResumableJobMixin", (), {"durable": False})
    upstream = type("UpstreamOperator", (stand_in,), {})

    class Ours(_Jobs):
        pass

    assert upstream_durable(upstream) is None
    assert step_aside(Ours, upstream) is Ours
