"""Backend selection: by URL scheme for the built-in backends, by dotted path for custom ones.

Drivers are imported only when their backend is chosen, so `import taskstate` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any
from urllib.parse import urlsplit

from taskstate.backends.base import StateBackend, WorkerStateBackend
from taskstate.errors import ConfigError
from taskstate.redaction import redact_url
from taskstate.settings import Settings, default_sqlite_path

_SCHEMES = {
    "sqlite": "taskstate.backends.sqlite:SQLiteBackend",
    "postgresql": "taskstate.backends.postgres:PostgresBackend",
    "postgres": "taskstate.backends.postgres:PostgresBackend",
    "http": "taskstate.backends.http:HttpBackend",
    "https": "taskstate.backends.http:HttpBackend",
}
# The extra that installs a backend's driver, named when the driver is missing.
_EXTRAS = {"postgresql": "postgres", "postgres": "postgres", "http": "http", "https": "http"}


def resolve_url(settings: Settings) -> str:
    """Our URL option, else Airflow's own PostgreSQL metadata DB, else the embedded file."""
    if settings.taskstate_url:
        return settings.taskstate_url
    conn = settings.sql_alchemy_conn
    if conn and urlsplit(conn).scheme.split("+")[0] in ("postgresql", "postgres"):
        return conn
    return "sqlite:///" + str(default_sqlite_path())


def open_backend(url: str | None, settings: Settings, *, create: bool = True) -> StateBackend:
    """`create=False`: a missing SQLite file is an error, not a new database (the only
    backend whose storage a connection creates)."""
    if url is None and not settings.uses_builtin_backend:
        custom: StateBackend = _load_class(
            settings.backend or "", StateBackend, "[state_store] backend", settings
        )
        return custom
    url = url or resolve_url(settings)
    scheme = urlsplit(url).scheme.split("+")[0]
    target = _SCHEMES.get(scheme)
    if target is None:
        raise ConfigError(
            f"no taskstate backend for {scheme or 'this'} URLs ({redact_url(url)!r}); use "
            "sqlite:///path.db, postgresql://user:pass@host/db or http(s)://host:port/taskstate "
            "in [state_store] taskstate_url"
        )
    module, _, name = target.partition(":")
    try:
        backend_cls = getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as exc:
        extra = _EXTRAS.get(scheme, scheme)
        raise ConfigError(
            f"{scheme} URLs need the {exc.name} package, which is not installed here: "
            f"pip install 'taskstate[{extra}]'"
        ) from None
    backend: StateBackend = (
        backend_cls(url, create=create) if scheme == "sqlite" else backend_cls(url)
    )
    return backend


def load_worker_backend(settings: Settings) -> WorkerStateBackend | None:
    """The `[workers] state_store_backend` named in the settings, built (None when it is not
    set); ConfigError when the class cannot be loaded or is not a worker backend."""
    if not settings.worker_backend:
        return None
    worker: WorkerStateBackend = _load_class(
        settings.worker_backend, WorkerStateBackend, "[workers] state_store_backend", settings
    )
    return worker


def _load_class(path: str, base: type[Any], option: str, settings: Settings) -> Any:
    module_name, _, attr = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"{option} = {path!r} cannot be imported: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigError(
            f"{option} = {path!r} is not a subclass of {base.__module__}.{base.__qualname__}"
        )
    factory = getattr(cls, "from_settings", None)
    return factory(settings) if factory else cls()
