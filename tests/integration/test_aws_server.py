"""infra/aws.py over real HTTP: moto's ThreadedMotoServer on 127.0.0.1, reached through endpoint_url."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import boto3
import pytest

from infra.aws.provider import AwsProvider
from infra.base import CapacityError
from orchestrator import PROJECT_ROOT
from tests.support.aws_faults import fail_run_instances, throttle_operation
from tests.support.aws_images import seed_image_parameters
from tests.support.aws_moto import (  # noqa: F401  (fixtures)
    REGION, SSH_CIDR, assert_nothing_left, aws_env, check_launched_cluster, live_instances, make_request, moto_server,
    tags)


AWS_CLI = Path(sys.executable).with_name("aws")


@pytest.fixture
def endpoint(moto_server, aws_env):
    urllib.request.urlopen(urllib.request.Request(f"{moto_server}/moto-api/reset", method="POST"), timeout=10)
    seed_image_parameters()
    return moto_server


def provider_for(endpoint, session=None, **kw) -> AwsProvider:
    return AwsProvider(region=REGION, endpoint_url=endpoint, session=session or boto3.Session(),
                       ssh_cidr=SSH_CIDR, poll_interval_s=0.01, regions=[REGION], **kw)


def aws_cli_instances(endpoint, cluster_id) -> list[dict]:
    out = subprocess.run(
        [str(AWS_CLI), "ec2", "describe-instances", "--endpoint-url", endpoint, "--region", REGION,
         "--output", "json", "--filters", f"Name=tag:dlrun-cluster,Values={cluster_id}",
         "Name=instance-state-name,Values=pending,running"],
        capture_output=True, text=True, timeout=60, check=True).stdout
    return [i for r in json.loads(out)["Reservations"] for i in r["Instances"]]


@pytest.mark.parametrize("spot,nodes", [(True, 3), (False, 1)])
def test_launch_and_teardown_over_http_visible_to_the_aws_cli(endpoint, spot, nodes):
    provider = provider_for(endpoint)
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=endpoint)
    request = make_request(f"http-{nodes}", spot=spot, nodes=nodes)
    cluster = provider.launch(request)
    check_launched_cluster(ec2, cluster, request)

    seen = aws_cli_instances(endpoint, request.cluster_id)
    assert sorted(i["InstanceId"] for i in seen) == sorted(n.node_id for n in cluster.nodes)
    assert all(tags(i)["dlrun-job"] == request.job_id for i in seen)

    provider.terminate(cluster)
    assert aws_cli_instances(endpoint, request.cluster_id) == []
    assert_nothing_left(ec2, request.cluster_id)


def test_zone_failover_and_throttling_over_http(endpoint):
    session = boto3.Session()
    fail_run_instances(session, "InsufficientInstanceCapacity", zones={"us-east-1a", "us-east-1b"})
    throttle = throttle_operation(session, "DescribeInstances", times=1)
    provider = provider_for(endpoint, session)
    cluster = provider.launch(make_request("failover", spot=True, nodes=2))
    assert cluster.zone == "us-east-1c" and throttle.injected == 1
    provider.terminate(cluster)
    assert_nothing_left(boto3.client("ec2", region_name=REGION, endpoint_url=endpoint), "failover")


def test_capacity_everywhere_over_http(endpoint):
    session = boto3.Session()
    fail_run_instances(session, "InsufficientInstanceCapacity")
    with pytest.raises(CapacityError):
        provider_for(endpoint, session).launch(make_request("nowhere"))
    assert_nothing_left(boto3.client("ec2", region_name=REGION, endpoint_url=endpoint), "nowhere")


def test_process_killed_after_run_instances_leaves_an_orphan_that_down_orphans_removes(endpoint):
    # a real crash: a separate dlrun process exits abruptly (no cleanup at all) right after
    # EC2 accepted RunInstances
    script = textwrap.dedent(f"""
        import os, boto3
        from infra.aws.provider import AwsProvider
        from tests.support.aws_moto import make_request
        session = boto3.Session()
        session.events.register("after-call.ec2.RunInstances", lambda **kw: os._exit(137))
        AwsProvider(region={REGION!r}, endpoint_url={endpoint!r}, session=session,
                    ssh_cidr={SSH_CIDR!r}).launch(make_request("killed", spot=True, nodes=3))
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=PROJECT_ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)})
    assert proc.returncode == 137
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=endpoint)
    assert len(live_instances(ec2, "killed")) == 1

    provider = provider_for(endpoint)
    (orphan,) = provider.list_owned()
    assert (orphan.cluster_id, orphan.job_id) == ("killed", "job-killed")
    provider.terminate(orphan)
    assert_nothing_left(ec2, "killed")
    assert provider.list_owned() == []
