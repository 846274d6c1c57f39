"""The `taskstate` command on a real SQLite file: in this process through click's runner, and as a
real subprocess where only a process shows the claim (pipes, terminals, the environment)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from tests.cli import invoke

from taskstate import NEVER_EXPIRE, AssetScope, StateStore, TaskScope
from taskstate.backends import sqlite as sqlite_backend
from taskstate.settings import Settings
from taskstate.writers import task_writer

SCOPE = ["--dag-id", "d", "--run-id", "r", "--task-id", "t"]


@pytest.fixture
def run(tmp_path: Path):  # type: ignore[no-untyped-def]
    """The command in this process (tests/cli.py says why); a real process where it matters."""
    url = f"sqlite:///{tmp_path}/state.db"

    def run(
        *args: str, ok: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        proc = invoke("--url", url, *args, stdin=stdin)
        if ok:
            assert proc.returncode == 0, proc.stderr
        else:
            assert proc.returncode != 0
            assert "Traceback" not in proc.stderr
        return proc

    run.url = url  # type: ignore[attr-defined]
    return run


def test_task_set_get_list_delete_clear(run) -> None:  # type: ignore[no-untyped-def]
    run("task", "set", "cursor", "42", *SCOPE)
    run("task", "set", "obj", '{"a": [1, null]}', *SCOPE, "--never-expire")
    run("task", "set", "name", "plain text", *SCOPE, "--text", "--map-index", "2")
    assert run("task", "get", "cursor", *SCOPE).stdout.strip() == "42"
    assert json.loads(run("task", "get", "obj", *SCOPE, "--json").stdout) == {"a": [1, None]}
    rows = json.loads(run("task", "list", "--dag-id", "d", "--json").stdout)
    assert [(r["map_index"], r["key"], r["value"]) for r in rows] == [
        (-1, "cursor", 42),
        (-1, "obj", {"a": [1, None]}),
        (2, "name", "plain text"),
    ]
    assert [r["expires_at"] for r in rows][1] == "never"
    assert "cursor" in run("task", "list", "--dag-id", "d").stdout  # human table
    run("task", "delete", "cursor", *SCOPE)
    run("task", "delete", "cursor", *SCOPE)  # absent: still fine
    assert "no key 'cursor'" in run("task", "get", "cursor", *SCOPE, ok=False).stderr
    run("task", "clear", *SCOPE)
    assert [
        r["key"] for r in json.loads(run("task", "list", "--dag-id", "d", "--json").stdout)
    ] == ["name"]
    out = run("task", "clear", *SCOPE, "--all-map-indices").stdout
    assert "deleted 1 keys" in out
    assert json.loads(run("task", "list", "--dag-id", "d", "--json").stdout) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["task", "set", "k", "NaN", *SCOPE], "NaN"),
        (["task", "set", "k", "notjson", *SCOPE], "is not JSON"),
        (["task", "set", "k", "null", *SCOPE], "None cannot be stored"),
        (["task", "set", "", "1", *SCOPE], "must not be empty"),
        (["task", "set", "k", "1", "--dag-id", "d"], "Missing option"),
        (["task", "set", "k", "1", *SCOPE, "--map-index", "-5"], "map_index"),
        (["task", "set", "k", "1", *SCOPE, "--never-expire", "--retention-days", "1"], "exclude"),
        (["asset", "get", "k"], "--name or --uri"),
        (["task", "clear", *SCOPE, "--all-map-indices", "--map-index", "1"], "exclude"),
    ],
)
def test_bad_input_is_a_message_and_nonzero_exit(run, args: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    proc = run(*args, ok=False)
    assert message in proc.stderr
    assert list(StateStore(run.url, settings=Settings()).backend.scan()) == []


def test_asset_commands(run) -> None:  # type: ignore[no-untyped-def]
    run("asset", "set", "watermark", '"2026-01-01"', "--name", "orders")
    run("asset", "set", "rows", "10", "--uri", "s3://b/x")
    assert run("asset", "get", "watermark", "--name", "orders").stdout.strip() == '"2026-01-01"'
    assert run("asset", "get", "rows", "--uri", "s3://b/x").stdout.strip() == "10"
    rows = json.loads(run("asset", "list", "--json").stdout)
    assert {(r["asset"], r["key"]) for r in rows} == {("orders", "watermark"), ("s3://b/x", "rows")}
    run("asset", "delete", "watermark", "--name", "orders")
    run("asset", "clear", "--uri", "s3://b/x")
    assert json.loads(run("asset", "list", "--json").stdout) == []


def test_export_import_round_trip_and_bad_import_writes_nothing(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store = StateStore(run.url, settings=Settings())
    store.task_state(TaskScope("d", "r", "t", 3)).set("k", {"x": 1}, retention=NEVER_EXPIRE)
    store.task_state(TaskScope("d", "r", "t")).set("c", 5)
    store.asset_state(AssetScope(name="orders")).set("w", "2026")
    dump = run("export").stdout
    assert len(dump.splitlines()) == 3

    other = tmp_path / "other.db"
    good = invoke("--url", f"sqlite:///{other}", "import", stdin=dump)
    assert good.returncode == 0, good.stderr
    assert "imported 3 keys" in good.stdout
    copy = StateStore(f"sqlite:///{other}", settings=Settings())
    assert copy.task_state(TaskScope("d", "r", "t", 3)).get("k") == {"x": 1}
    assert copy.asset_state(AssetScope(name="orders")).get("w") == "2026"
    assert sorted(r.expires_at is None for r in copy.backend.scan()) == [False, True, True]

    bad = dump + '{"scope":"task","dag_id":"d","run_id":"r","task_id":"t","key":"n","value":NaN}\n'
    third = f"sqlite:///{tmp_path}/third.db"
    proc = invoke("--url", third, "import", stdin=bad)
    assert (
        proc.returncode == 1 and "line 4" in proc.stderr and "nothing was imported" in proc.stderr
    )
    assert list(StateStore(third, settings=Settings()).backend.scan()) == []


def test_clean_dry_run_then_clean(run) -> None:  # type: ignore[no-untyped-def]
    store = StateStore(run.url, settings=Settings())
    backend = store.backend
    for i in range(25):
        backend.set(TaskScope("d", "r", "t").namespace, f"old{i}", "1", 1.0, 0.0)
    store.task_state(TaskScope("d", "r", "t")).set("fresh", 1)
    store.asset_state(AssetScope(name="a")).set("w", 1)
    assert "would delete 25" in run("clean", "--dry-run").stdout
    result = json.loads(run("clean", "--batch-size", "10", "--json").stdout)
    assert (result["deleted"], result["batches"]) == (25, 3)
    assert sorted(r.key for r in backend.scan()) == ["fresh", "w"]


def test_db_and_doctor(run) -> None:  # type: ignore[no-untyped-def]
    latest = len(sqlite_backend.MIGRATIONS)
    assert f"now at version {latest}" in run("db", "migrate").stdout
    assert "(current)" in run("db", "check").stdout
    checks = {c["check"]: c for c in json.loads(run("doctor", "--json").stdout)}
    assert checks["backend"]["status"] == "ok"
    retention = checks["[state_store] default_retention_days"]
    assert (retention["value"], retention["source"]) == ("30", "default")


def test_doctor_names_a_bad_setting(run, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS", "-3")
    proc = run("doctor", ok=False)
    assert "default_retention_days must be >= 0" in proc.stdout


def test_the_size_limit_holds_on_cli_set_and_import(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """65,535 UTF-8 bytes of JSON, not characters: 33,000 "é" are 66,002 bytes."""
    big = "é" * 33_000
    proc = run("task", "set", "k", big, *SCOPE, "--text", ok=False)
    assert "66002 bytes" in proc.stderr and "65535" in proc.stderr, proc.stderr
    run("task", "set", "k", "é" * 32_000, *SCOPE, "--text")  # 64,002 bytes: under the limit
    assert json.loads(run("task", "get", "k", *SCOPE).stdout) == "é" * 32_000

    line = {"scope": "task", "dag_id": "d", "run_id": "r", "task_id": "t", "key": "n"}
    dump = json.dumps({**line, "value": 1}) + "\n" + json.dumps({**line, "key": "m", "value": big})
    proc = run("import", stdin=dump + "\n", ok=False)
    assert "line 2" in proc.stderr and "nothing was imported" in proc.stderr, proc.stderr
    assert "66002 bytes" in proc.stderr
    rows = json.loads(run("task", "list", "--dag-id", "d", "--json").stdout)
    assert [r["key"] for r in rows] == ["k"]  # the earlier set; neither import line


def test_an_import_failing_at_write_time_writes_nothing(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Issue 11.1: a line that passes the checks but fails in the backend (here a lone
    surrogate, which SQLite cannot encode) left the 499 lines before it written."""
    StateStore(run.url, settings=Settings()).task_state(TaskScope("d", "r", "t")).set("old", 1)
    line = '{{"scope":"task","dag_id":"d","run_id":"r","task_id":"t","key":{key},"value":1}}'
    lines = [line.format(key=json.dumps(f"k{i}")) for i in range(1000)]
    lines[500] = line.format(key='"bad\\ud800"')
    proc = run("import", ok=False, stdin="\n".join(lines))
    assert proc.returncode == 1 and "nothing was imported" in proc.stderr
    assert "Traceback" not in proc.stderr
    store = StateStore(run.url, settings=Settings())
    assert store.task_state(TaskScope("d", "r", "t")).keys() == ["old"]
    ok = run("import", "--keep-existing", stdin="\n".join([*lines[:3], line.format(key='"old"')]))
    assert "imported 3 keys" in ok.stdout and "kept 1 existing" in ok.stdout


