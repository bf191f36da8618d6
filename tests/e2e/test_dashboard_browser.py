"""The Ray dashboard, in a real (headless) Chromium, lists a job dlrun submitted and shows its metadata.

Needs Debian's `chromium` + `chromium-driver` (CI's .ci/run installs them) and selenium (test extra);
without them the test is skipped and says why. Screenshots are saved under the test's tmp_path.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.support.browser import browser  # noqa: F401 (the module's Chromium)

pytestmark = [pytest.mark.browser, pytest.mark.ray]


@pytest.fixture(scope="module")
def job(monitored_job):
    """The digits-cnn job the monitoring tests read (tests/conftest.py): any job dlrun submitted will do."""
    return monitored_job


def _wait_text(drv, needles: list[str], timeout: float = 45.0) -> str:
    """The page's visible text once every needle is in it (the dashboard is a React app that polls)."""
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        try:
            text = drv.find_element(By.TAG_NAME, "body").text
        except Exception:
            text = ""
        if all(n in text for n in needles):
            return text
        time.sleep(0.5)
    raise AssertionError(f"not shown within {timeout:.0f} s: {[n for n in needles if n not in text]}\n"
                         f"page text:\n{text[:3000]}")


def test_jobs_page_lists_the_job_and_detail_shows_metadata(browser, ray_head, job, tmp_path):  # noqa: F811
    from infra.login import LoginLink
    from selenium.webdriver.common.by import By

    sub = job["ray_submission_id"]
    # the head runs with token auth: without a login the dashboard's API refuses the browser
    browser.get(f"{ray_head.dashboard_url}/api/version")
    browser.delete_all_cookies()
    browser.get(f"{ray_head.dashboard_url}/api/jobs/")
    assert "Unauthorized" in browser.find_element(By.TAG_NAME, "body").text
    # `dlrun dashboard`'s one-use link logs it in and lands on the page it names
    token = Path(os.environ["RAY_AUTH_TOKEN_PATH"]).read_text().strip()
    with LoginLink(f"{ray_head.dashboard_url}/#/jobs", token) as link:
        assert token not in link.url
        browser.get(link.url)
        assert link.wait(0)
        try:
            text = _wait_text(browser, [sub])
        finally:
            browser.save_screenshot(str(tmp_path / "jobs.png"))
        assert browser.current_url.startswith(ray_head.dashboard_url)
        browser.get(link.url)  # used once: no second login
        assert "already used" in browser.find_element(By.TAG_NAME, "body").text
    row = next(line for line in text.splitlines() if sub in line)
    assert "SUCCEEDED" in text, row
    assert "jobs.cnn" in text  # the entrypoint column

    browser.get(f"{ray_head.dashboard_url}/#/jobs/{sub}")
    try:
        text = _wait_text(browser, ["User-provided metadata", sub, job["job_id"]])
    finally:
        browser.save_screenshot(str(tmp_path / "job-detail.png"))
    # the metadata block is the JSON dlrun sent: every value a string
    for key, value in (("dlrun_job_id", job["job_id"]), ("backend", "local"), ("gpu", "CPU"),
                       ("spot", "false"), ("attempt", "1")):
        assert f'"{key}": "{value}"' in text, (key, text[:3000])
    assert '"est_cost": "' in text and '"max_cost": "5.0"' in text
    assert "SUCCEEDED" in text

    # "Expand" opens the metadata in a dialog (the inline preview is cut to one line)
    expand = browser.find_elements(By.XPATH, "//*[normalize-space(text())='Expand']")
    assert expand, "no Expand button next to the metadata"
    expand[-1].click()
    deadline, dialog = time.monotonic() + 15, ""
    while time.monotonic() < deadline and "dlrun_job_id" not in dialog:
        dialog = " ".join(d.text for d in browser.find_elements(By.CSS_SELECTOR, "[role=dialog]"))
        time.sleep(0.3)
    browser.save_screenshot(str(tmp_path / "job-metadata.png"))
    assert f'"dlrun_job_id": "{job["job_id"]}"' in dialog and '"est_hours": "' in dialog, dialog
    assert (tmp_path / "jobs.png").stat().st_size > 10_000
    assert (tmp_path / "job-detail.png").stat().st_size > 10_000
