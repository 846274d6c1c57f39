"""Fail a test stage that ran fewer tests than it collected (scripts/test.sh, test-airflow.sh).

    python scripts/junit_check.py LABEL COLLECTED JUNIT [--versions "2.10 3.2"] [--allow-skip RE]

COLLECTED is the output of `pytest --collect-only -q` with the stage's own arguments; JUNIT is
the `--junitxml` of the run. The stage fails when the run reported fewer test cases than were
collected (a crash, `-x`, an interrupted lane), when any failed or errored, when a test skipped
for a reason not matched by --allow-skip (a PostgreSQL or S3 test that skipped, an Airflow test
whose env was missing), or — with --versions — when fewer tests passed for a version than were
collected for it (a parametrised id names its version: `test_x[3.2]`, `test_y[2.10-Mixin]`).
Nothing collected is a failure too: a stage that ran no test proved nothing.
"""

from __future__ import annotations

import argparse
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path


def collected_ids(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if "::" in line]


def params(test_name: str) -> set[str]:
    """The parts of a parametrised id: `test_x[2.10-Mixin]` -> {"2.10", "Mixin"}."""
    match = re.search(r"\[(.*)\]$", test_name)
    return set(match.group(1).split("-")) if match else set()


def outcomes(path: Path) -> list[tuple[str, str, str]]:
    """(test name, outcome, skip/failure message) per test case of a JUnit XML report."""
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome, message = child.tag, child.get("message", "")
                break
        cases.append((case.get("name", ""), outcome, message))
    return cases


def check(
    label: str, collected: list[str], cases: list[tuple[str, str, str]], versions: list[str],
    allow_skip: list[str],
) -> list[str]:  # fmt: skip
    problems = []
    if not collected:
        problems.append("collected no test (pytest exit 5): the stage would prove nothing")
    if len(cases) < len(collected):
        problems.append(f"ran {len(cases)} test cases, {len(collected)} were collected")
    accounted = []  # passed, or skipped for an allowed reason (a test meant for other versions)
    for name, outcome, message in cases:
        if outcome in ("failure", "error"):
            problems.append(f"{name}: {outcome}")
        elif outcome == "skipped" and not any(re.search(p, message) for p in allow_skip):
            problems.append(f"{name}: skipped ({message or 'no reason'}), which this stage forbids")
        else:
            accounted.append(name)
    for version in versions:
        wanted = sum(version in params(i.rsplit("::", 1)[-1]) for i in collected)
        ran = sum(version in params(n) for n in accounted)
        if ran < wanted:
            problems.append(f"Airflow {version}: {ran} tests ran, {wanted} were collected")
    counts = Counter(o for _, o, _ in cases)
    summary = ", ".join(f"{n} {o}" for o, n in sorted(counts.items())) or "nothing"
    per_version = "; ".join(
        f"{v}: {sum(v in params(n) and o == 'passed' for n, o, _ in cases)} passed"
        for v in versions
    )
    print(
        f"{label}: {len(collected)} collected, {summary}" + (f" ({per_version})" * bool(versions))
    )
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("label")
    parser.add_argument("collected", type=Path)
    parser.add_argument("junit", type=Path)
    parser.add_argument("--versions", default="", help="Airflow versions this run selected")
    parser.add_argument("--allow-skip", action="append", default=[], help="regex of a skip reason")
    args = parser.parse_args(argv)
    cases = outcomes(args.junit) if args.junit.exists() else []
    problems = check(
        args.label, collected_ids(args.collected), cases, args.versions.split(), args.allow_skip
    )
    for problem in problems:
        print(f"{args.label}: FAIL: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
