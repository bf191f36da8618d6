"""The job run loop (orchestrator/runs/executor.py + attempt.py) against fake backends and a fake Ray
Jobs API: plan -> launch -> submit -> watch -> teardown, failover, recovery, restarts and the budget.

The real planner plans over the real catalog; only the provider, the Jobs API client and the clock
are fakes (tests/support/fakes_runs.py). Every test also checks that nothing is left behind: each
launched cluster terminated exactly once, each connection closed, no live cluster row in the store.
"""
from __future__ import annotations

import pytest

from infra.base import CapacityError, CredentialsError, ProvisionError, QuotaError, QuotaScope
from orchestrator.errors import (EXIT_CREDENTIALS, EXIT_PROVISIONING, CloudCredentialsError, JobFailedError,
                                 ProvisioningFailedError)
from orchestrator.cost import usd
from orchestrator.paths import job_log_path
from orchestrator.planning.spec import parse_job
from orchestrator.runs.executor import make_plan
from orchestrator.runs.ray_jobs import JobsApiError
from tests.support.fakes_runs import FakeBackend, JobsFactory, Leak, RecordingDisplay
from tests.support.run_loop import (
    AWS_JOB, HEAD_SILENT, SUCCESS, assert_nothing_left, events, new_job, price, run, statuses)


def node_cost(seconds: float, per_hour: float):
    """seconds x price as pytest.approx: billing starts at the cloud's launch time, a wall-clock reading
    (a few ms of real time move it; a second of node time is the tolerance)."""
    return pytest.approx(seconds * per_hour / 3600, abs=per_hour / 3600)


# --- (1) the success path --------------------------------------------------------------------------

def test_success_records_result_cost_and_tears_down(store, clock):
    spec, plan, job_id = new_job(store)
    chosen = plan.chosen
    aws = FakeBackend("aws", clock=clock, launch_seconds=300)
    jobs = JobsFactory(clock, SUCCESS, dt=60)
    display = RecordingDisplay()
    t0 = clock()

    res = run(job_id, store, plan, [aws], jobs, clock, display=display)

    assert (res.status, res.exit_code, res.job_id) == ("SUCCEEDED", 0, job_id)
    assert res.result == {"accuracy": 0.93, "loss": 0.2}
    row = store.get_job(job_id)
    assert row.status == "SUCCEEDED" and row.ended_at and row.started_at
    assert row.metrics == {"accuracy": 0.93, "loss": 0.2}
    assert (row.attempts, row.preemptions) == (1, 0)
    assert (row.backend, row.offer_key, row.spot) == ("aws", chosen.offer.key, chosen.spot)
    assert row.ray_submission_id == f"dlrun-{job_id}-1" and row.ray_address == "http://fake-head"
    assert row.actual_run_seconds == pytest.approx(2 * 60)  # RUNNING at poll 2, SUCCEEDED at poll 4
    # cost = node-seconds (launch + 4 polls of the fake clock) x the launch price
    assert row.price_per_hour == pytest.approx(price(chosen))
    assert clock() - t0 == pytest.approx(300 + 4 * 60)
    assert row.actual_cost > 0
    assert row.actual_cost == node_cost(300 + 4 * 60, price(chosen))
    assert statuses(store, job_id) == ["PENDING", "PROVISIONING", "SUBMITTED", "RUNNING", "SUCCEEDED"]
    assert [e["status"] for e in events(store, job_id, "ray_status")] == ["PENDING", "SUCCEEDED"]
    # what was launched and submitted
    (request,) = aws.requests
    assert (request.offer.key, request.spot, request.num_nodes, request.job_id) == \
        (chosen.offer.key, chosen.spot, 1, job_id)
    (client,) = jobs.clients
    (sub,) = client.submitted
    # on a spot node the command runs under the preemption-notice watcher (jobs/notice.py)
    teed = "python3 -m jobs.tee -- sh -c 'python train.py'"  # its output read for progress (jobs/tee.py)
    assert sub["entrypoint"] == (f"python3 -m jobs.notice --cloud aws -- {teed}" if chosen.spot else teed)
    assert sub["submission_id"] == f"dlrun-{job_id}-1"
    assert sub["runtime_env"]["env_vars"]["DLRUN_JOB_ID"] == job_id
    assert sub["metadata"]["attempt"] == 1 and sub["metadata"]["backend"] == "aws"
    assert client.stopped == []  # a finished Ray job is not stopped
    # the log is kept, every line once; plain lines went to the display
    assert job_log_path(job_id).read_text() == client.text
    assert display.logs == ["installing packages", "epoch 1 starting", "bye"]
    # one result line (printed by the command), with the names the job reported; none on the display
    from orchestrator.cli.render.summary import offer_name, result_line

    line = result_line(store, job_id)
    assert line.startswith(f"{job_id} SUCCEEDED on {offer_name(chosen.offer, chosen.spot)} in ")
    assert line.endswith(f"{usd(row.actual_cost)}: accuracy=0.93 loss=0.2")
    assert not [m for m in display.messages if "SUCCEEDED" in m]
    crow = store.get_cluster(request.cluster_id)
    assert crow.price_per_hour == pytest.approx(price(chosen)) and crow.zone == f"{chosen.offer.region}-a"
    assert_nothing_left(store, job_id, aws)


