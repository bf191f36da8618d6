"""A real training job reading its data from DLRUN_DATA_DIR on a real local Ray head: the user-job
example with `data:` naming a directory of this machine (used in place, nothing copied)."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from sklearn.datasets import load_digits

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.ray


def dlrun(*args, env):
    return subprocess.run([sys.executable, "-m", "orchestrator.cli.main", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)


def test_the_user_job_trains_from_its_data_dir_on_local_ray(ray_head, dlrun_home, shared_profiles, tmp_path):
    data = tmp_path / "digits-1200"
    data.mkdir()
    digits = load_digits()
    np.savez(data / "digits.npz", images=digits.images[:1200], labels=digits.target[:1200])  # not the 1797 built in
    job = yaml.safe_load((ROOT / "configs/examples/user_job/user_job.yaml").read_text())
    job.update(name="data-job", workdir=str(ROOT / "configs/examples/user_job"), data=["digits-1200"],
               run="python train.py --epochs 20 --batch-size 32")
    job["workload"].update(epochs=20, dataset_size=960)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(DLRUN_RAY_ADDRESS=ray_head.dashboard_url, DLRUN_HOME=str(dlrun_home), RAY_USAGE_STATS_ENABLED="0")

    r = dlrun("submit", str(path), "--backend", "local", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert float(r.stdout.split("accuracy=")[1].split()[0]) >= 0.9, r.stdout
    logs = dlrun("logs", r.stdout.split()[0], env=env).stdout
    assert f"dlrun: data ready in {data} (0 file(s) fetched)" in logs, logs[-2000:]
    assert f"data: 1200 images from {data}" in logs, logs[-2000:]
    assert not (dlrun_home / "data").exists()  # a local directory is used in place
