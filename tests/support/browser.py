"""A headless Chromium driven by Selenium, for the browser tests (the Ray dashboard, `dlrun ui`): one per module.

Needs Debian's `chromium` + `chromium-driver` (CI's .ci/run installs them) and selenium (test extra); without them
the test is skipped and says why.
"""
from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _chromium() -> tuple[str, str]:
    browser = next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)
    driver = shutil.which("chromedriver") or next(
        (p for p in ("/usr/lib/chromium/chromedriver", "/usr/bin/chromedriver") if os.path.exists(p)), None)
    if not browser or not driver:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium chromium-driver; "
                    f"found browser={browser}, chromedriver={driver})")
    return browser, driver


@pytest.fixture(scope="module")
def browser():
    pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[test]')")
    binary, driver_path = _chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1600,1200", "--no-first-run", "--disable-extensions"):
        opts.add_argument(arg)
    drv = webdriver.Chrome(service=Service(driver_path), options=opts)
    drv.set_page_load_timeout(60)
    yield drv
    drv.quit()