@pytest.mark.parametrize("offset, billed", [
    (0, 300 + 3 * 60),     # instances launched when asked: the whole launch is billed
    (100, 200 + 3 * 60),   # the cloud reports them launched 100 s into the 300 s launch
    (1000, 3 * 60),        # a launch time after launch() returned is clipped to that moment
])
def test_billing_starts_at_the_clouds_launch_time(store, clock, offset, billed):
    _, plan, job_id = new_job(store)
    aws = FakeBackend("aws", clock=clock, launch_seconds=300, launched_at_offset=offset)
    run(job_id, store, plan, [aws], JobsFactory(clock, ["PENDING", "RUNNING", "SUCCEEDED"], dt=60), clock)

    assert store.get_job(job_id).actual_cost == node_cost(billed, price(plan.chosen))
    assert_nothing_left(store, job_id, aws)


def test_terminal_status_is_never_overwritten(store, clock):
    _, plan, job_id = new_job(store)
    aws = FakeBackend("aws")
    run(job_id, store, plan, [aws], JobsFactory(clock, SUCCESS), clock)
    before = (store.get_job(job_id).status, store.get_job(job_id).ended_at, len(store.events(job_id)))

    assert store.set_status(job_id, "RUNNING") is False
    assert store.set_status(job_id, "FAILED", "late failure", message="nope") is False
    assert store.set_status(job_id, "SUCCEEDED") is False

    row = store.get_job(job_id)
    assert (row.status, row.ended_at, len(store.events(job_id))) == before
    assert row.message is None


def test_external_cancel_mid_run_is_kept(store, clock):
    """`dlrun cancel` marks the job CANCELLED and stops the Ray job; the loop's own final status
    (from Ray's STOPPED) does not write over it."""
    _, plan, job_id = new_job(store)

    def cancel_at_poll_2(client, poll):
        if poll == 2:
            assert store.set_status(job_id, "CANCELLED", "dlrun cancel")

    jobs = JobsFactory(clock, ["RUNNING", "RUNNING", "STOPPED"], on_status=cancel_at_poll_2)
    aws = FakeBackend("aws")
    res = run(job_id, store, plan, [aws], jobs, clock)

    assert (res.status, res.exit_code) == ("CANCELLED", 130)
    assert store.get_job(job_id).status == "CANCELLED"
    cancelled = [e for e in store.events(job_id) if e.kind == "status" and e.status == "CANCELLED"]
    assert [e.detail for e in cancelled] == ["dlrun cancel"]
    assert_nothing_left(store, job_id, aws)


def test_result_matches_the_stored_status_after_an_external_cancel(store, clock):
    _, plan, job_id = new_job(store)

    def cancel_at_poll_2(client, poll):
        if poll == 2:
            store.set_status(job_id, "CANCELLED", "dlrun cancel")

    jobs = JobsFactory(clock, ["RUNNING", "RUNNING", "SUCCEEDED"], on_status=cancel_at_poll_2)
    res = run(job_id, store, plan, [FakeBackend("aws")], jobs, clock)

    assert store.get_job(job_id).status == "CANCELLED"
    assert res.status == "CANCELLED"


# --- (2) failover on provider errors ----------------------------------------------------------------

