"""`[metrics]` options: Airflow's, read as every taskstate option is, plus the flush interval."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from taskstate.errors import ConfigError
from taskstate.settings import airflow_option


def _flag(raw: str | None, option: str) -> bool:
    text = (raw or "").strip().lower()
    if text in ("true", "t", "1", "yes", "on"):
        return True
    if text in ("false", "f", "0", "no", "off", ""):
        return False
    raise ConfigError(f"[metrics] {option} must be True or False, got {raw!r}")


def _patterns(raw: str | None) -> tuple[str, ...]:
    return tuple(p.strip().lower() for p in (raw or "").split(",") if p.strip())


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
        def get(option: str) -> str | None:
            return airflow_option("metrics", option, environ)

        port = (get("statsd_port") or "8125").strip()
        flush = (get("taskstate_flush_seconds") or "10").strip()
        try:
            port_number, flush_seconds = int(port), float(flush)
        except ValueError:
            raise ConfigError(
                f"[metrics] statsd_port must be a port number and taskstate_flush_seconds a "
                f"number of seconds, got {port!r} and {flush!r}"
            ) from None
        if flush_seconds <= 0:
            raise ConfigError(f"[metrics] taskstate_flush_seconds must be > 0, got {flush!r}")
        return cls(
            statsd_on=_flag(get("statsd_on"), "statsd_on"),
            statsd_host=(get("statsd_host") or "localhost").strip(),
            statsd_port=port_number,
            statsd_prefix=(get("statsd_prefix") or "airflow").strip(),
            influxdb_tags=_flag(get("statsd_influxdb_enabled"), "statsd_influxdb_enabled"),
            otel_on=_flag(get("otel_on"), "otel_on"),
            allow_list=_patterns(get("metrics_allow_list")),
            block_list=_patterns(get("metrics_block_list")),
            flush_seconds=flush_seconds,
        )

    def allows(self, name: str) -> bool:
        """Airflow's list semantics: each entry is a pattern searched in the name."""
        lower = name.lower()
        if self.allow_list:
            return any(re.search(p, lower) for p in self.allow_list)
        return not any(re.search(p, lower) for p in self.block_list)
