"""Which Airflow the advice is for, and the advice that depends on it.

The version comes from `--airflow-version`, the config, or the installed distribution's metadata
(read with importlib.metadata: Airflow itself is never imported). Below 3.3 Airflow has no state
store, so the advice is taskstate; from 3.3 the native store or taskstate. Submit-and-poll advice
is the same on every version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata

from taskstate.lint.rules import Advice

NATIVE = (3, 3)
SDK = (3, 0)  # from here taskstate can stand in for `airflow.sdk.ResumableJobMixin`
# The opt-in that makes providers' durable=True resume on Airflow 3.0-3.2 (taskstate's mixin in
# place of Airflow's stub); lint never sees the deployment's config, so it can only name it.
PROVIDER_DURABLE = "[state_store] taskstate_provider_durable = True"


@dataclass(frozen=True)
class AirflowVersion:
    """A target Airflow version; `parts` is None when it is not known."""

    parts: tuple[int, int] | None
    source: str  # "--airflow-version", "config", "installed" or "unknown"

    @classmethod
    def parse(cls, text: str, source: str) -> AirflowVersion:
        """Parse a version like 2.10 or 3.3.2 to (major, minor); ValueError for anything else."""
        match = re.match(r"\s*(\d+)\.(\d+)", text)
        if not match:
            raise ValueError(f"airflow version {text!r} is not like 2.10 or 3.3.2")
        return cls((int(match.group(1)), int(match.group(2))), source)

    @classmethod
    def detect(cls) -> AirflowVersion:
        """The installed Airflow's version, or an unknown one when Airflow is not installed."""
        for dist in ("apache-airflow-core", "apache-airflow"):
            try:
                return cls.parse(metadata.version(dist), "installed")
            except (metadata.PackageNotFoundError, ValueError):
                continue
        return cls(None, "unknown")

    @property
    def label(self) -> str:
        """The version as "major.minor", or "unknown"."""
        return f"{self.parts[0]}.{self.parts[1]}" if self.parts else "unknown"

    @property
    def native(self) -> bool | None:
        """True from 3.3, False below it, None when unknown."""
        return None if self.parts is None else self.parts >= NATIVE

    @property
    def provider_durable(self) -> bool:
        """True on 3.0-3.2, where PROVIDER_DURABLE can make providers' durable=True resume."""
        return self.parts is not None and SDK <= self.parts < NATIVE

    # --- what the advice and the "after" snippets say --------------------------------------
    def advice(self, kind: Advice) -> str:
        """The version-aware recommendation appended to a finding's reason, or "" for none."""
        native = self.native
        if kind is Advice.SUBMIT_POLL:
            return (
                "With a Triggerer: one task, deferrable=True and wait_for_termination=True. "
                "Without one: one task with wait_for_termination=True, durable=True, or keep "
                'the split with a mode="reschedule" sensor and hang downstream tasks off the '
                "sensor."
            )
        if kind is Advice.NONE:
            return ""
        what = {
            Advice.TASK_STATE: "task_state_store",
            Advice.ASSET_STATE: "asset_state_store",
            Advice.MIXIN: "ResumableJobMixin",
        }[kind]
        if native is False:
            noop = ""
            if kind is Advice.MIXIN and self.provider_durable:
                noop = f"; providers' durable=True resumes there only with {PROVIDER_DURABLE}"
            elif kind is Advice.MIXIN:
                noop = "; providers' durable=True does nothing there"
            return (
                f"Use {what} from taskstate: Airflow {self.label} has no state store "
                f"(pip install taskstate[airflow]){noop}."
            )
        if native is True:
            return f"Use {what}: native in Airflow {self.label}, or from taskstate."
        return f"Use {what}: native from Airflow 3.3; below 3.3 from taskstate."

    def mixin_import(self) -> str:
        """The ResumableJobMixin import the "after" snippets show for this version."""
        if self.native:
            return "from airflow.sdk import ResumableJobMixin  # or: from taskstate import ..."
        return "from taskstate import ResumableJobMixin"

    def never_expire_import(self) -> str:
        """The NEVER_EXPIRE import the "after" snippets show for this version."""
        if self.native:
            return "from airflow.sdk import NEVER_EXPIRE  # or: from taskstate import ..."
        return "from taskstate import NEVER_EXPIRE"
