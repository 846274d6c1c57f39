"""Run `etl_task.py` as try 1 (killed part-way) and try 2 (resumes), then check that every
record was processed exactly once and show the state with the `taskstate` CLI."""

from __future__ import annotations

import collections
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="taskstate-demo-"))
    db, out = work / "state.db", work / "processed.txt"
    task = [sys.executable, str(HERE / "etl_task.py"), "--db", str(db), "--out", str(out)]

    print("try 1:")
    first = subprocess.run([*task, "--crash-after", "120"], check=False)
    print(f"  exit status {first.returncode} (-9 = killed by SIGKILL)")
    print("try 2 (the retry):")
    subprocess.run(task, check=True)

    counts = collections.Counter(out.read_text().split())
    twice = sorted(int(r) for r, n in counts.items() if n > 1)
    print(f"records processed: {len(counts)} of 200; processed more than once: {twice or 'none'}")
    url = f"sqlite:///{db}"
    print("state, as the CLI shows it:")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "taskstate",
            "--url",
            url,
            "task",
            "list",
            "--dag-id",
            "etl_with_checkpoint",
        ],
        check=True,
    )
    ok = first.returncode == -9 and len(counts) == 200 and not twice
    print("OK: the retry resumed from its checkpoint" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
