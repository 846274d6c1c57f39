"""The state pages in real Chromium against `taskstate serve`'s app: every change made in the
browser is checked through the Python store, every refusal by what the store still holds."""

from __future__ import annotations

import math
import re
import time
from datetime import datetime, timedelta, timezone
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import Browser, Page, expect
from tests.ui.browser import PHONE
from tests.ui.conftest import Served

from taskstate import NEVER_EXPIRE
from taskstate.scope import AssetScope, TaskScope
from taskstate.writers import task_writer

pytestmark = pytest.mark.timeout(120)

LOAD = TaskScope("etl", "run1", "load", -1)


def seed(served: Served) -> None:
    load = served.store.task_state(LOAD)
    load.set("offset", {"n": 42})
    load.set("big", {"rows": list(range(200))}, retention=timedelta(days=3))
    load.set("job", {"id": "j-1"})
    for index in range(3):
        served.store.task_state(TaskScope("etl", "run1", "mapped", index)).set("part", index)
    served.store.asset_state(AssetScope(name="orders")).set("watermark", "2026-01-01")


def task_url(served: Served, task: str = "load", map_index: str = "-1") -> str:
    return f"{served.ui}?dag_id=etl&run_id=run1&task_id={task}&map_index={map_index}"


def row(page: Page, key: str):  # type: ignore[no-untyped-def]
    return page.locator("#ts-entries tbody tr", has=page.locator("td.ts-key", has_text=key))


def test_browse_from_dags_to_a_task_instance(served: Served, page: Page) -> None:
    seed(served)
    page.goto(served.base + "/taskstate/ui")  # no slash: redirected to the page
    expect(page.get_by_role("heading", name="DAGs with task state")).to_be_visible()
    expect(page.get_by_role("link", name="orders")).to_be_visible()
    page.get_by_role("link", name="etl").click()
    page.get_by_role("link", name="run1").click()
    expect(page.get_by_role("row", name="mapped 2 1")).to_be_visible()
    page.get_by_role("link", name="load").click()
    expect(page.get_by_role("heading", name="Task state: load")).to_be_visible()
    offset = row(page, "offset")
    expect(offset.locator("pre")).to_have_text('{\n  "n": 42\n}')  # pretty JSON
    expect(offset).to_contain_text("task etl.load, run run1")  # last_updated_by
    big = row(page, "big")
    expect(big.locator("details")).not_to_have_attribute("open", "")  # long: folded
    expect(big.locator("details pre")).to_be_hidden()
    big.locator("summary").click()
    expect(big.locator("details pre")).to_be_visible()
    expires = big.locator("td").nth(3).locator("time")
    iso = expires.get_attribute("datetime")
    entry = served.store.task_state(LOAD).entry("big")
    assert entry is not None and entry.expires_at is not None and iso is not None
    assert iso.startswith(time.strftime("%Y-%m-%dT", time.gmtime(entry.expires_at)))
    page.get_by_role("link", name="run1").click()
    expect(page.get_by_role("heading", name="Task instances of run1 with state")).to_be_visible()


def test_never_expiring_keys_say_never_and_the_filter_and_pages_work(
    served: Served, page: Page
) -> None:
    state = served.store.task_state(LOAD)
    for n in range(30):
        state.set(f"k{n:02d}", n, retention=NEVER_EXPIRE)
    state.set("other", 1)
    page.goto(task_url(served))
    expect(row(page, "k00").locator("td").nth(3)).to_have_text("Never")
    expect(page.get_by_text("1–25 of more than 25")).to_be_visible()  # not counted to the end
    page.get_by_role("button", name="Next").click()
    expect(page.get_by_text("26–31 of 31")).to_be_visible()
    expect(row(page, "other")).to_be_visible()
    page.get_by_label("Filter keys (prefix)").fill("k2")
    expect(page.get_by_text("10 entries")).to_be_visible()
    expect(row(page, "other")).to_have_count(0)
    page.get_by_label("Filter keys (prefix)").fill("zz")
    expect(page.get_by_text('No key starts with "zz".')).to_be_visible()


