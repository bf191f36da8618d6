"""The preflight of the run loop (fake backend, fake Jobs API): what makes every offer of a cloud fail
is found once, before anything is provisioned there, and the final failure is said once per reason."""
from __future__ import annotations

import pytest

from infra.base import CredentialsError, ProvisionError
from orchestrator.errors import CloudCredentialsError, ProvisioningFailedError
from tests.support.fakes_runs import FakeBackend, JobsFactory, RecordingDisplay
from tests.support.run_loop import AWS_JOB, SUCCESS, assert_nothing_left, events, new_job, run


def test_a_cloud_without_credentials_is_skipped_before_any_launch(store, clock):
    _, plan, job_id = new_job(store, AWS_JOB.replace("[aws]", "[aws, gcp]"))
    chosen_cloud = plan.chosen.offer.cloud
    other = "gcp" if chosen_cloud == "aws" else "aws"
    bad = FakeBackend(chosen_cloud, preflight_error=CredentialsError(f"no {chosen_cloud} login", cloud=chosen_cloud))
    good = FakeBackend(other)
    display = RecordingDisplay()
    res = run(job_id, store, plan, [bad, good], JobsFactory(clock, SUCCESS), clock, display=display)
    assert res.status == "SUCCEEDED" and store.get_job(job_id).backend == other
    assert bad.requests == [] and bad.preflights == 1 and good.preflights == 1  # asked once per cloud
    assert sum(f"{chosen_cloud} skipped" in m for m in display.messages) == 1
    assert [e["cloud"] for e in events(store, job_id, "preflight_failed")] == [chosen_cloud]
    assert_nothing_left(store, job_id, bad, good)


def test_no_credentials_anywhere_is_exit_4_in_one_line_with_nothing_launched(store, clock):
    _, plan, job_id = new_job(store)
    aws = FakeBackend("aws", preflight_error=CredentialsError("AWS credentials missing: run `aws configure`",
                                                              cloud="aws"))
    with pytest.raises(CloudCredentialsError) as ei:
        run(job_id, store, plan, [aws], JobsFactory(clock, SUCCESS), clock)
    assert ei.value.exit_code == 4 and "\n" not in ei.value.message and "aws configure" in ei.value.message
    assert aws.requests == [] and len(ei.value.message) < 600
    assert_nothing_left(store, job_id, aws)


def test_one_reason_for_many_offers_is_said_once(store, clock):
    _, plan, job_id = new_job(store)
    aws = FakeBackend("aws", default=ProvisionError("the AMI is gone", cloud="aws"))
    with pytest.raises(ProvisioningFailedError) as ei:
        run(job_id, store, plan, [aws], JobsFactory(clock, SUCCESS), clock)
    msg = ei.value.message
    assert msg.count("the AMI is gone") == 1 and len(aws.requests) > 1 and len(msg) < 600, msg
