"""The layering contract (docs/architecture.md) places every module of src/taskstate;
scripts/test.sh runs `lint-imports`, which checks the imports against it."""

from __future__ import annotations

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