def test_edit_keeps_the_expiry_unless_changed(served: Served, page: Page) -> None:
    seed(served)
    state = served.store.task_state(LOAD)
    before = state.entry("big")
    assert before is not None
    page.goto(task_url(served))
    page.get_by_role("button", name="Edit big").click()
    editor = page.get_by_role("dialog", name="Edit big")
    expect(editor.get_by_label("Key")).to_have_value("big")
    editor.get_by_label("Value (JSON)").fill('{"rows": [1, 2, 3]}')
    expect(editor.get_by_role("radio", name="Keep", exact=False)).to_be_checked()
    editor.get_by_role("button", name="Save").click()
    expect(editor).to_be_hidden()  # closed once the server answered
    expect(page.get_by_role("status")).to_have_text("Saved big.")
    after = state.entry("big")
    assert after is not None and after.value == {"rows": [1, 2, 3]}
    assert after.expires_at == before.expires_at
    assert after.updated_by == {"kind": "api", "via": "ui", "subject": "anonymous"}

    page.get_by_role("button", name="Edit big").click()
    editor = page.get_by_role("dialog", name="Edit big")
    editor.get_by_role("radio", name="Never expires").check()
    editor.get_by_role("button", name="Save").click()
    expect(editor).to_be_hidden()  # closed once the server answered
    expect(page.get_by_role("status")).to_have_text("Saved big.")
    never = state.entry("big")
    assert never is not None and never.expires_at is None and never.value == {"rows": [1, 2, 3]}

    page.get_by_role("button", name="Edit big").click()
    editor = page.get_by_role("dialog", name="Edit big")
    editor.get_by_role("radio", name="Expires in").check()
    editor.get_by_label("Days to keep").fill("2")
    editor.get_by_role("button", name="Save").click()
    expect(editor).to_be_hidden()  # closed once the server answered
    expect(page.get_by_role("status")).to_have_text("Saved big.")
    two_days = state.entry("big")
    assert two_days is not None and two_days.expires_at is not None
    assert abs(two_days.expires_at - (time.time() + 2 * 86400)) < 120


def test_add_a_key_with_the_default_retention(served: Served, page: Page) -> None:
    seed(served)
    page.goto(task_url(served))
    page.get_by_role("button", name="Add key").click()
    editor = page.get_by_role("dialog")
    editor.get_by_label("Key").fill("a/b ü")
    editor.get_by_label("Value (JSON)").fill('["x", 1]')
    editor.get_by_role("button", name="Save").click()
    expect(row(page, "a/b ü")).to_be_visible()
    entry = served.store.task_state(LOAD).entry("a/b ü")
    assert entry is not None and entry.value == ["x", 1]
    days = served.store.settings.default_retention_days
    assert (
        entry.expires_at is not None and abs(entry.expires_at - entry.updated_at - days * 86400) < 1
    )
    page.get_by_role("button", name="Add key").click()  # adding never overwrites
    editor = page.get_by_role("dialog")
    editor.get_by_label("Key").fill("offset")
    editor.get_by_label("Value (JSON)").fill("1")
    editor.get_by_role("button", name="Save").click()
    expect(editor.get_by_role("alert")).to_have_text(
        'The key "offset" already exists: edit it instead.'
    )
    assert served.store.task_state(LOAD).get("offset") == {"n": 42}


def test_bad_json_and_refused_values_show_the_error_and_change_nothing(
    served: Served, page: Page
) -> None:
    seed(served)
    page.goto(task_url(served))
    requests: list[str] = []
    expect(row(page, "offset")).to_be_visible()
    page.on("request", lambda r: requests.append(r.method) if "state-store" in r.url else None)
    page.get_by_role("button", name="Edit offset").click()  # reads the key's ETag first
    editor = page.get_by_role("dialog", name="Edit offset")
    value = editor.get_by_label("Value (JSON)")
    value.fill('{"n": 43,}')
    editor.get_by_role("button", name="Save").click()
    expect(editor.get_by_role("alert")).to_contain_text("The value is not valid JSON")
    expect(value).to_have_attribute("aria-invalid", "true")
    value.fill("null")
    editor.get_by_role("button", name="Save").click()
    expect(editor.get_by_role("alert")).to_have_text(
        "null cannot be stored: delete the key instead."
    )
    assert requests == ["GET"]  # refused before sending
    value.fill('"' + "x" * 2000 + '"')  # over the server's 1 KiB limit: its 422, inline
    editor.get_by_role("button", name="Save").click()
    expect(editor.get_by_role("alert")).to_contain_text("1024")
    assert requests == ["GET", "PATCH"]
    expect(editor).to_be_visible()  # still open with the text, to fix it
    editor.get_by_role("button", name="Cancel").click()
    assert served.store.task_state(LOAD).get("offset") == {"n": 42}


def test_delete_and_clear_ask_first_and_say_what_is_lost(served: Served, page: Page) -> None:
    seed(served)
    state = served.store.task_state(LOAD)
    page.goto(task_url(served))
    page.get_by_role("button", name="Delete job").click()
    confirm = page.get_by_role("alertdialog", name='Delete "job"?')
    expect(confirm).to_contain_text("submits the job again")
    expect(confirm.get_by_role("button", name="Cancel")).to_be_focused()
    page.keyboard.press("Enter")  # Enter on the focused Cancel keeps the key
    expect(confirm).to_be_hidden()
    assert state.get("job") == {"id": "j-1"}
    page.get_by_role("button", name="Delete job").click()
    page.get_by_role("alertdialog").get_by_role("button", name="Delete key").click()
    expect(page.get_by_role("status")).to_have_text("Deleted job.")
    assert state.get("job") is None and state.get("offset") == {"n": 42}

    page.get_by_role("button", name="Clear task instance").click()
    confirm = page.get_by_role("alertdialog", name="Clear this task instance?")
    expect(confirm).to_contain_text("starts from the beginning")
    page.keyboard.press("Escape")
    assert state.get("offset") == {"n": 42}
    page.get_by_role("button", name="Clear task instance").click()
    page.get_by_role("alertdialog").get_by_role("button", name="Clear task instance").click()
    expect(page.get_by_text("This task instance holds no state.")).to_be_visible()
    assert state.keys() == [] and served.store.asset_state(AssetScope(name="orders")).get(
        "watermark"
    )


