"""The run loop's outcome methods one by one (orchestrator/runs/run_loop.py) and the block keys they add
(orchestrator/planning/blocks.py), on a real store and the real planner over the real catalog.

test_run_loop.py runs whole jobs through them; here each method's own effect is checked: what it blocks,
counts, records and shows, and how finish() turns an ending into the job's status and exit code.
"""
from __future__ import annotations

import pytest

from infra.base import CapacityError, CredentialsError, QuotaError, QuotaScope
from orchestrator.cli.render.display import JobView
from orchestrator.errors import EXIT_INTERRUPTED, EXIT_OK, JobFailedError
from orchestrator.planning import blocks
from orchestrator.runs.context import AttemptContext
from orchestrator.runs.run_loop import RunLoop
from orchestrator.runs.watch import Outcome
from orchestrator.states import Ending, JobStatus
from tests.support.fakes_runs import RecordingDisplay, providers
from tests.support.run_loop import AWS_JOB, new_job

def new_loop(store, clock, text=AWS_JOB):
    spec, plan, job_id = new_job(store, text)
    ctx = AttemptContext(job_id=job_id, spec=spec, store=store, display=RecordingDisplay(),
                         view=JobView(job_id=job_id, name=spec.name), checkpoint="/unused", clock=clock)
    assert plan.chosen is not None
    return RunLoop(ctx, providers(), first_plan=plan), plan.chosen


def launched(loop, cand, *, spot: bool) -> None:
    """The store as run_attempt leaves it once an attempt on `cand` was launched."""
    store, job_id, o = loop.store, loop.job_id, cand.offer
    store.start_attempt(job_id, attempt=1, backend=o.cloud, offer_key=o.key, instance_type=o.instance_type,
                        accelerator=o.accelerator, accelerator_count=o.accelerator_count, spot=spot,
                        price_per_hour=1.0, price_date=None, cluster_id="c-1")
    store.cluster_launching("c-1", provider=o.cloud, job_id=job_id, region=o.region, instance_type=o.instance_type,
                            spot=spot, num_nodes=1, price_per_hour=1.0, launched_at=0.0)


def status_events(store, job_id):
    return [(e.status, e.detail) for e in store.events(job_id) if e.kind == "status"]


# --- failover ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("error,key", [
    (CapacityError("no capacity"), lambda o: o.key),
    (QuotaError("quota exhausted"), lambda o: f"{o.cloud}/{o.region}"),
    (QuotaError("quota exhausted", region="eu-west-1"), lambda o: f"{o.cloud}/eu-west-1"),
    (QuotaError("GPUS_ALL_REGIONS", global_quota=True), lambda o: o.cloud),
    (CredentialsError("no credentials"), lambda o: o.cloud),
    (QuotaError("G vCPUs", quota=QuotaScope("aws", region="us-east-1", families=("g",), quota="L-DB2E81BA")),
     lambda o: QuotaScope("aws", region="us-east-1", families=("g",), quota="L-DB2E81BA").key()),
], ids=["capacity", "regional-quota", "quota-elsewhere", "global-quota", "credentials", "quota-scope"])
def test_a_provider_error_blocks_what_its_scope_says(store, clock, error, key):
    loop, cand = new_loop(store, clock)

    loop.on_provider_error(cand, error)

    assert loop.blocked == {key(cand.offer)}
    assert loop.tried.by_reason == {error.message: [cand.offer.label + (" spot" if cand.spot else "")]}
    assert loop.tried.only_credentials is isinstance(error, CredentialsError)
    assert loop.ctx.display.messages == [f"{cand.offer.label}: {error.message} — trying the next candidate"]
    assert [e.data for e in store.events(loop.job_id) if e.kind == "provision_failed"] == [
        {"offer": cand.offer.key, "error": error.message}]


def test_the_replan_after_a_failure_leaves_out_what_was_blocked(store, clock):
    loop, cand = new_loop(store, clock)
    loop.on_provider_error(cand, CapacityError("no capacity"))
    loop.plan = None

    nxt = loop._next_candidate()

    assert nxt.offer.key != cand.offer.key
    assert store.get_job(loop.job_id).status is JobStatus.PLANNING


# --- preemption and relaunch -------------------------------------------------------------------------

@pytest.mark.parametrize("spot", [True, False], ids=["spot", "on-demand"])
def test_a_preemption_counts_blocks_the_lost_pool_and_recovers(store, clock, spot):
    loop, cand = new_loop(store, clock)
    launched(loop, cand, spot=spot)

    loop.on_preempted(Outcome(Ending.PREEMPTED, "i-1 preempted"))

    job = store.get_job(loop.job_id)
    assert loop.preemptions == job.preemptions == 1
    pool = f"spot:{cand.offer.key}" if spot else f"{cand.offer.cloud}/{cand.offer.region}"
    assert loop.blocked == {pool}
    assert job.status is JobStatus.RECOVERING and status_events(store, loop.job_id)[-1] == (
        "RECOVERING", "i-1 preempted")
    assert loop.ctx.display.messages == ["preempted (i-1 preempted); recovering from the last checkpoint"]


