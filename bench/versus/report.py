"""bench/RESULTS.md: machine, versions, method, then one table per workload."""

from __future__ import annotations

import os
import platform
import statistics
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


def _table(header: list[str], rows: list[list[str]], text_columns: int = 4) -> list[str]:
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if i < text_columns else "---:" for i in range(len(header))) + "|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


class MixedRuns(Exception):
    """The .json holds figures of several invocations and the caller did not allow that."""


@dataclass
class Context:
    """What every row needs: side labels, the threshold, the newest invocation."""

    sides: dict[str, Any]
    max_load: float
    newest: str
    mixed: bool


def _side_cells(ctx: Context, key: str) -> list[str]:
    described = ctx.sides.get(key, {}).get("describe", {})
    return [
        f"`{key}` {str(described.get('name', key)).split(': ', 1)[-1]}",
        described.get("store", "?"),
        described.get("metadata", "?"),
    ]


def _loaded(ctx: Context, run: dict[str, Any]) -> bool:
    return max(run.get("load1", 0.0), run.get("load1_end", 0.0)) > ctx.max_load


def kept_runs(ctx: Context, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs a median is taken over: those at or below the load threshold, if any."""
    quiet = [r for r in runs if not _loaded(ctx, r)]
    return quiet or runs


def _per_run(ctx: Context, runs: list[dict[str, Any]], stat: str) -> str:
    cells = []
    for run in runs:
        mark = "*" if _loaded(ctx, run) else ""
        mark += "‡" if ctx.mixed and run.get("run") != ctx.newest else ""
        cells.append(fmt(run[stat]) + mark)
    return " · ".join(cells)


def _crash_rows(ctx: Context, section: Section) -> tuple[list[str], list[list[str]]]:
    header = [
        "kill point",
        "side",
        "state, durability",
        "Airflow metadata DB",
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
                    *_side_cells(ctx, side),
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


def render_section(ctx: Context, section: Section, baselines: list[str]) -> list[str]:
    lines = [f"## {section.title}", "", section.note, ""]
    if section.crash:
        lines += _table(*_crash_rows(ctx, section))
        return [*lines, *_footer(section), ""]
    metrics = list(dict.fromkeys(m for runs in section.results.values() for m in runs))
    pct = any("p50" in r[0] for runs in section.results.values() for r in runs.values() if r)
    stat = "p50" if pct else "wall"
    header = [
        "metric",
        "side",
        "state, durability",
        "Airflow metadata DB",
        "p50 (median of runs)" if pct else "wall time (median of runs)",
        "each run's p50" if pct else "each run",
        *(["p95 (median)"] if pct else []),
        "runs",
        *(f"{b} ÷ this ({stat})" for b in baselines),
    ]
    rows = []
    for metric in metrics:
        for side, runs in section.results.items():
            if metric not in runs:
                continue
            kept = kept_runs(ctx, runs[metric])
            value = median_of(kept, stat)
            ratios = []
            for base in baselines:
                base_runs = section.results.get(base, {}).get(metric)
                if side in baselines or not base_runs:
                    ratios.append("—")
                else:
                    ratios.append(ratio(median_of(kept_runs(ctx, base_runs), stat), value))
            rows.append(
                [
                    metric,
                    *_side_cells(ctx, side),
                    fmt(value) + ("" if len(kept) == len(runs[metric]) else " (quiet runs)"),
                    _per_run(ctx, runs[metric], stat),
                    *([fmt(median_of(kept, "p95"))] if pct else []),
                    str(len(runs[metric])),
                    *ratios,
                ]
            )
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


def _measurements(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        run
        for side in data["sides"].values()
        for entry in side.get("workloads", {}).values()
        for runs in entry.get("results", {}).values()
        for run in runs
    ]


def render(
    sections: list[Section], data: dict[str, Any], baseline: list[str], allow_mixed: bool = False
) -> str:
    measured = _measurements(data)
    invocations = data.get("invocations", {})
    used = sorted({str(m.get("run", "before per-measurement records")) for m in measured})
    if len(used) > 1 and not allow_mixed:
        raise MixedRuns(
            f"the figures come from {len(used)} different runs ({', '.join(used)}): re-measure "
            "every side in one invocation, or pass --allow-mixed to render them marked"
        )
    newest = used[-1] if used else ""
    max_load = max((invocations.get(u, {}).get("max_load", 4.0) for u in used), default=4.0)
    ctx = Context(data["sides"], max_load, newest, len(used) > 1)
    smoke = any(invocations.get(u, {}).get("smoke") for u in used)
    loads = sorted(max(m.get("load1", 0.0), m.get("load1_end", 0.0)) for m in measured)
    above = sum(1 for x in loads if x > max_load)
    lines = [
        "# taskstate vs Airflow 3.3.2's native state store",
        "",
        "Generated by `make bench` (`bash scripts/bench.sh`; raw figures in the `.json` next to "
        "this file); do not edit by hand."
        + (" **Smoke run: tiny N, figures are not meaningful.**" if smoke else ""),
        "",
        f"- Machine: {_cpu()}, {os.cpu_count()} cores, {_mem_gb()} RAM, "
        f"{platform.system()} {platform.release()}, shared with other work.",
    ]
    for run_id in used:
        inv = invocations.get(run_id, {})
        done = (
            f"finished {inv['finished']}"
            if inv.get("finished")
            else "**did not finish: only the workloads and repetitions below were measured**"
        )
        lines.append(
            f"- Run `{run_id}`: commit `{inv.get('commit', '?')}`, started "
            f"{inv.get('started', '?')}, {done}; {inv.get('runs', '?')} repetitions per "
            f"timing, workloads {', '.join(inv.get('workloads', []))}."
            + (" Rows marked ‡ come from an older run." if ctx.mixed and run_id != newest else "")
        )
    if loads:
        extra = max((invocations.get(u, {}).get("repeat_loaded", 0) for u in used), default=0)
        repeated = (
            f"up to {extra} extra repetition(s) per workload and side were run for them"
            if extra
            else "no extra repetitions were run (`--repeat-loaded 0`)"
        )
        lines.append(
            f"- Load (1-min average, at the start and end of each repetition): median "
            f"{statistics.median(loads):.1f}, range {loads[0]:.1f}–{loads[-1]:.1f}; {above} of "
            f"{len(loads)} measurements ran above {max_load:.0f} (marked *); {repeated}; a "
            "median is taken over the unmarked repetitions when there are any, else over all."
        )
    for key, side in ctx.sides.items():
        d = side.get("describe", {})
        if isinstance(d, dict):
            lines.append(
                f"- `{key}` — {d.get('name')}: {d.get('versions')}; state: {d.get('store')}; "
                f"Airflow metadata DB: {d.get('metadata')}; env `{d.get('env')}`"
            )
    lines += [
        "",
        "Method: every workload runs as real DAGs in each environment; each task times its own "
        "store calls with `time.perf_counter` and writes them to a JSON file the driver collects "
        "(cleanup is timed around the CLI process). The sides alternate within each repetition "
        "(A, B, …, then the next repetition in reverse order), so load on the shared machine "
        "falls on all of them alike. Tables show the median over repetitions of each "
        "repetition's p50 (or wall time), and every repetition's own figure. Ratios are "
        "Airflow ÷ this side against A (Airflow's metadata DB on SQLite) and A-pg (on "
        "PostgreSQL): above 1× means the row is faster. Compare like with like: `B-3.2-full` "
        "against A (both WAL with synchronous=FULL), `B-3.2-pg` against A-pg (one server); "
        "`B-3.2` is taskstate's default, synchronous=NORMAL, which survives a killed process "
        "but not a power cut.",
        "",
    ]
    for section in sections:
        lines += render_section(ctx, section, baseline)
    return "\n".join(lines)
