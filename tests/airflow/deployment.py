"""One running Airflow per version, shared by the whole test session: the api-server (3.x) or
webserver (2.x) with taskstate's plugin, the scheduler (LocalExecutor on 3.x, Sequential on 2.x
with SQLite) and, on 3.x, the DAG processor; a SQLite metadata DB; two users.

    deployment = deployments.get("3.2")           # the `deployments` session fixture
    with deployment.client("admin") as http:      # authenticated as Airflow's API expects
        http.get("/taskstate/api/v2/dags")
    run_id = deployment.trigger("ts_api")
    deployment.wait_for_run("ts_api", run_id)

Users: `admin` (every permission) and `viewer` (read-only); on 3.x also `user` and `op`.
`deployment.taskstate_token(...)` signs taskstate tokens with the deployment's
`[state_store] taskstate_secret_key`. DAG files:
tests/airflow/api_dags plus whatever `extra_dags` the first caller passes; add yours there
rather than starting another deployment (the machine has two cores).
"""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
from examples.airflow.demo import DAG_ID as DEMO_DAG_ID
from examples.airflow.demo import KILL_AT
from tests.airflow.harness import EXAMPLE_DAGS, AirflowHome, stop_group

API_DAGS = Path(__file__).resolve().parent / "api_dags"
# tests/airflow/test_scheduler.py's SIGKILL-and-resume run on Airflow 3 (paused until then).
DEMO_DAG = EXAMPLE_DAGS / f"{DEMO_DAG_ID}.py"
SECRET_KEY = "deployment-taskstate-secret-0123456789abcdef"
USERS = {"admin": "admin-pw", "viewer": "viewer-pw", "user": "user-pw", "op": "op-pw"}
# 3.x: the simple auth manager's four roles, one user each (configuration only, free). 2.x: the
# CLI creates admin and viewer; tests create others through the users API when they need them
# (each `airflow users create` is an Airflow process start).
_ROLES_3 = {"admin": "admin", "viewer": "viewer", "user": "user", "op": "op"}
_ROLES_2 = {"admin": "Admin", "viewer": "Viewer"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Deployment:
    def __init__(self, version: str, root: Path, extra_dags: Iterable[Path] = ()) -> None:
        self.version = version
        self.major = int(version.split(".")[0])
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        env = {
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__STATE_STORE__TASKSTATE_SECRET_KEY": SECRET_KEY,
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            # Airflow's default: every DAG file is reparsed this often in a process of its own,
            # CPU the lane's tests need. `dags reserialize` serialises them before the start,
            # and again for a file a test adds later.
            "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "30",
            # A task process imports its DAG file within this (30 s by default): the provider
            # DAG's imports (boto, the providers) took longer at a load of 50, and the try
            # failed with "DagBag import timeout".
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "300",
            # Its own log-server ports: 8793/8794 are taken by whichever deployment (this
            # session's other lane, another checkout's) started first ("Errno 98").
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(_free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(_free_port()),
            "TASKSTATE_DEMO_KILL_AT": str(KILL_AT),  # read by DEMO_DAG's task alone
        }
        if self.major >= 3:
            passwords = root / "passwords.json"
            root.mkdir(parents=True, exist_ok=True)
            passwords.write_text(json.dumps(USERS))
            env |= {
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__API__BASE_URL": self.base_url,
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
                "AIRFLOW__API_AUTH__JWT_SECRET": "deployment-jwt-secret-0123456789",
                # 3.0 signs its JWTs with `iss` = this setting, default None, which the pinned
                # PyJWT refuses ("Issuer (iss) must be a string": /auth/token answers 500).
                "AIRFLOW__API_AUTH__JWT_ISSUER": "taskstate-tests",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(
                    f"{u}:{r}" for u, r in _ROLES_3.items()
                ),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            }
        else:
            env |= {
                "AIRFLOW__WEBSERVER__WEB_SERVER_HOST": "127.0.0.1",
                "AIRFLOW__WEBSERVER__WEB_SERVER_PORT": str(self.port),
                "AIRFLOW__WEBSERVER__WORKERS": "1",
                "AIRFLOW__WEBSERVER__SECRET_KEY": "deployment-webserver-secret",
                "AIRFLOW__API__AUTH_BACKENDS": (
                    "airflow.api.auth.backend.basic_auth,airflow.api.auth.backend.session"
                ),
            }
        dags = [*sorted(API_DAGS.glob("*.py")), DEMO_DAG, *extra_dags]
        self.home = AirflowHome(version, root, dags, extra_env=env)
        setup: list[list[str]] = [["dags", "reserialize"]]
        if self.major < 3:
            setup.append(["sync-perm"])  # creates FAB's roles (Viewer, User, Op)
            for user, role in _ROLES_2.items():
                setup.append([
                    "users", "create", "--username", user, "--password", USERS[user],
                    "--role", role, "--email", f"{user}@example.com",
                    "--firstname", user, "--lastname", "test",
                ])  # fmt: skip
        # One process for the lot (each `airflow` process is Airflow's import and, for the FAB
        # commands, its app: several CPU seconds each).
        for argv, (code, output) in zip(
            setup, self.home.airflow_batch((argv, {}) for argv in setup), strict=True
        ):
            assert code == 0, f"airflow {' '.join(argv)} failed ({code}):\n{output[-4000:]}"
        self._stack = ExitStack()

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        names = ["api-server", "scheduler", "dag-processor"] if self.major >= 3 else [
            "webserver", "scheduler",
        ]  # fmt: skip
        for name in names:
            self._stack.enter_context(self._service(name))
        self._wait_until_up()

    def stop(self) -> None:
        self._stack.close()

    @contextmanager
    def _service(self, name: str) -> Iterator[subprocess.Popen[bytes]]:
        log = (self.home.home / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            [str(self.home.env / "bin" / "airflow"), name],
            env=self.home.environ,
            cwd=self.home.home,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield proc
        finally:
            stop_group(proc)
            log.close()

    def _wait_until_up(self, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            try:
                response = httpx.get(f"{self.base_url}/taskstate/health", timeout=5)
                if response.status_code == 200:
                    return
                last = response.status_code
            except httpx.TransportError as exc:
                last = exc
            time.sleep(1)
        raise RuntimeError(f"Airflow {self.version} did not serve /taskstate/health: {last}\n"
                           f"{self.log_tail()}")  # fmt: skip

    def log_tail(self, lines: int = 60) -> str:
        out = []
        for log in sorted(self.home.home.glob("*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"==== {log.name}\n" + "\n".join(text))
        return "\n".join(out)

    # -- clients --------------------------------------------------------------------------

    def credentials(self, user: str) -> dict[str, str]:
        """The headers that authenticate `user` the way Airflow's own API expects."""
        if self.major >= 3:
            response = httpx.post(
                f"{self.base_url}/auth/token",
                json={"username": user, "password": USERS[user]},
                timeout=30,
            )
            response.raise_for_status()
            return {"Authorization": f"Bearer {response.json()['access_token']}"}
        pair = base64.b64encode(f"{user}:{USERS[user]}".encode()).decode()
        return {"Authorization": f"Basic {pair}"}

    def client(self, user: str | None = "admin", **kwargs: Any) -> httpx.Client:
        headers = {} if user is None else self.credentials(user)
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=60, **kwargs)

    def taskstate_token(self, **claims: Any) -> str:
        from taskstate.api.tokens import Claims, SigningKeys

        claims.setdefault("subject", "deployment-test")
        return SigningKeys([SECRET_KEY]).issue(Claims(**claims))

    # -- DAG runs -------------------------------------------------------------------------

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        """Unpause `dag_id` and trigger a run, through Airflow's REST API (as `airflow dags
        unpause` / `trigger` would, without starting an Airflow process for each)."""
        run_id = f"ts_{uuid.uuid4().hex[:10]}"
        api = "/api/v2" if self.major >= 3 else "/api/v1"
        body: dict[str, Any] = {"dag_run_id": run_id, "conf": conf or {}}
        if self.major >= 3:  # required (may be null) on 3.0; the CLI's default is now
            body["logical_date"] = datetime.now(timezone.utc).isoformat()
        with self.client("admin") as http:
            unpaused = http.patch(f"{api}/dags/{dag_id}", json={"is_paused": False})
            assert unpaused.status_code == 200, unpaused.text
            triggered = http.post(f"{api}/dags/{dag_id}/dagRuns", json=body)
            assert triggered.status_code == 200, triggered.text
        return run_id

    def run_state(self, dag_id: str, run_id: str) -> str | None:
        api = "/api/v2" if self.major >= 3 else "/api/v1"
        with self.client("admin") as http:
            response = http.get(f"{api}/dags/{dag_id}/dagRuns/{run_id}")
        return response.json().get("state") if response.status_code == 200 else None

    def wait_for_run(
        self, dag_id: str, run_id: str, state: str = "success", timeout: float = 300
    ) -> None:
        deadline = time.monotonic() + timeout
        seen = None
        while time.monotonic() < deadline:
            try:
                seen = self.run_state(dag_id, run_id)
            except httpx.TransportError as exc:  # the api-server, busy with the run's tasks
                seen = f"no answer ({exc!r})"  # (at a load of 70 /auth/token took over 30 s)
            if seen == state:
                return
            if seen in ("success", "failed"):
                break
            time.sleep(2)
        raise AssertionError(
            f"{dag_id} {run_id} on Airflow {self.version}: {seen}, expected {state}\n"
            f"{self.log_tail()}"
        )


class Deployments:
    """Started on first use, one per version, stopped at the end of the session."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._running: dict[str, Deployment] = {}

    def get(self, version: str, extra_dags: Iterable[Path] = ()) -> Deployment:
        if version not in self._running:
            deployment = Deployment(version, self.root / f"deployment-{version}", extra_dags)
            try:
                deployment.start()
            except BaseException:
                deployment.stop()
                raise
            self._running[version] = deployment
        return self._running[version]

    def stop(self, version: str) -> None:
        """Stop `version`'s deployment, if running (a later `get` starts a fresh one)."""
        deployment = self._running.pop(version, None)
        if deployment is not None:
            deployment.stop()

    def stop_all(self) -> None:
        for version in list(self._running):
            self.stop(version)
