"""The layering contract (docs/architecture.md) places every module of src/taskstate;
scripts/test.sh runs `lint-imports`, which checks the imports against it."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "taskstate"


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


def _top_level_modules() -> set[str]:
    found = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    found |= {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    return found


def test_every_module_is_in_a_layer_or_the_lint_contract() -> None:
    contracts = {c["id"]: c for c in _config()["contracts"]}
    placed = {name for layer in contracts["layers"]["layers"] for name in re.split(r"[:|]", layer)}
    placed = {name.strip() for name in placed}
    assert placed | {"lint"} == _top_level_modules()
    forbidden = {
        m.removeprefix("taskstate.") for m in contracts["lint-independent"]["forbidden_modules"]
    }
    # lint may use errors and json_types only; every other module is forbidden to it.
    assert forbidden == _top_level_modules() - {"lint", "errors", "json_types"}


def _private_uses(path: Path, owners: set[str]) -> list[str]:
    """`<owner>._name` attribute uses in a module, where the owner is one of these names
    (`store`, `self._store`, `accessor`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")):
            continue
        if node.attr.startswith("__"):
            continue
        if ast.unparse(node.value) in owners:
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_store_and_accessors_talk_through_their_interface_only() -> None:
    """The accessors reach the store through `read_value`, `objects` and its public
    attributes, the store reaches an accessor through `stored_text`: no private name of the
    one is used by the other (issue 27: there were 13 such calls)."""
    uses = _private_uses(PACKAGE / "accessors.py", {"store", "self._store"})
    uses += _private_uses(PACKAGE / "remote.py", {"store", "self._store"})
    uses += _private_uses(PACKAGE / "store.py", {"accessor"})
    assert uses == []
