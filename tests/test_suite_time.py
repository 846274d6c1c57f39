"""scripts/suite_time.py: which tests each issue added, and their share of the suite's wall time."""

from __future__ import annotations

import ast
import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("suite_time", REPO / "scripts/suite_time.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


suite_time = load()


def test_every_test_an_issue_lists_exists() -> None:
    """A renamed or removed test would silently move its time into the base."""
    for issue, (_, _, tests) in suite_time.ADDITIONS.items():
        for entry in tests:
            path, _, function = entry.partition("::")
            assert (REPO / path).is_file(), f"issue {issue}: {path} does not exist"
            if function:
                defined = {
                    node.name
                    for node in ast.walk(ast.parse((REPO / path).read_text()))
                    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                }
                assert function in defined, f"issue {issue}: {entry} is not defined"


def test_a_function_entry_wins_over_its_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        suite_time,
        "ADDITIONS",
        {
            1: ("whole file", 1, ["tests/test_a.py"]),
            2: ("one function", 1, ["tests/test_a.py::test_one"]),
        },
    )
    assert suite_time.issue_of("tests/test_a.py", "test_one") == 2
    assert suite_time.issue_of("tests/test_a.py", "test_other") == 1
    assert suite_time.issue_of("tests/test_store.py", "test_anything") is None


@pytest.mark.parametrize(
    ("spans", "shares"),
    [
        ([(0, 100), (100, 300)], [100, 200]),  # one after the other: each costs its own time
        ([(0, 100), (0, 100)], [50, 50]),  # side by side: half each
        # a long lane, and two stages that overlap it and each other for 50 s
        ([(0, 400), (0, 100), (50, 150)], [950 / 3, 125 / 3, 125 / 3]),
    ],
)
def test_stages_side_by_side_share_the_wall(
    spans: list[tuple[float, float]], shares: list[float]
) -> None:
    assert suite_time.wall_shares(spans) == pytest.approx(shares)


def report(path: Path, start: str, cases: list[tuple[str, str, float]]) -> Path:
    rows = "".join(f'<testcase classname="{c}" name="{n}" time="{t}"/>' for c, n, t in cases)
    duration = sum(t for _, _, t in cases)
    path.write_text(
        f'<testsuites><testsuite name="pytest" timestamp="{start}" time="{duration}">'
        f"{rows}</testsuite></testsuites>"
    )
    return path


def test_an_issues_share_of_two_lanes_is_half_its_time(tmp_path: Path) -> None:
    lane0 = report(
        tmp_path / "lane0.xml",
        "2026-12-01T20:00:00+00:00",
        [
            ("tests.airflow.test_providers_ours", "test_sigkilled_at_each_point[3.2]", 60.0),
            ("tests.airflow.test_dags", "test_tasks_test_path[3.2]", 40.0),
        ],
    )
    lane1 = report(
        tmp_path / "lane1.xml",
        "2026-12-01T20:00:00+00:00",
        [("tests.test_history", "test_restore_writes_a_version_back[sqlite]", 100.0)],
    )
    cwd = os.getcwd()
    os.chdir(REPO)  # test files are found relative to the checkout, as scripts/test.sh runs it
    try:
        wall, spent = suite_time.measure([lane0, lane1])
    finally:
        os.chdir(cwd)
    assert wall == pytest.approx(100)
    assert spent[29] == pytest.approx(30)
    assert spent[26] == pytest.approx(50)
    assert spent[None] == pytest.approx(20)
