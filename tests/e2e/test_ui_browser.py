"""`dlrun ui` in a real (headless) Chromium: the jobs page filtered, a job's plan chart and curves drawn, a
name holding HTML shown as text; a real local job followed live without a reload and cancelled from its page.

One browser for the module, the session's Ray head; `dlrun ui` runs as a process, as a user runs it. Needs
Debian's `chromium` + `chromium-driver` and selenium (as tests/e2e/test_dashboard_browser.py); without them
the tests are skipped and say why.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.browser import browser  # noqa: F401 (the module's Chromium)

from orchestrator.state.db import default_store
from tests.support.ui_seed import HOSTILE, seed_pages

pytestmark = [pytest.mark.browser, pytest.mark.ray]


ROOT = Path(__file__).resolve().parents[2]
@pytest.fixture
def ui_url(dlrun_home):
    """`dlrun ui --port 0` over this test's $DLRUN_HOME: the URL it printed (with its token)."""
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli.main", "ui", "--port", "0"], cwd=ROOT,
                            env=dict(os.environ, DLRUN_HOME=str(dlrun_home)), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    timer = threading.Timer(30, proc.kill)
    timer.start()
    line = proc.stderr.readline() if proc.stderr else ""
    timer.cancel()
    m = re.search(r"http://127\.0\.0\.1:\d+/\?token=[0-9a-f]+", line)
    assert m, f"dlrun ui printed: {line!r}"
    yield m.group(0)
    proc.terminate()
    proc.wait(timeout=10)


