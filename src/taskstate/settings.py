"""`[state_store]` / `[workers]` settings, read the way Airflow reads them.

Sources, strongest first: `AIRFLOW__<SECTION>__<OPTION>` environment variables, then Airflow's
own config object when Airflow is already imported (inside a task), else `airflow.cfg`
(`$AIRFLOW_CONFIG`, or `$AIRFLOW_HOME/airflow.cfg`). Read once per `StateStore`, never per call.
"""

from __future__ import annotations

import configparser
import importlib
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from taskstate.errors import ConfigError
from taskstate.redaction import (
    command_secrets,
    redact_command,
    redact_json_options,
    redact_url,
    scrub,
)

# Airflow's own default for `[state_store] backend`; naming it (or nothing) selects our
# built-in backends by `taskstate_url`.
AIRFLOW_METASTORE_BACKENDS = frozenset(
    {
        "airflow.state.metastore.MetastoreStateStoreBackend",
        "airflow.state.metastore.MetastoreBackend",
    }
)


def _int(option: str, minimum: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ConfigError(f"{option} must be a whole number, got {raw!r}") from None
        if value < minimum:
            raise ConfigError(f"{option} must be >= {minimum}, got {value}")
        return value

    return parse


def _bool(option: str) -> Callable[[str], bool]:
    def parse(raw: str) -> bool:
        text = raw.strip().lower()
        if text in ("true", "t", "1", "yes", "on"):
            return True
        if text in ("false", "f", "0", "no", "off", ""):
            return False
        raise ConfigError(f"{option} must be True or False, got {raw!r}")

    return parse


def _text(raw: str) -> str | None:
    return raw.strip() or None


def _optional(parse: Callable[[str], int]) -> Callable[[str], int | None]:
    """Empty means unset (None)."""
    return lambda raw: parse(raw) if raw.strip() else None


def _choice(option: str, choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower() or choices[0]
        if value not in choices:
            raise ConfigError(f"{option} must be one of {', '.join(choices)}, got {raw!r}")
        return value

    return parse


@dataclass(frozen=True)
class Settings:
    """Every option taskstate reads; `_OPTIONS` below names the (section, option) of each field
    and how its text is parsed."""

    backend: str | None = None
    taskstate_url: str | None = None
    default_retention_days: int = 30
    state_cleanup_batch_size: int = 0
    clear_on_success: bool = False
    max_value_storage_bytes: int = 65535
    worker_backend: str | None = None
    sql_alchemy_conn: str | None = None
    offload_url: str | None = None
    offload_threshold: int | None = None
    offload_compression: str = "none"
    offload_storage_options: str | None = None
    taskstate_mode: str = "native"
    provider_durable: bool = False

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        lookup = _airflow_lookup() or _file_lookup(env)
        values: dict[str, Any] = {}
        for field in fields(cls):
            section, option, parse = _OPTIONS[field.name]
            raw = _raw(env, lookup, section, option)
            if raw is not None:
                values[field.name] = parse(raw)
        return cls(**values)

    @property
    def uses_builtin_backend(self) -> bool:
        return self.backend is None or self.backend in AIRFLOW_METASTORE_BACKENDS

    def redacted(self) -> dict[str, Any]:
        """Every option as it may be shown: URLs and storage options without their secrets."""
        shown: dict[str, Any] = {}
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, str):
                hide = redact_json_options if field.name in _JSON_OPTIONS else redact_url
                value = hide(value)
            shown[field.name] = value
        return shown

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self.redacted().items())
        return f"Settings({shown})"


_OPTIONS: dict[str, tuple[str, str, Callable[[str], Any]]] = {
    "backend": ("state_store", "backend", _text),
    "taskstate_url": ("state_store", "taskstate_url", _text),
    "default_retention_days": (
        "state_store",
        "default_retention_days",
        _int("[state_store] default_retention_days", 0),
    ),
    "state_cleanup_batch_size": (
        "state_store",
        "state_cleanup_batch_size",
        _int("[state_store] state_cleanup_batch_size", 0),
    ),
    "clear_on_success": (
        "state_store",
        "clear_on_success",
        _bool("[state_store] clear_on_success"),
    ),
    "max_value_storage_bytes": (
        "state_store",
        "max_value_storage_bytes",
        _int("[state_store] max_value_storage_bytes", 0),
    ),
    "worker_backend": ("workers", "state_store_backend", _text),
    "sql_alchemy_conn": ("database", "sql_alchemy_conn", _text),
    "offload_url": ("state_store", "taskstate_offload_url", _text),
    "offload_threshold": (
        "state_store",
        "taskstate_offload_threshold",
        _optional(_int("[state_store] taskstate_offload_threshold", 0)),
    ),
    "offload_compression": (
        "state_store",
        "taskstate_offload_compression",
        _choice("[state_store] taskstate_offload_compression", ("none", "gzip")),
    ),
    "offload_storage_options": ("state_store", "taskstate_offload_storage_options", _text),
    # Airflow 3.3+ only: whose accessors tasks get (taskstate.airflow.versions).
    "taskstate_mode": (
        "state_store",
        "taskstate_mode",
        _choice("[state_store] taskstate_mode", ("native", "taskstate")),
    ),
    "provider_durable": (
        "state_store",
        "taskstate_provider_durable",
        _bool("[state_store] taskstate_provider_durable"),
    ),
}

