"""A plain-Python task that checkpoints after every record — the skill's `etl_with_checkpoint`
without Airflow. Run as one "try"; `--crash-after N` makes the process SIGKILL itself right
after checkpointing record N, the way a worker dies mid-task.

    python examples/plain/etl_task.py --db /tmp/state.db --out /tmp/out.txt [--crash-after 120]
"""

from __future__ import annotations

import argparse
import os
import signal
import time

from taskstate import StateStore, TaskScope

RECORDS = list(range(1, 201))  # stand-in for fetch_records_after(cursor)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--crash-after", type=int, default=None)
    args = parser.parse_args()

    task_state_store = StateStore(f"sqlite:///{args.db}").task_state(
        TaskScope("etl_with_checkpoint", "manual__2026-11-29", "process_records")
    )
    cursor = task_state_store.get("last_cursor", default=0)
    print(f"  starting after record {cursor}", flush=True)
    with open(args.out, "a", encoding="utf-8") as out:
        for record in (r for r in RECORDS if r > cursor):
            out.write(f"{record}\n")  # process(record)
            out.flush()
            time.sleep(0.005)
            task_state_store.set("last_cursor", record)  # checkpoint after each record
            if record == args.crash_after:
                print(f"  worker dies (SIGKILL) after checkpointing record {record}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
    print(f"  done: last record {task_state_store.get('last_cursor')}", flush=True)


if __name__ == "__main__":
    main()
