"""EC2's failures scoped as EC2 scopes them, each injected with the error body the real API returns
(tests/support/aws_faults.py answer_error: EC2's XML error document, parsed by botocore as a real one):
vCPU quota refusals block their bucket and market in one region, throttling is retried with backoff and
never read as a credentials problem, an instance that ends while starting for capacity moves the launch to
the next zone. The family -> bucket table is infra/aws/quotas.py."""
from __future__ import annotations

import pytest

from infra.aws import quotas
from infra.base import CapacityError, CredentialsError, ProvisionError, QuotaError, QuotaScope
from tests.support.aws_faults import EC2_ERRORS, answer_error, end_while_starting
from tests.support.aws_moto import (  # noqa: F401
    REGION, assert_nothing_left, aws_env, live_instances, make_provider, make_request, moto, offer, session)


def request_for(cluster_id: str, instance_type: str, *, spot: bool, nodes: int = 1):
    r = make_request(cluster_id, spot=spot, nodes=nodes)
    r.offer = offer(instance_type)
    return r


@pytest.mark.parametrize("instance_type,spot,code,quota,families", [
    ("g4dn.xlarge", False, "VcpuLimitExceeded", "L-DB2E81BA", ("g", "gr", "vt")),
    ("g5.xlarge", True, "MaxSpotInstanceCountExceeded", "L-3819A6DF", ("g", "gr", "vt")),
    ("p3.2xlarge", False, "VcpuLimitExceeded", "L-417A185B", ("p",)),
    ("p4d.24xlarge", True, "MaxSpotInstanceCountExceeded", "L-7212CCBC", ("p",)),
    ("c7i.large", False, "VcpuLimitExceeded", "L-1216C47A", quotas.BUCKETS[0].families),
    ("m7i.large", True, "MaxSpotInstanceCountExceeded", "L-34B43A08", quotas.BUCKETS[0].families),
])
def test_a_vcpu_quota_refusal_blocks_its_bucket_and_market_in_that_region_only(session, instance_type, spot, code,
                                                                               quota, families):
    answer_error(session, "RunInstances", code)
    provider, ec2 = make_provider(session), session.client("ec2")
    with pytest.raises(QuotaError) as err:
        provider.launch(request_for("quota", instance_type, spot=spot, nodes=2))
    e = err.value
    assert e.scope == "quota" and e.region == REGION
    assert e.quota is not None and e.quota == QuotaScope(cloud="aws", region=REGION, families=families,
                                                         market="spot" if spot else "on-demand", quota=quota)
    # the message: one line, which quota (name, code, region), how many vCPUs, the command that asks for it
    vcpus = offer(instance_type).vcpus * 2
    assert "\n" not in e.message and quota in e.message and REGION in e.message and code in e.message
    assert f"--quota-code {quota} --desired-value {vcpus} --region {REGION}" in e.message
    assert quotas.quota_name(instance_type, spot) in e.message
    # what it blocks: the same bucket and market in this region; nothing else
    same = {"g": "g6.xlarge", "p": "p3.8xlarge", "c": "m7i.xlarge", "m": "c7i.xlarge"}[instance_type[0]]
    other = "c7i.large" if instance_type[0] in "gp" else "g4dn.xlarge"
    assert e.quota.matches(offer(same), spot)
    assert not e.quota.matches(offer(same), not spot)
    assert not e.quota.matches(offer(other), spot)
    assert not e.quota.matches(offer(same, region="us-west-2"), spot)
    assert_nothing_left(ec2, "quota")


def test_the_bucket_table_covers_every_aws_offer_in_the_catalog():
    from infra.catalog import load_offers

    for o in load_offers():
        if o.cloud == "aws":
            assert quotas.bucket_of(o.instance_type) is not None, o.instance_type
    assert quotas.quota_code("p5.48xlarge", spot=True) == quotas.P5_SPOT
    assert quotas.quota_code("vt1.3xlarge", spot=False) == "L-DB2E81BA"
    assert quotas.quota_code("inf2.xlarge", spot=True) == "L-B5D1601B"
    assert quotas.scope_for("u-6tb1.metal", "us-east-1", False).families == ("u",)  # not in the table: its own


