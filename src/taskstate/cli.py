"""The `taskstate` command: inspect and edit state, clean, export/import, doctor, db, lint."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import io
import json
import os
import sys
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any, TextIO, TypeVar

import click

from taskstate import transfer
from taskstate.errors import DatabaseMissingError, TaskStateError
from taskstate.history import Version
from taskstate.redaction import redact_url
from taskstate.scope import ASSET_PREFIX, AssetScope, TaskScope, task_prefix
from taskstate.settings import shown_options
from taskstate.store import AssetStateStore, StateStore, StoredEntry, TaskStateStore
from taskstate.values import NEVER_EXPIRE
from taskstate.writers import cli_writer, describe

F = TypeVar("F", bound=Callable[..., Any])

# Subcommands that live in their own package and are imported only when used.
_LAZY = {
    "lint": "taskstate.lint.command:lint",
    "migrate-to-airflow": "taskstate.airflow.commands:migrate_to_airflow",
    "variables": "taskstate.airflow.commands:variables",
    "serve": "taskstate.api.serve:serve",
    "token": "taskstate.api.token_command:token",
}


class HelpGroup(click.Group):
    """A group whose command list shows each command's whole first paragraph, wrapped, instead
    of click's 45-character cut (which stopped "Set KEY to VALUE (JSON, e.g." mid-sentence)."""

    group_class: type[click.Group | type] | None = type  # subgroups are HelpGroups too

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List the commands, each with its whole `summary` rather than click's 45-character cut."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, summary(command)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def summary(command: click.Command) -> str:
    """The command's short help, else the first paragraph of its help, on one line."""
    if command.short_help:
        return command.short_help
    text = (command.help or "").split("\f")[0].strip()
    return " ".join(text.split("\n\n")[0].split())


class _Group(HelpGroup):
    group_class = HelpGroup

    def list_commands(self, ctx: click.Context) -> list[str]:
        present = [name for name, target in _LAZY.items() if _importable(target)]
        return sorted([*super().list_commands(ctx), *present])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = _LAZY.get(name)
        if target is not None and _importable(target):
            module, _, attr = target.partition(":")
            command: click.Command = getattr(importlib.import_module(module), attr)
            return command
        return super().get_command(ctx, name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            result = super().invoke(ctx)
            sys.stdout.flush()  # a closed pipe shows here, while we can still end quietly
            return result
        except BrokenPipeError:
            # The reader went away (`taskstate export | head -1`): stop quietly with exit 0,
            # as `cat` does, instead of "Broken pipe" and exit 1.
            _silence_stdout()
            ctx.exit(0)
        except TaskStateError as exc:
            raise click.ClickException(str(exc)) from None
        except OSError as exc:  # a path that cannot be a database, a file that cannot be read
            raise click.ClickException(f"{exc.strerror or exc}: {exc.filename or ''}") from None


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush finds no closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):  # not a real file (tests' runner)
        pass


def _importable(target: str) -> bool:
    try:
        return importlib.util.find_spec(target.partition(":")[0]) is not None
    except ModuleNotFoundError:  # the parent package is absent
        return False


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    package_name="taskstate", prog_name="taskstate", message="%(prog)s %(version)s"
)
@click.option(
    "--url",
    envvar="TASKSTATE_URL",
    help="Backend URL (sqlite:///path.db, postgresql://...). Default: [state_store] settings.",
)
@click.pass_context
def main(ctx: click.Context, url: str | None) -> None:
    """Durable task and asset state for Airflow and plain Python."""
    ctx.obj = _Lazy(url)


class _Lazy:
    """Opens the store only for commands that need it (lint and --help never do)."""

    def __init__(self, url: str | None) -> None:
        self.url = url
        self._store: StateStore | None = None

    def open(self, *, create: bool = False) -> StateStore:
        """`create`: the command writes, so a missing SQLite file may be created; a read of a
        mistyped path is an error instead of a new empty file."""
        if self._store is None:
            self._store = StateStore(self.url, create=create)
        return self._store

    @property
    def store(self) -> StateStore:
        return self.open()


def _store(*, create: bool = False) -> StateStore:
    lazy: _Lazy = click.get_current_context().find_root().obj
    return lazy.open(create=create)


def _console() -> Any:
    from rich.console import Console  # rich is only needed for human output

    console = Console()
    if not console.is_terminal:  # piped or logged: don't squeeze tables into 80 columns
        console.width = 200
    return console


