"""Every metric taskstate emits, declared once: name, kind, tags and what it measures.

`Metrics` refuses to record a name that is not declared here (`declared`), so a new metric
cannot ship undocumented: `docs/metrics.md`'s table is generated from `REGISTRY`
(`markdown_table`) and `tests/test_metrics_registry.py` checks the page matches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

# Operation -> the accessor method that every public twin (set/aset, update, …) goes through:
# the accessors' instrumentation hook (`taskstate.accessors._Accessor.OPERATIONS`).
OPERATIONS: dict[str, str] = {
    "get": "get",
    "set": "_set",
    "delete": "delete",
    "clear": "clear",
    "update": "_update",
    "compare_and_set": "_compare_and_set",
    "write": "write",
}
MAX_NAME = 63  # StatsD/Airflow limit: names shorter than 64 characters

TIMER, COUNTER, GAUGE = "timer", "counter", "gauge"

Tags = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Metric:
    """One declared metric. `name` may hold placeholders: `<kind>` (task, asset), `<op>` (an
    operation of `OPERATIONS`), `<Error>` (an error class name), `<N>` (a status class digit),
    `*` (any name part, for a family declared elsewhere)."""

    name: str
    kind: str  # TIMER, COUNTER or GAUGE; the `.calls`/`.total_ms` rows are a timer's counters
    tags: tuple[str, ...]
    description: str
    derived: bool = False  # sent by the sinks beside a timer, never recorded by name

    def pattern(self) -> re.Pattern[str]:
        """The regular expression a recorded name must match."""
        parts = {
            "<kind>": "(?:task|asset)",
            "<op>": "(?:" + "|".join(OPERATIONS) + ")",
            "<Error>": "[A-Za-z_][A-Za-z0-9_]*",
            "<N>": "[1-5]",
            "*": "[a-z_]+",
        }
        text = re.escape(self.name)
        for placeholder, regex in parts.items():
            text = text.replace(re.escape(placeholder), regex)
        return re.compile(text + r"\Z")


_B = ("backend",)
REGISTRY: tuple[Metric, ...] = (
    Metric("taskstate.<kind>.<op>", TIMER, _B, "duration of the operation (interval mean)"),
    Metric("taskstate.<kind>.<op>.calls", COUNTER, _B, "calls, failed ones included", True),
    Metric(
        "taskstate.<kind>.<op>.total_ms",
        COUNTER,
        _B,
        "summed duration: mean = `total_ms / calls`",
        True,
    ),
    Metric("taskstate.<kind>.<op>.errors", COUNTER, _B, "calls that raised"),
    Metric(
        "taskstate.errors.<Error>",
        COUNTER,
        ("backend", "kind", "op"),
        "raised errors by class (`InvalidValueError`, `ValueTooLargeError`, "
        "`PreconditionFailedError`…; `other` for an exception raised by a user's `update` "
        "function)",
    ),
    Metric(
        "taskstate.<kind>.compare_and_set.conflicts",
        COUNTER,
        _B,
        "`compare_and_set` calls that found another value and wrote nothing",
    ),
    Metric(
        "taskstate.<kind>.retries",
        COUNTER,
        _B,
        "`update` / `compare_and_set` rounds run again because another writer committed first "
        "(offloaded values; without offloading the backend's transaction serialises writers "
        "and nothing is retried)",
    ),
    Metric(
        "taskstate.<kind>.value_bytes",
        COUNTER,
        _B,
        "UTF-8 bytes of the values encoded for writing (set, update, compare_and_set, write)",
    ),
    Metric(
        "taskstate.offload.bytes",
        COUNTER,
        _B,
        "bytes uploaded to object storage (before compression)",
    ),
    Metric("taskstate.offload.objects", COUNTER, _B, "objects uploaded"),
    Metric(
        "taskstate.cleanup",
        TIMER,
        (),
        "one `StateStore.cleanup` (with `.calls`, `.total_ms`)",
    ),
    Metric("taskstate.cleanup.rows_deleted", COUNTER, (), "expired rows deleted"),
    Metric("taskstate.cleanup.batches", COUNTER, (), "delete batches run"),
    Metric(
        "taskstate.cleanup.offload_orphans",
        COUNTER,
        (),
        "unreferenced offloaded objects removed",
    ),
    Metric(
        "taskstate.cleanup.longest_batch_ms",
        GAUGE,
        (),
        "the last cleanup's longest batch",
    ),
    Metric(
        "taskstate.store.import",
        TIMER,
        (),
        "`taskstate import` / `StateStore.import_entries`",
    ),
    Metric(
        "taskstate.api.request",
        TIMER,
        ("route", "method", "status"),
        "one HTTP API request; `route` is the route's name (`get_task_state`, "
        "`set_task_state`…, `unmatched`)",
    ),
    Metric(
        "taskstate.api.status.<N>xx",
        COUNTER,
        (),
        "HTTP responses by status class (`2xx`, `4xx`, `5xx`), for deployments without tags",
    ),
    Metric(
        "resumable_job.*",
        COUNTER,
        ("operator", "team_name"),
        "`ResumableJobMixin`'s five counters, as Airflow 3.3 (through Airflow's `Stats` inside "
        "Airflow, else taskstate's own sinks); see `docs/resumable.md`",
    ),
)


@lru_cache(maxsize=1024)
def declared(name: str) -> Metric | None:
    """The registry entry a recorded name belongs to (None: not declared)."""
    for metric in REGISTRY:
        if not metric.derived and metric.pattern().match(name):
            return metric
    return None


def markdown_table() -> str:
    """`docs/metrics.md`'s table of every metric, generated from `REGISTRY`."""
    kinds = {TIMER: "timer (ms)", COUNTER: "counter", GAUGE: "gauge"}
    lines = ["| name | type | tags | what |", "|------|------|------|------|"]
    for m in REGISTRY:
        tags = ", ".join(m.tags) or "—"
        lines.append(f"| `{m.name}` | {kinds[m.kind]} | {tags} | {m.description} |")
    return "\n".join(lines) + "\n"


TABLE_START = "<!-- metrics table: generated by `python -m taskstate.metrics docs/metrics.md` -->"
TABLE_END = "<!-- end of metrics table -->"


def between_markers(page: str, start: str, end: str, text: str) -> str:
    """`page` with what lies between the `start` and `end` marker lines replaced by `text`
    (a generated part of a hand-written page); ValueError when the markers are missing."""
    head, found_start, rest = page.partition(start)
    _, found_end, tail = rest.partition(end)
    if not found_start or not found_end:
        raise ValueError(f"the page has no {start!r} ... {end!r} markers")
    return head + start + "\n" + text + end + tail


def with_table(page: str) -> str:
    """`page` with the text between the table markers replaced by `markdown_table()`."""
    return between_markers(page, TABLE_START, TABLE_END, markdown_table())