@pytest.mark.parametrize("code,status", [("RequestLimitExceeded", 503), ("Throttling", 400)])
def test_throttled_run_instances_is_retried_with_backoff(session, code, status):
    log = answer_error(session, "RunInstances", code, status=status, times=2)
    provider = make_provider(session)
    cluster = provider.launch(make_request("throttled"))
    assert [hit for _, hit in log.calls] == [True, True, False]  # botocore retried twice, then it went through
    assert len(live_instances(session.client("ec2"), "throttled")) == 1  # one instance, not three
    provider.terminate(cluster)


@pytest.mark.parametrize("code", ["RequestLimitExceeded", "Throttling"])
def test_throttling_that_outlasts_the_retries_is_never_a_credentials_error(session, code):
    from infra.aws.provider import AwsProvider
    from tests.support.aws_moto import SSH_CIDR

    answer_error(session, "DescribeInstances", code, status=503)
    provider = AwsProvider(region=REGION, session=session, ssh_cidr=SSH_CIDR, poll_interval_s=0.01,
                           regions=[REGION], max_attempts=2)
    with pytest.raises(ProvisionError) as err:
        provider.launch(make_request("throttled"))
    assert not isinstance(err.value, CredentialsError) and err.value.scope == "offer"
    assert code in err.value.message and "throttl" in err.value.message
    with pytest.raises(ProvisionError) as err:
        provider.list_owned()
    assert not isinstance(err.value, CredentialsError)


def test_an_instance_that_ends_at_start_for_capacity_moves_the_launch_to_the_next_zone(session):
    """EC2 accepted RunInstances in us-east-1a, then ended the instance: StateReason
    Server.InsufficientInstanceCapacity. That is a stockout (next zone), not a broken launch."""
    log = end_while_starting(session, REGION, zones={"us-east-1a"})
    provider, ec2 = make_provider(session), session.client("ec2")
    cluster = provider.launch(make_request("late-ice", nodes=2))
    assert cluster.zone == "us-east-1b" and log.injected == 2  # head and worker both ended in us-east-1a
    ended = [i for r in ec2.describe_instances(Filters=[{"Name": "tag:dlrun-cluster", "Values": ["late-ice"]},
                                                       {"Name": "availability-zone", "Values": ["us-east-1a"]}])
             ["Reservations"] for i in r["Instances"]]
    assert {i["State"]["Name"] for i in ended} == {"terminated"} and len(ended) == 2
    provider.terminate(cluster)
    assert_nothing_left(ec2, "late-ice")


@pytest.mark.parametrize("code, message, spot, named", [
    ("Server.InsufficientInstanceCapacity", "", False,  # the message end_while_starting gives it
     ["Server.InsufficientInstanceCapacity: Insufficient capacity", "us-east-1a", "us-east-1f"]),
    ("Server.SpotInstanceTermination", "Server.SpotInstanceTermination: Spot instance termination", True,
     ["Spot instance termination"]),
], ids=["insufficient-capacity", "spot-reclaimed"])
def test_instances_that_end_at_start_in_every_zone_are_a_capacity_error_naming_the_reason(session, code, message,
                                                                                          spot, named):
    end_while_starting(session, REGION, code, message=message)
    provider, ec2 = make_provider(session), session.client("ec2")
    with pytest.raises(CapacityError) as err:
        provider.launch(make_request("no-room", spot=spot))
    assert err.value.scope == "offer" and all(text in err.value.message for text in named)
    assert_nothing_left(ec2, "no-room")


def test_an_instance_that_ends_at_start_for_another_reason_is_a_provision_error(session):
    end_while_starting(session, REGION, "Client.InternalError",
                       message="Client.InternalError: Client error on launch")
    provider, ec2 = make_provider(session), session.client("ec2")
    with pytest.raises(ProvisionError) as err:
        provider.launch(make_request("broken"))
    assert not isinstance(err.value, CapacityError) and "Client error on launch" in err.value.message
    assert_nothing_left(ec2, "broken")


def test_capacity_errors_carry_ec2s_own_message(session):
    answer_error(session, "RunInstances", "InsufficientInstanceCapacity", zones={"us-east-1a"})
    provider = make_provider(session)
    cluster = provider.launch(make_request("ice"))
    assert cluster.zone == "us-east-1b"
    assert "sufficient" in EC2_ERRORS["InsufficientInstanceCapacity"]
    provider.terminate(cluster)