def _print_json(data: Any) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, indent=2))


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "never"
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat(timespec="seconds")


def _parse_json_value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        raise click.BadParameter(
            f"{raw!r} is not JSON; quote text as '\"{raw}\"' or pass --text", param_hint="VALUE"
        ) from None


class _Days(click.FloatRange):
    """Days of retention: a finite number above 0, up to ten thousand years (NaN compares false
    with every bound, so FloatRange alone would let it through). 0 is refused: the key would
    expire as it is written, while `default_retention_days = 0` in config means "never"."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        days = super().convert(value, param, ctx)
        if days != days:
            self.fail(f"{value!r} is not a number of days", param, ctx)
        if days == 0:
            self.fail(
                "0 days would expire the key as it is written; for a key that never expires "
                "pass --never-expire instead",
                param,
                ctx,
            )
        return days


_RETENTION_DAYS = _Days(min=0, max=3_650_000)


# -- scopes ---------------------------------------------------------------------------------


def _task_options(require_all: bool) -> Callable[[F], F]:
    def wrap(fn: F) -> F:
        fn = click.option("--map-index", type=int, default=None, help="Default: -1 (not mapped).")(
            fn
        )
        fn = click.option("--task-id", required=require_all)(fn)
        fn = click.option("--run-id", required=require_all)(fn)
        fn = click.option("--dag-id", required=True)(fn)
        return fn

    return wrap


def _task(
    dag_id: str, run_id: str, task_id: str, map_index: int | None, *, write: bool = False
) -> TaskStateStore:
    """`write`: the command writes (a missing SQLite file may be created, and the rows record
    the person at the command as their writer)."""
    return _store(create=write).task_state(
        TaskScope(dag_id, run_id, task_id, -1 if map_index is None else map_index),
        writer=cli_writer() if write else None,
    )


def _asset_options(fn: F) -> F:
    fn = click.option("--uri", default=None, help="The asset's URI (when it has no name).")(fn)
    fn = click.option("--name", default=None, help="The asset's name.")(fn)
    return fn


def _asset(name: str | None, uri: str | None, *, write: bool = False) -> AssetStateStore:
    if name is None and uri is None:
        raise click.UsageError("give the asset's --name or --uri")
    return _store(create=write).asset_state(
        AssetScope(name=name, uri=uri), writer=cli_writer() if write else None
    )


# -- shared read/write commands ------------------------------------------------------------


def _output_options(fn: F) -> F:
    """`-o/--output table|json|yaml|plain`, as Airflow's CLI lists things; `--json` is short
    for `-o json`."""
    fn = click.option("--json", "as_json", is_flag=True, help="Same as -o json.")(fn)
    fn = click.option(
        "-o",
        "--output",
        type=click.Choice(["table", "json", "yaml", "plain"]),
        default="table",
        show_default=True,
        help="table for people; json or yaml with every field; plain: aligned columns without "
        "borders, nothing cut (for grep and awk).",
    )(fn)
    return fn


def _show_rows(rows: list[dict[str, Any]], output: str, as_json: bool, columns: list[str]) -> None:
    if as_json or output == "json":
        _print_json(rows)
    elif output == "yaml":
        _print_yaml(rows)
    elif output == "plain":
        cells = [columns, *([_cell(row, c) for c in columns] for row in rows)]
        widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
        for line in cells:
            click.echo("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
    else:
        from rich.table import Table

        table = Table()
        for column in columns:  # fold, never cut: a run id must stay whole in 80 columns
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*(_cell(row, c) for c in columns))
        _console().print(table)
        if not rows:
            click.echo("(no keys)")


def _print_yaml(data: Any) -> None:
    try:
        import yaml  # PyYAML: not a dependency of taskstate, but in every Airflow environment
    except ModuleNotFoundError:
        raise click.ClickException(
            "-o yaml needs PyYAML, which is not installed here: pip install pyyaml (or use -o json)"
        ) from None
    click.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), nl=False)


def _cell(row: dict[str, Any], column: str) -> str:
    value = row.get(column)
    if column == "updated_by":  # a table shows the writer in a few words; json/yaml in full
        return describe(value)
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _get(acc: TaskStateStore | AssetStateStore, key: str, as_json: bool) -> None:
    missing = object()
    value = acc.get(key, missing)
    if value is missing:
        raise click.ClickException(f"no key {key!r} in {acc.scope}")
    click.echo(json.dumps(value, ensure_ascii=False, indent=2 if as_json else None))


@main.group()
def task() -> None:
    """Task instance state (scope: --dag-id --run-id --task-id [--map-index])."""


@task.command("list")
@_task_options(require_all=False)
@_output_options
def task_list(
    dag_id: str,
    run_id: str | None,
    task_id: str | None,
    map_index: int | None,
    output: str,
    as_json: bool,
) -> None:
    """List keys under a DAG, run, task or one map index (expired keys are not shown)."""
    if map_index is not None:
        if run_id is None or task_id is None:
            raise click.UsageError("--map-index needs --run-id and --task-id")
        prefix = TaskScope(dag_id, run_id, task_id, map_index).namespace
    else:
        prefix = task_prefix(dag_id, run_id, task_id)
    rows = [
        {
            "dag_id": scope.dag_id,
            "run_id": scope.run_id,
            "task_id": scope.task_id,
            "map_index": scope.map_index,
            **_entry_row(entry),
        }
        for scope, entry in _store().entries(prefix)
        if isinstance(scope, TaskScope) and (map_index is None or scope.namespace == prefix)
    ]
    _show_rows(
        rows,
        output,
        as_json,
        [
            "run_id",
            "task_id",
            "map_index",
            "key",
            "value",
            "expires_at",
            "updated_at",
            "updated_by",
        ],
    )


def _entry_row(entry: StoredEntry) -> dict[str, Any]:
    return {
        "key": entry.key,
        "value": entry.value,
        "expires_at": _when(entry.expires_at),
        "updated_at": _when(entry.updated_at),
        "updated_by": entry.updated_by,
    }


@task.command("get")
@click.argument("key")
@_task_options(require_all=True)
@click.option("--json", "as_json", is_flag=True, help="Pretty-printed JSON.")
def task_get(
    key: str, dag_id: str, run_id: str, task_id: str, map_index: int | None, as_json: bool
) -> None:
    """Print KEY's value as JSON (exit 1 when absent or expired)."""
    _get(_task(dag_id, run_id, task_id, map_index), key, as_json)


