"""Each rule on its fixture: every finding a fixture must produce is written on its line, and
every other line must produce none.

The convention (flake8-bugbear's, with the column): a trailing comment
`# expect: TS501:37` (several: `# expect: TS405:41 TS403:35`, free text may follow) on the line
a finding points at, 37 being its 1-based column. A first line `# lint-fixture: airflow-version
3.3` sets the Airflow the fixture is linted for (default 2.10). The expectation comments are
removed before linting (up to the end of the line), so rules that read comments (TS405) see the
code as written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from taskstate.lint import RULES, AirflowVersion, LintConfig, lint_source, report_rules
from taskstate.lint.rules import Severity

FIXTURES = Path(__file__).parent / "fixtures"
BELOW_NATIVE = AirflowVersion.parse("2.10", "test")
NATIVE = AirflowVersion.parse("3.3", "test")

_EXPECT = re.compile(r"\s*#\s*expect:\s*(?P<codes>(?:TS\d{3}:\d+\s*)+).*$")
_TARGET = re.compile(r"#\s*lint-fixture:\s*airflow-version\s+(?P<version>\S+)")


@dataclass(frozen=True)
class Fixture:
    name: str
    text: str  # the file without its expectation comments
    expected: list[str]  # "line:col code", in the order findings are reported
    version: AirflowVersion


def load(name: str) -> Fixture:
    lines = (FIXTURES / name).read_text(encoding="utf-8").split("\n")
    target = _TARGET.match(lines[0])
    version = AirflowVersion.parse(target["version"], "fixture") if target else BELOW_NATIVE
    expected: list[tuple[int, int, str]] = []
    for number, line in enumerate(lines, start=1):
        match = _EXPECT.search(line)
        if match is None:
            assert "expect:" not in line, f"{name}:{number}: unreadable expectation"
            continue
        for item in match["codes"].split():
            code, col = item.split(":")
            expected.append((number, int(col), code))
        lines[number - 1] = line[: match.start()]
    return Fixture(
        name,
        "\n".join(lines),
        [f"{line}:{col} {code}" for line, col, code in sorted(expected)],
        version,
    )


FIXTURE_NAMES = sorted(p.name for p in FIXTURES.glob("*.py"))


def found(fixture: Fixture, version: AirflowVersion | None = None) -> list[str]:
    result = lint_source(fixture.text, fixture.name, LintConfig(), version or fixture.version)
    return [f"{f.line}:{f.col} {f.code}" for f in result.findings]


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_findings_are_exactly_the_expected_ones(name: str) -> None:
    fixture = load(name)
    assert found(fixture) == fixture.expected


def test_expectations_are_read_from_the_fixture_lines() -> None:
    """The harness itself: it sees every expectation, and the linted text has none left."""
    fixture = load("mixin.py")
    assert "42:41 TS405" in fixture.expected and "43:35 TS403" in fixture.expected
    assert "expect:" not in fixture.text
    assert fixture.text.count("\n") == (FIXTURES / "mixin.py").read_text().count("\n")
    assert load("native_accessor.py").version.label == "3.3"


@pytest.mark.parametrize("version", ["2.10", "3.0", "3.3", "3.4"])
def test_skill_after_snippets_raise_nothing_on_any_version(version: str) -> None:
    assert found(load("skill_after.py"), AirflowVersion.parse(version, "test")) == []


def test_every_rule_has_a_fixture_that_flags_it() -> None:
    flagged = {item.split()[1] for name in FIXTURE_NAMES for item in load(name).expected}
    assert flagged == set(RULES) - {"TS901"}


def test_durable_noop_is_reported_only_below_native_store() -> None:
    mixin = load("mixin.py")
    ts406 = [item for item in mixin.expected if item.endswith("TS406")]
    assert ts406
    for version in ("3.0", "3.2"):
        assert set(ts406) <= set(found(mixin, AirflowVersion.parse(version, "test")))
    for version in (NATIVE, AirflowVersion(None, "unknown")):
        assert not set(ts406) & set(found(mixin, version))


@pytest.mark.parametrize("version", ["2.10", "2.11", "3.0", "3.2"])
def test_native_accessor_methods_are_not_reported_below_3_3(version: str) -> None:
    native = load("native_accessor.py")
    assert native.expected
    assert found(native, AirflowVersion.parse(version, "test")) == []


def test_native_accessor_methods_are_reported_on_later_versions_and_not_when_unknown() -> None:
    native = load("native_accessor.py")
    assert found(native, AirflowVersion.parse("3.4", "test")) == native.expected
    assert found(native, AirflowVersion(None, "unknown")) == []


def test_every_finding_says_why_and_shows_before_and_after() -> None:
    for name in FIXTURE_NAMES:
        fixture = load(name)
        for finding in lint_source(fixture.text, name, LintConfig(), fixture.version).findings:
            assert finding.message and finding.why, finding
            assert finding.before.strip() and finding.after.strip(), finding


def test_heuristic_rules_say_possible_and_are_not_errors() -> None:
    for rule in RULES.values():
        if rule.heuristic:
            assert rule.severity is not Severity.ERROR, rule.code


def lint_text(text: str, version: AirflowVersion = NATIVE) -> list[tuple[str, str, str]]:
    result = lint_source(text, "dag.py", LintConfig(), version)
    return [(f.code, f.before, f.after) for f in result.findings]


def test_after_is_built_from_the_users_own_code() -> None:
    text = (
        "from airflow.models import Variable\n"
        "from airflow.sdk import task\n"
        "@task\n"
        "def process(**context):\n"
        '    cursor = Variable.get("etl_cursor", default_var=0)\n'
        '    Variable.set("etl_cursor", new_cursor)  # global, any task can overwrite\n'
    )
    (code, before, after) = lint_text(text)[0]
    assert code == "TS101"
    assert before == 'Variable.set("etl_cursor", new_cursor)  # global, any task can overwrite'
    assert after.splitlines() == [
        'task_state_store = context["task_state_store"]',
        'task_state_store.set("etl_cursor", new_cursor)  # global, any task can overwrite',
    ]


def test_reconnect_or_submit_after_is_the_mixin_with_the_users_submit_call() -> None:
    text = (
        "from airflow.models import Variable\n"
        "class SparkOp(BaseOperator):\n"
        "    def execute(self, context):\n"
        '        job_id = Variable.get("spark_job_id", default_var=None)\n'
        "        if job_id:\n"
        "            self._wait(job_id)\n"
        "        else:\n"
        "            job_id = self.hook.submit(conf=self.conf)\n"
        '            Variable.set("spark_job_id", job_id)\n'
    )
    for version, import_line in (
        ("2.10", "from taskstate import ResumableJobMixin"),
        ("3.3", "from airflow.sdk import ResumableJobMixin"),
    ):
        findings = lint_text(text, AirflowVersion.parse(version, "test"))
        assert [code for code, _, _ in findings] == ["TS103"]
        after = findings[0][2]
        assert after.startswith(import_line)
        assert "class SparkOp(ResumableJobMixin, BaseOperator):" in after
        assert 'external_id_key = "spark_job_id"' in after
        assert "return self.hook.submit(conf=self.conf)" in after


def test_version_aware_advice() -> None:
    text = "from airflow.models import Variable\n@task\ndef f():\n    Variable.set('cursor', 1)\n"
    below = lint_source(text, "d.py", LintConfig(), BELOW_NATIVE).findings[0].why
    native = lint_source(text, "d.py", LintConfig(), NATIVE).findings[0].why
    unknown = lint_source(text, "d.py", LintConfig(), AirflowVersion(None, "unknown")).findings[0]
    assert "from taskstate" in below and "2.10 has no state store" in below
    assert "native in Airflow 3.3" in native
    assert "native from Airflow 3.3; below 3.3 from taskstate" in unknown.why


def test_unbound_names_in_snippets_count_but_foreign_imports_do_not() -> None:
    snippet = "@task\ndef f(**context):\n    Variable.set('etl_cursor', 1)\n"
    assert [c for c, _, _ in lint_text(snippet)] == ["TS101"]
    foreign = "from mylib import Variable, task\n" + snippet
    assert [c for c, _, _ in lint_text(foreign)] == []


def test_utcnow_with_import_datetime_module_is_not_misread() -> None:
    assert lint_text("import datetime\nx = datetime.datetime.utcnow()\n")[0][0] == "TS601"
    # `datetime.utcnow()` on the module is an AttributeError, not ours to report
    assert lint_text("import datetime\nx = datetime.utcnow()\n") == []


def test_asset_rule_needs_a_provable_declaration() -> None:
    text = (
        "from airflow.sdk import Asset, AssetAlias, task\n"
        'A = Asset("a")\nB = Asset("b")\nALIAS = AssetAlias("x")\n'
        "@task(inlets=[ALIAS])\n"
        "def via_alias(asset_state_store=None):\n"
        "    return asset_state_store[B].get('k')\n"
        "@task(**OPTIONS)\n"
        "def unknown(asset_state_store=None):\n"
        "    return asset_state_store[B].get('k')\n"
        "@task\n"
        "def none_declared(asset_state_store=None):\n"
        "    return asset_state_store[B].get('k')\n"
    )
    findings = lint_source(text, "d.py", LintConfig(), NATIVE).findings
    assert [(f.code, f.line) for f in findings] == [("TS505", 13)]


def test_installed_airflow_is_read_from_metadata_without_importing_it(tmp_path: Path) -> None:
    """A real distribution on sys.path (its metadata only: `import airflow` would fail)."""
    import subprocess
    import sys

    info = tmp_path / "apache_airflow-2.10.5.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: apache-airflow\nVersion: 2.10.5\n")
    probe = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
        "from taskstate.lint import AirflowVersion\n"
        "v = AirflowVersion.detect(); print(v.label, v.source, v.native)\n"
        "assert 'airflow' not in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["2.10", "installed", "False"]


def test_readme_rule_table_is_the_generated_one() -> None:
    """README's table is `taskstate lint --rules --format markdown`, regenerated, not edited."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    start = readme.index("<!-- rules: generated by")
    table = readme[readme.index("\n", start) : readme.index("<!-- rules: end -->")].strip()
    assert table == report_rules.markdown()
    for rule in RULES.values():
        assert f"| `{rule.code}` | {rule.name} | {rule.severity.value} |" in table, rule.code


