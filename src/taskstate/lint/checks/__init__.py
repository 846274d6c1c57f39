"""The rule families; each module checks one family and yields findings for one file."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from taskstate.lint.checks import (
    deferrable,
    mixin,
    store,
    submit_poll,
    timestamps,
    variables,
    xcom,
)
from taskstate.lint.checks.base import Context
from taskstate.lint.finding import Finding
from taskstate.lint.source import Source

Check = Callable[[Source, Context], Iterator[Finding]]

CHECKS: tuple[Check, ...] = (
    variables.check,
    xcom.check,
    submit_poll.check,
    mixin.check,
    deferrable.check,
    store.check,
    timestamps.check,
)

__all__ = ["CHECKS", "Check", "Context"]
