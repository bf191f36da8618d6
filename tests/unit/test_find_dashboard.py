"""Which dashboard `dlrun dashboard JOB` shows (orchestrator/monitoring/dashboard.find_dashboard), read from the
job's and its cluster's records: a job on this machine's head, and a cloud job whose cluster is gone."""
from __future__ import annotations

import pytest

from orchestrator.errors import UsageError
from orchestrator.monitoring.dashboard import find_dashboard
from orchestrator.states import JobStatus


def _job(store, backend: str, cluster_id: str) -> str:
    job_id = store.create_job(name="digits", spec_hash="h", spec_json="{}")
    store.start_attempt(job_id, attempt=1, backend=backend, offer_key=f"{backend}/x", instance_type="x",
                        accelerator=None, accelerator_count=0, spot=False, price_per_hour=0.0, price_date="2026-11-01",
                        cluster_id=cluster_id)
    store.cluster_launching(cluster_id, provider=backend, job_id=job_id, region="r", instance_type="x", spot=False,
                            num_nodes=1, price_per_hour=0.0, launched_at=1.0)
    return job_id


def test_a_local_job_shows_its_page_on_the_heads_dashboard(store):
    job_id = _job(store, "local", "c-local")
    store.mark_submitted(job_id, "dlrun-sub-1", "http://127.0.0.1:8265")

    board = find_dashboard(store, job_id)

    assert (board.url, board.base, board.tunnel) == ("http://127.0.0.1:8265/#/jobs/dlrun-sub-1",
                                                      "http://127.0.0.1:8265", None)


def test_a_cloud_job_whose_cluster_is_gone_says_so(store):
    job_id = _job(store, "aws", "c-aws")
    store.cluster_terminated("c-aws")
    store.set_status(job_id, JobStatus.CANCELLED)

    with pytest.raises(UsageError, match=rf"job {job_id}'s cluster is gone; its record: `dlrun status {job_id}`"):
        find_dashboard(store, job_id)


def test_no_such_job(store):
    with pytest.raises(UsageError, match="no job 'j-nope'"):
        find_dashboard(store, "j-nope")
