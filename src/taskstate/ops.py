"""Declarative updates: `update(key, add(1), default=0)` instead of `update(key, lambda n: n + 1,
default=0)`.

Each operation is a frozen object that is also a plain function of the current value, so it
works wherever `update` takes a function, on every backend, with the same meaning. The
difference is over HTTP: a lambda cannot travel, so the client reads the key, computes and
writes it back conditionally (one winner per round trip when many writers share a key); an
operation is sent as data and the server applies it in one request, in one transaction on its
store, applied once even when the request is re-sent after a lost answer (docs/api.md,
"Update operations").

The current value an operation sees is `update`'s: the key's value, or `default` when it is
absent. None there (absent, no default) is the operation's starting point: 0 for `add`, the
operand for `maximum` / `minimum`, [] for `append`. Numbers are JSON's: int or float, never
bool (True is not 1 here); `add` of two ints is an int. A value of the wrong type raises
`UpdateOperationError` and nothing is written.

>>> add(1)(4), add(2)(None), maximum("2026-01-02")("2026-01-01"), append("b")(["a"])
(5, 2, '2026-01-02', ['a', 'b'])
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from taskstate.errors import UpdateOperationError
from taskstate.values import JsonValue, encode_value

__all__ = ["Op", "add", "append", "from_wire", "maximum", "minimum"]


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _kind(value: object) -> str:
    return "a bool" if isinstance(value, bool) else f"a {type(value).__name__} ({value!r:.60})"


@dataclass(frozen=True)
class Op:
    """An update operation: `op(current) -> new`, and its wire form (`name`, `operand`)."""

    name: ClassVar[str]
    operand: Any

    def __call__(self, current: Any) -> Any:
        """The new value from `current` (None: the key is absent and update has no default)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{self.name}({self.operand!r})"

    def _refuse(self, needs: str, current: object) -> UpdateOperationError:
        return UpdateOperationError(
            f"{self!r} applies to {needs}, but the value is {_kind(current)}; nothing was "
            "written. Give update a default of the right type, or use a function"
        )


@dataclass(frozen=True, repr=False)
class _Add(Op):
    name: ClassVar[str] = "add"

    def __call__(self, current: Any) -> Any:
        if current is None:
            return self.operand
        if not _is_number(current):
            raise self._refuse("a number (int or float, not bool)", current)
        new = current + self.operand
        if not math.isfinite(new):
            raise UpdateOperationError(f"{self!r} of {current!r} is not finite; nothing written")
        return new


@dataclass(frozen=True, repr=False)
class _Maximum(Op):
    name: ClassVar[str] = "maximum"

    def __call__(self, current: Any) -> Any:
        return self.operand if current is None else max(self._same(current), self.operand)

    def _same(self, current: Any) -> Any:
        if isinstance(self.operand, str) and isinstance(current, str):
            return current
        if _is_number(self.operand) and _is_number(current):
            return current
        raise self._refuse("a str" if isinstance(self.operand, str) else "a number", current)


@dataclass(frozen=True, repr=False)
class _Minimum(_Maximum):
    name: ClassVar[str] = "minimum"

    def __call__(self, current: Any) -> Any:
        return self.operand if current is None else min(self._same(current), self.operand)


@dataclass(frozen=True, repr=False)
class _Append(Op):
    name: ClassVar[str] = "append"

    def __call__(self, current: Any) -> Any:
        if current is None:
            return [self.operand]
        if not isinstance(current, list):
            raise self._refuse("a list", current)
        return [*current, self.operand]


def add(n: int | float) -> Op:
    """Add `n` (int or float, not bool) to a number: a counter. Absent with no default: `n`."""
    if not _is_number(n) or not math.isfinite(n):
        raise UpdateOperationError(f"add takes a finite int or float, got {_kind(n)}")
    return _Add(n)


def maximum(x: int | float | str) -> Op:
    """The larger of the value and `x` (numbers with numbers, strings with strings, such as
    ISO timestamps): a watermark that only moves forward. Absent with no default: `x`."""
    return _Maximum(_comparable("maximum", x))


def minimum(x: int | float | str) -> Op:
    """The smaller of the value and `x` (as `maximum`). Absent with no default: `x`."""
    return _Minimum(_comparable("minimum", x))


def append(item: JsonValue) -> Op:
    """The list with `item` added at its end. Absent with no default: `[item]`."""
    encode_value([item])  # the value rules, here rather than at the first write
    return _Append(item)


def _comparable(name: str, x: object) -> Any:
    if isinstance(x, str) or (_is_number(x) and math.isfinite(x)):  # type: ignore[arg-type]
        return x
    raise UpdateOperationError(f"{name} takes a finite int or float, or a str, got {_kind(x)}")


_BY_NAME = {"add": add, "maximum": maximum, "minimum": minimum, "append": append}
NAMES = tuple(_BY_NAME)


def from_wire(name: object, operand: object) -> Op:
    """The operation an update request names (`op`, `value`), with the operand checked."""
    make = _BY_NAME.get(name) if isinstance(name, str) else None
    if make is None:
        raise UpdateOperationError(
            f"no update operation {name!r:.60}; the operations are {', '.join(NAMES)}"
        )
    return make(operand)  # type: ignore[arg-type]
