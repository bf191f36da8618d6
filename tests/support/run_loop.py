"""The run loop driven in tests: a job planned and recorded as `dlrun submit` records it, run by the real
executor against the fakes of tests/support/fakes_runs.py, and what the store then says about it."""
from __future__ import annotations

import ray  # noqa: F401  (run_attempt imports it between two clock readings: imported once, here)

from infra.base import ProvisionError
from orchestrator.planning.spec import parse_job
from orchestrator.runs.executor import execute, make_plan, record_job
from tests.support.fakes_runs import RecordingDisplay, metric, providers, result


AWS_JOB = """
name: fake-train
run: python train.py
reference: {accelerator: T4, hours: 1}
resources:
  clouds: [aws]
"""


def new_job(store, text=AWS_JOB, **extra):
    """Plan and record a job as executor.submit does (without running it)."""
    if extra:
        text += "".join(f"{k}: {v}\n" for k, v in extra.items())
    spec = parse_job(text, "job.yaml")
    plan = make_plan(spec, store=store)
    return spec, plan, record_job(spec, plan, store=store)


def run(job_id, store, plan, backends, jobs, clock, display=None, node_poll_s=120.0, **kw):
    return execute(job_id, store=store, display=display or RecordingDisplay(), first_plan=plan, poll_s=0.001,
                   node_poll_s=node_poll_s, clock=clock, get_provider=providers(*backends), jobs_client=jobs, **kw)


def statuses(store, job_id) -> list[str]:
    return [e.status for e in store.events(job_id) if e.kind == "status"]


def events(store, job_id, kind) -> list[dict]:
    return [e.data for e in store.events(job_id) if e.kind == kind]


def assert_nothing_left(store, job_id, *backends):
    for b in backends:
        b.assert_clean()
    assert store.clusters(live_only=True) == []
    assert all(c.state == "terminated" and c.terminated_at for c in store.job_clusters(job_id))


def price(cand) -> float:
    return cand.offer.hourly(cand.spot)


SPOT_JOB = AWS_JOB.replace("clouds: [aws]", "clouds: [aws]\n  spot: always")


SUCCESS = [("PENDING", "installing packages"),
           ("RUNNING", "epoch 1 starting\n" + metric(epoch=1, epochs=2, loss=0.9, accuracy=0.5)),
           ("RUNNING", metric(epoch=2, epochs=2, loss=0.4, accuracy=0.8)),
           ("SUCCEEDED", result(accuracy=0.93, loss=0.2) + "\nbye")]


HEAD_SILENT = ProvisionError("the Ray head of the cluster did not answer within 900 s", cloud="aws")
