"""The run loop's recovery paths with a fake backend and a fake Jobs API: spot preemption, a dead
supervisor's attempt picked up again, user-code restarts, and the budget (split from test_run_loop)."""
from __future__ import annotations

import pytest

from infra.base import ClusterRequest, NodeState
from orchestrator.errors import JobFailedError
from orchestrator.paths import job_log_path
from orchestrator.planning.spec import parse_job
from orchestrator.runs.executor import BudgetExhaustedError, execute, make_plan
from tests.support.fakes_runs import (FakeBackend, JobsFactory, RecordingDisplay, Up, left_running, metric,
                                      providers, result)
from tests.support.run_loop import (  # noqa: F401
    AWS_JOB, HEAD_SILENT, SPOT_JOB, SUCCESS, assert_nothing_left, events, new_job, price, run, statuses)


# --- (5) preemption and recovery --------------------------------------------------------------------

PREEMPTED_RUN = [("RUNNING", metric(epoch=1, epochs=4, loss=1.0)), "RUNNING"]
RESUMED_RUN = [("RUNNING", metric(event="resumed", epoch=1)), ("RUNNING", metric(epoch=4, epochs=4, loss=0.3)),
               ("SUCCEEDED", result(accuracy=0.9))]


def test_spot_preemption_recovers_on_another_pool(store, clock):
    _, plan, job_id = new_job(store, SPOT_JOB)
    first = plan.chosen
    assert first.spot
    aws = FakeBackend("aws", [Up(preempt_after=2)])
    jobs = JobsFactory(clock, PREEMPTED_RUN, RESUMED_RUN, dt=60)
    display = RecordingDisplay()

    res = run(job_id, store, plan, [aws], jobs, clock, display=display, node_poll_s=120.0)

    assert (res.status, res.exit_code, res.result) == ("SUCCEEDED", 0, {"accuracy": 0.9})
    r1, r2 = aws.requests
    assert (r1.offer.key, r1.spot) == (first.offer.key, True)
    assert (r2.offer.key, r2.spot) != (first.offer.key, True)  # that spot pool is blocked
    # nodes are polled every node_poll_s (= 2 polls): 'preempted' at the 2nd node poll, i.e. poll 5
    assert aws.status_calls[r1.cluster_id] == 2 and jobs.clients[0].polls == 5
    row = store.get_job(job_id)
    assert (row.preemptions, row.attempts, row.status) == (1, 2, "SUCCEEDED")
    assert statuses(store, job_id) == ["PENDING", "PROVISIONING", "SUBMITTED", "RUNNING", "RECOVERING", "PLANNING",
                                       "PROVISIONING", "SUBMITTED", "RUNNING", "SUCCEEDED"]
    recovering = [e for e in store.events(job_id) if e.status == "RECOVERING"][0]
    assert "preempted" in recovering.detail
    assert events(store, job_id, "resumed") == [{"event": "resumed", "epoch": 1}]
    assert any("preempted" in m and "recovering" in m for m in display.messages)
    # the preempted attempt's Ray job was stopped before teardown; both submissions numbered
    assert jobs.clients[0].stopped == [f"dlrun-{job_id}-1"] and jobs.clients[1].stopped == []
    assert jobs.clients[1].submitted[0]["submission_id"] == f"dlrun-{job_id}-2"
    # both clusters paid: node-seconds of each attempt x its own launch price
    p2 = r2.offer.hourly(r2.spot)
    assert row.actual_cost == pytest.approx(5 * 60 * price(first) / 3600 + 3 * 60 * p2 / 3600, abs=2 * p2 / 3600)
    assert len(aws.launched) == 2
    assert_nothing_left(store, job_id, aws)


def test_after_max_preemptions_only_on_demand(store, clock):
    _, plan, job_id = new_job(store, SPOT_JOB, max_preemptions=1)
    assert plan.chosen.spot
    aws = FakeBackend("aws", [Up(preempt_after=1)])
    jobs = JobsFactory(clock, PREEMPTED_RUN, RESUMED_RUN)

    res = run(job_id, store, plan, [aws], jobs, clock)

    assert res.status == "SUCCEEDED"
    assert [r.spot for r in aws.requests] == [True, False]
    assert_nothing_left(store, job_id, aws)


