"""`dlrun status`, `dlrun cancel` and the result line, read from the store's records (the store is a
file under the test's $DLRUN_HOME; no Ray, no cloud)."""
from __future__ import annotations

import json
import time

import pytest

from orchestrator.cli import status as st
from orchestrator.cli.render.summary import result_line
from orchestrator.monitoring.costs import accrued_cost
from orchestrator.state.db import default_store
from orchestrator.states import JobStatus


def _aws_job(store, *, finished: bool = True) -> str:
    job_id = store.create_job(name="digits", spec_hash="h", spec_json="{}", max_cost=2.0, est_cost=0.3)
    store.set_supervisor(job_id, None)
    store.start_attempt(job_id, attempt=1, backend="aws", offer_key="aws/us-east-1/g4dn.xlarge",
                        instance_type="g4dn.xlarge", accelerator="T4", accelerator_count=1, spot=True,
                        price_per_hour=0.36, price_date="2026-11-01", cluster_id="c-aws")
    store.cluster_launching("c-aws", provider="aws", job_id=job_id, region="us-east-1", instance_type="g4dn.xlarge",
                            spot=True, num_nodes=2, price_per_hour=0.18, launched_at=time.time() - 3600)
    store.cluster_up("c-aws", zone="us-east-1b", launched_at=time.time() - 3600, cluster_json="{}")
    store.mark_submitted(job_id, f"dlrun-{job_id}-1", "http://127.0.0.1:8265")
    store.set_status(job_id, JobStatus.RUNNING)
    store.add_event(job_id, "epoch", {"epoch": 1, "loss": 0.25})
    store.set_actual_cost(job_id, 0.05)
    if finished:
        store.cluster_terminated("c-aws")
        store.finish(job_id, JobStatus.SUCCEEDED, "", actual_seconds=3600.0, result={"accuracy": 0.97})
    return job_id


def test_status_json_of_a_finished_and_a_pending_job(capsys):
    store = default_store()
    done = _aws_job(store)
    pending = store.create_job(name="later", spec_hash="h", spec_json="{}")
    st.show_jobs(as_json=True)
    listed = {j["id"]: j for j in json.loads(capsys.readouterr().out)}
    d = listed[done]
    assert (d["status"], d["spot"], d["backend"], d["metrics"], d["accrued_cost"]) == (
        "SUCCEEDED", True, "aws", {"accuracy": 0.97}, 0.05)
    assert d["ended_at"].startswith(time.strftime("%Y-")) and "spec_json" not in d and "_raw" not in d
    assert (listed[pending]["spot"], listed[pending]["metrics"], listed[pending]["started_at"]) == (None, None, None)
    st.show_job(done, as_json=True)
    events = json.loads(capsys.readouterr().out)["events"]
    [epoch] = [e for e in events if e["kind"] == "epoch"]
    assert (epoch["status"], epoch["detail"]) == (None, {"epoch": 1, "loss": 0.25})


def test_status_of_one_job_in_words(capsys):
    job_id = _aws_job(default_store())
    st.show_job(job_id)
    out = capsys.readouterr().out
    assert "status: SUCCEEDED" in out and "spot: yes" in out and "aws us-east-1 g4dn.xlarge T4 spot" in out
    assert "cost: $0.05" in out and "reported: accuracy=0.97" in out
    assert "epoch" in out and "loss=0.25" in out  # an event's JSON detail, as the job reported it


def test_a_live_jobs_cost_counts_its_cluster_up_to_now():
    store = default_store()
    job = store.get_job(_aws_job(store, finished=False))
    cost = accrued_cost(store, job, now=store.get_cluster("c-aws").launched_at + 1800)
    assert cost == pytest.approx(0.05 + 0.18 * 2 / 2)  # recorded + half an hour of two nodes


def test_the_result_line_of_a_success_says_what_the_job_reported():
    store = default_store()
    job_id = _aws_job(store)
    assert result_line(store, job_id) == (f"{job_id} SUCCEEDED on aws us-east-1 g4dn.xlarge T4 spot in 60 min, "
                                          "$0.05: accuracy=0.97")


def test_cancel_without_a_supervisor_tears_down_and_says_so():
    store = default_store()
    job_id = store.create_job(name="local", spec_hash="h", spec_json="{}")
    store.start_attempt(job_id, attempt=1, backend="local", offer_key="local/here/cpu", instance_type=None,
                        accelerator="CPU", accelerator_count=0, spot=False, price_per_hour=0.0, price_date=None,
                        cluster_id="c-local")
    store.cluster_launching("c-local", provider="local", job_id=job_id, region=None, instance_type=None,
                            spot=False, num_nodes=1, price_per_hour=0.0, launched_at=time.time())
    assert st.cancel(job_id) == f"{job_id} cancelled"
    job = store.get_job(job_id)
    assert job.status is JobStatus.CANCELLED and job.actual_seconds >= 0 and store.get_cluster("c-local").terminated
    line = result_line(store, job_id)
    assert line.startswith(f"{job_id} CANCELLED on local CPU after") and "(dlrun cancel)" in line
    assert line.endswith("nothing is left running (the local Ray head stays up for its dashboard; "
                         "`dlrun down` stops it)")
    assert st.cancel(job_id) == f"{job_id} already ended (CANCELLED)"


def test_a_job_over_budget_on_a_cloud_says_what_is_still_up():
    store = default_store()
    job_id = _aws_job(store, finished=False)
    store.finish(job_id, JobStatus.BUDGET_EXCEEDED, "accrued $2.01 reached max $2", actual_seconds=60.0)
    line = result_line(store, job_id)
    assert "BUDGET_EXCEEDED" in line and "(accrued $2.01 reached max $2)" in line
    assert "cluster c-aws is still up (`dlrun down c-aws` removes it)" in line
    assert "local Ray head" not in line
