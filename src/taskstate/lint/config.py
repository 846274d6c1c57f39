"""`[tool.taskstate.lint]` in pyproject.toml: which rules run where.

[tool.taskstate.lint]
select = ["TS"]                 # code prefixes; default: every rule
ignore = ["TS104"]
exclude = ["build/**"]          # glob patterns, relative to the pyproject.toml
airflow-version = "2.10"        # the Airflow the advice is for (default: the installed one)
max-per-code = 10               # text output: findings of one code shown per file

[tool.taskstate.lint.per-file-ignores]
"tests/**" = ["TS601"]
"""

from __future__ import annotations

import fnmatch
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from taskstate.errors import ConfigError
from taskstate.lint.rules import RULES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

_KEYS = {"select", "ignore", "exclude", "per-file-ignores", "airflow-version", "max-per-code"}


@dataclass(frozen=True)
class LintConfig:
    """The linter's settings from configuration: selected and ignored codes, excluded and
    per-file-ignored paths, target Airflow version and the per-code output cap."""

    select: tuple[str, ...] = ("TS",)
    ignore: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    airflow_version: str | None = None
    max_per_code: int = 10
    root: Path = field(default_factory=Path.cwd)  # patterns are relative to it

    def with_flags(
        self, select: tuple[str, ...] | None, ignore: tuple[str, ...] | None
    ) -> LintConfig:
        """Command-line flags: --select replaces the configured selection, --ignore adds."""
        check_codes("--select", select or ())
        check_codes("--ignore", ignore or ())
        return replace(
            self,
            select=tuple(select) if select else self.select,
            ignore=self.ignore + tuple(ignore or ()),
        )

    def enabled(self, code: str, path: str) -> bool:
        """Whether `code` is reported for `path`: selected, not ignored, not ignored per file."""
        if not _matches(code, self.select) or _matches(code, self.ignore):
            return False
        for pattern, codes in self.per_file_ignores:
            if _matches(code, codes) and self._path_matches(path, pattern):
                return False
        return True

    def excluded(self, path: Path) -> bool:
        """Whether `path` matches an exclude pattern (relative to `root`, or by file name)."""
        return any(self._path_matches(str(path), pattern) for pattern in self.exclude)

    def _path_matches(self, path: str, pattern: str) -> bool:
        candidate = Path(path)
        try:
            relative = candidate.resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            relative = candidate.as_posix()
        return fnmatch.fnmatch(relative, pattern) or fnmatch.fnmatch(candidate.name, pattern)


def check_codes(where: str, prefixes: tuple[str, ...]) -> None:
    """Refuse a code or prefix that names no rule: a typo (`XX9`, `TS19`) would otherwise
    select nothing, and the linter would pass silently in CI."""
    unknown = [p for p in prefixes if p != "ALL" and not any(c.startswith(p) for c in RULES)]
    if unknown:
        raise ConfigError(
            f"{where}: unknown rule code(s) {', '.join(unknown)}; codes are TS101...TS901, "
            "a prefix such as TS1, or ALL (taskstate lint --rules lists them)"
        )


def _matches(code: str, prefixes: tuple[str, ...]) -> bool:
    return any(prefix == "ALL" or code.startswith(prefix) for prefix in prefixes)


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above `start` that has a [tool.taskstate.lint] table."""
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and _table(candidate) is not None:
            return candidate
    return None


def load(path: Path | None, start: Path) -> LintConfig:
    """Read `path`, or the nearest pyproject.toml with a [tool.taskstate.lint] table."""
    path = path or find_pyproject(start.resolve())
    if path is None:
        return LintConfig()
    table = _table(path)
    if table is None:
        return LintConfig(root=path.parent)
    unknown = set(table) - _KEYS
    if unknown:
        raise ConfigError(
            f"{path}: unknown key(s) in [tool.taskstate.lint]: {', '.join(sorted(unknown))}; "
            f"known: {', '.join(sorted(_KEYS))}"
        )
    per_file = table.get("per-file-ignores", {})
    if not isinstance(per_file, dict):
        raise ConfigError(f"{path}: per-file-ignores must be a table of pattern = [codes]")
    max_per_code = table.get("max-per-code", 10)
    if not isinstance(max_per_code, int) or max_per_code < 0:
        raise ConfigError(f"{path}: max-per-code must be an integer >= 0 (0 = no cap)")
    version = table.get("airflow-version")
    if version is not None and not isinstance(version, str):
        raise ConfigError(f'{path}: airflow-version must be a string such as "2.10"')
    return LintConfig(
        select=_rule_codes(path, "select", table.get("select", ["TS"])),
        ignore=_rule_codes(path, "ignore", table.get("ignore", [])),
        exclude=_strings(path, "exclude", table.get("exclude", [])),
        per_file_ignores=tuple(
            (pattern, _rule_codes(path, f"per-file-ignores.{pattern}", codes))
            for pattern, codes in per_file.items()
        ),
        airflow_version=version,
        max_per_code=max_per_code,
        root=path.parent,
    )


def _table(path: Path) -> dict[str, Any] | None:
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it as TOML: {exc}") from exc
    table = data.get("tool", {}).get("taskstate", {}).get("lint")
    return table if isinstance(table, dict) else None


def _strings(path: Path, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{path}: {key} must be a list of strings")
    return tuple(value)


def _rule_codes(path: Path, key: str, value: Any) -> tuple[str, ...]:
    codes = _strings(path, key, value)
    check_codes(f"{path}: {key}", codes)
    return codes
