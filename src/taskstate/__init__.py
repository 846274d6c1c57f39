"""Durable task state, asset state and crash-safe jobs for Airflow 2.10+ and plain Python."""

from taskstate import errors, ops
from taskstate.history import Version
from taskstate.resumable import ResumableJobMixin, ResumeAction, ResumeDecision
from taskstate.scope import AssetScope, TaskScope
from taskstate.store import AssetStateStore, StateStore, TaskStateStore
from taskstate.values import NEVER_EXPIRE

__all__ = [
    "NEVER_EXPIRE",
    "AssetScope",
    "AssetStateStore",
    "ResumableJobMixin",
    "ResumeAction",
    "ResumeDecision",
    "StateStore",
    "TaskScope",
    "TaskStateStore",
    "Version",
    "errors",
    "ops",
]
__version__ = "0.1.0"
