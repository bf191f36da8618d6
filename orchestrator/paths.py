"""One home for where dlrun keeps things and the environment variables it reads."""
from __future__ import annotations

import os
from pathlib import Path

from infra.paths import HOME_ENV, dlrun_home, keys_dir, spot_prices_path  # noqa: F401  (one home)

# environment variables a user (or a test harness) may set
RAY_ADDRESS_ENV = "DLRUN_RAY_ADDRESS"  # use this Ray head for local jobs
NODE_POLL_ENV = "DLRUN_NODE_POLL_S"    # how often node states are polled
BOOT_TIMEOUT_ENV = "DLRUN_BOOT_TIMEOUT"


def logs_dir() -> Path:
    d = dlrun_home() / "logs"
    d.mkdir(exist_ok=True)
    return d


def job_log_path(job_id: str) -> Path:
    return logs_dir() / f"{job_id}.log"


def supervisor_log_path(job_id: str) -> Path:
    return dlrun_home() / f"supervisor-{job_id}.log"


def node_poll_s(default: float = 5.0) -> float:
    return float(os.environ.get(NODE_POLL_ENV, default))


def profiles_dir() -> Path:
    """Cached workload profiles and the CPU probe."""
    p = dlrun_home() / "profiles"
    p.mkdir(parents=True, exist_ok=True)
    return p
