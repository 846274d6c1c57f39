"""`taskstate clean` on a million expired task rows, on both built-in backends, via the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.expired_rows import KEPT_EACH, load

from taskstate import StateStore
from taskstate.settings import Settings

EXPIRED = 1_000_000


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_clean_deletes_a_million_expired_rows_in_batches_and_keeps_the_rest(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = (
        f"sqlite:///{tmp_path}/state.db"
        if kind == "sqlite"
        else request.getfixturevalue("fresh_postgres_url")
    )
    with StateStore(url, settings=Settings()) as store:
        store.backend.migrate()
    load(url, EXPIRED, time.time())
    proc = subprocess.run(
        [sys.executable, "-m", "taskstate", "--url", url, "clean", "--batch-size", "10000",
         "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["expired"], result["deleted"]) == (EXPIRED, EXPIRED)
    assert result["batches"] == EXPIRED // 10000 + 1
    with StateStore(url, settings=Settings()) as store:
        left = sorted(row.key.rstrip("0123456789") for row in store.backend.scan())
    assert left == ["fresh"] * KEPT_EACH + ["key"] * KEPT_EACH + ["never"] * KEPT_EACH
