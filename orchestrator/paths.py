"""One home for where dlrun keeps things (the variables that move them: orchestrator/settings.py)."""
from __future__ import annotations

from pathlib import Path

from infra.paths import dlrun_home  # noqa: F401  (one home: infra/ cannot import orchestrator/)
from orchestrator.settings import env_float


def logs_dir() -> Path:
    d = dlrun_home() / "logs"
    d.mkdir(exist_ok=True)
    return d


def job_log_path(job_id: str) -> Path:
    return logs_dir() / f"{job_id}.log"


def node_poll_s() -> float:
    """Seconds between polls of a cluster's node states ($DLRUN_NODE_POLL_S)."""
    return env_float("DLRUN_NODE_POLL_S")


def profiles_dir() -> Path:
    """Cached workload profiles and the CPU probe."""
    p = dlrun_home() / "profiles"
    p.mkdir(parents=True, exist_ok=True)
    return p
