"""What every part of one job's run shares: the job, where it shows progress, and how it reaches things."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from orchestrator.cli.render.display import Display, JobView
from orchestrator.planning.spec import JobSpec
from orchestrator.state.db import Store

if TYPE_CHECKING:
    from infra.base import Provider
    from orchestrator.runs.ray_jobs import JobsClient
    from orchestrator.state.records import JobRecord

GetProvider = Callable[[str], "Provider"]  # a backend name -> its provider (infra.get_provider)


@dataclass
class AttemptContext:
    job_id: str
    spec: JobSpec
    store: Store
    display: Display
    view: JobView
    checkpoint: str
    poll_s: float = 0.5
    node_poll_s: float = 5.0
    clock: Callable[[], float] = time.time
    jobs_client: Callable[[str], JobsClient] | None = None  # address -> Jobs API client (default: RayJobs)
    run_key: str = ""
    cloud_checkpoints: dict[str, str] = field(default_factory=dict)  # cloud -> the location its first attempt used

    def job(self) -> JobRecord:
        return job_record(self.store, self.job_id)


def job_record(store: Store, job_id: str) -> JobRecord:
    """The record of a job the run works on (it was recorded before the run began: never None here)."""
    job = store.get_job(job_id)
    if job is None:
        raise LookupError(f"no job {job_id} in the store")
    return job
