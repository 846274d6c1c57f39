"""The README's benchmark figures are the latest reports' (bench/readme_figures.py), not typed
by hand: a report re-run without `--write`, or a figure edited in README.md, fails here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_readme_figures_match_the_latest_bench_reports() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "readme_figures.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
