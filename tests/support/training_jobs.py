"""dlrun's built-in training jobs (jobs/) run as a user's process runs them, and their reporting lines read back."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from jobs.metrics import parse_line

ROOT = Path(__file__).resolve().parents[2]


def job_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "DLRUN_CHECKPOINT_DIR", "DLRUN_JOB_ID")}
    env.update(RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(ROOT), **extra)
    return env


def parse_output(text: str) -> tuple[list[dict], list[dict], dict | None]:
    """(epoch metrics, events, final result) from a job's stdout."""
    epochs, events, result = [], [], None
    for line in text.splitlines():
        parsed = parse_line(line)
        if parsed is None:
            continue
        kind, payload = parsed
        if kind == "result":
            result = payload
        elif "event" in payload:
            events.append(payload)
        else:
            epochs.append(payload)
    return epochs, events, result


def run_job(job: str, *args: str, timeout: float = 180, **env: str):
    proc = subprocess.run([sys.executable, "-m", f"jobs.{job}", *args], cwd=ROOT,
                          env=job_env(**env), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return parse_output(proc.stdout)
