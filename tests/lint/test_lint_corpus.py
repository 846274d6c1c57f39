"""Precision on code nobody here wrote: the findings on the lint corpus are exactly the ones
reviewed by hand in corpus_findings.md, and no error-severity finding is a false positive.

The corpus is rebuilt from PyPI by scripts/fetch_lint_corpus.sh (pinned versions and sha256).
Without it these tests skip on a developer's machine and fail in CI (`CI=true`), where
scripts/test.sh fetches it first: a CI run must not go green without them.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from taskstate.lint import AirflowVersion, LintConfig, fixes, lint_paths, lint_source

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(os.environ.get("TASKSTATE_LINT_CORPUS", ROOT / ".cache" / "lint-corpus"))
REVIEW = Path(__file__).parent / "corpus_findings.md"
ROW = re.compile(
    r"^\| \d+ \| (?P<loc>\S+:\d+:\d+) \| (?P<code>TS\d+) \| (?P<severity>\w+) \| "
    r"(?P<verdict>true positive|false positive) \| (?P<reason>.+) \|$"
)


def reviewed() -> dict[str, tuple[str, str]]:
    rows = {}
    for line in REVIEW.read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if match:
            rows[f"{match['loc']} {match['code']}"] = (match["severity"], match["verdict"])
    return rows


@pytest.fixture
def corpus() -> Path:
    if not (CORPUS / ".complete").exists():
        missing = f"lint corpus not fetched into {CORPUS} (bash scripts/fetch_lint_corpus.sh)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(missing)
        pytest.skip(missing)
    return CORPUS


def test_corpus_findings_match_the_hand_review(corpus: Path) -> None:
    results = lint_paths([corpus], LintConfig(root=corpus), AirflowVersion.parse("3.3", "test"))
    assert len(results) == 574  # the count corpus_findings.md states
    assert not [r.path for r in results if r.parse_error]
    found = {
        f"{Path(f.path).relative_to(corpus).as_posix()}:{f.line}:{f.col} {f.code}": f
        for r in results
        for f in r.findings
    }
    review = reviewed()
    assert sorted(found) == sorted(review), "update tests/lint/corpus_findings.md by hand"
    for key, finding in found.items():
        severity, verdict = review[key]
        assert severity == finding.severity.value, key
        if severity == "error":
            assert verdict == "true positive", f"error-severity false positive: {key}"


def test_review_table_is_readable() -> None:
    rows = reviewed()
    assert rows, "no finding rows parsed from corpus_findings.md"


def test_fixes_on_code_nobody_here_wrote_parse_and_lint_clean(corpus: Path) -> None:
    version = AirflowVersion.parse("3.3", "test")
    config = LintConfig(root=corpus)
    fixed_files = 0
    for result in lint_paths([corpus], config, version):
        if result.text is None or not any(f.fix for f in result.findings):
            continue
        text, applied = fixes.apply(result.text, result.findings)
        assert applied == sum(1 for f in result.findings if f.fix), result.path
        ast.parse(text)
        again = lint_source(text, result.path, config, version)
        assert not [f for f in again.findings if f.fix], result.path
        fixed_files += 1
    assert fixed_files >= 1


def test_in_ci_a_missing_corpus_fails_the_corpus_tests(tmp_path: Path) -> None:
    # Only the plugin the ini's `timeout` needs: the others' imports were half the run's CPU.
    env = {
        **os.environ,
        "CI": "true",
        "TASKSTATE_LINT_CORPUS": str(tmp_path / "none"),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "pytest_timeout",
            __file__,
            "-k",
            "hand_review",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1, run.stdout
    assert "1 error" in run.stdout and "lint corpus not fetched" in run.stdout  # not a skip