@pytest.mark.parametrize(
    ("key", "code"),
    [
        ("etl_cursor", "TS101"),
        ("orders_offset", "TS101"),
        ("databricks_run_id", "TS101"),
        ("page_token", "TS101"),
        ("emr_cluster_id", "TS104"),  # a long-lived id other DAGs use: shared configuration
        ("oauth_app_id", "TS104"),
        ("utc_offset", "TS104"),
        ("max_retries", "TS104"),
        ("last_processed_at", "TS102"),
    ],
)
def test_variable_keys_that_decide_between_error_and_possible(key: str, code: str) -> None:
    text = f"from airflow.models import Variable\n@task\ndef f():\n    Variable.set({key!r}, 1)\n"
    assert [c for c, _, _ in lint_text(text)] == [code]


def test_read_modify_write_is_state_but_set_if_absent_is_configuration() -> None:
    head = "from airflow.models import Variable\n@task\ndef f():\n"
    rmw = (
        head + "    n = Variable.get('rows_done', default_var=0)\n    total = n + 10\n"
        "    Variable.set('rows_done', total)\n"
    )
    init = (
        head + "    if Variable.get('MAGIC_VAR', default_var=None) is None:\n"
        "        Variable.set('MAGIC_VAR', 'Hello')\n"
    )
    assert [c for c, _, _ in lint_text(rmw)] == ["TS101"]
    assert [c for c, _, _ in lint_text(init)] == ["TS104"]


