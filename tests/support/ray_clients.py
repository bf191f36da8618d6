"""A Ray client without a head's token, in its own process (no token file in its HOME, no RAY_AUTH_* settings):
what it gets from a GCS address and the Jobs API."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

UNAUTHENTICATED = """
import sys, ray
from ray.job_submission import JobSubmissionClient
address, dashboard = sys.argv[1], sys.argv[2]
try:
    JobSubmissionClient(dashboard).list_jobs()
    print("JOBS_API_OPEN")
except Exception as e:
    print("jobs api refused:", type(e).__name__)
try:
    ray.init(address=address, log_to_driver=False)
    print("TASK_RAN", ray.get(ray.remote(lambda: 41 + 1).remote(), timeout=20))
except Exception as e:
    print("gcs refused:", type(e).__name__)
"""


def unauthenticated_clients(*gcs_addresses: str, dashboard: str, timeout: float = 120) -> list[str]:
    """What a process without the head's token gets from each GCS address and the Jobs API (the
    processes run side by side: each waits out Ray's connect timeout)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    # Ray's client tries a GCS 20 times, a second apart (RAY_NUM_REDIS_GET_RETRIES); a refusal is a refusal
    # on the first try, so three are enough
    env.update(HOME=tempfile.mkdtemp(prefix="no-token-home-"), RAY_USAGE_STATS_ENABLED="0",
               RAY_NUM_REDIS_GET_RETRIES="3")
    procs = [subprocess.Popen([sys.executable, "-c", UNAUTHENTICATED, gcs, dashboard], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, env=env) for gcs in gcs_addresses]
    deadline, outs = time.monotonic() + timeout, []
    for proc in procs:
        try:
            outs.append(proc.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            outs.append("gcs never answered")
    return outs


def unauthenticated_client(gcs: str, dashboard: str, timeout: float = 120) -> str:
    """What a process without the head's token gets from its GCS port and Jobs API."""
    return unauthenticated_clients(gcs, dashboard=dashboard, timeout=timeout)[0]
