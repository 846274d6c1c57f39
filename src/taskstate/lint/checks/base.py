"""What every check receives, and the one way a check turns a rule row into a finding."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from taskstate.lint.airflow_version import AirflowVersion
from taskstate.lint.finding import Finding, Fix
from taskstate.lint.rules import RULES
from taskstate.lint.source import Function, Source

# Key names that say "this is the id of a submitted job" or "this is progress of one task".
# Kept narrow: an error rule rests on them, and ids of long-lived things (a cluster, an app, a
# pipeline definition) are the shared configuration Variables are for.
JOB_ID_KEY = re.compile(
    r"(^|[_\-.])(job|run|batch|query|execution|statement|submission|operation)[_\-]?"
    r"(id|handle)s?($|[_\-.])|^(job|run)id$",
    re.IGNORECASE,
)
PROGRESS_KEY = re.compile(
    r"cursor|(?<!utc_)(?<!tz_)(?<!timezone_)offset|checkpoint|bookmark|progress"
    r"|page_?token|next_?token|continuation|last_?id|resume_?(token|from|point|position)",
    re.IGNORECASE,
)
WATERMARK_KEY = re.compile(
    r"watermark|high_?water|last_?(processed|run|success|load|loaded|update|updated|sync|synced"
    r"|seen|modified|fetch|fetched|ingest|ingested|extract|extracted|read|export|exported)"
    r"|(processed|loaded|synced|exported)_(at|until|up_?to|through)|_since$|^since_"
    r"|last_\w*(date|time|timestamp)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Context:
    """What every check is given besides the file: the target Airflow version."""

    version: AirflowVersion

    def finding(
        self,
        src: Source,
        code: str,
        node: ast.AST,
        *,
        before: str | None = None,
        after: str = "",
        fix: Fix | None = None,
        **facts: str,
    ) -> Finding:
        """A finding of rule `code` at `node`, its message filled in from `facts` and its reason
        ending with the version's advice; `before` defaults to the node's source lines."""
        rule = RULES[code]
        advice = self.version.advice(rule.advice)
        why = f"{rule.why} {advice}" if advice else rule.why
        return Finding(
            code=code,
            path=src.path,
            line=node.lineno,  # type: ignore[attr-defined]
            col=src.column(node),
            message=rule.message.format(**facts),
            why=why,
            before=src.lines_of(node) if before is None else before,
            after=after,
            fix=fix,
        )


def store_preamble(func: Function, store: str) -> str:
    """How the "after" snippet gets hold of a store inside this function, in its own style."""
    if store in func.param_names():
        return ""
    kwarg = func.node.args.kwarg
    if func.cls is not None:
        params = func.param_names()
        ctx = params[1] if len(params) > 1 else "context"
        return f'{store} = {ctx}["{store}"]\n'
    if kwarg is not None:
        return f'{store} = {kwarg.arg}["{store}"]\n'
    return f"# add `{store}=None` to {func.name}()'s parameters\n"


def with_note(code: str, note: str) -> str:
    """Append `# note` to a one-line snippet, or put it above when the line has a comment."""
    last = code.splitlines()[-1] if code else ""
    if "#" in last:
        return f"# {note}\n{code}"
    return f"{code}  # {note}"


def shown(src: Source, node: ast.expr | None) -> str:
    """A key as the user wrote it, for messages."""
    return src.segment(node) if node is not None else "(no key)"
