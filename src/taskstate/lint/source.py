"""One parse of a Python file and the facts every check shares, collected in a single walk.

Nothing here imports or executes the file: it is read with `ast` only. Names are resolved
through the file's own imports; a name the file never binds (a snippet that omits its imports)
is taken at face value, and a name the file binds to something else is not ours to judge.
"""

from __future__ import annotations

import ast
import io
import re
import textwrap
from dataclasses import dataclass, field

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef

# Methods whose body runs inside a task at run time (operators and sensors).
_RUNTIME_METHODS = frozenset({"execute", "poke", "execute_complete"})
# Names an Airflow task decorator may carry after its module, e.g. `task`, `task.python`.
_TASK_DECORATORS = frozenset({"task", "asset", "setup", "teardown"})
_AIRFLOW_DECORATOR_MODULES = ("airflow.decorators", "airflow.sdk")


@dataclass
class Function:
    """One function or method in the file, with the calls, assignments, ifs and returns in its
    own body, and whether it runs as a task."""

    node: FunctionNode
    cls: ast.ClassDef | None  # the class when this is a method
    calls: list[ast.Call] = field(default_factory=list)  # not including nested functions
    assigns: list[ast.Assign] = field(default_factory=list)
    ifs: list[ast.If] = field(default_factory=list)
    returns: list[ast.Return] = field(default_factory=list)
    is_task: bool = False  # its body runs as (part of) a task at run time
    task_decorator: ast.expr | None = None  # `@task(...)` when it is a TaskFlow task

    @property
    def name(self) -> str:
        """The function's name."""
        return self.node.name

    def task_keywords(self) -> dict[str, ast.expr]:
        """The keyword arguments of its `@task(...)` decorator, by name."""
        return call_keywords(self.task_decorator)

    def param_names(self) -> list[str]:
        """Names of its positional and keyword parameters, in order (not *args or **kwargs)."""
        args = self.node.args
        return [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]


# a node to visit, the function whose body it is in, and its class when it is a method
_Item = tuple[ast.AST, "Function | None", "ast.ClassDef | None"]


