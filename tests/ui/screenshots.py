"""Refresh the screenshots in docs/images/ (shown in README.md and docs/ui.md):

    .venv/bin/python -m tests.ui.screenshots                 # taskstate serve only
    .venv/bin/python -m tests.ui.screenshots 3.2 2.11        # also inside Airflow (slow)

Each view is captured from a real server with example state, in Debian's chromium at
1280x800 (and one at phone width).
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from playwright.sync_api import Browser, Page, expect
from tests.api.server import running
from tests.ui.browser import DESKTOP, PHONE, launched

from taskstate import StateStore
from taskstate.api.serve import standalone_app
from taskstate.scope import AssetScope, TaskScope
from taskstate.writers import task_writer

IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"


def example_state(store: StateStore) -> None:
    load = TaskScope("orders_etl", "scheduled__2026-12-01T00:00:00+00:00", "load", -1)
    state = store.task_state(load, writer=task_writer(load, 1))  # as inside Airflow: the try
    state.set("job", {"id": "emr-7f3a", "submitted_at": "2026-12-01T00:04:11Z"})
    state.set("offset", 48213)
    state.set("batches", {"done": list(range(40)), "failed": [], "source": "s3://lake/orders/"})
    state.set("note", "resumed after the worker was lost", retention=timedelta(days=2))
    for index in range(3):
        mapped = TaskScope("orders_etl", load.run_id, "export", index)
        store.task_state(mapped, writer=task_writer(mapped, 1)).set(
            "cursor", {"page": 10 * index + 3}
        )
    asset = store.asset_state(AssetScope(name="orders"), writer=task_writer(load, 1))
    asset.set("watermark", "2026-12-01T00:00:00Z")
    asset.set("rows_total", 1_204_331)


def shoot(page: Page, name: str) -> None:
    IMAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(IMAGES / f"{name}.png"))
    print(IMAGES / f"{name}.png")


def standalone_views(browser: Browser, ui: str, prefix: str) -> None:
    """The views of the page at `ui` (its URL, ending in `/ui/`)."""
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    page.goto(ui)
    expect(page.get_by_role("link", name="orders_etl")).to_be_visible()
    shoot(page, f"{prefix}-browse")
    task = "?dag_id=orders_etl&run_id=scheduled__2026-12-01T00:00:00%2B00:00&task_id=load"
    page.goto(ui + task)
    expect(page.locator("td.ts-key", has_text="offset")).to_be_visible()
    shoot(page, f"{prefix}-task")
    page.get_by_role("button", name="Edit batches").click()
    page.get_by_role("dialog").get_by_label("Value (JSON)").fill('{"done": [1, 2,]}')
    page.get_by_role("dialog").get_by_role("button", name="Save").click()
    expect(page.get_by_role("dialog").get_by_role("alert")).to_be_visible()
    shoot(page, f"{prefix}-edit")
    page.get_by_role("dialog").get_by_role("button", name="Cancel").click()
    page.get_by_role("button", name="Clear task instance").click()
    shoot(page, f"{prefix}-clear")
    page.keyboard.press("Escape")
    page.goto(ui + task.replace("task_id=load", "task_id=export") + "&map_index=all")
    expect(page.get_by_text("3 keys across 3 map indices")).to_be_visible()
    shoot(page, f"{prefix}-mapped")
    page.goto(ui + "?asset=orders")
    expect(page.locator("td.ts-key", has_text="watermark")).to_be_visible()
    shoot(page, f"{prefix}-asset")
    context.close()
    phone = browser.new_context(viewport=PHONE)
    page = phone.new_page()
    page.goto(ui + task)
    expect(page.locator("td.ts-key", has_text="offset")).to_be_visible()
    shoot(page, f"{prefix}-phone")
    phone.close()


def conflict_and_dark(browser: Browser, ui: str, store: StateStore) -> None:
    """The 412 dialog (a CLI write while the editor was open) and the dark theme."""
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    task = "?dag_id=orders_etl&run_id=scheduled__2026-12-01T00:00:00%2B00:00&task_id=load"
    page.goto(ui + task)
    page.get_by_role("button", name="Edit offset").click()
    expect(page.get_by_role("dialog")).to_be_visible()
    load = TaskScope("orders_etl", "scheduled__2026-12-01T00:00:00+00:00", "load", -1)
    cli = {"kind": "api", "via": "cli", "user": "alice"}
    store.task_state(load, writer=cli).set("offset", 48377)
    page.get_by_role("dialog").get_by_label("Value (JSON)").fill("50000")
    page.get_by_role("dialog").get_by_role("button", name="Save").click()
    expect(page.get_by_role("alertdialog")).to_be_visible()
    shoot(page, "ui-serve-conflict")
    context.close()
    dark = browser.new_context(viewport=DESKTOP, color_scheme="dark")
    page = dark.new_page()
    page.goto(ui + task)
    expect(page.locator("td.ts-key", has_text="offset")).to_be_visible()
    shoot(page, "ui-serve-dark")
    dark.close()


def history_panel(browser: Browser, ui: str, store: StateStore) -> None:
    """A key's history panel after a bad write from the command line (docs/history.md)."""
    load = TaskScope("orders_etl", "scheduled__2026-12-01T00:00:00+00:00", "load", -1)
    store.task_state(load, writer=task_writer(load, 2)).set("offset", 48377)
    cli = {"kind": "api", "via": "cli", "user": "alice"}
    store.task_state(load, writer=cli).set("offset", 0)  # the bad write
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    task = "?dag_id=orders_etl&run_id=scheduled__2026-12-01T00:00:00%2B00:00&task_id=load"
    page.goto(ui + task)
    page.get_by_role("button", name="History of offset").click()
    expect(page.get_by_role("dialog").locator("tbody tr").first).to_be_visible()
    shoot(page, "ui-serve-history")
    context.close()


