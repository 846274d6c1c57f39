"""Which Airflow is installed, read from package metadata so Airflow itself is not imported."""

from __future__ import annotations

import importlib.metadata
import re
from functools import lru_cache

from taskstate.settings import Settings

# Airflow 3.3 ships its own task/asset state store (AIP-103); from there on it is in charge.
NATIVE_STORE_SINCE = (3, 3)


@lru_cache(maxsize=1)
def airflow_version() -> str | None:
    """The installed Airflow version ("3.2.2"), or None when Airflow is not installed."""
    # Airflow 3 splits into apache-airflow-core (the code) and apache-airflow (a meta package).
    for dist in ("apache-airflow-core", "apache-airflow"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def version_tuple(version: str) -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        raise ValueError(f"not an Airflow version: {version!r}")
    return int(match.group(1)), int(match.group(2))


# Airflow 3.1 made its API read the JWT from the UI's `_token` cookie too; 3.0's takes only the
# Authorization header (its UI moves the cookie into localStorage and sends the header).
API_COOKIE_SINCE = (3, 1)


def api_reads_the_cookie() -> bool:
    """True where Airflow's own API authenticates a request by its `_token` cookie (3.1+)."""
    version = airflow_version()
    return version is not None and version_tuple(version) >= API_COOKIE_SINCE


def native_store_available() -> bool:
    """True on Airflow 3.3+, which ships its own `task_state_store`."""
    version = airflow_version()
    return version is not None and version_tuple(version) >= NATIVE_STORE_SINCE


def native_store_active() -> bool:
    """True when Airflow's own store is in charge: Airflow 3.3+ with `[state_store]
    taskstate_mode = native` (the default). `taskstate` keeps injecting ours on 3.3+ too."""
    return native_store_available() and taskstate_mode() == "native"


@lru_cache(maxsize=1)
def taskstate_mode() -> str:
    """`[state_store] taskstate_mode`, read once per process (the policy asks for every task)."""
    return Settings.load().taskstate_mode