@pytest.mark.parametrize("days", ["nan", "inf", "-1", "1e9"])
def test_bad_retention_days_are_one_line_errors(run, days: str) -> None:  # type: ignore[no-untyped-def]
    proc = run("task", "set", "k", "1", *SCOPE, "--retention-days", days, ok=False)
    assert (
        proc.returncode == 2 and "Traceback" not in proc.stderr and "retention-days" in proc.stderr
    )


def test_import_of_a_non_utf8_file_is_a_one_line_error(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes('{"scope":"asset","asset":"a","key":"k","value":"caf\xe9"}\n'.encode("latin-1"))
    proc = run("import", str(bad), ok=False)
    assert proc.returncode == 1 and "UTF-8" in proc.stderr and "Traceback" not in proc.stderr


def test_a_database_path_under_a_regular_file_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    proc = subprocess.run(
        [sys.executable, "-m", "taskstate", "--url", f"sqlite:///{tmp_path}/file/s.db", "task",
         "get", "k", *SCOPE],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr


def test_a_newer_schema_gets_the_same_advice_everywhere(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`db check` and `doctor` once said "run taskstate db migrate", which then refused."""
    import sqlite3

    run("task", "set", *SCOPE, "k", "1")
    with sqlite3.connect(tmp_path / "state.db") as conn:
        conn.execute("PRAGMA user_version = 99")
    check = run("db", "check", ok=False)
    migrate = run("db", "migrate", ok=False)
    doctor = json.loads(invoke("--url", run.url, "doctor", "--json").stdout)
    backend = next(c for c in doctor if c["check"] == "backend")
    for said in (check.stderr, migrate.stderr, backend["detail"]):
        assert "upgrade taskstate" in said
        assert "db migrate" not in said
    assert backend["status"] == "warn"  # a rolling upgrade: older code still reads and writes
    assert run("task", "get", *SCOPE, "k").stdout.strip() == "1"


# -- issue 30: the CLI as a person meets it ---------------------------------------------------


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TASKSTATE"))}
    return {**env, **extra}


def test_retention_days_0_is_a_usage_error_naming_never_expire(run) -> None:  # type: ignore[no-untyped-def]
    """Issue 30.2: `--retention-days 0` wrote a key that had already expired (exit 0)."""
    for days in ("0", "0.0", "-0"):
        proc = run("task", "set", "k", "1", *SCOPE, "--retention-days", days, ok=False)
        assert proc.returncode == 2 and "--never-expire" in proc.stderr, proc.stderr
    run("task", "set", "k", "1", *SCOPE, "--retention-days", "0.5")
    assert run("task", "get", "k", *SCOPE).stdout.strip() == "1"


def test_variables_migrate_without_airflow_is_a_message(run) -> None:  # type: ignore[no-untyped-def]
    proc = run("variables", "migrate", "--variable", "v", "--to-asset", "a", "--key", "k", ok=False)
    assert proc.returncode == 1 and "Airflow is not installed" in proc.stderr, proc.stderr


def test_listings_speak_table_json_yaml_and_plain(run) -> None:  # type: ignore[no-untyped-def]
    run_id = "scheduled__2026-01-01T00:00:00+00:00"
    scope = ["--dag-id", "d", "--run-id", run_id, "--task-id", "extract"]
    run("task", "set", "cursor", '{"a": 1}', *scope)
    run("asset", "set", "watermark", '"2026"', "--name", "orders")
    as_json = json.loads(run("task", "list", "--dag-id", "d", "-o", "json").stdout)
    assert as_json == json.loads(run("task", "list", "--dag-id", "d", "--json").stdout)
    assert [(r["run_id"], r["value"]) for r in as_json] == [(run_id, {"a": 1})]
    yaml = pytest.importorskip("yaml")  # in the dev lock; -o yaml says what to install if not
    assert yaml.safe_load(run("task", "list", "--dag-id", "d", "-o", "yaml").stdout) == as_json
    header, line = run("task", "list", "--dag-id", "d", "--output", "plain").stdout.splitlines()
    assert header.split() == [
        "run_id", "task_id", "map_index", "key", "value", "expires_at", "updated_at",
        "updated_by",
    ]  # fmt: skip
    assert line.split()[:5] == [run_id, "extract", "-1", "cursor", '{"a":']
    assert "┃" not in header and "…" not in line  # no borders, nothing cut
    # An 80-column terminal: the table folds a long run id instead of cutting it with "…".
    narrow = subprocess.run(
        [sys.executable, "-m", "taskstate", "--url", run.url, "task", "list", "--dag-id", "d"],
        capture_output=True, text=True, check=True,
        env={**os.environ, "FORCE_COLOR": "1", "COLUMNS": "80"},
    ).stdout  # fmt: skip
    plain_text = re.sub(r"\x1b\[[0-9;]*m", "", narrow)
    assert max(len(line) for line in plain_text.splitlines()) <= 80 and "…" not in plain_text
    first_column = [
        line.split("│")[1].strip() for line in plain_text.splitlines() if line[:1] == "│"
    ]
    assert "".join(first_column) == run_id
    assets = run("asset", "list", "-o", "plain").stdout.splitlines()
    assert assets[1].split()[:3] == ["orders", "watermark", "2026"]
    assert "unknown" not in run("task", "list", "--dag-id", "d", "-o", "xml", ok=False).stderr


def test_export_into_a_closed_pipe_ends_quietly(run) -> None:  # type: ignore[no-untyped-def]
    """Issue 30.9: `taskstate export | head -1` printed "Broken pipe" and exited 1."""
    lines = [
        json.dumps({"scope": "asset", "asset": "a", "key": f"k{i}", "value": "x" * 100})
        for i in range(2000)  # ~250 kB: more than a pipe holds, so the writer meets the close
    ]
    run("import", stdin="\n".join(lines))
    proc = subprocess.run(
        ["bash", "-c", '"$0" -m taskstate --url "$1" export | head -1; exit "${PIPESTATUS[0]}"',
         sys.executable, run.url],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["key"] == "k0"
    assert "Broken pipe" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert "Exception ignored" not in proc.stderr


def test_version_and_help_summaries(run) -> None:  # type: ignore[no-untyped-def]
    from importlib.metadata import version

    assert run("--version").stdout.strip() == f"taskstate {version('taskstate')}"
    for group in ([], ["task"], ["asset"], ["db"], ["variables"]):
        out = run(*group, "--help").stdout
        commands = out.split("Commands:")[1]
        assert "..." not in commands, out  # click cut "Set KEY to VALUE (JSON, e.g." here
        assert "e.g.\n" not in commands
    assert "Set KEY to VALUE, given as JSON" in run("task", "--help").stdout


def test_a_read_of_a_mistyped_sqlite_path_creates_nothing(tmp_path: Path) -> None:
    """Issue 30.9: `task get` with a mistyped path created an empty database there."""
    missing = tmp_path / "typo" / "stat.db"
    url = f"sqlite:///{missing}"
    for args in (
        ["task", "get", "k", *SCOPE],
        ["task", "list", "--dag-id", "d"],
        ["asset", "list"],
        ["export"],
        ["db", "check"],
        ["clean"],
        ["task", "clear", *SCOPE],
    ):
        proc = invoke("--url", url, *args, env=_clean_env())
        assert proc.returncode == 1, (args, proc.stderr)
        assert f"there is no state database at {missing}" in proc.stderr, proc.stderr
        assert not missing.exists() and not missing.parent.exists(), args
    doctor = invoke("--url", url, "doctor", "--json", env=_clean_env())
    backend = next(c for c in json.loads(doctor.stdout) if c["check"] == "backend")
    assert backend["status"] == "warn" and "a write does" in backend["detail"]
    assert invoke("--url", url, "task", "set", "k", "1", *SCOPE, env=_clean_env()).returncode == 0
    assert missing.exists()  # a write still creates it


def test_a_missing_sqlite_file_is_a_typed_error_only_when_asked() -> None:
    import tempfile

    from taskstate.errors import DatabaseMissingError

    path = Path(tempfile.mkdtemp()) / "state.db"
    reader = StateStore(f"sqlite:///{path}", settings=Settings(), create=False)
    with pytest.raises(DatabaseMissingError, match=str(path)) as caught:
        reader.task_state(TaskScope("d", "r", "t")).get("k")
    assert isinstance(caught.value, FileNotFoundError) and not path.exists()
    plain = StateStore(f"sqlite:///{path}", settings=Settings())  # plain Python: a first get
    assert plain.task_state(TaskScope("d", "r", "t")).get("k", "none") == "none"  # is normal


def test_doctor_shows_option_names_sources_and_whether_credentials_are_set(
    tmp_path: Path,
) -> None:
    """Issue 30.8: Rich ate "[state_store]" from messages; settings were reprs under internal
    names; nothing said whether a secret key or a worker token was set."""
    (tmp_path / "airflow.cfg").write_text(
        "[state_store]\ndefault_retention_days = 7\ntaskstate_token = tok-in-the-file\n"
    )
    env = _clean_env(
        AIRFLOW_HOME=str(tmp_path),
        AIRFLOW__STATE_STORE__TASKSTATE_URL=f"sqlite:///{tmp_path}/s.db",
        AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES_CMD="echo 1000",
        AIRFLOW__STATE_STORE__TASKSTATE_SECRET_KEY="k" * 40,
        COLUMNS="250",
    )
    proc = invoke("doctor", "-o", "json", env=env)
    checks = {c["check"]: c for c in json.loads(proc.stdout)}
    got = {
        name: (checks[name]["value"], checks[name]["source"])
        for name in (
            "[state_store] taskstate_url",
            "[state_store] max_value_storage_bytes",
            "[state_store] default_retention_days",
            "[state_store] clear_on_success",
            "[state_store] taskstate_secret_key",
            "[state_store] taskstate_token",
        )
    }
    assert got == {
        "[state_store] taskstate_url": (
            f"sqlite:///{tmp_path}/s.db", "env AIRFLOW__STATE_STORE__TASKSTATE_URL"
        ),
        "[state_store] max_value_storage_bytes": (
            "1000", "env AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES_CMD"
        ),
        "[state_store] default_retention_days": (
            "7", f"default_retention_days in {tmp_path}/airflow.cfg"
        ),
        "[state_store] clear_on_success": ("False", "default"),
        "[state_store] taskstate_secret_key": (
            "set", "env AIRFLOW__STATE_STORE__TASKSTATE_SECRET_KEY"
        ),
        "[state_store] taskstate_token": ("set", f"taskstate_token in {tmp_path}/airflow.cfg"),
    }  # fmt: skip
    assert "k" * 40 not in proc.stdout and "tok-in-the-file" not in proc.stdout
    table = invoke("doctor", env=env).stdout
    assert "[state_store] default_retention_days" in table  # printed as written, not markup
    assert f"7 (from default_retention_days in {tmp_path}/airflow.cfg)" in table

    env["AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAYS"] = "-3"
    bad = invoke("doctor", env=env)
    assert bad.returncode == 1
    assert "[state_store] default_retention_days must be >= 0" in bad.stdout, bad.stdout


def test_every_write_says_who_wrote_it(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Issue 30.4: CLI writes were recorded as written by the task; `import` re-stamped
    `updated_at` and re-attributed every row."""
    import getpass
    import time

    person = {"kind": "api", "via": "cli", "user": getpass.getuser()}
    run("task", "set", "by_cli", "1", *SCOPE)
    run("asset", "set", "by_cli", "1", "--name", "orders")
    store = StateStore(run.url, settings=Settings())
    task = TaskScope("d", "r", "t")
    store.task_state(task).set("by_task", 2)  # plain Python: the task itself
    ops = {"kind": "api", "subject": "ops"}
    store.task_state(task, writer=ops).set("by_ops", 3)
    store.task_state(task, writer=task_writer(task, try_number=2)).set("by_try", 4)  # in Airflow
    entries = {(type(s).__name__, e.key): e for s, e in store.entries()}
    assert entries["TaskScope", "by_cli"].updated_by == person
    assert entries["AssetScope", "by_cli"].updated_by == person
    assert entries["TaskScope", "by_task"].updated_by == {
        "kind": "task", "dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1
    }  # fmt: skip  # no try_number: none is known outside Airflow
    assert entries["TaskScope", "by_ops"].updated_by == ops
    assert entries["TaskScope", "by_try"].updated_by == {
        "kind": "task", "dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1,
        "try_number": 2,
    }  # fmt: skip
    listed = json.loads(run("task", "list", "--dag-id", "d", "-o", "json").stdout)
    assert {r["key"]: r["updated_by"] for r in listed}["by_cli"] == person
    table = run("task", "list", "--dag-id", "d", "-o", "plain").stdout.splitlines()
    by = {line.split()[3]: line.split(None, 7)[-1] for line in table[1:]}
    assert by == {"by_cli": f"cli: {person['user']}", "by_ops": "api: ops", "by_task": "task",
                  "by_try": "task try 2"}  # fmt: skip
    history = run("task", "history", "by_try", *SCOPE, "-o", "plain").stdout.splitlines()
    assert "task try 2" in history[1], history
    (line,) = [json.loads(x) for x in run("export").stdout.splitlines() if '"by_try"' in x]
    assert line["updated_by"]["try_number"] == 2

    dump = run("export").stdout
    lines = [json.loads(line) for line in dump.splitlines()]
    assert all({"updated_at", "updated_by"} <= set(line) for line in lines)
    time.sleep(0.05)  # an import that re-stamps would now differ
    copy_url = f"sqlite:///{tmp_path}/copy.db"
    assert invoke("--url", copy_url, "import", stdin=dump).returncode == 0
    copied = {(type(s).__name__, e.key): e for s, e in StateStore(copy_url).entries()}
    assert {k: (e.updated_at, e.updated_by) for k, e in copied.items()} == {
        k: (e.updated_at, e.updated_by) for k, e in entries.items()
    }

    # An older file names no writer and no time: now, and "via import".
    old = {"scope": "asset", "asset": "old", "key": "k", "value": 1}
    before = time.time()
    run("import", stdin=json.dumps(old) + "\n")
    entry = StateStore(run.url, settings=Settings()).asset_state(AssetScope(name="old")).entry("k")
    assert entry is not None and before <= entry.updated_at <= time.time()
    assert entry.updated_by == {"kind": "api", "via": "import", "user": getpass.getuser()}
    # A writer outside Airflow's kinds is refused, and nothing of the file is written.
    bad = {**old, "key": "k2", "updated_by": {"kind": "person"}}
    proc = run("import", stdin=json.dumps({**old, "key": "k1"}) + "\n" + json.dumps(bad), ok=False)
    assert "line 2: updated_by must be null or a writer whose kind is one of task" in proc.stderr
    assert StateStore(run.url, settings=Settings()).asset_state(AssetScope(name="old")).keys() == [
        "k"
    ]


def test_task_and_asset_history_and_restore(run) -> None:  # type: ignore[no-untyped-def]
    run("task", "set", "cursor", "1", *SCOPE)
    run("task", "set", "cursor", "2", *SCOPE)
    history = json.loads(run("task", "history", "cursor", *SCOPE, "--json").stdout)
    assert [(v["version"], v["op"], v["value"]) for v in history] == [(2, "set", 2), (1, "set", 1)]
    assert history[0]["updated_by"]["via"] == "cli"
    assert "restored" in run("task", "restore", "cursor", "--version", "1", *SCOPE).stdout
    assert run("task", "get", "cursor", *SCOPE).stdout.strip() == "1"
    before_clear = datetime.now(timezone.utc).isoformat()
    run("task", "clear", *SCOPE)
    out = run("task", "restore", *SCOPE, "--as-of", before_clear).stdout
    assert "restored 1 keys" in out
    assert run("task", "get", "cursor", *SCOPE).stdout.strip() == "1"
    naive = run("task", "restore", *SCOPE, "--as-of", "2026-01-01T00:00:00", ok=False)
    assert "time zone" in naive.stderr
    run("task", "restore", "cursor", *SCOPE, ok=False)  # KEY needs --version
    asset = ["--name", "a"]
    run("asset", "set", "k", '"x"', *asset)
    run("asset", "delete", "k", *asset)
    ops = [v["op"] for v in json.loads(run("asset", "history", "k", *asset, "--json").stdout)]
    assert ops == ["delete", "set"]
    run("asset", "restore", "k", "--version", "1", *asset)
    assert run("asset", "get", "k", *asset).stdout.strip() == '"x"'
    missing = run("asset", "restore", "k", "--version", "9", *asset, ok=False)
    assert "no kept version 9" in missing.stderr
    # export --with-history -> import elsewhere: the versions come along, numbers kept
    exported = run("export", "--with-history")
    assert "exported 2 keys, 8 versions" in exported.stderr
    other = run.url.replace("state.db", "other.db")  # type: ignore[attr-defined]
    proc = invoke("--url", other, "import", stdin=exported.stdout)
    assert proc.returncode == 0, proc.stderr
    assert "imported 2 keys" in proc.stdout and "8 history versions" in proc.stdout
    with StateStore(other) as store:
        moved = store.task_state(TaskScope("d", "r", "t")).history("cursor")
    assert [(v.version, v.op) for v in moved][:2] == [(6, "import"), (5, "restore")]
