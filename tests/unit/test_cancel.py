"""`dlrun cancel`'s decision (orchestrator/runs/cancel.py) on the store's records: a job whose supervisor still
runs is left to it (tests/integration/test_cancel_ray_job.py: a real process stands for it); without one,
cancel tears down and records the cancel itself (tests/unit/test_status_screens.py).
No Ray job here: the ones with a Ray head to ask are in tests/integration/test_cancel_ray_job.py."""
from __future__ import annotations

from orchestrator.cli import status as st
from orchestrator.runs.cancel import CancelOutcome, cancel_job
from orchestrator.state.db import default_store
from orchestrator.states import JobStatus
from tests.support.store_records import running_local_job


def test_a_job_whose_supervisor_is_gone_is_cancelled_here():
    store = default_store()
    job_id = running_local_job(store, supervisor_pid=None)
    result = cancel_job(store, store.get_job(job_id))
    assert result.outcome is CancelOutcome.CANCELLED and result.status is JobStatus.RUNNING
    assert store.get_job(job_id).status is JobStatus.CANCELLED and store.get_cluster("c-local").terminated
    assert st.cancel_text(result) == f"{job_id} cancelled"
    again = cancel_job(store, store.get_job(job_id))
    assert again.outcome is CancelOutcome.ALREADY_ENDED and again.status is JobStatus.CANCELLED
