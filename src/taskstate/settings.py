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
from dataclasses import Field, dataclass, field, fields
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


# A parser gets the option's label ("[section] option") for its errors, and the raw text.
Parser = Callable[[str, str], Any]


def _int(minimum: int) -> Parser:
    def parse(label: str, raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ConfigError(f"{label} must be a whole number, got {raw!r}") from None
        if value < minimum:
            raise ConfigError(f"{label} must be >= {minimum}, got {value}")
        return value

    return parse


def _bool(label: str, raw: str) -> bool:
    text = raw.strip().lower()
    if text in ("true", "t", "1", "yes", "on"):
        return True
    if text in ("false", "f", "0", "no", "off", ""):
        return False
    raise ConfigError(f"{label} must be True or False, got {raw!r}")


def _text(label: str, raw: str) -> str | None:
    return raw.strip() or None


def _text_or(default: str) -> Parser:
    """Text; empty means the default (as Airflow's own options with a default)."""
    return lambda label, raw: raw.strip() or default


def _seconds(label: str, raw: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise ConfigError(f"{label} must be a number of seconds, got {raw!r}") from None
    if not value > 0:
        raise ConfigError(f"{label} must be > 0, got {raw!r}")
    return value


def _patterns(label: str, raw: str) -> tuple[str, ...]:
    """A comma-separated list of patterns, lowercased (Airflow's metrics allow/block lists)."""
    return tuple(p.strip().lower() for p in raw.split(",") if p.strip())


def _page_limit(label: str, raw: str) -> int:
    """Airflow's `[api] maximum_page_limit`, read leniently: Airflow validates its own option,
    and the API must still start when it cannot be read (100, Airflow's default)."""
    try:
        return max(1, int(raw)) if raw.strip() else 100
    except ValueError:
        return 100


def _optional(parse: Parser) -> Parser:
    """Empty means unset (None)."""
    return lambda label, raw: parse(label, raw) if raw.strip() else None


def _choice(*choices: str) -> Parser:
    def parse(label: str, raw: str) -> str:
        value = raw.strip().lower() or choices[0]
        if value not in choices:
            raise ConfigError(f"{label} must be one of {', '.join(choices)}, got {raw!r}")
        return value

    return parse


def _option(
    section: str, option: str, parse: Parser = _text, *, default: Any = None, json: bool = False
) -> Any:
    """A `Settings` field read from `[section] option`; `json`: a JSON object whose entries may
    be credentials (redacted when shown)."""
    return field(default=default, metadata={"option": (section, option, parse), "json": json})


@dataclass(frozen=True)
class Settings:
    """Every option taskstate reads, each declared once: its field names the (section, option)
    it comes from and how its text is parsed."""

    backend: str | None = _option("state_store", "backend")
    taskstate_url: str | None = _option("state_store", "taskstate_url")
    default_retention_days: int = _option(
        "state_store", "default_retention_days", _int(0), default=30
    )
    state_cleanup_batch_size: int = _option(
        "state_store", "state_cleanup_batch_size", _int(0), default=0
    )
    # History (docs/history.md): versions kept per key (0 = off), and their age limit in days
    # (0 = none; the newest version of a live key always stays).
    history_versions: int = _option(
        "state_store", "taskstate_history_versions", _int(0), default=20
    )
    history_retention_days: int = _option(
        "state_store", "taskstate_history_retention_days", _int(0), default=0
    )
    clear_on_success: bool = _option("state_store", "clear_on_success", _bool, default=False)
    max_value_storage_bytes: int = _option(
        "state_store", "max_value_storage_bytes", _int(0), default=65535
    )
    worker_backend: str | None = _option("workers", "state_store_backend")
    sql_alchemy_conn: str | None = _option("database", "sql_alchemy_conn")
    offload_url: str | None = _option("state_store", "taskstate_offload_url")
    offload_threshold: int | None = _option(
        "state_store", "taskstate_offload_threshold", _optional(_int(0))
    )
    offload_compression: str = _option(
        "state_store", "taskstate_offload_compression", _choice("none", "gzip"), default="none"
    )
    offload_storage_options: str | None = _option(
        "state_store", "taskstate_offload_storage_options", json=True
    )
    # Airflow 3.3+ only: whose accessors tasks get (taskstate.airflow.versions).
    taskstate_mode: str = _option(
        "state_store", "taskstate_mode", _choice("native", "taskstate"), default="native"
    )
    provider_durable: bool = _option(
        "state_store", "taskstate_provider_durable", _bool, default=False
    )
    # Airflow's `[metrics]` options taskstate honours, plus its own flush interval
    # (taskstate.metrics.settings reads these alone: `options(*METRICS_OPTIONS)`).
    statsd_on: bool = _option("metrics", "statsd_on", _bool, default=False)
    statsd_host: str = _option("metrics", "statsd_host", _text_or("localhost"), default="localhost")
    statsd_port: int = _option("metrics", "statsd_port", _int(0), default=8125)
    statsd_prefix: str = _option("metrics", "statsd_prefix", _text_or("airflow"), default="airflow")
    statsd_influxdb_enabled: bool = _option(
        "metrics", "statsd_influxdb_enabled", _bool, default=False
    )
    otel_on: bool = _option("metrics", "otel_on", _bool, default=False)
    metrics_allow_list: tuple[str, ...] = _option(
        "metrics", "metrics_allow_list", _patterns, default=()
    )
    metrics_block_list: tuple[str, ...] = _option(
        "metrics", "metrics_block_list", _patterns, default=()
    )
    metrics_flush_seconds: float = _option(
        "metrics", "taskstate_flush_seconds", _seconds, default=10.0
    )
    # Airflow's own options a feature consults: the executors (whether a task may run on
    # another machine than its retry: taskstate.airflow.executors) and the API's page limit.
    executor: str | None = _option("core", "executor")
    kubernetes_queue: str = _option(
        "local_kubernetes_executor", "kubernetes_queue", _text_or("kubernetes"),
        default="kubernetes",
    )  # fmt: skip
    max_page_limit: int = _option("api", "maximum_page_limit", _page_limit, default=100)

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Every `Settings` option, read as Airflow would (environment, `_CMD`, `_SECRET`,
        Airflow's config, airflow.cfg) and parsed; the credentials are not read. ConfigError
        names the option that cannot be read or parsed."""
        env = os.environ if environ is None else environ
        lookup = _airflow_lookup() or _file_lookup(env)
        values: dict[str, Any] = {}
        for spec in fields(cls):
            raw = _raw(env, lookup, *spec.metadata["option"][:2])
            if raw is not None:
                values[spec.name] = _parse(spec, raw)
        return cls(**values)

    @property
    def uses_builtin_backend(self) -> bool:
        """True when `[state_store] backend` is unset or names Airflow's default: taskstate's
        own backends, chosen by `taskstate_url`."""
        return self.backend is None or self.backend in AIRFLOW_METASTORE_BACKENDS

    def redacted(self) -> dict[str, Any]:
        """Every option as it may be shown: URLs and storage options without their secrets."""
        return {spec.name: _redacted(spec, getattr(self, spec.name)) for spec in fields(self)}

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self.redacted().items())
        return f"Settings({shown})"


def _redacted(spec: Field[Any], value: Any) -> Any:
    if isinstance(value, tuple):  # a list option, shown as it is written
        return ", ".join(value)
    if isinstance(value, str):
        return (redact_json_options if spec.metadata["json"] else redact_url)(value)
    return value


# The `Settings` fields of the `[metrics]` section, which taskstate.metrics reads on their own.
METRICS_OPTIONS = tuple(
    spec.name for spec in fields(Settings) if spec.metadata["option"][0] == "metrics"
)

# Credentials taskstate reads but never shows: `taskstate doctor` says only whether each is
# set and where from. Never read by `Settings.load` (a `_cmd` or secrets backend runs only in
# the process that needs the credential): `credential(option)` reads one where it is used.
SECRET_OPTIONS = (("state_store", "taskstate_secret_key"), ("state_store", "taskstate_token"))


def credential(option: str, environ: Mapping[str, str] | None = None) -> str | None:
    """A credential of `SECRET_OPTIONS` by its option name (`taskstate_secret_key`: the API's
    signing keys; `taskstate_token`: the HTTP client's bearer token), as Airflow would read it
    (`_CMD` / `_SECRET` honoured), or None when it is not set."""
    section = next((s for s, name in SECRET_OPTIONS if name == option), None)
    if section is None:
        raise ValueError(f"{option!r} is not one of taskstate's credentials (SECRET_OPTIONS)")
    return airflow_option(section, option, environ)


@dataclass(frozen=True)
class ShownOption:
    """One option as `taskstate doctor` shows it: under its airflow.cfg name, the value as it
    may be printed (secrets redacted, credentials only "set"), and where it came from."""

    section: str
    option: str
    value: str
    source: str
    error: str | None = None

    @property
    def label(self) -> str:
        """The option as airflow.cfg names it: `[section] option`."""
        return f"[{self.section}] {self.option}"


def shown_options(environ: Mapping[str, str] | None = None) -> list[ShownOption]:
    """Every `Settings` option, then each of `SECRET_OPTIONS`, with its source; an option that
    cannot be read or parsed carries its error (the others are still shown)."""
    env = os.environ if environ is None else environ
    airflow = _airflow_lookup()
    lookup = airflow or _file_lookup(env)
    where = "Airflow's config" if airflow else str(config_path(env) or "airflow.cfg")
    shown: list[ShownOption] = []
    options = [(*spec.metadata["option"][:2], spec) for spec in fields(Settings)]
    for section, option, spec in [*options, *((s, o, None) for s, o in SECRET_OPTIONS)]:
        source = "default" if spec is not None else ""
        try:
            found = _find(env, lookup, section, option)
            if found is not None:
                source = _describe_source(found[0], where)
            if spec is None:
                value = "set" if found is not None and found[1].strip() else "not set"
            else:
                parsed = spec.default if found is None else _parse(spec, found[1])
                value = "" if parsed is None else str(_redacted(spec, parsed))
        except ConfigError as exc:
            shown.append(ShownOption(section, option, "", source, str(exc)))
            continue
        shown.append(ShownOption(section, option, value, source))
    return shown


def _describe_source(source: str, where: str) -> str:
    """`AIRFLOW__X__Y_CMD` -> "env AIRFLOW__X__Y_CMD"; `[x] y_cmd` -> "y_cmd in <file>"."""
    if source.startswith("["):
        return f"{source.partition('] ')[2]} in {where}"
    return f"env {source}"


def _parse(spec: Field[Any], raw: str) -> Any:
    section, option, parse = spec.metadata["option"]
    return parse(f"[{section}] {option}", raw)


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
    return options(name, environ=environ)[name]


def options(*names: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """These `Settings` fields by name, read and parsed without the others (a feature that
    needs a few options: `[metrics]`, the executors); unset ones are their defaults."""
    env = os.environ if environ is None else environ
    lookup = _airflow_lookup() or _file_lookup(env)
    specs = {spec.name: spec for spec in fields(Settings)}
    values: dict[str, Any] = {}
    for name in names:
        spec = specs[name]
        raw = _raw(env, lookup, *spec.metadata["option"][:2])
        values[name] = spec.default if raw is None else _parse(spec, raw)
    return values


def airflow_option(
    section: str, option: str, environ: Mapping[str, str] | None = None
) -> str | None:
    """Any Airflow option, read the way `Settings.load` reads ours (for `taskstate doctor`)."""
    env = os.environ if environ is None else environ
    return _raw(env, _airflow_lookup() or _file_lookup(env), section, option)


def _raw(env: Mapping[str, str], lookup: Lookup, section: str, option: str) -> str | None:
    found = _find(env, lookup, section, option)
    return None if found is None else found[1]


def _find(
    env: Mapping[str, str], lookup: Lookup, section: str, option: str
) -> tuple[str, str] | None:
    """(where the value came from, the value) in Airflow's order: the variable, its `_CMD`,
    its `_SECRET`, then the file's option, `option_cmd`, `option_secret` — for every option,
    so the CLI on any machine resolves the same store as the workers."""
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
            return source, _run_command(source, raw)
        if source.lower().endswith("_secret"):
            return source, _secret(source, raw, env, lookup)
        return source, raw
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
    """`$AIRFLOW_HOME`, or None when it is not set."""
    env = os.environ if environ is None else environ
    home = env.get("AIRFLOW_HOME")
    return Path(home).expanduser() if home else None


def config_path(environ: Mapping[str, str] | None = None) -> Path | None:
    """The airflow.cfg taskstate reads when Airflow is not loaded: `$AIRFLOW_CONFIG`, else
    `$AIRFLOW_HOME/airflow.cfg`."""
    env = os.environ if environ is None else environ
    home = airflow_home(env)
    path = env.get("AIRFLOW_CONFIG") or (str(home / "airflow.cfg") if home else None)
    return Path(path) if path else None


def _file_lookup(env: Mapping[str, str]) -> Lookup:
    parser = configparser.ConfigParser(interpolation=None)
    path = config_path(env)
    if path:
        try:
            parser.read(path, encoding="utf-8")
        except configparser.Error as exc:
            raise ConfigError(f"cannot parse {path}: {exc}") from None

    def lookup(section: str, option: str) -> str | None:
        return parser.get(section, option, fallback=None)

    return lookup


def default_sqlite_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where the SQLite store lives when no URL is configured: `$AIRFLOW_HOME/taskstate.db`,
    else `~/.taskstate/state.db`."""
    home = airflow_home(environ)
    return home / "taskstate.db" if home else Path.home() / ".taskstate" / "state.db"
