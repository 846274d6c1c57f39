"""Who wrote a key: the writer vocabulary, in its one place.

`kind` stays inside Airflow 3.3's writer enum (`task`, `watcher`, `api`), so a record means the
same in Airflow's store and UI after `taskstate migrate-to-airflow`. A write that did not come
from a task is `api`; `via` says which of taskstate's doors it came through, and `user` /
`subject` who used it:

- `{"kind": "task", "dag_id", "run_id", "task_id", "map_index", "try_number"}`: a task's own
  write — the default of a task accessor, inside Airflow and in plain Python (`writer=` says
  otherwise). `try_number` (Airflow's name) is the try that wrote, so a zombie try overwriting
  a newer try's checkpoint shows in the history; it is left out where no try is known (plain
  Python, and rows written before it was recorded) — never null. Airflow's own writer record
  has no try: `migrate-to-airflow` drops it;
- `{"kind": "api", "subject": ...}`: the HTTP API, as the caller's credentials name it;
- `{"kind": "api", "via": "ui", "subject": ...}`: the same through the state pages (they say so
  with the `X-Taskstate-Via: ui` header; the subject still comes from the credentials);
- `{"kind": "api", "via": "cli", "user": <OS user>}`: `taskstate task set` / `asset set` /
  `variables migrate`;
- `{"kind": "api", "via": "import", "user": <OS user>}`: a line of an export file written before
  lines carried their writer (a line that carries one keeps it);
- `None`: unknown (rows older than schema 2; an asset written in plain Python without `writer=`).
"""

from __future__ import annotations

import getpass
import json
import os
from typing import Any, Final

from taskstate.scope import TaskScope

Writer = dict[str, Any]
"""A writer record as above: JSON-able, stored as compact JSON text beside the value."""

KINDS: Final = ("task", "watcher", "api")  # Airflow's AssetStateStoreWriterKind


def task_writer(scope: TaskScope, try_number: int | None = None) -> Writer:
    """The writer identity of a task instance (what its own writes record): with the try that
    writes when it is known (inside Airflow, a task-instance token), without it otherwise."""
    writer: Writer = {
        "kind": "task",
        "dag_id": scope.dag_id,
        "run_id": scope.run_id,
        "task_id": scope.task_id,
        "map_index": scope.map_index,
    }
    if try_number is not None:
        writer["try_number"] = int(try_number)
    return writer


VIAS: Final = ("ui",)
"""The `via` an HTTP client may claim for itself (the header is a label, never a credential)."""


def api_writer(subject: str, via: str | None = None) -> Writer:
    """A caller of the HTTP API, named by its credentials; `via` when it is one of `VIAS`."""
    if via in VIAS:
        return {"kind": "api", "via": via, "subject": subject}
    return {"kind": "api", "subject": subject}


def cli_writer() -> Writer:
    """A person at the `taskstate` command, named by their operating-system account."""
    return {"kind": "api", "via": "cli", "user": os_user()}


def import_writer() -> Writer:
    """An imported line that does not say who wrote it."""
    return {"kind": "api", "via": "import", "user": os_user()}


def os_user() -> str:
    """The login name, or the numeric uid where the account has none (a container's
    arbitrary uid: getpass raises there)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"


def describe(writer: Writer | None) -> str:
    """A writer in a few words, for tables: "task", "task try 3", "cli: alice", "api: ops",
    "ui: ops", "import: alice", "" when unknown."""
    if writer is None:
        return ""
    via, who = writer.get("via"), writer.get("user") or writer.get("subject")
    label = str(via or writer.get("kind", "?"))
    if label == "task":
        tried = writer.get("try_number")
        return label if tried is None else f"task try {tried}"
    return f"{label}: {who}" if who else label


def writer_text(writer: Writer | None) -> str | None:
    """A writer as stored: compact JSON with sorted keys (None: unknown writer)."""
    return None if writer is None else json.dumps(writer, separators=(",", ":"), sort_keys=True)
