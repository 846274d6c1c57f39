"""Secrets never reach output: one redaction function, and a planted secret grepped for in every
output path (CLI commands, doctor text and JSON, error messages, reprs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taskstate import StateStore
from taskstate.backends import open_backend
from taskstate.backends.offload import OffloadBackend
from taskstate.errors import ConfigError
from taskstate.redaction import redact_json_options, redact_options, redact_url, url_secrets
from taskstate.settings import Settings

SECRET = "PLANTEDs3cret"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:pw@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgresql+psycopg2://u:pw@h/db", "postgresql+psycopg2://u:***@h/db"),
        ("postgresql://u:pa/ss@h/db", "postgresql://u:***@h/db"),  # unencoded "/"
        ("postgresql://u:p@ss@h/db", "postgresql://u:***@h/db"),  # unencoded "@"
        ("postgresql://u:p%zz@h/db", "postgresql://u:***@h/db"),  # malformed escape
        ("postgresql://u:p?x#y@h/db", "postgresql://u:***@h/db"),
        ("postgresql://h/db?password=pw&sslmode=require", "postgresql://h/db?password=***&sslmode=require"),
        ("s3://bucket/p?AWS_SECRET_ACCESS_KEY=pw", "s3://bucket/p?AWS_SECRET_ACCESS_KEY=***"),
        ("mysql://root:pw@h/airflow", "mysql://root:***@h/airflow"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        ("sqlite:////abs/state.db", "sqlite:////abs/state.db"),
        ("taskstate.backends.offload.OffloadBackend", "taskstate.backends.offload.OffloadBackend"),
    ],
)  # fmt: skip
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


# Passwords as users type them: anything printable, including the characters that make URL
# parsers cut the URL elsewhere (/ ? # @ % :).
passwords = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cc", "Cs")), min_size=1, max_size=30
).map(lambda s: SECRET + s)


@given(password=passwords, encoded=st.booleans(), tail=st.sampled_from(["", "/db", "/db?x=1"]))
def test_no_password_survives_redaction(password: str, encoded: bool, tail: str) -> None:
    written = quote(password, safe="") if encoded else password
    for url in (
        f"postgresql://user:{written}@host:5432{tail}",
        f"postgresql://host:5432/db?password={quote(password, safe='')}",
        f"mysql://user:{written}@host{tail}",
    ):
        assert SECRET not in redact_url(url)
        assert password in url_secrets(url) or written in url_secrets(url)


def test_options_are_redacted_at_any_depth() -> None:
    options = {
        "key": "AKIA" + SECRET,
        "secret": SECRET,
        "endpoint_url": "http://minio:9000",
        "client_kwargs": {"aws_secret_access_key": SECRET, "region_name": "eu"},
        "token": None,
    }
    shown = redact_options(options)
    assert SECRET not in json.dumps(shown)
    assert shown["endpoint_url"] == "http://minio:9000"
    assert shown["client_kwargs"]["region_name"] == "eu"
    assert SECRET not in redact_json_options(json.dumps(options))
    assert redact_json_options("not json " + SECRET) == "***"


def test_settings_repr_and_redacted_hide_every_secret() -> None:
    settings = _settings_with_secrets(Path("/nonexistent"))
    loaded = Settings.load(settings)
    assert SECRET not in repr(loaded)
    assert SECRET not in json.dumps(loaded.redacted())
    assert loaded.taskstate_url is not None and SECRET in loaded.taskstate_url  # kept for use


def test_error_messages_and_reprs_hide_secrets(tmp_path: Path) -> None:
    for url in (
        f"mysql://u:{SECRET}@h/db",
        f"postgresql://u:pa/{SECRET}@h/db",
        f"postgresql://u:p%zz{SECRET}@h/db",
        f"postgresql://u:p@{SECRET}@h/db",
        f"sqlite:///{tmp_path}/x.db?synchronous=bogus&password={SECRET}",
    ):
        with pytest.raises(ConfigError) as caught:
            open_backend(url, Settings())
        assert SECRET not in str(caught.value), url
    offload = OffloadBackend(
        f"file://{tmp_path}/objects?token={SECRET}", storage_options={"auto_mkdir": True}
    )
    assert SECRET not in repr(offload)
    with pytest.raises(ConfigError) as bad_options:
        OffloadBackend.from_settings(
            Settings(offload_url="file:///x", offload_storage_options=f'["{SECRET}"]')
        )
    assert SECRET not in str(bad_options.value)
    with StateStore(f"sqlite:///{tmp_path}/s.db", settings=Settings()) as store:
        assert SECRET not in repr(store)


def _settings_with_secrets(tmp_path: Path) -> dict[str, str]:
    """Every option that can hold a secret, holding the planted one. Port 99999 is invalid,
    so the backend fails at once (and deterministically) without any network."""
    options = {"key": "AKIA", "secret": SECRET, "client_kwargs": {"aws_session_token": SECRET}}
    return {
        "AIRFLOW_HOME": str(tmp_path),
        "AIRFLOW__STATE_STORE__TASKSTATE_URL": (
            f"postgresql://u:{SECRET}@127.0.0.1:99999/db?sslpassword={SECRET}"
        ),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"mysql+mysqldb://airflow:{SECRET}@mysql/airflow",
        "AIRFLOW__WORKERS__STATE_STORE_BACKEND": "taskstate.backends.offload.OffloadBackend",
        "AIRFLOW__STATE_STORE__TASKSTATE_OFFLOAD_URL": f"file://{tmp_path}/objects",
        "AIRFLOW__STATE_STORE__TASKSTATE_OFFLOAD_STORAGE_OPTIONS": json.dumps(options),
    }


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TASKSTATE"))}
    return subprocess.run(
        [sys.executable, "-m", "taskstate", *args],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**clean, **env},
        check=False,
        timeout=60,
    )


SCOPE = ["--dag-id", "d", "--run-id", "r", "--task-id", "t"]


def test_no_cli_output_shows_a_planted_secret(tmp_path: Path) -> None:
    env = _settings_with_secrets(tmp_path)
    runs = {
        "doctor": _cli(env, "doctor"),
        "doctor --json": _cli(env, "doctor", "--json"),
        "db check": _cli(env, "db", "check"),
        "db migrate": _cli(env, "db", "migrate"),
        "task get": _cli(env, "task", "get", *SCOPE, "k"),
        "task set": _cli(env, "task", "set", *SCOPE, "k", "1"),
        "export": _cli(env, "export"),
        "import": _cli(env, "import", "-"),
        "clean": _cli(env, "clean", "--dry-run"),
        "task list": _cli(env, "task", "list", "--dag-id", "d"),
        "asset get": _cli(env, "asset", "get", "--name", "a", "k"),
    }
    bad_urls = (
        f"mysql://u:{SECRET}@h/db",
        f"postgresql://u:pa/{SECRET}@h/db",
        f"postgresql://u:p%zz{SECRET}@127.0.0.1/db",
        f"postgresql://u:{SECRET}@127.0.0.1:99999/db",
        f"redis://:{SECRET}@h:6379/0",
    )
    for url in bad_urls:
        runs[f"--url {url} db check"] = _cli(
            {"AIRFLOW_HOME": str(tmp_path)}, "--url", url, "db", "check"
        )
    for name, proc in runs.items():
        assert proc.returncode != 0, name  # every one of them fails: no server, bad URL
        assert "Traceback" not in proc.stderr, (name, proc.stderr)
        assert SECRET not in proc.stdout + proc.stderr, (name, proc.stdout, proc.stderr)
    doctor = json.loads(runs["doctor --json"].stdout)
    shown = {check["check"]: check["detail"] for check in doctor}
    assert "***" in shown["[state_store] taskstate_url"]
    assert "***" in shown["[state_store] taskstate_offload_storage_options"]
    assert "invalid port" in shown["backend"]  # the reason is still there, minus the secret


def test_a_failing_cmd_option_does_not_show_the_secret_it_carries() -> None:
    command = f"sh -c 'echo postgresql://u:{SECRET}@h/db >&2; exit 3'"
    with pytest.raises(ConfigError, match="exited with 3") as caught:
        Settings.load({"AIRFLOW__STATE_STORE__TASKSTATE_URL_CMD": command})
    assert SECRET not in str(caught.value)
    with pytest.raises(ConfigError, match="cannot run") as unbalanced:  # not a traceback
        Settings.load(
            {"AIRFLOW__STATE_STORE__TASKSTATE_URL_CMD": f"echo 'postgresql://u:{SECRET}@h"}
        )
    assert SECRET not in str(unbalanced.value)