@pytest.mark.parametrize("error, blocked", [
    (CapacityError("no g-instance capacity in the zone", cloud="aws"), "offer"),
    (ProvisionError("instance stopped while starting", cloud="aws"), "offer"),
    (QuotaError("vCPU quota exhausted", cloud="aws"), "region"),
])
def test_provider_error_on_first_candidate_fails_over(store, clock, error, blocked):
    _, plan, job_id = new_job(store)
    first = plan.chosen
    aws = FakeBackend("aws", [error], clock=clock, launch_seconds=120)
    display = RecordingDisplay()

    res = run(job_id, store, plan, [aws], JobsFactory(clock, SUCCESS, dt=60), clock, display=display)

    assert res.status == "SUCCEEDED"
    r1, r2 = aws.requests
    assert (r1.offer.key, r1.spot) == (first.offer.key, first.spot)
    if blocked == "offer":  # both markets of that offer are out
        assert r2.offer.key != first.offer.key
    else:
        assert r2.offer.region != first.offer.region
    assert events(store, job_id, "provision_failed") == [{"offer": first.offer.key, "error": error.message}]
    assert any("trying the next candidate" in m and error.message in m for m in display.messages)
    row = store.get_job(job_id)
    assert row.attempts == 2 and row.offer_key == r2.offer.key
    assert statuses(store, job_id) == ["PENDING", "PROVISIONING", "PLANNING", "PROVISIONING", "SUBMITTED",
                                       "RUNNING", "SUCCEEDED"]
    assert aws.launched == [r2.cluster_id]  # the failed launch left nothing for dlrun to remove
    assert store.get_cluster(r1.cluster_id).state == "terminated"
    # the failed launch rolled back: nothing billed for it; the second cluster from its launch on
    assert row.actual_cost == node_cost(120 + 4 * 60, r2.offer.hourly(r2.spot))
    assert_nothing_left(store, job_id, aws)


def test_global_quota_blocks_the_cloud_and_moves_on(store, clock):
    spec, plan, job_id = new_job(store, AWS_JOB.replace("[aws]", "[aws, gcp]"))
    first = plan.chosen
    backends = {c: FakeBackend(c) for c in ("aws", "gcp")}
    backends[first.offer.cloud].script = [QuotaError("GPUs (all regions) quota is 0", global_quota=True)]
    other = "gcp" if first.offer.cloud == "aws" else "aws"

    res = run(job_id, store, plan, backends.values(), JobsFactory(clock, SUCCESS), clock)

    assert res.status == "SUCCEEDED"
    assert len(backends[first.offer.cloud].requests) == 1
    assert len(backends[other].requests) == 1 and store.get_job(job_id).backend == other
    assert_nothing_left(store, job_id, *backends.values())


def test_a_scoped_quota_error_blocks_only_what_draws_on_that_quota(store, clock):
    """AWS's spot G-and-VT vCPU bucket exhausted in one region: the same offers on demand, and that
    region's other families, are still candidates; the spot G offers there are not tried again."""
    _, plan, job_id = new_job(store, AWS_JOB + "  spot: always\n")
    first = plan.chosen
    assert first.spot and first.offer.instance_type.startswith("g")
    bucket = QuotaScope(cloud="aws", region=first.offer.region, market="spot", families=("g", "vt"),
                        quota="L-3819A6DF")
    aws = FakeBackend("aws", [QuotaError("VcpuLimitExceeded", cloud="aws", region=first.offer.region,
                                         quota=bucket)], clock=clock)

    res = run(job_id, store, plan, [aws], JobsFactory(clock, SUCCESS), clock)

    assert res.status == "SUCCEEDED"
    r1, r2 = aws.requests
    assert not (r2.spot and r2.offer.region == first.offer.region and r2.offer.instance_type[0] == "g")
    assert r1.offer.key == first.offer.key
    replan = make_plan(parse_job(AWS_JOB, "job.yaml"), frozenset({bucket.key()}), store)
    same = [c for c in replan.candidates if c.offer.key == first.offer.key]
    assert {c.spot: c.eligible for c in same} == {False: True, True: False}
    assert "L-3819A6DF" in next(c.reason for c in same if c.spot)
    assert_nothing_left(store, job_id, aws)


# --- (3)/(4) failing everywhere ---------------------------------------------------------------------

