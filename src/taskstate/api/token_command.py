"""`taskstate token create`: print a bearer token for the HTTP API, signed with the first key
of `[state_store] taskstate_secret_key`. Whoever holds that secret can mint any token."""

from __future__ import annotations

import time

import click

from taskstate.api.serve import require_server_extra


@click.group()
def token() -> None:
    """Bearer tokens for the HTTP API (taskstate serve, the Airflow plugin, HTTP workers)."""


@token.command()
@click.option("--dag-id", "dag_ids", multiple=True, help="DAG id or glob (repeatable).")
@click.option("--run-id")
@click.option("--task-id")
@click.option("--map-index", type=click.IntRange(min=-1))
@click.option("--try-number", type=click.IntRange(min=0))
@click.option("--asset", "assets", multiple=True, help="Asset name (uri if unnamed); repeatable.")
@click.option("--read-only", is_flag=True, help="GET only.")
@click.option("--admin", is_flag=True, help="Every DAG and asset.")
@click.option("--subject", default="taskstate-cli", show_default=True, help="Who writes.")
@click.option(
    "--expires-in",
    default="24h",
    show_default=True,
    help="Lifetime: 90s, 30m, 1h, 7d, 2w, or never (long-lived worker-pool tokens).",
)
def create(
    dag_ids: tuple[str, ...],
    run_id: str | None,
    task_id: str | None,
    map_index: int | None,
    try_number: int | None,
    assets: tuple[str, ...],
    read_only: bool,
    admin: bool,
    subject: str,
    expires_in: str,
) -> None:
    """Print a token that may touch only what its options name."""
    require_server_extra()
    from taskstate.api.tokens import Claims, SigningKeys, parse_duration

    # An empty value is an unset shell variable, not a name: every server would refuse it.
    for option, values in (("--dag-id", dag_ids), ("--asset", assets)):
        if any(not value.strip() for value in values):
            raise click.UsageError(f"{option} is empty (an unset shell variable?)")
    for option, value in (("--run-id", run_id), ("--task-id", task_id), ("--subject", subject)):
        if value is not None and not value.strip():
            raise click.UsageError(f"{option} is empty (an unset shell variable?)")
    if not (dag_ids or assets or admin):
        raise click.UsageError("name what the token may touch: --dag-id, --asset or --admin")
    if (run_id or task_id or map_index is not None or try_number is not None) and not dag_ids:
        raise click.UsageError("--run-id/--task-id/--map-index/--try-number need --dag-id")
    try:
        lifetime = parse_duration(expires_in)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--expires-in") from None
    keys = SigningKeys.load()
    if keys is None:
        raise click.ClickException(
            "no [state_store] taskstate_secret_key is set (or "
            "AIRFLOW__STATE_STORE__TASKSTATE_SECRET_KEY); the server and this command need "
            "the same key"
        )
    now = time.time()
    claims = Claims(
        subject=subject,
        dag_ids=dag_ids,
        run_id=run_id,
        task_id=task_id,
        map_index=map_index,
        try_number=try_number,
        assets=assets,
        read_only=read_only,
        admin=admin,
        expires_at=None if lifetime is None else now + lifetime,
    )
    click.echo(keys.issue(claims, now))
