"""The user-job example (its own train.py and model.py) through `dlrun submit` on a real local Ray
head, with no PYTHONPATH: the model is profiled from its workdir, the script imports jobs.metrics and
jobs.checkpoint on the cluster, a resubmit of the finished run says so (nothing planned), --fresh starts it over."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = "configs/examples/user_job/user_job.yaml"
pytestmark = pytest.mark.ray


def dlrun(*args, env):
    return subprocess.run([sys.executable, "-m", "orchestrator.cli.main", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)


def test_user_job_runs_resumes_and_starts_fresh(ray_head, dlrun_home):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(DLRUN_RAY_ADDRESS=ray_head.dashboard_url, DLRUN_HOME=str(dlrun_home), RAY_USAGE_STATS_ENABLED="0")

    r = dlrun("submit", EXAMPLE, "--backend", "local", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "profiling TinyMLP" in r.stderr and "resuming" not in r.stderr
    first = r.stdout.split()[0]
    assert float(r.stdout.split("accuracy=")[1].split()[0]) >= 0.9, r.stdout
    logs = dlrun("logs", first, env=env).stdout
    assert "epoch 30/30" in logs and "DLRUN_" not in logs  # jobs.metrics lines, rendered

    r = dlrun("submit", EXAMPLE, "--backend", "local", env=env)  # the same code: the same run, which finished
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith(f"user-job: this run already finished: job {first} trained its 30 epochs")
    assert "--fresh` removes its checkpoints and trains it again" in r.stdout
    assert "profiling" not in r.stderr and "resuming" not in r.stderr  # nothing planned, nothing run

    r = dlrun("submit", EXAMPLE, "--backend", "local", "--fresh", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "resuming" not in r.stderr and "--fresh: removed the checkpoints of epochs 29, 30" in r.stderr
    assert "epoch 30/30" in dlrun("logs", r.stdout.split()[0], env=env).stdout
