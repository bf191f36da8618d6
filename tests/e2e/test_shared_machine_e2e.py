"""Shared machines, on real Ray heads: a head dlrun did not start and cannot use (token authentication
without the token) is never attached to. Two users (two DLRUN_HOMEs) whose dashboard port that head
holds each get a head of their own on free ports, run their jobs side by side, and `dlrun down` stops
only their own; DLRUN_RAY_ADDRESS pointing at it gets one line saying how to pass the token."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from infra.base import ProvisionError
from infra.local.head import check_explicit_head, why_unusable
from infra.reach import free_port, wait_dashboard
from orchestrator.runs.ray_jobs import RayJobs
from tests.support.job_files import local_script_job
from tests.support.ray_team_cluster import start_team_cluster

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def foreign_head():
    """Someone else's Ray head, started with Ray's own CLI and token authentication (Ray 2.60's
    RAY_AUTH_MODE=token, RAY_AUTH_TOKEN_PATH) on free ports: the team cluster's head of
    tests/support/ray_team_cluster.py. Yields (dashboard URL, token file)."""
    head = start_team_cluster(head_cpus=1)
    try:
        yield head.address, head.token_file
    finally:
        head.stop()


def user_env(home: Path, dashboard_port: str) -> dict:
    """A user of the machine without the other head's token, whose dashboard port that head holds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH") and k != "DLRUN_RAY_ADDRESS"}
    home.mkdir(parents=True, exist_ok=True)
    env.update(DLRUN_HOME=str(home), HOME=str(home), DLRUN_DASHBOARD_PORT=dashboard_port,
               RAY_USAGE_STATS_ENABLED="0")
    return env


def job_file(tmp_path: Path, name: str) -> Path:
    return local_script_job(tmp_path, f"import time\ntime.sleep(3)\nprint('hello from {name}')\n", name)


def dlrun(*args, env) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "orchestrator.cli.main", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)


