"""The install path docs/install.md describes, done for real: build the wheel with
`python -m build`, check what it carries, install it into a clean virtual environment, and run
the plain-Python example (`examples/plain/run_demo.py`) with that installation."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "taskstate"


def _clean_env() -> dict[str, str]:
    """No PYTHONPATH, no virtualenv of ours, no store settings: the new venv stands alone."""
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "AIRFLOW", "TASKSTATE")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def test_the_wheel_carries_the_ui_and_types_and_installs_into_a_clean_venv(
    tmp_path: Path,
) -> None:
    dist = tmp_path / "dist"
    # --no-isolation: the build backend (hatchling) comes pinned from the dev lock, so the
    # test downloads nothing; docs/install.md's plain `python -m build` fetches it instead.
    build = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist)]
    subprocess.run([*build, str(ROOT)], check=True, capture_output=True, env=_clean_env())
    (wheel,) = dist.glob("taskstate-*-py3-none-any.whl")
    # README's install line and docs/install.md name the wheel this very command builds.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "python -m build --wheel" in readme
    assert f"pip install 'dist/{wheel.name}[airflow,postgres]'" in readme
    assert f"pip install 'dist/{wheel.name}[airflow,postgres]'" in (
        ROOT / "docs" / "install.md"
    ).read_text(encoding="utf-8")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(
            archive.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt")
        )
    expected = {
        f"taskstate/{path.relative_to(PACKAGE).as_posix()}"
        for folder in ("ui/static", "ui/templates")
        for path in (PACKAGE / folder).rglob("*")
        if path.is_file()
    }
    assert len(expected) >= 4 and expected <= names, expected - names  # the UI's pages
    assert "taskstate/py.typed" in names  # type checkers see our hints
    assert not any(n.startswith(("tests/", "bench/", "examples/")) for n in names)
    assert "taskstate = taskstate.cli:main" in entry_points
    assert "[airflow.policy]" in entry_points and "[airflow.plugins]" in entry_points

    venv = tmp_path / "venv"
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or "uv"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [uv, "pip", "install", "-q", "--python", str(python),
         "-c", str(ROOT / "requirements" / "dev.lock"), str(wheel)],
        check=True, env=_clean_env(),
    )  # fmt: skip
    where = subprocess.run(
        [str(python), "-c", "import taskstate; print(taskstate.__file__)"],
        cwd=tmp_path, capture_output=True, text=True, check=True, env=_clean_env(),
    ).stdout  # fmt: skip
    assert where.startswith(str(venv)), where  # the installed copy, not this checkout's src/
    version = subprocess.run(
        [str(venv / "bin" / "taskstate"), "--version"],
        capture_output=True, text=True, check=True, env=_clean_env(),
    ).stdout  # fmt: skip
    assert version.strip() == "taskstate 0.1.0"
    url = f"sqlite:///{tmp_path}/s.db"
    subprocess.run(
        [str(venv / "bin" / "taskstate"), "--url", url, "task", "set", "k", "1", "--dag-id", "d",
         "--run-id", "r", "--task-id", "t"],
        check=True, env=_clean_env(),
    )  # fmt: skip
    listing = subprocess.run(  # PyYAML is not a dependency: -o yaml says what to install
        [str(venv / "bin" / "taskstate"), "--url", url, "task", "list", "--dag-id", "d", "-o",
         "yaml"],
        capture_output=True, text=True, env=_clean_env(),
    )  # fmt: skip
    assert listing.returncode == 1 and "pip install pyyaml" in listing.stderr, listing.stderr

    demo = subprocess.run(
        [str(python), str(ROOT / "examples" / "plain" / "run_demo.py")],
        cwd=tmp_path, capture_output=True, text=True, env=_clean_env(), timeout=300,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "OK: the retry resumed from its checkpoint" in demo.stdout
    assert "last_cursor" in demo.stdout  # the CLI of the installed wheel listed the state
