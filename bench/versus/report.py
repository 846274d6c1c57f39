"""bench/RESULTS.md: machine, versions, method, then one table per workload."""

from __future__ import annotations

import os
import platform
import subprocess
from dataclasses import dataclass, field
from typing import Any

from versus.envs import REPO
from versus.stats import median_of
from versus.workloads import Runs


@dataclass
class Section:
    title: str
    note: str
    # side name -> workload result, and side name -> which store/command it exercised
    results: dict[str, Runs] = field(default_factory=dict)
    stores: dict[str, dict[str, str]] = field(default_factory=dict)
    crash: bool = False  # results are per-logical-job outcomes, not timings
    skipped: dict[str, str] = field(default_factory=dict)  # side name -> why it did not run


def fmt(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def ratio(a: float, b: float) -> str:
    return f"{a / b:,.0f}×" if a / b >= 10 else f"{a / b:.2f}×"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _crash_rows(section: Section) -> tuple[list[str], list[list[str]]]:
    header = [
        "kill point",
        "side",
        "logical jobs",
        "finished on a retry (try 1 killed)",
        "jobs created per logical job",
        "submit calls",
        "returned the job's result",
        "returned None",
        "tries that returned",
    ]
    rows = []
    for side, runs in section.results.items():
        for kill_at, jobs in runs.items():
            created = [j["jobs"] for j in jobs]
            low, high, mean = min(created), max(created), sum(created) / len(created)
            spread = f"{low:.0f}" if low == high else f"{low:.0f}–{high:.0f} (mean {mean:.2f})"
            rows.append(
                [
                    kill_at.replace("_", " "),
                    side,
                    str(len(jobs)),
                    f"{sum(j['killed_once'] for j in jobs):.0f} / {len(jobs)}",
                    spread,
                    f"{sum(j['submits'] for j in jobs):.0f}",
                    f"{sum(j['correct'] for j in jobs):.0f} / {len(jobs)}",
                    f"{sum(j['none'] for j in jobs):.0f} / {len(jobs)}",
                    f"{sum(j.get('returns', 1) for j in jobs):.0f}",
                ]
            )
    return header, rows


def render_section(section: Section, baseline: str) -> list[str]:
    lines = [f"## {section.title}", "", section.note, ""]
    if section.crash:
        lines += _table(*_crash_rows(section))
        return [*lines, *_footer(section), ""]
    base = section.results.get(baseline, {})
    metrics = list(dict.fromkeys(m for runs in section.results.values() for m in runs))
    pct = any("p50" in r[0] for runs in section.results.values() for r in runs.values() if r)
    stats = ["p50", "p95"] if pct else ["wall"]
    header = [
        "metric",
        "side",
        *(["p50", "p95"] if pct else ["wall time"]),
        "runs",
        *(f"Airflow ÷ taskstate ({s})" if pct else "Airflow ÷ taskstate" for s in stats),
    ]
    rows = []
    for metric in metrics:
        for side, runs in section.results.items():
            if metric not in runs:
                continue
            values = [median_of(runs[metric], s) for s in stats]
            ratios = ["—"] * len(stats)
            if side != baseline and metric in base:
                ratios = [
                    ratio(median_of(base[metric], s), v) for s, v in zip(stats, values, strict=True)
                ]
            rows.append([metric, side, *map(fmt, values), str(len(runs[metric])), *ratios])
    lines += _table(header, rows)
    return [*lines, *_footer(section), ""]


def _footer(section: Section) -> list[str]:
    lines = []
    stores = [
        f"- {side}: " + "; ".join(f"{k}: `{v}`" for k, v in used.items())
        for side, used in section.stores.items()
        if used
    ]
    if stores:
        lines += ["", "What each side exercised:", "", *stores]
    if section.skipped:
        lines += ["", *(f"- Not run on {side}: {why}." for side, why in section.skipped.items())]
    return lines


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _mem_gb() -> str:
    try:
        with open("/proc/meminfo") as info:
            kb = int(info.readline().split()[1])
        return f"{kb / 1024 / 1024:.0f} GB"
    except (OSError, ValueError, IndexError):
        return "unknown"


def commit() -> str:
    out = subprocess.run(
        ["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True, text=True
    )
    return out.stdout.strip() or "unknown"


def render(sections: list[Section], sides: dict[str, Any], baseline: str) -> str:
    load = os.getloadavg()
    smoke = any(side.get("smoke") for side in sides.values())
    runs = min((side["runs"] for side in sides.values()), default=0)
    lines = [
        "# taskstate vs Airflow 3.3.2's native state store",
        "",
        "Generated by `make bench` (`bash scripts/bench.sh`; raw figures in the `.json` next to "
        "this file); do not edit by hand."
        + (" **Smoke run: tiny N, figures are not meaningful.**" if smoke else ""),
        "",
        f"- Machine: {_cpu()}, {os.cpu_count()} cores, {_mem_gb()} RAM, "
        f"{platform.system()} {platform.release()}; load average when the report was written "
        f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (the machine was shared with other work)",
        *(
            f"- {name}: measured {side['measured']} at commit `{side['commit']}`; "
            f"{side['describe']}"
            for name, side in sides.items()
        ),
        "",
        "Method: every workload runs as real DAGs in each environment; each task times its own "
        "store calls with `time.perf_counter` and writes them to a JSON file the driver collects "
        f"(cleanup is timed around the CLI process). Each timing is run {runs} times or more; the "
        "tables show the **median over runs** of each run's p50 / p95 (or wall time). The ratio "
        f"is Airflow ÷ taskstate against `{baseline}`: above 1× means taskstate is faster.",
        "",
    ]
    for section in sections:
        lines += render_section(section, baseline)
    return "\n".join(lines)
