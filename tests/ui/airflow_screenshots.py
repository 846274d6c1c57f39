"""The Airflow half of tests/ui/screenshots.py: each version's deployment (tests/airflow/
deployment.py), one `ts_ui` run, and the views where a user meets the pages there."""

from __future__ import annotations

import tempfile
from pathlib import Path
from urllib.parse import quote

from playwright.sync_api import Browser, expect
from tests.airflow.deployment import Deployments
from tests.airflow.test_ui_airflow import signed_in, state_view
from tests.ui.screenshots import shoot


def airflow_views(browser: Browser, versions: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        deployments = Deployments(Path(tmp))
        try:
            for version in versions:
                deployment = deployments.get(version)
                run_id = deployment.trigger("ts_ui")
                deployment.wait_for_run("ts_ui", run_id)
                name = f"ui-airflow-{version.replace('.', '')}"
                with signed_in(browser, deployment, "admin") as context:
                    page = context.new_page()
                    view = state_view(page, deployment, run_id, "load")
                    expect(view.locator("td.ts-key", has_text="offset")).to_be_visible()
                    shoot(page, f"{name}-task")
                    if deployment.major >= 3:
                        page.goto("/plugin/taskstate")
                        frame = page.frame_locator("iframe")
                        expect(frame.get_by_role("link", name="ts_ui")).to_be_visible()
                    else:
                        page.goto("/taskstate-ui/assets")
                        expect(
                            page.get_by_role("heading", name="Assets with state")
                        ).to_be_visible()
                    shoot(page, f"{name}-browse")
                if deployment.major >= 3:  # Airflow's own dark theme, followed by the tab
                    with signed_in(browser, deployment, "admin") as context:
                        page = context.new_page()
                        page.goto("/")
                        page.evaluate("localStorage.setItem('theme', 'dark')")
                        view = state_view(page, deployment, run_id, "export", map_index=0)
                        expect(view.locator("td.ts-key", has_text="cursor")).to_be_visible()
                        shoot(page, f"{name}-dark")
                with signed_in(browser, deployment, "viewer") as context:
                    page = context.new_page()
                    view = state_view(page, deployment, run_id, "export", map_index=1)
                    expect(view.get_by_text("Read-only")).to_be_visible()
                    shoot(page, f"{name}-read-only")
                print(f"run {quote(run_id)} on Airflow {version}")
        finally:
            deployments.stop_all()
