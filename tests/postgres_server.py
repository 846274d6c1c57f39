"""A throwaway PostgreSQL server for tests and benchmarks: Debian's `postgresql` package, a data
directory in a temp dir, 127.0.0.1 on a free port, stopped (and deleted) at the end.

Used by the `postgres_url` fixture (tests/conftest.py) and imported by bench/*.py, so both
measure the same kind of server. PostgreSQL refuses to run as root; when we are root the
server runs as the `postgres` system user (created if missing).
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import http.client
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit


def apt_install(package: str) -> None:
    """Install a Debian package when we are root (CI's fresh machine); else do nothing, and the
    caller reports what is missing."""
    if os.geteuid() != 0:
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # On a fresh machine the unit stage and both Airflow lanes start at once and each may
    # install a package; dpkg takes one at a time and a second apt-get fails at once on its
    # lock. Ours queue on a file lock; apt waits for any other holder of dpkg's.
    wait = ["-o", "DPkg::Lock::Timeout=600"]
    with open(Path(tempfile.gettempdir()) / "taskstate-apt.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run(["apt-get", *wait, "update", "-q"], check=True, env=env)
        subprocess.run(
            ["apt-get", *wait, "install", "-y", "-q", "--no-install-recommends", package],
            check=True,
            env=env,
        )


def debian_command(command: str, package: str) -> str:
    """The path of `command` (also looked for in /usr/sbin), installing `package` first when
    it is missing and we are root; else a RuntimeError saying what to install."""
    for attempt in range(2):
        found = shutil.which(command) or shutil.which(command, path="/usr/sbin")
        if found:
            return found
        if attempt == 0:
            apt_install(package)
    raise RuntimeError(f"{command} not found: apt-get install {package} (as root)")


def _bin_dir() -> Path:
    """Newest /usr/lib/postgresql/<major>/bin, installing the Debian package if there is none."""
    for attempt in range(2):
        found = sorted(
            glob.glob("/usr/lib/postgresql/*/bin/initdb"),
            key=lambda p: int(Path(p).parent.parent.name),
        )
        if found:
            return Path(found[-1]).parent
        if attempt == 0:
            apt_install("postgresql")
    raise RuntimeError("PostgreSQL not found: apt-get install postgresql (as root)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def stop_server(proc: subprocess.Popen[bytes], grace: float = 60) -> None:
    """SIGTERM a loopback server started as `proc`, and SIGKILL it if it has not exited after
    `grace` seconds (a loaded machine can take longer than 10 s to run its exit handlers)."""
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# How long a loopback server (PostgreSQL, PgBouncer, redis, moto, `taskstate serve`) may take to
# answer after its start: moto's server took over 30 s to import at a load of 20, and the unit
# stage runs beside the Airflow lanes (scripts/test.sh). A server that exits fails at once.
START_TIMEOUT = 120.0


def wait_for_port(
    port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = START_TIMEOUT
) -> None:
    """Until a server started as `proc` accepts connections on 127.0.0.1:`port`; raises with
    `what` (say where its log is) if it exits first or takes longer than `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start on port {port}")
        time.sleep(0.1)


def wait_for_http(
    url: str,
    proc: subprocess.Popen[bytes] | subprocess.Popen[str] | None,
    what: str,
    timeout: float = START_TIMEOUT,
) -> None:
    """Until GET `url` answers 200 (a /health that reads the store: a server that answers it can
    serve); raises naming `what` if `proc` exits first or it takes longer than `timeout`. Polls
    with the standard library's bare HTTP connection: an `httpx.get` builds a TLS context each
    time, 40 ms of CPU, which ten polls a second while a server starts under load add up."""
    parts = urlsplit(url)
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, http.client.HTTPException):
            conn = http.client.HTTPConnection(parts.netloc, timeout=2)
            try:
                conn.request("GET", parts.path)
                if conn.getresponse().status == 200:
                    return
            finally:
                conn.close()
        if (proc is not None and proc.poll() is not None) or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not answer 200 on {url}")
        time.sleep(0.05)


# Settings a server starts with, passed on its command line (`-c name=value`), so one kept
# cluster (bench/scale.py's templates) can be started with either and its files stay as built.
# "test": the suite's server, small and quick to start beside the others CI runs (these are
# PostgreSQL's defaults, written out). "production": sized as a dedicated database host would
# be (docs/backends.md, "PostgreSQL sizing"), for the benchmarks at 10 M rows.
PROFILES = ("test", "production")


def server_settings(profile: str) -> dict[str, str]:
    """The settings of `profile` (one of PROFILES) on this machine."""
    if profile == "test":
        return {"shared_buffers": "128MB", "max_wal_size": "1GB", "checkpoint_timeout": "5min"}
    if profile != "production":
        raise ValueError(f"unknown PostgreSQL settings profile {profile!r}: one of {PROFILES}")
    ram_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    return {
        # A quarter of the memory, at most 8 GB: the rest is the OS cache, which holds what
        # shared_buffers does not (PostgreSQL reads through it).
        "shared_buffers": f"{min(ram_mb // 4, 8192)}MB",
        # What the planner may assume is cached (shared_buffers + the OS cache).
        "effective_cache_size": f"{ram_mb * 3 // 4}MB",
        # A cleanup of 1 M rows writes ~1.5 GB of WAL: with 1 GB, checkpoints are forced back
        # to back during it; time-based ones, spread over 90% of the interval, instead.
        "max_wal_size": "16GB",
        "checkpoint_timeout": "15min",
        "checkpoint_completion_target": "0.9",
    }


def _server_user() -> str | None:
    """None when we may run the server ourselves; else the unprivileged user to run it as."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--home-dir", "/var/lib/postgresql", "postgres"], check=True
        )
    return "postgres"


class PostgresServer:
    """One cluster: `start()`, `url`, `restart()`, `crash()`, `stop()`; `profile`: the
    settings it starts with (`server_settings`)."""

    def __init__(
        self,
        *,
        fsync: bool = False,
        root: Path | None = None,
        profile: str = "test",
        extra: dict[str, str] | None = None,
    ) -> None:
        self.bin = _bin_dir()
        self.user = _server_user()
        # A given root is kept by `stop()` (a benchmark's templates, reused across runs).
        self.keep = root is not None
        self.root = root or Path(tempfile.mkdtemp(prefix="taskstate-pg-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.data = self.root / "data"
        self.port = free_port()
        self.dbname = "taskstate"
        self.fsync = fsync
        self.settings = {**server_settings(profile), **(extra or {})}
        if self.user:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)

    @property
    def url(self) -> str:
        return f"postgresql://{self._role}:secret@127.0.0.1:{self.port}/{self.dbname}"

    @property
    def _role(self) -> str:
        return self.user or pwd.getpwuid(os.geteuid()).pw_name

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin / tool), *args]
        if self.user:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        return subprocess.run(cmd, check=check, capture_output=True, text=True, cwd=self.root)

    def start(self) -> PostgresServer:
        if not self.data.exists():
            pwfile = self.root / "pw"
            pwfile.write_text("secret\n")
            if self.user:
                entry = pwd.getpwnam(self.user)
                os.chown(pwfile, entry.pw_uid, entry.pw_gid)
            self._run(
                "initdb", "-D", str(self.data), "-U", self._role, "--pwfile", str(pwfile),
                "-A", "scram-sha-256", "-E", "UTF8", "--locale", "C.UTF-8", "--no-sync",
            )  # fmt: skip
            conf = [
                "listen_addresses = '127.0.0.1'",
                f"port = {self.port}",
                f"unix_socket_directories = '{self.root}'",
                f"fsync = {'on' if self.fsync else 'off'}",
                "max_connections = 200",
            ]
            with open(self.data / "postgresql.conf", "a") as f:
                f.write("\n".join(conf) + "\n")
        elif self.keep:  # a kept cluster, started again: today's free port (the last line wins)
            with open(self.data / "postgresql.conf", "a") as f:
                f.write(f"port = {self.port}\n")
        self._pg_ctl_start()
        if not self._has_db():
            self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), self.dbname,
                      *self._auth_args())  # fmt: skip
        return self

    def _auth_args(self) -> list[str]:
        return ["-U", self._role, "-w"]

    def _has_db(self) -> bool:
        out = self._run(
            "psql", "-h", "127.0.0.1", "-p", str(self.port), *self._auth_args(), "-d", "postgres",
            "-tAc", f"SELECT 1 FROM pg_database WHERE datname = '{self.dbname}'",
        ).stdout  # fmt: skip
        return out.strip() == "1"

    def _options(self) -> str:
        # The socket in this root, whatever the kept cluster's configuration says (a cluster
        # copied from another root would put it there).
        settings = {**self.settings, "unix_socket_directories": str(self.root)}
        return " ".join(f"-c {name}={value}" for name, value in settings.items())

    def _pg_ctl_start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-w",
                  "-o", self._options(), "start")  # fmt: skip

    def restart(self) -> None:
        """A clean restart: every session is terminated, committed data survives."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "restart",
                  "-l", str(self.root / "log"), "-o", self._options())  # fmt: skip

    def halt(self) -> None:
        """Stop the server and keep its data: an outage that lasts until `resume()`."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def resume(self) -> None:
        self._pg_ctl_start()

    def crash(self) -> None:
        """SIGKILL the postmaster and every backend, then start again (crash recovery)."""
        pids = self._cluster_pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in pids:
            while Path(f"/proc/{pid}").exists() and _state(pid) != "Z":
                time.sleep(0.01)
        # A SIGKILLed postmaster leaves its lock files; a zombie still "owns" them until reaped.
        (self.data / "postmaster.pid").unlink(missing_ok=True)
        for leftover in self.root.glob(f".s.PGSQL.{self.port}*"):
            leftover.unlink(missing_ok=True)
        self._pg_ctl_start()

    def _cluster_pids(self) -> list[int]:
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        children = [
            int(p.name)
            for p in Path("/proc").iterdir()
            if p.name.isdigit() and _ppid(int(p.name)) == postmaster
        ]
        return [postmaster, *children]

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            mode = "fast" if self.keep else "immediate"
            self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


@contextlib.contextmanager
def running_server(
    *,
    fsync: bool = False,
    root: Path | None = None,
    profile: str = "test",
    extra: dict[str, str] | None = None,
) -> Iterator[PostgresServer]:
    """A started server, stopped at the end; its data deleted unless `root` was given;
    `profile`: its settings (PROFILES), `extra` added to them."""
    os.environ.setdefault("PGPASSWORD", "secret")  # for the createdb/psql helper calls
    server = PostgresServer(fsync=fsync, root=root, profile=profile, extra=extra)
    try:
        yield server.start()
    finally:
        server.stop()
