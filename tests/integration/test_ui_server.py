"""`dlrun ui`'s server, real (aiohttp on 127.0.0.1) over a real store: the token on every request, no
cross-origin cancel, no GET that changes anything, HTML in names, logs and metrics served as text, the
jobs' filters and paging, and `dlrun ui` as a process (its URL, a port in use)."""
from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import sys
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from orchestrator.state.db import default_store
from orchestrator.states import JobStatus
from orchestrator.ui.server import REFUSED, TOKEN_HEADER, make_app, new_token
from tests.support.ui_seed import HOSTILE, pending_job, seed_pages

ROOT = Path(__file__).resolve().parents[2]
TOKEN = new_token()


def served(check):
    """Run `check(client)` against the app on a real 127.0.0.1 server."""
    async def run():
        async with TestClient(TestServer(make_app(default_store(), TOKEN), host="127.0.0.1")) as client:
            return await check(client)
    return asyncio.run(run())


def _snapshot():
    store = default_store()
    return [(j.id, j.status, j.actual_cost, len(store.events(j.id))) for j in store.list_jobs(limit=1000)]


def test_every_route_without_the_token_is_401_and_says_nothing_of_the_jobs():
    seeded = seed_pages(default_store())
    job = seeded.jobs[0]
    paths = ["/", "/api/jobs", f"/jobs/{job}", f"/api/jobs/{job}", f"/api/jobs/{job}/log", "/schedules", "/cost",
             "/static/ui.js", "/static/ui.css", "/nothing-here"]

    async def check(client):
        for path in paths:
            for query in ("", "?token=", "?token=" + "0" * 64):
                r = await client.get(path + query)
                body = await r.text()
                assert r.status == 401, path
                assert body == REFUSED and job not in body and "digits" not in body
        r = await client.get("/api/jobs", headers={TOKEN_HEADER: "wrong"})
        assert r.status == 401
        r = await client.post(f"/api/jobs/{job}/cancel")
        assert r.status == 401 and (await r.text()) == REFUSED

    served(check)


def test_with_the_token_pages_show_html_in_names_logs_and_metrics_as_text():
    seeded = seed_pages(default_store())
    q = f"?token={TOKEN}"

    async def check(client):
        pages = {}
        for path in ("/", f"/jobs/{seeded.hostile}", "/schedules", "/cost"):
            r = await client.get(path + q)
            assert r.status == 200, path
            pages[path] = await r.text()
        job_html = pages[f"/jobs/{seeded.hostile}"]
        assert "<script>alert" not in job_html and "<b>bold</b>" not in job_html
        assert "&lt;script&gt;alert" in job_html  # the title and heading, escaped
        assert "<script>alert" not in pages["/"]  # the jobs' JSON in the page escapes < too (tojson)
        data = await (await client.get(f"/api/jobs/{seeded.hostile}", headers={TOKEN_HEADER: TOKEN})).json()
        assert data["job"]["name"] == HOSTILE  # the JSON holds it as it is: the page's script sets it as text
        assert HOSTILE in [s["name"] for s in data["curves"]["series"]]
        log = await (await client.get(f"/api/jobs/{seeded.hostile}/log?after=-1", headers={TOKEN_HEADER: TOKEN})).json()
        assert f"hello {HOSTILE}" in log["lines"]
        js = await (await client.get("/static/ui.js" + q)).text()
        assert "innerHTML" not in js and "insertAdjacentHTML" not in js and "document.write" not in js

    served(check)


def test_the_pages_send_headers_that_keep_the_token_and_the_page_to_themselves():
    async def check(client):
        r = await client.get(f"/?token={TOKEN}")
        assert r.headers["Referrer-Policy"] == "no-referrer"
        assert "script-src 'self'" in r.headers["Content-Security-Policy"]
        assert r.headers["X-Frame-Options"] == "DENY"
        assert "Access-Control-Allow-Origin" not in r.headers

    served(check)


def test_no_get_changes_anything():
    store = default_store()
    seeded = seed_pages(store)
    waiting = pending_job(store)
    before = _snapshot()

    async def check(client):
        for path in ("/", "/api/jobs", f"/jobs/{waiting}", f"/api/jobs/{waiting}", f"/api/jobs/{waiting}/log",
                     f"/api/jobs/{waiting}/cancel", "/schedules", "/cost", f"/jobs/{seeded.jobs[0]}"):
            r = await client.get(path + f"?token={TOKEN}")
            assert r.status in (200, 405), path  # cancel answers a GET with 405: only a POST cancels

    served(check)
    assert _snapshot() == before