def test_credentials_refused_on_every_cloud(store, clock):
    _, plan, job_id = new_job(store, AWS_JOB.replace("[aws]", "[aws, gcp]"))
    aws = FakeBackend("aws", default=CredentialsError("AWS credentials not found; run `aws configure`",
                                                      cloud="aws"))
    gcp = FakeBackend("gcp", default=CredentialsError("no GCP credentials; run `gcloud auth "
                                                      "application-default login`", cloud="gcp"))

    with pytest.raises(CloudCredentialsError) as ei:
        run(job_id, store, plan, [aws, gcp], JobsFactory(clock, SUCCESS), clock)

    assert ei.value.exit_code == EXIT_CREDENTIALS == 4
    msg = ei.value.message
    assert "aws " in msg and "aws configure" in msg and "gcp " in msg and "gcloud auth" in msg
    assert len(aws.requests) == 1 and len(gcp.requests) == 1  # a credentials error blocks the whole cloud
    row = store.get_job(job_id)
    assert row.status == "FAILED" and "aws configure" in row.message
    assert len(events(store, job_id, "provision_failed")) == 2
    assert aws.launched == gcp.launched == []
    assert_nothing_left(store, job_id, aws, gcp)


def test_provisioning_fails_everywhere(store, clock):
    text = """
name: fake-train
run: python train.py
reference: {accelerator: T4, hours: 1}
resources:
  accelerators: T4:1
  clouds: [aws, gcp]
  regions: [us-east-1, us-central1]
"""
    _, plan, job_id = new_job(store, text)
    aws_keys = {c.offer.key for c in plan.candidates if c.feasible and c.offer.cloud == "aws"}
    assert len(aws_keys) >= 2 and any(c.feasible and c.offer.cloud == "gcp" for c in plan.candidates)
    aws = FakeBackend("aws", default=ProvisionError("instance stopped while starting: Server.InternalError",
                                                    cloud="aws"))
    gcp = FakeBackend("gcp", default=QuotaError("NVIDIA_T4_GPUS quota exceeded in us-central1", cloud="gcp",
                                                region="us-central1"))

    with pytest.raises(ProvisioningFailedError) as ei:
        run(job_id, store, plan, [aws, gcp], JobsFactory(clock, SUCCESS), clock)

    assert ei.value.exit_code == EXIT_PROVISIONING == 5
    assert "provisioning failed everywhere" in ei.value.message and "quota exceeded" in ei.value.message
    # an offer-scope error blocks that offer (both markets): each aws offer tried once;
    # a region-scope error blocks the region: one gcp launch
    assert sorted(r.offer.key for r in aws.requests) == sorted(aws_keys)
    assert len(gcp.requests) == 1
    assert store.get_job(job_id).status == "FAILED"
    assert len(events(store, job_id, "provision_failed")) == len(aws_keys) + 1
    assert_nothing_left(store, job_id, aws, gcp)


def test_mixed_credentials_and_capacity_is_a_provisioning_failure(store, clock):
    text = AWS_JOB.replace("[aws]", "[aws, gcp]").replace("clouds", "accelerators: T4:1\n  regions: "
                                                          "[us-east-1, us-central1]\n  clouds")
    _, plan, job_id = new_job(store, text)
    aws = FakeBackend("aws", default=CredentialsError("AWS credentials expired", cloud="aws"))
    gcp = FakeBackend("gcp", default=CapacityError("ZONE_RESOURCE_POOL_EXHAUSTED", cloud="gcp"))

    with pytest.raises(ProvisioningFailedError) as ei:
        run(job_id, store, plan, [aws, gcp], JobsFactory(clock, SUCCESS), clock)

    assert ei.value.exit_code == 5 and "AWS credentials expired" in ei.value.message
    assert len(aws.requests) == 1
    assert_nothing_left(store, job_id, aws, gcp)


def test_unexpected_launch_error_removes_what_the_launch_made(store, clock):
    _, plan, job_id = new_job(store)
    aws = FakeBackend("aws", [Leak(RuntimeError("boto3 blew up"))])

    with pytest.raises(RuntimeError, match="boto3 blew up"):
        run(job_id, store, plan, [aws], JobsFactory(clock, SUCCESS), clock)

    assert aws.list_owned_calls == 1  # found by its tags and terminated
    assert store.get_job(job_id).status == "FAILED"
    assert_nothing_left(store, job_id, aws)


