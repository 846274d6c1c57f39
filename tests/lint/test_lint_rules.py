"""Each rule on its fixture: what must be flagged (line:col code) and near-misses that must not."""

from __future__ import annotations

from pathlib import Path

import pytest

from taskstate.lint import RULES, AirflowVersion, LintConfig, lint_file, lint_source
from taskstate.lint.rules import Severity

FIXTURES = Path(__file__).parent / "fixtures"
BELOW_NATIVE = AirflowVersion.parse("2.10", "test")
NATIVE = AirflowVersion.parse("3.3", "test")

# flake8-bugbear style: the findings each fixture must produce, and nothing else.
EXPECTED = {
    "variables.py": [
        "11:5 TS101",
        "16:5 TS101",
        "21:5 TS102",
        "25:5 TS102",
        "31:9 TS103",
        "41:5 TS104",
        "46:12 TS105",
    ],
    "xcom.py": ["11:9 TS201", "18:5 TS202", "38:5 TS202"],
    "submit_poll.py": ["14:9 TS301", "19:69 TS303", "22:5 TS302"],
    "mixin.py": [
        "11:5 TS401",
        "19:1 TS402",
        "27:9 TS404",
        "36:5 TS404",
        "42:41 TS405",
        "43:35 TS403",
        "44:35 TS405",
        "45:62 TS406",
        "57:5 TS407",
    ],
    "store_calls.py": [
        "14:37 TS501",
        "15:37 TS501",
        "16:34 TS501",
        "17:56 TS501",
        "18:26 TS502",
        "19:5 TS506",
        "21:40 TS501",
        "27:5 TS503",
        "28:5 TS504",
        "33:5 TS504",
        "38:12 TS505",
    ],
    "timestamps.py": ["11:32 TS601", "12:12 TS601"],
    "skill_after.py": [],
    "skill_before.py": ["8:5 TS101", "11:1 TS102", "17:9 TS103", "28:5 TS202", "33:5 TS102"],
}


def found(name: str, version: AirflowVersion = BELOW_NATIVE) -> list[str]:
    result = lint_file(FIXTURES / name, LintConfig(), version)
    return [f"{f.line}:{f.col} {f.code}" for f in result.findings]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_findings(name: str) -> None:
    assert found(name) == EXPECTED[name]


@pytest.mark.parametrize("version", ["2.10", "3.0", "3.3", "3.4"])
def test_skill_after_snippets_raise_nothing_on_any_version(version: str) -> None:
    assert found("skill_after.py", AirflowVersion.parse(version, "test")) == []


def test_every_rule_has_a_fixture_that_flags_it() -> None:
    flagged = {item.split()[1] for items in EXPECTED.values() for item in items}
    assert flagged == set(RULES) - {"TS901"}


def test_durable_noop_is_reported_only_below_native_store() -> None:
    assert "45:62 TS406" not in found("mixin.py", NATIVE)
    assert "45:62 TS406" not in found("mixin.py", AirflowVersion(None, "unknown"))


def test_every_finding_says_why_and_shows_before_and_after() -> None:
    for name in EXPECTED:
        for finding in lint_file(FIXTURES / name, LintConfig(), BELOW_NATIVE).findings:
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


def test_readme_rule_table_lists_every_rule_with_its_severity() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    for rule in RULES.values():
        assert f"| `{rule.code}` | {rule.name} | {rule.severity.value} |" in readme, rule.code


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
