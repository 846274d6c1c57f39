"""Which Airflow is installed and what it can do: the one table every version gate consults.

The version is read from package metadata, so Airflow itself is not imported. `RELEASES` holds
one row per Airflow release line taskstate supports; a module that behaves differently by
version asks `installed()` (or `capabilities(version)`) for the row and reads the capability it
needs, never the version number. Supporting a new Airflow release means adding its row (and
the tests that run on it); a release newer than the last row is taken to behave like it.
"""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from taskstate.settings import Settings

# Airflow 3.1's external-view destinations (3.2 adds `base`); none of them is an asset page.
_DESTINATIONS_31 = frozenset({"nav", "dag", "dag_run", "task", "task_instance"})


@dataclass(frozen=True)
class Capabilities:
    """What one Airflow release line offers taskstate.

    - `api_plugin`: the plugin attribute that hosts the HTTP API: a Flask blueprint on the
      webserver (2.x) or a FastAPI app mounted on the api-server (3.x).
    - `ui`: how the state pages appear: a Flask AppBuilder view, menu entry and extra link
      (`appbuilder`, 2.x); `external_views` with `ui_destinations` (3.1+); none, by URL only
      (`url_only`, 3.0).
    - `auth`: who signs users in: FAB's session cookie with CSRF (`fab_session`, 2.x) or the
      auth manager's token and sign-in page at `<base>/auth/login` (`auth_manager`, 3.x).
    - `asset_model`: the metadata model an asset id names (`DatasetModel` on 2.x).
    - `sdk`: `airflow.sdk` exists (3.0+), where provider operators import their mixin from.
    - `native_store`: Airflow ships its own task/asset state store (AIP-103, 3.3+).
    - `api_cookie`: Airflow's own API authenticates a request by the UI's `_token` cookie too
      (3.1+); 3.0's takes only the Authorization header (its UI moves the cookie into
      localStorage and sends the header).
    - The cluster policy (`airflow.policy` entry point, `task_policy`) is the same on every row;
      what it installs follows `native_store` (see `native_store_active`).
    """

    release: tuple[int, int]
    api_plugin: Literal["flask_blueprints", "fastapi_apps"]
    ui: Literal["appbuilder", "url_only", "external_views"]
    ui_destinations: frozenset[str]
    auth: Literal["fab_session", "auth_manager"]
    asset_model: Literal["dataset", "asset"]
    sdk: bool
    native_store: bool
    api_cookie: bool

    @property
    def provider_mixin(self) -> Literal["none", "taskstate", "airflow"]:
        """Whose `airflow.sdk.ResumableJobMixin` provider operators get: none (no `airflow.sdk`),
        taskstate's when `[state_store] taskstate_provider_durable` installs it (3.0–3.2), or
        Airflow's own (3.3+)."""
        if not self.sdk:
            return "none"
        return "airflow" if self.native_store else "taskstate"

    @property
    def login_url(self) -> str:
        """Where the state page sends a user to sign in, relative to the page (`<base>/taskstate
        /ui/`); empty where the host's own layout signs them in (Airflow 2's view)."""
        return "../../auth/login" if self.auth == "auth_manager" else ""


_NONE: frozenset[str] = frozenset()
_BASE = _DESTINATIONS_31 | {"base"}

# fmt: off
RELEASES: tuple[Capabilities, ...] = (
    #            release  api_plugin          ui                ui_destinations   auth
    #            asset_model sdk  native_store api_cookie
    Capabilities((2, 10), "flask_blueprints", "appbuilder",     _NONE,            "fab_session",
                 "dataset",  False, False, False),
    Capabilities((2, 11), "flask_blueprints", "appbuilder",     _NONE,            "fab_session",
                 "dataset",  False, False, False),
    Capabilities((3, 0),  "fastapi_apps",     "url_only",       _NONE,            "auth_manager",
                 "asset",    True,  False, False),
    Capabilities((3, 1),  "fastapi_apps",     "external_views", _DESTINATIONS_31, "auth_manager",
                 "asset",    True,  False, True),
    Capabilities((3, 2),  "fastapi_apps",     "external_views", _BASE,            "auth_manager",
                 "asset",    True,  False, True),
    Capabilities((3, 3),  "fastapi_apps",     "external_views", _BASE,            "auth_manager",
                 "asset",    True,  True, True),
)
# fmt: on


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
    """(major, minor) of a version string: "3.2.2" -> (3, 2); ValueError if it is not one."""
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        raise ValueError(f"not an Airflow version: {version!r}")
    return int(match.group(1)), int(match.group(2))


def capabilities(version: str) -> Capabilities:
    """The row of `RELEASES` for an Airflow version: its release line's, or the newest row at
    or below it (a release newer than the table behaves like the newest row; one older than
    the table, which taskstate does not support, like the oldest)."""
    release = version_tuple(version)
    rows = [row for row in RELEASES if row.release <= release]
    return rows[-1] if rows else RELEASES[0]


def installed() -> Capabilities | None:
    """The installed Airflow's row of `RELEASES`, or None when Airflow is not installed."""
    version = airflow_version()
    return None if version is None else capabilities(version)


def native_store_available() -> bool:
    """True on Airflow 3.3+, which ships its own `task_state_store`."""
    row = installed()
    return row is not None and row.native_store


def native_store_active() -> bool:
    """True when Airflow's own store is in charge: Airflow 3.3+ with `[state_store]
    taskstate_mode = native` (the default). `taskstate` keeps injecting ours on 3.3+ too."""
    return native_store_available() and taskstate_mode() == "native"


@lru_cache(maxsize=1)
def taskstate_mode() -> str:
    """`[state_store] taskstate_mode`, read once per process (the policy asks for every task)."""
    return Settings.load().taskstate_mode
