"""The examples in the public API's docstrings run as written."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["taskstate.store", "taskstate.accessors", "taskstate.values"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    failed, attempted = doctest.testmod(module, globs=vars(module).copy(), report=True)
    assert failed == 0
    assert attempted > 0, f"{name} holds no docstring example: this test would prove nothing"
