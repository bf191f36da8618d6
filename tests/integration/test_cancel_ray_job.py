"""`dlrun cancel` (orchestrator/runs/cancel.py) asking a Ray head to stop the job's Ray job: real RayJobs over
HTTP against a stand-in of the stop endpoint (tests/support/ray_stop_head.py), or against a port where no head
answers any more; a job not on Ray yet, whose supervisor (a real process) is told with SIGTERM. The decisions
without a supervisor: tests/unit/test_cancel.py."""
from __future__ import annotations

import os
import subprocess
import sys

from infra.reach import free_port
from orchestrator.cli import status as st
from orchestrator.runs.cancel import CancelOutcome, cancel_job
from orchestrator.state.db import default_store
from orchestrator.states import JobStatus
from tests.support.ray_stop_head import RayStopHead
from tests.support.store_records import running_local_job


def test_cancel_stops_the_ray_job_and_leaves_the_rest_to_the_live_supervisor():
    store = default_store()
    with RayStopHead() as head:
        job_id = running_local_job(store, ray_address=head.endpoint, supervisor_pid=os.getpid())  # this process: alive
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
    job_id = running_local_job(store, ray_address=address, supervisor_pid=None)
    result = cancel_job(store, store.get_job(job_id))
    assert result.outcome is CancelOutcome.CANCELLED
    assert result.ray_stop is not None and not result.ray_stop.stopped
    assert store.get_job(job_id).status is JobStatus.CANCELLED and store.get_cluster("c-local").terminated
    assert st.cancel_text(result) == (f"{job_id} cancelled\n  (Ray job dlrun-{job_id}-1 at {address} not stopped: "
                                      "its head did not answer, or the job had already ended)")


def test_a_ray_job_that_had_already_ended_is_noted_too():
    store = default_store()
    with RayStopHead() as head:
        job_id = running_local_job(store, ray_address=head.endpoint, supervisor_pid=None)
        head.ended.add(f"dlrun-{job_id}-1")
        result = cancel_job(store, store.get_job(job_id))
    assert head.stop_requests == [f"dlrun-{job_id}-1"]
    assert result.outcome is CancelOutcome.CANCELLED and result.ray_stop is not None
    assert not result.ray_stop.stopped and store.get_job(job_id).status is JobStatus.CANCELLED
    assert st.cancel_text(result).endswith("not stopped: its head did not answer, or the job had already ended)")


def test_a_job_with_a_live_supervisor_is_left_to_it_and_one_not_on_ray_yet_gets_sigterm():
    """No Ray job recorded (still provisioning or booting): nothing on Ray to stop, so the supervisor is told
    with SIGTERM (it cancels as Ctrl-C does, orchestrator/runs/sigterm.py); a Python process stands for it."""
    supervisor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        store = default_store()
        job_id = running_local_job(store, supervisor_pid=supervisor.pid)
        result = cancel_job(store, store.get_job(job_id))
        assert result.outcome is CancelOutcome.LEFT_TO_SUPERVISOR and result.ray_stop is None
        assert supervisor.wait(10) == -15  # SIGTERM
        assert store.get_job(job_id).status is JobStatus.RUNNING  # the supervisor records how it ended
        assert not store.get_cluster("c-local").terminated  # and tears down
        assert st.cancel_text(result) == (f"{job_id}: cancel requested; its supervisor stops the job and tears "
                                          "down the cluster")
    finally:
        supervisor.kill()
        supervisor.wait()
