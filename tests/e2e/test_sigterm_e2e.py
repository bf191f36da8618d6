"""SIGTERM on a real `dlrun submit` and on a `--detach` supervisor, on a real local Ray head: the job is
cancelled as Ctrl-C's "cancel" does (Ray job stopped, record CANCELLED with its time and cost), one line,
exit 143."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.runs.ray_jobs import RayJobs
from orchestrator.runs.reconcile import process_alive
from orchestrator.state.db import Store
from tests.support.job_files import head_env, local_script_job

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.ray

TICKING = "import time\nfor i in range(900):\n    print('tick', i, flush=True)\n    time.sleep(0.2)\n"


@pytest.fixture
def env(ray_head, dlrun_home):
    return head_env(ray_head, dlrun_home)


def job_file(tmp_path: Path) -> Path:
    return local_script_job(tmp_path, TICKING, "sigterm")


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout:.0f} s")


def stopped(head, submission_id: str) -> None:
    """The head's Ray job ends STOPPED (Ray's stop is asynchronous: the driver gets its own SIGTERM)."""
    jobs = RayJobs(head.dashboard_url)
    wait_for(lambda: jobs.status(submission_id) == "STOPPED", 60, f"{submission_id} did not end STOPPED")


def test_sigterm_on_a_foreground_submit_cancels_tears_down_and_exits_143(env, ray_head, dlrun_home, tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli.main", "submit", str(job_file(tmp_path)),
                             "--backend", "local"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env=env)
    seen = []
    try:
        for line in proc.stderr:  # the plain display (no terminal) prints the job's lines as they come
            seen.append(line)
            if "tick 3" in line:
                break
        assert any("tick 3" in ln for ln in seen), "".join(seen)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = "".join(seen) + err
    assert proc.returncode == 143, err
    (line,) = out.splitlines()  # one line says how it ended
    assert " CANCELLED on local CPU after " in line and "(cancelled by SIGTERM)" in line, line
    assert "stopped; nothing is left running" in line, line
    assert "Traceback" not in err
    store = Store(dlrun_home / "state.db")
    row = store.get_job(line.split()[0])
    assert row.status == "CANCELLED" and row.actual_seconds > 0.5 and row.actual_cost is not None
    asked = [e.data for e in store.events(row.id) if e.kind == "cancel_requested"]
    assert asked == [{"by": "SIGTERM"}], asked
    stopped(ray_head, row.ray_submission_id)


def test_sigterm_on_a_detached_supervisor_cancels_and_tears_down(env, ray_head, dlrun_home, tmp_path):
    r = subprocess.run([sys.executable, "-m", "orchestrator.cli.main", "submit", str(job_file(tmp_path)),
                        "--backend", "local", "--detach"], capture_output=True, text=True, cwd=ROOT, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.split()[0]
    store = Store(dlrun_home / "state.db")
    log = dlrun_home / f"supervisor-{job_id}.log"
    wait_for(lambda: log.exists() and "tick 3" in log.read_text(), 180, "the job did not print tick 3")
    pid = store.get_job(job_id).supervisor_pid
    os.kill(pid, signal.SIGTERM)

    wait_for(lambda: not process_alive(pid), 120, "the supervisor did not exit")
    row = store.get_job(job_id)
    assert row.status == "CANCELLED" and row.actual_seconds > 0.5, row
    stopped(ray_head, row.ray_submission_id)
    ended = [ln for ln in log.read_text().splitlines() if ln.startswith(f"{job_id} CANCELLED")]
    assert len(ended) == 1 and "(cancelled by SIGTERM)" in ended[0], log.read_text()[-2000:]
