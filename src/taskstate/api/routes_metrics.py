"""The HTTP API's own metrics (`taskstate.metrics`): every request timed by route template,
method and status; and `GET /taskstate/metrics`, the process's totals as Prometheus text
(`taskstate serve` only; an admin token is needed when a secret key is set)."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from time import perf_counter
from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from taskstate.api.auth import Forbidden
from taskstate.api.context import AppContext, Caller, context
from taskstate.metrics import COUNTER, TIMER, Metrics

# Prometheus text exposition format 0.0.4.
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"

router = APIRouter(tags=["Monitoring"])


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(
    ctx: Annotated[AppContext, Depends(context)],
    principal: Caller,
) -> PlainTextResponse:
    """This server's call counts and latencies, offload traffic, cleanup and HTTP metrics."""
    if not principal.admin:
        raise Forbidden(f"{principal.subject!r} may not read metrics: an admin token is needed")
    return PlainTextResponse(ctx.store.metrics.prometheus_text(), media_type=PROMETHEUS_TEXT)


class RequestMetrics:
    """Times each request: `taskstate.api.request` (tags route, method, status) and a
    `taskstate.api.status.<2xx|3xx|4xx|5xx>` counter for deployments without tags. The route
    is the matched route's name (its endpoint: `get_task_state`…), never the path, so tags
    stay few and hold nothing a StatsD line cannot carry."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, recording its route, method, status and duration when metrics
        are enabled."""
        if scope["type"] != "http" or not self.metrics.enabled:
            await self.app(scope, receive, send)
            return
        start = perf_counter()

        def done(status: int) -> None:
            route = getattr(scope.get("route"), "name", None) or "unmatched"
            record(self.metrics, route, scope["method"], status, perf_counter() - start)

        await observed(self.app, scope, receive, send, done)


async def observed(
    app: ASGIApp, scope: Scope, receive: Receive, send: Send, done: Callable[[int], None]
) -> None:
    """Run `app`, then `done(status it answered)` — also when it raised (then 500, what the
    client sees if the app raises before responding)."""
    status = 500

    async def sending(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        await send(message)

    try:
        await app(scope, receive, sending)
    finally:
        done(status)


def record(metrics: Metrics, route: str, method: str, status: int, seconds: float) -> None:
    """One request's metrics (`RequestMetrics`' names and tags); the slots of a (route,
    method, status) are looked up once, not per request."""
    if not metrics.sinks:
        return
    known = _SLOTS.get(metrics)
    if known is None:
        known = _SLOTS[metrics] = {}
    key = (route, method, status)
    slots = known.get(key)
    if slots is None:
        tags = (("route", route), ("method", method), ("status", str(status)))
        timer = metrics.slot("taskstate.api.request", tags, TIMER)
        counter = metrics.slot(f"taskstate.api.status.{status // 100}xx", (), COUNTER)
        slots = known[key] = (timer, counter)
    timer, counter = slots
    timer[0] += 1  # as `Metrics.timing` / `count` add (see `Metrics.slot`)
    timer[1] += seconds
    counter[0] += 1
    counter[1] += 1


_SLOTS: weakref.WeakKeyDictionary[
    Metrics, dict[tuple[str, str, int], tuple[list[float], list[float]]]
] = weakref.WeakKeyDictionary()
