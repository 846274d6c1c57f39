"""TS4xx: ResumableJobMixin subclasses that lose its guarantee, and `durable` misuse."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

from taskstate.lint.airflow_version import PROVIDER_DURABLE, SDK
from taskstate.lint.checks.base import Context, with_note
from taskstate.lint.finding import Finding
from taskstate.lint.source import Function, Source, is_false, is_true, keyword

_MIXIN = "ResumableJobMixin"
# The blocking path and the deferrable one (taskstate's execute_deferrable).
_THROUGH_THE_MIXIN = ("execute_resumable", "execute_deferrable")


def check(src: Source, ctx: Context) -> Iterator[Finding]:
    """TS4xx findings for one file: `durable` misuse and ResumableJobMixin subclasses that
    lose its guarantee."""
    if "durable" in src.text:
        yield from _durable(src, ctx)
    if "airflow.providers." in src.text:
        yield from _not_durable_providers(src, ctx)
    if _MIXIN not in src.text:
        return
    mixins = _mixin_classes(src)
    if not mixins:
        return
    methods: dict[tuple[str, str], Function] = {}
    for func in src.functions:
        if func.cls is not None and func.cls.name in mixins:
            methods[(func.cls.name, func.name)] = func
    for name in mixins:
        cls = src.classes[name]
        execute = methods.get((name, "execute"))
        if execute is not None and _uses_execute_resumable(execute) and not _returns_it(execute):
            yield ctx.finding(
                src,
                "TS407",
                execute.node,
                cls=name,
                before=src.lines_of(execute.node, limit=6),
                after="return self.execute_resumable(context)",
            )
        if execute is not None and not _uses_execute_resumable(execute):
            yield ctx.finding(
                src,
                "TS401",
                execute.node,
                cls=name,
                before=src.lines_of(execute.node, limit=6),
                after=(
                    "def execute(self, context):\n"
                    "    return self.execute_resumable(context)\n"
                    "# the submit goes to submit_job(), the wait to poll_until_complete()"
                ),
            )
        if not _sets_external_id_key(src, name, mixins):
            yield ctx.finding(
                src,
                "TS402",
                cls,
                cls=name,
                before=src.lines[cls.lineno - 1].strip(),
                after=(
                    f"{src.lines[cls.lineno - 1].strip()}\n"
                    f'    external_id_key = "{_snake(name)}_job_id"  # set once, never rename'
                ),
            )
        submit = methods.get((name, "submit_job"))
        if submit is not None:
            yield from _submit_returns_none(src, ctx, name, submit)
    for call, _func in src.calls:
        yield from _no_retries(src, ctx, call, mixins)


def _mixin_classes(src: Source) -> set[str]:
    """Classes of this file that have ResumableJobMixin among their (in-file) ancestors."""
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, cls in src.classes.items():
            if name in found:
                continue
            for base in cls.bases:
                qual = src.qualname(base)
                if (qual is not None and qual.split(".")[-1] == _MIXIN) or (
                    isinstance(base, ast.Name) and base.id in found
                ):
                    found.add(name)
                    changed = True
                    break
    return found


def _uses_execute_resumable(func: Function) -> bool:
    """True when execute() goes through the mixin, or delegates to a base class's execute().

    Providers call `self.execute_resumable(context)` on their synchronous path and return their
    own value (or defer on another path); that still goes through the mixin, so only an
    execute() that never calls it is reported.
    """
    for call in func.calls:
        callee = call.func
        if isinstance(callee, ast.Attribute) and callee.attr in _THROUGH_THE_MIXIN:
            return True
        if (
            isinstance(callee, ast.Call)
            and isinstance(callee.func, ast.Name)
            and callee.func.id == "super"
        ):
            return True
        if isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Call):
            inner = callee.value.func
            if isinstance(inner, ast.Name) and inner.id == "super":
                return True
    return False


def _returns_it(func: Function) -> bool:
    """True when some `return` hands back execute_resumable's result (or a base's execute),
    directly or through a name (`result = self.execute_resumable(context)` ... `return result`)."""
    names = {
        target.id
        for assign in func.assigns
        if _is_resumable_call(assign.value)
        for target in assign.targets
        if isinstance(target, ast.Name)
    }
    for ret in func.returns:
        for node in ast.walk(ret):
            if _is_resumable_call(node) or (isinstance(node, ast.Name) and node.id in names):
                return True
    return False


def _is_resumable_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in (*_THROUGH_THE_MIXIN, "execute")
    )


def _sets_external_id_key(src: Source, name: str, mixins: set[str]) -> bool:
    """True unless the class and every ancestor are known and none sets the key.

    A class another class of this file inherits from is an abstract base: its subclasses
    are the ones to set the key.
    """
    for other in src.classes.values():
        if any(isinstance(b, ast.Name) and b.id == name for b in other.bases):
            return True
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        cls = src.classes[current]
        for stmt in cls.body:
            targets = (
                stmt.targets
                if isinstance(stmt, ast.Assign)
                else [stmt.target]
                if isinstance(stmt, ast.AnnAssign)
                else []
            )
            if any(isinstance(t, ast.Name) and t.id == "external_id_key" for t in targets):
                return True
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id in src.classes:
                todo.append(base.id)
            elif not _known_root(src, base):
                return True  # a base we cannot see may set it
    return False


def _known_root(src: Source, base: ast.expr) -> bool:
    qual = src.qualname(base)
    return qual is not None and qual.split(".")[-1] in (_MIXIN, "BaseOperator", "object")


def _submit_returns_none(
    src: Source, ctx: Context, cls: str, submit: Function
) -> Iterator[Finding]:
    body = submit.node.body
    for ret in submit.returns:
        if ret.value is None or (isinstance(ret.value, ast.Constant) and ret.value.value is None):
            yield ctx.finding(
                src,
                "TS404",
                ret,
                cls=cls,
                after="return job_id  # the id the job system gave back; never None",
            )
            return
    if not submit.returns and not _is_stub(body):
        yield ctx.finding(
            src,
            "TS404",
            submit.node,
            cls=cls,
            before=src.lines_of(submit.node, limit=6),
            after=(
                "def submit_job(self, context):\n"
                "    return self.hook.submit(...)  # return the job's id"
            ),
        )


def _is_stub(body: list[ast.stmt]) -> bool:
    """`...`, `pass`, a docstring, or ending in `raise`: nothing that falls off the end."""
    last = body[-1]
    if isinstance(last, ast.Raise):
        return True
    return all(
        isinstance(stmt, ast.Pass)
        or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant))
        for stmt in body
    )


def _no_retries(src: Source, ctx: Context, call: ast.Call, mixins: set[str]) -> Iterator[Finding]:
    callee = call.func
    if isinstance(callee, ast.Attribute) and callee.attr == "partial":
        callee = callee.value
    if not (isinstance(callee, ast.Name) and callee.id in mixins):
        return
    retries = keyword(call, "retries")
    if retries is not None and isinstance(retries.value, ast.Constant) and retries.value.value == 0:
        yield ctx.finding(
            src,
            "TS403",
            retries,
            cls=callee.id,
            before=src.excerpt(call, retries),
            after=with_note(
                src.excerpt(call, retries, "retries=3"),
                "or drop the mixin: with no retry it never reconnects",
            ),
        )


def _durable(src: Source, ctx: Context) -> Iterator[Finding]:
    for call, _func in src.calls:
        durable = keyword(call, "durable")
        if durable is not None and is_false(durable.value):
            if not src.comment_near(durable.lineno):
                yield _unexplained(src, ctx, durable)
        elif durable is not None and is_true(durable.value) and ctx.version.native is False:
            qual = src.qualname(call.func)
            if qual is not None and qual.startswith("airflow.providers."):
                yield _durable_noop(src, ctx, call, durable, qual.split(".")[-1])
        default_args = keyword(call, "default_args")
        if default_args is not None:
            yield from _durable_in_dict(src, ctx, src.resolve(default_args.value))


def _durable_noop(
    src: Source, ctx: Context, call: ast.Call, durable: ast.keyword, operator: str
) -> Finding:
    after = (
        "wrap the submit in your own operator with taskstate's mixin:\n"
        f"{ctx.version.mixin_import()}"
    )
    unless = ""
    if ctx.version.provider_durable:  # 3.0-3.2: taskstate can stand in for the 3.3 mixin
        section, option = PROVIDER_DURABLE.split(" ", 1)
        after = f"airflow.cfg, with taskstate installed:\n#   {section}\n#   {option}\n# or {after}"
        unless = f" unless {PROVIDER_DURABLE}"
    return ctx.finding(
        src,
        "TS406",
        durable,
        operator=operator,
        version=ctx.version.label,
        unless=unless,
        before=src.excerpt(call, durable),
        after="# " + after,
    )


def _durable_in_dict(src: Source, ctx: Context, value: ast.expr) -> Iterator[Finding]:
    if not isinstance(value, ast.Dict):
        return
    for key, item in zip(value.keys, value.values, strict=True):
        if (
            isinstance(key, ast.Constant)
            and key.value == "durable"
            and is_false(item)
            and not src.comment_near(key.lineno)
        ):
            yield _unexplained(src, ctx, key)


def _unexplained(src: Source, ctx: Context, node: ast.AST) -> Finding:
    line = src.lines[node.lineno - 1].rstrip()  # type: ignore[attr-defined]
    return ctx.finding(
        src,
        "TS405",
        node,
        before=line.strip(),
        after=line.strip() + "  # why: e.g. the job system dedupes by itself / test DAG",
    )


def _snake(name: str) -> str:
    name = re.sub(r"Operator$", "", name) or name
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


# Provider operators taskstate.providers has crash-safe versions of: qualified name ->
# (taskstate.providers module, apache-airflow-providers-<name>). Kept in step with that package.
_PROVIDERS: dict[str, tuple[str, str]] = {
    "airflow.providers.amazon.aws.operators.athena.AthenaOperator": ("amazon", "amazon"),
    "airflow.providers.amazon.aws.operators.batch.BatchOperator": ("amazon", "amazon"),
    "airflow.providers.amazon.aws.operators.ecs.EcsRunTaskOperator": ("amazon", "amazon"),
    "airflow.providers.dbt.cloud.operators.dbt.DbtCloudRunJobOperator": ("dbt_cloud", "dbt-cloud"),
    "airflow.providers.airbyte.operators.airbyte.AirbyteTriggerSyncOperator": (
        "airbyte",
        "airbyte",
    ),
}
# Settings that take a task out of what TS410 is about: not waiting for the job (nothing for a
# retry to reconnect to), or ECS's own `reattach` (a retry finds the task still running).
# `deferrable` waits too (taskstate.providers covers it); Batch and ECS wait when deferrable
# whatever `wait_for_completion` says.
_EXEMPT = {
    "asynchronous": is_true,
    "wait_for_completion": is_false,
    "wait_for_termination": is_false,
    "reattach": is_true,
}
_SETTINGS = (*_EXEMPT, "deferrable")


def _not_durable_providers(src: Source, ctx: Context) -> Iterator[Finding]:
    later = _set_after_construction(src.tree)
    for call, _func in src.calls:
        qual = src.qualname(call.func)
        if qual not in _PROVIDERS:
            continue
        settings = {kw.arg: kw.value for kw in call.keywords if kw.arg in _SETTINGS}
        settings.update(later.get(id(call), {}))
        deferring = "deferrable" in settings and is_true(settings.pop("deferrable"))
        if deferring:
            settings.pop("wait_for_completion", None)
        if any(_EXEMPT[name](value) for name, value in settings.items()):
            continue
        module, name = _PROVIDERS[qual]
        dist = f"apache-airflow-providers-{name}"
        path, operator = qual.rsplit(".", 1)
        release, on_mixin = _installed_release(dist, path.replace(".", "/") + ".py", operator)
        version = ctx.version
        if on_mixin and (version.parts is None or version.parts >= SDK):
            continue  # upstream's durable path: native on 3.3+, the setting on 3.0-3.2 (TS406)
        where = f"Airflow {version.label}" if version.parts else "any Airflow"
        if release is not None:
            where += f", {dist} {release}"
            if on_mixin:
                where += " (its mixin resumes from Airflow 3.0 on)"
        yield ctx.finding(
            src,
            "TS410",
            call.func,
            operator=operator,
            where=where,
            before=src.lines_of(call, limit=3),
            after=f"from taskstate.providers.{module} import {operator}  # same arguments",
        )


def _set_after_construction(tree: ast.Module) -> dict[int, dict[str, ast.expr]]:
    """`task = Operator(...)` then `task.wait_for_completion = False`: id(call) -> {attr: value}
    for the `_SETTINGS` attributes set on the variable later in the same body."""
    found: dict[int, dict[str, ast.expr]] = {}
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        calls: dict[str, ast.Call] = {}
        for stmt in body:
            if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
                continue
            target = stmt.targets[0]
            if isinstance(target, ast.Name) and isinstance(stmt.value, ast.Call):
                calls[target.id] = stmt.value
            elif (
                isinstance(target, ast.Attribute)
                and target.attr in _SETTINGS
                and isinstance(target.value, ast.Name)
                and target.value.id in calls
            ):
                found.setdefault(id(calls[target.value.id]), {})[target.attr] = stmt.value
    return found


@functools.cache
def _installed_release(dist: str, path: str, operator: str) -> tuple[str | None, bool]:
    """The installed release of `dist` (None if it is not installed) and whether its `operator`
    subclasses ResumableJobMixin. Reads the file; never imports Airflow."""
    try:
        found = metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        return None, False
    try:
        text = Path(str(found.locate_file(path))).read_text()
    except OSError:
        return found.version, False
    bases = re.search(rf"^class {operator}\(([^)]*)\)", text, re.MULTILINE)
    return found.version, bool(bases and _MIXIN in bases.group(1))
