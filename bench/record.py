"""Where a bench script leaves its figures: `bench/results/<name>.json`, with the commit, the
time and the machine's load when they were measured, for `bench/readme_figures.py` and people.

    from record import save
    save("store_ops", {"set": {...}}, command="bench/store_ops.py --n 20000")
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def meta() -> dict[str, Any]:
    repo = Path(__file__).resolve().parents[1]
    described = subprocess.run(
        ["git", "-C", str(repo), "describe", "--always", "--dirty"], capture_output=True, text=True
    )
    return {
        "commit": described.stdout.strip() or "unknown",
        "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load": [round(x, 2) for x in os.getloadavg()],
        "cores": os.cpu_count(),
    }


def save(name: str, figures: dict[str, Any], *, command: str, started: dict[str, Any]) -> Path:
    """Write the figures with the metadata taken when the measurement started and now."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    record = {"command": command, "started": started, "finished": meta(), "figures": figures}
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"figures written to {path}")
    return path
