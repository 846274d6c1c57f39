"""Fail a test stage that proved less than it collected (scripts/test.sh, test-airflow.sh).

    python scripts/junit_check.py LABEL COLLECTED JUNIT [--versions "2.10 3.2"]
    python scripts/junit_check.py --union LABEL COLLECTED JUNIT [COLLECTED JUNIT ...]

COLLECTED is the output of `pytest --collect-only -q` with the stage's own arguments; JUNIT is
the `--junitxml` of the run. Only a pass counts as ran. The stage fails when the run reported
fewer test cases than were collected (a crash, `-x`, an interrupted lane), when any failed or
errored, when a test skipped — unless, with --versions, its message names Airflow versions and
none of them is one this lane selected ("Airflow 3.2 not selected" in the lane of 2.10 and 3.0;
the same skip in the lane of 3.2 is a test that did not run where it should have) — or, with
--versions, when fewer tests passed for a version than were collected for it (a parametrised id
names its version: `test_x[3.2]`, `test_y[2.10-Mixin]`). Nothing collected is a failure too: a
stage that ran no test proved nothing.

--union, after every lane: each test function collected in any lane (its id without the
parameters) passed at least once in some lane, so a deployment test that every lane skipped
(each thinking another lane runs it) fails the stage.
"""

from __future__ import annotations

import argparse
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

VERSION = re.compile(r"(?<![\d.])\d+\.\d+(?![\d.])")  # "3.2", "2.10"; not "3.2.2" or "1.5.0"


def collected_ids(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if "::" in line]


def params(test_name: str) -> set[str]:
    """The parts of a parametrised id: `test_x[2.10-Mixin]` -> {"2.10", "Mixin"}."""
    match = re.search(r"\[(.*)\]$", test_name)
    return set(match.group(1).split("-")) if match else set()


def function_of_id(node_id: str) -> str:
    """`tests/a/test_b.py::TestC::test_d[3.2]` -> `tests.a.test_b.TestC.test_d`."""
    path, _, rest = node_id.partition("::")
    module = path.removesuffix(".py").replace("/", ".")
    return f"{module}.{rest.replace('::', '.')}".split("[", 1)[0]


def outcomes(path: Path) -> list[tuple[str, str, str, str]]:
    """(test function, test name, outcome, skip/failure message) per test case of a JUnit XML
    report; the function is named as `function_of_id` names a collected id."""
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome, message = child.tag, child.get("message", "")
                break
        name = case.get("name", "")
        function = f"{case.get('classname', '')}.{name}".split("[", 1)[0]
        cases.append((function, name, outcome, message))
    return cases


def seconds_per_version(reports: list[Path]) -> str:
    """Where the lanes' time went, for balancing them (scripts/test-airflow.sh's table): the
    seconds of the test cases that ran, by the Airflow version their id names or, for a test
    whose id names none, the versions its skip names in another lane ("Airflow 3.2 not
    selected"); "unversioned" for the rest."""
    roots = [ET.parse(report).getroot() for report in reports]
    skipped_for = {
        (case.get("classname"), case.get("name")): VERSION.findall(skip.get("message", ""))
        for root in roots
        for case in root.iter("testcase")
        if (skip := case.find("skipped")) is not None
    }
    spent = Counter[str]()
    for root in roots:
        for case in root.iter("testcase"):
            if case.find("skipped") is not None:
                continue
            named = [p for p in params(case.get("name", "")) if VERSION.fullmatch(p)]
            named = named or skipped_for.get((case.get("classname"), case.get("name")), [])
            named = named or ["unversioned"]
            for version in named:
                spent[version] += float(case.get("time", 0) or 0) / len(named)
    return ", ".join(f"{v} {t:.0f} s" for v, t in spent.most_common())


def skip_allowed(message: str, versions: list[str]) -> bool:
    """A skip is a test meant for other versions: it names some, and none that this lane ran."""
    named = set(VERSION.findall(message))
    return bool(versions) and bool(named) and not named & set(versions)


def check(
    label: str, collected: list[str], cases: list[tuple[str, str, str, str]], versions: list[str]
) -> list[str]:
    problems = []
    if not collected:
        problems.append("collected no test (pytest exit 5): the stage would prove nothing")
    if len(cases) < len(collected):
        problems.append(f"ran {len(cases)} test cases, {len(collected)} were collected")
    for _, name, outcome, message in cases:
        if outcome in ("failure", "error"):
            problems.append(f"{name}: {outcome}")
        elif outcome == "skipped" and not skip_allowed(message, versions):
            why = "names no version this lane left out" if versions else "this stage forbids it"
            problems.append(f"{name}: skipped ({message or 'no reason'}): {why}")
    for version in versions:
        wanted = sum(version in params(i.rsplit("::", 1)[-1]) for i in collected)
        ran = sum(version in params(n) for _, n, o, _ in cases if o == "passed")
        if ran < wanted:
            problems.append(f"Airflow {version}: {ran} tests passed, {wanted} were collected")
    counts = Counter(o for _, _, o, _ in cases)
    summary = ", ".join(f"{n} {o}" for o, n in sorted(counts.items())) or "nothing"
    per_version = "; ".join(
        f"{v}: {sum(v in params(n) and o == 'passed' for _, n, o, _ in cases)} passed"
        for v in versions
    )
    print(
        f"{label}: {len(collected)} collected, {summary}" + (f" ({per_version})" * bool(versions))
    )
    return problems


def check_union(
    label: str, lanes: list[tuple[list[str], list[tuple[str, str, str, str]]]]
) -> list[str]:
    """Every test function collected in some lane passed in some lane."""
    functions = {function_of_id(i) for collected, _ in lanes for i in collected}
    passed = {f for _, cases in lanes for f, _, o, _ in cases if o == "passed"}
    if not functions:
        return ["collected no test in any lane"]
    missing = sorted(functions - passed)
    print(f"{label}: {len(functions) - len(missing)} of {len(functions)} test functions passed")
    return [f"{f}: passed in no lane" for f in missing]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--union", action="store_true", help="check lanes together")
    parser.add_argument("label")
    parser.add_argument("files", type=Path, nargs="+", help="COLLECTED JUNIT [COLLECTED JUNIT]")
    parser.add_argument("--versions", default="", help="Airflow versions this run selected")
    args = parser.parse_args(argv)
    if len(args.files) % 2 or (len(args.files) > 2 and not args.union):
        parser.error("COLLECTED and JUNIT come in pairs; several pairs only with --union")
    lanes = [
        (collected_ids(c), outcomes(j) if j.exists() else [])
        for c, j in zip(args.files[::2], args.files[1::2], strict=True)
    ]
    if args.union:
        problems = check_union(args.label, lanes)
    else:
        ((collected, cases),) = lanes
        problems = check(args.label, collected, cases, args.versions.split())
    reports = [j for j in args.files[1::2] if j.exists()]
    if args.versions or args.union:
        print(f"{args.label}: time by version: {seconds_per_version(reports)}")
    for problem in problems:
        print(f"{args.label}: FAIL: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