def test_a_spot_preemption_rules_out_only_the_spot_market_of_that_offer(store, clock):
    loop, cand = new_loop(store, clock)
    launched(loop, cand, spot=True)
    loop.on_preempted(Outcome(Ending.PREEMPTED, "reclaimed"))

    assert blocks.spot_blocked(cand.offer, loop.blocked)
    assert not blocks.excludes(cand.offer, loop.blocked)  # its on-demand market stays


def test_a_relaunch_recovers_without_counting_or_blocking(store, clock):
    loop, cand = new_loop(store, clock)
    launched(loop, cand, spot=True)

    loop.on_relaunch(Outcome(Ending.RELAUNCH, "the previous supervisor died while launching"))

    job = store.get_job(loop.job_id)
    assert job.preemptions == 0 and loop.blocked == set()
    assert status_events(store, loop.job_id)[-1] == ("RECOVERING", "the previous supervisor died while launching")


# --- restarts and the end ----------------------------------------------------------------------------

def test_a_job_that_never_ran_fails_with_ray_s_reason_instead_of_a_pointer_to_its_empty_log(store, clock):
    loop, _ = new_loop(store, clock)
    why = "runtime_env setup failed on node 10.77.0.4: FileNotFoundError: [Errno 2] No such file or directory: 'podman'"
    with pytest.raises(JobFailedError) as ei:
        loop.finish(Outcome(Ending.FAILED, why))
    assert ei.value.message == f"job {loop.job_id} failed on {loop.ctx.view.backend}: {why}"
    assert store.get_job(loop.job_id).status is JobStatus.FAILED


def test_a_failure_restarts_while_restarts_are_left_then_fails_the_job(store, clock):
    loop, _ = new_loop(store, clock, AWS_JOB + "max_restarts_on_errors: 1\n")
    loop.attempt = lambda: Outcome(Ending.FAILED, "the job exited with code 3", exit_code=3)  # the next try

    with pytest.raises(JobFailedError, match=r"failed on .*\(exit code 3\)"):
        loop.run(Outcome(Ending.FAILED, "the job exited with code 3", exit_code=3))

    assert loop.restarts == 1
    assert [e.data for e in store.events(loop.job_id) if e.kind == "restart_on_error"] == [
        {"restart": 1, "detail": "the job exited with code 3"}]
    assert loop.ctx.display.messages == ["the job failed; restart 1 of 1"]
    job = store.get_job(loop.job_id)
    assert job.status is JobStatus.FAILED and job.actual_seconds is not None


@pytest.mark.parametrize("ending,status,code", [(Ending.SUCCEEDED, JobStatus.SUCCEEDED, EXIT_OK),
                                                (Ending.STOPPED, JobStatus.CANCELLED, EXIT_INTERRUPTED)])
def test_finish_records_the_status_its_ending_leads_to(store, clock, ending, status, code):
    loop, _ = new_loop(store, clock)

    res = loop.finish(Outcome(ending, "", result={"accuracy": 0.9}, run_seconds=42.0))

    assert (res.status, res.exit_code, res.result) == (status, code, {"accuracy": 0.9})
    job = store.get_job(loop.job_id)
    assert job.status is status and job.actual_run_seconds == 42.0 and job.metrics == {"accuracy": 0.9}
    assert loop.ctx.view.phase == status.value.lower()


def test_a_job_cancelled_meanwhile_stays_cancelled_with_its_numbers(store, clock):
    loop, _ = new_loop(store, clock)
    store.cancel(loop.job_id, "dlrun cancel", actual_seconds=1.0)

    res = loop.finish(Outcome(Ending.SUCCEEDED, "", result={"accuracy": 0.9}, run_seconds=7.0))

    assert res.status is JobStatus.CANCELLED and res.exit_code == EXIT_INTERRUPTED
    job = store.get_job(loop.job_id)
    assert job.status is JobStatus.CANCELLED and job.actual_run_seconds == 7.0


# --- block keys --------------------------------------------------------------------------------------

def test_block_keys_of_a_lost_pool():
    assert blocks.lost_pool("aws/us-east-1/g4dn.xlarge", spot=True) == "spot:aws/us-east-1/g4dn.xlarge"
    assert blocks.lost_pool("aws/us-east-1/g4dn.xlarge", spot=False) == "aws/us-east-1"
    assert blocks.lost_pool("cluster:lab/lab/gpu-node", spot=False) == "cluster:lab/lab"
    assert blocks.lost_pool("", spot=True) is None
