"""`dlrun submit --backend gcp` on a project with OS Login on (the fake Compute Engine, real client):
exit 4 with one line saying why, before anything is made in the project."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.e2e.test_no_caller_address import JOB
from tests.fakes.gce_server import FakeGce

ROOT = Path(__file__).resolve().parents[2]


def test_an_os_login_project_ends_the_run_with_exit_4_and_nothing_made(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(JOB.replace("clouds: [aws], regions: [us-east-1]", "clouds: [gcp], regions: [us-central1]"))
    with FakeGce() as gce:
        gce.set_project_metadata(enable_oslogin="TRUE")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DLRUN_", "GOOGLE_"))}
        env.update(DLRUN_HOME=str(tmp_path / "home"), DLRUN_GCP_API_ENDPOINT=gce.endpoint,
                   GOOGLE_CLOUD_PROJECT=gce.project, DLRUN_SSH_CIDR="203.0.113.7/32", DLRUN_LOCAL_GPUS="none",
                   RAY_USAGE_STATS_ENABLED="0")
        r = subprocess.run([sys.executable, "-m", "orchestrator.cli", "submit", str(job), "--backend", "gcp"],
                           capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
        made = [(m, p) for m, p, _ in gce.requests if m != "GET"]
    assert r.returncode == 4, (r.stdout, r.stderr)
    error = r.stderr.strip().splitlines()[-1]
    assert error.startswith("dlrun: error:") and "OS Login" in error and "Traceback" not in r.stderr
    assert made == [] and gce.instances == {} and gce.firewalls == {} and gce.networks == {}