# Options holding a JSON object whose entries may be credentials.
_JSON_OPTIONS = frozenset({"offload_storage_options"})

Lookup = Callable[[str, str], "str | None"]


def _airflow_lookup() -> Lookup | None:
    """Airflow's config object, only if Airflow is already loaded (we never import it)."""
    module = sys.modules.get("airflow.configuration")
    conf = getattr(module, "conf", None)
    if conf is None:
        return None

    def lookup(section: str, option: str) -> str | None:
        if not conf.has_option(section, option):
            return None
        value = conf.get(section, option, fallback=None)
        return None if value is None else str(value)

    return lookup


def setting(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """One `Settings` field, read and parsed alone (for hooks that run in every Airflow
    process: nothing else is read, no other `_cmd` runs)."""
    env = os.environ if environ is None else environ
    section, option, parse = _OPTIONS[name]
    raw = _raw(env, _airflow_lookup() or _file_lookup(env), section, option)
    return getattr(Settings, name) if raw is None else parse(raw)


def airflow_option(
    section: str, option: str, environ: Mapping[str, str] | None = None
) -> str | None:
    """Any Airflow option, read the way `Settings.load` reads ours (for `taskstate doctor`)."""
    env = os.environ if environ is None else environ
    return _raw(env, _airflow_lookup() or _file_lookup(env), section, option)


def _raw(env: Mapping[str, str], lookup: Lookup, section: str, option: str) -> str | None:
    """Airflow's order: the variable, its `_CMD`, its `_SECRET`, then the file's option,
    `option_cmd`, `option_secret` — for every option, so the CLI on any machine resolves the
    same store as the workers."""
    name = f"AIRFLOW__{section.upper()}__{option.upper()}"
    for source, raw in (
        (name, env.get(name)),
        (name + "_CMD", env.get(name + "_CMD")),
        (name + "_SECRET", env.get(name + "_SECRET")),
        (f"[{section}] {option}", lookup(section, option)),
        (f"[{section}] {option}_cmd", lookup(section, option + "_cmd")),
        (f"[{section}] {option}_secret", lookup(section, option + "_secret")),
    ):
        if raw is None:
            continue
        if source.lower().endswith("_cmd"):
            return _run_command(source, raw)
        if source.lower().endswith("_secret"):
            return _secret(source, raw, env, lookup)
        return raw
    return None


def _run_command(source: str, command: str) -> str:
    """As Airflow runs `_cmd` options: no shell, stdout is the value. A command may carry the
    secret it prints (`echo postgresql://user:pw@...`): errors show it redacted."""
    shown = redact_command(command)
    try:
        proc = subprocess.run(shlex.split(command), capture_output=True, text=True, check=False)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{source} = {shown!r} cannot run: {exc}") from None
    if proc.returncode != 0:
        reason = scrub(proc.stderr.strip(), command_secrets(command))
        raise ConfigError(f"{source} = {shown!r} exited with {proc.returncode}: {reason}")
    return proc.stdout.rstrip("\n")


def _secret(source: str, path: str, env: Mapping[str, str], lookup: Lookup) -> str:
    """As Airflow reads `_secret` options: from `[secrets] backend`, built with backend_kwargs."""
    backend_path = _raw(env, lookup, "secrets", "backend")
    if not backend_path:
        raise ConfigError(f"{source} = {path!r} needs [secrets] backend to be set")
    module_name, _, attr = backend_path.rpartition(".")
    try:
        kwargs = json.loads(_raw(env, lookup, "secrets", "backend_kwargs") or "{}")
        backend = getattr(importlib.import_module(module_name), attr)(**kwargs)
        value = backend.get_config(path)
    except Exception as exc:  # any failure of a third-party backend is a config problem here
        raise ConfigError(f"{source} = {path!r}: [secrets] backend failed: {exc}") from None
    if value is None:
        raise ConfigError(f"{source} = {path!r}: [secrets] backend has no such secret")
    return str(value)


def airflow_home(environ: Mapping[str, str] | None = None) -> Path | None:
    env = os.environ if environ is None else environ
    home = env.get("AIRFLOW_HOME")
    return Path(home).expanduser() if home else None


def _file_lookup(env: Mapping[str, str]) -> Lookup:
    parser = configparser.ConfigParser(interpolation=None)
    home = airflow_home(env)
    path = env.get("AIRFLOW_CONFIG") or (str(home / "airflow.cfg") if home else None)
    if path:
        try:
            parser.read(path, encoding="utf-8")
        except configparser.Error as exc:
            raise ConfigError(f"cannot parse {path}: {exc}") from None

    def lookup(section: str, option: str) -> str | None:
        return parser.get(section, option, fallback=None)

    return lookup


def default_sqlite_path(environ: Mapping[str, str] | None = None) -> Path:
    home = airflow_home(environ)
    return home / "taskstate.db" if home else Path.home() / ".taskstate" / "state.db"
