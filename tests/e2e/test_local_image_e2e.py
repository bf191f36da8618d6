"""`dlrun submit` of a job with `image:` on a real local Ray head: the image checked against the stand-in
registry before anything starts, the Ray job's entrypoint run through infra/images/run_job.py and the
runtime (the stand-in podman of tests/support/container_runtime.py, which runs the command on the host: no
public registry or image is reachable here; a real runtime is tested in test_local_container_run.py)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.container_runtime import calls, fake_podman
from tests.support.oci_registry import OciRegistry

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.ray


def dlrun(*args, env):
    return subprocess.run([sys.executable, "-m", "orchestrator.cli.main", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)


def _job(tmp_path, image, run):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"name": "in-image", "run": run, "image": image, "env": {"SEED": "5"},
                                    "reference": {"accelerator": "cpu", "hours": 0.01},
                                    "resources": {"clouds": ["local"]}}))
    return str(path)


def test_a_local_job_runs_in_its_image_and_one_without_python_is_refused(ray_head, shared_profiles, tmp_path):
    bin_dir = tmp_path / "bin"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(DLRUN_RAY_ADDRESS=ray_head.dashboard_url, DLRUN_HOME=str(shared_profiles),
               RAY_USAGE_STATS_ENABLED="0", DLRUN_LOCAL_GPUS="none", DLRUN_CATALOG_REFRESH="off",
               PATH=f"{bin_dir}:{env['PATH']}")
    with OciRegistry() as reg:
        reg.add_image("team/train", "1.0", {"linux/amd64": [300_000_000]})
        image = f"{reg.address}/team/train:1.0"
        fake_podman(bin_dir)
        r = dlrun("submit", _job(tmp_path, image, 'echo "seed=$SEED in $(basename $PWD)"'), env=env)
        assert r.returncode == 0, r.stderr[-3000:]
        runs = [c for c in calls(bin_dir) if c[:1] == ["run"]]
        assert len(runs) == 2 and all(image in c for c in runs)  # the python3 check, then the job
        assert "SEED" in runs[1] and "DLRUN_JOB_ID" in runs[1]
        logs = dlrun("logs", r.stdout.split()[0], env=env).stdout
        assert "seed=5 in " in logs

        fake_podman(bin_dir, missing=("python3",))
        r = dlrun("submit", _job(tmp_path, image, "echo never"), env=env)
        assert r.returncode == 1 and "failed on local CPU (exit code 2)" in r.stderr
        job_id = r.stderr.split("dlrun: error: job ")[1].split()[0]
        logs = dlrun("logs", job_id, env=env).stdout
        assert f"image {image} has no python3" in logs and "never" not in logs