def test_cancel_is_a_post_with_the_token_in_its_header_from_this_origin():
    store = default_store()
    waiting = pending_job(store)

    async def check(client):
        url = f"/api/jobs/{waiting}/cancel"
        r = await client.post(url + f"?token={TOKEN}")  # the token in the URL only: a form of another site
        assert r.status == 401
        r = await client.post(url, data={"token": TOKEN})  # a form field: no header, refused the same
        assert r.status == 401
        r = await client.options(url, headers={"Origin": "http://evil.example",  # the CORS preflight: refused
                                                "Access-Control-Request-Method": "POST",
                                                "Access-Control-Request-Headers": TOKEN_HEADER})
        assert r.status == 401 and "Access-Control-Allow-Origin" not in r.headers
        r = await client.post(url, headers={TOKEN_HEADER: TOKEN, "Origin": "http://evil.example"})
        assert r.status == 403
        assert store.get_job(waiting).status is JobStatus.PENDING
        origin = f"http://{client.server.host}:{client.server.port}"
        r = await client.post(url, headers={TOKEN_HEADER: TOKEN, "Origin": origin})
        assert r.status == 200
        return (await r.json())["message"]

    message = served(check)
    assert message == f"{waiting} cancelled"  # dlrun cancel's own words: no supervisor, recorded here
    job = store.get_job(waiting)
    assert job.status is JobStatus.CANCELLED
    assert [e.detail for e in store.events(waiting) if e.status == "CANCELLED"] == ["dlrun cancel"]


def test_the_jobs_json_filters_and_pages():
    store = default_store()
    seeded = seed_pages(store, nights=60)

    async def check(client):
        h = {TOKEN_HEADER: TOKEN}
        every = await (await client.get("/api/jobs", headers=h)).json()
        assert every["total"] == 62 and len(every["jobs"]) == 50 and every["jobs"][0]["id"] == seeded.hostile
        rest = await (await client.get("/api/jobs?page=1", headers=h)).json()
        assert [j["id"] for j in rest["jobs"]] == list(reversed(seeded.jobs))[50:]
        failed = await (await client.get("/api/jobs?status=FAILED", headers=h)).json()
        assert [j["name"] for j in failed["jobs"]] == ["resnet-aws"]
        aws = await (await client.get("/api/jobs?backend=aws", headers=h)).json()
        assert aws["total"] == 1
        nightly = await (await client.get(f"/api/jobs?schedule={seeded.schedule_id}", headers=h)).json()
        assert nightly["total"] == 60
        named = await (await client.get("/api/jobs?name=resnet", headers=h)).json()
        assert [j["name"] for j in named["jobs"]] == ["resnet-aws"]
        pct = await (await client.get("/api/jobs?name=%25", headers=h)).json()  # '%' matched as written
        assert pct["total"] == 0

    served(check)


def _dlrun_ui(*args, home):
    env = {"DLRUN_HOME": str(home), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "orchestrator.cli.main", "ui", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _listening_on(port: int) -> list[str]:
    """The addresses a socket listens on at `port` (Linux's /proc/net/tcp and tcp6)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            local, state = row.split()[1], row.split()[3]
            addr, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.append(socket.inet_ntop(socket.AF_INET, bytes.fromhex(addr)[::-1]) if len(addr) == 8
                             else "ipv6:" + addr)
    return found


def test_dlrun_ui_listens_on_127_0_0_1_only_and_prints_its_url_with_the_token(dlrun_home):
    proc = _dlrun_ui("--port", "0", home=dlrun_home)
    try:
        line = proc.stderr.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/\?token=([0-9a-f]{64})", line)
        assert m, line
        port = int(m.group(1))
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        assert _listening_on(port) == ["127.0.0.1"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_port_in_use_is_one_line_and_exit_2(dlrun_home):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _dlrun_ui("--port", str(port), home=dlrun_home)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert err.strip().splitlines() == [f"dlrun: error: --port {port}: 127.0.0.1:{port} is in use; choose another "
                                        "port or leave --port out"]
    assert json.dumps(err).count("Traceback") == 0


def test_ctrl_c_stops_it_with_one_line_and_exit_0(dlrun_home):
    import signal

    proc = _dlrun_ui("--port", "0", home=dlrun_home)
    assert "dlrun ui: http://127.0.0.1:" in proc.stderr.readline()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and err == "dlrun ui: stopped\n"
