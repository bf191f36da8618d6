"""The real thing: `dlrun scheduler` fires a seconds-level schedule of the digits CNN on local Ray twice."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.ray


def cli(*args, env):
    return subprocess.run([sys.executable, "-m", "orchestrator.cli.main", *args], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=120)


def finished_runs(db: Path) -> list[tuple]:
    if not db.exists():
        return []
    with sqlite3.connect(db) as c:
        return c.execute("SELECT r.outcome, r.job_id, j.status, j.backend FROM schedule_runs r "
                         "LEFT JOIN jobs j ON j.id = r.job_id WHERE r.outcome NOT IN "
                         "('fired', 'missed', 'skipped-overlap', 'skipped-budget') ORDER BY r.id").fetchall()


def test_scheduler_runs_digits_job_twice_on_local_ray(ray_head, dlrun_home, shared_profiles, tmp_path):
    job = tmp_path / "digits.yaml"
    text = (ROOT / "configs/examples/digits_cnn.yaml").read_text()
    job.write_text(text.replace("clouds: [local, aws, gcp]", "clouds: [local]").replace("epochs: 20", "epochs: 3"))
    env = dict(os.environ, DLRUN_HOME=str(dlrun_home), DLRUN_RAY_ADDRESS=ray_head.dashboard_url,
               RAY_USAGE_STATS_ENABLED="0")
    # every 12 s (a 6-field cron has the seconds first; a short local run takes ~10 s on an idle 2-core
    # machine); a run that is still going when the next one is due makes that one a recorded overlap skip
    r = cli("schedule", "add", str(job), "--cron", "*/12 * * * * *", "--tz", "UTC", "--name", "digits",
            "--max-cost", "1", env=env)
    assert r.returncode == 0, r.stderr

    sched = subprocess.Popen([sys.executable, "-m", "orchestrator.cli.main", "scheduler", "--recheck", "5"],
                             cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    db = dlrun_home / "state.db"
    try:
        deadline = time.monotonic() + 360
        while len(finished_runs(db)) < 2 and time.monotonic() < deadline and sched.poll() is None:
            time.sleep(1)
        assert cli("schedule", "pause", "digits", env=env).returncode == 0
        runs = finished_runs(db)
    finally:
        sched.send_signal(signal.SIGTERM)  # stops the loop; it waits for a run still going
        try:
            out, _ = sched.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            sched.kill()
            out, _ = sched.communicate()
    assert len(runs) >= 2, out[-4000:]
    for outcome, job_id, status, backend in runs[:2]:
        assert outcome == "SUCCEEDED" and status == "SUCCEEDED" and backend == "local", (runs, out[-4000:])
    assert runs[0][1] != runs[1][1]
    assert sched.returncode == 0, out[-4000:]
    listing = json.loads(cli("schedule", "list", "--json", env=env).stdout)
    assert listing[0]["name"] == "digits" and listing[0]["paused"] is True and listing[0]["next_run"] is None
    # each firing's output went to its own log file
    assert len(list((dlrun_home / "scheduler-logs").glob("*.log"))) >= 2