def history_diff(browser: Browser, ui: str, store: StateStore) -> None:
    """Two versions of a structured value compared in the History panel, light and dark."""
    load = TaskScope("orders_etl", "scheduled__2026-12-01T00:00:00+00:00", "load", -1)
    batches = {"done": list(range(41)), "failed": [41], "source": "s3://lake/orders/"}
    store.task_state(load, writer=task_writer(load, 2)).set("batches", batches)
    shots = (("light", "ui-serve-history-diff"), ("dark", "ui-serve-history-diff-dark"))
    for scheme, name in shots:
        context = browser.new_context(viewport=DESKTOP, color_scheme=scheme)  # type: ignore[arg-type]
        page = context.new_page()
        task = "?dag_id=orders_etl&run_id=scheduled__2026-12-01T00:00:00%2B00:00&task_id=load"
        page.goto(ui + task)
        page.get_by_role("button", name="History of batches").click()
        diff = page.get_by_role("dialog").locator("pre.ts-diff")
        expect(diff).to_be_visible()
        diff.scroll_into_view_if_needed()
        shoot(page, name)
        context.close()


def restore_as_of(browser: Browser, ui: str, store: StateStore) -> None:
    """Restore state as of… after a mistaken clear: the preview before the confirmation."""
    load = TaskScope("orders_etl", "scheduled__2026-12-01T00:00:00+00:00", "load", -1)
    good = math.ceil(time.time())
    time.sleep(max(0.0, good - time.time()) + 0.05)
    cli = {"kind": "api", "via": "cli", "user": "alice"}
    store.task_state(load, writer=cli).clear()  # the mistake
    store.task_state(load, writer=task_writer(load, 3)).set(
        "job", {"id": "emr-9b01", "submitted_at": "2026-12-01T09:12:40Z"}
    )
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    task = "?dag_id=orders_etl&run_id=scheduled__2026-12-01T00:00:00%2B00:00&task_id=load"
    page.goto(ui + task)
    page.get_by_role("button", name="Restore state as of…").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Instant (UTC)").fill(
        datetime.fromtimestamp(good, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    )
    dialog.get_by_role("button", name="Preview").click()
    expect(dialog.get_by_role("table")).to_be_visible()
    shoot(page, "ui-serve-restore-as-of")
    context.close()


def standalone(browser: Browser) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = StateStore(f"sqlite:///{tmp}/state.db")
        example_state(store)
        with store, running(standalone_app(store, None)) as base:
            standalone_views(browser, f"{base}/taskstate/ui/", "ui-serve")
            conflict_and_dark(browser, f"{base}/taskstate/ui/", store)
            history_panel(browser, f"{base}/taskstate/ui/", store)
            history_diff(browser, f"{base}/taskstate/ui/", store)
            restore_as_of(browser, f"{base}/taskstate/ui/", store)


def main(versions: list[str]) -> None:
    with launched() as browser:
        standalone(browser)
        if versions:
            from tests.ui.airflow_screenshots import airflow_views

            airflow_views(browser, versions)


if __name__ == "__main__":
    main(sys.argv[1:])
