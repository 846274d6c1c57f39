"""One table of non-JSON types and their fixes: the write path's errors and TS501 both use it."""

from __future__ import annotations

import uuid
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from taskstate.errors import UnsupportedValueTypeError
from taskstate.json_types import NON_JSON
from taskstate.lint import AirflowVersion, LintConfig, lint_source
from taskstate.values import encode_value

SAMPLES: dict[str, object] = {
    "datetime": datetime(2026, 1, 1),
    "date": date(2026, 1, 1),
    "time": time(1, 2),
    "timedelta": timedelta(days=1),
    "tuple": (1, 2),
    "set": {1, 2},
    "frozenset": frozenset({1}),
    "bytes": b"x",
    "bytearray": bytearray(b"x"),
    "Decimal": Decimal("1.5"),
    "UUID": uuid.UUID(int=1),
    type(Path("x")).__name__: Path("x"),  # PosixPath (or WindowsPath); `Path` itself is abstract
    "object": object(),
}


def test_every_row_is_exercised() -> None:
    assert set(SAMPLES) | {"Path"} >= set(NON_JSON)


@pytest.mark.parametrize("name", sorted(n for n in SAMPLES if n in NON_JSON))
def test_the_write_path_gives_the_tables_advice(name: str) -> None:
    with pytest.raises(UnsupportedValueTypeError) as raised:
        encode_value({"k": SAMPLES[name]})
    assert str(raised.value).endswith("; " + NON_JSON[name].advice)


@pytest.mark.parametrize(
    ("expr", "name", "after"),
    [
        ("datetime.now()", "datetime", "datetime.now().isoformat()"),
        ("date.today()", "date", "date.today().isoformat()"),
        ("timedelta(days=1)", "timedelta", "timedelta(days=1).total_seconds()"),
        ("tuple(rows)", "tuple", "list(tuple(rows))"),
        ("{1, 2}", "set", "sorted({1, 2})"),
        ('b"x"', "bytes", 'b"x".decode()'),
        ('Decimal("1.5")', "Decimal", 'str(Decimal("1.5"))'),
        ("uuid.uuid4()", "UUID", "str(uuid.uuid4())"),
        ('Path("x")', "Path", 'str(Path("x"))'),
    ],
)
def test_ts501_names_the_tables_type_and_applies_its_rewrite(
    expr: str, name: str, after: str
) -> None:
    text = (
        "import uuid\nfrom datetime import date, datetime, timedelta\n"
        "from decimal import Decimal\nfrom pathlib import Path\n"
        f"def f(task_state_store=None):\n    task_state_store.set('k', {expr})\n"
    )
    (finding,) = lint_source(text, "d.py", LintConfig(), AirflowVersion.parse("3.3", "t")).findings
    assert finding.code == "TS501"
    assert f"stores {NON_JSON[name].what}," in finding.message
    assert finding.after == f"task_state_store.set('k', {after})"
    rewrite = NON_JSON[name].rewrite
    assert rewrite is not None and after.endswith(rewrite.split("value")[-1])


def test_ts501_without_a_sure_rewrite_shows_the_tables_advice() -> None:
    text = "def f(task_state_store=None):\n    task_state_store.set('k', object())\n"
    (finding,) = lint_source(text, "d.py", LintConfig(), AirflowVersion.parse("3.3", "t")).findings
    assert finding.after == "# " + NON_JSON["object"].advice
