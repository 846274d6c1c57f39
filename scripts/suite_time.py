"""What each issue's tests cost the suite's wall time, from a run's JUnit XML (scripts/test.sh).

    python scripts/suite_time.py [--total SECONDS] JUNIT [JUNIT ...]

The JUNIT files are the reports of the test stages (the unit stage and the Airflow lanes), which
may run one after another or side by side. A report's share of the wall time is each of its
seconds divided by the number of reports running then (from each report's start and duration):
two lanes side by side cost the wall half their time each. Each test case gets its report's
share in proportion to its own seconds. With --total (the whole run's seconds, static checks
included), the base is the total minus the additions.

ADDITIONS is the one place that says which tests an issue of this wave added, and the suite time
that issue allows itself (`issues show N`). A test named nowhere is the base: what the suite
cost before the wave, and what issue 28 (test evidence) added, which must fit in 16 minutes. The
lists were derived from git (the commit that first defines each test function, and the branch
that brought it into main); a test an issue adds later goes into its list.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from datetime import datetime
from itertools import pairwise
from pathlib import Path

# issue -> (its name, the minutes its tests may add to the suite, the tests it added): a path
# is every test in that file, `path::function` one test function (a function's entry wins over
# its file's).
ADDITIONS: dict[int, tuple[str, float, list[str]]] = {
    22: (
        "scale",
        2,
        [
            "tests/backends/test_seek.py",
            "tests/backends/test_dag_keys.py",
            "tests/backends/test_pgbouncer.py",
            "tests/test_cleanup_memory.py",
            "tests/api/test_discovery.py::test_a_glob_lists_only_its_dags_and_pins_narrow_the_counts",
            "tests/backends/test_postgres.py::test_a_clear_whose_commit_aborted_with_the_connection_is_run_again",
            "tests/backends/test_postgres.py::test_a_write_of_many_rows_whose_commit_answer_was_lost_counts_what_it_did",
            "tests/backends/test_postgres.py::test_a_write_of_many_rows_whose_outcome_cannot_be_learned_raises_outcome_unknown",
            "tests/backends/test_postgres.py::test_an_update_whose_commit_aborted_with_the_connection_is_run_again",
            "tests/backends/test_postgres.py::test_an_update_whose_commit_answer_was_lost_is_not_run_again",
            "tests/backends/test_postgres.py::test_an_update_whose_commits_keep_aborting_gives_up_applying_nothing",
            "tests/backends/test_postgres.py::test_an_update_whose_outcome_cannot_be_learned_raises_outcome_unknown",
            "tests/backends/test_postgres.py::test_updates_through_pgbouncer_stay_exact_when_it_is_killed",
            "tests/test_store_admin.py::test_cleanup_batches_start_small_and_never_pass_the_batch_size",
        ],
    ),
    24: (
        "fleet",
        3,
        [
            "tests/test_fleet.py",
            "tests/test_write_ledger.py",
            "tests/backends/test_http.py::test_a_lost_answer_is_resent_with_its_write_id_and_applied_once",
            "tests/backends/test_http.py::test_a_lost_answer_from_a_server_without_the_ledger_is_unknown_not_applied_again",
            "tests/backends/test_http.py::test_duplicates_of_one_write_id_sent_at_once_get_one_outcome",
            "tests/backends/test_http.py::test_an_update_that_loses_every_race_for_the_whole_window_is_a_busy_error",
            "tests/backends/test_http.py::test_a_proxys_502_or_504_to_a_write_is_an_unknown_outcome",
        ],
    ),
    25: (
        "deferrable",
        2,
        [
            "tests/resumable/test_deferrable.py",
            "tests/test_trigger_state.py",
            "tests/resumable/test_kill_points.py::test_deferrable_failed_job_is_resubmitted_once_under_a_new_token",
            "tests/resumable/test_kill_points.py::test_deferrable_one_job_and_the_right_result_whatever_the_kill_point",
            "tests/resumable/test_kill_points.py::test_deferrable_without_token_only_the_window_duplicates",
            "tests/airflow/test_resumable_kill.py::test_a_watcher_killed_right_after_yielding_makes_no_duplicate_event",
            "tests/airflow/test_resumable_kill.py::test_deferrable_worker_and_triggerer_kills_leave_one_job_each",
        ],
    ),
    26: (
        "history",
        1,
        [
            "tests/test_history.py",
            "tests/api/test_history_routes.py",
            "tests/test_cli.py::test_task_and_asset_history_and_restore",
            "tests/ui/test_pages.py::test_history_panel_shows_who_when_and_restores_behind_confirmation_and_if_match",
            "tests/ui/test_pages.py::test_read_only_users_see_history_but_no_restore",
            "tests/ui/test_pages.py::test_history_diff_of_any_two_versions_marks_what_changed",
            "tests/ui/test_pages.py::test_restore_state_as_of_undoes_a_clear_after_a_preview",
            "tests/airflow/test_api_plugin.py::test_history_routes_inside_airflow_with_airflows_permissions",
        ],
    ),
    29: (
        "providers",
        2,
        ["tests/airflow/test_providers_ours.py", "tests/providers/test_step_aside.py"],
    ),
}


def issue_of(path: str, function: str) -> int | None:
    """The issue whose list names this test function, else its file; None for the base."""
    by_file = None
    for issue, (_, _, tests) in ADDITIONS.items():
        if f"{path}::{function}" in tests:
            return issue
        if path in tests:
            by_file = issue
    return by_file


def location(case: ET.Element) -> tuple[str, str]:
    """(file, function) of a JUnit test case: classname `tests.a.test_b[.Class]`, name
    `test_c[params]`; the file is the longest prefix of the classname that exists."""
    parts = case.get("classname", "").split(".")
    function = case.get("name", "").split("[", 1)[0]
    for end in range(len(parts), 0, -1):
        path = "/".join(parts[:end]) + ".py"
        if Path(path).exists():
            return path, function
    return "/".join(parts) + ".py", function


def wall_shares(spans: list[tuple[float, float]]) -> list[float]:
    """Each span's share of the wall time: every second of it divided by the number of spans
    running in that second. The shares add up to the wall time the spans cover."""
    edges = sorted({t for span in spans for t in span})
    shares = [0.0] * len(spans)
    for start, end in pairwise(edges):
        running = [i for i, (a, b) in enumerate(spans) if a <= start and end <= b]
        for i in running:
            shares[i] += (end - start) / len(running)
    return shares


def measure(reports: list[Path]) -> tuple[float, Counter[int | None]]:
    """(the wall seconds the reports cover, each issue's share of them: None the base)."""
    spans, cases = [], []
    for report in reports:
        root = ET.parse(report).getroot()
        suites = list(root.iter("testsuite"))
        start = min(datetime.fromisoformat(s.get("timestamp", "")).timestamp() for s in suites)
        spans.append((start, start + sum(float(s.get("time", 0)) for s in suites)))
        cases.append([(location(c), float(c.get("time", 0) or 0)) for c in root.iter("testcase")])
    spent = Counter[int | None]()
    for share, report_cases in zip(wall_shares(spans), cases, strict=True):
        seconds = sum(t for _, t in report_cases) or 1.0
        for where, t in report_cases:
            spent[issue_of(*where)] += share * t / seconds
    return sum(spent.values()), spent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("reports", type=Path, nargs="+", help="JUnit XML of side-by-side stages")
    parser.add_argument("--total", type=float, help="the whole run's seconds (for the base)")
    args = parser.parse_args(argv)
    wall, spent = measure(args.reports)
    print(f"== suite time by issue (the test stages: {wall:.0f} s wall)")
    added = 0.0
    for issue, (name, budget, _) in sorted(ADDITIONS.items()):
        minutes = spent[issue] / 60
        added += minutes
        verdict = "within" if minutes <= budget else "OVER"
        print(f"   issue {issue} {name:<11}{minutes:5.1f} min: {verdict} its {budget:g} min")
    total = (args.total if args.total is not None else wall) / 60
    print(
        f"   base (the rest){total - added:8.1f} min of {total:.1f} "
        f"({'the whole run' if args.total is not None else 'the tests'}); goal <= 16"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
