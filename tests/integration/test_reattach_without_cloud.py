"""A re-attaching supervisor that cannot reach the cloud (its credentials gone from the shell that
started it): the real AwsProvider over real boto3 under moto, with the credentials removed. The job
stays RECOVERING with its live cluster and accrued cost, says why, asks again with backoff, and never
records the cluster as gone or the job FAILED at $0."""
from __future__ import annotations

import time

import boto3
import pytest
from moto import mock_aws

from infra.base import Cluster, Node
from orchestrator.monitoring.costs import accrued_cost
from orchestrator.errors import CloudUnreachableError
from orchestrator.runs.executor import execute
from orchestrator.state.db import Store
from tests.support.fakes_runs import RecordingDisplay, left_running
from tests.support.run_loop import AWS_JOB, new_job, price

UP_FOR = 600.0


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "state.db")
    yield s
    s.close()


def test_a_supervisor_without_credentials_keeps_the_job_and_its_cluster(store, tmp_path, monkeypatch):
    _, plan, job_id = new_job(store, AWS_JOB)
    cand = plan.chosen
    region = cand.offer.region
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with mock_aws():
        ec2 = boto3.client("ec2", region_name=region)
        image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        (inst,) = ec2.run_instances(ImageId=image, InstanceType=cand.offer.instance_type, MinCount=1,
                                    MaxCount=1)["Instances"]
        # what a supervisor killed mid-watch leaves: the cluster up, its Ray job running, the job RUNNING
        cluster = Cluster(cluster_id="c-away-1", provider="aws", region=region, zone=inst["Placement"]["AvailabilityZone"],
                          instance_type=cand.offer.instance_type, spot=False, price_per_hour=price(cand),
                          nodes=[Node(node_id=inst["InstanceId"], private_ip=inst["PrivateIpAddress"], is_head=True)],
                          job_id=job_id, launched_at=time.time() - UP_FOR)
        left_running(store, job_id, cand.offer, cluster, launched_at=cluster.launched_at)
        store.set_status(job_id, "RUNNING")

        # the new supervisor's shell has no AWS credentials at all (no variables, no files)
        monkeypatch.delenv("AWS_ACCESS_KEY_ID")
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
        monkeypatch.setenv("DLRUN_CLOUD_RETRY_S", "16")  # asks at 0, 5, 15 and 16 s
        display = RecordingDisplay()
        with pytest.raises(CloudUnreachableError) as left:
            execute(job_id, store=store, display=display, resume=True)

        row = store.get_job(job_id)
        assert row.status == "RECOVERING", row
        recovering = [e for e in store.events(job_id) if e.status == "RECOVERING"]
        assert len(recovering) == 1 and "cannot reach aws to check cluster c-away-1" in recovering[0].detail
        tries = [e.data for e in store.events(job_id) if e.kind == "cloud_unreachable"]
        assert [t["try"] for t in tries] == [1, 2, 3, 4]
        assert [t["retry_in"] for t in tries[:2]] == [5.0, 10.0] and tries[-1]["retry_in"] is None  # backoff
        assert all("credentials" in t["error"].lower() for t in tries), tries
        assert tries[-1]["accrued"] == pytest.approx((UP_FOR + 16) * price(cand) / 3600, rel=0.05)
        assert any("the job and its cluster are kept" in m for m in display.messages)
        assert "stays RECOVERING with its cluster c-away-1" in left.value.message
        assert "`dlrun status`" in left.value.message
        # the cluster is still the job's, live, and its cost accrues in `dlrun status`
        assert store.get_cluster(cluster.cluster_id).state == "up"
        assert accrued_cost(store, row) == pytest.approx(UP_FOR * price(cand) / 3600, rel=0.1)
        assert row.actual_cost == 0.0 and not events_of(store, job_id, "reattach")

        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        (r,) = boto3.client("ec2", region_name=region).describe_instances(
            InstanceIds=[inst["InstanceId"]])["Reservations"]
        assert r["Instances"][0]["State"]["Name"] == "running"  # nothing was terminated


def events_of(store, job_id, kind):
    return [e for e in store.events(job_id) if e.kind == kind]
