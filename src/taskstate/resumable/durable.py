"""The `durable=` argument in every spelling: `__init__`, `default_args`, `.partial()`, and
either base-class order, on Airflow 2.10–3.3 and on plain classes.

Airflow's `BaseOperator.__init__` rejects keywords it does not know, so with the mixin after it
(the skill's `class Op(BaseOperator, ResumableJobMixin)`) `durable` must be taken out before it
gets there. `install(cls)` runs for every subclass of the mixin and wraps what needs wrapping.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from taskstate.resumable.decision import MISSING


def install(cls: Any) -> None:
    """Make `cls` take `durable=` however it is written (called from `__init_subclass__`)."""
    # A class that defines `__init__`, or inherits one that does not take `durable` yet
    # (Airflow's BaseOperator's), gets the wrapper; Airflow's metaclass then wraps that.
    if not getattr(cls.__init__, "_taskstate_accepts_durable", False):
        cls.__init__ = _accepts_durable(cls.__init__)
    elif "__init__" not in cls.__dict__:
        # Airflow's metaclass fills `default_args` in only through an `__init__` that is not its
        # first base's: a class built on a mixin subclass (`class Op(Base, BaseOperator)`,
        # `Base(ResumableJobMixin)`) gets its own, or `default_args={"durable": ...}` is lost.
        cls.__init__ = _own(cls.__init__)
    # Only Airflow's own `.partial()` (a `_PartialDescriptor` on BaseOperator, 2.x and 3.x);
    # a subclass of one already wrapped inherits the wrapper, which serves it too.
    if type(inspect.getattr_static(cls, "partial", None)).__name__ == "_PartialDescriptor":
        cls.partial = _partial_with_durable(cls)


def _own(init: Callable[..., None]) -> Callable[..., None]:
    """A class's own `__init__` doing what the inherited one does (same signature, same flag)."""

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)

    return __init__


def check(value: object) -> bool:
    """`durable` as given, when it is a bool; TypeError otherwise (a truthy string must not turn
    resuming on by accident)."""
    if type(value) is not bool:
        raise TypeError(f"durable must be True or False, got {type(value).__name__} {value!r}")
    return value


def _accepts_durable(init: Callable[..., None]) -> Callable[..., None]:
    """Wrap a subclass's `__init__` so `durable=` works whatever the base-class order.

    The wrapper's signature names `durable`, which is what Airflow's `apply_defaults` reads to
    fill it from `default_args` and what `.partial()` validates against. `durable` is recorded
    before the wrapped `__init__` runs, so its body sees it. An `__init__` that names `durable`
    itself owns it and gets it untouched: upstream providers' operators take
    `durable: bool | None = None` and forward it to the mixin only when it is not None.
    """
    signature = inspect.signature(init)
    owns_durable = "durable" in signature.parameters

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, durable: Any = MISSING, **kwargs: Any) -> None:
        if durable is not MISSING:
            if owns_durable:
                kwargs["durable"] = durable
            else:
                self.durable = check(durable)
        init(self, *args, **kwargs)

    __init__.__signature__ = _with_durable(signature)  # type: ignore[attr-defined]
    __init__._taskstate_accepts_durable = True  # type: ignore[attr-defined]
    return __init__


def _partial_with_durable(cls: Any) -> classmethod[Any, ..., Any]:
    """Airflow's `.partial()` keeps only BaseOperator's own keys from the `default_args` given
    to it, so `.partial(default_args={"durable": False})` would be lost: pass it on by name."""

    def partial(klass: Any, **kwargs: Any) -> Any:
        default_args = kwargs.get("default_args")
        inherited = isinstance(default_args, Mapping) and "durable" in default_args
        if inherited and "durable" not in kwargs:
            kwargs["durable"] = default_args["durable"]  # type: ignore[index]
        return super(cls, klass).partial(**kwargs)

    return classmethod(partial)


def _with_durable(signature: inspect.Signature) -> inspect.Signature:
    params = list(signature.parameters.values())
    if "durable" in signature.parameters:
        return signature
    durable = inspect.Parameter("durable", inspect.Parameter.KEYWORD_ONLY, default=True)
    at = len(params)
    if params and params[-1].kind is inspect.Parameter.VAR_KEYWORD:
        at -= 1
    return signature.replace(parameters=[*params[:at], durable, *params[at:]])