@task.command("set")
@click.argument("key")
@click.argument("value")
@_task_options(require_all=True)
@click.option("--text", is_flag=True, help="Store VALUE as a string instead of parsing JSON.")
@click.option(
    "--retention-days",
    type=_RETENTION_DAYS,
    default=None,
    help="Default: [state_store] default_retention_days.",
)
@click.option("--never-expire", is_flag=True, help="Keep the key regardless of retention.")
def task_set(
    key: str,
    value: str,
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: int | None,
    text: bool,
    retention_days: float | None,
    never_expire: bool,
) -> None:
    """Set KEY to VALUE, given as JSON: 42, '"text"', '{"a": 1}' (or text with --text)."""
    if never_expire and retention_days is not None:
        raise click.UsageError("--never-expire and --retention-days exclude each other")
    retention = (
        NEVER_EXPIRE
        if never_expire
        else (None if retention_days is None else timedelta(days=retention_days))
    )
    parsed = value if text else _parse_json_value(value)
    _task(dag_id, run_id, task_id, map_index, write=True).set(key, parsed, retention=retention)


@task.command("delete")
@click.argument("key")
@_task_options(require_all=True)
def task_delete(key: str, dag_id: str, run_id: str, task_id: str, map_index: int | None) -> None:
    """Delete KEY (no error when absent)."""
    _task(dag_id, run_id, task_id, map_index).delete(key)


@task.command("clear")
@_task_options(require_all=True)
@click.option("--all-map-indices", is_flag=True, help="Every map index of the task in the run.")
def task_clear(
    dag_id: str, run_id: str, task_id: str, map_index: int | None, all_map_indices: bool
) -> None:
    """Delete every key of a task instance (or, with --all-map-indices, of every index)."""
    if all_map_indices and map_index is not None:
        raise click.UsageError("--all-map-indices and --map-index exclude each other")
    index = None if all_map_indices else (-1 if map_index is None else map_index)
    n = _store().clear_task(dag_id, run_id, task_id, map_index=index, writer=cli_writer())
    where = "all map indices of " if all_map_indices else ""
    click.echo(f"deleted {n} keys of {where}{dag_id}.{task_id} in {run_id}")


