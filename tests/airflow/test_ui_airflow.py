"""The state pages inside real Airflow, in real Chromium, after a real DAG run wrote state, on
every version that hosts them: the "Task State" tab of Airflow 3.1 and 3.2 (an iframe on the
task-instance page), the page by URL on Airflow 3.0 (signed in through the token Airflow's UI
keeps in `localStorage`), and the view and extra link of Airflow 2.10 and 2.11. Sign in, see
the values, edit, delete, clear, each change checked through the Python store; a read-only user
changes nothing; bad JSON shows the error and writes nothing. One deployment per version
(tests/airflow/deployment.py), shared with the API tests."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from playwright.sync_api import Browser, BrowserContext, FrameLocator, Locator, Page, expect
from tests.airflow.deployment import USERS, Deployment, Deployments
from tests.airflow.harness import not_selected, versions
from tests.ui.browser import DESKTOP, launched

from taskstate.scope import TaskScope

# The first test may start the deployment (its CLI setup, then up to 240 s) and wait for a run.
pytestmark = [pytest.mark.airflow, pytest.mark.timeout(1200)]

HOSTED = ("3.2", "2.11", "3.1", "3.0", "2.10")  # as tests/airflow/test_api_plugin.py
HOSTS = [v for v in HOSTED if v in versions()] or ["none"]
# Airflow 3's own theme switch (Airflow 2 has none): not collected for 2.x.
AIRFLOW3_HOST = [v for v in ("3.2",) if v in versions()] or ["none-3.2"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with launched() as browser:
        yield browser


@pytest.fixture(scope="module", params=HOSTS)
def deployment(request: pytest.FixtureRequest, deployments: Deployments) -> Deployment:
    if request.param == "none":
        pytest.skip(not_selected(HOSTED))
    if request.param == "none-3.2":
        pytest.skip(not_selected(["3.2"]))
    return deployments.get(request.param)


_runs: dict[str, str] = {}


@pytest.fixture
def run_id(deployment: Deployment) -> str:
    """One finished `ts_ui` run per deployment."""
    if deployment.version not in _runs:
        run = deployment.trigger("ts_ui")
        deployment.wait_for_run("ts_ui", run)
        _runs[deployment.version] = run
    return _runs[deployment.version]


def signed_in(
    browser: Browser, deployment: Deployment, user: str, **options: Any
) -> BrowserContext:
    context = browser.new_context(viewport=DESKTOP, base_url=deployment.base_url, **options)
    context.set_default_timeout(30_000)
    page = context.new_page()
    if deployment.major >= 3:  # the simple auth manager's sign-in page, which sets `_token`
        page.goto("/auth/login")
        page.get_by_label("Username").fill(user)
        page.get_by_label("Password").fill(USERS[user])
        page.get_by_role("button", name=re.compile("sign in|log ?in", re.IGNORECASE)).click()
        page.wait_for_url(lambda url: "/auth/login" not in url)
        if deployment.version == "3.0":  # its UI moves the `_token` cookie into localStorage
            page.wait_for_function("() => localStorage.getItem('token')")
            assert not any(cookie["name"] == "_token" for cookie in context.cookies())
        else:
            assert any(cookie["name"] == "_token" for cookie in context.cookies())
    else:  # Flask AppBuilder's sign-in form
        page.goto("/login/")
        page.locator("#username").fill(user)
        page.locator("#password").fill(USERS[user])
        page.locator("input[type=submit], button[type=submit]").first.click()
        page.wait_for_url(lambda url: "/login" not in url)
    page.close()
    return context


def state_view(
    page: Page, deployment: Deployment, run_id: str, task_id: str, map_index: int = -1
) -> FrameLocator | Page:
    """The task instance's state where a user finds it: the tab (3.1+), the page by URL (3.0,
    which has no tab: the page reads Airflow's token from localStorage), the extra link (2.x)."""
    if deployment.version == "3.0":
        query = {"dag_id": "ts_ui", "run_id": run_id, "task_id": task_id, "map_index": map_index}
        page.goto(f"/taskstate/ui/?{urlencode(query)}")
        return page
    if deployment.major >= 3:
        mapped = "" if map_index < 0 else f"/mapped/{map_index}"
        page.goto(f"/dags/ts_ui/runs/{quote(run_id, safe='')}/tasks/{task_id}{mapped}")
        tab = page.get_by_role("tab", name="Task State").or_(
            page.get_by_role("link", name="Task State")
        )
        tab.first.click()
        return page.frame_locator("iframe")
    query = {
        "dag_id": "ts_ui", "task_id": task_id, "link_name": "Task State", "map_index": map_index,
        "execution_date": execution_date(deployment, run_id),
    }  # fmt: skip
    link = page.request.get("/extra_links", params=query)
    assert link.ok, link.text()
    page.goto(link.json()["url"])
    return page


def execution_date(deployment: Deployment, run_id: str) -> str:
    with deployment.client("admin") as http:
        return str(http.get(f"/api/v1/dags/ts_ui/dagRuns/{run_id}").json()["execution_date"])


def row(view: FrameLocator | Page, key: str) -> Locator:
    return view.locator("#ts-entries tbody tr").filter(has=view.locator("td.ts-key", has_text=key))