def test_two_users_each_run_on_their_own_head_beside_a_head_they_cannot_use(foreign_head, tmp_path):
    url, token = foreign_head
    port = url.rsplit(":", 1)[1]
    users = {name: user_env(tmp_path / name, port) for name in ("alice", "bob")}
    procs = {name: dlrun("submit", str(job_file(tmp_path, name)), "--backend", "local", env=env)
             for name, env in users.items()}  # side by side
    done = {name: p.communicate(timeout=400) for name, p in procs.items()}
    heads = {}
    try:
        for name, (out, err) in done.items():
            assert procs[name].returncode == 0, err
            assert f"hello from {name}" in err and " SUCCEEDED on local CPU " in out, err
            (said,) = [ln for ln in err.splitlines() if f"the Ray head on {url} is not dlrun's" in ln]  # once
            assert "it wants a Ray token" in said and "started dlrun's own on http://127.0.0.1:" in said, said
            heads[name] = json.loads((Path(users[name]["DLRUN_HOME"]) / "local_head.json").read_text())
            assert heads[name]["started_by_dlrun"] and heads[name]["dashboard_url"] in said
        a, b = heads["alice"], heads["bob"]
        assert len({a["dashboard_url"], b["dashboard_url"], url}) == 3
        assert a["gcs_address"] != b["gcs_address"] and a["pgid"] != b["pgid"]
        other = RayJobs(url, {"Authorization": f"Bearer {token.read_text().strip()}"})
        assert not [j for j in other._json("GET", "/api/jobs/") if "dlrun" in str(j.get("submission_id"))]

        for name, head in heads.items():  # each `dlrun down` stops its own head, nothing else
            r = subprocess.run([sys.executable, "-m", "orchestrator.cli.main", "down"], capture_output=True,
                               text=True, cwd=ROOT, env=users[name], timeout=120)
            assert r.returncode == 0 and f"process group {head['pgid']}" in r.stdout, r.stdout + r.stderr
            with pytest.raises(ProcessLookupError):
                os.killpg(head["pgid"], 0)
            wait_dashboard(url, 5, what="the other user's head")  # untouched
    finally:
        for head in heads.values():
            try:
                os.killpg(head["pgid"], signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_dlrun_ray_address_at_a_head_wanting_a_token_says_how_to_pass_it(foreign_head, tmp_path):
    url, token = foreign_head
    env = dict(user_env(tmp_path / "carol", str(free_port())), DLRUN_RAY_ADDRESS=url)
    p = dlrun("submit", str(job_file(tmp_path, "carol")), "--backend", "local", env=env)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 4, err  # credentials missing or refused
    (line,) = [ln for ln in err.splitlines() if ln.startswith("dlrun: error: ")]
    assert "Traceback" not in err and "Authentication" not in err, err  # none of Ray's multi-line messages
    assert line.startswith("dlrun: error: ") and f"DLRUN_RAY_ADDRESS={url}: it wants a Ray token" in line
    assert "RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH=" in line, line
    assert not (tmp_path / "carol" / "local_head.json").exists()  # nothing was started


class _OldRayDashboard(BaseHTTPRequestHandler):
    """A Ray 2.9 dashboard's GET /api/version (dashboard/modules/version/version_handler.py: version,
    ray_version, ray_commit, session_name). Only that endpoint: dlrun asks nothing else before deciding."""

    def do_GET(self):
        body = json.dumps({"version": "4", "ray_version": "2.9.3", "ray_commit": "62655e1",
                           "session_name": "session_x"}).encode() if self.path == "/api/version" else b""
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_head_of_another_ray_version_is_not_used(monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OldRayDashboard)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        why = why_unusable(url)
        assert why is not None and not why.wants_token and "Ray 2.9.3" in why.reason
        with pytest.raises(ProvisionError, match=r"it runs Ray 2\.9\.3, and dlrun's jobs need Ray 2\.60"):
            check_explicit_head(url)
    finally:
        server.shutdown()


def test_the_head_make_demo_leaves_is_passed_over_by_the_next_user(ray_head, monkeypatch):
    """`make demo` leaves its head up (under the first user's DLRUN_HOME, with that home's token): for the
    next user it is a head that wants a token they do not have, not one to attach to."""
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    why = why_unusable(ray_head.dashboard_url)
    assert why is not None and why.wants_token, why
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", ray_head.token_path)  # given its token, it is usable
    assert why_unusable(ray_head.dashboard_url) is None


def test_two_submits_of_one_home_at_once_share_one_head(foreign_head, tmp_path):
    url, _ = foreign_head
    env = user_env(tmp_path / "dave", url.rsplit(":", 1)[1])
    code = "from infra.local.head import ensure_local_head; h = ensure_local_head(); print(h.pgid, h.dashboard_url)"
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
             for _ in range(2)]
    outs = [p.communicate(timeout=300)[0].split() for p in procs]
    try:
        assert all(p.returncode == 0 for p in procs) and outs[0] == outs[1], outs  # one head, not two
        assert outs[0][1] != url
    finally:
        for pgid in {int(o[0]) for o in outs if o}:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_down_and_dashboard_of_a_user_without_a_head_do_not_name_the_head_they_cannot_use(foreign_head, tmp_path):
    url, _ = foreign_head
    env = user_env(tmp_path / "erin", url.rsplit(":", 1)[1])
    down = subprocess.run([sys.executable, "-m", "orchestrator.cli.main", "down"], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)
    assert down.returncode == 0 and url not in down.stdout + down.stderr, down.stdout + down.stderr
    assert "no local Ray head dlrun started is running" in down.stdout
    dash = subprocess.run([sys.executable, "-m", "orchestrator.cli.main", "dashboard", "--no-login"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert dash.returncode != 0 and url not in dash.stdout + dash.stderr, dash.stdout + dash.stderr
    assert "no Ray dashboard is up" in dash.stderr
