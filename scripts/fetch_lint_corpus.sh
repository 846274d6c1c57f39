#!/usr/bin/env bash
# Rebuild the `taskstate lint` precision/speed corpus: Airflow's own example DAGs and the example
# and system-test DAGs of popular providers, taken from pinned PyPI releases so the figures in
# tests/lint/corpus_findings.md and bench/README.md are repeatable.
# Modern provider wheels no longer ship their example DAGs; the system-test DAGs live in the
# providers' sdists (tests/system/...), so those are fetched as sdists (downloaded, never built).
# Usage: scripts/fetch_lint_corpus.sh [DEST]   (default: .cache/lint-corpus; reruns are no-ops)
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-${TASKSTATE_LINT_CORPUS:-.cache/lint-corpus}}
PIP=${PIP:-.venv/bin/pip}
if [ -f "$DEST/.complete" ]; then exit 0; fi
WHEELS=(
  apache-airflow-core==3.3.2
  apache-airflow==2.10.5
  apache-airflow==1.10.15
  apache-airflow-providers-standard==1.21.0
  apache-airflow-providers-common-sql==2.4.0
)
SDISTS=(
  apache-airflow-providers-amazon==9.39.0
  apache-airflow-providers-apache-spark==6.3.4
  apache-airflow-providers-cncf-kubernetes==10.25.0
  apache-airflow-providers-common-sql==2.4.0
  apache-airflow-providers-databricks==7.23.0
  apache-airflow-providers-dbt-cloud==4.11.1
  apache-airflow-providers-google==22.8.0
  apache-airflow-providers-http==6.3.0
  apache-airflow-providers-microsoft-azure==15.2.1
  apache-airflow-providers-sftp==7.0.0
  apache-airflow-providers-snowflake==6.20.0
  apache-airflow-providers-standard==1.21.0
)
dl="$DEST/.downloads"
mkdir -p "$dl/wheels" "$dl/sdists"
quiet() { "$@" 2> >(grep -v "^WARNING: Location" >&2); }
for wheel in "${WHEELS[@]}"; do  # one at a time: two versions of one project cannot share a call
  quiet "$PIP" download --quiet --no-deps --only-binary :all: -d "$dl/wheels" "$wheel"
done
quiet "$PIP" download --quiet --no-deps --no-binary :all: -d "$dl/sdists" "${SDISTS[@]}"
"${PYTHON:-.venv/bin/python}" - "$dl" "$DEST" <<'PY'
import hashlib, re, sys, tarfile, zipfile
from pathlib import Path

dl, dest = Path(sys.argv[1]), Path(sys.argv[2])
dag_path = re.compile(r"(/example_dags/|/tests/system/)[^ ]*\.py$")
count = 0
seen: set[str] = set()  # a wheel and its sdist ship the same example files: keep one copy
def keep(name: str) -> bool:
    return bool(dag_path.search("/" + name)) and not name.endswith("__init__.py")
def write(dist: str, name: str, data: bytes) -> None:
    global count
    digest = hashlib.sha256(data).hexdigest()
    if digest in seen:
        return
    seen.add(digest)
    out = dest / dist / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    count += 1
for whl in sorted((dl / "wheels").glob("*.whl")):
    dist = "-".join(whl.name.split("-")[:2])
    with zipfile.ZipFile(whl) as zf:
        for name in zf.namelist():
            if keep(name):
                write(dist, name, zf.read(name))
for sdist in sorted((dl / "sdists").glob("*.tar.gz")):
    dist = sdist.name.removesuffix(".tar.gz") + "-sdist"
    with tarfile.open(sdist) as tf:
        for member in tf.getmembers():
            name = member.name.split("/", 1)[1] if "/" in member.name else member.name
            if member.isfile() and keep(name):
                write(dist, name, tf.extractfile(member).read())  # type: ignore[union-attr]
print(f"lint corpus: {count} files in {dest}")
PY
touch "$DEST/.complete"