# -- history (docs/history.md) -----------------------------------------------------------------

_HISTORY_COLUMNS = ["version", "op", "updated_at", "updated_by", "expires_at", "value"]


def _version_row(version: Version) -> dict[str, Any]:
    expires = version.expires_at
    return {
        "version": version.version,
        "op": version.op,
        "updated_at": version.updated_at.isoformat(timespec="seconds"),
        "updated_by": version.updated_by,
        "expires_at": "never" if expires is None else expires.isoformat(timespec="seconds"),
        "value": version.value,
    }


def _history(
    acc: TaskStateStore | AssetStateStore, key: str, limit: int | None, output: str, as_json: bool
) -> None:
    rows = [_version_row(version) for version in acc.history(key, limit)]
    _show_rows(rows, output, as_json, _HISTORY_COLUMNS)


def _restored(acc: TaskStateStore | AssetStateStore, key: str, version: int) -> None:
    new = acc.restore(key, version)
    what = "deleted it" if new.value is None else "as version " + str(new.version)
    click.echo(f"restored {key!r} in {acc.scope} to version {version}: {what}")


def _as_of(raw: str) -> datetime:
    try:
        when = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(
            f"not an ISO 8601 instant: {raw!r}", param_hint="--as-of"
        ) from None
    if when.tzinfo is None:
        raise click.BadParameter(
            f"{raw!r} has no time zone; add one, e.g. {raw}+00:00", param_hint="--as-of"
        )
    return when


_LIMIT = click.option("--limit", type=click.IntRange(min=0), default=None, help="At most N.")


@task.command("history")
@click.argument("key")
@_task_options(require_all=True)
@_LIMIT
@_output_options
def task_history(
    key: str,
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: int | None,
    limit: int | None,
    output: str,
    as_json: bool,
) -> None:
    """KEY's kept versions, newest first: who, when, which operation, the value."""
    _history(_task(dag_id, run_id, task_id, map_index), key, limit, output, as_json)


@task.command("restore")
@click.argument("key", required=False)
@_task_options(require_all=True)
@click.option("--version", "version", type=int, default=None, help="KEY's version to put back.")
@click.option(
    "--as-of",
    default=None,
    help="Without KEY: every key of the task instance (all map indices unless --map-index) "
    "as it was at this ISO 8601 instant; the undo of a clear.",
)
def task_restore(
    key: str | None,
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: int | None,
    version: int | None,
    as_of: str | None,
) -> None:
    """Put back KEY's --version N, or (no KEY) the task instance's state --as-of an instant."""
    if key is not None:
        if version is None or as_of is not None:
            raise click.UsageError("with KEY, give --version N (--as-of restores without KEY)")
        _restored(_task(dag_id, run_id, task_id, map_index, write=True), key, version)
        return
    if as_of is None or version is not None:
        raise click.UsageError("without KEY, give --as-of ISO (--version needs a KEY)")
    n = _store(create=True).restore_task(
        dag_id, run_id, task_id, as_of=_as_of(as_of), map_index=map_index, writer=cli_writer()
    )
    click.echo(f"restored {n} keys of {dag_id}.{task_id} in {run_id} as of {as_of}")


@main.group()
def asset() -> None:
    """Asset state (scope: --name or --uri). Asset state never expires."""


@asset.command("list")
@_asset_options
@_output_options
def asset_list(name: str | None, uri: str | None, output: str, as_json: bool) -> None:
    """List the keys of one asset, or of every asset when none is named."""
    prefix = ASSET_PREFIX if name is None and uri is None else _asset(name, uri).scope.namespace
    rows = [
        {"asset": scope.identity, **_entry_row(entry)}
        for scope, entry in _store().entries(prefix)
        if isinstance(scope, AssetScope) and (prefix == ASSET_PREFIX or scope.namespace == prefix)
    ]
    _show_rows(rows, output, as_json, ["asset", "key", "value", "updated_at", "updated_by"])


@asset.command("get")
@click.argument("key")
@_asset_options
@click.option("--json", "as_json", is_flag=True, help="Pretty-printed JSON.")
def asset_get(key: str, name: str | None, uri: str | None, as_json: bool) -> None:
    """Print KEY's value as JSON (exit 1 when absent)."""
    _get(_asset(name, uri), key, as_json)