def test_ctrl_c_during_launch_cancels_and_cleans_up(store, clock):
    _, plan, job_id = new_job(store)
    aws = FakeBackend("aws", [Leak(KeyboardInterrupt())])

    with pytest.raises(KeyboardInterrupt):
        run(job_id, store, plan, [aws], JobsFactory(clock, SUCCESS), clock)

    assert store.get_job(job_id).status == "CANCELLED"
    assert_nothing_left(store, job_id, aws)


def test_ctrl_c_while_watching_stops_the_ray_job(store, clock):
    _, plan, job_id = new_job(store)
    aws = FakeBackend("aws")
    jobs = JobsFactory(clock, ["RUNNING", KeyboardInterrupt()])
    display = RecordingDisplay(cancel=True)

    res = run(job_id, store, plan, [aws], jobs, clock, display=display)

    assert (res.status, res.exit_code) == ("CANCELLED", 130)
    assert display.cancel_asked == 1
    assert jobs.clients[0].stopped == [f"dlrun-{job_id}-1"]  # once: by the watcher, not again at teardown
    assert events(store, job_id, "cancel_requested") == [{"by": "Ctrl-C"}]
    assert store.get_job(job_id).status == "CANCELLED"
    assert_nothing_left(store, job_id, aws)


def test_cluster_whose_head_never_answers_fails_over(store, clock):
    """connect() raising a ProviderError (boot failed, the head never answered) is a provisioning
    failure: that cluster is torn down (and paid for), the offer blocked, the next candidate tried."""
    _, plan, job_id = new_job(store)
    aws = FakeBackend("aws", clock=clock, launch_seconds=200, connect_errors=[HEAD_SILENT])

    res = run(job_id, store, plan, [aws], JobsFactory(clock, SUCCESS, dt=60), clock)

    assert res.status == "SUCCEEDED"
    r1, r2 = aws.requests
    assert r1.offer.key == plan.chosen.offer.key and r2.offer.key != r1.offer.key
    assert aws.terminated == [r1.cluster_id, r2.cluster_id]
    assert events(store, job_id, "provision_failed") == [{"offer": r1.offer.key, "error": HEAD_SILENT.message}]
    assert len(aws.connections) == 1  # the failed connect opened nothing
    p1, p2 = price(plan.chosen), r2.offer.hourly(r2.spot)
    assert store.get_job(job_id).actual_cost == pytest.approx((200 * p1 + (200 + 4 * 60) * p2) / 3600,
                                                                 abs=(p1 + p2) / 3600)
    assert_nothing_left(store, job_id, aws)


def test_a_head_that_never_took_the_job_fails_over_in_one_line(store, clock):
    """A submission the head kept refusing while it was not ready (the client's retries ran out: no answer)
    is a failed boot, never an internal error: that cluster is torn down, the next candidate runs the job."""
    _, plan, job_id = new_job(store)
    aws = FakeBackend("aws", clock=clock, launch_seconds=200)
    silent = JobsApiError("no answer from the Ray head at http://127.0.0.1:8265: Remote end closed connection "
                          "without response")
    jobs = JobsFactory(clock, SUCCESS, dt=60, submit_errors=(silent,))

    res = run(job_id, store, plan, [aws], jobs, clock)

    assert res.status == "SUCCEEDED"
    r1, r2 = aws.requests
    assert r2.offer.key != r1.offer.key and aws.terminated == [r1.cluster_id, r2.cluster_id]
    [failed] = events(store, job_id, "provision_failed")
    assert failed["offer"] == r1.offer.key and "did not take the job" in failed["error"]
    assert "Remote end closed connection" in failed["error"]
    assert_nothing_left(store, job_id, aws)


def test_a_submission_the_head_refuses_fails_the_job_in_one_line(store, clock):
    """Ray's 400 (a request it will never take) is the job's error with Ray's reason, not a failover."""
    _, plan, job_id = new_job(store)
    aws = FakeBackend("aws", clock=clock, launch_seconds=200)
    refused = JobsApiError("Ray Jobs API POST /api/jobs/: 400 ValueError: bad runtime_env", status=400)

    with pytest.raises(JobFailedError, match="refused the job: .*bad runtime_env"):
        run(job_id, store, plan, [aws], JobsFactory(clock, SUCCESS, dt=60, submit_errors=(refused,)), clock)

    assert len(aws.requests) == 1
    assert_nothing_left(store, job_id, aws)
