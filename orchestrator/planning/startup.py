"""The fixed start of a local job, measured once per machine and cached.

A Ray job starts in two processes, one after the other: Ray's JobManager creates a JobSupervisor actor
per job (a fresh Ray worker: Python + `import ray`), which sets up the runtime env and then starts the
entrypoint as a subprocess (Python + torch + dlrun's job helpers) — see ray/dashboard/modules/job/
job_supervisor.py ("Ray actor created by JobManager for each submitted job ... execute given shell
command in subprocess"), ray 2.60.

Measured for real when dlrun's own local head is up: a no-op job (the entrypoint imports what every
job imports, takes one optimizer step and reports once, which connects it to Ray, with the runtime env
a local job gets) is submitted through the Jobs API and timed as dlrun times a run (Ray's start_time
to end_time). With no head up nothing is started for it (`dlrun plan`
stays fast): the job process's start (JOB_START) is timed in a fresh process, and the supervisor's
share is the prior RAY_JOB_PRIOR_SECONDS until a later plan finds the head up. The job's own data load
and model build stay in estimator.JOB_START_SECONDS; finished runs correct the whole term.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
import uuid
import zlib
from importlib import metadata
from pathlib import Path

from orchestrator.paths import profiles_dir

ROOT = Path(__file__).resolve().parents[2]
# What a training job's process does before its first line of work: import torch and dlrun's helpers, and
# take an optimizer step: torch.optim's first step() imports TorchDynamo (torch._disable_dynamo), 1.7 s
# of every job's start here (torch 2.13, 2 cores) that a bare import misses and that the step profile,
# timed after warm-up, never sees
JOB_START = "import torch, jobs.metrics; torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1).step()"
# inside a Ray job the first jobs.metrics report also connects the process to Ray (ray.init, for its
# gauges): part of every job's start that no step measurement sees
RAY_JOB_ENTRYPOINT = f'python -c "{JOB_START}; jobs.metrics.report()"'
# Ray's own share of a job's start (supervisor actor, runtime env, the driver's spawn), beyond the job
# process's imports: 1.0, 1.8 and 1.5 s in three no-op jobs on one head (6.2/5.1/4.8 s Ray run time vs
# 5.2/3.3/3.3 s for the same imports in a fresh process), on the project's 2-core build machine
# (ray 2.60, torch 2.13 CPU) at load average ~2; used only until a running head lets dlrun measure it
RAY_JOB_PRIOR_SECONDS = 2.0
PROBE_TIMEOUT_S = 120.0
_memo: dict[str, dict] = {}


def _key() -> str:
    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = "none"
    probe = zlib.crc32(RAY_JOB_ENTRYPOINT.encode())  # a changed probe measures again
    return f"{platform.node()}-{os.cpu_count()}-{sys.executable}-torch{torch}-{probe:08x}"


def _path() -> Path:
    return profiles_dir() / "local_startup.json"


def _cached(key: str) -> dict | None:
    try:
        data = json.loads(_path().read_text())
        float(data["seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return data if data.get("key") == key and "basis" in data else None  # an older file: measure again


def _save(data: dict) -> dict:
    part = _path().with_suffix(".tmp")
    part.write_text(json.dumps({**data, "measured_at": time.strftime("%Y-%m-%d %H:%M:%S")}))
    part.replace(_path())
    return data


def process_start_seconds() -> float | None:
    """Seconds for a fresh Python process to do what a job does before its first line of work (JOB_START);
    None where it cannot."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    env.pop("RAY_ADDRESS", None)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", JOB_START], cwd=ROOT, env=env, capture_output=True, text=True)
    return time.perf_counter() - t0 if proc.returncode == 0 else None


def ray_job_seconds(address: str, timeout: float = PROBE_TIMEOUT_S) -> float | None:
    """Ray's run time (start_time to end_time, as dlrun records a run) of a job that only imports what a
    job imports and reports once, on the head at `address`; None if it did not succeed in time."""
    from orchestrator.runs.entrypoint import JOBS_DIR
    from orchestrator.runs.ray_jobs import JobsApiError, RayJobs
    from orchestrator.states import RayJobStatus

    jobs = RayJobs(address)
    sid = f"dlrun-start-probe-{uuid.uuid4().hex[:8]}"
    env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONUNBUFFERED": "1", "RAY_USAGE_STATS_ENABLED": "0", "DLRUN_JOB_ID": sid}
    try:
        jobs.submit(entrypoint=RAY_JOB_ENTRYPOINT, submission_id=sid, log=lambda line: None,
                    runtime_env={"env_vars": env, "py_modules": [str(JOBS_DIR)]},
                    metadata={"dlrun_probe": "local job start"})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            info = jobs.info(sid)
            if info.status.terminal:
                start, end = info.start_time, info.end_time
                if info.status != RayJobStatus.SUCCEEDED or not start or not end:
                    return None
                return (end - start) / 1000.0
            time.sleep(0.2)
        jobs.stop(sid)
    except JobsApiError:
        pass
    return None


def _own_head():
    """The local head dlrun started, if it is up (a file read and a ping; never starts one)."""
    from infra.local.head import recorded_head

    return recorded_head()


def measure(*, refresh: bool = False) -> dict:
    """This machine's start figures: seconds (the job's start up to its first line of work), process_seconds
    (the job process's imports alone) and basis ('ray job' measured, or 'imports + prior')."""
    key = _key()
    if key in _memo and not refresh:
        return _memo[key]
    cached = None if refresh else _cached(key)
    if cached and cached.get("basis") == "ray job":
        _memo[key] = cached
        return cached
    head = _own_head()
    tried = f"{head.dashboard_url} started {head.started_at}" if head else None
    if cached and (head is None or cached.get("tried_head") == tried):  # a failed try is not repeated per plan
        _memo[key] = cached
        return cached
    process = cached.get("process_seconds", cached["seconds"]) if cached else process_start_seconds()
    if process is None:  # no torch here: nothing measured, nothing cached
        return {"seconds": 0.0, "process_seconds": 0.0, "basis": "none"}
    ray = ray_job_seconds(head.dashboard_url) if head else None
    if ray is not None:
        data = {"key": key, "seconds": round(max(ray, process), 3), "process_seconds": round(process, 3),
                "basis": "ray job", "probe": f"a Ray job running: {RAY_JOB_ENTRYPOINT}"}
    else:
        data = {"key": key, "seconds": round(process + RAY_JOB_PRIOR_SECONDS, 3),
                "process_seconds": round(process, 3), "basis": "imports + prior", "tried_head": tried,
                "probe": f"{JOB_START} in a fresh process + {RAY_JOB_PRIOR_SECONDS:g} s Ray prior"}
    _memo[key] = _save(data)
    return data


def local_startup_seconds(*, refresh: bool = False) -> float:
    """Seconds from submitting a local job to its first line of training code, on this machine."""
    return float(measure(refresh=refresh)["seconds"])


def ray_share_seconds() -> float:
    """Ray's share of the start alone (supervisor, runtime env, spawn): what a job probe, which timed the
    job's own process from its spawn, did not see."""
    data = measure()
    return max(0.0, float(data["seconds"]) - float(data.get("process_seconds", data["seconds"])))
