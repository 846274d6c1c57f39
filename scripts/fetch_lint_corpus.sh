#!/usr/bin/env bash
# Rebuild the `taskstate lint` precision/speed corpus: Airflow's own example DAGs and the example
# and system-test DAGs of popular providers, taken from pinned PyPI releases so the figures in
# tests/lint/corpus_findings.md and bench/README.md are repeatable.
# Modern provider wheels no longer ship their example DAGs; the system-test DAGs live in the
# providers' sdists (tests/system/...), so those are fetched as sdists (downloaded, never built).
# Every file is pinned by version and by the sha256 PyPI publishes for it; pip checks them
# (--require-hashes), so a fetch that fails or brings other bytes fails this script, and CI with it.
# Usage: scripts/fetch_lint_corpus.sh [DEST]   (default: .cache/lint-corpus; reruns are no-ops)
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-${TASKSTATE_LINT_CORPUS:-.cache/lint-corpus}}
PIP=${PIP:-.venv/bin/pip}
WHEELS=(
  "apache-airflow-core==3.3.2 --hash=sha256:99258922bccec15be4700ff89f3c942b8acd93407e263c287ce863e671bb3c50"
  "apache-airflow==2.10.5 --hash=sha256:4c6d19159bcd85f496fbea70db72ef55d32335f80e4ffb82ae3c252782079ca0"
  "apache-airflow==1.10.15 --hash=sha256:25ac3988e1f2ca20c14b397fdb21ac6b160d868ff319c474af944b4b2b46db63"
  "apache-airflow-providers-standard==1.21.0 --hash=sha256:12969f10b7735f46dfa1d4f48675ca19dce46bbaa3a68d42c0fdb94eca4cff25"
  "apache-airflow-providers-common-sql==2.4.0 --hash=sha256:1b0b1364d92df2390f5b4278dc570061f2f81b9c7ad61e0467c9f9cc3159781e"
)
SDISTS=(
  "apache-airflow-providers-amazon==9.39.0 --hash=sha256:9ffd82a9cf92ad291d277e00d2b583e34d76e1d486922017815875539886de5a"
  "apache-airflow-providers-apache-spark==6.3.4 --hash=sha256:c7154d3b1c5c27367d8ac2891cc04ef97bdcaaaac4c1bee4d705c0b7d616ca88"
  "apache-airflow-providers-cncf-kubernetes==10.25.0 --hash=sha256:134809a37537cedf05cd6d60c51b64cd1df430c29e289786214d33307b27accf"
  "apache-airflow-providers-common-sql==2.4.0 --hash=sha256:363f89dab28bdb00e9090a50476a71795b8237adb0b1768c9490b805b1868e0d"
  "apache-airflow-providers-databricks==7.23.0 --hash=sha256:0e0d927ef29a0edf0018de94fa7289b07b76165a3f59ad78591c52a7eaea3840"
  "apache-airflow-providers-dbt-cloud==4.11.1 --hash=sha256:6d53855a407aa80fc888a46602154b44f48ab38dcdf2c0fa932d9ead3e45e3fa"
  "apache-airflow-providers-google==22.8.0 --hash=sha256:654006dc73478b36f9e4bda0f00e45ba4b864f68da66653fbc77a9ece460a79d"
  "apache-airflow-providers-http==6.3.0 --hash=sha256:9139da91dadcf2d1f7714c9a848893a74806d99f87c6c02cd67e4abdb5fd007e"
  "apache-airflow-providers-microsoft-azure==15.2.1 --hash=sha256:db837222f69b1e1bb21bab0ad49aa0a8d912236f73b4812035d2620f36d4fcea"
  "apache-airflow-providers-sftp==7.0.0 --hash=sha256:fca40f6462814c1bbd7baa07704dfa8215c76ffce20639b6eb561bd366b9387c"
  "apache-airflow-providers-snowflake==6.20.0 --hash=sha256:a39fbbf421b48a15aa3889ccd144009b3ac23801133b33055bcaac0912ae2a5c"
  "apache-airflow-providers-standard==1.21.0 --hash=sha256:4345d66cc4b02fdf984218d318f40361ed12116bb13575169c444c64bd04ea4b"
)
# the pins' own digest: a corpus built from other pins is rebuilt, never reused
stamp=$(printf '%s\n' "${WHEELS[@]}" "${SDISTS[@]}" | sha256sum | cut -c1-16)
if [ "$(cat "$DEST/.complete" 2>/dev/null)" = "$stamp" ]; then exit 0; fi
rm -rf "$DEST"
dl="$DEST/.downloads"
mkdir -p "$dl/wheels" "$dl/sdists"
quiet() { "$@" 2> >(grep -v "^WARNING: Location" >&2); }
fetch() {  # fetch DIR PIP-OPTION REQUIREMENT...: download with every file's hash checked
  local dir=$1 option=$2 req
  shift 2
  req=$(mktemp)
  printf '%s\n' "$@" >"$req"
  quiet "$PIP" download --quiet --no-deps --require-hashes "$option" :all: -d "$dir" -r "$req"
  rm -f "$req"
}
for wheel in "${WHEELS[@]}"; do  # one at a time: two versions of one project cannot share a call
  fetch "$dl/wheels" --only-binary "$wheel"
done
fetch "$dl/sdists" --no-binary "${SDISTS[@]}"
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
echo "$stamp" >"$DEST/.complete"
