"""`dlrun submit --backend gcp` in a project whose organisation enforces OS Login (constraints/compute.requireOsLogin,
the fake Compute Engine, real client): the first insert is refused (its enable-oslogin=FALSE violates the
policy), so no VM ever waits for an SSH login that cannot succeed: exit 4 with one line saying why and how to
proceed, and nothing is left in the project but dlrun's shared network."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.job_files import CNN_ON_AWS_JOB
from tests.support.gce_server import FakeGce
from tests.support.gcs_server import FakeGcs

ROOT = Path(__file__).resolve().parents[2]


def test_an_org_policy_requiring_os_login_ends_the_run_with_exit_4_and_nothing_billed(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(CNN_ON_AWS_JOB.replace("clouds: [aws], regions: [us-east-1]",
                                          "clouds: [gcp], regions: [us-central1]"))
    with FakeGce() as gce, FakeGcs(project=gce.project) as iam:
        gce.iam = iam
        gce.set_project_metadata(enable_oslogin="TRUE")
        gce.require_os_login()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DLRUN_", "GOOGLE_"))}
        env.update(DLRUN_HOME=str(tmp_path / "home"), DLRUN_GCP_API_ENDPOINT=gce.endpoint, DLRUN_GCP_EMULATOR="1",
                   DLRUN_GCP_IAM_ENDPOINT=iam.endpoint, DLRUN_GCS_ENDPOINT=iam.endpoint,
                   GOOGLE_CLOUD_PROJECT=gce.project, DLRUN_SSH_CIDR="203.0.113.7/32", DLRUN_LOCAL_GPUS="none",
                   RAY_USAGE_STATS_ENABLED="0")
        r = subprocess.run([sys.executable, "-m", "orchestrator.cli", "submit", str(job), "--backend", "gcp"],
                           capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
        inserts = [p for m, p, _ in gce.requests if m == "POST" and p.endswith("/instances")]
    assert r.returncode == 4, (r.stdout, r.stderr)
    error = r.stderr.strip().splitlines()[-1]
    assert error.startswith("dlrun: error:") and "compute.requireOsLogin" in error and "Traceback" not in r.stderr
    assert "exempt this project" in error
    assert len(inserts) == 1  # the first refusal ends GCP: no other zone, region or offer is tried
    assert gce.instances == {} and gce.disks == {} and gce.firewalls == {} and iam.accounts == {}