def test_unreachable_head_counts_as_preemption_once_the_cloud_says_its_node_is_gone(store, clock):
    _, plan, job_id = new_job(store)
    aws = FakeBackend("aws")
    down = [ConnectionError("connection refused")] * 20
    jobs = JobsFactory(clock, ["RUNNING", *down], RESUMED_RUN)
    first = []

    def on_status(cluster):  # the cloud reports the first cluster's node gone after the first check
        first.append(cluster.cluster_id)
        return [NodeState(cluster.nodes[0].node_id, "preempted" if len(first) > 1 else "running")]
    aws.status = lambda cluster: on_status(cluster) if cluster.cluster_id == aws.launched[0] else \
        [NodeState(n.node_id, "running") for n in cluster.nodes]

    res = run(job_id, store, plan, [aws], jobs, clock, node_poll_s=10_000)

    assert res.status == "SUCCEEDED"
    # 10 failed polls: the nodes still run (a blip) — 10 more: the cloud says gone (a preemption)
    assert store.get_job(job_id).preemptions == 1 and jobs.clients[0].polls == 21
    assert jobs.clients[0].stopped == [f"dlrun-{job_id}-1"]
    assert_nothing_left(store, job_id, aws)


def left_by_a_dead_supervisor(store, clock, aws, plan, job_id, *, up_for: float = 600, behaviour=None):
    """The store and the cloud as a supervisor killed mid-watch leaves them: a live cluster, its
    submission running, the job RUNNING (the cluster launched `up_for` seconds ago)."""
    cand = plan.chosen
    request = ClusterRequest(cluster_id="c-dead-1", job_id=job_id, offer=cand.offer, spot=cand.spot, num_nodes=1)
    cluster = aws._cluster(request)
    aws.live[cluster.cluster_id] = cluster
    aws.launched.append(cluster.cluster_id)
    aws.behaviour[cluster.cluster_id] = behaviour or Up()
    left_running(store, job_id, cand.offer, cluster, launched_at=clock() - up_for)
    store.set_status(job_id, "RUNNING")
    return cluster


def resume(job_id, store, aws, jobs, clock):
    return execute(job_id, store=store, display=RecordingDisplay(), poll_s=0.001, node_poll_s=120.0, clock=clock,
                   resume=True, get_provider=providers(aws), jobs_client=jobs)


def test_resume_reattaches_to_the_running_attempt(store, clock):
    """--resume watches the same Ray job on the same cluster: no new launch, no new submission."""
    _, plan, job_id = new_job(store)
    aws = FakeBackend("aws")
    left_by_a_dead_supervisor(store, clock, aws, plan, job_id, up_for=600)
    jobs = JobsFactory(clock, ["RUNNING", ("SUCCEEDED", result(accuracy=0.8))])

    res = resume(job_id, store, aws, jobs, clock)

    assert res.status == "SUCCEEDED" and res.result == {"accuracy": 0.8}
    assert aws.requests == [] and jobs.clients[0].submitted == []
    assert events(store, job_id, "reattach")[0]["submission"] == f"dlrun-{job_id}-1"
    assert store.get_job(job_id).actual_cost == pytest.approx((600 + 2 * 60) * price(plan.chosen) / 3600)
    assert_nothing_left(store, job_id, aws)


def test_resume_finds_the_nodes_lost_and_relaunches(store, clock):
    _, plan, job_id = new_job(store)
    aws = FakeBackend("aws")
    left_by_a_dead_supervisor(store, clock, aws, plan, job_id, behaviour=Up(preempt_after=1))
    jobs = JobsFactory(clock, RESUMED_RUN)

    res = resume(job_id, store, aws, jobs, clock)

    assert res.status == "SUCCEEDED"
    assert len(aws.requests) == 1 and aws.terminated[0] == "c-dead-1"
    assert events(store, job_id, "reattach")[0]["found"] == "nodes lost; terminated"
    row = store.get_job(job_id)
    assert (row.preemptions, row.attempts) == (1, 2)
    assert jobs.clients[0].submitted[0]["submission_id"] == f"dlrun-{job_id}-2"
    assert_nothing_left(store, job_id, aws)


def test_a_spot_pool_lost_while_the_supervisor_was_away_is_not_launched_again(store, clock):
    """The re-attached attempt has no candidate of this supervisor's own: its pool is still blocked."""
    _, plan, job_id = new_job(store, SPOT_JOB)
    first = plan.chosen
    assert first.spot
    aws = FakeBackend("aws")
    left_by_a_dead_supervisor(store, clock, aws, plan, job_id, behaviour=Up(preempt_after=1))
    jobs = JobsFactory(clock, RESUMED_RUN)

    res = resume(job_id, store, aws, jobs, clock)

    assert res.status == "SUCCEEDED" and store.get_job(job_id).preemptions == 1
    (relaunch,) = aws.requests
    assert (relaunch.offer.key, relaunch.spot) != (first.offer.key, True)
    assert_nothing_left(store, job_id, aws)


