"""`dlrun cancel`: stop the job's Ray job, then leave the rest to the job's live supervisor (it sees the Ray
job STOPPED, tears down and records how the job ended), or, with no supervisor left, tear down the job's
recorded clusters and record the cancel here. A job not on Ray yet (provisioning, booting) has no Ray job to
stop: its supervisor gets SIGTERM, which cancels as Ctrl-C does (orchestrator/runs/sigterm.py) — it tears down
what it has launched so far and records the cancel."""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from enum import Enum

from orchestrator.runs.ray_jobs import JobsApiError, RayJobs
from orchestrator.runs.reconcile import process_alive
from orchestrator.runs.teardown import terminate_recorded
from orchestrator.state.db import Store
from orchestrator.state.records import JobRecord
from orchestrator.states import JobStatus

CANCEL_REASON = "dlrun cancel"  # the cancelled job's status detail (the result line shows it)


class CancelOutcome(Enum):
    ALREADY_ENDED = "already ended"  # the job had a final status: nothing was done
    LEFT_TO_SUPERVISOR = "left to its supervisor"  # it stops the job and tears down the cluster
    CANCELLED = "cancelled"  # no supervisor: the recorded clusters are torn down and the cancel recorded


@dataclass(frozen=True)
class RayStop:
    """What became of the request to stop the job's Ray job."""
    submission_id: str
    address: str
    stopped: bool
    why_not: str | None = None  # when not stopped: what is known of why


@dataclass(frozen=True)
class CancelResult:
    job_id: str
    outcome: CancelOutcome
    status: JobStatus  # the job's status as cancel found it (ALREADY_ENDED: the one it ended with)
    ray_stop: RayStop | None = None  # None: nothing to stop (the job was never submitted to Ray)


def cancel_job(store: Store, job: JobRecord) -> CancelResult:
    if not job.live:
        return CancelResult(job.id, CancelOutcome.ALREADY_ENDED, job.status)
    ray_stop = stop_ray_job(job)
    if _supervised(job):
        if ray_stop is None and job.supervisor_pid and job.supervisor_pid > 0:
            try:
                os.kill(job.supervisor_pid, signal.SIGTERM)
            except ProcessLookupError:
                pass  # it ended meanwhile, and recorded how
        return CancelResult(job.id, CancelOutcome.LEFT_TO_SUPERVISOR, job.status, ray_stop)
    for cluster in store.job_clusters(job.id):
        if not cluster.terminated:
            terminate_recorded(store, cluster)
    store.cancel(job.id, CANCEL_REASON, actual_seconds=time.time() - job.created_at)
    return CancelResult(job.id, CancelOutcome.CANCELLED, job.status, ray_stop)


def stop_ray_job(job: JobRecord) -> RayStop | None:
    """Ask the job's Ray head to stop its Ray job. A head that does not answer is expected (the cluster
    may be gone already): the teardown goes on and the result says the job was not stopped."""
    if not (job.ray_submission_id and job.ray_address):
        return None
    try:
        stopped = RayJobs(job.ray_address).stop(job.ray_submission_id)
    except (JobsApiError, OSError) as e:  # no answer, an error answer, its token file unreadable
        return RayStop(job.ray_submission_id, job.ray_address, stopped=False, why_not=str(e))
    # RayJobs.stop answers False both when the head did not answer and when Ray says the job had ended
    why_not = None if stopped else "its head did not answer, or the job had already ended"
    return RayStop(job.ray_submission_id, job.ray_address, stopped=stopped, why_not=why_not)


def _supervised(job: JobRecord) -> bool:
    """A live process runs the job's lifecycle (a foreground `dlrun submit` or a detached supervisor)."""
    return bool(job.supervisor_pid) and process_alive(job.supervisor_pid)