def test_mapped_task_pick_an_index_or_all_and_clear_every_index(served: Served, page: Page) -> None:
    seed(served)
    page.goto(task_url(served, "mapped", "1"))
    expect(row(page, "part").locator("pre")).to_have_text("1")
    page.get_by_label("Map index").select_option("2")
    expect(page.get_by_role("heading", name="Task state: mapped")).to_be_visible()
    expect(row(page, "part").locator("pre")).to_have_text("2")
    page.get_by_label("Map index").select_option("all")
    expect(page.get_by_text("3 keys across 3 map indices")).to_be_visible()
    expect(page.get_by_role("button", name="Edit part")).to_have_count(0)
    page.get_by_role("button", name="Clear all map indices").click()
    confirm = page.get_by_role("alertdialog", name="Clear every map index?")
    expect(confirm).to_contain_text("every map index of task mapped")
    confirm.get_by_role("button", name="Clear all map indices").click()
    expect(page.get_by_role("status")).to_have_text("Cleared every map index.")
    for index in range(3):
        assert served.store.task_state(TaskScope("etl", "run1", "mapped", index)).keys() == []
    assert served.store.task_state(LOAD).get("offset") == {"n": 42}


def test_asset_view_shows_who_wrote_each_key_and_edits(served: Served, page: Page) -> None:
    seed(served)
    writer = task_writer(LOAD, try_number=3)
    served.store.asset_state(AssetScope(name="orders"), writer=writer).set("rows", 10)
    page.goto(served.ui)
    page.get_by_role("link", name="orders").click()
    expect(page.get_by_role("heading", name="Asset state: orders")).to_be_visible()
    expect(row(page, "rows")).to_contain_text("task etl.load, run run1, try 3")
    expect(row(page, "watermark")).to_contain_text("unknown")
    page.get_by_role("button", name="Edit watermark").click()
    page.get_by_role("dialog").get_by_label("Value (JSON)").fill('"2026-02-01"')
    page.get_by_role("dialog").get_by_role("button", name="Save").click()
    expect(row(page, "watermark")).to_contain_text("ui: anonymous")
    assert served.store.asset_state(AssetScope(name="orders")).get("watermark") == "2026-02-01"
    page.get_by_role("button", name="Delete rows").click()
    expect(page.get_by_role("alertdialog")).to_contain_text("Asset orders loses")
    page.get_by_role("alertdialog").get_by_role("button", name="Delete key").click()
    expect(row(page, "rows")).to_have_count(0)
    assert served.store.asset_state(AssetScope(name="orders")).get("rows") is None


def test_edit_and_delete_never_overwrite_a_change_they_did_not_see(
    served: Served, page: Page
) -> None:
    seed(served)
    state = served.store.task_state(LOAD)
    page.goto(task_url(served))
    expect(row(page, "job")).to_contain_text("j-1")
    cli = {"kind": "api", "via": "cli", "user": "alice"}
    served.store.task_state(LOAD, writer=cli).set("job", {"id": "j-2"})  # after the page read it
    page.get_by_role("button", name="Edit job").click()
    page.get_by_role("dialog").get_by_label("Value (JSON)").fill('{"id": "mine"}')
    page.get_by_role("dialog").get_by_role("button", name="Save").click()
    conflict = page.get_by_role("alertdialog", name='"job" changed since you read it')
    expect(conflict).to_contain_text('"j-2"')
    expect(conflict).to_contain_text("cli: alice")  # not "user undefined"
    conflict.get_by_role("button", name="Keep the newer value").click()
    expect(page.get_by_role("status")).to_have_text("Kept the newer value of job.")
    assert state.get("job") == {"id": "j-2"}

    page.get_by_role("button", name="Edit job").click()  # the editor read this version ...
    expect(page.get_by_role("dialog")).to_be_visible()
    served.store.task_state(LOAD, writer=cli).set("job", {"id": "j-3"})  # ... which moves on
    page.get_by_role("dialog").get_by_label("Value (JSON)").fill('{"id": "mine"}')
    page.get_by_role("dialog").get_by_role("button", name="Save").click()
    conflict = page.get_by_role("alertdialog", name='"job" changed since you read it')
    expect(conflict).to_contain_text('"j-3"')
    conflict.get_by_role("button", name="Overwrite with mine").click()
    expect(page.get_by_role("status")).to_have_text("Saved job.")
    assert state.get("job") == {"id": "mine"}
    expect(row(page, "job")).to_contain_text("ui: anonymous")

    page.get_by_role("button", name="Delete offset").click()
    served.store.task_state(LOAD, writer=cli).set("offset", {"n": 43})
    page.get_by_role("alertdialog").get_by_role("button", name="Delete key").click()
    conflict = page.get_by_role("alertdialog", name='"offset" changed since you read it')
    expect(conflict).to_contain_text("43")
    conflict.get_by_role("button", name="Keep the newer value").click()
    expect(page.get_by_role("status")).to_have_text("Kept the newer value of offset.")
    assert state.get("offset") == {"n": 43}


