"""Percentiles and the medians across runs that the report prints."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def summary(samples: Sequence[float]) -> dict[str, float]:
    return {"p50": percentile(samples, 0.50), "p95": percentile(samples, 0.95)}


def median_of(runs: Sequence[dict[str, float]], stat: str) -> float:
    return statistics.median(run[stat] for run in runs)
