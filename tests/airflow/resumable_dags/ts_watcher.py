"""An asset watcher (Airflow 3's event-driven scheduling) deduping as docs/deferrable.md says:
the event id is claimed in the asset's state before the event is yielded.

`OrdersWatcher` reads event ids, one per line, from $VERSUS_OUT/orders.events. Right after it
yields the first event it writes $VERSUS_OUT/watcher.kill-triggerer and waits: the test
SIGKILLs the triggerer once Airflow has recorded that event, and a new triggerer re-creates the
watcher from its kwargs. `ts_watcher` runs for each asset event.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Asset, AssetWatcher, task
from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from taskstate.airflow.triggers import TriggerStateMixin

OUT = Path(os.environ.get("VERSUS_OUT", "/tmp"))


class OrdersWatcher(TriggerStateMixin, BaseEventTrigger):
    state_assets = ("ts_orders",)

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source = source

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("ts_watcher.OrdersWatcher", {"source": self.source})

    async def run(self) -> Any:
        state = self.asset_state_store
        last = await state.aget("last_event_id")
        while True:
            path = Path(self.source)
            ids = [int(n) for n in path.read_text().split()] if path.exists() else []
            for event_id in ids:
                if last is not None and event_id <= last:
                    continue  # handed to Airflow before a crash: never again
                if not await state.acompare_and_set("last_event_id", last, event_id):
                    raise RuntimeError("another triggerer runs this watcher")
                last = event_id
                yield TriggerEvent({"event_id": event_id})
                marker = OUT / "watcher.kill-triggerer"
                if not marker.exists():  # right after the first yield: kill me
                    marker.write_text(str(os.getpid()))
                    await asyncio.sleep(600)
            await asyncio.sleep(0.5)


ORDERS = Asset(
    "ts_orders",
    watchers=[
        AssetWatcher(name="ts_orders_watcher", trigger=OrdersWatcher(str(OUT / "orders.events")))
    ],
)

with DAG("ts_watcher", schedule=[ORDERS]):

    @task
    def consume() -> None:
        pass

    consume()