def test_sign_in_with_a_token_and_read_only_users_change_nothing(
    secured: Served, page: Page
) -> None:
    seed(secured)
    page.goto(task_url(secured))
    expect(page.get_by_role("heading", name="Sign in to see state")).to_be_visible()
    page.get_by_label("taskstate token", exact=False).fill(
        secured.token(dag_ids=("etl",), read_only=True, subject="viewer")
    )
    page.get_by_role("button", name="Use token").click()
    expect(row(page, "offset")).to_be_visible()
    expect(page.get_by_text("Read-only: you may see this state and its history")).to_be_visible()
    for name in ("Add key", "Clear task instance", "Edit offset", "Delete offset"):
        expect(page.get_by_role("button", name=name)).to_have_count(0)
    # The server refuses what the page hides, with the page's own credentials.
    statuses = page.evaluate(
        """async () => {
            const token = sessionStorage.getItem("taskstate.token");
            const url = "../api/v2/dags/etl/dagRuns/run1/taskInstances/load/state-store";
            const headers = {
                Authorization: `Bearer ${token}`, "Content-Type": "application/json"
            };
            const body = '{"value": 1}';
            const put = await fetch(`${url}/offset`, {method: "PUT", headers, body});
            const del = await fetch(url, {method: "DELETE", headers});
            return [put.status, del.status];
        }"""
    )
    assert statuses == [403, 403]
    assert secured.store.task_state(LOAD).get("offset") == {"n": 42}
    page.goto(secured.ui)  # the token lasts for the tab; its scope limits the listings
    expect(page.get_by_role("link", name="etl")).to_be_visible()
    expect(page.get_by_text("No asset state yet.")).to_be_visible()


def test_phone_width_and_keyboard_only(served: Served, browser: Browser) -> None:
    seed(served)
    context = browser.new_context(viewport=PHONE)
    page = context.new_page()
    page.goto(task_url(served))
    cells = row(page, "offset").locator("td")
    key_box, value_box = cells.nth(0).bounding_box(), cells.nth(1).bounding_box()
    assert key_box and value_box and value_box["y"] > key_box["y"]  # stacked, not side by side
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], "no horizontal scrolling at phone width"
    page.get_by_role("button", name="Edit offset").focus()
    page.keyboard.press("Enter")
    editor = page.get_by_role("dialog", name="Edit offset")
    expect(editor.get_by_label("Value (JSON)")).to_be_focused()
    page.keyboard.press("Control+A")
    page.keyboard.type("7")
    page.keyboard.press("Tab")
    while not editor.get_by_role("button", name="Save").evaluate(
        "b => b === document.activeElement"
    ):
        page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    expect(page.get_by_role("status")).to_have_text("Saved offset.")
    assert served.store.task_state(LOAD).get("offset") == 7
    context.close()


@pytest.mark.parametrize(
    ("path", "run_id", "map_index"),
    [
        ("etl/manual__2026-12-01T00%3A00%3A00%2B00%3A00/load/%7BMAP_INDEX%7D", "", "-1"),
        ("etl/manual__2026-12-01T00:00:00+00:00/load/-1", "", "-1"),  # 3.1 encodes nothing
        ("etl/backfill__x%7Ey/load/2", "backfill__x~y", "2"),
    ],
)
def test_the_airflow_tab_address_leads_to_the_task(
    served: Served, page: Page, path: str, run_id: str, map_index: str
) -> None:
    run_id = run_id or "manual__2026-12-01T00:00:00+00:00"
    served.store.task_state(TaskScope("etl", run_id, "load", int(map_index))).set("k", run_id)
    page.goto(f"{served.ui}ti/{path}")
    expect(row(page, "k").locator("pre")).to_have_text(f'"{run_id}"')
    assert page.url.startswith(served.ui + "?")


