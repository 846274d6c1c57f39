"""`[metrics]` options: Airflow's, plus the flush interval, as `taskstate.settings.Settings`
declares and reads them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from taskstate.settings import METRICS_OPTIONS, options


@dataclass(frozen=True)
class MetricsSettings:
    """Airflow's `[metrics]` options taskstate honours, plus its own flush interval."""

    statsd_on: bool = False
    statsd_host: str = "localhost"
    statsd_port: int = 8125
    statsd_prefix: str = "airflow"
    influxdb_tags: bool = False
    otel_on: bool = False
    allow_list: tuple[str, ...] = ()
    block_list: tuple[str, ...] = ()
    flush_seconds: float = 10.0

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None) -> MetricsSettings:
        """Read from `Settings`' `[metrics]` fields (`taskstate.settings.METRICS_OPTIONS`)."""
        read = options(*METRICS_OPTIONS, environ=environ)
        return cls(
            statsd_on=read["statsd_on"],
            statsd_host=read["statsd_host"],
            statsd_port=read["statsd_port"],
            statsd_prefix=read["statsd_prefix"],
            influxdb_tags=read["statsd_influxdb_enabled"],
            otel_on=read["otel_on"],
            allow_list=read["metrics_allow_list"],
            block_list=read["metrics_block_list"],
            flush_seconds=read["metrics_flush_seconds"],
        )

    def allows(self, name: str) -> bool:
        """Airflow's list semantics: each entry is a pattern searched in the name."""
        lower = name.lower()
        if self.allow_list:
            return any(re.search(p, lower) for p in self.allow_list)
        return not any(re.search(p, lower) for p in self.block_list)
