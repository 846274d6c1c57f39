"""`python -m taskstate.metrics docs/metrics.md`: rewrite each page's table of every metric
from the registry (`taskstate.metrics.names.REGISTRY`); tests/test_metrics_registry.py checks
the page is up to date."""

from __future__ import annotations

import sys
from pathlib import Path

from taskstate.metrics.names import with_table

for path in map(Path, sys.argv[1:]):
    path.write_text(with_table(path.read_text(encoding="utf-8")), encoding="utf-8")