def test_on_call_at_scale_jump_zone_pages_filters_dark_and_sign_out(
    secured: Served, browser: Browser
) -> None:
    seed(secured)
    state = secured.store.task_state(LOAD)
    for n in range(30):
        state.set(f"k{n:02d}", n)
    secured.store.asset_state(AssetScope(name="orders")).set("rows", 1)
    secured.store.task_state(TaskScope("secret", "run1", "t", -1)).set("k", 1)
    context = browser.new_context(color_scheme="dark", timezone_id="Asia/Tokyo")
    page = context.new_page()
    page.goto(secured.ui)
    page.get_by_label("taskstate token", exact=False).fill(
        secured.token(dag_ids=("etl*", "billing"), assets=("orders",), subject="oncall")
    )
    page.get_by_role("button", name="Use token").click()
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(13, 17, 23)"  # prefers-color-scheme: dark

    for dag in ("etl_daily", "etl_hourly", "billing"):
        secured.store.task_state(TaskScope(dag, "r", "t", -1)).set("k", 1)
    page.get_by_label("Search DAGs").fill("ETL_")
    page.keyboard.press("Enter")
    expect(page.get_by_text("2 DAGs match")).to_be_visible()
    expect(page.get_by_role("link", name="etl_hourly")).to_be_visible()
    expect(page.get_by_role("link", name="billing")).to_have_count(0)
    page.get_by_label("Go to DAG, run or task").fill("etl run1 load")
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Task state: load")).to_be_visible()
    updated = row(page, "k00").locator("td").nth(2)
    iso = updated.locator("time").get_attribute("datetime")
    assert iso is not None
    expect(updated).to_have_text(f"{iso[:10]} {iso[11:19]} UTC")  # UTC, labelled, by default
    page.get_by_label("Times").select_option("local")
    expect(row(page, "k00").locator("td").nth(2)).to_contain_text("GMT+9")  # Tokyo, labelled

    page.get_by_role("button", name="Next").click()
    expect(page.get_by_text("26–33 of 33")).to_be_visible()
    assert "offset=25" in page.url
    page.reload()  # the page number is in the address
    expect(page.get_by_text("26–33 of 33")).to_be_visible()

    page.goto(f"{secured.ui}?asset=orders")
    page.get_by_label("Filter keys (prefix)").fill("wat")
    expect(row(page, "rows")).to_have_count(0)
    expect(row(page, "watermark")).to_be_visible()
    assert "key_prefix=wat" in page.url

    page.goto(f"{secured.ui}?dag_id=secret&run_id=run1&task_id=t")
    expect(page.get_by_role("alert")).to_contain_text("You may not see this task instance's state")
    page.get_by_role("button", name="Use another token").click()
    expect(page.get_by_role("heading", name="Sign in to see state")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('taskstate.token')") is None
    context.close()


def test_history_panel_shows_who_when_and_restores_behind_confirmation_and_if_match(
    served: Served, page: Page
) -> None:
    seed(served)
    state = served.store.task_state(LOAD)
    cli = {"kind": "api", "via": "cli", "user": "alice"}
    served.store.task_state(LOAD, writer=cli).set("offset", {"n": 999})  # the bad write
    page.goto(task_url(served))
    page.get_by_role("button", name="History of offset").click()
    panel = page.get_by_role("dialog", name="History of offset")
    rows = panel.locator("tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("999")
    expect(rows.nth(0)).to_contain_text("cli: alice")
    expect(rows.nth(0)).to_contain_text("current")
    expect(rows.nth(1)).to_contain_text("task etl.load, run run1")
    expect(rows.nth(1).locator('td[data-label="Operation"]')).to_have_text("set")
    expect(rows.nth(1).locator('td[data-label="Updated at"] time')).to_have_attribute(
        "datetime", re.compile(r"^\d{4}-\d\d-\d\dT")
    )
    panel.get_by_role("button", name="Restore version 1").click()
    confirm = page.get_by_role("alertdialog", name='Restore "offset" to version 1?')
    expect(confirm.get_by_role("button", name="Cancel")).to_be_focused()
    confirm.get_by_role("button", name="Restore version").click()
    expect(page.get_by_role("status")).to_have_text("Restored offset to version 1.")
    assert state.get("offset") == {"n": 42}
    newest = state.history("offset", 1)[0]
    assert (newest.version, newest.op) == (3, "restore")
    assert newest.updated_by == {"kind": "api", "via": "ui", "subject": "anonymous"}
    expect(row(page, "offset")).to_contain_text("ui: anonymous")

    # A write the page did not see: the restore is refused (If-Match) and the newer value shown.
    page.get_by_role("button", name="History of offset").click()
    served.store.task_state(LOAD, writer=cli).set("offset", {"n": 7})
    page.get_by_role("dialog", name="History of offset").get_by_role(
        "button", name="Restore version 2"
    ).click()
    page.get_by_role("alertdialog").get_by_role("button", name="Restore version").click()
    conflict = page.get_by_role("alertdialog", name='"offset" changed since you read it')
    expect(conflict).to_contain_text("7")
    conflict.get_by_role("button", name="Keep the newer value").click()
    expect(page.get_by_role("status")).to_have_text("Kept the newer value of offset.")
    assert state.get("offset") == {"n": 7}
    assert state.history("offset", 1)[0].version == 4  # the refused restore added none

    orders = served.store.asset_state(AssetScope(name="orders"))
    orders.set("watermark", "2026-02-01")
    page.goto(served.ui + "?asset=orders")
    page.get_by_role("button", name="History of watermark").click()
    page.get_by_role("dialog", name="History of watermark").get_by_role(
        "button", name="Restore version 1"
    ).click()
    page.get_by_role("alertdialog").get_by_role("button", name="Restore version").click()
    expect(page.get_by_role("status")).to_have_text("Restored watermark to version 1.")
    assert orders.get("watermark") == "2026-01-01"


def test_history_diff_of_any_two_versions_marks_what_changed(served: Served, page: Page) -> None:
    seed(served)
    state = served.store.task_state(LOAD)
    state.set("offset", {"n": 999, "extra": [1]})
    state.set("offset", {"extra": [1], "n": 7})  # the same keys reordered: only n differs
    page.goto(task_url(served))
    page.get_by_role("button", name="History of offset").click()
    panel = page.get_by_role("dialog", name="History of offset")
    diff = panel.get_by_role("region", name=re.compile("Changes from version"))
    # By default the newest against the one before it.
    expect(diff.get_by_role("heading")).to_have_text("Changes from version 2 to version 3")
    expect(diff.locator("del")).to_have_text(['-   "n": 999'])
    expect(diff.locator("ins")).to_have_text(['+   "n": 7'])
    expect(diff).to_contain_text("1 line removed (−), 1 added (+)")
    # Any two, by keyboard: the From radio group moves down to version 1 with an arrow key.
    panel.get_by_role("radio", name="Compare from version 2").focus()
    page.keyboard.press("ArrowDown")
    expect(panel.get_by_role("radio", name="Compare from version 1")).to_be_checked()
    expect(diff.get_by_role("heading")).to_have_text("Changes from version 1 to version 3")
    expect(diff.locator("del")).to_have_text(['-   "n": 42'])
    expect(diff.locator("ins")).to_have_text(['+   "extra": [', "+     1", "+   ],", '+   "n": 7'])
    panel.get_by_role("radio", name="Compare to version 1").check()
    expect(diff).to_contain_text("The two values are the same.")
    # A deletion reads as one line saying so.
    state.delete("offset")
    state.set("offset", 1)
    page.reload()
    page.get_by_role("button", name="History of offset").click()
    expect(diff.locator("del")).to_have_text(["- (deleted: no value)"])
    expect(diff.locator("ins")).to_have_text(["+ 1"])


def test_restore_state_as_of_undoes_a_clear_after_a_preview(served: Served, page: Page) -> None:
    seed(served)
    load = served.store.task_state(LOAD)
    for n in range(21):  # offset's first version falls out of the 20 kept
        load.set("offset", {"n": n})
    load.set("offset", {"n": 43})
    good = math.ceil(time.time())  # a whole second after the seed: the input's precision
    time.sleep(max(0.0, good - time.time()) + 0.05)
    cli = {"kind": "api", "via": "cli", "user": "alice"}
    served.store.task_state(LOAD, writer=cli).clear()  # the mistake
    served.store.task_state(LOAD).set("fresh", 1)  # written since: the restore deletes it
    page.goto(task_url(served))
    expect(row(page, "fresh")).to_be_visible()
    page.get_by_role("button", name="Restore state as of…").click()
    dialog = page.get_by_role("dialog", name="Restore state as of…")
    instant = dialog.get_by_label("Instant (UTC)")
    expect(instant).to_be_focused()

    instant.fill("yesterday")
    dialog.get_by_role("button", name="Preview").click()
    expect(dialog.get_by_role("alert")).to_contain_text("as YYYY-MM-DD HH:MM:SS (UTC)")
    # An instant past what history still holds is a clear message, not a wrong restore.
    instant.fill("2020-01-01T00:00:00")
    dialog.get_by_role("button", name="Preview").click()
    gone = "The history no longer reaches that instant"
    expect(dialog.get_by_role("alert")).to_contain_text(gone)
    expect(dialog.get_by_role("button", name="Restore…")).to_be_disabled()

    # As the History panel writes times, so one can be pasted from it.
    instant.fill(datetime.fromtimestamp(good, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"))
    dialog.get_by_role("button", name="Preview").click()
    expect(dialog).to_contain_text(
        "3 keys come back, 0 keys change back, 1 key is deleted, 0 unchanged."
    )
    changes = dialog.get_by_role("table")
    expect(changes.locator("tr", has_text="fresh")).to_contain_text("deleted (created since)")
    expect(changes.locator("tr", has_text="offset")).to_contain_text("comes back")
    assert load.get("fresh") == 1  # the preview wrote nothing
    dialog.get_by_role("button", name="Restore…").click()
    confirm = page.get_by_role("alertdialog", name=re.compile("Restore the state of task load"))
    expect(confirm.get_by_role("button", name="Cancel")).to_be_focused()
    load.set("fresh", 2)  # a write after the preview: what it showed is no longer so
    confirm.get_by_role("button", name="Restore state").click()
    expect(page.get_by_role("alert")).to_contain_text("The state changed since the preview")
    assert load.get("fresh") == 2 and load.get("offset") is None  # nothing restored

    page.get_by_role("button", name="Restore state as of…").click()
    instant.fill(datetime.fromtimestamp(good, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    dialog.get_by_role("button", name="Preview").click()
    expect(changes.locator("tr", has_text="fresh")).to_contain_text("deleted (created since)")
    dialog.get_by_role("button", name="Restore…").click()
    confirm.get_by_role("button", name="Restore state").click()
    done = re.compile(r"^Restored 3 keys of task load as of ")
    expect(page.get_by_role("status")).to_have_text(done)
    assert dict(load.items()) == {"offset": {"n": 43}, "big": {"rows": list(range(200))},
                                  "job": {"id": "j-1"}}  # fmt: skip
    ui = {"kind": "api", "via": "ui", "subject": "anonymous"}
    assert load.history("job", 1)[0].updated_by == ui
    expect(row(page, "job")).to_be_visible()

    # Every map index at once, from the "All map indices" view: nothing changed since then.
    page.goto(task_url(served, "mapped", "all"))
    page.get_by_role("button", name="Restore state as of…").click()
    instant.fill(datetime.fromtimestamp(good, timezone.utc).strftime("%Y-%m-%d %H:%M:%S"))
    dialog.get_by_role("button", name="Preview").click()
    expect(dialog).to_contain_text("0 keys are deleted, 3 unchanged.")
    expect(changes.locator("tbody tr").first).to_contain_text("0part")  # map index, key
    expect(dialog.get_by_role("button", name="Restore…")).to_be_disabled()


def test_read_only_users_see_history_but_no_restore(secured: Served, page: Page) -> None:
    seed(secured)
    secured.store.task_state(LOAD).set("offset", {"n": 43})
    page.goto(task_url(secured))
    page.get_by_label("taskstate token", exact=False).fill(
        secured.token(dag_ids=("etl",), read_only=True, subject="viewer")
    )
    page.get_by_role("button", name="Use token").click()
    page.get_by_role("button", name="History of offset").click()
    panel = page.get_by_role("dialog", name="History of offset")
    expect(panel.locator("tbody tr")).to_have_count(2)
    expect(panel.get_by_role("button", name="Restore", exact=False)).to_have_count(0)
    panel.get_by_role("button", name="Close").click()
    expect(panel).to_be_hidden()
    # Nor the task instance's restore as of: the page says why, and the server refuses it.
    expect(page.get_by_role("button", name="Restore state as of…")).to_have_count(0)
    expect(page.get_by_text("not change or restore it")).to_be_visible()
    status = page.evaluate(
        """async () => {
            const url = "../api/v2/dags/etl/dagRuns/run1/taskInstances/load/taskstate-history";
            const response = await fetch(url, {method: "POST", headers: {
                Authorization: `Bearer ${sessionStorage.getItem("taskstate.token")}`,
                "Content-Type": "application/json"}, body: '{"as_of": "2026-01-01T00:00:00Z"}'});
            return response.status;
        }"""
    )
    assert status == 403
    assert secured.store.task_state(LOAD).get("offset") == {"n": 43}


def test_dag_search_asks_the_server_for_one_page_at_a_time(served: Served, page: Page) -> None:
    """Issue 30 at scale: the search box sends `dag_id_pattern` (the text as typed, LIKE's
    wildcards escaped) and shows the server's page, with the search and page in the address;
    the browser never fetches every DAG."""
    for n in range(60):
        served.store.task_state(TaskScope(f"orders_{n:02d}", "r", "t")).set("k", n)
    for dag in ("ordersx", "billing"):  # "ORDERS_" must not find them (`_` is not a wildcard)
        served.store.task_state(TaskScope(dag, "r", "t")).set("k", 1)
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/api/v2/dags?" in r.url else None)
    page.goto(served.ui)
    expect(page.get_by_text("1–25 of more than 25")).to_be_visible()  # counts only one page
    page.get_by_label("Search DAGs").fill("ORDERS_")
    page.keyboard.press("Enter")
    expect(page.get_by_text("More than 25 DAGs match")).to_be_visible()
    expect(page.get_by_text("1–25 of more than 25")).to_be_visible()
    expect(page.get_by_role("link", name="orders_24")).to_be_visible()
    expect(page.get_by_role("link", name="ordersx")).to_have_count(0)
    page.get_by_role("button", name="Next").click()
    # Exact or a lower bound, as the server found it (a rejected id makes it look further).
    expect(page.get_by_text(re.compile(r"^26–50 of (more than 50|60)$"))).to_be_visible()
    assert "q=ORDERS_" in page.url and "offset=25" in page.url
    page.reload()
    expect(page.get_by_role("link", name="orders_49")).to_be_visible()
    expect(page.get_by_role("link", name="orders_50")).to_have_count(0)
    page.get_by_role("button", name="Next").click()
    expect(page.get_by_text("60 DAGs match")).to_be_visible()  # the last page: exact
    expect(page.get_by_text("51–60 of 60")).to_be_visible()
    page.get_by_label("Search DAGs").fill("no such dag")
    page.keyboard.press("Enter")
    expect(page.get_by_text('No DAG you may see has "no such dag" in its id.')).to_be_visible()
    queries = [parse_qs(urlsplit(url).query) for url in asked]
    searches = [q for q in queries if "dag_id_pattern" in q]
    assert len(searches) == 5, asked  # first page, next, reload, last, no match
    assert {q["dag_id_pattern"][0] for q in searches} == {"ORDERS\\_", "no such dag"}
    assert all(q["limit"] == ["25"] for q in queries), asked  # one page, never all of them


def test_a_dag_or_run_the_token_does_not_cover_says_so(secured: Served, page: Page) -> None:
    """Issue 30: a token that may not see a DAG was told "No run of this DAG holds state"."""
    seed(secured)
    secured.store.task_state(TaskScope("secret", "run1", "t", -1)).set("k", 1)
    secured.store.task_state(TaskScope("etl", "run2", "load", -1)).set("k", 1)
    page.goto(secured.ui)
    page.get_by_label("taskstate token", exact=False).fill(
        secured.token(dag_ids=("etl*",), run_id="run1", subject="oncall")
    )
    page.get_by_role("button", name="Use token").click()
    expect(page.get_by_role("link", name="etl")).to_be_visible()
    page.goto(f"{secured.ui}?dag_id=secret")
    expect(page.get_by_role("heading", name="Runs of secret with state")).to_be_visible()
    expect(page.get_by_role("alert")).to_have_text(
        "You may not see the state of DAG secret: your token or role does not cover it. "
        "Ask for one that names it, or use another token."
    )
    expect(page.get_by_text("No run of this DAG holds state")).to_have_count(0)
    page.goto(f"{secured.ui}?dag_id=etl&run_id=run2")
    expect(page.get_by_role("alert")).to_contain_text(
        "You may not see the state of run run2 of DAG etl"
    )
    page.goto(f"{secured.ui}?dag_id=etl")  # its DAG: only its run is listed, no refusal
    expect(page.get_by_role("link", name="run1")).to_be_visible()
    expect(page.get_by_role("link", name="run2")).to_have_count(0)
    expect(page.get_by_role("alert")).to_have_text("")
    page.goto(f"{secured.ui}?dag_id=etl_empty")  # may see it, holds nothing
    expect(page.get_by_text("No run of this DAG holds state that you may see.")).to_be_visible()


HOST = (
    '<!doctype html><html class="{theme}"><body style="margin:0">'
    '<iframe src="/taskstate/ui/" style="width:900px;height:600px;border:0"></iframe>'
    "</body></html>"
)


def test_dark_follows_airflows_theme_inside_its_frame(served: Served, browser: Browser) -> None:
    """Issue 30: inside Airflow 3 the page follows Airflow's own theme switch (its theme
    library's `dark` / `light` class on the top page), not only the system's. The host page is
    served from the same origin, as Airflow's is (tests/airflow/test_ui_airflow.py: the real
    one)."""
    seed(served)
    context = browser.new_context(color_scheme="dark")  # the system says dark
    page = context.new_page()
    page.route(
        f"{served.base}/airflow",
        lambda route: route.fulfill(content_type="text/html", body=HOST.format(theme="light")),
    )
    page.goto(f"{served.base}/airflow")
    frame = page.frame_locator("iframe")
    body = frame.locator("body")
    expect(frame.get_by_role("link", name="etl")).to_be_visible()
    expect(body).to_have_css("background-color", "rgb(255, 255, 255)")  # Airflow's light wins
    page.evaluate("document.documentElement.className = 'dark'")  # Airflow's switch flips
    expect(body).to_have_css("background-color", "rgb(13, 17, 23)")
    expect(frame.locator("#ts-app")).to_have_css("color", "rgb(230, 237, 243)")
    page.evaluate("document.documentElement.className = 'light'")
    expect(body).to_have_css("background-color", "rgb(255, 255, 255)")
    page.evaluate("document.documentElement.className = ''")  # no choice of Airflow's: the system's
    expect(body).to_have_css("background-color", "rgb(13, 17, 23)")
    standalone = context.new_page()  # on its own, the system's dark as before
    standalone.goto(served.ui)
    expect(standalone.locator("body")).to_have_css("background-color", "rgb(13, 17, 23)")
    context.close()
