"""TS410 reads the installed provider release: it names the release in the finding, and it is
silent where that release's class is on `ResumableJobMixin` and the Airflow version resumes it
(3.3 natively, 3.0-3.2 through `taskstate_provider_durable`). The release is a real installed
distribution (dist-info + module file in a directory on `sys.path`), which the rule reads
without importing it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from taskstate.lint import AirflowVersion, LintConfig, lint_source
from taskstate.lint.checks import mixin

DAG = """
from airflow.providers.amazon.aws.operators.athena import AthenaOperator
AthenaOperator(task_id="q", query="SELECT 1", output_location="s3://r/")
"""
OPERATOR = "airflow/providers/amazon/aws/operators/athena.py"


@pytest.fixture
def installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[str, str], None]]:
    """`install(release, bases)`: apache-airflow-providers-amazon `release` installed, its
    `AthenaOperator` defined on `bases`."""

    def install(release: str, bases: str) -> None:
        site = tmp_path / release
        info = site / f"apache_airflow_providers_amazon-{release}.dist-info"
        info.mkdir(parents=True)
        name = "apache-airflow-providers-amazon"
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {release}\n")
        module = site / OPERATOR
        module.parent.mkdir(parents=True)
        module.write_text(f"class AthenaOperator({bases}):\n    pass\n")
        monkeypatch.syspath_prepend(str(site))
        mixin._installed_release.cache_clear()

    yield install
    mixin._installed_release.cache_clear()


def findings(version: str) -> list[str]:
    result = lint_source(DAG, "dag.py", LintConfig(), AirflowVersion.parse(version, "test"))
    return [f.message for f in result.findings if f.code == "TS410"]


def test_a_release_without_the_mixin_is_named_on_every_version(
    installed: Callable[[str, str], None],
) -> None:
    installed("9.39.0", "AwsBaseOperator[AthenaHook]")
    for version in ("2.10", "3.2", "3.3"):
        (message,) = findings(version)
        assert f"Airflow {version}, apache-airflow-providers-amazon 9.39.0)" in message, message


def test_a_release_on_the_mixin_is_flagged_only_where_nothing_resumes_it(
    installed: Callable[[str, str], None],
) -> None:
    installed("9.99.0", "AwsBaseOperator[AthenaHook], ResumableJobMixin")
    assert findings("3.3") == []  # Airflow's own mixin
    assert findings("3.0") == []  # taskstate_provider_durable (TS406 says how to turn it on)
    (message,) = findings("2.11")
    assert "apache-airflow-providers-amazon 9.99.0 (its mixin resumes from Airflow 3.0 on)" in (
        message
    )
