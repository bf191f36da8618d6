"""The store's records and named writes: what a job, cluster, event and schedule look like to callers,
and what each write changes (a Store on a temp file; sqlite is a file, not a socket)."""
from __future__ import annotations

import dataclasses
import json

import pytest

from orchestrator.state.records import ClusterRecord, EventRecord, JobRecord, ScheduleRecord, ScheduleRunRecord
from orchestrator.states import IllegalTransition, JobStatus


def _job(store, **fields) -> str:
    return store.create_job(name="digits", spec_hash="h", spec_json="{}", max_cost=5.0, **fields)


def _attempt(store, job_id, attempt=1, cluster_id="c-1", spot=True):
    store.start_attempt(job_id, attempt=attempt, backend="aws", offer_key="aws/us-east-1/g4dn.xlarge",
                        instance_type="g4dn.xlarge", accelerator="T4", accelerator_count=1, spot=spot,
                        price_per_hour=0.1578, price_date="2026-11-01", cluster_id=cluster_id)


# --- records ---------------------------------------------------------------------------------------

def test_a_new_job_reads_back_with_typed_empty_values(store):
    job = store.get_job(_job(store, est_cost=0.5, est_start_seconds=12.5, model_family="conv"))
    assert isinstance(job, JobRecord)
    assert job.status is JobStatus.PENDING and job.live
    assert (job.actual_cost, job.preemptions, job.attempts, job.metrics, job.spot) == (0.0, 0, 0, {}, False)
    assert isinstance(job.actual_cost, float)
    assert (job.backend, job.actual_seconds, job.started_at, job.ended_at) == (None, None, None, None)
    assert (job.est_cost, job.est_start_seconds, job.model_family, job.max_cost) == (0.5, 12.5, "conv", 5.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.status = JobStatus.FAILED  # type: ignore[misc]


def test_a_job_is_found_by_id_prefix_or_name_and_listed_newest_first(store):
    first, second = _job(store), _job(store)
    assert store.get_job(first).id == first and store.get_job(first[:6]) is not None
    assert store.get_job("digits").id == second and store.get_job("nope") is None
    assert [j.id for j in store.list_jobs()] == [second, first]
    store.set_status(first, JobStatus.FAILED)
    assert [j.id for j in store.list_jobs(live_only=True)] == [second]


def test_an_event_gives_its_detail_as_text_and_as_data(store):
    job_id = _job(store)
    store.add_event(job_id, "plan", {"chosen": "aws T4", "est_hours": 0.2})
    store.add_event(job_id, "note", "plain words")
    created, plan, note = store.events(job_id)
    assert isinstance(plan, EventRecord)
    assert (created.kind, created.status, created.detail, created.data) == ("status", "PENDING", "", {})
    assert plan.data == {"chosen": "aws T4", "est_hours": 0.2} and json.loads(plan.detail) == plan.data
    assert (note.detail, note.data) == ("plain words", {})


def test_a_row_with_nulls_becomes_the_natural_empty_values():
    cluster = ClusterRecord.from_row({"id": "c", "job_id": None, "provider": "aws", "region": None, "zone": None,
                                      "instance_type": None, "spot": None, "price_per_hour": None,
                                      "num_nodes": None, "state": "up", "launched_at": 1.0,
                                      "terminated_at": None, "cluster_json": None})
    assert (cluster.spot, cluster.price_per_hour, cluster.num_nodes, cluster.terminated) == (False, 0.0, 1, False)
    run = ScheduleRunRecord.from_row({"id": 1, "schedule_id": "s", "due_at": 1.0, "fired_at": 2.0,
                                      "job_id": None, "outcome": "error", "detail": None})
    assert run.detail == ""
    event = EventRecord.from_row({"id": 1, "job_id": "j", "ts": 1.0, "kind": "x", "status": None,
                                  "detail": "[1, 2]"})
    assert event.data == {}  # JSON, but not an object


def test_a_schedule_reads_back_with_its_flags_as_booleans(store, tmp_path):
    from orchestrator.state import schedules as ss

    job_file = tmp_path / "job.yaml"
    job_file.write_text("name: nightly\nrun: python -c pass\nresources: {clouds: [local]}\n")
    sched = ss.add_schedule(store, job_file, "0 2 * * *", tz="UTC", follow_file=True, now=0.0)
    assert isinstance(sched, ScheduleRecord)
    assert (sched.name, sched.follow_file, sched.paused, sched.next_run_at) == ("nightly", True, False, 7200.0)
    assert ss.set_paused(store, "nightly", True).paused is True
    assert [s.name for s in ss.list_schedules(store)] == ["nightly"] and ss.runs(store, "nightly") == []


# --- status changes --------------------------------------------------------------------------------

def test_set_status_records_the_change_its_time_and_message(store):
    job_id = _job(store)
    assert store.set_status(job_id, JobStatus.PLANNING)
    assert store.set_status(job_id, JobStatus.RUNNING)
    started = store.get_job(job_id).started_at
    assert store.set_status(job_id, JobStatus.RECOVERING, "preempted", message="spot reclaimed")
    assert store.set_status(job_id, JobStatus.RUNNING)
    job = store.get_job(job_id)
    assert job.started_at == started and job.message == "spot reclaimed"  # started once, at the first run
    assert [(e.status, e.detail) for e in store.events(job_id)][-2:] == [("RECOVERING", "preempted"),
                                                                          ("RUNNING", "")]
    with pytest.raises(IllegalTransition):
        store.set_status(job_id, JobStatus.PENDING)


def test_an_ended_job_keeps_its_status(store):
    job_id = _job(store)
    assert store.cancel(job_id, "dlrun cancel", actual_seconds=3.0)
    assert not store.set_status(job_id, JobStatus.RUNNING)
    assert not store.fail(job_id, JobStatus.FAILED, "too late")
    job = store.get_job(job_id)
    assert job.status is JobStatus.CANCELLED and job.actual_seconds == 3.0 and job.ended_at
    assert job.message is None


def test_mark_submitted_sets_the_status_and_both_ray_columns(store):
    job_id = _job(store)
    assert store.mark_submitted(job_id, "dlrun-j-1", "http://127.0.0.1:8265")
    job = store.get_job(job_id)
    assert (job.status, job.ray_submission_id, job.ray_address) == (
        JobStatus.SUBMITTED, "dlrun-j-1", "http://127.0.0.1:8265")
    assert store.events(job_id)[-1].detail == "dlrun-j-1"
    store.set_ray_address(job_id, "http://10.0.0.2:8265")
    assert store.get_job(job_id).ray_address == "http://10.0.0.2:8265"


def test_finish_records_the_end_and_its_numbers(store):
    job_id = _job(store)
    store.set_status(job_id, JobStatus.RUNNING)
    ended = store.finish(job_id, JobStatus.SUCCEEDED, "done", actual_seconds=40.0, actual_run_seconds=31.5,
                         result={"accuracy": 0.97})
    job = store.get_job(job_id)
    assert ended is JobStatus.SUCCEEDED and job.status is JobStatus.SUCCEEDED
    assert (job.actual_seconds, job.actual_run_seconds, job.metrics) == (40.0, 31.5, {"accuracy": 0.97})
    assert job.ended_at >= job.started_at


def test_finish_after_a_cancel_keeps_the_cancel_and_still_records_the_numbers(store):
    job_id = _job(store)
    store.set_metrics(job_id, {"epoch": 3})
    store.cancel(job_id, "dlrun cancel", actual_seconds=5.0)
    ended_at = store.get_job(job_id).ended_at
    assert store.finish(job_id, JobStatus.FAILED, "ray job stopped", actual_seconds=9.0) is JobStatus.CANCELLED
    job = store.get_job(job_id)
    assert (job.status, job.actual_seconds, job.ended_at, job.metrics) == (
        JobStatus.CANCELLED, 9.0, ended_at, {"epoch": 3})  # no result: the last metrics stay
    assert [e.status for e in store.events(job_id)][-1] == "CANCELLED"


def test_fail_records_the_message_only_for_a_live_job_and_only_a_failure(store):
    job_id = _job(store)
    assert store.fail(job_id, JobStatus.BUDGET_EXCEEDED, "$0.40 left, $0.90 needed")
    job = store.get_job(job_id)
    assert (job.status, job.message) == (JobStatus.BUDGET_EXCEEDED, "$0.40 left, $0.90 needed")
    with pytest.raises(ValueError):
        store.fail(_job(store), JobStatus.SUCCEEDED, "not a failure")


# --- the other job writes --------------------------------------------------------------------------

def test_start_attempt_records_the_offer_and_its_cluster(store):
    job_id = _job(store)
    _attempt(store, job_id, attempt=2, spot=True)
    job = store.get_job(job_id)
    assert (job.attempts, job.backend, job.offer_key, job.instance_type, job.accelerator,
            job.accelerator_count, job.spot, job.price_per_hour, job.price_date, job.cluster_id) == (
        2, "aws", "aws/us-east-1/g4dn.xlarge", "g4dn.xlarge", "T4", 1, True, 0.1578, "2026-11-01", "c-1")


def test_counters_costs_metrics_and_supervisor(store):
    job_id = _job(store)
    store.set_preemptions(job_id, 2)
    store.set_actual_cost(job_id, 0.125)
    store.set_metrics(job_id, {"epoch": 1, "loss": 0.5})
    store.set_supervisor(job_id, 4242)
    store.set_run_key(job_id, "digits-3f2a")
    job = store.get_job(job_id)
    assert (job.preemptions, job.actual_cost, job.metrics, job.supervisor_pid, job.run_key) == (
        2, 0.125, {"epoch": 1, "loss": 0.5}, 4242, "digits-3f2a")
    assert store.job_run_by(4242, since=job.created_at - 1).id == job_id
    assert store.job_run_by(4242, since=job.created_at + 1) is None
    assert not store.claim_supervisor(job_id, expected=1, claim=7)
    assert store.claim_supervisor(job_id, expected=4242, claim=7) and store.get_job(job_id).supervisor_pid == 7
    store.set_supervisor(job_id, None)
    assert store.get_job(job_id).supervisor_pid is None


def test_checkpoint_locations_are_the_first_used_per_cloud(store):
    job_id = _job(store)
    store.record_checkpoint(job_id, "aws", "s3://dlrun-a/runs/k", 1)
    store.record_checkpoint(job_id, "gcp", "gs://dlrun-b/runs/k", 2)
    store.record_checkpoint(job_id, "aws", "s3://dlrun-c/runs/k", 3)
    assert store.checkpoint_locations(job_id) == {"aws": "s3://dlrun-a/runs/k", "gcp": "gs://dlrun-b/runs/k"}
    assert store.checkpoint_locations(_job(store)) == {}
    shown = [e.data for e in store.events(job_id) if e.kind == "checkpoint"]  # still in the job's history
    assert shown[0] == {"cloud": "aws", "location": "s3://dlrun-a/runs/k", "attempt": 1}


def test_finished_runs_are_the_succeeded_jobs_with_both_run_times(store):
    done = _job(store, est_run_seconds=100.0, est_start_seconds=8.0, accelerator="T4")
    store.finish(done, JobStatus.SUCCEEDED, "", actual_seconds=130.0, actual_run_seconds=120.0)
    failed = _job(store, est_run_seconds=100.0)
    store.finish(failed, JobStatus.FAILED, "", actual_seconds=10.0, actual_run_seconds=5.0)
    unmeasured = _job(store, est_run_seconds=100.0)
    store.finish(unmeasured, JobStatus.SUCCEEDED, "", actual_seconds=10.0)
    [run] = store.finished_runs()
    assert (run.id, run.accelerator, run.est_run_seconds, run.actual_run_seconds, run.est_start_seconds) == (
        done, "T4", 100.0, 120.0, 8.0)


# --- clusters --------------------------------------------------------------------------------------

def test_a_cluster_from_launching_to_terminated(store):
    job_id = _job(store)
    store.cluster_launching("c-1", provider="aws", job_id=job_id, region="us-east-1", instance_type="g4dn.xlarge",
                            spot=True, num_nodes=2, price_per_hour=0.1578, launched_at=100.0)
    c = store.get_cluster("c-1")
    assert isinstance(c, ClusterRecord)
    assert (c.state, c.spot, c.num_nodes, c.price_per_hour, c.launched_at, c.zone, c.cluster_json) == (
        "launching", True, 2, 0.1578, 100.0, None, None)
    store.cluster_up("c-1", zone="us-east-1b", launched_at=104.0, cluster_json='{"cluster_id": "c-1"}')
    c = store.get_cluster("c-1")
    assert (c.state, c.zone, c.launched_at, c.cluster_json) == ("up", "us-east-1b", 104.0, '{"cluster_id": "c-1"}')
    assert [x.id for x in store.clusters()] == ["c-1"] and [x.id for x in store.job_clusters(job_id)] == ["c-1"]
    store.cluster_terminated("c-1")
    first = store.get_cluster("c-1")
    store.cluster_terminated("c-1")  # idempotent: the first time stays
    assert first.terminated and store.get_cluster("c-1") == first and first.price_per_hour == 0.1578
    assert store.clusters() == [] and [x.id for x in store.clusters(live_only=False)] == ["c-1"]
    assert store.get_cluster("nope") is None
