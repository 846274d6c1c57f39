"""ResumableJobMixin under random SIGKILLs: jobs per logical job, results, decisions.

For each way of handling the idempotency token (client token the job system dedupes on;
`find_job` lookup; neither; neither with `on_lost_submission = "fail"`), run `--kills` logical
jobs. Each gets one try SIGKILLed at a random point (a named kill point, or a random moment),
then clean tries until one returns, as Airflow's retries would. A fraction (`--fail-rate`) of
logical jobs has its first job fail, so the terminal-resubmit path runs too.

    .venv/bin/python bench/resumable_faults.py [--kills 500] [--seed 1] [--fail-rate 0.1]
    .venv/bin/python bench/resumable_faults.py --deferrable [--kills 300]

`--deferrable` runs the deferrable flow instead (`execute_deferrable`; worker, triggerer and
`execute_complete` each their own process): one kill per logical job at a random point of
`DEFERRABLE_KILL_POINTS` (a triggerer kill is followed by a new triggerer, as Airflow re-creates
the trigger), against the same operator with `durable=False` (`no-taskstate`: the id lives only
in the trigger's kwargs, what a plain deferrable operator does).

Prints markdown tables (pasted into bench/README.md).
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from record import meta, save

from resumable.driver import (
    DEFERRABLE_KILL_POINTS,
    KILL_POINTS,
    SYSTEMS,
    Env,
    Scenario,
    random_deferrable_kill,
    random_kill,
    run_deferrable_scenario,
    run_scenario,
)
from resumable.jobsystem import running_jobsystem

DECISIONS = (
    "fresh_submit",
    "reconnect",
    "already_succeeded",
    "terminal_resubmit",
    "recover_from_intent",
)


def run(kills: int, seed: int, fail_rate: float, deferrable: bool) -> dict[str, list[Scenario]]:
    rng = random.Random(seed)
    results: dict[str, list[Scenario]] = {}
    with tempfile.TemporaryDirectory() as tmp, running_jobsystem(Path(tmp) / "jobs.db") as jobs:
        env = Env(state_url=f"sqlite:///{tmp}/state.db", jobs_path=jobs.path)
        if deferrable:  # a job that outlives a trigger's start, so trigger kills land
            env.run_for = 0.2
        for system in SYSTEMS.values():
            if system.airflow_332 and deferrable:
                continue  # Airflow 3.3.2's mixin has no deferrable path
            if not system.durable and not deferrable:
                continue  # the blocking path's baseline is Airflow 3.3.2's algorithm
            started = time.monotonic()
            scenario, kill = (
                (run_deferrable_scenario, random_deferrable_kill)
                if deferrable
                else (run_scenario, random_kill)
            )
            results[system.name] = [
                scenario(env, jobs, system, fail_first=rng.random() < fail_rate, **kill(rng))
                for _ in range(kills)
            ]
            print(
                f"{system.name}: {kills} scenarios in {time.monotonic() - started:.1f}s",
                file=sys.stderr,
            )
    return results


def summary(results: dict[str, list[Scenario]]) -> str:
    lines = [
        "| job system / operator | kills landed | 1 working job | 2 | ≥3 | submissions "
        "(mean / max) | correct result | stopped for a person |",
        "|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for name, scenarios in results.items():
        working = Counter(min(s.working_jobs, 3) for s in scenarios)
        landed = sum(1 for s in scenarios if any(t.killed_at for t in s.tries))
        subs = [s.submissions for s in scenarios]
        correct = sum(s.result_correct for s in scenarios)
        lost = sum(s.lost for s in scenarios)
        lines.append(
            f"| {name} | {landed}/{len(scenarios)} | {working[1]} | {working[2]} | {working[3]} "
            f"| {sum(subs) / len(subs):.2f} / {max(subs)} | {correct} | {lost} |"
        )
    return "\n".join(lines)


def by_kill_point(results: dict[str, list[Scenario]], points: tuple[str, ...]) -> str:
    names = list(results)
    lines = [
        "| kill point | " + " | ".join(f"{n}: n, >1 job" for n in names) + " |",
        "|---|" + "--:|" * len(names),
    ]
    for point in points:
        cells = []
        for name in names:
            hit = [s for s in results[name] if s.kill == point]
            extra = sum(1 for s in hit if s.working_jobs > 1)
            cells.append(f"{len(hit)}, {extra}")
        lines.append(f"| {point} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def decisions(results: dict[str, list[Scenario]]) -> str:
    lines = [
        "| job system / operator | " + " | ".join(DECISIONS) + " | (recovered by find_job) |",
        "|---|" + "--:|" * (len(DECISIONS) + 1),
    ]
    for name, scenarios in results.items():
        retries = [t for s in scenarios for t in s.tries[1:] if t.decision is not None]
        counts = Counter(t.decision for t in retries)
        recovered = sum(t.recovered for t in retries)
        cells = " | ".join(str(counts[d]) for d in DECISIONS)
        lines.append(f"| {name} | {cells} | {recovered} |")
    return "\n".join(lines)


def main() -> None:
    logging.getLogger("taskstate.resumable").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=500, help="logical jobs (one kill each)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fail-rate", type=float, default=0.1)
    parser.add_argument("--deferrable", action="store_true", help="the deferrable flow")
    args = parser.parse_args()
    started = meta()
    results = run(args.kills, args.seed, args.fail_rate, args.deferrable)
    print("Jobs per logical job (a working job is one that did not FAIL; target: exactly 1)\n")
    print(summary(results))
    print("\nLogical jobs by kill point, and how many ended with more than one working job\n")
    points = DEFERRABLE_KILL_POINTS if args.deferrable else (*KILL_POINTS, "random_time")
    print(by_kill_point(results, points))
    print("\nDecisions taken on the tries after the kill\n")
    print(decisions(results))
    figures = {
        name: {
            "logical_jobs": len(scenarios),
            "kills_landed": sum(1 for s in scenarios if any(t.killed_at for t in s.tries)),
            "working_jobs": {
                str(k): v for k, v in Counter(min(s.working_jobs, 3) for s in scenarios).items()
            },
            "correct_result": sum(s.result_correct for s in scenarios),
            "stopped_for_a_person": sum(s.lost for s in scenarios),
        }
        for name, scenarios in results.items()
    }
    command = f"bench/resumable_faults.py --kills {args.kills} --seed {args.seed}"
    if args.deferrable:
        command += " --deferrable"
    save(
        "resumable_faults_deferrable" if args.deferrable else "resumable_faults",
        figures,
        command=f"{command} --fail-rate {args.fail_rate}",
        started=started,
    )


if __name__ == "__main__":
    main()