@asset.command("set")
@click.argument("key")
@click.argument("value")
@_asset_options
@click.option("--text", is_flag=True, help="Store VALUE as a string instead of parsing JSON.")
def asset_set(key: str, value: str, name: str | None, uri: str | None, text: bool) -> None:
    """Set KEY to VALUE (JSON)."""
    _asset(name, uri, write=True).set(key, value if text else _parse_json_value(value))


@asset.command("delete")
@click.argument("key")
@_asset_options
def asset_delete(key: str, name: str | None, uri: str | None) -> None:
    """Delete KEY (no error when absent)."""
    _asset(name, uri).delete(key)


@asset.command("clear")
@_asset_options
def asset_clear(name: str | None, uri: str | None) -> None:
    """Delete every key of the asset."""
    _asset(name, uri).clear()


@asset.command("history")
@click.argument("key")
@_asset_options
@_LIMIT
@_output_options
def asset_history(
    key: str, name: str | None, uri: str | None, limit: int | None, output: str, as_json: bool
) -> None:
    """KEY's kept versions, newest first."""
    _history(_asset(name, uri), key, limit, output, as_json)


@asset.command("restore")
@click.argument("key")
@_asset_options
@click.option("--version", "version", type=int, required=True, help="The version to put back.")
def asset_restore(key: str, name: str | None, uri: str | None, version: int) -> None:
    """Put back KEY's version N (as a new version)."""
    _restored(_asset(name, uri, write=True), key, version)


# -- maintenance ----------------------------------------------------------------------------


@main.command()
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@click.option(
    "--batch-size",
    type=click.IntRange(min=0),
    default=None,
    help="Rows per batch. Default: [state_store] state_cleanup_batch_size (0 = one).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable summary.")
@click.option(
    "--airflow-offload",
    is_flag=True,
    help="Instead: Airflow 3.3+'s expired rows, then the unreferenced objects of "
    "[workers] state_store_backend = taskstate.airflow.ObjectStorageStateBackend.",
)
def clean(dry_run: bool, batch_size: int | None, as_json: bool, airflow_offload: bool) -> None:
    """Delete expired task state (asset state never expires)."""
    if airflow_offload:
        from taskstate.airflow.commands import clean_airflow_offload

        clean_airflow_offload(dry_run=dry_run, as_json=as_json)
        return
    from rich.progress import Progress

    with Progress(transient=True, disable=as_json or dry_run) as progress:
        bar = progress.add_task("deleting expired task state", total=None)
        result = _store().cleanup(
            batch_size=batch_size,
            dry_run=dry_run,
            on_batch=lambda n: progress.update(bar, advance=n),
        )
    if as_json:
        _print_json(result.__dict__)
    elif dry_run:
        click.echo(f"would delete {result.expired} expired task keys (dry run)")
    else:
        click.echo(
            f"deleted {result.deleted} expired task keys in {result.batches} batch(es), "
            f"{result.seconds:.2f}s; longest batch {result.longest_batch_s * 1000:.1f} ms"
        )
    if result.versions_pruned and not as_json:
        click.echo(f"pruned {result.versions_pruned} history versions")
    if result.write_ids_forgotten and not as_json:
        click.echo(f"forgot {result.write_ids_forgotten} write ids past the ledger's horizon")
    if result.offloaded_orphans and not as_json:
        verb = "would remove" if dry_run else "removed"
        click.echo(f"{verb} {result.offloaded_orphans} orphaned offloaded objects")


@main.command("export")
@click.argument("output", type=click.File("w", encoding="utf-8"), default="-")
@click.option("--dag-id", default=None, help="Only this DAG's task state.")
@click.option(
    "--with-history",
    is_flag=True,
    help="Also every kept version of every key (deleted keys' too); import restores them.",
)
def export_cmd(output: TextIO, dag_id: str | None, with_history: bool) -> None:
    """Write all state (or one DAG's) as JSON lines to OUTPUT (default: stdout)."""
    store, prefix = _store(), task_prefix(dag_id) if dag_id else ""
    counts = {}
    parts = [("keys", transfer.export_lines)]
    if with_history:
        parts.append(("versions", transfer.version_lines))
    for what, lines in parts:
        counts[what] = 0
        for line in lines(store, prefix):
            output.write(line + "\n")
            counts[what] += 1
    click.echo("exported " + ", ".join(f"{n} {what}" for what, n in counts.items()), err=True)