def _until(what: str, check, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = check()
        except Exception:  # the page is between two renders
            got = None
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not seen within {timeout:.0f} s: {what}")
        time.sleep(0.25)


def _rows(drv) -> list[str]:
    from selenium.webdriver.common.by import By

    return [r.find_element(By.CSS_SELECTOR, "td:nth-child(2)").text
            for r in drv.find_elements(By.CSS_SELECTOR, "#jobs tbody tr")]


def _no_alert(drv) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    with pytest.raises(NoAlertPresentException):
        drv.switch_to.alert.text  # noqa: B018  (a script of the seeded HTML would have opened one)


def test_jobs_page_filters_and_a_job_page_draws_its_plan_and_curves(browser, ui_url):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    seeded = seed_pages(default_store(), nights=3)
    browser.get(ui_url)
    _until("every job listed", lambda: len(_rows(browser)) == 5)
    assert _rows(browser)[0] == HOSTILE  # the name as text: its <script> never ran
    _no_alert(browser)
    Select(browser.find_element(By.NAME, "status")).select_by_value("FAILED")
    _until("only the failed job", lambda: _rows(browser) == ["resnet-aws"])
    Select(browser.find_element(By.NAME, "status")).select_by_value("")
    Select(browser.find_element(By.NAME, "schedule")).select_by_visible_text(seeded.schedule)
    _until("only the schedule's nights", lambda: _rows(browser) == ["digits-cnn"] * 3)
    Select(browser.find_element(By.NAME, "schedule")).select_by_value("")
    browser.find_element(By.NAME, "name").send_keys("<b>")
    _until("only the job named with HTML", lambda: _rows(browser) == [HOSTILE])
    browser.refresh()  # the URL kept the filter
    _until("the filter kept by a reload", lambda: _rows(browser) == [HOSTILE])
    assert browser.find_element(By.NAME, "name").get_attribute("value") == "<b>"

    browser.find_element(By.CSS_SELECTOR, "#jobs tbody a").click()
    _until("the job's page", lambda: browser.find_element(By.ID, "job-name").text == HOSTILE)
    points = browser.find_elements(By.CSS_SELECTOR, "#plan-chart > circle.point")  # (the legend's are in a <g>)
    assert len(points) == 5 and len(browser.find_elements(By.CSS_SELECTOR, "#plan-chart > circle.chosen")) == 1
    assert len(browser.find_elements(By.CSS_SELECTOR, "#plan-chart > circle.excluded")) == 1
    assert browser.find_element(By.CSS_SELECTOR, "#plan-chart polyline.frontier").get_attribute("points")
    assert "excluded: over the budget of $5.00" in browser.find_element(By.ID, "plan-table").text
    charts = _until("the curves", lambda: browser.find_elements(By.CSS_SELECTOR, "svg.curve-chart"))
    names = [c.get_attribute("data-metric") for c in charts]
    assert names[:3] == ["loss", "accuracy", "samples_per_s"] and HOSTILE in names
    loss = browser.find_element(By.CSS_SELECTOR, 'svg.curve-chart[data-metric="loss"] polyline.curve')
    assert len(loss.get_attribute("points").split()) == 5  # one point per reported epoch
    _until("the kept log", lambda: f"hello {HOSTILE}" in browser.find_element(By.ID, "log").text)
    assert "SUCCEEDED" in browser.find_element(By.ID, "events").text
    assert browser.find_element(By.ID, "cancel").is_displayed() is False  # an ended job has no Cancel
    _no_alert(browser)


def _dlrun(*args, env, timeout=240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli.main", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=timeout)


def test_a_running_local_job_advances_without_a_reload_and_is_cancelled(browser, ui_url, ray_head,  # noqa: F811
                                                                        shared_profiles, tmp_path):
    from selenium.webdriver.common.by import By

    job_file = tmp_path / "digits_long.yaml"  # the demo's job with epochs enough to outlast the test
    job_file.write_text((ROOT / "configs/examples/digits_cnn.yaml").read_text().replace("epochs: 20", "epochs: 400"))
    env = dict(os.environ, DLRUN_RAY_ADDRESS=ray_head.dashboard_url, DLRUN_HOME=str(shared_profiles),
               RAY_USAGE_STATS_ENABLED="0")
    r = _dlrun("submit", str(job_file), "--backend", "local", "--detach", env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    job = r.stdout.strip()
    try:
        browser.get(ui_url)  # the jobs page follows the job's status as it starts, without a reload
        browser.execute_script("window.stillTheSamePage = true")
        row = f'#jobs tbody tr[data-job="{job}"] td.status'
        _until("the job listed RUNNING", lambda: browser.find_element(By.CSS_SELECTOR, row).text == "RUNNING",
               timeout=90)
        elapsed = f'#jobs tbody tr[data-job="{job}"] td:nth-child(6)'
        before = browser.find_element(By.CSS_SELECTOR, elapsed).text
        _until("its elapsed time advancing", lambda: browser.find_element(By.CSS_SELECTOR, elapsed).text != before)
        assert browser.execute_script("return window.stillTheSamePage") is True

        browser.get(ui_url.replace("/?", f"/jobs/{job}?"))
        browser.execute_script("window.stillTheSamePage = true")

        def epochs_drawn() -> int:
            lines = browser.find_elements(By.CSS_SELECTOR, 'svg.curve-chart[data-metric="loss"] polyline.curve')
            return len(lines[0].get_attribute("points").split()) if lines else 0

        first = _until("the first epochs drawn", epochs_drawn, timeout=60)
        _until("more epochs drawn, the page not reloaded", lambda: epochs_drawn() > first, timeout=30)
        assert browser.execute_script("return window.stillTheSamePage") is True
        assert browser.find_element(By.ID, "status").text == "RUNNING"
        assert "epoch" in browser.find_element(By.ID, "log").text
        assert browser.find_element(By.ID, "dashboard").get_attribute("href").startswith(ray_head.dashboard_url)

        browser.find_element(By.ID, "cancel").click()
        alert = _until("the confirmation", lambda: browser.switch_to.alert)
        assert job in alert.text
        alert.accept()
        _until("CANCELLED", lambda: browser.find_element(By.ID, "status").text == "CANCELLED", timeout=60)
        assert browser.execute_script("return window.stillTheSamePage") is True
        assert "cancel requested" in browser.find_element(By.ID, "cancel-result").text
    finally:
        _dlrun("cancel", job, env=env, timeout=60)  # a failed step leaves no job running on the shared head
