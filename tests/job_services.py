"""Small fakes of dbt Cloud's and Airbyte's REST APIs on loopback, for the provider-operator
tests (the real services cannot run here). Built from their public API shapes, as far as the
providers' hooks use them:

- dbt Cloud (API v2, HTTPS: the provider's hook always speaks https): trigger a job run
  (`POST /api/v2/accounts/{account}/jobs/{job}/run/`, body `{"cause": ...}`), read a run
  (`GET .../runs/{id}/`, `include_related=trigger`), list runs (`GET .../runs/`,
  `job_definition_id`, `order_by=-created_at`, `limit`). Status codes as dbt Cloud's: 1 queued,
  3 running, 10 success.
- Airbyte (API v1, HTTP): create a job (`POST /v1/jobs`), read one (`GET /v1/jobs/{id}`), list
  a connection's jobs (`GET /v1/jobs?connectionId=...`), and the client-credentials token
  (`POST /v1/applications/token`).

Every job is RUNNING until `job_seconds` after it was created, then succeeded; or, held
(`running_services(..., released=path)`), RUNNING until its logical job is listed in the
`released` file (one per line), whatever the time. A ledger counts
submissions: one JSON line per accepted job, `logical` being the dbt run's cause up to our token
marker (" [") or the Airbyte connection id, which the test DAG sets to `<run_id>|<task_id>`.

Run as a module it is the server (`python -m tests.job_services DBT_PORT AIRBYTE_PORT LEDGER
JOB_SECONDS CERT KEY [RELEASED]`); `running_services()` starts one with a fresh self-signed
certificate.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.aws_server import released_jobs


@dataclass(frozen=True)
class Services:
    dbt_host: str  # host:port, the dbt Cloud connection's host (the hook adds https://)
    airbyte_url: str
    ca_bundle: Path  # REQUESTS_CA_BUNDLE for the tasks: the fake's self-signed certificate
    ledger: Path

    def submissions(self) -> list[dict[str, Any]]:
        if not self.ledger.exists():
            return []
        return [json.loads(line) for line in self.ledger.read_text().splitlines()]


def _certificate(workdir: Path) -> tuple[Path, Path]:
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = workdir / "services-cert.pem", workdir / "services-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@contextlib.contextmanager
def running_services(
    workdir: Path, *, job_seconds: float = 6.0, released: Path | None = None
) -> Iterator[Services]:
    """Fresh fakes on 127.0.0.1 with an empty ledger, stopped on exit. With `released`, jobs
    are held RUNNING until their logical job is listed there."""
    from tests.postgres_server import free_port, stop_server, wait_for_port

    dbt_port, airbyte_port = free_port(), free_port()
    ledger = workdir / f"services-ledger-{dbt_port}.jsonl"
    cert, key = _certificate(workdir)
    log = (workdir / f"services-{dbt_port}.log").open("wb")
    args = [dbt_port, airbyte_port, ledger, job_seconds, cert, key]
    args += [] if released is None else [released]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.job_services", *map(str, args)],
        cwd=Path(__file__).resolve().parents[1],  # the repository: `tests` imports from there
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        for port in (dbt_port, airbyte_port):
            wait_for_port(port, proc, f"the job services (log: {log.name})")
        yield Services(f"127.0.0.1:{dbt_port}", f"http://127.0.0.1:{airbyte_port}/v1", cert, ledger)
    finally:
        stop_server(proc)
        log.close()


class _Jobs:
    """The jobs both fakes hold, and the ledger."""

    def __init__(self, ledger: Path, job_seconds: float, released: Path | None) -> None:
        self.ledger = ledger
        self.job_seconds = job_seconds
        self.released = released
        self.lock = threading.Lock()
        self.jobs: dict[int, dict[str, Any]] = {}
        self.created: dict[int, float] = {}
        self.logical: dict[int, str] = {}

    def add(self, service: str, job: dict[str, Any], logical: str) -> dict[str, Any]:
        with self.lock:
            job_id = len(self.jobs) + 1
            self.jobs[job_id] = {**job, "id": job_id, "service": service}
            self.created[job_id] = time.monotonic()
            self.logical[job_id] = logical
            with self.ledger.open("a") as f:
                f.write(json.dumps({"service": service, "id": job_id, "logical": logical}) + "\n")
            return self.jobs[job_id]

    def done(self, job_id: int) -> bool:
        listed = released_jobs(self.released)
        if listed is not None:
            return self.logical[job_id] in listed
        return time.monotonic() - self.created[job_id] > self.job_seconds


def _handler(jobs: _Jobs, service: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            sys.stderr.write(f"{service}: {format % args}\n")

        def answer(self, body: Any, status: int = 200) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length) or b"{}")

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            (dbt if service == "dbt" else airbyte)(self, "GET", url.path, parse_qs(url.query))

        def do_POST(self) -> None:
            url = urlsplit(self.path)
            (dbt if service == "dbt" else airbyte)(self, "POST", url.path, parse_qs(url.query))

    def dbt_run(run: dict[str, Any]) -> dict[str, Any]:
        status = 10 if jobs.done(run["id"]) else 3
        names = {1: "Queued", 3: "Running", 10: "Success"}
        return {**run, "status": status, "status_humanized": names[status]}

    def dbt(h: Any, method: str, path: str, query: dict[str, list[str]]) -> None:
        parts = [p for p in path.split("/") if p]  # api v2 accounts {acct} ...
        if method == "POST" and len(parts) == 7 and parts[4] == "jobs" and parts[6] == "run":
            cause = str(h.body().get("cause") or "")
            job = int(parts[5])
            run = {"job_definition_id": job, "trigger": {"cause": cause}, "href": "https://x/"}
            created = jobs.add("dbt_cloud", run, cause.split(" [", 1)[0])
            return h.answer({"data": dbt_run(created), "status": {"code": 200}})
        if method == "GET" and len(parts) == 6 and parts[4] == "runs":
            run = jobs.jobs.get(int(parts[5]))
            if run is None or run["service"] != "dbt_cloud":
                return h.answer({"status": {"code": 404}}, 404)
            return h.answer({"data": dbt_run(run), "status": {"code": 200}})
        if method == "GET" and len(parts) == 5 and parts[4] == "runs":
            job = query.get("job_definition_id", [None])[0]
            runs = [
                dbt_run(r)
                for r in reversed(list(jobs.jobs.values()))  # newest first
                if r["service"] == "dbt_cloud"
                and (job is None or str(r["job_definition_id"]) == job)
            ][: int(query.get("limit", ["100"])[0])]
            extra = {
                "filters": {"limit": 100},
                "pagination": {"count": len(runs), "total_count": len(runs)},
            }
            return h.answer({"data": runs, "extra": extra, "status": {"code": 200}})
        h.answer({"status": {"code": 404}}, 404)

    def airbyte_job(job: dict[str, Any]) -> dict[str, Any]:
        return {
            "jobId": job["id"],
            "status": "succeeded" if jobs.done(job["id"]) else "running",
            "jobType": "sync",
            "connectionId": job["connectionId"],
            "startTime": job["startTime"],
        }

    def airbyte(h: Any, method: str, path: str, query: dict[str, list[str]]) -> None:
        if method == "POST" and path == "/v1/applications/token":
            return h.answer({"access_token": "t", "token_type": "Bearer", "expires_in": 3600})
        if method == "POST" and path == "/v1/jobs":
            body = h.body()
            now = datetime.datetime.now(datetime.timezone.utc).isoformat()
            job = {"connectionId": body["connectionId"], "startTime": now}
            created = jobs.add("airbyte", job, body["connectionId"])
            return h.answer(airbyte_job(created))
        if method == "GET" and path.startswith("/v1/jobs/"):
            job = jobs.jobs.get(int(path.rsplit("/", 1)[1]))
            if job is None or job["service"] != "airbyte":
                return h.answer({"message": "not found"}, 404)
            return h.answer(airbyte_job(job))
        if method == "GET" and path == "/v1/jobs":
            connection = query.get("connectionId", [None])[0]
            data = [
                airbyte_job(j)
                for j in reversed(list(jobs.jobs.values()))
                if j["service"] == "airbyte" and connection in (None, j["connectionId"])
            ][: int(query.get("limit", ["20"])[0])]
            return h.answer({"data": data})
        h.answer({"message": "not found"}, 404)

    return Handler


def _serve(
    dbt_port: int,
    airbyte_port: int,
    ledger: Path,
    seconds: float,
    cert: str,
    key: str,
    released: Path | None,
) -> None:
    jobs = _Jobs(ledger, seconds, released)
    dbt = ThreadingHTTPServer(("127.0.0.1", dbt_port), _handler(jobs, "dbt"))
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    dbt.socket = tls.wrap_socket(dbt.socket, server_side=True)
    airbyte = ThreadingHTTPServer(("127.0.0.1", airbyte_port), _handler(jobs, "airbyte"))
    threading.Thread(target=dbt.serve_forever, daemon=True).start()
    airbyte.serve_forever()


if __name__ == "__main__":
    a = sys.argv[1:]
    _serve(int(a[0]), int(a[1]), Path(a[2]), float(a[3]), a[4], a[5], Path(a[6]) if a[6:] else None)
