"""The `taskstate lint` command: exit codes, formats, noqa, config, --fix/--diff, a real process."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from taskstate.lint import report_rules
from taskstate.lint.command import lint
from taskstate.lint.rules import RULES

FIXTURES = Path(__file__).parent / "fixtures"

CLEAN = "from airflow.sdk import task\n\n@task\ndef f(task_state_store=None):\n    return 1\n"
UTCNOW = textwrap.dedent(
    """\
    \"\"\"A DAG.\"\"\"
    from datetime import datetime

    from airflow.sdk import task


    @task
    def stamp(task_state_store=None):
        task_state_store.set("at", datetime.utcnow().isoformat())
        return datetime.utcfromtimestamp(0).isoformat()
    """
)
STATEFUL = textwrap.dedent(
    """\
    from airflow.models import Variable
    from airflow.sdk import task


    @task
    def f():
        Variable.set("etl_cursor", 1)
        Variable.set("other_cursor", 2)  # noqa: TS101
        Variable.set("third_cursor", 3)  # noqa: TS999
        Variable.set("fourth_cursor", 4)  # noqa
    """
)


def run(*args: str, cwd: Path | None = None) -> tuple[int, str]:
    runner = CliRunner()
    old = Path.cwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        result = runner.invoke(lint, list(args), catch_exceptions=False)
    finally:
        os.chdir(old)
    return result.exit_code, result.output


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "dags").mkdir()
    return tmp_path


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def codes_from_json(output: str) -> list[str]:
    return [f"{f['line']} {f['code']}" for f in json.loads(output)["findings"]]


def test_exit_0_when_clean(project: Path) -> None:
    write(project / "dags" / "ok.py", CLEAN)
    code, out = run("--airflow-version", "3.3", "dags", cwd=project)
    assert code == 0
    assert "No findings in 1 file(s)" in out


def test_exit_1_with_findings_and_text_report(project: Path) -> None:
    write(project / "dags" / "bad.py", STATEFUL)
    code, out = run("--airflow-version", "2.10", "--no-color", "dags/bad.py", cwd=project)
    assert code == 1
    assert "dags/bad.py:7:5: TS101 [error]" in out
    assert "\x1b[" not in out
    assert "before:" in out and "after:" in out
    assert "advice for Airflow 2.10 (--airflow-version)" in out


def test_exit_2_on_a_file_that_does_not_parse_and_the_rest_is_still_checked(project: Path) -> None:
    write(project / "dags" / "broken.py", "def f(:\n")
    write(project / "dags" / "bad.py", STATEFUL)
    code, out = run("--format", "json", "dags", cwd=project)
    assert code == 2
    data = json.loads(out)
    assert data["parse_errors"] == [str(Path("dags") / "broken.py")]
    assert {f["code"] for f in data["findings"]} == {"TS901", "TS101"}


def test_exit_2_on_usage_errors(project: Path) -> None:
    assert run("does-not-exist.py", cwd=project)[0] == 2
    assert run("--format", "xml", cwd=project)[0] == 2
    assert run("--airflow-version", "three", cwd=project)[0] == 2


def test_noqa_silences_named_codes_and_bare_noqa_silences_all(project: Path) -> None:
    write(project / "bad.py", STATEFUL)
    code, out = run("--format", "json", "bad.py", cwd=project)
    assert code == 1
    assert codes_from_json(out) == ["7 TS101", "9 TS101"]


def test_select_and_ignore_flags(project: Path) -> None:
    write(project / "bad.py", STATEFUL + UTCNOW.split('"""A DAG."""\n')[1])
    _, out = run("--format", "json", "bad.py", cwd=project)
    assert {c.split()[1] for c in codes_from_json(out)} == {"TS101", "TS601"}
    _, out = run("--format", "json", "--select", "TS6", "bad.py", cwd=project)
    assert {c.split()[1] for c in codes_from_json(out)} == {"TS601"}
    code, out = run("--format", "json", "--ignore", "TS1,TS601", "bad.py", cwd=project)
    assert (code, codes_from_json(out)) == (0, [])


def test_pyproject_config_select_ignore_per_file_and_version(project: Path) -> None:
    write(
        project / "pyproject.toml",
        textwrap.dedent(
            """\
            [tool.taskstate.lint]
            ignore = ["TS105"]
            airflow-version = "2.11"
            exclude = ["dags/vendored/*"]

            [tool.taskstate.lint.per-file-ignores]
            "dags/legacy_*.py" = ["TS1"]
            """
        ),
    )
    write(project / "dags" / "legacy_etl.py", STATEFUL)
    write(project / "dags" / "etl.py", STATEFUL)
    (project / "dags" / "vendored").mkdir()
    write(project / "dags" / "vendored" / "x.py", STATEFUL)
    code, out = run("--format", "json", "dags", cwd=project)
    data = json.loads(out)
    assert code == 1
    assert data["airflow_version"] == {"version": "2.11", "source": "config"}
    assert data["files"] == 2
    assert {f["path"] for f in data["findings"]} == {str(Path("dags") / "etl.py")}
    # a flag wins over the config
    _, out = run("--format", "json", "--airflow-version", "3.3", "dags", cwd=project)
    assert json.loads(out)["airflow_version"]["version"] == "3.3"


def test_bad_config_is_a_usage_error(project: Path) -> None:
    write(project / "pyproject.toml", "[tool.taskstate.lint]\nselcet = ['TS1']\n")
    code, out = run(".", cwd=project)
    assert code == 2
    assert "unknown key(s) in [tool.taskstate.lint]: selcet" in out


def test_diff_shows_the_fix_and_changes_nothing(project: Path) -> None:
    path = write(project / "dag.py", UTCNOW)
    code, out = run("--diff", "dag.py", cwd=project)
    assert code == 1
    assert '-    task_state_store.set("at", datetime.utcnow().isoformat())' in out
    assert '+    task_state_store.set("at", datetime.now(tz=timezone.utc).isoformat())' in out
    assert "+from datetime import timezone" in out
    assert path.read_text() == UTCNOW


def test_fix_rewrites_the_file_adds_the_import_and_leaves_it_clean(project: Path) -> None:
    path = write(project / "dag.py", UTCNOW)
    code, _ = run("--fix", "dag.py", cwd=project)
    fixed = path.read_text()
    assert code == 0
    assert "datetime.now(tz=timezone.utc).isoformat()" in fixed
    assert "datetime.fromtimestamp(0, tz=timezone.utc).isoformat()" in fixed
    assert fixed.count("from datetime import timezone\n") == 1
    assert fixed.index("from datetime import datetime\n") < fixed.index("from datetime import tim")
    compile(fixed, "dag.py", "exec")
    assert run("dag.py", cwd=project)[0] == 0


def test_fix_reuses_an_existing_timezone_import_and_avoids_a_taken_name(project: Path) -> None:
    write(project / "a.py", "import datetime as dt\nx = dt.datetime.utcnow()\n")
    write(
        project / "b.py",
        "from pendulum import timezone\nfrom datetime import datetime\nx = datetime.utcnow()\n",
    )
    run("--fix", "a.py", "b.py", cwd=project)
    assert (project / "a.py").read_text() == (
        "import datetime as dt\nx = dt.datetime.now(tz=dt.timezone.utc)\n"
    )
    assert (project / "b.py").read_text() == (
        "from pendulum import timezone\nfrom datetime import datetime\n"
        "from datetime import timezone as dt_timezone\nx = datetime.now(tz=dt_timezone.utc)\n"
    )


def test_text_output_caps_repeated_findings(project: Path) -> None:
    body = "from datetime import datetime\n" + "".join(
        f"x{i} = datetime.utcnow()\n" for i in range(15)
    )
    write(project / "many.py", body)
    _, out = run("--no-color", "many.py", cwd=project)
    assert out.count(": TS601 [warning]") == 10
    assert "... 5 more TS601 in this file (lines 12, 13, 14, 15, 16)" in out
    assert out.count("see TS601 above") == 9
    _, out = run("--no-color", "--max-per-code", "0", "many.py", cwd=project)
    assert out.count(": TS601 [warning]") == 15


def test_colour_only_when_asked_or_on_a_tty(project: Path) -> None:
    write(project / "bad.py", STATEFUL)
    assert "\x1b[" in run("--color", "bad.py", cwd=project)[1]
    assert "\x1b[" not in run("bad.py", cwd=project)[1]  # CliRunner output is not a TTY


def test_output_file(project: Path) -> None:
    write(project / "bad.py", STATEFUL)
    code, out = run("--format", "sarif", "-o", "report.sarif", "bad.py", cwd=project)
    assert code == 1 and out == ""
    assert json.loads((project / "report.sarif").read_text())["version"] == "2.1.0"


def test_real_process_python_dash_m(project: Path) -> None:
    write(project / "bad.py", STATEFUL)
    write(project / "ok.py", CLEAN)
    env = {**os.environ, "NO_COLOR": "1"}
    bad = subprocess.run(
        [sys.executable, "-m", "taskstate.lint", "--format", "json", "bad.py"],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert bad.returncode == 1, bad.stderr
    assert codes_from_json(bad.stdout) == ["7 TS101", "9 TS101"]
    ok = subprocess.run(
        [sys.executable, "-m", "taskstate.lint", "ok.py"],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    via_main_cli = subprocess.run(
        [sys.executable, "-m", "taskstate", "lint", "--format", "json", "bad.py"],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert via_main_cli.returncode == 1, via_main_cli.stderr
    assert codes_from_json(via_main_cli.stdout) == ["7 TS101", "9 TS101"]
    usage = subprocess.run(
        [sys.executable, "-m", "taskstate.lint", "--nope"],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert usage.returncode == 2
    assert "Traceback" not in usage.stderr


def test_linting_never_imports_airflow_or_the_dag(project: Path) -> None:
    write(project / "dag.py", "raise SystemExit('the DAG was executed')\n" + STATEFUL)
    probe = (
        "import sys\nfrom taskstate.lint.command import lint\n"
        "try:\n    lint(['dag.py'])\nexcept SystemExit as e:\n    code = e.code\n"
        "assert not any(m == 'airflow' or m.startswith('airflow.') for m in sys.modules)\n"
        "print('exit', code)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=project, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("exit 1")


def test_a_file_that_is_not_utf8_is_reported_not_a_crash(project: Path) -> None:
    (project / "latin.py").write_bytes(b"# caf\xe9\nx = 1\n")
    code, out = run("--format", "json", "latin.py", cwd=project)
    assert code == 2
    (finding,) = json.loads(out)["findings"]
    assert finding["code"] == "TS901" and "not UTF-8" in finding["message"]


def test_fix_keeps_crlf_line_endings(project: Path) -> None:
    path = project / "win.py"
    path.write_bytes(b"import os\r\nfrom datetime import datetime\r\nx = datetime.utcnow()\r\n")
    assert run("--fix", "win.py", cwd=project)[0] == 0
    assert path.read_bytes() == (
        b"import os\r\nfrom datetime import datetime\r\nfrom datetime import timezone\r\n"
        b"x = datetime.now(tz=timezone.utc)\r\n"
    )


def test_an_unwritable_report_path_is_a_usage_error(project: Path) -> None:
    write(project / "ok.py", CLEAN)
    code, out = run("-o", "missing-dir/report.txt", "ok.py", cwd=project)
    assert code == 2
    assert "cannot write the report" in out


def test_form_feeds_do_not_shift_lines_or_fixes(project: Path) -> None:
    text = "from datetime import datetime\n\x0c\nx = 1  # a\x0cb\ny = datetime.utcnow()\n"
    path = write(project / "ff.py", text)
    _, out = run("--format", "json", "ff.py", cwd=project)
    assert codes_from_json(out) == ["4 TS601"]
    assert run("--fix", "ff.py", cwd=project)[0] == 0
    assert path.read_text() == (
        "from datetime import datetime\nfrom datetime import timezone\n\x0c\n"
        "x = 1  # a\x0cb\ny = datetime.now(tz=timezone.utc)\n"
    )


def test_info_findings_are_shown_but_do_not_fail_the_run(project: Path) -> None:
    write(
        project / "dag.py",
        "from airflow.sdk import task\n@task\ndef f(task_state_store=None):\n"
        '    task_state_store.set("job_id", "j-1")\n',
    )
    code, out = run("--format", "json", "dag.py", cwd=project)
    assert code == 0
    assert codes_from_json(out) == ["4 TS506"]


def test_rules_lists_every_code(project: Path) -> None:
    code, out = run("--rules", cwd=project)
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == list(RULES)


def test_rules_as_markdown_is_the_readme_table(project: Path) -> None:
    code, out = run("--rules", "--format", "markdown", cwd=project)
    assert code == 0
    assert out.rstrip("\n") == report_rules.markdown()
    rows = out.splitlines()[2:]
    assert [row.split(" | ")[0] for row in rows] == [f"| `{code}`" for code in RULES]
    assert (
        "| `TS601` | naive-utc-timestamp | warning | ‹call›() returns a naive datetime | yes |"
        in rows
    )
    # markdown is a table of rules, not a report format
    assert run("--format", "markdown", ".", cwd=project)[0] == 2
    assert run("--rules", "--format", "sarif", cwd=project)[0] == 2


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, RecursionError, MemoryError):
        return False
    return True


def test_pathologically_nested_code_is_reported_not_a_crash(project: Path) -> None:
    """What this interpreter can parse is checked (and is clean); the rest is one TS901 each."""
    texts = {
        "deep.py": "x = y" + "[0]" * 20000 + "\n",
        "long.py": "x = 'a'" + " + 'a'" * 20000 + "\n",
    }
    for name, text in texts.items():
        write(project / name, text)
    unparsable = sorted(name for name, text in texts.items() if not _parses(text))
    code, out = run("--format", "json", *texts, cwd=project)
    data = json.loads(out)
    assert data["files"] == 2
    assert sorted(data["parse_errors"]) == unparsable
    assert sorted(f["path"] for f in data["findings"]) == unparsable
    for finding in data["findings"]:
        assert finding["code"] == "TS901", finding
        assert finding["message"] == "file cannot be checked: nested too deeply to check"
    assert code == (2 if unparsable else 0)


def test_config_is_found_from_the_linted_path_not_the_working_directory(
    project: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    write(project / "pyproject.toml", '[tool.taskstate.lint]\nignore = ["TS1"]\n')
    write(project / "dags" / "bad.py", STATEFUL)
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    code, out = run("--format", "json", str(project / "dags"), cwd=elsewhere)
    assert (code, codes_from_json(out)) == (0, [])


def test_an_installed_airflow_3_3_is_a_3_3_target_for_ts507(project: Path) -> None:
    """No --airflow-version: the installed distribution's metadata (never Airflow itself)."""
    site = project / "site"
    info = site / "apache_airflow_core-3.3.2.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: apache-airflow-core\nVersion: 3.3.2\n"
    )
    write(
        project / "dag.py",
        "from airflow.sdk import task\n@task\ndef f(task_state_store=None):\n"
        '    task_state_store.update("n", lambda n: n + 1, default=0)\n',
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run(
        [sys.executable, "-m", "taskstate.lint", "--format", "json", "dag.py"],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert out.returncode == 1, out.stderr
    data = json.loads(out.stdout)
    assert data["airflow_version"] == {"version": "3.3", "source": "installed"}
    assert codes_from_json(out.stdout) == ["4 TS507"]


@pytest.mark.parametrize(
    "flag", [["--select", "XX9"], ["--select", "TS1,TS19"], ["--ignore", "T5"]]
)
def test_an_unknown_code_on_the_command_line_is_a_usage_error(
    project: Path, flag: list[str]
) -> None:
    """Issue 30.6: `--select XX9` printed "No findings" and exited 0 (the linter silently off)."""
    write(project / "bad.py", STATEFUL)
    code, out = run(*flag, "bad.py", cwd=project)
    assert code == 2, out
    assert "unknown rule code" in out and flag[1].split(",")[-1] in out
    assert "No findings" not in out


def test_an_unknown_code_in_pyproject_is_a_usage_error(project: Path) -> None:
    write(project / "bad.py", STATEFUL)
    write(
        project / "pyproject.toml",
        '[tool.taskstate.lint]\nselect = ["TS1"]\n'
        '[tool.taskstate.lint.per-file-ignores]\n"tests/**" = ["TS6O1"]\n',
    )
    code, out = run("bad.py", cwd=project)
    assert code == 2 and "per-file-ignores.tests/**" in out and "TS6O1" in out, out
    write(project / "pyproject.toml", '[tool.taskstate.lint]\nselect = ["XX9"]\n')
    code, out = run("bad.py", cwd=project)
    assert code == 2 and "select: unknown rule code(s) XX9" in out, out
    write(project / "pyproject.toml", '[tool.taskstate.lint]\nignore = ["ALL"]\n')
    assert run("bad.py", cwd=project)[0] == 0  # ALL is a known selector


def test_diff_alone_on_stdout_pipes_into_git_apply(project: Path) -> None:
    """Issue 30.6: the report was printed on stdout after the diff, so `git apply` choked."""
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    path = write(project / "dag.py", UTCNOW)
    proc = subprocess.run(
        [sys.executable, "-m", "taskstate", "lint", "--diff", "--no-color", "dag.py"],
        cwd=project,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("--- a/dag.py\n"), proc.stdout
    assert "TS601" in proc.stderr and "TS601" not in proc.stdout  # the report: on stderr
    applied = subprocess.run(
        ["git", "apply", "-"], cwd=project, input=proc.stdout, text=True, capture_output=True
    )
    assert applied.returncode == 0, applied.stderr
    assert "datetime.now(tz=timezone.utc)" in path.read_text()
    code, _ = run("--select", "TS601", "dag.py", cwd=project)
    assert code == 0