def test_a_variable_written_while_the_dag_file_is_parsed_is_still_a_watermark() -> None:
    text = (
        "from airflow.models import Variable\n"
        "task3 = BashOperator(task_id='t', bash_command='echo',\n"
        "    baz=Variable.set('last_execution_date_succes', '{{ execution_date }}'))\n"
    )
    assert [c for c, _, _ in lint_text(text)] == ["TS102"]


def test_a_classic_operator_mapped_over_a_callable_counts_as_mapped() -> None:
    text = (
        "from airflow.sdk import Asset\n"
        "from airflow.providers.standard.operators.python import PythonOperator\n"
        'ORDERS = Asset("orders")\n'
        "def load(part, **context):\n"
        '    context["asset_state_store"][ORDERS].set("offset", part)\n'
        "PythonOperator.partial(task_id='load', python_callable=load, outlets=[ORDERS])"
        ".expand(op_args=[[1], [2]])\n"
    )
    assert [c for c, _, _ in lint_text(text)] == ["TS503"]


def test_xcom_argument_positions_of_task_instance_and_base_operator() -> None:
    text = (
        "class Op(BaseOperator):\n"
        "    def execute(self, context):\n"
        "        seen = self.xcom_pull(context, key='cursor_pos')\n"
        "        self.xcom_push(context, 'cursor_pos', 5)\n"
        "@task\n"
        "def t(ti=None):\n"
        "    ti.xcom_pull('upstream', 'other_dag', 'offset')  # another task's value\n"
        "    ti.xcom_push('offset', 1)\n"
    )
    assert [c for c, _, _ in lint_text(text)] == ["TS201"]


