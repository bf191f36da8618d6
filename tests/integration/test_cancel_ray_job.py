"""`dlrun cancel` (orchestrator/runs/cancel.py) asking a Ray head to stop the job's Ray job: real RayJobs over
HTTP against a stand-in of the stop endpoint (tests/support/ray_stop_head.py), or against a port where no head
answers any more. The decisions without a Ray job: tests/unit/test_cancel.py."""
from __future__ import annotations

import os
import time

from infra.reach import free_port
from orchestrator.cli import status as st
from orchestrator.runs.cancel import CancelOutcome, cancel_job
from orchestrator.state.db import default_store
from orchestrator.states import JobStatus
from tests.support.ray_stop_head import RayStopHead


def _submitted_local_job(store, address: str, supervisor_pid: int | None) -> str:
    job_id = store.create_job(name="local", spec_hash="h", spec_json="{}")
    store.set_supervisor(job_id, supervisor_pid)
    store.start_attempt(job_id, attempt=1, backend="local", offer_key="local/here/cpu", instance_type=None,
                        accelerator="CPU", accelerator_count=0, spot=False, price_per_hour=0.0, price_date=None,
                        cluster_id="c-local")
    store.cluster_launching("c-local", provider="local", job_id=job_id, region=None, instance_type=None,
                            spot=False, num_nodes=1, price_per_hour=0.0, launched_at=time.time())
    store.mark_submitted(job_id, f"dlrun-{job_id}-1", address)
    store.set_status(job_id, JobStatus.RUNNING)
    return job_id


def test_cancel_stops_the_ray_job_and_leaves_the_rest_to_the_live_supervisor():
    store = default_store()
    with RayStopHead() as head:
        job_id = _submitted_local_job(store, head.endpoint, supervisor_pid=os.getpid())  # this process: alive
        head.running.add(f"dlrun-{job_id}-1")
        result = cancel_job(store, store.get_job(job_id))
    assert head.stop_requests == [f"dlrun-{job_id}-1"]
    assert result.outcome is CancelOutcome.LEFT_TO_SUPERVISOR
    assert result.ray_stop is not None and result.ray_stop.stopped
    assert st.cancel_text(result) == (f"{job_id}: cancel requested; its supervisor stops the job and tears down "
                                      "the cluster")
    assert store.get_job(job_id).live and not store.get_cluster("c-local").terminated


def test_a_head_that_no_longer_answers_is_noted_and_the_cancel_goes_on():
    store = default_store()
    address = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    job_id = _submitted_local_job(store, address, supervisor_pid=None)
    result = cancel_job(store, store.get_job(job_id))
    assert result.outcome is CancelOutcome.CANCELLED
    assert result.ray_stop is not None and not result.ray_stop.stopped
    assert store.get_job(job_id).status is JobStatus.CANCELLED and store.get_cluster("c-local").terminated
    assert st.cancel_text(result) == (f"{job_id} cancelled\n  (Ray job dlrun-{job_id}-1 at {address} not stopped: "
                                      "its head did not answer, or the job had already ended)")


def test_a_ray_job_that_had_already_ended_is_noted_too():
    store = default_store()
    with RayStopHead() as head:
        job_id = _submitted_local_job(store, head.endpoint, supervisor_pid=None)
        head.ended.add(f"dlrun-{job_id}-1")
        result = cancel_job(store, store.get_job(job_id))
    assert head.stop_requests == [f"dlrun-{job_id}-1"]
    assert result.outcome is CancelOutcome.CANCELLED and result.ray_stop is not None
    assert not result.ray_stop.stopped and store.get_job(job_id).status is JobStatus.CANCELLED
    assert st.cancel_text(result).endswith("not stopped: its head did not answer, or the job had already ended)")