def test_resume_with_an_unreachable_head_relaunches(store, clock):
    """The nodes run but their head cannot be reached again: the cluster goes, the job relaunches
    (not counted as a preemption)."""
    _, plan, job_id = new_job(store)
    aws = FakeBackend("aws", connect_errors=[HEAD_SILENT])
    left_by_a_dead_supervisor(store, clock, aws, plan, job_id)
    jobs = JobsFactory(clock, RESUMED_RUN)

    res = resume(job_id, store, aws, jobs, clock)

    assert res.status == "SUCCEEDED"
    assert aws.terminated[0] == "c-dead-1" and len(aws.requests) == 1
    row = store.get_job(job_id)
    assert (row.preemptions, row.attempts) == (0, 2)
    recovering = [e.detail for e in store.events(job_id) if e.status == "RECOVERING"]
    assert len(recovering) == 1 and HEAD_SILENT.message in recovering[0]
    assert_nothing_left(store, job_id, aws)


# --- (6) user-code failures ---------------------------------------------------------------------------

FAILING = [("RUNNING", "Traceback (most recent call last):\nValueError: boom"), "FAILED"]


@pytest.mark.parametrize("restarts", [0, 1, 2])
def test_user_failure_is_retried_max_restarts_on_errors_times(store, clock, restarts):
    _, plan, job_id = new_job(store, max_restarts_on_errors=restarts)
    aws = FakeBackend("aws")
    jobs = JobsFactory(clock, FAILING)
    display = RecordingDisplay()

    with pytest.raises(JobFailedError) as ei:
        run(job_id, store, plan, [aws], jobs, clock, display=display)

    assert ei.value.exit_code == 1 and job_id in ei.value.message
    assert len(aws.requests) == restarts + 1
    assert {(r.offer.key, r.spot) for r in aws.requests} == {(plan.chosen.offer.key, plan.chosen.spot)}
    assert [e["restart"] for e in events(store, job_id, "restart_on_error")] == list(range(1, restarts + 1))
    assert [m for m in display.messages if "restart" in m] == \
        [f"the job failed; restart {i} of {restarts}" for i in range(1, restarts + 1)]
    row = store.get_job(job_id)
    assert (row.status, row.attempts, row.preemptions) == ("FAILED", restarts + 1, 0)
    assert all(c.stopped == [] for c in jobs.clients)  # a failed Ray job has ended: nothing to stop
    assert "ValueError: boom" in job_log_path(job_id).read_text()
    assert_nothing_left(store, job_id, aws)


def test_user_failure_then_success_after_restart(store, clock):
    _, plan, job_id = new_job(store, max_restarts_on_errors=1)
    aws = FakeBackend("aws")
    res = run(job_id, store, plan, [aws], JobsFactory(clock, FAILING, SUCCESS), clock)
    assert res.status == "SUCCEEDED" and store.get_job(job_id).attempts == 2
    assert_nothing_left(store, job_id, aws)


# --- (7) the budget -------------------------------------------------------------------------------------

def test_budget_reached_stops_the_job_and_tears_down(store, clock):
    _, plan, job_id = new_job(store, AWS_JOB + "budget:\n  max_cost: 0.5\n")
    chosen = plan.chosen
    assert chosen.estimate.cost < 0.5
    p = price(chosen)
    dt = 0.5 / p * 3600 / 8  # 8 polls of the fake clock spend the budget
    aws = FakeBackend("aws")
    jobs = JobsFactory(clock, [("RUNNING", metric(epoch=1, epochs=100))], dt=dt)
    display = RecordingDisplay()

    res = run(job_id, store, plan, [aws], jobs, clock, display=display, node_poll_s=1e9)

    assert (res.status, res.exit_code) == ("BUDGET_EXCEEDED", 1)
    row = store.get_job(job_id)
    assert row.status == "BUDGET_EXCEEDED" and "reached max $0.5" in statuses_detail(store, job_id)
    assert jobs.clients[0].stopped == [f"dlrun-{job_id}-1"]  # the Ray job is stopped before teardown
    per_poll = dt * p / 3600
    assert 0.5 <= row.actual_cost <= 0.5 + 2 * per_poll
    assert len(events(store, job_id, "budget_warning")) == 1
    assert sum("budget warning" in m for m in display.messages) == 1
    assert_nothing_left(store, job_id, aws)


def statuses_detail(store, job_id) -> str:
    return [e.detail for e in store.events(job_id) if e.kind == "status"][-1]


def _recovery_need(store, spec, blocked, fraction) -> float:
    """The cheapest remaining cost over the recovery plan (the budget check's own formula, restated)."""
    spec = spec.model_copy(update={"budget": spec.budget.model_copy(update={"max_cost": None})})
    plan = make_plan(spec, frozenset(blocked), store)
    return min((c.estimate.startup_seconds + (c.estimate.run_seconds + c.estimate.preemption_seconds) * fraction)
               * c.estimate.price_per_hour / 3600 for c in plan.candidates if c.feasible)


