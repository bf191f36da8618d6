"""`dlrun cancel`'s decision (orchestrator/runs/cancel.py) on the store's records: a job whose supervisor still
runs is left to it; without one, cancel tears down and records the cancel itself (tests/unit/test_status_screens.py).
No Ray job here: the ones with a Ray head to ask are in tests/integration/test_cancel_ray_job.py."""
from __future__ import annotations

import os
import time

from orchestrator.cli import status as st
from orchestrator.runs.cancel import CancelOutcome, cancel_job
from orchestrator.state.db import default_store
from orchestrator.states import JobStatus


def _running_local_job(store, supervisor_pid: int | None) -> str:
    job_id = store.create_job(name="local", spec_hash="h", spec_json="{}")
    store.set_supervisor(job_id, supervisor_pid)
    store.start_attempt(job_id, attempt=1, backend="local", offer_key="local/here/cpu", instance_type=None,
                        accelerator="CPU", accelerator_count=0, spot=False, price_per_hour=0.0, price_date=None,
                        cluster_id="c-local")
    store.cluster_launching("c-local", provider="local", job_id=job_id, region=None, instance_type=None,
                            spot=False, num_nodes=1, price_per_hour=0.0, launched_at=time.time())
    store.set_status(job_id, JobStatus.RUNNING)
    return job_id


def test_a_job_with_a_live_supervisor_is_left_to_it():
    store = default_store()
    job_id = _running_local_job(store, supervisor_pid=os.getpid())  # this Python process: alive
    result = cancel_job(store, store.get_job(job_id))
    assert result.outcome is CancelOutcome.LEFT_TO_SUPERVISOR and result.ray_stop is None
    assert store.get_job(job_id).status is JobStatus.RUNNING  # the supervisor records how it ended
    assert not store.get_cluster("c-local").terminated  # and tears down
    assert st.cancel_text(result) == (f"{job_id}: cancel requested; its supervisor stops the job and tears down "
                                      "the cluster")


def test_a_job_whose_supervisor_is_gone_is_cancelled_here():
    store = default_store()
    job_id = _running_local_job(store, supervisor_pid=None)
    result = cancel_job(store, store.get_job(job_id))
    assert result.outcome is CancelOutcome.CANCELLED and result.status is JobStatus.RUNNING
    assert store.get_job(job_id).status is JobStatus.CANCELLED and store.get_cluster("c-local").terminated
    assert st.cancel_text(result) == f"{job_id} cancelled"
    again = cancel_job(store, store.get_job(job_id))
    assert again.outcome is CancelOutcome.ALREADY_ENDED and again.status is JobStatus.CANCELLED
