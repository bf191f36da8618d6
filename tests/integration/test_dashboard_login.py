"""`dlrun dashboard` prints a one-use link that logs a browser in to the head dlrun started: following it
(with a cookie jar, as a browser does) reaches the dashboard with Ray's token cookie; a second use and a
head dlrun did not start get no login. The head is a stand-in that checks the cookie as Ray's token
middleware does (the real dashboard is driven by tests/e2e/test_dashboard_browser.py)."""
from __future__ import annotations

import http.cookiejar
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from infra.auth import LOCAL, ensure_token
from tests.support.http import LocalHttpServer, QuietHandler

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def head(tmp_path, monkeypatch):
    """A dashboard stand-in that answers 200 only with the `ray-authentication-token` cookie, recorded
    in DLRUN_HOME as the head dlrun started (its process group: this test's, alive)."""
    home = tmp_path / "home"
    monkeypatch.setenv("DLRUN_HOME", str(home))
    token = ensure_token(LOCAL)
    seen = []

    class Handler(QuietHandler):
        def do_GET(self):
            cookie = self.headers.get("Cookie") or ""
            seen.append((self.path, cookie))
            ok = self.path == "/api/version" or f"ray-authentication-token={token}" in cookie
            if ok:
                self.reply(200, json.dumps({"ray_version": "2.60.0"}).encode(), "application/json")
            else:
                self.reply(401, b"Unauthorized", "text/plain")

    server = LocalHttpServer(Handler).start()
    url = server.endpoint
    (home / "local_head.json").write_text(json.dumps(dict(
        dashboard_url=url, gcs_address="127.0.0.1:1", pgid=os.getpgid(0), started_by_dlrun=True)))
    yield url, token, seen
    server.stop()


def dashboard_cli(*args) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("DLRUN_RAY_ADDRESS", None)
    return subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "dashboard", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_the_link_logs_the_browser_in_once(head):
    url, token, seen = head
    proc = dashboard_cli()
    link = proc.stdout.readline().strip()
    assert link.startswith("http://127.0.0.1:") and "/login/" in link and token not in link
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    with browser.open(link, timeout=10) as r:  # 303 to the dashboard, which now sees Ray's cookie
        assert r.status == 200 and r.url.rstrip("/") == url
    assert seen[-1] == ("/", f"ray-authentication-token={token}")
    out, err = proc.communicate(timeout=20)  # the command ends once its link was used
    assert proc.returncode == 0 and "one-use link" in err
    with pytest.raises(urllib.error.URLError):  # the server went with the command
        urllib.request.urlopen(link, timeout=5)


def test_a_used_or_wrong_key_gets_no_cookie(head):
    from infra.login import LoginLink

    url, token, _ = head
    with LoginLink(url, token) as link:
        wrong = link.url.rsplit("/", 1)[0] + "/not-the-key"
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(wrong, timeout=5)
        assert err.value.code == 410 and "Set-Cookie" not in err.value.headers
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        assert opener.open(link.url, timeout=5).status == 200 and link.wait(0)
        with pytest.raises(urllib.error.HTTPError) as twice:
            urllib.request.urlopen(link.url, timeout=5)
        assert twice.value.code == 410


def test_no_login_prints_the_plain_url_and_returns(head):
    url, _, _ = head
    proc = dashboard_cli("--no-login")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and out.strip() == url