def budget_job(store, factor: float, text: str = SPOT_JOB):
    """A job whose max_cost is `factor` x the cheapest estimate (the catalog's prices change)."""
    cheapest = make_plan(parse_job(text, "job.yaml"), store=store).chosen.estimate.cost
    max_cost = round(factor * cheapest, 6)
    spec, plan, job_id = new_job(store, text + f"budget:\n  max_cost: {max_cost}\n")
    assert plan.chosen.estimate.cost < max_cost
    return spec, plan, job_id, max_cost


def test_recovery_refused_when_the_remaining_budget_cannot_pay(store, clock):
    spec, plan, job_id, max_cost = budget_job(store, 2.0)
    first = plan.chosen
    assert first.spot
    per_poll = 0.19 * max_cost  # preempted at poll 5: 95 % spent (no warning before: 76 % at poll 4)
    dt = per_poll / price(first) * 3600
    aws = FakeBackend("aws", [Up(preempt_after=2)])
    jobs = JobsFactory(clock, [("RUNNING", metric(epoch=1, epochs=10))], dt=dt)
    left = max_cost - 5 * per_poll
    assert _recovery_need(store, spec, {f"spot:{first.offer.key}"}, 0.9) > left

    with pytest.raises(BudgetExhaustedError) as ei:
        run(job_id, store, plan, [aws], jobs, clock, node_poll_s=1.5 * dt)  # every 2nd poll

    assert ei.value.exit_code == 3 and "not relaunching" in ei.value.message and "90%" in ei.value.message
    row = store.get_job(job_id)
    assert (row.status, row.preemptions, row.attempts) == ("BUDGET_EXCEEDED", 1, 1)
    assert row.message == ei.value.message
    assert row.actual_cost == pytest.approx(5 * per_poll, rel=1e-3)
    assert events(store, job_id, "budget_warning") == []
    assert len(aws.requests) == 1
    assert jobs.clients[0].stopped == [f"dlrun-{job_id}-1"]
    assert_nothing_left(store, job_id, aws)


def test_recovery_within_the_remaining_budget_relaunches(store, clock):
    spec, plan, job_id, max_cost = budget_job(store, 3.0)
    first = plan.chosen
    per_poll = 0.1 * max_cost  # preempted at poll 5: half the budget spent, the job 90 % done
    dt = per_poll / price(first) * 3600
    aws = FakeBackend("aws", [Up(preempt_after=2)])
    jobs = JobsFactory(clock, [("RUNNING", metric(epoch=9, epochs=10))], RESUMED_RUN, dt=[dt, 60])

    res = run(job_id, store, plan, [aws], jobs, clock, node_poll_s=1.5 * dt)  # every 2nd poll

    assert res.status == "SUCCEEDED" and len(aws.requests) == 2
    assert store.get_job(job_id).preemptions == 1
    assert_nothing_left(store, job_id, aws)


def test_budget_counts_earlier_attempts(store, clock):
    """After a preemption the relaunch fits the remaining budget, and its watcher counts what the
    first attempt cost: it stops when the total (not its own cost) reaches max_cost."""
    spec, plan, job_id, max_cost = budget_job(store, 10.0)
    first = plan.chosen
    dt = 0.1 * max_cost / price(first) * 3600  # 10 % of the budget a poll on the first cluster
    aws = FakeBackend("aws", [Up(preempt_after=2)])
    jobs = JobsFactory(clock, [("RUNNING", metric(epoch=9, epochs=10))], ["RUNNING"], dt=dt)
    display = RecordingDisplay()

    res = run(job_id, store, plan, [aws], jobs, clock, display=display, node_poll_s=1.5 * dt)  # every 2nd poll

    assert res.status == "BUDGET_EXCEEDED"
    r1, r2 = aws.requests
    assert jobs.clients[0].polls == 5  # the first attempt spent half the budget
    second_per_poll = dt * r2.offer.hourly(r2.spot) / 3600
    row = store.get_job(job_id)
    assert max_cost <= row.actual_cost <= max_cost + 2 * second_per_poll
    # the second cluster ran only until the total hit the budget, not for a whole budget of its own
    assert jobs.clients[1].polls * second_per_poll < 0.5 * max_cost + 2 * second_per_poll
    assert len(events(store, job_id, "budget_warning")) == 1
    assert jobs.clients[1].stopped == [f"dlrun-{job_id}-2"]
    assert_nothing_left(store, job_id, aws)
