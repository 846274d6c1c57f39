"""Files per second of `taskstate lint` on the lint corpus, on one core.

    bash scripts/fetch_lint_corpus.sh && .venv/bin/python bench/lint_speed.py [CORPUS] [ROUNDS]

Prints the linter's rate and, as the baseline measured in the same process, the rate of
`ast.parse` alone on the same files (reading included in both), so the ratio says what the
checks cost on top of parsing. Best of several rounds (default 5; more rounds find a quiet
moment on a shared machine).
"""

from __future__ import annotations

import ast
import os
import sys
import time
from pathlib import Path

from record import meta, save

from taskstate.lint import AirflowVersion, LintConfig, lint_paths
from taskstate.lint.engine import iter_files

ROUNDS = 5


def best_of(rounds: int, work: object) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        work()  # type: ignore[operator]
        best = min(best, time.perf_counter() - start)
    return best


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".cache/lint-corpus")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else ROUNDS
    if not root.is_dir():
        print(f"no corpus at {root}: run scripts/fetch_lint_corpus.sh first", file=sys.stderr)
        return 2
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    config = LintConfig()
    version = AirflowVersion.parse("3.3", "bench")
    files = list(iter_files([root], config))

    def parse_only() -> None:
        for path in files:
            ast.parse(path.read_bytes().decode("utf-8-sig"))

    def lint() -> None:
        lint_paths([root], config, version)

    lint()  # warm the file cache and imports
    started = meta()
    baseline = best_of(rounds, parse_only)
    linted = best_of(rounds, lint)
    print(f"corpus: {len(files)} files, {sum(p.stat().st_size for p in files) / 1e6:.1f} MB")
    print(f"ast.parse only : {len(files) / baseline:8.0f} files/s")
    print(f"taskstate lint : {len(files) / linted:8.0f} files/s  (one core, best of {rounds})")
    print(f"ratio lint/parse-only time: {linted / baseline:.2f}x")
    figures = {
        "files": len(files),
        "rounds": rounds,
        "parse_only_files_per_s": len(files) / baseline,
        "lint_files_per_s": len(files) / linted,
    }
    save("lint_speed", figures, command=f"bench/lint_speed.py {root} {rounds}", started=started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
