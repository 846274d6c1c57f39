"""`taskstate serve`'s access and audit lines written behind the answers (`write_behind`)."""

from __future__ import annotations

import asyncio
import json
import logging
import logging.config
from collections.abc import Iterator

import pytest

from taskstate import TaskScope
from taskstate.api import logs


class Writes:
    """A stream that keeps each write apart."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> None:
        self.writes.append(text)

    def flush(self) -> None:
        pass


@pytest.fixture
def served_log(monkeypatch: pytest.MonkeyPatch) -> Iterator[Writes]:
    """serve's log config (JSON lines), its handler writing to `Writes`, lines written behind."""
    monkeypatch.setattr(logs, "_behind", False)
    config = logs.log_config("info", "json")
    for name in config["loggers"]:  # put back as they were (caplog needs propagation)
        logger = logging.getLogger(name)
        for attribute in ("handlers", "level", "propagate", "disabled"):
            monkeypatch.setattr(logger, attribute, getattr(logger, attribute))
    logging.config.dictConfig(config)
    stream = Writes()
    (handler,) = logging.getLogger("taskstate").handlers
    assert isinstance(handler, logs.BatchStreamHandler)
    handler.setStream(stream)  # type: ignore[arg-type]
    logs.write_behind()
    yield stream


def test_lines_are_written_after_the_answer_in_order_one_write_per_iteration(
    served_log: Writes,
) -> None:
    who = {"kind": "api", "subject": "s"}
    scope = TaskScope("d", "r", "t")

    async def requests() -> list[int]:
        seen = []
        for i in range(3):  # three requests' lines made in one loop iteration
            logs.audit("set", who, scope, f"k{i}")
            logs._line(logs.ACCESS, logs._access, ("127.0.0.1", "PUT", f"/p/k{i}", 204, 0.1))
        seen.append(len(served_log.writes))  # nothing written while the request runs
        await asyncio.sleep(0)  # the loop moves on: the iteration's lines are written
        seen.append(len(served_log.writes))
        logs.audit("delete", who, scope, "k0")
        await asyncio.sleep(0)
        seen.append(len(served_log.writes))
        return seen

    assert asyncio.run(requests()) == [0, 1, 2]
    lines = [json.loads(line) for line in "".join(served_log.writes).splitlines()]
    events = [(x["event"], x.get("action"), x.get("key") or x.get("path")) for x in lines]
    assert events == [
        ("audit", "set", "k0"), ("access", None, "/p/k0"),
        ("audit", "set", "k1"), ("access", None, "/p/k1"),
        ("audit", "set", "k2"), ("access", None, "/p/k2"),
        ("audit", "delete", "k0"),
    ]  # fmt: skip
    assert all(x["logger"] in ("taskstate.audit", "taskstate.access") for x in lines)
    assert lines[0]["time"].endswith("Z") and lines[0]["who"] == who


def test_outside_an_event_loop_a_line_is_written_at_once(served_log: Writes) -> None:
    logs.audit("clear", {"kind": "api", "subject": "s"}, TaskScope("d", "r", "t"), None)
    (line,) = served_log.writes
    assert json.loads(line)["action"] == "clear"


def test_the_text_format_keeps_its_shape() -> None:
    formatter = logs.TextFormatter()
    record = logging.LogRecord("taskstate.access", logging.INFO, "", 0, "m %s", ("x",), None)
    record.created, record.msecs = 1_800_000_000.25, 250.0
    assert formatter.format(record) == "2027-01-15T08:00:00.250Z INFO taskstate.access: m x"
