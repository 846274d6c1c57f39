"""TS502 (keys with dots or slashes) and TS506 (a job id kept with the default retention)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from taskstate.lint.checks.base import JOB_ID_KEY, Context, shown
from taskstate.lint.checks.store.receivers import TASK, StoreCall
from taskstate.lint.finding import Finding
from taskstate.lint.source import Source, argument, keyword, literal_text

_KEY_METHODS = frozenset({"get", "set", "delete", "aget", "aset", "adelete", "update"})


def check_call(src: Source, ctx: Context, site: StoreCall) -> Iterator[Finding]:
    """TS502 for keys with dots or slashes and TS506 for a job id set on the task store
    with the default retention."""
    if site.method in _KEY_METHODS:
        yield from _dot_or_slash(src, ctx, site.call)
    if site.method in ("set", "aset") and site.kind.store == TASK:
        yield from _job_id_retention(src, ctx, site.call)


def _dot_or_slash(src: Source, ctx: Context, call: ast.Call) -> Iterator[Finding]:
    key = argument(call, 0, "key")
    text = literal_text(src, key)
    if key is None or text is None or not ("." in text or "/" in text):
        return
    fixed = re.sub(r"[./]+", "_", text.replace("{}", "{...}"))
    written = src.segment(key)
    quote = written[0] if written[:1] in ("'", '"') else '"'  # keep the user's quote style
    yield ctx.finding(
        src,
        "TS502",
        key,
        key=src.segment(key),
        before=src.lines_of(call),
        after=(src.lines_with(key, f"{quote}{fixed}{quote}") if "{}" not in text else f'"{fixed}"'),
    )


def _job_id_retention(src: Source, ctx: Context, call: ast.Call) -> Iterator[Finding]:
    key = argument(call, 0, "key")
    text = literal_text(src, key)
    if key is None or text is None or not JOB_ID_KEY.search(text):
        return
    if keyword(call, "retention") is not None or len(call.args) > 2:  # retention is given
        return
    value = argument(call, 1, "value")
    args = f"{src.segment(key)}, {src.segment(value) if value is not None else '...'}"
    yield ctx.finding(
        src,
        "TS506",
        call,
        key=shown(src, key),
        after=ctx.version.never_expire_import()
        + "\n...\n"
        + src.lines_with(call, f"{src.segment(call.func)}({args}, retention=NEVER_EXPIRE)"),
    )
