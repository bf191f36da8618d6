"""dlrun against a team's Ray cluster (tests/support/ray_team_cluster.py): a checkpointing job file for it and
`dlrun` run from a home whose config.yaml names the cluster (its token only from there)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
# a job of the user's own: it counts steps in its checkpoint directory and resumes from there
SCRIPT = """\
import json, os, pathlib, time
ck = pathlib.Path(os.environ["DLRUN_CHECKPOINT_DIR"]); ck.mkdir(parents=True, exist_ok=True)
state = ck / "step"
start = int(state.read_text()) if state.exists() else 0
steps, pause = int(os.environ["STEPS"]), float(os.environ["PAUSE"])
for step in range(start, steps):
    time.sleep(pause)
    state.write_text(str(step + 1))
    print("DLRUN_METRIC " + json.dumps({"epoch": step + 1, "epochs": steps}), flush=True)
print("DLRUN_RESULT " + json.dumps({"resumed_from": start, "cuda": os.environ.get("CUDA_VISIBLE_DEVICES", "")}),
      flush=True)
"""


def job_file(tmp_path, *, clouds, steps=3, pause=0.2, accelerators=None, hours=3.0) -> Path:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "job.py").write_text(SCRIPT)
    job = {"name": "team-job", "run": "python3 job.py", "workdir": str(work),
           "reference": {"accelerator": "V100", "hours": hours}, "env": {"STEPS": str(steps), "PAUSE": str(pause)},
           "resources": {"clouds": clouds, "spot": "never"}}
    if accelerators:
        job["resources"]["accelerators"] = accelerators
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def dlrun(*args, home, timeout=300, **kw):
    env = dict(os.environ, DLRUN_HOME=str(home), RAY_USAGE_STATS_ENABLED="0", DLRUN_LOCAL_GPUS="none",
               DLRUN_CATALOG_REFRESH="off", DLRUN_NODE_POLL_S="1")
    for var in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "DLRUN_RAY_ADDRESS"):
        env.pop(var, None)  # dlrun reaches the cluster with its config.yaml token only
    return subprocess.run([sys.executable, "-m", "orchestrator.cli.main", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=timeout, **kw)
