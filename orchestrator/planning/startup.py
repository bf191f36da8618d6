"""The fixed start of a local job, measured once per machine and cached.

A Ray job starts in two processes, one after the other: Ray's JobManager creates a JobSupervisor actor
per job (a fresh Ray worker: Python + `import ray`), which sets up the runtime env and then starts the
entrypoint as a subprocess (Python + torch + dlrun's job helpers) — see ray/dashboard/modules/job/
job_supervisor.py ("Ray actor created by JobManager for each submitted job ... execute given shell
command in subprocess"), ray 2.60. The probe times the same two process starts on this machine.

Small local jobs were estimated 1.1–2.0× too short because this start was a 2 s guess; on a busy
2-core machine importing torch alone takes several seconds. The data load and model build of the job
itself stay in estimator.JOB_START_SECONDS; what neither term covers (Ray's runtime env, the job
supervisor) is learned from finished runs (estimator.fit_terms corrects the start-up term).
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

from orchestrator.paths import profiles_dir

ROOT = Path(__file__).resolve().parents[2]
PROBES = ("import ray", "import torch, jobs.metrics")  # the supervisor worker, then the job's process
_memo: dict[str, float] = {}


def _key() -> str:
    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = "none"
    return f"{platform.node()}-{os.cpu_count()}-{sys.executable}-torch{torch}"


def local_startup_seconds(*, refresh: bool = False) -> float:
    """Seconds from spawning a job process to its first line of training code, on this machine."""
    key = _key()
    if key in _memo and not refresh:
        return _memo[key]
    path = profiles_dir() / "local_startup.json"
    if path.exists() and not refresh:
        try:
            data = json.loads(path.read_text())
            if data.get("key") == key:
                _memo[key] = float(data["seconds"])
                return _memo[key]
        except (ValueError, KeyError):
            pass
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    seconds = 0.0
    for probe in PROBES:
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True)
        seconds += time.perf_counter() - t0
        if proc.returncode != 0:  # no torch or ray here: nothing measured, nothing cached
            return 0.0
    path.write_text(json.dumps({"key": key, "seconds": round(seconds, 3), "probe": "; ".join(PROBES),
                                "measured_at": time.strftime("%Y-%m-%d %H:%M:%S")}))
    _memo[key] = seconds
    return seconds