def test_admin_sees_edits_deletes_and_clears(
    browser: Browser, deployment: Deployment, run_id: str
) -> None:
    load = TaskScope("ts_ui", run_id, "load", -1)
    with signed_in(browser, deployment, "admin") as context:
        page = context.new_page()
        view = state_view(page, deployment, run_id, "load")
        expect(row(view, "offset").locator("pre")).to_have_text("48213")
        expect(row(view, "note")).to_contain_text("task ts_ui.load")

        view.get_by_role("button", name="Edit offset").click()
        editor = view.get_by_role("dialog", name="Edit offset")
        editor.get_by_label("Value (JSON)").fill("{bad json")
        editor.get_by_role("button", name="Save").click()
        expect(editor.get_by_role("alert")).to_contain_text("not valid JSON")
        with deployment.home.store() as store:
            assert store.task_state(load).get("offset") == 48213
        editor.get_by_label("Value (JSON)").fill("100")
        editor.get_by_role("button", name="Save").click()
        expect(editor).to_be_hidden()
        with deployment.home.store() as store:
            entry = store.task_state(load).entry("offset")
            assert entry is not None and entry.value == 100
            assert entry.updated_by == {"kind": "api", "via": "ui", "subject": "admin"}

        view.get_by_role("button", name="Delete job").click()
        view.get_by_role("alertdialog").get_by_role("button", name="Delete key").click()
        expect(row(view, "job")).to_have_count(0)
        with deployment.home.store() as store:
            assert store.task_state(load).get("job") is None
            assert store.task_state(load).get("note") == "written by the DAG run"

        # Then the undo of the clear, through Airflow's authorisation (and CSRF on 2.x): on one
        # version of each (the page and its writes are the same on the others; suite time).
        restores = deployment.version in ("3.2", "2.11")
        good = math.ceil(time.time())  # a whole second before the clear: the input's precision
        if restores:
            time.sleep(max(0.0, good - time.time()) + 0.05)
        view.get_by_role("button", name="Clear task instance").click()
        view.get_by_role("alertdialog").get_by_role("button", name="Clear task instance").click()
        expect(view.get_by_text("This task instance holds no state.")).to_be_visible()
        with deployment.home.store() as store:
            assert store.task_state(load).keys() == []
            mapped = TaskScope("ts_ui", run_id, "export", 1)
            assert store.task_state(mapped).get("cursor") == {"page": 2}  # other tasks kept

        if not restores:
            return
        view.get_by_role("button", name="Restore state as of…").click()
        dialog = view.get_by_role("dialog", name="Restore state as of…")
        instant = datetime.fromtimestamp(good, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        dialog.get_by_label("Instant (UTC)").fill(instant)
        dialog.get_by_role("button", name="Preview").click()
        expect(dialog).to_contain_text("keys come back")
        dialog.get_by_role("button", name="Restore…").click()
        view.get_by_role("alertdialog").get_by_role("button", name="Restore state").click()
        expect(row(view, "offset").locator("pre")).to_have_text("100")
        with deployment.home.store() as store:
            assert store.task_state(load).get("offset") == 100
            assert store.task_state(load).get("note") == "written by the DAG run"
            assert store.task_state(load).get("job") is None  # deleted before that instant


def test_a_read_only_user_sees_state_and_changes_nothing(
    browser: Browser, deployment: Deployment, run_id: str
) -> None:
    export = TaskScope("ts_ui", run_id, "export", 0)
    with signed_in(browser, deployment, "viewer") as context:
        page = context.new_page()
        view = state_view(page, deployment, run_id, "export", map_index=0)
        expect(row(view, "cursor").locator("pre")).to_contain_text('"page": 1')
        expect(view.get_by_text("Read-only")).to_be_visible()
        for name in (
            "Add key",
            "Clear task instance",
            "Edit cursor",
            "Delete cursor",
            "Restore state as of…",
        ):
            expect(view.get_by_role("button", name=name)).to_have_count(0)
        url = (f"/taskstate/api/v2/dags/ts_ui/dagRuns/{quote(run_id, safe='')}/taskInstances/"
               "export/state-store/cursor?map_index=0")  # fmt: skip
        status = page.evaluate(
            """async (url) => {
                const csrf = document.getElementById("ts-app")?.dataset.csrf || "";
                const headers = {"Content-Type": "application/json", "X-CSRFToken": csrf};
                const token = localStorage.getItem("token");  // Airflow 3.0's UI keeps it here
                if (token) headers.Authorization = `Bearer ${token}`;
                const response = await fetch(url, {method: "PUT", body: '{"value": 1}', headers});
                return response.status;
            }""",
            url,
        )
        assert status == 403
    with deployment.home.store() as store:
        assert store.task_state(export).get("cursor") == {"page": 1}


@pytest.mark.parametrize("deployment", AIRFLOW3_HOST, indirect=True)
def test_the_tab_follows_airflows_theme_not_only_the_systems(
    browser: Browser, deployment: Deployment, run_id: str
) -> None:
    """Issue 30: "no dark theme inside Airflow 3's dark UI". The system says dark; Airflow's
    own choice (kept in localStorage `theme`) decides inside its tab, and a switch made
    elsewhere (another tab: Airflow's page follows it) flips the open tab too."""
    light, dark = "rgb(255, 255, 255)", "rgb(13, 17, 23)"
    with signed_in(browser, deployment, "admin", color_scheme="dark") as context:
        page = context.new_page()
        page.goto("/")
        page.evaluate("localStorage.setItem('theme', 'light')")
        view = state_view(page, deployment, run_id, "export", map_index=0)
        expect(row(view, "cursor")).to_be_visible()
        assert page.evaluate("document.documentElement.classList.contains('light')")
        expect(view.locator("body")).to_have_css("background-color", light)
        other = context.new_page()  # the switch in another tab: a `storage` event here
        other.goto("/taskstate/health/live")
        for theme, background in (("dark", dark), ("light", light)):
            other.evaluate("theme => localStorage.setItem('theme', theme)", theme)
            expect(page.locator("html")).to_have_class(re.compile(rf"\b{theme}\b"))
            expect(view.locator("body")).to_have_css("background-color", background)