@main.command("import")
@click.argument("source", type=click.File("r", encoding="utf-8"), default="-")
@click.option(
    "--keep-existing",
    is_flag=True,
    help="Keep keys that already exist (default: the file's value replaces them).",
)
def import_cmd(source: TextIO, keep_existing: bool) -> None:
    """Read JSON lines from `taskstate export`: all lines are written, or none."""
    result = transfer.import_lines(_store(create=True), source, replace=not keep_existing)
    click.echo(
        f"imported {result.written} keys; skipped {result.skipped_expired} already expired"
        + (f"; kept {result.kept_existing} existing" if keep_existing else "")
        + (f"; {result.versions} history versions" if result.versions else "")
    )


@main.group()
def db() -> None:
    """Schema management (versioned, forward-only migrations)."""


@db.command("migrate")
def db_migrate() -> None:
    """Create or upgrade the backend's tables."""
    store = _store(create=True)
    applied = store.migrate()
    status = store.schema_status()
    click.echo(
        f"{store.describe()}: "
        + (
            f"applied {', '.join(map(str, applied))}; now at version {status.current}"
            if applied
            else f"already at version {status.current}"
        )
    )


@db.command("check")
def db_check() -> None:
    """Exit 1 unless the schema is at the version this taskstate needs."""
    store = _store()
    status = store.schema_status()
    if not status.up_to_date:
        raise click.ClickException(f"{store.describe()}: {status.describe()}")
    click.echo(f"{store.describe()}: {status.describe()}")


@main.command()
@_output_options
def doctor(output: str, as_json: bool) -> None:
    """Settings in force and where each came from, backend reachability, Airflow, and which
    store is active. Exit 1 when a check fails."""
    checks = list(_doctor_checks())
    if as_json or output != "table":
        _show_rows(checks, output, as_json, ["check", "status", "detail"])
    else:
        from rich.table import Table
        from rich.text import Text

        table = Table("check", "status", "detail")
        colour = {"ok": "green", "warn": "yellow", "fail": "red"}
        for check in checks:  # Text, not markup: "[state_store] ..." must print as written
            status = check["status"]
            table.add_row(
                Text(check["check"]), Text(status, style=colour[status]), Text(check["detail"])
            )
        _console().print(table)
    if any(check["status"] == "fail" for check in checks):
        sys.exit(1)


def _doctor_checks() -> Iterator[dict[str, str]]:
    """Each option under its airflow.cfg name with its source (a credential only as set or
    not), then the backend, then Airflow's checks."""
    failed = False
    for shown in shown_options():
        if shown.error is not None:
            failed = True
            yield {"check": shown.label, "status": "fail", "detail": shown.error}
            continue
        detail = shown.value or "(not set)"
        if shown.source == "default":
            detail += " (default)" if shown.value else ""
        elif shown.source:
            detail += f" (from {shown.source})"
        row = {"check": shown.label, "status": "ok", "detail": detail}
        yield {**row, "value": shown.value, "source": shown.source}
    if failed:
        return
    for check, status, detail in (*_backend_check(), *_airflow_checks()):
        yield {"check": check, "status": status, "detail": detail}


def _backend_check() -> Iterator[tuple[str, str, str]]:
    lazy: _Lazy = click.get_current_context().obj
    try:
        store = lazy.store
        status = store.schema_status()
        state = "ok" if status.up_to_date else "warn" if status.newer else "fail"
        yield "backend", state, f"{redact_url(store.describe())}: {status.describe()}"
    except DatabaseMissingError as exc:  # a fresh install: the first write creates it
        yield "backend", "warn", str(exc)
    except Exception as exc:  # doctor reports every failure instead of stopping at one
        yield "backend", "fail", f"{type(exc).__name__}: {exc}"


def _airflow_checks() -> Iterator[tuple[str, str, str]]:
    if _importable("taskstate.airflow.doctor"):
        report = importlib.import_module("taskstate.airflow.doctor").report
        yield from report()
        return
    for dist in ("apache-airflow-core", "apache-airflow"):
        try:
            yield "airflow", "ok", f"{dist} {importlib.metadata.version(dist)}"
            return
        except importlib.metadata.PackageNotFoundError:
            continue
    yield "airflow", "ok", "not installed: plain-Python use"