class Source:
    """A parsed file plus the facts the checks look up (imports, functions, calls, mapping)."""

    def __init__(self, path: str, text: str, tree: ast.Module) -> None:
        self.path = path
        self.text = text
        self.tree = tree
        self.lines = [line.rstrip("\r\n") for line in physical_lines(text)]
        self.imports: dict[str, str] = {}  # local name -> qualified name
        self.bound: set[str] = set()  # names the module binds to its own objects
        self.values: dict[str, ast.expr] = {}  # NAME = expr outside functions
        self.functions: list[Function] = []
        self.by_name: dict[str, Function] = {}
        self.classes: dict[str, ast.ClassDef] = {}
        self.calls: list[tuple[ast.Call, Function | None]] = []
        self.expanded: set[str] = set()  # task names used with .expand()/.expand_kwargs()
        self.overridden: set[str] = set()  # task names re-configured with .override()
        self._callables: set[str] = set()  # names passed as python_callable=
        self._line_starts: list[int] | None = None
        self._walk(tree)
        self._classify()

    # --- the walk ------------------------------------------------------------------------------
    # Iterative, not recursive: generated code nests thousands of levels deep (long `a + b + ...`
    # chains), which ast.parse accepts and a recursive walk would not.
    def _walk(self, tree: ast.AST) -> None:
        stack: list[_Item] = [(tree, None, None)]
        while stack:
            node, func, cls = stack.pop()
            children = self._visit(node, func, cls)
            children.reverse()  # pop in source order
            stack.extend(children)

    def _visit(self, node: ast.AST, func: Function | None, cls: ast.ClassDef | None) -> list[_Item]:
        kind = type(node)
        if kind is ast.Call:
            self._call(node, func)  # type: ignore[arg-type]
        elif kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
            return self._function(node, func, cls)  # type: ignore[arg-type]
        elif kind is ast.ClassDef:
            return self._class(node, func)  # type: ignore[arg-type]
        elif kind is ast.Import or kind is ast.ImportFrom:
            self._import(node)  # type: ignore[arg-type]
        elif kind is ast.Assign:
            assert isinstance(node, ast.Assign)
            if func is None:
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.values[target.id] = node.value
                        self.bound.add(target.id)
            else:
                func.assigns.append(node)
        elif func is not None:
            if kind is ast.If:
                func.ifs.append(node)  # type: ignore[arg-type]
            elif kind is ast.Return:
                func.returns.append(node)  # type: ignore[arg-type]
        return [(child, func, None) for child in _children(node)]

    def _class(self, node: ast.ClassDef, func: Function | None) -> list[_Item]:
        if func is None:
            self.classes[node.name] = node
            self.bound.add(node.name)
        items: list[_Item] = [
            (expr, func, None) for expr in (*node.bases, *node.keywords, *node.decorator_list)
        ]
        for stmt in node.body:
            method = isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef)
            items.append((stmt, func, node if method else None))
        return items

    def _function(
        self, node: FunctionNode, outer: Function | None, cls: ast.ClassDef | None
    ) -> list[_Item]:
        if outer is None and cls is None:
            self.bound.add(node.name)
        func = Function(node=node, cls=cls)
        self.functions.append(func)
        if cls is None:
            self.by_name[node.name] = func
        items: list[_Item] = [
            (expr, outer, None)
            for expr in (*node.decorator_list, *node.args.defaults, *node.args.kw_defaults)
            if expr is not None
        ]
        items.extend((stmt, func, None) for stmt in node.body)
        return items

    def _call(self, call: ast.Call, func: Function | None) -> None:
        self.calls.append((call, func))
        if func is not None:
            func.calls.append(call)
        callee = call.func
        if isinstance(callee, ast.Attribute):
            if callee.attr in ("expand", "expand_kwargs"):
                name = _task_name(callee.value)
                if name:
                    self.expanded.add(name)
                mapped_callable = _partial_callable(callee.value)
                if mapped_callable:  # PythonOperator.partial(python_callable=f).expand(...)
                    self.expanded.add(mapped_callable)
            elif callee.attr == "override":
                name = _task_name(callee.value)
                if name:
                    self.overridden.add(name)
        for kw in call.keywords:
            if kw.arg == "python_callable" and isinstance(kw.value, ast.Name):
                self._callables.add(kw.value.id)

    def _import(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self.imports[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    self.imports[head] = head
            return
        if node.level or not node.module:
            for alias in node.names:  # a relative import binds a name of the user's own
                self.bound.add(alias.asname or alias.name)
            return
        for alias in node.names:
            if alias.name != "*":
                self.imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def _classify(self) -> None:
        for func in self.functions:
            for dec in func.node.decorator_list:
                if self.is_task_decorator(dec):
                    func.is_task = True
                    func.task_decorator = dec
            if func.cls is not None and func.name in _RUNTIME_METHODS and func.cls.bases:
                func.is_task = True
            if func.cls is None and func.name in self._callables:
                func.is_task = True

    # --- name resolution -----------------------------------------------------------------------
    def qualname(self, node: ast.expr) -> str | None:
        """`Variable` -> `airflow.models.Variable` through the file's imports; None if unknown."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        head = node.id
        if head in self.imports:
            base = self.imports[head]
        elif head in self.bound:
            return None
        else:
            base = head
        parts.append(base)
        return ".".join(reversed(parts))

    def is_airflow(self, node: ast.expr, name: str) -> bool:
        """True when `node` names Airflow's `name` (e.g. "Variable"), however it was imported."""
        qual = self.qualname(node)
        if qual is None:
            return False
        return qual == name or (qual.startswith("airflow.") and qual.endswith("." + name))

    def decorator_name(self, dec: ast.expr) -> str | None:
        """`task.sensor` for `@task.sensor(...)` from airflow.sdk (or a bare snippet name)."""
        target = dec.func if isinstance(dec, ast.Call) else dec
        qual = self.qualname(target)
        if qual is None:
            return None
        for module in _AIRFLOW_DECORATOR_MODULES:
            if qual.startswith(module + "."):
                return qual[len(module) + 1 :]
        return qual

    def is_task_decorator(self, dec: ast.expr) -> bool:
        """Whether a decorator is an Airflow task decorator (`@task`, `@asset`, `@setup`, ...)."""
        name = self.decorator_name(dec)
        return name is not None and name.split(".")[0] in _TASK_DECORATORS

    def resolve(self, node: ast.expr, depth: int = 4) -> ast.expr:
        """Follow module-level `A = B` aliases to the value they name."""
        while depth and isinstance(node, ast.Name) and node.id in self.values:
            node = self.values[node.id]
            depth -= 1
        return node

    # --- text ----------------------------------------------------------------------------------
    def offset(self, line: int, col: int) -> int:
        """Character offset of an ast (1-based line, UTF-8 byte column) position."""
        if self._line_starts is None:
            starts = [0]
            for text in physical_lines(self.text):
                starts.append(starts[-1] + len(text))
            self._line_starts = starts
        text = self.lines[line - 1] if line - 1 < len(self.lines) else ""
        if not text.isascii():
            col = len(text.encode()[:col].decode(errors="ignore"))
        return self._line_starts[line - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        """Start and end character offsets of a node in the text."""
        start = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return start, end

    def segment(self, node: ast.AST) -> str:
        """The source text of a node."""
        start, end = self.span(node)
        return self.text[start:end]

    def column(self, node: ast.AST) -> int:
        """1-based character column of a node, as editors count it."""
        line: int = node.lineno  # type: ignore[attr-defined]
        return self.offset(line, node.col_offset) - self.offset(line, 0) + 1  # type: ignore[attr-defined]

    def lines_of(self, node: ast.AST, limit: int = 8) -> str:
        """The physical lines a node spans, dedented, cut to `limit` lines."""
        first: int = node.lineno  # type: ignore[attr-defined]
        last: int = node.end_lineno or first  # type: ignore[attr-defined]
        chunk = self.lines[first - 1 : min(last, first + limit - 1)]
        more = ["..."] if last - first + 1 > limit else []
        return textwrap.dedent("\n".join(chunk)).rstrip() + ("\n" + more[0] if more else "")

    def lines_with(self, node: ast.AST, replacement: str) -> str:
        """The lines of `node` with the node's own text replaced: an "after" from user code."""
        first: int = node.lineno  # type: ignore[attr-defined]
        last: int = node.end_lineno or first  # type: ignore[attr-defined]
        line_start = self.offset(first, 0)
        line_end = self.offset(last, 0) + len(self.lines[last - 1])
        start, end = self.span(node)
        text = self.text[line_start:start] + replacement + self.text[end:line_end]
        return textwrap.dedent(text).rstrip()

    def excerpt(self, outer: ast.AST, inner: ast.AST, replacement: str | None = None) -> str:
        """`outer`'s first line, then `inner`'s lines (optionally with `inner` replaced)."""
        body = self.lines_of(inner) if replacement is None else self.lines_with(inner, replacement)
        first: int = outer.lineno  # type: ignore[attr-defined]
        if first == inner.lineno:  # type: ignore[attr-defined]
            return body
        head = self.lines[first - 1].strip()
        gap = "    ...\n" if inner.lineno > first + 1 else ""  # type: ignore[attr-defined]
        return f"{head}\n{gap}    {body.strip()}"

    def comment_near(self, line: int) -> bool:
        """A stated reason: a comment on the line itself, or a comment line just above it."""
        if 1 <= line <= len(self.lines) and _has_reason(self.lines[line - 1]):
            return True
        above = self.lines[line - 2].strip() if line >= 2 else ""
        return above.startswith("#") and _has_reason(above)


def _has_reason(text: str) -> bool:
    """A `#` comment that is more than a noqa directive."""
    if "#" not in text:
        return False
    comment = text[text.index("#") :]
    return bool(re.sub(r"#\s*noqa(:[\sA-Z0-9,]*)?", "", comment, flags=re.I).strip(" #"))


# Fields that never hold a node worth visiting, and nodes with nothing inside worth visiting:
# skipping them halves the walk (a Name alone is a third of a typical tree).
_SKIP_FIELDS = frozenset({"ctx", "op", "ops", "type_comment"})
_LEAVES = (ast.Name, ast.Constant)
_FIELDS: dict[type[ast.AST], tuple[str, ...]] = {}


def _children(node: ast.AST) -> list[ast.AST]:
    """`ast.iter_child_nodes`, minus leaves and operator/context fields."""
    kind = type(node)
    fields = _FIELDS.get(kind)
    if fields is None:
        fields = _FIELDS[kind] = tuple(f for f in kind._fields if f not in _SKIP_FIELDS)
    children: list[ast.AST] = []
    for name in fields:
        value = getattr(node, name, None)
        if isinstance(value, list):
            children.extend(
                item for item in value if isinstance(item, ast.AST) and type(item) not in _LEAVES
            )
        elif isinstance(value, ast.AST) and type(value) not in _LEAVES:
            children.append(value)
    return children


def physical_lines(text: str) -> list[str]:
    """Lines as Python counts them (ends: \\n, \\r\\n, \\r), with their endings.

    str.splitlines() also splits at form feeds and other separators that Python source may
    hold inside a line, which would shift every line number after them.
    """
    return io.StringIO(text, newline="").readlines()


def _partial_callable(node: ast.expr) -> str | None:
    """`f` in `PythonOperator.partial(python_callable=f, ...)`."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "partial"
    ):
        for kw in node.keywords:
            if kw.arg == "python_callable" and isinstance(kw.value, ast.Name):
                return kw.value.id
    return None


def _task_name(node: ast.expr) -> str | None:
    """`load` in `load.expand(...)`, `load.partial(...).expand(...)`, `load.override(...)...`."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        node = node.func.value
    return node.id if isinstance(node, ast.Name) else None


def literal_text(source: Source, node: ast.expr | None) -> str | None:
    """The text a key expression stands for, `{}` marking formatted parts; None if unknown."""
    if node is None:
        return None
    node = source.resolve(node)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                parts.append(value.value)
            else:
                parts.append("{}")
        return "".join(parts)
    return None


def argument(call: ast.Call, position: int, name: str) -> ast.expr | None:
    """The argument passed at `position` or as keyword `name`, if any."""
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    if len(call.args) > position and not isinstance(call.args[position], ast.Starred):
        return call.args[position]
    return None


def call_keywords(node: ast.expr | None) -> dict[str, ast.expr]:
    """The named keyword arguments of a call (`@task(inlets=...)`); {} for anything else."""
    if isinstance(node, ast.Call):
        return {kw.arg: kw.value for kw in node.keywords if kw.arg is not None}
    return {}


def callee_name(call: ast.Call) -> str | None:
    """`f` of `f(...)` or `x.f(...)`; None for other callees."""
    callee = call.func
    if isinstance(callee, ast.Name):
        return callee.id
    if isinstance(callee, ast.Attribute):
        return callee.attr
    return None


def keyword(call: ast.Call, name: str) -> ast.keyword | None:
    """The keyword argument `name` of a call, or None when it is not passed."""
    for kw in call.keywords:
        if kw.arg == name:
            return kw
    return None


def is_true(node: ast.expr | None) -> bool:
    """Whether a node is the literal True."""
    return isinstance(node, ast.Constant) and node.value is True


def is_false(node: ast.expr | None) -> bool:
    """Whether a node is the literal False."""
    return isinstance(node, ast.Constant) and node.value is False
