"""The Airflow 3.3+ upgrade commands (`taskstate migrate-to-airflow`, `taskstate variables`),
imported by `taskstate`'s CLI only when one of them runs."""

from __future__ import annotations

import json
from typing import Any

import click

from taskstate.airflow.versions import airflow_version, native_store_available
from taskstate.cli import HelpGroup
from taskstate.store import StateStore


def _store(*, create: bool = False) -> StateStore:
    """The `--url` store; `create` for a command that writes into it (see taskstate.cli)."""
    store: StateStore = click.get_current_context().find_root().obj.open(create=create)
    return store


def _require_native() -> None:
    if not native_store_available():
        raise click.ClickException(
            f"this command writes into Airflow 3.3+'s own state store, but the Airflow here is "
            f"{airflow_version() or 'not installed'}; run it where Airflow 3.3+ is installed "
            "and `airflow db migrate` has run"
        )


@click.command("migrate-to-airflow")
@click.option("--dry-run", is_flag=True, help="Check and count everything; write nothing.")
@click.option("--dag-id", "dag_ids", multiple=True, help="Only this DAG's task state (repeatable).")
@click.option(
    "--include-assets/--no-assets", default=True, show_default=True, help="Asset state too."
)
@click.option(
    "--verify", is_flag=True, help="Then compare both stores key by key (exit 1 on a difference)."
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable summary.")
def migrate_to_airflow(
    dry_run: bool, dag_ids: tuple[str, ...], include_assets: bool, verify: bool, as_json: bool
) -> None:
    """Copy taskstate's task and asset state into Airflow 3.3+'s own store.

    Safe to interrupt and rerun: keys already copied are left alone, and a key written in
    Airflow's store since the upgrade is never overwritten (reported as a conflict).
    """
    from rich.progress import Progress

    from taskstate.airflow import migrate

    _require_native()
    store = _store()
    airflow = migrate.AirflowStore()
    prefixes = migrate.scope_prefixes(dag_ids, include_assets)
    total = migrate.total_keys(store, prefixes)
    with Progress(transient=True, disable=as_json) as progress:
        bar = progress.add_task("dry run" if dry_run else "copying", total=total)
        report = migrate.migrate(
            store,
            airflow,
            prefixes,
            dry_run=dry_run,
            on_key=lambda: progress.advance(bar),
        )
        if verify:
            check = progress.add_task("verifying", total=total)
            report.mismatches = migrate.verify(
                store,
                airflow,
                prefixes,
                on_key=lambda: progress.advance(check),
            )
    if as_json:
        click.echo(json.dumps(report.as_json(), ensure_ascii=False, indent=2))
    else:
        _print_report(report, dry_run=dry_run, verify=verify)
    if report.mismatches:
        raise SystemExit(1)


def _print_report(report: Any, *, dry_run: bool, verify: bool) -> None:
    from taskstate.airflow import migrate

    verb = "would copy" if dry_run else "copied"
    counts = report.counts
    click.echo(
        f"{verb} {counts[migrate.COPIED]} keys; {counts[migrate.UNCHANGED]} already in Airflow's "
        f"store; {counts[migrate.CONFLICT]} conflicts (kept Airflow's); skipped "
        f"{counts[migrate.NO_RUN]} (DAG run gone), {counts[migrate.NO_TI]} (task instance gone), "
        f"{counts[migrate.NO_ASSET]} (no active asset)"
    )
    for line in report.notes:
        click.echo(f"  {line}")
    # Airflow's store keeps one value per key: history (docs/history.md) stays in taskstate.
    click.echo(
        f"{verb} the current values only: Airflow's store keeps no history (and its writer "
        "record no try number); taskstate's history stays readable here (taskstate task "
        "history ...)"
    )
    if report.intents:
        click.echo(
            f"{report.intents} ResumableJobMixin intent rows copied: taskstate's mixin keeps "
            "using them on Airflow 3.3; Airflow's native mixin ignores them"
        )
    for line in report.lost_submissions:
        click.echo(
            f"  intent without a job id (a try died between submitting and saving it): {line}; "
            "Airflow's native mixin would submit that job again, taskstate's recovers it"
        )
    for line in report.oversize:
        click.echo(f"  oversize: {line}")
    if verify:
        if report.mismatches:
            click.echo(f"verify: {len(report.mismatches)} differences")
            for line in report.mismatches:
                click.echo(f"  {line}")
        else:
            click.echo("verify: every key is the same in both stores")


def clean_airflow_offload(*, dry_run: bool, as_json: bool) -> None:
    """`taskstate clean --airflow-offload` (see taskstate.airflow.objectstore)."""
    from taskstate.airflow.objectstore import clean_airflow_offload as sweep

    _require_native()
    result = sweep(dry_run=dry_run)
    if as_json:
        click.echo(json.dumps(result.__dict__))
        return
    if not dry_run:
        click.echo("deleted Airflow's expired task state rows ([state_store] backend cleanup)")
    verb = "would remove" if dry_run else "removed"
    click.echo(
        f"{verb} {result.removed} of {result.objects} offloaded objects (no live row references "
        f"them); kept {result.kept_young} unreferenced objects younger than the grace period "
        "(a write may be in flight)"
    )


@click.group(cls=HelpGroup)
def variables() -> None:
    """Move state out of Airflow Variables."""


@variables.command("migrate")
@click.option("--variable", "variable_key", required=True, help="The Airflow Variable's key.")
@click.option("--to-asset", default=None, help="Target: this asset's state (its name, or URI).")
@click.option("--dag-id", default=None, help="Target: this task instance's state ...")
@click.option("--run-id", default=None)
@click.option("--task-id", default=None)
@click.option("--map-index", type=int, default=-1, show_default=True)
@click.option("--key", required=True, help="The state key to write.")
@click.option("--text", is_flag=True, help="Store the Variable's text as a string, not as JSON.")
@click.option(
    "--delete-variable", is_flag=True, help="Delete the Variable once the state holds it."
)
@click.option("--dry-run", is_flag=True, help="Check and show; write and delete nothing.")
def variables_migrate(
    variable_key: str,
    to_asset: str | None,
    dag_id: str | None,
    run_id: str | None,
    task_id: str | None,
    map_index: int,
    key: str,
    text: bool,
    delete_variable: bool,
    dry_run: bool,
) -> None:
    """Move a watermark or job id held in an Airflow Variable into asset or task state.

    Writes into the store in charge: Airflow's own on 3.3+ (unless [state_store]
    taskstate_mode = taskstate), taskstate's before. Then prints the DAG change to make.
    """
    from taskstate.airflow import variables as moves

    # Usage errors first: they need no Airflow to report.
    task_fields = (dag_id, run_id, task_id)
    if (to_asset is None) == all(f is None for f in task_fields):
        raise click.UsageError("give either --to-asset, or --dag-id --run-id --task-id")
    if to_asset is None and any(f is None for f in task_fields):
        raise click.UsageError("a task target needs all of --dag-id, --run-id and --task-id")
    if airflow_version() is None:
        raise click.ClickException(
            "this command reads an Airflow Variable, but Airflow is not installed here; run it "
            "where Airflow and its metadata database are reachable (e.g. on the scheduler)"
        )
    target = moves.target(to_asset, dag_id, run_id, task_id, map_index)
    raw = moves.read_variable(variable_key)
    value = moves.state_value(variable_key, raw, as_text=text)
    destination = moves.destination(lambda: _store(create=True))
    where = destination.describe(target, key)
    current = destination.get(target, key)
    if current is not None and not moves.same(current, value):
        raise click.ClickException(
            f"{where} already holds {json.dumps(current)[:200]}; it differs from Variable "
            f"{variable_key!r}. Delete that key first if the Variable's value should win"
        )
    if dry_run:
        click.echo(f"would write {json.dumps(value)[:200]} to {where} (dry run)")
    else:
        destination.set(target, key, value)
        click.echo(f"wrote Variable {variable_key!r} to {where}")
        if delete_variable:
            moves.delete_variable(variable_key)
            click.echo(f"deleted Variable {variable_key!r}")
    click.echo("\nChange the DAG to read and write the state instead of the Variable:\n")
    click.echo(moves.after(target, key, variable_key))
