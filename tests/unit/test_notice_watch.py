"""dlrun's side of a preemption notice: a job that stopped on it is a preemption with its checkpoint,
not a failure (no restart-on-error is spent); a failure without a notice stays a failure."""
from __future__ import annotations

from tests.support.fakes_runs import metric
from tests.support.watch import Harness


def test_a_job_that_stopped_on_the_notice_is_a_preemption_with_its_checkpoint():
    h = Harness(["RUNNING",
                 ("RUNNING", metric(epoch=3, epochs=10, loss=0.4)),
                 ("RUNNING", metric(event="preemption_notice", reason="spot instance-action terminate at T")),
                 ("FAILED", metric(event="preempted_notice", epoch=3, step=12, checkpoint="s3://b/p/x.pt"))])
    out = h.run()
    assert out.kind == "PREEMPTED" and out.detail == "preempted with notice, checkpoint at epoch 3 step 12"
    assert h.of_kind("preemption_notice")[0]["reason"].startswith("spot instance-action")
    assert h.of_kind("preempted_notice") == [{"event": "preempted_notice", "epoch": 3, "step": 12,
                                              "checkpoint": "s3://b/p/x.pt"}]
    assert "preempted with notice, checkpoint at epoch 3 step 12" in h.display.messages


def test_a_notice_seen_but_no_checkpoint_line_is_still_a_preemption():
    h = Harness(["RUNNING", ("FAILED", metric(event="preemption_notice", reason="instance/preempted TRUE"))])
    out = h.run()
    assert out.kind == "PREEMPTED" and "instance/preempted TRUE" in out.detail


def test_a_failure_without_a_notice_is_a_failure():
    h = Harness(["RUNNING", ("FAILED", "ValueError: boom")])
    assert h.run().kind == "FAILED"


def test_the_resumed_step_is_shown():
    h = Harness(["RUNNING", ("SUCCEEDED", metric(event="resumed", epoch=3, step=12))])
    h.run()
    assert "resuming w from epoch 3 step 12 (--fresh to start over)" in h.display.messages


# --- through the run loop (executor + attempt, fake backend and Jobs API) ---------------------------

def test_a_spot_run_stopped_by_the_notice_resumes_from_the_same_bucket_in_another_pool(store, clock, monkeypatch):
    from infra.aws.storage import run_bucket_url
    from orchestrator.runs.entrypoint import run_key
    from tests.support.fakes_runs import FakeBackend, JobsFactory, RecordingDisplay, result
    from tests.support.run_loop import SPOT_JOB, assert_nothing_left, events, new_job, run

    monkeypatch.setenv("DLRUN_OWNER", "alice")
    spec, plan, job_id = new_job(store, SPOT_JOB)
    first = plan.chosen
    aws = FakeBackend("aws")
    stopped = [("RUNNING", metric(epoch=1, epochs=4, loss=1.0)),
               ("RUNNING", metric(event="preemption_notice", reason="spot instance-action terminate")),
               ("FAILED", metric(event="preempted_notice", epoch=1, step=7))]
    resumed = [("RUNNING", metric(event="resumed", epoch=1, step=7)), ("SUCCEEDED", result(accuracy=0.9))]
    jobs = JobsFactory(clock, stopped, resumed)
    res = run(job_id, store, plan, [aws], jobs, clock, display=RecordingDisplay())

    assert res.status == "SUCCEEDED" and store.get_job(job_id).preemptions == 1
    assert store.get_job(job_id).status == "SUCCEEDED"
    r1, r2 = aws.requests
    assert r1.spot and (r2.offer.key, r2.spot) != (first.offer.key, True)
    location = f"{run_bucket_url('alice', first.offer.region)}/{spec.name}/{run_key(spec)}"
    assert r1.storage == r2.storage == location  # the second attempt reads the first one's bucket
    for client in jobs.clients:
        sub = client.submitted[0]
        assert sub["runtime_env"]["env_vars"]["DLRUN_CHECKPOINT_DIR"] == location
        assert "AWS_SECRET_ACCESS_KEY" not in sub["runtime_env"]["env_vars"]
    assert jobs.clients[0].submitted[0]["entrypoint"] == "python3 -m jobs.notice --cloud aws -- python3 -m jobs.tee -- sh -c 'python train.py'"
    assert [e["location"] for e in events(store, job_id, "checkpoint")] == [location, location]
    assert events(store, job_id, "preempted_notice")[0]["step"] == 7
    recovering = [e for e in store.events(job_id) if e.status == "RECOVERING"][0]
    assert recovering.detail == "preempted with notice, checkpoint at epoch 1 step 7"
    assert_nothing_left(store, job_id, aws)
