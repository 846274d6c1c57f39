"""`python -m taskstate.metrics docs/metrics.md docs/grafana-taskstate.json`: rewrite what is
generated from the registry (`taskstate.metrics.names.REGISTRY`): a Markdown page's table of
every metric and its statsd_exporter mappings (between their markers), a `.json` file's Grafana
dashboard. tests/test_metrics_registry.py checks they are up to date."""

from __future__ import annotations

import sys
from pathlib import Path

from taskstate.metrics.dashboard import MAPPINGS_START, dashboard_json, with_mappings
from taskstate.metrics.names import with_table

for path in map(Path, sys.argv[1:]):
    if path.suffix == ".json":
        path.write_text(dashboard_json(), encoding="utf-8")
        continue
    page = with_table(path.read_text(encoding="utf-8"))
    path.write_text(with_mappings(page) if MAPPINGS_START in page else page, encoding="utf-8")
