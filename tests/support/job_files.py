"""Job files and work directories written for a test."""
from __future__ import annotations

import os
from pathlib import Path

import yaml


def make_dir(root: Path, files: dict[str, bytes]) -> Path:
    for rel, body in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(body)
    return root


def make_job(tmp_path, **fields) -> Path:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "train.py").write_text("print('v1')\n")
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"name": "mine", "run": "python train.py", "workdir": "work", **fields}))
    return job


def local_script_job(tmp_path: Path, script: str, name: str) -> Path:
    """A job NAME.yaml running `script` as wd-NAME/main.py on the local backend (a reference, no workload)."""
    wd = tmp_path / f"wd-{name}"
    wd.mkdir()
    (wd / "main.py").write_text(script)
    job = tmp_path / f"{name}.yaml"
    job.write_text(f"name: {name}\nrun: python -u main.py\nworkdir: {wd}\n"
                   "reference: {accelerator: cpu, hours: 0.01}\nresources:\n  clouds: [local]\n")
    return job


def head_env(head, dlrun_home: Path, **extra: str) -> dict[str, str]:
    """The environment of a `dlrun` process using the session's Ray head (DLRUN_RAY_ADDRESS) from its own home."""
    return dict(os.environ, DLRUN_RAY_ADDRESS=head.dashboard_url, DLRUN_HOME=str(dlrun_home),
                RAY_USAGE_STATS_ENABLED="0", **extra)


# a small CNN job on one on-demand AWS node in us-east-1, $5 at most
CNN_ON_AWS_JOB = """
name: no-address
job: cnn
resources: {clouds: [aws], regions: [us-east-1], spot: never, num_nodes: 1}
budget: {max_cost: 5.0}
workload: {model: "jobs.cnn:SimpleCNN", input_shape: [1, 8, 8], batch_size: 64, dataset_size: 1437,
           epochs: 2, precision: fp32}
"""