def test_asset_rule_reads_inlets_from_the_operator_that_runs_a_callable() -> None:
    text = (
        "from airflow.sdk import Asset\n"
        "from airflow.providers.standard.operators.python import PythonOperator\n"
        'ORDERS = Asset("orders")\nCUSTOMERS = Asset("customers")\n'
        "def load(**context):\n"
        '    context["asset_state_store"][ORDERS].set("w", "x")\n'
        '    context["asset_state_store"][CUSTOMERS].get("w")\n'
        "PythonOperator(task_id='load', python_callable=load, outlets=[ORDERS])\n"
    )
    findings = lint_source(text, "d.py", LintConfig(), NATIVE).findings
    assert [(f.code, f.line) for f in findings] == [("TS505", 7)]
    assert "outlets=[ORDERS, CUSTOMERS]" in findings[0].after


def test_variable_default_carries_over_in_both_airflow_spellings() -> None:
    for spelling in ("default_var", "default"):
        text = (
            "from airflow.sdk import Variable, task\n@task\ndef f(task_state_store=None):\n"
            f"    return Variable.get('export_cursor', {spelling}=0)\n"
        )
        ((code, _, after),) = lint_text(text)
        assert (code, after) == (
            "TS105",
            "return task_state_store.get('export_cursor', default=0)",
        )


def test_a_state_variable_templated_into_an_operator_is_a_possible_state_read() -> None:
    text = (
        '"""Docs: {{ var.value.some_cursor }} in a docstring is documentation."""\n'
        "task = BashOperator(task_id='t',\n"
        "    bash_command='load --since {{ var.value.last_execution_date_succes }}',\n"
        "    env={'BUCKET': '{{ var.value.data_bucket }}'})\n"
    )
    found = lint_text(text)
    assert [code for code, _, _ in found] == ["TS105"]
    assert 'asset_state_store[MY_ASSET].get("last_execution_date_succes")' in found[0][2]


@pytest.mark.parametrize(
    ("version", "names_setting"), [("2.10", False), ("2.11", False), ("3.0", True), ("3.2", True)]
)
def test_durable_noop_advice_names_the_provider_setting_on_3_0_to_3_2(
    version: str, names_setting: bool
) -> None:
    mixin = load("mixin.py")
    result = lint_source(mixin.text, "mixin.py", LintConfig(), AirflowVersion.parse(version, "t"))
    (finding,) = [f for f in result.findings if f.code == "TS406"]
    assert finding.severity is Severity.INFO  # lint cannot see the deployment's setting
    setting = "taskstate_provider_durable = True"
    assert (setting in finding.message) is names_setting
    assert (setting in finding.after and setting in finding.why) is names_setting
    assert ("durable=True does nothing there" in finding.why) is not names_setting
    assert "from taskstate import ResumableJobMixin" in finding.after


def test_native_accessor_findings_say_what_to_do_with_code_that_compiles() -> None:
    native = load("native_accessor.py")
    findings = lint_source(native.text, native.name, LintConfig(), NATIVE).findings
    assert findings and {f.code for f in findings} == {"TS507"}
    for finding in findings:
        assert finding.severity is Severity.ERROR
        assert "set [state_store] taskstate_mode = taskstate" in finding.message
        assert "#   taskstate_mode = taskstate" in finding.after
        compile(finding.after, "after", "exec")  # the rewrite is Python, not pseudo-code
    (update,) = [f for f in findings if f.line == 16]
    assert "rewrite it with get() and set()" in update.message
    assert update.after.endswith(
        'new = (lambda n: n + 1)(task_state_store.get("n", 0))\ntask_state_store.set("n", new)'
    )
    (aget,) = [f for f in findings if f.line == 25]
    assert aget.after.endswith('store.get("progress", default={})')
